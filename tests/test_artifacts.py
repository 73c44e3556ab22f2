"""Atomic artefact writes: all or nothing, strict JSON, ordinary permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ptycho.artifacts import atomic_write, read_json, write_json


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})

    def fails(tmp):
        with open(tmp, "w") as fh:
            fh.write('{"half": ')
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, fails)
    assert read_json(target) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_json(tmp_path / "r.json", {"x": float("nan")})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert json.loads((tmp_path / "r.json").read_text()) == {"x": None}  # strict JSON: NaN -> null
