"""Faults in the middle of a run, with real processes and real signals.

* a job killed outright (``kill -9``) leaves its MLflow run RUNNING: the next job or
  pipeline start marks it KILLED with the reason as a tag, and a live job is never touched;
* Ctrl-C (SIGINT) ends a run KILLED with the reason;
* a NaN loss ends the run FAILED with the reason, and the last good state is kept;
* a killed training resumes from its last epoch with the same result as an
  uninterrupted one (bit for bit on one thread);
* the tracking server going away mid-job loses nothing: the job goes on, its journal
  holds everything, and ``ptycho track replay`` sends it again, idempotently;
* a full disk is one line, leaves no half-written file, and the next run completes.

The whole smoke pipeline under ``kill -9``, Ctrl-C and a second ``snakemake`` is in
``test_pipeline_faults.py``; the concurrency counts in ``test_concurrency.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from mlflow_server import free_port, start_server, stop_server

from ptycho import tracking

ROOT = Path(__file__).resolve().parent.parent
#: The tiniest PINN that trains for real: 16 px patterns, 4 filters, one pooling level.
TINY = (
    "--kind",
    "pinn",
    "--filters",
    "4",
    "--depth",
    "1",
    "--batch-size",
    "8",
    "--fail-on-collapse",
    "false",
)  # plumbing


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="3", **extra)
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _ptycho(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ptycho", *args],
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(
                f"process ended (rc {proc.returncode}) before {what}:\n{(out or '')[-2000:]}\n{(err or '')[-3000:]}"
            )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ptycho ") and ": error: " in line]


def _parent(uri: str, folder: Path) -> Path:
    """A parent run and its JSON as ``track start`` writes it, at ``folder/mlflow/parent.json``."""
    run_id = tracking.start_parent(uri, "faults", "pipeline", params={"a": 1}, tags={})
    path = folder / "mlflow" / "parent.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "tracking_uri": uri}))
    return path


def _children(uri: str, parent_json: Path) -> list:
    from mlflow.tracking import MlflowClient

    parent = json.loads(parent_json.read_text())["run_id"]
    client = MlflowClient(uri)
    exp = client.get_run(parent).info.experiment_id
    return client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")


@pytest.fixture(scope="module")
def train_file(tmp_path_factory) -> Path:
    from conftest import SMALL

    from ptycho.data.dataset import write_dataset
    from ptycho.data.simulate import simulate_split

    path = tmp_path_factory.mktemp("faults") / "train.h5"
    write_dataset(path, simulate_split(SMALL, "train"))
    return path


# ---------------------------------------------------------------- stale and killed runs
_HOLDER = """
import logging, signal, sys, time
from pathlib import Path
# A suite started as a shell's background job (`make test &`) hands its children SIGINT
# ignored, and Python then installs no KeyboardInterrupt handler: restore Ctrl-C.
signal.signal(signal.SIGINT, signal.default_int_handler)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)  # as the CLI does
from ptycho import tracking
uri, parent, name, ready = sys.argv[1:5]
with tracking.child_run(uri, parent, name, tags={"rule": "train"}) as run:
    run.log_metrics({"loss": 1.0}, step=1)
    Path(ready).write_text(run.run_id)
    time.sleep(600)
"""


def test_a_killed_jobs_run_is_marked_killed_and_a_live_jobs_run_is_left_alone(tmp_path):
    """Three real processes hold a child run each: one gets SIGKILL, one SIGINT, one lives."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    parent = tracking.start_parent(uri, "faults", "pipeline", params={}, tags={})
    procs = {}
    for name in ("killed", "interrupted", "live"):
        # stderr to a file, not a pipe nobody reads while the test waits (a full pipe
        # would block the process); kept in tmp_path for a failure's post-mortem.
        with open(tmp_path / f"{name}.stderr", "w") as err:
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", _HOLDER, uri, parent, name, str(tmp_path / name)],
                env=_env(),
                start_new_session=True,
                stderr=err,
                text=True,
            )
    try:
        for name, proc in procs.items():
            _wait_for((tmp_path / name).exists, 120, f"the {name} run to start", proc)
        ids = {name: (tmp_path / name).read_text() for name in procs}
        client = MlflowClient(uri)
        tags = client.get_run(ids["live"]).data.tags
        assert tags[tracking.HOST_TAG] == socket.gethostname()
        assert tags[tracking.PID_TAG] == str(procs["live"].pid) and tags[tracking.PID_START_TAG]

        procs["killed"].send_signal(signal.SIGKILL)
        procs["interrupted"].send_signal(signal.SIGINT)
        assert procs["killed"].wait(30) == -signal.SIGKILL
        assert procs["interrupted"].wait(60) != 0
        assert client.get_run(ids["killed"]).info.status == "RUNNING"  # nobody closed it

        # A run whose pid now belongs to another process (pid reuse) is stale too.
        reused = client.create_run(
            client.get_run(parent).info.experiment_id,
            run_name="reused",
            tags={"mlflow.parentRunId": parent, **tracking.process_identity(), tracking.PID_START_TAG: "1"},
        ).info.run_id

        ended = tracking.sweep_children(uri, parent, by="the test").killed
        assert sorted(ended) == sorted([ids["killed"], reused])
        killed = client.get_run(ids["killed"])
        assert killed.info.status == "KILLED"
        reason = killed.data.tags[tracking.END_REASON_TAG]
        assert reason.startswith(f"stale: process {procs['killed'].pid} on {socket.gethostname()} ended without")
        assert reason.endswith("by the test")
        interrupted = client.get_run(ids["interrupted"])
        assert interrupted.info.status == "KILLED"
        assert interrupted.data.tags[tracking.END_REASON_TAG].startswith("interrupted: SIGINT or SIGTERM")
        assert client.get_run(ids["live"]).info.status == "RUNNING"
        assert tracking.sweep_children(uri, parent).killed == []  # nothing left to end
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    assert client.get_run(ids["live"]).info.status == "RUNNING"
    assert tracking.sweep_children(uri, parent).killed == [ids["live"]]  # now its process is gone too


# ------------------------------------------------------------------------ NaN loss
def test_a_nan_loss_fails_the_run_with_the_reason_and_keeps_the_last_good_state(tmp_path, train_file):
    """A mis-scaled dataset (scale 1e25 too large) overflows the loss in the first epoch."""
    from mlflow.tracking import MlflowClient

    from ptycho.data.dataset import read_dataset, write_dataset
    from ptycho.nets.train import TRAIN_STATE, load_train_state

    bad = tmp_path / "misscaled.h5"
    ds = read_dataset(train_file)
    write_dataset(bad, replace(ds, scale=ds.scale * 1e25))
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    tracking.ensure_store(uri)
    parent = _parent(uri, tmp_path / "results")
    out = tmp_path / "model"
    proc = _ptycho(
        "--mlflow-parent",
        str(parent),
        "--mlflow-tag",
        "rule=train",
        "--threads",
        "1",
        "train",
        "--quiet",
        "--resume",
        "--dataset",
        str(bad),
        "--out",
        str(out),
        *TINY,
        "--loss",
        "mae",
        "--epochs",
        "3",
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    (line,) = _error_lines(err)
    assert line.startswith(
        "ptycho train: error: loss became nan at epoch 1; the last good checkpoint (after epoch 0) "
        f"is kept in {out / 'checkpoint'}"
    )
    assert "Traceback" not in err
    header, _ = load_train_state(out / "checkpoint" / TRAIN_STATE)
    assert header["epoch"] == 0 and header["meta"]["history"] == []
    assert not (out / "model.keras").exists()  # no model.keras of a diverged network
    (run,) = _children(uri, parent)
    assert run.info.status == "FAILED"
    assert run.data.tags[tracking.END_REASON_TAG] == "TrainingDiverged: " + line.split(": error: ", 1)[1]
    journal = tmp_path / "results" / "mlflow" / "journal" / "train.jsonl"
    ends = [r for r in map(json.loads, journal.read_text().splitlines()) if r["op"] == "end"]
    assert [e["status"] for e in ends] == ["FAILED"]
    assert MlflowClient(uri).get_run(json.loads(parent.read_text())["run_id"]).info.status == "RUNNING"

    # --on-diverge record: the last good state becomes the model, marked FAILED; exit 0.
    proc = _ptycho(
        "--mlflow-parent",
        str(parent),
        "--mlflow-tag",
        "rule=train",
        "--threads",
        "1",
        "train",
        "--quiet",
        "--resume",
        "--on-diverge",
        "record",
        "--dataset",
        str(bad),
        "--out",
        str(out),
        *TINY,
        "--loss",
        "mae",
        "--epochs",
        "3",
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    reason = line.split(": error: ", 1)[1]
    assert [x for x in err.splitlines() if x.startswith("ptycho train: ")] == [
        f"ptycho train: warning: {reason}; recorded as a FAILED model in {out}"
    ]
    meta = json.loads((out / "model.json").read_text())
    assert meta["status"] == "FAILED" and meta["failure"] == reason and meta["history"] == []
    assert (out / "model.keras").exists()
    recorded = [r for r in _children(uri, parent) if r.info.run_id != run.info.run_id]
    assert [r.info.status for r in recorded] == ["FAILED"]
    assert recorded[0].data.tags[tracking.END_REASON_TAG] == reason


def test_a_training_records_the_schedule_the_workflow_ran_it_in(tmp_path, train_file):
    """The report's training table said 'one at a time' after a rerun with --cores 1 of
    trainings that had run two at once: each training now records its own schedule, from
    the workflow's environment (not a param: a rerun with another --cores trains nothing)."""
    from ptycho.study.schedule import AT_ONCE_ENV

    out = tmp_path / "model"
    args = (
        "--threads",
        "1",
        "train",
        "--quiet",
        "--dataset",
        str(train_file),
        "--out",
        str(out),
        *TINY,
        "--epochs",
        "1",
    )
    proc = _ptycho(*args, env=_env(**{AT_ONCE_ENV: "2"}))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((out / "model.json").read_text())["timing"]["trainings_at_once"] == 2


# -------------------------------------------------------------------------- resume
def _state(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    from ptycho.nets.train import TRAIN_STATE, load_train_state

    return load_train_state(path / "checkpoint" / TRAIN_STATE)


@pytest.mark.slow
def test_a_training_killed_mid_run_resumes_to_the_uninterrupted_result(tmp_path, train_file):
    """kill -9 after epoch 2 of 5, then ``--resume``: epochs 1-5 in model.json and in the
    resumed MLflow run, and the weights, Adam state and batch RNG of an uninterrupted run,
    bit for bit (one thread, the same seed)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    tracking.ensure_store(uri)
    parent = _parent(uri, tmp_path / "results")
    args = ("--threads", "1", "train", "--quiet", "--resume", "--dataset", str(train_file), *TINY, "--epochs", "5")
    whole = _ptycho(*args, "--out", str(tmp_path / "whole"))
    assert whole.wait(300) == 0, whole.stderr.read()[-3000:]

    track = ("--mlflow-parent", str(parent), "--mlflow-tag", "rule=train")
    out = tmp_path / "resumed"
    first = _ptycho(*track, *args, "--out", str(out))

    def two_epochs_saved() -> bool:
        try:
            return _state(out)[0]["epoch"] >= 2
        except Exception:  # not there yet, or being replaced
            return False

    _wait_for(two_epochs_saved, 300, "the state after epoch 2", first)
    first.send_signal(signal.SIGKILL)
    assert first.wait(30) == -signal.SIGKILL
    done = _state(out)[0]["epoch"]
    assert 2 <= done < 5, "the job finished before it could be killed; the test needs a slower machine"

    second = _ptycho(*track, *args, "--out", str(out))
    assert second.wait(300) == 0, second.stderr.read()[-3000:]

    meta = json.loads((out / "model.json").read_text())
    assert [h["epoch"] for h in meta["history"]] == [1, 2, 3, 4, 5]
    assert meta["resumed"][0]["after_epoch"] == done
    reference = json.loads((tmp_path / "whole" / "model.json").read_text())
    assert [h["val_loss"] for h in meta["history"]] == [h["val_loss"] for h in reference["history"]]
    got, want = _state(out), _state(tmp_path / "whole")
    assert got[0]["rng"] == want[0]["rng"]
    assert sorted(got[1]) == sorted(want[1])
    for key in want[1]:
        np.testing.assert_array_equal(got[1][key], want[1][key], err_msg=key)

    client = MlflowClient(uri)
    runs = {r.info.status: r for r in _children(uri, parent)}
    assert set(runs) == {"KILLED", "FINISHED"}  # the killed attempt was found stale by the second
    assert runs["KILLED"].data.tags[tracking.END_REASON_TAG].startswith("stale: process ")
    resumed = runs["FINISHED"]
    assert resumed.data.tags["ptycho.resumed_after_epoch"] == str(done)
    history = client.get_metric_history(resumed.info.run_id, "val_loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5]  # the whole curve, each step once

    # A finished state is not resumed: running the job again (snakemake -R) trains again.
    again = _ptycho(*args, "--out", str(out))
    stdout, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "holds the state of a finished training (5 epochs); training starts over" in stdout
    assert "resumed" not in json.loads((out / "model.json").read_text())


# --------------------------------------------------------- the tracking server goes away
@pytest.mark.slow
def test_a_job_outlives_its_tracking_server_and_replay_restores_every_value_once(tmp_path, train_file):
    from mlflow.tracking import MlflowClient

    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_server(tmp_path, port)
    results = tmp_path / "results" / "smoke"
    epochs = 40
    try:
        parent = _parent(uri, results)
        # MLflow's own HTTP retries (7 with backoff factor 2, minutes) shortened for the test.
        env = _env(
            MLFLOW_HTTP_REQUEST_MAX_RETRIES="2",
            MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="1",
            MLFLOW_HTTP_REQUEST_TIMEOUT="10",
        )
        job = _ptycho(
            "--mlflow-parent",
            str(parent),
            "--mlflow-tag",
            "rule=train",
            "--threads",
            "1",
            "train",
            "--quiet",
            "--dataset",
            str(train_file),
            "--out",
            str(results / "model"),
            *TINY,
            "--epochs",
            str(epochs),
            env=env,
        )
        journal = results / "mlflow" / "journal" / "train.jsonl"

        def epochs_journaled() -> int:
            try:
                return sum(
                    '"op":"metrics"' in line and '"val_loss"' in line for line in journal.read_text().splitlines()
                )
            except FileNotFoundError:
                return 0

        _wait_for(lambda: epochs_journaled() >= 3, 300, "three epochs logged", job)
        stop_server(server)
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, err[-3000:]
        warnings = [line for line in err.splitlines() if "stopped answering" in line]
        assert len(warnings) == 1, err[-3000:]
        assert warnings[0].startswith(f"ptycho: warning: MLflow tracking server at {uri} stopped answering (")
        assert f"python -m ptycho track replay {journal}" in warnings[0]
        assert epochs_journaled() == epochs
        assert (results / "model" / "model.json").exists()

        server = start_server(tmp_path, port)
        client = MlflowClient(uri)
        (run,) = _children(uri, parent)
        before = len(client.get_metric_history(run.info.run_id, "val_loss"))
        assert before < epochs and run.info.status == "RUNNING"  # the outage lost these until replayed

        for _ in range(2):  # replaying twice adds nothing the second time
            replay = subprocess.run(
                [sys.executable, "-m", "ptycho", "track", "replay", str(journal.parent)],
                env=_env(),
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert replay.returncode == 0, replay.stderr[-3000:]
            (done,) = [line for line in replay.stdout.splitlines() if line.startswith(f"{journal}: replayed ")]
            assert done.startswith(f"{journal}: replayed runs=1 params=") and "ends=1" in done
            run = client.get_run(run.info.run_id)
            for key in ("train_loss", "val_loss", "log_scale"):
                history = client.get_metric_history(run.info.run_id, key)
                assert sorted(m.step for m in history) == list(range(1, epochs + 1)), key
            assert run.info.status == "FINISHED"
            assert run.data.params["train.epochs"] == str(epochs)
            assert {"compile_s", "step_median_s"} <= set(run.data.metrics)
            assert {a.path for a in client.list_artifacts(run.info.run_id, "model")} == {"model/model.json"}
            # the network itself is the run's logged model, an MLflow model (MLmodel, the Keras file)
            (model,) = client.search_logged_models([run.info.experiment_id])
            assert model.source_run_id == run.info.run_id and str(model.status) == "READY"
            assert {"MLmodel", "artifacts"} <= {a.path for a in client.list_logged_model_artifacts(model.model_id)}
    finally:
        stop_server(server)


def test_replay_refuses_what_is_not_a_journal_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ptycho", "track", "replay", str(tmp_path / "nothing")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert _error_lines(proc.stderr) == [
        f"ptycho track: error: {tmp_path / 'nothing'}: no such journal file or folder; "
        "journals are in <results>/<preset>/mlflow/journal/"
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "metrics"}\nnot json\n{"op"')
    proc = subprocess.run(
        [sys.executable, "-m", "ptycho", "track", "replay", str(bad)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert _error_lines(proc.stderr) == [
        f"ptycho track: error: {bad}: line 2 is not JSON; not an MLflow journal written by ptycho"
    ]


# ------------------------------------------------------------------------ full disk
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB filesystem of its own (tmpfs, else an ext4 loop file), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited filesystem needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    tried = []
    attempt = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if attempt.returncode != 0:
        tried.append(f"tmpfs: {attempt.stderr.strip()}")
        image = tmp_path / "disk.img"
        with open(image, "wb") as fh:
            fh.truncate(4 << 20)
        mkfs = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
        attempt = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True)
        if mkfs.returncode != 0 or attempt.returncode != 0:
            tried.append(f"loop file: {(mkfs.stderr + attempt.stderr).strip()}")
            pytest.skip("no size-limited filesystem can be mounted here (" + "; ".join(tried) + ")")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """A filler file that leaves about ``leave`` bytes free on ``folder``'s filesystem."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*") if p.is_file())  # atomic_write's temporary files


@pytest.mark.slow
def test_a_full_disk_is_one_line_leaves_no_half_file_and_the_rerun_completes(small_disk, train_file):
    from ptycho.data.dataset import read_dataset

    data = small_disk / "data"
    data.mkdir()
    filler = _fill(small_disk, 150_000)  # room for the train split (about 120 kB), not the test split too
    sim = (
        "simulate",
        "--quiet",
        "--train",
        str(data / "train.h5"),
        "--test",
        str(data / "test.h5"),
        "--n",
        "16",
        "--object-size",
        "48",
        "--n-lines",
        "50",
        "--stride-train",
        "4",
        "--stride-test",
        "4",
        "--n-objects-train",
        "1",
        "--probe-kind",
        "disk",
    )
    proc = _ptycho(*sim)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    (line,) = _error_lines(err)
    assert line.startswith(
        f"ptycho simulate: error: no space left on the device of {data} while writing test.h5; nothing was written"
    )
    assert "free space there or choose another results folder, then re-run" in line
    assert "Traceback" not in err
    # simulate writes the pair or nothing: the train split it had written is removed too
    assert not (data / "test.h5").exists() and not (data / "train.h5").exists() and _leftovers(small_disk) == []

    model = small_disk / "model"
    filler.unlink()
    shutil.copy(train_file, small_disk / "train.h5")
    filler = _fill(small_disk, 20_000)  # less than one training state
    train = (
        "--threads",
        "1",
        "train",
        "--quiet",
        "--resume",
        "--dataset",
        str(small_disk / "train.h5"),
        "--out",
        str(model),
        *TINY,
        "--epochs",
        "2",
    )
    proc = _ptycho(*train)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    (line,) = _error_lines(err)
    assert line.startswith(
        f"ptycho train: error: no space left on the device of {model / 'checkpoint'} while writing "
        "train_state.npz; nothing was written"
    )
    assert not list(model.rglob("*.npz")) and not list(model.rglob("model.*")) and _leftovers(small_disk) == []

    filler.unlink()  # space freed: both commands complete
    for args in (sim, train):
        proc = _ptycho(*args)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    read_dataset(data / "train.h5")
    read_dataset(data / "test.h5")
    assert json.loads((model / "model.json").read_text())["history"][-1]["epoch"] == 2
