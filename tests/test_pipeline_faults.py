"""The smoke pipeline under real faults: Ctrl-C, ``kill -9`` of a training job, a second
``snakemake`` in the same folder. One workflow folder goes through all of them in turn,
so that one smoke run's worth of jobs answers every question:

1. Ctrl-C (SIGINT to snakemake's process group, as a terminal sends it) while a model
   trains: snakemake stops, the interrupted jobs' runs end KILLED with the reason.
2. The same command again; ``kill -9`` of a training job mid-run: snakemake reports the
   job failed, and that job's run is left RUNNING (nothing could close it), unless a job
   started after the kill found it stale first.
3. The same command again: the stale run is marked KILLED with the reason as a tag when
   the pipeline starts, the killed training resumes from its saved state (kept by
   Snakemake, which deleted the job's declared outputs), a second ``snakemake`` started
   meanwhile is refused by the lock with Snakemake's message, and the first completes:
   report written, parent run FINISHED, no run left RUNNING.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptycho import tracking

ROOT = Path(__file__).resolve().parent.parent
#: What a user's checkout holds, the workflow profile (rerun-incomplete) included.
WORKFLOW_FILES = ("Snakefile", "config.yaml", "rules", "envs", "ptycho", "profiles")
ARMS = ("pinn-off-s0", "pinn-jit-s0", "baseline-off-s0", "baseline-jit-s0")


def _snakemake(work: Path) -> subprocess.Popen:
    # Ctrl-C must reach it as a terminal's would: a suite started as a shell's background
    # job (`make test-slow &`) runs with SIGINT ignored, which children inherit, so the
    # default disposition is restored in the child before exec.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "all", "--config", "preset=smoke"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _client(work: Path):
    """A client of the pipeline's store, opened under the store's lock: the pipeline's
    first job may be creating its tables at this moment (see ``tracking.ensure_store``)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{work / 'results' / 'mlflow.db'}"
    tracking.ensure_store(uri)
    return MlflowClient(uri)


def _children(work: Path) -> list:
    client = _client(work)
    exp = client.get_experiment_by_name("xla-ptycho")
    if exp is None:
        return []
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000) if "mlflow.parentRunId" in r.data.tags]


def _training_in_progress(work: Path, proc: subprocess.Popen, exclude: tuple[str, ...] = (), timeout: float = 900):
    """The RUNNING train run (not in ``exclude``) whose job has saved a training state (it is in its loop)."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"snakemake ended before a training started:\n{proc.stdout.read()[-4000:]}"
        assert time.monotonic() < deadline, "no training started in time"
        if (work / "results" / "mlflow.db").exists():
            for run in _children(work):
                tags = run.data.tags
                if tags.get("rule") == "train" and run.info.status == "RUNNING" and run.info.run_id not in exclude:
                    arm = f"{tags['model']}-{tags['xla']}-s{tags['seed']}"  # the xla tag holds the mode
                    state = work / "results" / "smoke" / "models" / arm / "checkpoint" / "train_state.npz"
                    if state.exists():
                        return run, arm
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.long
def test_pipeline_survives_ctrl_c_and_kill_9_and_refuses_a_second_snakemake(tmp_path):
    work = tmp_path
    for name in WORKFLOW_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
    t0 = time.monotonic()

    # 1. Ctrl-C while a model trains.
    first = _snakemake(work)
    _training_in_progress(work, first)
    os.killpg(first.pid, signal.SIGINT)
    out, _ = first.communicate(timeout=180)
    assert first.returncode != 0, out[-4000:]
    runs = _children(work)
    assert runs and not [r.info.run_name for r in runs if r.info.status == "RUNNING"], out[-4000:]
    interrupted = [r for r in runs if r.info.status == "KILLED"]
    assert interrupted, "the interrupted training's run should be KILLED"
    for run in interrupted:
        assert run.data.tags[tracking.END_REASON_TAG].startswith("interrupted: SIGINT or SIGTERM")

    # 2. The same command; kill -9 of a training job mid-run.
    second = _snakemake(work)
    victim, arm = _training_in_progress(work, second)
    pid = int(victim.data.tags[tracking.PID_TAG])
    os.kill(pid, signal.SIGKILL)
    out, _ = second.communicate(timeout=900)
    assert second.returncode != 0 and "Error in rule train" in out, out[-4000:]
    # A run whose process was killed outright cannot close itself: the workflow's error
    # hook sweeps it (#24 item 11), unless the next job to start found it stale first (one
    # launched just before the kill and still importing).
    after = _client(work).get_run(victim.info.run_id)
    assert after.info.status == "KILLED", after.info.status
    assert after.data.tags[tracking.END_REASON_TAG].startswith(f"stale: process {pid} on ")
    assert after.data.tags[tracking.END_REASON_TAG].endswith(" by 'ptycho track finish'") or (
        " by job " in after.data.tags[tracking.END_REASON_TAG]
    )
    model_dir = work / "results" / "smoke" / "models" / arm
    assert not (model_dir / "model.json").exists()  # Snakemake deleted the failed job's outputs ...
    assert (model_dir / "checkpoint" / "train_state.npz").exists()  # ... but not the saved state

    # 3. The same command completes; a second snakemake meanwhile is refused by the lock.
    third = _snakemake(work)
    _training_in_progress(work, third, exclude=(victim.info.run_id,))
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    refused = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "all", "--config", "preset=smoke"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0
    assert "Directory cannot be locked" in refused.stdout + refused.stderr
    out, _ = third.communicate(timeout=1500)
    assert third.returncode == 0, out[-4000:]
    print(f"\nCtrl-C, kill -9 and the completing run: {time.monotonic() - t0:.0f} s")

    client = _client(work)
    stale = client.get_run(victim.info.run_id)
    assert stale.info.status == "KILLED"
    assert stale.data.tags[tracking.END_REASON_TAG].startswith(f"stale: process {pid} on ")
    runs = _children(work)
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    odd = {
        r.info.run_name: (r.info.status, r.data.tags.get(tracking.END_REASON_TAG))
        for r in runs
        if r.info.status not in ("FINISHED", "KILLED")
    }
    assert not odd, odd
    assert all(tracking.END_REASON_TAG in r.data.tags for r in runs if r.info.status == "KILLED")
    finished_train = [r for r in runs if r.data.tags["rule"] == "train" and r.info.status == "FINISHED"]
    assert len(finished_train) == len(ARMS)
    parents = [r for r in client.search_runs([stale.info.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"

    report = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    assert set(report["arms"]) == set(ARMS)
    for name in ARMS:
        meta = json.loads((work / "results" / "smoke" / "models" / name / "model.json").read_text())
        assert [h["epoch"] for h in meta["history"]] == list(range(1, meta["train"]["epochs"] + 1))
    resumed = json.loads((model_dir / "model.json").read_text())
    assert resumed.get("resumed"), "the killed training should have resumed from its saved state"
