"""The catalogue of bad inputs: every row is one input a user can get wrong, and its test.

``CATALOGUE`` below IS the table of ``docs/bad-inputs.md``: each row names the input, how
it is given (through the workflow's parse-time checks, the ``ptycho`` CLI, or the real
``snakemake``), the fragment the one stderr line must contain and the exit code. Every
row must give exactly one stderr line (no traceback), that exit code, and no output:
the row's folder holds after the run exactly what it held before (no half-written file,
no temporary file, no empty folder), and a row may name functions that must not even
be called (the expensive work that must come after the checks).

The doc cannot drift from this list: ``test_the_doc_lists_every_row`` compares them, and
``python tests/test_bad_inputs.py`` rewrites the doc's table from the messages the rows
really produce.

Dataset rows reuse the corruptions of ``conftest.CORRUPTIONS`` (already checked through
``ptycho inspect``) on commands that write outputs. Config rows run
``ptycho.study.preflight.parse_time_checks``, the very function ``rules/common.smk`` runs while
Snakemake parses the workflow, in-process (milliseconds); rows marked ``snakemake`` run
the real thing (seconds) where only that shows the behaviour.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlflow_server  # noqa: E402
from conftest import CORRUPTIONS, SMALL  # noqa: E402

DOC = ROOT / "docs" / "bad-inputs.md"
WORKFLOW_FILES = ("Snakefile", "config.yaml", "rules", "envs", "ptycho")


@dataclass(frozen=True)
class Row:
    id: str
    area: str  #: config | dataset | cli | environment
    what: str  #: the input, in words (the doc's first column)
    via: str  #: "workflow" (parse-time checks, in-process) | "cli" (ptycho main, in-process) | "snakemake"
    args: tuple = ()  #: CLI argv or snakemake --config items ({d} = the row's folder)
    overrides: dict = field(default_factory=dict)  #: --config overrides (via "workflow")
    message: str = ""  #: fragment of the one stderr line
    exit_code: int = 2
    setup: Callable[[Path, Path], None] | None = None  #: (row folder, clean inputs folder)
    env: dict = field(default_factory=dict)  #: environment ({port:NAME} = a fake server's port)
    forbid: tuple[str, ...] = ()  #: functions that must not be called
    mount: str = ""  #: "ro": a read-only folder ``ro``; "full": a full filesystem ``full`` (root only)
    absent: tuple[str, ...] = ()  #: paths outside the row folder that must not appear


# ------------------------------------------------------------------------ set-ups
def _copy(*names: str) -> Callable[[Path, Path], None]:
    def setup(d: Path, clean: Path) -> None:
        for name in names:
            shutil.copyfile(clean / name, d / name)

    return setup


def _report_of(d: Path, results: str) -> None:
    """A published report of results folder ``results`` (default preset) in ``d``."""
    folder = d / "reports" / results.replace("/", "-") / "default"
    folder.mkdir(parents=True)
    (folder / "validation.json").write_text(json.dumps({"config": {"results": results, "preset": "default"}}))


def _corrupted(kind: str) -> Callable[[Path, Path], None]:
    """A file broken as ``conftest.CORRUPTIONS[kind]`` breaks it, saved as ``<kind>.h5``."""

    def setup(d: Path, clean: Path) -> None:
        source, corrupt, _ = CORRUPTIONS[kind]
        path = d / f"{kind}.h5"
        shutil.copyfile(clean / f"{source}.h5", path)
        corrupt(path)

    return setup


def _npz(**changes) -> Callable[[Path, Path], None]:
    """``d.npz``: the clean train split as PtychoPINN NPZ, with arrays replaced or removed."""

    def setup(d: Path, clean: Path) -> None:
        with np.load(clean / "train.npz") as z:
            data = {k: z[k] for k in z.files}
        for key, value in changes.items():
            if value is None:
                data.pop(key)
            else:
                data[key] = value
        np.savez(d / "d.npz", **data)

    return setup


def _truncated_npz(d: Path, clean: Path) -> None:
    raw = (clean / "train.npz").read_bytes()
    (d / "d.npz").write_bytes(raw[: len(raw) // 2])


def _tike(case: str) -> Callable[[Path, Path], None]:
    """``s.npz.bz2``: a small tike scan (a 6 x 6 grid of 16-px patterns, as tike writes one:
    counts, probe under its mode axes, corners [row, column]) broken by ``case``."""

    def setup(d: Path, clean: Path) -> None:
        import bz2
        import io

        rows, cols = np.meshgrid(np.arange(6) * 4.0, np.arange(6) * 4.0, indexing="ij")
        arrays = {
            "data": np.ones((1, 36, 16, 16), np.float32),
            "probe": np.ones((1, 1, 1, 1, 16, 16), np.complex64),
            "scan": np.stack([rows.ravel(), cols.ravel()], axis=1)[None].astype(np.float32),
        }
        extra = {}
        if case == "nan":
            arrays["data"][0, 5, 2, 2] = np.nan
        elif case == "probe-size":
            arrays["probe"] = arrays["probe"][..., :12, :12]
        elif case == "far-position":
            arrays["scan"][0, 7] = [4000.0, 4000.0]  # a glitched position, 4000 px from the others
        elif case == "pickled":
            extra["notes"] = np.array([{"by": "hand"}], dtype=object)
        buf = io.BytesIO()
        np.savez(buf, **arrays, **extra)
        packed = bz2.compress(buf.getvalue())
        (d / "s.npz.bz2").write_bytes(packed[: len(packed) // 2] if case == "truncated" else packed)

    return setup


def _files(**contents: str) -> Callable[[Path, Path], None]:
    def setup(d: Path, clean: Path) -> None:
        for name, text in contents.items():
            if text.endswith("/"):
                (d / name).mkdir()
            else:
                (d / name).write_text(text)

    return setup


def _folder(name: str) -> Callable[[Path, Path], None]:
    def setup(d: Path, clean: Path) -> None:
        (d / name).mkdir()

    return setup


# ---- #34 item 3: the study on the user's own files (config data)
def _measured_cxi(name: str = "m.cxi") -> Callable[[Path, Path], None]:
    """``name``: the clean train split as an experiment records it, a CXI file without
    the object (image_2) and without ptycho's own extras (ptycho_1)."""

    def setup(d: Path, clean: Path) -> None:
        import h5py

        from ptycho.data.cxi import export_cxi
        from ptycho.data.dataset import read_dataset

        export_cxi(read_dataset(clean / "train.h5"), d / name)
        with h5py.File(d / name, "a") as f:
            del f["entry_1/ptycho_1"]
            del f["entry_1/image_2"]

    return setup


def _other_hdf5(d: Path, clean: Path) -> None:
    """``scan.h5``: an HDF5 file of another kind (neither CXI nor a ptycho dataset)."""
    import h5py

    with h5py.File(d / "scan.h5", "w") as f:
        f["entry/data"] = np.zeros((4, 16, 16), np.float32)


def _two_sizes(d: Path, clean: Path) -> None:
    """``train.h5`` (16 x 16 patterns) and ``big.h5``, a test split of 32 x 32 patterns."""
    from dataclasses import replace

    from ptycho.data.dataset import write_dataset
    from ptycho.data.simulate import simulate

    shutil.copyfile(clean / "train.h5", d / "train.h5")
    write_dataset(d / "big.h5", simulate(replace(SMALL, n=32), progress=False)["test"])


# ---- #34: files that read outside themselves or declare more than they hold
CXI_DATA = "entry_1/instrument_1/detector_1/data"


def _cxi(change: Callable) -> Callable[[Path, Path], None]:
    """``d.cxi``: the clean train split exported as CXI, then ``change(h5 file, row folder)``."""

    def setup(d: Path, clean: Path) -> None:
        import h5py

        from ptycho.data.cxi import export_cxi
        from ptycho.data.dataset import read_dataset

        export_cxi(read_dataset(clean / "train.h5"), d / "d.cxi")
        with h5py.File(d / "d.cxi", "a") as f:
            change(f, d)

    return setup


def _external_storage(f, d: Path) -> None:
    """The detector data as HDF5 external storage: its bytes are those of /etc/passwd."""
    shape, dtype = f[CXI_DATA].shape, f[CXI_DATA].dtype
    del f[CXI_DATA]
    f.create_dataset(CXI_DATA, shape=shape, dtype=dtype, external=[("/etc/passwd", 0, 102400)])


def _source_file(d: Path, shape: tuple, dtype) -> None:
    import h5py

    with h5py.File(d / "src.h5", "w") as g:
        g.create_dataset("data", data=np.ones(shape, dtype))


def _virtual_dataset(f, d: Path) -> None:
    """The detector data as a virtual dataset mapping another file's."""
    import h5py

    shape, dtype = f[CXI_DATA].shape, f[CXI_DATA].dtype
    _source_file(d, shape, dtype)
    del f[CXI_DATA]
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    layout[...] = h5py.VirtualSource("src.h5", "data", shape=shape)
    f.create_virtual_dataset(CXI_DATA, layout)


def _external_link(f, d: Path) -> None:
    import h5py

    _source_file(d, f[CXI_DATA].shape, f[CXI_DATA].dtype)
    del f[CXI_DATA]
    f[CXI_DATA] = h5py.ExternalLink("src.h5", "/data")


def _bomb(f, name: str) -> None:
    """``name`` replaced by a gzip dataset declaring 4,194,304 patterns of 1024 x 1024
    uint32 (16 TiB) with one chunk written: a few KB on disk."""
    del f[name]
    d = f.create_dataset(name, shape=(4194304, 1024, 1024), dtype="uint32", chunks=(1, 1024, 1024), compression="gzip")
    d[0] = 1


def _dataset_bomb(d: Path, clean: Path) -> None:
    import h5py

    shutil.copyfile(clean / "train.h5", d / "bomb.h5")
    with h5py.File(d / "bomb.h5", "a") as f:
        _bomb(f, "diffraction")


def _undecodable(f, name: str, shape: tuple[int, ...]) -> None:
    """``name`` replaced by a gzip dataset declaring ``shape`` uint32 (under the read budget)
    whose first chunk holds bytes gzip cannot decode: reading it fails, so a refusal that
    names the shapes was made from what the file declares, before any data was read."""
    del f[name]
    dset = f.create_dataset(name, shape=shape, dtype="uint32", chunks=(1, *shape[1:]), compression="gzip")
    dset.id.write_direct_chunk((0,) * len(shape), b"not gzip" * 64)


def _dataset_misfit_bomb(d: Path, clean: Path) -> None:
    import h5py

    shutil.copyfile(clean / "train.h5", d / "misfit.h5")
    with h5py.File(d / "misfit.h5", "a") as f:
        _undecodable(f, "diffraction", (256, 1024, 1024))


def _huge_object_shape(f, d: Path) -> None:
    """Measured data (no image_2) whose blank object is to be 1,048,576 px on a side (8 TiB)."""
    del f["entry_1/image_2"]
    f["entry_1/ptycho_1/object_shape"] = np.array([1, 1048576, 1048576], np.int64)


def _soft_link_loop(f, d: Path) -> None:
    import h5py

    del f[CXI_DATA]
    f["entry_1/loop_a"] = h5py.SoftLink("/entry_1/loop_b")
    f["entry_1/loop_b"] = h5py.SoftLink("/entry_1/loop_a")
    f[CXI_DATA] = h5py.SoftLink("/entry_1/loop_a")


def _deep_json(f, d: Path) -> None:
    del f["entry_1/ptycho_1/attrs"]
    f["entry_1/ptycho_1/attrs"] = "[" * 200_000 + "]" * 200_000


def _npz_header_bomb(d: Path, clean: Path) -> None:
    """``d.npz`` whose ``diff3d`` header declares 2**46 float32 (256 TiB), written by hand."""
    import zipfile

    from numpy.lib import format as npformat

    header = io.BytesIO()
    npformat.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**38, 16, 16)})
    with np.load(clean / "train.npz") as z, zipfile.ZipFile(d / "d.npz", "w") as out:
        out.writestr("diff3d.npy", header.getvalue() + bytes(64))
        for key in z.files:
            if key != "diff3d":
                member = io.BytesIO()
                np.save(member, z[key])
                out.writestr(f"{key}.npy", member.getvalue())


def _model_with_kernel(filters: int) -> Callable[[Path, Path], None]:
    """``m/``: a model.json for the test split and a hand-made ``model.keras`` whose
    Conv2D asks for a (3, 3, 4, filters) kernel (its weights declared, not written), and
    ``test.h5``."""

    def setup(d: Path, clean: Path) -> None:
        import zipfile

        import h5py

        shutil.copyfile(clean / "test.h5", d / "test.h5")
        (d / "m").mkdir()
        meta = {
            "model": {"kind": "pinn"},
            "n": 16,
            "gridsize": 2,
            "train": {"xla": "off", "batch_size": 8},
            "physics": {"intensity_norm": 1.0},
        }
        (d / "m" / "model.json").write_text(json.dumps(meta))
        tensor = {"class_name": "__keras_tensor__", "config": {"shape": [None, 16, 16, 4], "dtype": "float32"}}
        tensor["config"]["keras_history"] = ["diffraction", 0, 0]
        layers = [
            {
                "module": "keras.layers",
                "class_name": "InputLayer",
                "name": "diffraction",
                "config": {"name": "diffraction", "batch_shape": [None, 16, 16, 4], "dtype": "float32"},
                "inbound_nodes": [],
            },
            {
                "module": "keras.layers",
                "class_name": "Conv2D",
                "name": "conv2d",
                "config": {"name": "conv2d", "filters": filters, "kernel_size": [3, 3], "padding": "same"},
                "build_config": {"input_shape": [None, 16, 16, 4]},
                "inbound_nodes": [{"args": [tensor], "kwargs": {}}],
            },
        ]
        config = {
            "module": "keras",
            "class_name": "Functional",
            "config": {
                "name": "encoder_decoder",
                "layers": layers,
                "input_layers": [["diffraction", 0, 0]],
                "output_layers": [["conv2d", 0, 0]],
            },
        }
        weights = io.BytesIO()
        with h5py.File(weights, "w") as f:
            for i, shape in enumerate([(3, 3, 4, filters), (filters,)]):
                f.create_dataset(
                    f"layers/conv2d/vars/{i}", shape=shape, dtype="float32", chunks=True, compression="gzip"
                )
        with zipfile.ZipFile(d / "m" / "model.keras", "w") as z:
            z.writestr("metadata.json", json.dumps({"keras_version": "3"}))
            z.writestr("config.json", json.dumps(config))
            z.writestr("model.weights.h5", weights.getvalue())

    return setup


def _stitched_as_reconstruction(d: Path, clean: Path) -> None:
    """``s.npz``: stitched objects of ``test.h5`` (stitch's output, stamped so)."""
    from ptycho.artifacts import write_arrays
    from ptycho.data.dataset import read_attributes
    from ptycho.data.provenance import DIGEST_KEY

    shutil.copyfile(clean / "test.h5", d / "test.h5")
    digest = read_attributes(d / "test.h5")["digest"]
    write_arrays(
        d / "s.npz", producer="stitch", images=np.zeros((1, 8, 8), np.complex64), **{DIGEST_KEY: np.array(digest)}
    )


IMPORT_WORK = ("ptycho.data.dataset.write_dataset",)

CONFIG_JSON = _files(**{"c.json": '{"train": {"epochs": 1}}'})
SIM = ("--n", "16", "--object-size", "48", "--n-lines", "50", "--nphotons", "1e6", "--quiet")
SIMULATE_WORK = ("ptycho.data.simulate.simulate",)

# --------------------------------------------------------------------- the catalogue
CATALOGUE: list[Row] = [
    # ---- configuration: the workflow's parse-time checks (snakemake --config ..., config.yaml)
    Row(
        "config-unknown-key",
        "config",
        "`--config train={epoch: 3}` (a typo)",
        "workflow",
        overrides={"train": {"epoch": 3}},
        message="config key 'train': Additional properties are not allowed ('epoch'",
    ),
    Row(
        "config-wrong-type",
        "config",
        "`--config train={epochs: ten}`",
        "workflow",
        overrides={"train": {"epochs": "ten"}},
        message="config key 'train.epochs': 'ten' is not of type 'integer'",
    ),
    Row(
        "config-out-of-range",
        "config",
        "`--config train={learning_rate: 5}`",
        "workflow",
        overrides={"train": {"learning_rate": 5}},
        message="config key 'train.learning_rate': 5 is greater than the maximum",
    ),
    Row(
        "config-no-validation",
        "config",
        "`--config train={validation_fraction: 0}` (no held-out loss)",
        "workflow",
        overrides={"train": {"validation_fraction": 0}},
        message="config key 'train.validation_fraction': 0 is less than or equal to the minimum of 0; give a value "
        "more than 0 and at most 0.5",
    ),
    Row(
        "config-seed-too-large",
        "config",
        "`--config 'seeds=[4294967296]'` (2**32: Keras takes at most 2**32 - 1)",
        "workflow",
        overrides={"seeds": [4294967296]},
        message="config key 'seeds.0': 4294967296 is greater than the maximum of 4294967295",
    ),
    Row(
        "config-xla-without-off",
        "config",
        "`xla: [physics]` (no off to compare the mode with)",
        "workflow",
        overrides={"xla": ["physics"]},
        message="config key 'xla' = ['physics'] has no off, the reference every XLA mode is compared with",
    ),
    Row(
        "config-off-alone",
        "config",
        "`xla: [off]` (no XLA mode: nothing to compare)",
        "workflow",
        overrides={"xla": ["off"]},
        message="config key 'xla' = ['off'] trains no XLA mode, so there is no pair to compare",
    ),
    Row(
        "config-no-pinn",
        "config",
        "`models: [baseline]` (the study's subject left out)",
        "workflow",
        overrides={"models": ["baseline"]},
        message="config key 'models' = ['baseline'] has no pinn",
    ),
    Row(
        "config-beyond-memory",
        "config",
        "`simulation={n_objects_train: 1000, object_size: 2048, stride_train: 1}` (a simulation far beyond memory)",
        "workflow",
        overrides={"simulation": {"n_objects_train": 1000, "object_size": 2048, "stride_train": 1}},
        message="the simulate job would need about",
    ),
    Row(
        "config-report-folder-taken",
        "config",
        "`results: rcF-1` where `results: rcF/1` already reports to `reports/rcF-1/`",
        "workflow",
        overrides={"results": "rcF-1"},
        setup=lambda d, clean: _report_of(d, "rcF/1"),
        message="reports to reports/rcF-1/default, which holds the report of results folder 'rcF/1'",
    ),
    Row(
        "config-empty-models",
        "config",
        "`models: []` (an empty matrix)",
        "workflow",
        overrides={"models": []},
        message="config key 'models': [] is empty",
    ),
    Row(
        "config-empty-seeds",
        "config",
        "`seeds: []`",
        "workflow",
        overrides={"seeds": []},
        message="config key 'seeds': [] is empty",
    ),
    Row(
        "config-unknown-model",
        "config",
        "`models: [pinn, unet]`",
        "workflow",
        overrides={"models": ["pinn", "unet"]},
        message="config key 'models.1': 'unet' is not allowed; choose one of",
    ),
    Row(
        "config-unknown-xla-mode",
        "config",
        "`xla: [maybe]` (an XLA mode that does not exist)",
        "workflow",
        overrides={"xla": ["maybe"]},
        message="config key 'xla.0': 'maybe'",
    ),
    Row(
        "config-unknown-preset",
        "config",
        "`--config preset=huge`",
        "workflow",
        overrides={"preset": "huge"},
        message="config key 'preset': 'huge' has no block under 'presets'; add one to config.yaml or choose one of default, smoke",
    ),
    Row(
        "config-impossible-combination",
        "config",
        "`simulation: {object_size: 60}` (smaller than a patch)",
        "workflow",
        overrides={"simulation": {"object_size": 60}},
        message="config key 'object_size' = 60 is too small",
    ),
    Row(
        "config-results-outside",
        "config",
        "`results: ../../etc`",
        "workflow",
        overrides={"results": "../../etc"},
        message="config key 'results' = '../../etc' is outside the work folder",
    ),
    Row(
        "config-results-absolute",
        "config",
        "`results: /etc/ptycho` (absolute, elsewhere)",
        "workflow",
        overrides={"results": "/etc/ptycho"},
        message="is outside the work folder",
        absent=("/etc/ptycho",),
    ),
    Row(
        "config-results-shell",
        "config",
        "`results: out;touch pwned` (shell syntax)",
        "workflow",
        overrides={"results": "out;touch pwned"},
        message="config key 'results': 'out;touch pwned' has characters",
    ),
    Row(
        "config-results-command-substitution",
        "config",
        "`--config 'results=$(touch pwned)'`, real snakemake",
        "snakemake",
        args=("results=$(touch /tmp/ptycho-pwned-{tag})",),
        message="has characters that are not allowed",
        absent=("/tmp/ptycho-pwned-{tag}",),
    ),
    Row(
        "config-results-backtick",
        "config",
        "``results: out`touch pwned` `` (backticks)",
        "workflow",
        overrides={"results": "out`touch pwned`"},
        message="has characters that are not allowed",
    ),
    Row(
        "config-results-unwritable",
        "config",
        "`--config results=/proc/forbidden allow_results_outside=true`, real snakemake",
        "snakemake",
        args=("results=/proc/forbidden", "allow_results_outside=true"),
        message="results folder /proc/forbidden cannot be written (No such file or directory in /proc)",
    ),
    Row(
        "config-results-readonly",
        "config",
        "`results: ro` where `ro` is a read-only folder",
        "workflow",
        overrides={"results": "ro"},
        setup=_folder("ro"),
        mount="ro",
        message="results folder <work>/ro cannot be written",
    ),
    Row(
        "config-results-is-a-file",
        "config",
        "`results: notes.txt` (an existing file)",
        "workflow",
        overrides={"results": "notes.txt"},
        setup=_files(**{"notes.txt": "x\n"}),
        message="cannot be created (<work>/notes.txt is a file)",
    ),
    Row(
        "config-file-unreadable",
        "config",
        "`ptycho simulate --config conf.d` (a folder, not a file)",
        "cli",
        args=("simulate", "--train", "t.h5", "--test", "u.h5", "--config", "conf.d"),
        setup=_files(**{"conf.d": "/"}),
        message="cannot read config file conf.d: Is a directory",
        forbid=SIMULATE_WORK,
    ),
    Row(
        "config-file-not-a-mapping",
        "config",
        "`ptycho simulate --config list.yaml` holding a YAML list",
        "cli",
        args=("simulate", "--train", "t.h5", "--test", "u.h5", "--config", "list.yaml"),
        setup=_files(**{"list.yaml": "- n: 16\n"}),
        message="must hold a mapping at the top level",
        forbid=SIMULATE_WORK,
    ),
    # ---- the study on the user's own files (config data: a CXI file or a ptycho dataset per split)
    Row(
        "config-data-one-split",
        "config",
        "`data={train: m.cxi}` (no test split)",
        "workflow",
        overrides={"data": {"train": "m.cxi"}},
        setup=_measured_cxi(),
        message="config key 'data' gives train but not test; give both splits",
    ),
    Row(
        "config-data-missing-file",
        "config",
        "`data={train: scan.cxi, test: scan.cxi}` (no such file)",
        "workflow",
        overrides={"data": {"train": "scan.cxi", "test": "scan.cxi"}},
        message="config key 'data.train': <work>/scan.cxi: no such file; give a CXI 1.6 file (measured data), a tike "
        "scan (.npz, .npz.bz2) or a dataset written by ptycho (.h5)",
    ),
    Row(
        "config-data-not-hdf5",
        "config",
        "`data={train: scan.cxi, test: scan.cxi}` where `scan.cxi` is text",
        "workflow",
        overrides={"data": {"train": "scan.cxi", "test": "scan.cxi"}},
        setup=_files(**{"scan.cxi": "x y intensity\n"}),
        message="scan.cxi: not an HDF5 file, so neither CXI nor a ptycho dataset",
    ),
    Row(
        "config-data-other-hdf5",
        "config",
        "`data={train: scan.h5, test: scan.h5}`, an HDF5 file of another kind",
        "workflow",
        overrides={"data": {"train": "scan.h5", "test": "scan.h5"}},
        setup=_other_hdf5,
        message="scan.h5: an HDF5 file that is neither CXI (no cxi_version and entry_1) nor a ptycho dataset",
    ),
    Row(
        "config-data-sizes-differ",
        "config",
        "`data={train: train.h5, test: big.h5}` (16 x 16 and 32 x 32 patterns)",
        "workflow",
        overrides={"data": {"train": "train.h5", "test": "big.h5"}},
        setup=_two_sizes,
        message="config key 'data.test': its patterns are 32x32 px and those of data.train 16x16 px",
    ),
    Row(
        "config-data-baseline-without-truth",
        "config",
        "`data={train: m.cxi, test: m.cxi}` (measured: no object) with the baseline in `models`",
        "workflow",
        overrides={"data": {"train": "m.cxi", "test": "m.cxi"}},
        setup=_measured_cxi(),
        message="config key 'models' = ['pinn', 'baseline'] lists the baseline, which learns from ground-truth object "
        "patches, but data.train (m.cxi) has no ground truth (measured data); leave it out (models=[pinn])",
    ),
    Row(
        "import-data-not-hdf5",
        "dataset",
        "`ptycho import-data notes.txt --out d.h5`",
        "cli",
        args=("import-data", "notes.txt", "--out", "d.h5"),
        setup=_files(**{"notes.txt": "x y intensity\n"}),
        exit_code=1,
        message="notes.txt: not an HDF5 file, so neither CXI nor a ptycho dataset",
    ),
    *(
        Row(
            f"import-data-tike-{case}",
            "dataset",
            f"`ptycho import-data s.npz.bz2 --out d.h5`, a tike scan {what}",
            "cli",
            args=("import-data", "s.npz.bz2", "--out", "d.h5"),
            setup=_tike(case),
            exit_code=1,
            message=message,
        )
        for case, what, message in (
            ("nan", "with a NaN count", "1 pattern(s) hold NaN or infinite counts; remove or repair those patterns"),
            ("probe-size", "whose probe is 12 x 12 for 16-px patterns", "'probe' has shape (1, 1, 1, 1, 12, 12)"),
            ("far-position", "with one position 4000 px from the others", "so they cannot overlap"),
            ("pickled", "holding a pickled array", "contains pickled (object) arrays, which are refused"),
            ("truncated", "cut in half", "an unreadable bz2 stream"),
        )
    ),
    # ---- datasets: corruptions of conftest.CORRUPTIONS, given to commands that write
    Row(
        "dataset-missing",
        "dataset",
        "`ptycho train --dataset absent.h5`",
        "cli",
        args=("train", "--dataset", "absent.h5", "--out", "m"),
        exit_code=1,
        message="absent.h5: no such file; create it with 'python -m ptycho simulate'",
    ),
    Row(
        "dataset-truncated",
        "dataset",
        "a truncated HDF5 file to `train`",
        "cli",
        args=("train", "--dataset", "truncated.h5", "--out", "m"),
        setup=_corrupted("truncated"),
        exit_code=1,
        message="truncated",
    ),
    Row(
        "dataset-not-hdf5",
        "dataset",
        "a CSV named `.h5` to `evaluate`",
        "cli",
        args=("evaluate", "--stitched", "s.npz", "--dataset", "not_hdf5.h5", "--out", "m.json"),
        setup=_corrupted("not_hdf5"),
        exit_code=1,
        message="not a readable HDF5 file",
    ),
    Row(
        "dataset-schema-version",
        "dataset",
        "a dataset of schema version 99 to `export-npz`",
        "cli",
        args=("export-npz", "future_schema.h5", "--out", "x.npz"),
        setup=_corrupted("future_schema"),
        exit_code=1,
        message="schema version 99 is newer",
    ),
    Row(
        "dataset-nan",
        "dataset",
        "a NaN in the diffraction to `train`",
        "cli",
        args=("train", "--dataset", "nan_diffraction.h5", "--out", "m"),
        setup=_corrupted("nan_diffraction"),
        exit_code=1,
        message="NaN",
    ),
    Row(
        "dataset-negative-counts",
        "dataset",
        "a negative amplitude to `export-npz`",
        "cli",
        args=("export-npz", "negative_sqrt_counts.h5", "--out", "x.npz"),
        setup=_corrupted("negative_sqrt_counts"),
        exit_code=1,
        message="negative",
    ),
    Row(
        "dataset-mismatched-shapes",
        "dataset",
        "`positions` of shape (P, 3) to `train`",
        "cli",
        args=("train", "--dataset", "wrong_shape.h5", "--out", "m"),
        setup=_corrupted("wrong_shape"),
        exit_code=1,
        message="positions has shape",
    ),
    Row(
        "dataset-digest-mismatch",
        "dataset",
        "a dataset edited after it was written, to `stitch`",
        "cli",
        args=("stitch", "--reconstruction", "r.npz", "--dataset", "digest_mismatch.h5", "--out", "s.npz"),
        setup=_corrupted("digest_mismatch"),
        exit_code=1,
        message="digest mismatch",
    ),
    Row(
        "dataset-too-small-for-batch",
        "dataset",
        "`ptycho train --batch-size 4096` on a small dataset",
        "cli",
        args=("train", "--dataset", "train.h5", "--out", "m", "--batch-size", "4096"),
        setup=_copy("train.h5"),
        exit_code=1,
        message="training samples for batch size 4096; lower train.batch_size or simulate more data",
        forbid=("ptycho.nets.train.Trainer",),
    ),
    Row(
        "npz-pickled",
        "dataset",
        "an NPZ holding a pickled (object) array to `import-npz`",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5"),
        setup=_npz(diff3d=np.array([{"a": 1}], dtype=object)),
        exit_code=1,
        message="contains pickled (object) arrays, which are refused",
    ),
    Row(
        "npz-truncated",
        "dataset",
        "a truncated NPZ to `import-npz`",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5"),
        setup=_truncated_npz,
        exit_code=1,
        message="may be truncated",
    ),
    Row(
        "npz-missing-array",
        "dataset",
        "an NPZ without `probeGuess`",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5"),
        setup=_npz(probeGuess=None),
        exit_code=1,
        message="missing array 'probeGuess'",
    ),
    Row(
        "npz-mismatched-shapes",
        "dataset",
        "an NPZ with fewer scan coordinates than patterns",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5"),
        setup=_npz(xcoords=np.zeros(3), ycoords=np.zeros(3)),
        exit_code=1,
        message="3 scan positions for 81 diffraction patterns",
    ),
    Row(
        "cxi-not-cxi",
        "dataset",
        "a dataset file (not CXI) to `import-cxi`",
        "cli",
        args=("import-cxi", "train.h5", "--out", "d.h5"),
        setup=_copy("train.h5"),
        exit_code=1,
        message="train.h5: not a CXI file (no cxi_version or entry_1 at the root)",
    ),
    Row(
        "cxi-bad-geometry",
        "cli",
        "`ptycho export-cxi train.h5 --out d.cxi --energy-ev -8000`",
        "cli",
        args=("export-cxi", "train.h5", "--out", "d.cxi", "--energy-ev", "-8000"),
        setup=_copy("train.h5"),
        message="config key 'cxi.energy_ev' = -8000.0 must be a positive finite number",
    ),
    Row(
        "solver-start-wrong-shape",
        "dataset",
        "`ptycho solve --start net=s.npz` with a reconstruction of another dataset",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--start", "net=s.npz", "--iterations", "2"),
        setup=lambda d, clean: (
            shutil.copyfile(clean / "test.h5", d / "test.h5"),
            np.savez(d / "s.npz", images=np.ones((1, 5, 5), np.complex64)),
        ),
        exit_code=1,
        message="start net (s.npz): a start of shape (5, 5) does not fit the scanned region",
    ),
    Row(
        "solver-start-missing",
        "cli",
        "`ptycho solve --start net=absent.npz`",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--start", "net=absent.npz"),
        setup=_copy("test.h5"),
        message="--start net=absent.npz: no such file; give the stitched .npz of a reconstruction",
    ),
    Row(
        "solver-start-syntax",
        "cli",
        "`ptycho solve --start nothing` (not NAME=PATH)",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--start", "nothing"),
        setup=_copy("test.h5"),
        message="--start 'nothing' is not KEY=VALUE",
    ),
    Row(
        "solver-unknown-mode",
        "cli",
        "`ptycho solve --modes fast`",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--modes", "fast"),
        setup=_copy("test.h5"),
        message="argument --modes: 'fast' is not an XLA mode; choose one of off, jit, auto, physics",
    ),
    Row(
        "solver-negative-iterations",
        "config",
        "`ptycho solve --iterations -1`",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--iterations", "-1"),
        setup=_copy("test.h5"),
        message="config key 'solver.iterations' = -1 is out of range; allowed: [0, 100000]",
    ),
    Row(
        "solver-bad-step",
        "config",
        "`ptycho solve --step 10` (beyond the solver's stable range)",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--step", "10"),
        setup=_copy("test.h5"),
        message="config key 'solver.step' = 10.0 is out of range; allowed: [1e-06, 4.0]",
    ),
    Row(
        "solver-unknown-engine",
        "config",
        "`ptycho solve --engine tomo` (no such solver)",
        "cli",
        args=("solve", "--dataset", "test.h5", "--out", "s.json", "--engine", "tomo"),
        setup=_copy("test.h5"),
        message="config key 'solver.engine': 'tomo' is not a solver engine; choose one of apg",
    ),
    Row(
        "refine-probe-over-its-input",
        "cli",
        "`ptycho refine-probe --write test.h5=test.h5` (the refined split over its own input)",
        "cli",
        args=("refine-probe", "--dataset", "test.h5", "--write", "test.h5=test.h5", "--out", "p.json"),
        setup=_copy("test.h5"),
        message="--write: each dataset needs its own OUT, none of them an input; name new files",
    ),
    Row(
        "refine-probe-missing-split",
        "cli",
        "`ptycho refine-probe --write absent.h5=out.h5`",
        "cli",
        args=("refine-probe", "--dataset", "test.h5", "--write", "absent.h5=out.h5", "--out", "p.json"),
        setup=_copy("test.h5"),
        message="--write absent.h5=...: no such file; give a dataset (.h5) of the study",
    ),
    Row(
        "refine-probe-no-budget",
        "config",
        "`ptycho refine-probe --iterations 5` (the probe would never move)",
        "cli",
        args=(
            "refine-probe",
            "--dataset",
            "test.h5",
            "--write",
            "test.h5=out.h5",
            "--out",
            "p.json",
            "--iterations",
            "5",
        ),
        setup=_copy("test.h5"),
        exit_code=1,
        message="config key 'solver.iterations' = 5: the probe moves after 10 iterations of the object alone",
    ),
    # ---- #34: job records of another format version, or of another job
    Row(
        "record-newer-format",
        "dataset",
        "a metrics file written by a newer ptycho (format 2 of `evaluate`) to `check quality`",
        "cli",
        args=("check", "quality", "--threshold", "0.02", "--metrics", "m.json", "--out", "q.json"),
        setup=_files(**{"m.json": json.dumps({"format": {"producer": "evaluate", "version": 2}, "mean": {}})}),
        exit_code=1,
        message="m.json is in format 2 of evaluate's output, newer than the format 1 this ptycho reads; "
        "use the ptycho that wrote it, or make it again with this one: snakemake all --cores all --forcerun evaluate",
    ),
    Row(
        "record-is-a-folder",
        "dataset",
        "a folder where `check quality` wants a metrics file",
        "cli",
        args=("check", "quality", "--threshold", "0.02", "--metrics", "m.json", "--out", "q.json"),
        setup=_files(**{"m.json": "/"}),
        exit_code=1,
        message="m.json: a folder, not a JSON file; name the .json file in it",
    ),
    Row(
        "record-of-another-job",
        "dataset",
        "stitched objects (`stitch`'s output) as `stitch --reconstruction`",
        "cli",
        args=("stitch", "--reconstruction", "s.npz", "--dataset", "test.h5", "--out", "t.npz"),
        setup=_stitched_as_reconstruction,
        exit_code=1,
        message="s.npz is an output of stitch, not of infer; pass an output of infer",
    ),
    # ---- command line
    Row(
        "cli-missing-argument",
        "cli",
        "`ptycho import-npz d.npz` (no --out)",
        "cli",
        args=("import-npz", "d.npz"),
        message="the following arguments are required: --out",
    ),
    Row(
        "cli-bad-choice",
        "cli",
        "`ptycho import-npz d.npz --out d.h5 --gridsize 3`",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5", "--gridsize", "3"),
        message="argument --gridsize: invalid choice: 3 (choose from 1, 2)",
    ),
    Row(
        "cli-bench-zero-batch",
        "cli",
        "`ptycho bench --train-batches 0` (a batch of no samples)",
        "cli",
        args=("bench", "--train-batches", "0", "--out", "b.json"),
        message="argument --train-batches: expected a whole number of at least 1, got '0'",
    ),
    Row(
        "cli-check-margin-out-of-range",
        "cli",
        "`ptycho check speedup --margin 5` (the time-to-quality margin is a fraction of the loss drop)",
        "cli",
        args=("check", "speedup", "--threshold", "1", "--bench", "b.json", "--margin", "5", "--out", "s.json"),
        message="argument --margin: expected a number from 0 to 1, got '5'",
    ),
    Row(
        "cli-same-output-twice",
        "cli",
        "`ptycho simulate --train t.h5 --test ./t.h5`",
        "cli",
        args=("simulate", "--train", "t.h5", "--test", "./t.h5", *SIM),
        forbid=SIMULATE_WORK,
        message="--train and --test are the same path ./t.h5; give each output its own path",
    ),
    Row(
        "cli-track-finish-without-parent",
        "cli",
        "`ptycho track finish` (no --parent)",
        "cli",
        args=("track", "finish"),
        message="'track finish' needs --parent (the JSON written by 'track start')",
    ),
    Row(
        "cli-track-finish-missing-parent",
        "cli",
        "`ptycho track finish --parent absent.json`",
        "cli",
        args=("track", "finish", "--parent", "absent.json"),
        exit_code=1,
        message="absent.json: no such file, so there is no MLflow parent run to mark FINISHED",
    ),
    Row(
        "cli-track-ui-without-store",
        "cli",
        "`ptycho track ui empty` (`make ui RESULTS=empty`: a folder no study wrote)",
        "cli",
        args=("track", "ui", "empty"),
        exit_code=1,
        message="track ui: empty holds no MLflow store (mlflow.db); run the study first (make all), "
        "or name the results folder it wrote (make ui RESULTS=<folder>)",
    ),
    Row(
        "cli-track-start-without-config",
        "cli",
        "`ptycho track start --out p.json` (no --config-json)",
        "cli",
        args=("track", "start", "--out", "p.json"),
        message="'track start' needs --config-json",
    ),
    Row(
        "cli-track-start-with-parent",
        "cli",
        "`ptycho track start ... --parent p.json` (contradictory)",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "q.json", "--parent", "p.json"),
        setup=CONFIG_JSON,
        message="'track start' takes no --parent",
    ),
    Row(
        "cli-simulate-train-unwritable",
        "cli",
        "`ptycho simulate --train /proc/forbidden.h5 --test t.h5`",
        "cli",
        args=("simulate", "--train", "/proc/forbidden.h5", "--test", "t.h5", *SIM),
        forbid=SIMULATE_WORK,
        message="cannot write --train /proc/forbidden.h5 (No such file or directory); choose a writable path",
    ),
    Row(
        "cli-simulate-test-unwritable",
        "cli",
        "`ptycho simulate --train t.h5 --test /proc/x/t.h5`",
        "cli",
        args=("simulate", "--train", "t.h5", "--test", "/proc/x/t.h5", *SIM),
        forbid=SIMULATE_WORK,
        message="cannot write --test /proc/x/t.h5",
    ),
    Row(
        "cli-export-npz-out-unwritable",
        "cli",
        "`ptycho export-npz train.h5 --out /proc/x.npz`",
        "cli",
        args=("export-npz", "train.h5", "--out", "/proc/x.npz"),
        setup=_copy("train.h5"),
        forbid=("ptycho.data.dataset.read_dataset",),
        message="cannot write --out /proc/x.npz",
    ),
    Row(
        "cli-import-npz-out-unwritable",
        "cli",
        "`ptycho import-npz d.npz --out /proc/x.h5`",
        "cli",
        args=("import-npz", "d.npz", "--out", "/proc/x.h5"),
        setup=_npz(),
        forbid=("ptycho.data.npz.import_npz",),
        message="cannot write --out /proc/x.h5",
    ),
    Row(
        "cli-out-is-a-folder",
        "cli",
        "`ptycho export-npz train.h5 --out models` (an existing folder)",
        "cli",
        args=("export-npz", "train.h5", "--out", "models"),
        setup=lambda d, c: (_copy("train.h5")(d, c), (d / "models").mkdir()),
        message="cannot write --out models (Is a directory)",
    ),
    Row(
        "cli-out-under-a-file",
        "cli",
        "`ptycho train --out notes.txt/m` (a file where a folder must be)",
        "cli",
        args=("train", "--dataset", "train.h5", "--out", "notes.txt/m"),
        setup=lambda d, c: (_copy("train.h5")(d, c), (d / "notes.txt").write_text("x\n")),
        forbid=("ptycho.data.dataset.read_dataset",),
        message="cannot write --out notes.txt/m (notes.txt is not a folder)",
    ),
    # ---- environment
    Row(
        "env-tracking-unreachable",
        "environment",
        "`MLFLOW_TRACKING_URI` naming a server that is down",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "p.json"),
        setup=CONFIG_JSON,
        exit_code=1,
        env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port:closed}"},
        message="MLflow tracking server at http://127.0.0.1:<port> is unreachable",
    ),
    Row(
        "env-tracking-refuses-host",
        "environment",
        "a server that refuses the host name (HTTP 403)",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "p.json"),
        setup=CONFIG_JSON,
        exit_code=1,
        env={"MLFLOW_TRACKING_URI": "http://localhost:{port:fake}"},
        message="refuses requests addressed to 'localhost:<port>' (HTTP 403",
    ),
    Row(
        "env-tracking-not-mlflow",
        "environment",
        "a URI that answers without MLflow's API (HTTP 404)",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "p.json"),
        setup=CONFIG_JSON,
        exit_code=1,
        env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port:fake}/not-mlflow"},
        message="has no MLflow tracking API (HTTP 404",
    ),
    Row(
        "env-tracking-bare-path",
        "environment",
        "`MLFLOW_TRACKING_URI=mlruns` (a bare path) for the workflow",
        "workflow",
        env={"MLFLOW_TRACKING_URI": "mlruns"},
        message="MLflow tracking URI mlruns is a file store, which MLflow 3 refuses",
    ),
    Row(
        "env-tracking-bare-path-cli",
        "environment",
        "`MLFLOW_TRACKING_URI=mlruns ptycho track start ...`",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "p.json"),
        setup=CONFIG_JSON,
        exit_code=1,
        env={"MLFLOW_TRACKING_URI": "mlruns"},
        message="is a file store",
    ),
    Row(
        "env-store-readonly",
        "environment",
        "`ptycho track start --results ro` (a read-only results folder)",
        "cli",
        args=("track", "start", "--config-json", "c.json", "--out", "p.json", "--results", "ro"),
        setup=lambda d, c: (CONFIG_JSON(d, c), _folder("ro")(d, c)),
        mount="ro",
        exit_code=1,
        env={"MLFLOW_TRACKING_URI": ""},
        message="MLflow store folder <work>/ro is not writable",
    ),
    Row(
        "env-disk-full",
        "environment",
        "`ptycho simulate` into a full filesystem",
        "cli",
        args=("simulate", "--train", "full/t.h5", "--test", "full/u.h5", *SIM),
        setup=_folder("full"),
        mount="full",
        exit_code=1,
        message="no space left on the device of full while writing t.h5; nothing was written",
    ),
    # ---- #24: geometry, outages, store, study name
    Row(
        "dataset-positions-outside",
        "dataset",
        "scan positions whose patches leave the object, to `train`",
        "cli",
        args=("train", "--dataset", "positions_outside.h5", "--out", "m"),
        setup=_corrupted("positions_outside"),
        exit_code=1,
        message="scan positions put a 16-px patch outside the object",
    ),
    Row(
        "dataset-zero-photons",
        "dataset",
        "all-zero diffraction (no photons) to `train`",
        "cli",
        args=("train", "--dataset", "zero_photons.h5", "--out", "m"),
        setup=_corrupted("zero_photons"),
        exit_code=1,
        message="diffraction holds no photons",
    ),
    Row(
        "dataset-config-json",
        "dataset",
        "a dataset whose `config` attribute is not JSON, to `export-npz`",
        "cli",
        args=("export-npz", "bad_config_json.h5", "--out", "d.npz"),
        setup=_corrupted("bad_config_json"),
        exit_code=1,
        message="attribute 'config' is not valid JSON",
    ),
    Row(
        "env-tracking-gone-job",
        "environment",
        "a job whose tracking server is gone (`--mlflow-parent` naming a server that stopped mid-study)",
        "cli",
        args=("--mlflow-parent", "p.json", "config", "--json", "{}", "--out", "c.json"),
        setup=_files(
            **{"p.json": '{"run_id": "00000000000000000000000000000000", "tracking_uri": "http://127.0.0.1:9"}'}
        ),
        exit_code=1,
        message="the re-run replays what the jobs journaled meanwhile",
    ),
    Row(
        "config-study-renamed",
        "config",
        "`--config study=renamed` on a results folder whose runs are in another MLflow experiment",
        "workflow",
        overrides={"study": "renamed"},
        setup=_files(
            **{
                "results": "/",
                "results/default": "/",
                "results/default/mlflow": "/",
                "results/default/mlflow/parent.json": '{"run_id": "r1", "tracking_uri": "postgresql://db/mlflow", '
                '"experiment": "xla-ptycho", "config_hash": "x"}',
            }
        ),
        message="config key 'study' = 'renamed', but the runs of <work>/results/default are in MLflow experiment",
    ),
    Row(
        "env-store-readonly-at-parse",
        "environment",
        "a read-only MLflow store (`MLFLOW_TRACKING_URI=sqlite:///ro/mlflow.db`, `ro` read-only), before any job",
        "workflow",
        setup=_folder("ro"),
        mount="ro",
        env={"MLFLOW_TRACKING_URI": "sqlite:///ro/mlflow.db"},
        message="cannot be written",
    ),
    # ---- #34: files that read outside themselves or declare more than they hold
    Row(
        "cxi-external-storage",
        "dataset",
        "a CXI whose detector data is HDF5 external storage in `/etc/passwd`, to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_external_storage),
        exit_code=1,
        message="d.cxi: dataset '/entry_1/instrument_1/detector_1/data' keeps its bytes in another file "
        "(HDF5 external storage: /etc/passwd), which ptycho refuses",
        forbid=IMPORT_WORK,
    ),
    Row(
        "cxi-virtual-dataset",
        "dataset",
        "a CXI whose detector data is a virtual dataset mapping another file, to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_virtual_dataset),
        exit_code=1,
        message="dataset '/entry_1/instrument_1/detector_1/data' is a virtual dataset (it maps data from src.h5), "
        "which ptycho refuses",
        forbid=IMPORT_WORK,
    ),
    Row(
        "cxi-external-link",
        "dataset",
        "a CXI whose detector data is an external link to another file, to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_external_link),
        exit_code=1,
        message="'/entry_1/instrument_1/detector_1/data' is an external link to src.h5:/data, which ptycho refuses",
        forbid=IMPORT_WORK,
    ),
    Row(
        "cxi-decompression-bomb",
        "dataset",
        "a CXI whose gzip detector data declares 4,194,304 x 1024 x 1024 uint32 (16 TiB in a few KB), to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(lambda f, d: _bomb(f, CXI_DATA)),
        exit_code=1,
        message="detector data '/entry_1/instrument_1/detector_1/data' declares shape (4194304, 1024, 1024) uint32 "
        "(16.0 TiB), more than the",
        forbid=IMPORT_WORK,
    ),
    Row(
        "dataset-decompression-bomb",
        "dataset",
        "a dataset whose gzip `diffraction` declares 16 TiB, to `inspect`",
        "cli",
        args=("inspect", "bomb.h5"),
        setup=_dataset_bomb,
        exit_code=1,
        message="bomb.h5: array 'diffraction' declares shape (4194304, 1024, 1024) uint32 (16.0 TiB), more than the",
    ),
    Row(
        "cxi-misfit-before-read",
        "dataset",
        "a CXI whose gzip detector data declares 256 x 1024 x 1024 uint32 (1 GiB, under the read budget) beside a "
        "probe of another size, to `import-cxi`: refused from the declared shapes, nothing decompressed",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(lambda f, d: _undecodable(f, CXI_DATA, (256, 1024, 1024))),
        exit_code=1,
        message="detector data (256, 1024, 1024), probe (16, 16) and translation",
        forbid=IMPORT_WORK,
    ),
    Row(
        "dataset-misfit-before-read",
        "dataset",
        "a dataset whose gzip `diffraction` declares 256 x 1024 x 1024 uint32 (1 GiB, under the read budget) for a "
        "16-px probe, to `inspect`: refused from the declared shapes, nothing decompressed",
        "cli",
        args=("inspect", "misfit.h5"),
        setup=_dataset_misfit_bomb,
        exit_code=1,
        message="misfit.h5: diffraction has shape (256, 1024, 1024); expected (P, 16, 16) with P > 0",
    ),
    Row(
        "cxi-huge-object-shape",
        "dataset",
        "a measured-data CXI whose `ptycho_1/object_shape` asks for a 1,048,576-px object (8 TiB), to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_huge_object_shape),
        exit_code=1,
        message="'entry_1/ptycho_1/object_shape' = [1, 1048576, 1048576] asks for an object of shape "
        "(1, 1048576, 1048576) complex64 (8.0 TiB): images of 1048576 x 1048576 pixels, more than the 65536 per side",
        forbid=IMPORT_WORK,
    ),
    Row(
        "npz-header-bomb",
        "dataset",
        "an NPZ whose `diff3d` header declares 2^46 float32 (256 TiB), to `import-npz`",
        "cli",
        args=("import-npz", "d.npz", "--out", "d.h5"),
        setup=_npz_header_bomb,
        exit_code=1,
        message="d.npz: array 'diff3d' declares shape (274877906944, 16, 16) float32 (256.0 TiB)",
        forbid=IMPORT_WORK,
    ),
    Row(
        "cxi-soft-link-loop",
        "dataset",
        "a CXI whose detector data is a loop of soft links, to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_soft_link_loop),
        exit_code=1,
        message="never reaches an object (a loop of soft links, or a chain of more than 16, which HDF5 cannot follow)",
        forbid=IMPORT_WORK,
    ),
    Row(
        "cxi-deep-json",
        "dataset",
        "a CXI whose `ptycho_1/attrs` JSON nests 200,000 levels, to `import-cxi`",
        "cli",
        args=("import-cxi", "d.cxi", "--out", "d.h5"),
        setup=_cxi(_deep_json),
        exit_code=1,
        message="'entry_1/ptycho_1/attrs' nests JSON 200000 levels deep, more than the 64 ptycho reads",
        forbid=IMPORT_WORK,
    ),
    Row(
        "model-oversized-kernel",
        "dataset",
        "a `model.keras` whose Conv2D asks for a (3, 3, 4, 2^30) kernel (144 GiB), to `infer`",
        "cli",
        args=("infer", "--model", "m", "--dataset", "test.h5", "--out", "r.npz"),
        setup=_model_with_kernel(2**30),
        exit_code=1,
        message="m/model.keras: layer 'conv2d' asks for a variable of shape (3, 3, 4, 1073741824) float32 "
        "(144.0 GiB): an axis of 1073741824, more than the 16777216 ptycho reads",
        forbid=("keras.models.load_model",),
    ),
]


# ------------------------------------------------------------------------ running rows
def make_clean_inputs(folder: Path) -> Path:
    """The valid files rows start from: the small simulated pair, sqrt-count copy, NPZ."""
    from dataclasses import replace

    from ptycho.data.dataset import write_dataset
    from ptycho.data.npz import export_npz
    from ptycho.data.simulate import simulate

    pair = simulate(SMALL)
    write_dataset(folder / "train.h5", pair["train"])
    write_dataset(folder / "test.h5", pair["test"])
    train = pair["train"]
    write_dataset(folder / "sqrt.h5", replace(train, diffraction=train.amplitude, units="sqrt_counts"))
    export_npz(pair["train"], folder / "train.npz")
    return folder


@contextlib.contextmanager
def _ports(env: dict) -> Iterator[dict]:
    """``{port:closed}``: a port nothing listens on; ``{port:fake}``: a fake MLflow on 127.0.0.1."""
    out = {}
    with contextlib.ExitStack() as stack:
        port = None
        for key, value in env.items():
            if "{port:fake}" in value and port is None:
                port = stack.enter_context(mlflow_server.fake_server())
            if "{port:closed}" in value:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    closed = s.getsockname()[1]
                value = value.replace("{port:closed}", str(closed))
            if port is not None:
                value = value.replace("{port:fake}", str(port))
            out[key] = value
        yield out


@contextlib.contextmanager
def _environment(cwd: Path, env: dict) -> Iterator[None]:
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    for key, value in env.items():
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)


@contextlib.contextmanager
def _mounted(row: Row, d: Path) -> Iterator[None]:
    """The row's read-only folder ``ro`` or full filesystem ``full``: a real tmpfs mount as
    root (for whom permission bits do not stop writes); ``chmod 555`` otherwise."""
    if not row.mount:
        yield
        return
    target = d / row.mount
    if not _is_root():
        assert row.mount == "ro", "a full filesystem needs root (mount)"
        target.chmod(0o555)
        try:
            yield
        finally:
            target.chmod(0o755)
        return
    options = "ro,size=64k" if row.mount == "ro" else "size=16k"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs on {target}: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=False)


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@dataclass
class Outcome:
    exit_code: int
    stderr: str
    before: list[str]
    after: list[str]
    called: list[str]


def _call(row: Row, d: Path, env: dict) -> tuple[int, str]:
    """Run the row the way a user would meet it; returns (exit code, stderr)."""
    err = io.StringIO()
    if row.via == "cli":
        from ptycho.cli import main

        with _environment(d, env), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(list(row.args))
            except SystemExit as exc:  # argparse
                code = exc.code
        return int(code), err.getvalue()
    if row.via == "workflow":
        from ptycho.errors import PtychoError
        from ptycho.study.preflight import parse_time_checks

        base = yaml.safe_load((ROOT / "config.yaml").read_text())
        with _environment(d, env):
            try:
                parse_time_checks(base, row.overrides, d)
            except PtychoError as exc:  # what rules/common.smk prints
                return 2, f"ptycho workflow: error: {exc}\n"
        return 0, ""
    raise ValueError(row.via)


def run_row(row: Row, d: Path, clean: Path, tag: str) -> Outcome:
    if row.setup:
        row.setup(d, clean)
    before, called = _listing(d), []
    if row.via == "snakemake":
        for name in WORKFLOW_FILES:
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, d / name)
        before = _listing(d)
        args = [a.format(tag=tag) for a in row.args]
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1", "all", "--config", *args],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, **row.env),
        )
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ptycho workflow: error:")]
        stderr = "\n".join(lines) + "\n" if lines else proc.stderr
        if "Traceback" in proc.stderr:
            stderr += proc.stderr
        after = [p for p in _listing(d) if not p.startswith(".snakemake")]
        return Outcome(proc.returncode, stderr, before, after, called)
    patches = []
    for target in row.forbid:

        def spy(*a, _t=target, **k):
            called.append(_t)
            raise AssertionError(f"{_t} was called")

        patches.append(mock.patch(target, spy))
    with _ports(row.env) as env, _mounted(row, d), contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        code, stderr = _call(row, d, env)
        after = _listing(d)
    return Outcome(code, stderr, before, after, called)


def shown(stderr: str, d: Path) -> str:
    """The stderr line as the doc shows it: the row's folder as ``<work>``, ports as ``<port>``."""
    line = stderr.strip().replace(str(d), "<work>")
    return re.sub(r"(127\.0\.0\.1|localhost):\d+", r"\1:<port>", line)


def _is_root() -> bool:
    return os.geteuid() == 0


# ------------------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return make_clean_inputs(tmp_path_factory.mktemp("clean"))


@pytest.mark.parametrize("row", CATALOGUE, ids=[r.id for r in CATALOGUE])
def test_bad_input_is_one_line_with_exit_code_and_no_output(row, clean, tmp_path):
    if row.mount == "full" and not _is_root():
        pytest.skip("needs root to mount a small tmpfs and fill it")
    tag = tmp_path.name
    for path in row.absent:
        assert not Path(path.format(tag=tag)).exists()
    out = run_row(row, tmp_path, clean, tag)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(("ptycho ", "ptycho: ")) and "error:" in lines[0], lines[0]
    assert row.message in shown(out.stderr, tmp_path), lines[0]
    assert out.exit_code == row.exit_code, (out.exit_code, lines[0])
    assert out.after == out.before, "partial output left behind"
    assert out.called == []
    for path in row.absent:
        assert not Path(path.format(tag=tag)).exists(), f"{path} was created"


def test_the_catalogue_has_at_least_30_rows_in_every_area():
    assert len(CATALOGUE) >= 30 and len({r.id for r in CATALOGUE}) == len(CATALOGUE)
    assert {r.area for r in CATALOGUE} == {"config", "dataset", "cli", "environment"}


def _doc_rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells
    return rows


def test_the_doc_lists_every_row_with_its_message_and_exit_code():
    """docs/bad-inputs.md and CATALOGUE cannot drift: same ids, each message holding the
    row's fragment, same exit code (regenerate with ``python tests/test_bad_inputs.py``)."""
    doc = _doc_rows()
    assert list(doc) == [r.id for r in CATALOGUE]
    for row in CATALOGUE:
        _, area, _, message, code = doc[row.id]
        assert area == row.area and code == str(row.exit_code), row.id
        assert _cell(row.message).replace("`", "&#96;") in message, (row.id, message)


def test_simulate_writes_a_pair_or_nothing(tmp_path, monkeypatch, capsys):
    """The test split failing to write (a disk filling up between the two) takes the
    train split written a moment before with it: no lone train.h5 for a later job."""
    import ptycho.data.dataset
    from ptycho.cli import main
    from ptycho.errors import PtychoError

    real = ptycho.data.dataset.write_dataset

    def second_fails(path, ds):
        if Path(path).name == "u.h5":
            raise PtychoError(f"cannot write {path} (No space left on device); choose a writable path or free space")
        return real(path, ds)

    monkeypatch.setattr(ptycho.data.dataset, "write_dataset", second_fails)
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--train", "t.h5", "--test", "u.h5", *SIM]) == 1
    assert "cannot write u.h5 (No space left on device)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ doc generator
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def write_doc(path: Path = DOC) -> None:
    """Run every row and rewrite the table between the markers of ``docs/bad-inputs.md``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        clean = make_clean_inputs(Path(tmp))
        lines = ["| row | area | input | what the user sees (stderr, one line) | exit |", "|---|---|---|---|---|"]
        for i, row in enumerate(CATALOGUE):
            d = Path(tmp) / f"row{i}"
            d.mkdir()
            if row.mount == "full" and not _is_root():
                message = f"(not run: needs root) … {row.message}"
                code = row.exit_code
            else:
                out = run_row(row, d, clean, "TAG")
                message, code = shown(out.stderr, d), out.exit_code
            lines.append(
                f"| `{row.id}` | {row.area} | {_cell(row.what)} | {_cell(message).replace('`', '&#96;')} | {code} |"
            )
    text = path.read_text()
    start, end = "<!-- catalogue: start -->", "<!-- catalogue: end -->"
    head, rest = text.split(start)
    _, tail = rest.split(end)
    path.write_text(f"{head}{start}\n" + "\n".join(lines) + f"\n{end}{tail}")


if __name__ == "__main__":
    write_doc()
    print(f"{DOC}: {len(CATALOGUE)} rows")
