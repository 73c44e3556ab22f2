"""The drill of a lost MLflow store (issue 24): a finished smoke study loses ``mlflow.db``,
the workflow says so in one line before any job, and docs/troubleshooting.md's one command rebuilds
the store from the journals with the same runs, params, tags, metric points and logged
models as before, once each; the workflow then has nothing to do.

The smallest smoke study that is still the whole pipeline: the PINN, off and jit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_pipeline import _workdir, snakemake
from test_tracking import _forget_open_stores, metric_points, store_snapshot

#: The smoke study at its smallest that still answers: every rule runs, for the PINN's two arms.
CONFIG = ("--config", "preset=smoke", "models=[pinn]")
#: The documented command for a lost or damaged store (docs/troubleshooting.md, "When things go wrong").
REBUILD = ("track", "rebuild", "results")


def _ptycho(work, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "ptycho", *args], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
@pytest.mark.long
def test_a_finished_smoke_study_survives_the_loss_of_its_store(tmp_path):
    work = _workdir(tmp_path)
    done = snakemake(work, "all", *CONFIG)
    assert done.returncode == 0, done.stderr[-4000:]
    db = work / "results" / "mlflow.db"
    uri = f"sqlite:///{db}"
    before = store_snapshot(uri)
    runs = {key: len(v) for key, v in before.items() if len(key) == 2}
    assert any(name.endswith("/pinn-off-s0") for _, name in runs), sorted(runs)  # the arm's training run
    assert any(key[1].startswith("model ") for key in before), "the training's logged model"
    assert any(name.count("/") == 2 for _, name in runs), "a nested run (the benchmark's or the solver's)"

    db.unlink()
    _forget_open_stores()
    # The workflow finds the store gone before any job, in one line naming the command.
    check = snakemake(work, "all", *CONFIG)
    assert check.returncode != 0
    said = [line for line in check.stderr.splitlines() if line.startswith("ptycho workflow: error:")]
    assert len(said) == 1 and said[0].endswith("python -m ptycho track rebuild results"), check.stderr[-3000:]
    assert f"MLflow store {db} is missing" in said[0]
    assert "Traceback" not in check.stderr

    rebuilt = _ptycho(work, *REBUILD)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert f"{sum(runs.values())} run(s) created again, 0 already there" in rebuilt.stdout
    after = store_snapshot(uri)
    assert {k: len(v) for k, v in after.items() if len(k) == 2} == runs  # the same runs, once each
    assert metric_points(after) == metric_points(before)
    for key, was in before.items():  # params, tags, metric points, statuses, times, artifacts, models
        assert after[key] == was, key
    assert after == before

    again = _ptycho(work, *REBUILD)  # a second rebuild adds nothing
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"0 run(s) created again, {sum(runs.values())} already there" in again.stdout
    _forget_open_stores()
    assert store_snapshot(uri) == before

    # The study carries on where it was: nothing to re-run, every job finds its parent.
    rerun = snakemake(work, "all", *CONFIG)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert "Nothing to be done" in rerun.stdout + rerun.stderr
