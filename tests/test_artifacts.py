"""Atomic artefact writes: all or nothing, strict JSON, ordinary permissions."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from ptycho import artifacts
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


def test_damage_names_a_zip_hdf5_or_json_output_cut_short_and_nothing_else(tmp_path):
    import h5py

    arrays = tmp_path / "a.npz"
    artifacts.write_arrays(arrays, x=np.arange(1000.0))
    h5 = tmp_path / "d.h5"
    with h5py.File(h5, "w") as fh:
        fh["x"] = np.arange(100000.0)
    record = tmp_path / "r.json"
    artifacts.write_json(record, {"a": 1})
    other = tmp_path / "figure.png"
    other.write_bytes(b"\x89PNG")
    for path in (arrays, h5, record, other, tmp_path / "missing.npz"):
        assert artifacts.damage(path) is None, path
    for path in (arrays, h5, record):
        whole = path.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    assert artifacts.damage(arrays) == "not a whole zip archive (cut short?)"
    assert artifacts.damage(h5).startswith("not a readable HDF5 file")
    assert artifacts.damage(record) == "not valid JSON (cut short?)"
    assert artifacts.damage(other) is None  # a kind it does not know: its reader's to check


def test_damage_leaves_alone_what_is_only_busy_unreadable_or_too_deep(tmp_path):
    """An HDF5 file another process holds open for writing (a notebook), a file this
    process may not read, a JSON too deep for Python's parser: none is damaged."""
    import subprocess
    import sys
    import textwrap

    import h5py

    h5 = tmp_path / "held.h5"
    with h5py.File(h5, "w") as fh:
        fh["x"] = np.arange(10.0)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, h5py
            f = h5py.File({str(h5)!r}, "a")
            print("open", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "open"
        assert artifacts.damage(h5) is None
    finally:
        holder.stdin.close()
        holder.wait(30)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert artifacts.damage(deep) is None
    cut = tmp_path / "cut.npz"
    cut.write_bytes(b"PK\x03\x04 not whole")
    assert artifacts.damage(cut) == "not a whole zip archive (cut short?)"
    if os.geteuid() != 0:  # root reads anything
        cut.chmod(0)
        assert artifacts.damage(cut) is None
    assert artifacts.aside(cut, ".damaged") == f"{cut}.damaged"
    (tmp_path / "cut.npz.damaged").write_text("an earlier one")
    assert artifacts.aside(cut, ".damaged") == f"{cut}.damaged-2"  # never overwritten
