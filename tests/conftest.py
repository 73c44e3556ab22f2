"""Shared fixtures: a small simulated train/test pair, its files, and file corruptions.

The corruptions are shared by ``test_dataset.py`` (``read_dataset`` raises a one-line
:class:`DatasetError`) and ``test_cli.py`` (``ptycho inspect`` exits non-zero with one
stderr line); any test taking a ``corruption`` argument runs once per kind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ptycho.nets.xla import xla_flags_environment

# As the CLI does before TensorFlow starts: lets the auto XLA mode cluster on CPU
# (ptycho.nets.xla); on its own it changes nothing for the other modes.
os.environ.update(xla_flags_environment())
# The workflow's estimate calibrates every arm before the first job (ptycho.study.estimate):
# a minute per new config, which the tests' many workflows would each pay. The tests of the
# estimate set PTYCHO_CALIBRATE=1 themselves (tests/test_estimate.py, tests/test_pipeline.py).
os.environ.setdefault("PTYCHO_CALIBRATE", "0")

from ptycho.config import SimulationConfig  # noqa: E402
from ptycho.data.dataset import Dataset, write_dataset  # noqa: E402
from ptycho.data.simulate import simulate  # noqa: E402

#: Small but complete: gridsize 2, 81 train positions (64 groups), 64 test positions.
#: 50 lines on the 96 px canvas give about the line density of 400 on the reference's 784.
SMALL = SimulationConfig(
    n=16,
    gridsize=2,
    object_size=48,
    n_lines=50,
    stride_train=4,
    stride_test=8,
    nphotons=1e6,
    seed=1,
    n_objects_train=1,
    probe_kind="disk",
)


@pytest.fixture(scope="session")
def small_cfg() -> SimulationConfig:
    return SMALL


@pytest.fixture(scope="session")
def pair(small_cfg) -> dict[str, Dataset]:
    """``simulate(SMALL)``: in-memory train and test datasets (do not mutate)."""
    return simulate(small_cfg)


@pytest.fixture(scope="session")
def files(pair, tmp_path_factory) -> dict[str, Path]:
    """The pair written to disk, plus the train split stored as sqrt-counts (read-only)."""
    root = tmp_path_factory.mktemp("datasets")
    out = {"train": root / "train.h5", "test": root / "test.h5", "sqrt": root / "train_sqrt.h5"}
    write_dataset(out["train"], pair["train"])
    write_dataset(out["test"], pair["test"])
    train = pair["train"]
    write_dataset(out["sqrt"], replace(train, diffraction=train.amplitude, units="sqrt_counts"))
    return out


# ----------------------------------------------------------------- corruptions
def _edit(path: Path, fn: Callable) -> None:
    import h5py

    with h5py.File(path, "a") as f:
        fn(f)


def _missing_array(f) -> None:
    del f["positions"]


def _wrong_shape(f) -> None:
    p = f["positions"].shape[0]
    del f["positions"]
    f.create_dataset("positions", data=np.zeros((p, 3)))


def _nan(f) -> None:
    f["diffraction"][0, 3, 4] = np.nan


def _negative(f) -> None:
    f["diffraction"][0, 3, 4] = -1.0


def _signed_counts(f) -> None:
    d = f["diffraction"][()].astype(np.int32)
    d[0, 3, 4] = -5
    del f["diffraction"]
    f.create_dataset("diffraction", data=d)


def _future_schema(f) -> None:
    f.attrs["schema_version"] = 99


def _digest_mismatch(f) -> None:
    f["diffraction"][0, 3, 4] += 1


def _missing_attribute(f) -> None:
    del f.attrs["scale"]


def _wrong_format(f) -> None:
    f.attrs["format"] = "something-else"


def _redigest(f) -> None:
    """Store the digest of the arrays as they now are, as a writer that computed it would:
    the corruption must be found by what it breaks, not by the digest check."""
    from ptycho.data.dataset import ARRAYS, content_digest

    units = f.attrs["units"]
    units = units.decode() if isinstance(units, bytes) else str(units)
    f.attrs["digest"] = content_digest({k: f[k][()] for k in ARRAYS}, float(f.attrs["scale"]), units)


def _positions_outside(f) -> None:
    f["positions"][...] = f["positions"][()] + 1000.0  # group offsets (centroid - position) unchanged
    _redigest(f)


def _zero_photons(f) -> None:
    f["diffraction"][...] = 0
    _redigest(f)


def _bad_config_json(f) -> None:
    f.attrs["config"] = '{"n": 16,'


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _not_hdf5(path: Path) -> None:
    path.write_text("diffraction,probe\n1,2\n")


#: kind -> (source file, corruption, fragment the one-line message must contain)
CORRUPTIONS: dict[str, tuple[str, Callable, str]] = {
    "missing_array": ("train", lambda p: _edit(p, _missing_array), "missing array 'positions'"),
    "wrong_shape": ("train", lambda p: _edit(p, _wrong_shape), "positions has shape"),
    "nan_diffraction": ("sqrt", lambda p: _edit(p, _nan), "NaN"),
    "negative_sqrt_counts": ("sqrt", lambda p: _edit(p, _negative), "negative"),
    "signed_counts": ("train", lambda p: _edit(p, _signed_counts), "dtype int32"),
    "truncated": ("train", _truncate, "truncated"),
    "not_hdf5": ("train", _not_hdf5, "not a readable HDF5 file"),
    "future_schema": ("train", lambda p: _edit(p, _future_schema), "schema version 99 is newer"),
    "digest_mismatch": ("train", lambda p: _edit(p, _digest_mismatch), "digest mismatch"),
    "missing_attribute": ("train", lambda p: _edit(p, _missing_attribute), "missing attribute 'scale'"),
    "wrong_format": ("train", lambda p: _edit(p, _wrong_format), "not a ptycho dataset"),
    "positions_outside": (
        "train",
        lambda p: _edit(p, _positions_outside),
        "81 of 81 scan positions put a 16-px patch outside the object",
    ),
    "zero_photons": ("train", lambda p: _edit(p, _zero_photons), "diffraction holds no photons"),
    "bad_config_json": ("train", lambda p: _edit(p, _bad_config_json), "attribute 'config' is not valid JSON"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "corruption" in metafunc.fixturenames:
        metafunc.parametrize("corruption", list(CORRUPTIONS))


@pytest.fixture(autouse=True)
def _workflow_environment_restored():
    """No test leaks what parsing the workflow in this process sets in its environment
    (rules/common.smk: PTYCHO_WORKFLOW naming this process as the live Snakemake, the
    config's JSON and hash, the detected hardware) into later tests and their subprocesses:
    a job started later would name this pytest process as its live Snakemake."""
    before = {k: v for k, v in os.environ.items() if k.startswith("PTYCHO_")}
    yield
    for key in [k for k in os.environ if k.startswith("PTYCHO_")]:
        if key not in before:
            del os.environ[key]
    os.environ.update(before)


@pytest.fixture(autouse=True)
def _tracking_uri_restored():
    """No test leaks its MLflow tracking URI into the next: ``mlflow.set_tracking_uri``
    also sets ``MLFLOW_TRACKING_URI`` in this process's environment, which every later
    subprocess (a Snakemake run, a CLI call) would inherit and log to instead of its own
    results folder's store."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if "mlflow" in sys.modules:
        from mlflow.tracking._tracking_service import utils

        utils._tracking_uri = before
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture
def corrupted(corruption, files, tmp_path) -> tuple[Path, str]:
    """A fresh copy of a valid file broken in one way; returns (path, message fragment)."""
    source, corrupt, fragment = CORRUPTIONS[corruption]
    path = tmp_path / f"{corruption}.h5"
    shutil.copyfile(files[source], path)
    corrupt(path)
    return path, fragment


# ------------------------------------------------------------------------- CLI
def run_cli(*args: str, cwd: Path | None = None, python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``python -m ptycho ARGS`` in a fresh interpreter (the real entry point)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "ptycho", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess]:
    return run_cli


# ------------------------------------------------------------------- order
#: The fast suite's longest test files (``make test``'s durations list; the first holds a
#: 270 s test, four times the next), run first: with pytest-xdist's workers a long test
#: started last runs alone while the other worker idles. Only the order changes.
LONGEST_FIRST = (
    "test_science_cli.py",
    "test_rerun_truth.py",
    "test_tf_core.py",
    "test_faults.py",
    "test_outages.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept
