"""Outages of the tracking layer that must heal, not hang or leave runs open (#24).

* a tracking server killed mid-study: a job still running goes on offline in seconds
  (bounded HTTP retries), a job started afterwards stops in seconds with one line naming
  the replay, ``track finish`` (the workflow's error hook) journals the parent's end in one
  line, and once the server is back the sweep replays a finished job's journal instead
  of calling it killed;
* a second ``make mlflow-server`` on a taken port: one line, non-zero;
* a full disk while logging an artifact: one line, the partial copy removed, the run
  FAILED with the reason;
* orphan parent runs (``parent.json`` lost, ``track start`` killed after creating the
  run): ``parent.json`` written again from the journal, the same parent taken up again,
  and any other RUNNING parent of the study closed by the sweep;
* the error hook sweeps: a killed job's run is KILLED when the workflow stops.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow_server import free_port, start_server

from ptycho import tracking
from ptycho.errors import PtychoError
from ptycho.tracking.journal import PARENT_JOURNAL, journal_path

ROOT = Path(__file__).resolve().parent.parent
#: What ptycho.tracking.server.SERVER_DEFAULTS sets unless the user did (unset here: a user's view).
_SERVER_SETTINGS = (
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT",
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    for key in ("MLFLOW_TRACKING_URI", *_SERVER_SETTINGS):
        env.pop(key, None)  # the project's own bounded retries, as a user gets them
    env.update(extra)
    return env


def _run(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ptycho", *args], env=_env(**env), capture_output=True, text=True, timeout=timeout
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ptycho ") and ": error: " in line]


def _study(results: Path, uri: str, monkeypatch) -> Path:
    """A study's parent run and parent.json, as 'track start' makes them."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    parent_json = results / "smoke" / "mlflow" / "parent.json"
    tracking.start_pipeline({"preset": "smoke"}, str(results), "outages", "outages-smoke", {}, str(parent_json))
    return parent_json


# A job's run in its own process: one step logged, then (on the signal file) two more and
# a normal end; the tracking server may be gone by then.
_JOB = """
import sys, time
from pathlib import Path
from ptycho.tracking.runs import child_run
uri, parent, journal, ready, go = sys.argv[1:6]
with child_run(uri, parent, "train", {"rule": "train"}, {"epochs": 3}, journal=journal) as run:
    run.log_metrics({"loss": 1.0}, step=1)
    Path(ready).write_text(run.run_id)
    while not Path(go).exists():
        time.sleep(0.05)
    run.log_metrics({"loss": 0.5}, step=2)
    run.log_metrics({"loss": 0.25}, step=3)
"""


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the job ended (rc {proc.returncode}) before {path.name}:\n{proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.1)


# ------------------------------------------------------------- the server goes away
def _start_job(tmp_path: Path, uri: str, parent: str, journal) -> tuple[subprocess.Popen, str]:
    """A job process (``_JOB``) in its own session, once its run exists: (process, run id).
    It waits for ``tmp_path/go`` before it logs its end."""
    job = subprocess.Popen(
        [sys.executable, "-c", _JOB, uri, parent, str(journal), str(tmp_path / "ready"), str(tmp_path / "go")],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _wait_for(tmp_path / "ready", job)
    return job, (tmp_path / "ready").read_text()


def _kill(server: subprocess.Popen) -> None:
    """The tracking server killed by its pid (its process group: the workers too), and reaped."""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait(30)


def test_a_server_outage_fails_fast_names_the_replay_and_the_rerun_replays_a_finished_job(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    for key in _SERVER_SETTINGS:  # the test process sets them too: restored afterwards
        monkeypatch.delenv(key, raising=False)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_server(tmp_path, port)
    results = tmp_path / "results"
    try:
        parent_json = _study(results, uri, monkeypatch)
        parent = json.loads(parent_json.read_text())["run_id"]
        journal = journal_path(parent_json, "train")

        # A second server on the same port ('make mlflow-server' twice): one line, non-zero.
        make = subprocess.run(
            ["make", "-s", "-C", str(ROOT), "mlflow-server", f"MLFLOW_PORT={port}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert make.returncode != 0, make.stdout + make.stderr
        assert make.stderr.splitlines()[0] == (
            f"make mlflow-server: error: port {port} on 127.0.0.1 is already in use (a tracking server running "
            "already?); use that one, stop it by its pid, or choose another port: MLFLOW_PORT=5002 make mlflow-server"
        )

        job, run_id = _start_job(tmp_path, uri, parent, journal)
        _kill(server)
        (tmp_path / "go").touch()
        # MLflow's own retries would hang the next write for about 4 min 20 s; bounded here.
        _, err = job.communicate(timeout=150)
        assert job.returncode == 0, err[-3000:]
        (warning,) = [line for line in err.splitlines() if "stopped answering" in line]
        assert f"python -m ptycho track replay {journal}" in warning

        # A job started now: one line in seconds (one probe), naming the replay of the journals.
        started = _run(
            "--mlflow-parent", str(parent_json), "config", "--json", "{}", "--out", str(tmp_path / "c.json"), timeout=60
        )
        assert started.returncode == 1, started.stderr[-3000:]
        assert "Traceback" not in started.stderr
        (line,) = _error_lines(started.stderr)
        assert line.startswith(f"ptycho config: error: MLflow tracking server at {uri} is unreachable (")
        assert line.endswith(
            "start it again ('make mlflow-server') and re-run: the re-run replays what the jobs journaled "
            f"meanwhile (by hand, once the server is back: python -m ptycho track replay {journal.parent})"
        )

        # The workflow's error hook: one line, the parent's end journaled, no traceback.
        finish = _run("track", "finish", "--parent", str(parent_json), "--status", "FAILED", timeout=60)
        assert finish.returncode == 1 and "Traceback" not in finish.stderr, finish.stderr[-3000:]
        (line,) = _error_lines(finish.stderr)
        assert line.startswith(f"ptycho track: error: MLflow parent run {parent} not marked FAILED, its end journaled")
        assert f"python -m ptycho track replay {journal.parent}" in line
        last = json.loads(journal_path(parent_json, PARENT_JOURNAL).read_text().splitlines()[-1])
        assert (last["op"], last["run_id"], last["status"]) == ("end", parent, "FAILED")

        # The server is back, the workflow re-run: its start's sweep replays the finished job.
        server = start_server(tmp_path, port)
        client = MlflowClient(uri)
        assert client.get_run(run_id).info.status == "RUNNING"
        sweep = _run("track", "sweep", "--parent", str(parent_json))
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        assert sweep.stdout.strip() == (
            "ptycho track sweep: replayed the journals of 1 MLflow run(s) whose job went on without the "
            f"tracking server: {run_id}"
        )
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert tracking.END_REASON_TAG not in run.data.tags
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [
            (1, 1.0),
            (2, 0.5),
            (3, 0.25),
        ]
    finally:
        _kill(server)


# ---------------------------------------------------------------------- disk full
def _job_logging(path: Path):
    def job(live):
        return tracking.record.JobRecord(summary="done", artifacts=[(str(path), "figures")])

    return job


def _one_run(uri: str, parent: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_run(parent).info.experiment_id
    (run,) = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    return run


def test_a_full_disk_while_logging_an_artifact_is_one_line_and_the_run_ends_failed(tmp_path, monkeypatch):
    """ENOSPC from the artifact copy (simulated: the copy writes half the file, then fails)."""
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = _study(results, uri, monkeypatch)
    figure = tmp_path / "figure.png"
    figure.write_bytes(b"x" * 10_000)
    copies = []

    def full(self, run_id, local_path, artifact_path=None):
        dest = Path(self.get_run(run_id).info.artifact_uri.removeprefix("file://")) / artifact_path
        dest.mkdir(parents=True, exist_ok=True)
        (dest / Path(local_path).name).write_bytes(b"x" * 5_000)
        copies.append(dest / Path(local_path).name)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(MlflowClient, "log_artifact", full)
    with pytest.raises(PtychoError) as caught:
        tracking.job_run(parent_json, "figures", _job_logging(figure), tags={"rule": "figures"})
    parent = json.loads(parent_json.read_text())["run_id"]
    run = _one_run(uri, parent)
    assert str(caught.value) == (
        f"no space left on the device of {copies[0].parent} while logging the artifact figure.png "
        f"(MLflow run {run.info.run_id}); the run ends FAILED: free space there or choose another results "
        "folder, then re-run"
    )
    assert not copies[0].exists()  # the partial copy is gone
    assert run.info.status == "FAILED"
    assert run.data.tags[tracking.END_REASON_TAG] == f"PtychoError: {caught.value}"

    # The report's artifacts attached to the parent run: the same line, not a traceback.
    with pytest.raises(PtychoError) as caught:
        tracking.close_pipeline(uri, parent, {"": tracking.record.JobRecord(artifacts=[(str(figure), "report")])})
    assert str(caught.value) == (
        f"no space left on the device of {copies[1].parent} while logging the artifact figure.png "
        f"(MLflow run {parent}); the run ends FAILED: free space there or choose another results folder, then re-run"
    )
    assert not copies[1].exists()


@pytest.fixture
def tmpfs(tmp_path):
    """An 8 MB tmpfs, unmounted afterwards (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        # lazily: this process's MLflow store may still hold the database open
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_results_folder_on_a_full_tmpfs_ends_the_run_failed_with_the_reason(tmpfs, tmp_path, monkeypatch):
    """The issue's case for real: the results folder on an 8 MB tmpfs, a figure that does not fit."""
    import sqlite3

    results = tmpfs / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = _study(results, uri, monkeypatch)
    st = os.statvfs(tmpfs)
    figure = tmp_path / "figure.png"  # outside the tmpfs: larger than what is left on it
    figure.write_bytes(os.urandom(st.f_bavail * st.f_frsize + 1_000_000))
    with pytest.raises(PtychoError) as caught:
        tracking.job_run(parent_json, "figures", _job_logging(figure), tags={"rule": "figures"})
    assert str(caught.value).startswith("no space left on the device of ")
    assert "while logging the artifact figure.png" in str(caught.value)
    assert not list(results.rglob("mlartifacts/**/figure.png"))
    with sqlite3.connect(results / "mlflow.db") as con:
        parent = json.loads(parent_json.read_text())["run_id"]
        rows = con.execute(
            "SELECT r.status, t.value FROM runs r JOIN tags p ON p.run_uuid = r.run_uuid AND p.key = "
            "'mlflow.parentRunId' LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? WHERE p.value = ?",
            (tracking.END_REASON_TAG, parent),
        ).fetchall()
    assert rows == [("FAILED", f"PtychoError: {caught.value}")]


# ------------------------------------------------------------------- orphan parents
_CREATE_PARENT = """
import sys
from ptycho import tracking
from ptycho.tracking.journal import Journal
from ptycho.tracking.runs import create_journaled_run
from ptycho.tracking.provenance import process_identity
from ptycho.tracking.store import open_client
uri, journal, complete = sys.argv[1:4]
if complete == "1":  # 'track start' killed after creating the run, before writing parent.json
    print(tracking.start_parent(uri, "outages", "outages-smoke", {"preset": "smoke"}, {"preset": "smoke"}, journal))
else:  # killed before its params were journaled
    client = open_client(uri)
    exp = client.create_experiment("outages") if client.get_experiment_by_name("outages") is None else \
        client.get_experiment_by_name("outages").experiment_id
    print(create_journaled_run(client, uri, exp, "outages-smoke", process_identity(), Journal(journal), "outages"))
"""


def _orphan(uri: str, parent_json: Path, complete: bool) -> str:
    """A parent run whose 'track start' died before parent.json named it (a real, ended process)."""
    done = subprocess.run(
        [sys.executable, "-c", _CREATE_PARENT, uri, str(journal_path(parent_json, PARENT_JOURNAL)), str(int(complete))],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1]


def test_a_lost_parent_json_is_written_again_from_the_journal_before_any_job(tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = results / "smoke" / "mlflow" / "parent.json"
    orphan = _orphan(uri, parent_json, complete=True)
    assert not parent_json.exists()
    start = MlflowClient(uri).get_run(orphan).info.start_time

    tracking.preflight_store(results, "smoke")  # what the workflow runs while it is parsed
    record = json.loads(parent_json.read_text())
    assert (record["run_id"], record["tracking_uri"], record["experiment"]) == (orphan, uri, "outages")
    assert parent_json.stat().st_mtime_ns == start * 1_000_000  # older than any job's outputs
    assert capsys.readouterr().err.strip() == (
        f"ptycho workflow: note: {parent_json} was missing; written again from the study's journal "
        f"(parent run {orphan} at {uri}), so that no finished job runs again"
    )


def test_track_start_takes_up_a_parent_whose_creation_was_cut_short(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = results / "smoke" / "mlflow" / "parent.json"
    orphan = _orphan(uri, parent_json, complete=False)
    tracking.preflight_store(results, "smoke")
    assert not parent_json.exists()  # its params are not journaled: left to 'track start'

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    record = tracking.start_pipeline(
        {"preset": "smoke", "seeds": [0]}, str(results), "outages", "x", {}, str(parent_json)
    )
    assert record["run_id"] == orphan
    assert json.loads(parent_json.read_text())["run_id"] == orphan
    run = MlflowClient(uri).get_run(orphan)
    assert run.info.status == "RUNNING" and run.data.params == {"preset": "smoke", "seeds": "[0]"}


def test_the_sweep_closes_an_orphan_parent_and_finish_finds_a_lost_parent_json(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = results / "smoke" / "mlflow" / "parent.json"
    orphan = _orphan(uri, parent_json, complete=True)
    parent_json.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # A newer parent named by parent.json (e.g. a parent.json written by hand or an older ptycho).
    current = tracking.start_parent(
        uri, "outages", "outages-smoke", {}, {}, journal=journal_path(parent_json, PARENT_JOURNAL)
    )
    parent_json.write_text(json.dumps({"run_id": current, "tracking_uri": uri, "experiment": "outages"}))

    sweep = _run("track", "sweep", "--parent", str(parent_json))
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert sweep.stdout.strip() == f"ptycho track sweep: marked 1 orphan MLflow parent run(s) KILLED: {orphan}"
    client = MlflowClient(uri)
    run = client.get_run(orphan)
    assert run.info.status == "KILLED"
    assert run.data.tags[tracking.END_REASON_TAG].startswith(
        f"orphan: the study's parent.json names parent run {current}, not this one"
    )
    assert client.get_run(current).info.status == "RUNNING"

    # parent.json deleted mid-run; a job's process killed: the error hook still finds the
    # parent (its journal), sweeps the killed job's run and ends the parent FAILED.
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\nfrom ptycho.tracking.runs import child_run\n"
            "cm = child_run(sys.argv[1], sys.argv[2], 'train', {'rule': 'train'})\n"
            "print(cm.__enter__().run_id, flush=True)\nos._exit(0)",
            uri,
            current,
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    child = killed.stdout.split()[-1]
    assert client.get_run(child).info.status == "RUNNING"
    parent_json.unlink()
    finish = _run("track", "finish", "--parent", str(parent_json), "--status", "FAILED")
    assert finish.returncode == 0, finish.stderr[-3000:]
    assert finish.stdout.splitlines() == [
        f"ptycho track finish: marked 1 stale MLflow run(s) of killed jobs KILLED: {child}",
        f"MLflow parent run {current}: FAILED",
    ]
    assert client.get_run(child).info.status == "KILLED"
    assert client.get_run(current).info.status == "FAILED"


def test_a_killed_jobs_run_is_swept_by_the_error_hook(tmp_path, monkeypatch):
    """kill -9 of a job: 'track finish --status FAILED' (the workflow's onerror) ends its run KILLED."""
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = _study(results, uri, monkeypatch)
    parent = json.loads(parent_json.read_text())["run_id"]
    job, run_id = _start_job(tmp_path, uri, parent, journal_path(parent_json, "train"))
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    finish = _run("track", "finish", "--parent", str(parent_json), "--status", "FAILED")
    assert finish.returncode == 0, finish.stderr[-3000:]
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags[tracking.END_REASON_TAG].startswith(f"stale: process {job.pid} on {socket.gethostname()}")
    assert client.get_run(parent).info.status == "FAILED"


def _fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until about ``leave`` bytes are free."""
    st = os.statvfs(disk)
    (disk / "fill").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


def test_a_full_disk_under_the_store_is_one_line_not_sqlites_traceback(tmpfs):
    """'track start' on a full disk ended in a 100-line SQLAlchemy traceback ('database or
    disk is full'); any command's full disk met outside the atomic writes is one line."""
    _fill(tmpfs, 8192)
    config = json.dumps({"study": "x", "results": str(tmpfs / "r"), "preset": "smoke"})
    done = subprocess.run(
        [sys.executable, "-m", "ptycho", "track", "start", "--out", str(tmpfs / "r/smoke/mlflow/parent.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PTYCHO_CONFIG_JSON": config},
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "ptycho track: error: no space left on the device of a file this command writes (its outputs, or its "
        "MLflow store): free space there or choose another results folder, then re-run"
    ]
    assert not (tmpfs / "r/smoke/mlflow/parent.json").exists()


def test_a_run_on_a_full_disk_stops_before_its_first_job_in_one_line(tmpfs, tmp_path):
    """A study whose results folder is on a full disk: the run's lock file, then the jobs'
    logs could not be written ('Logfile: empty file', an OSError traceback from onstart).
    Now one line before any job; with room for the logs but not the study, a warning."""
    from test_pipeline import _workdir, snakemake

    from ptycho.study.preflight import MIN_FREE_BYTES

    work = _workdir(tmp_path / "work")
    args = ("--config", "preset=smoke", f"results={tmpfs / 'r'}", "allow_results_outside=true")
    target = f"{tmpfs}/r/smoke/config.json"
    _fill(tmpfs, 0)
    done = snakemake(work, target, *args)
    lines = [x for x in done.stderr.splitlines() if x.startswith("ptycho workflow: error")]
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"ptycho workflow: error: no space left on the device of {tmpfs / 'r/smoke'}")
    assert "Traceback" not in done.stderr

    (tmpfs / "fill").unlink()
    _fill(tmpfs, MIN_FREE_BYTES // 2)  # the lock fits, the logs may not
    done = snakemake(work, target, *args)
    lines = [x for x in done.stderr.splitlines() if x.startswith("ptycho workflow: error")]
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    assert " free, less than the 4.0 MiB even the jobs' logs and records need; free space there" in lines[0]
    assert not (tmpfs / "r/smoke/config.json").exists()

    (tmpfs / "fill").unlink()  # about 8 MiB free: room for the logs, not for the study's 11 MiB
    done = snakemake(work, target, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [x for x in done.stderr.splitlines() if x.startswith("ptycho workflow: warning: the device of results")]
    assert len(warned) == 1 and "and this study writes about" in warned[0], done.stderr[-3000:]


@pytest.mark.parametrize("then", ["deleted", "made again by a job that started after"])
def test_a_store_deleted_while_a_job_logs_is_one_warning_and_the_rebuild_keeps_every_point(
    tmp_path, monkeypatch, capsys, then
):
    """mlflow.db deleted mid-run: SQLite refused the job's next write to the unlinked file
    ('attempt to write a readonly database') and the job died in a 156-line traceback; a
    job starting after it makes a new, empty store at the same path. The running job goes
    on journaling, says so in one line, and the rebuild has every point."""
    import logging

    from mlflow.tracking import MlflowClient
    from test_tracking import _forget_open_stores

    from ptycho.tracking.record import JobRecord

    results = tmp_path / "results"
    uri = f"sqlite:///{results / 'mlflow.db'}"
    parent_json = _study(results, uri, monkeypatch)
    db = results / "mlflow.db"

    def job(live):
        live(1, {"loss": 2.0})
        db.unlink()
        if then != "deleted":
            # what the next job's start does (in its own process) before it says the parent is gone
            code = f"from ptycho import tracking; tracking.ensure_store({uri!r})"
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
            assert db.exists()
        live(2, {"loss": 1.0})
        return JobRecord(metrics={"final_loss": 1.0})

    quiet = logging.getLogger("mlflow.store.db.utils")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # as the CLI does: MLflow logs every SQL error it raises
    try:
        tracking.job_run(parent_json, "train", job, tags={"rule": "train"}, name="pinn-off-s0")
    finally:
        quiet.setLevel(level)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("ptycho")]  # MLflow's INFO lines of the store's creation aside
    assert "Traceback" not in err
    journal = results / "smoke" / "mlflow" / "journal" / "pinn-off-s0.jsonl"
    assert lines == [
        f"ptycho: warning: MLflow store {db} was deleted or moved while logging metrics; the job goes on and keeps "
        f"what it logs in {journal}; when the run ends, rebuild the store from the journals: "
        f"python -m ptycho track rebuild {results}"
    ]
    _forget_open_stores()
    db.unlink(missing_ok=True)  # a new, empty store: the rebuild makes its own
    done = subprocess.run(
        [sys.executable, "-m", "ptycho", "track", "rebuild", str(results)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("outages").experiment_id], filter_string="attributes.run_name = 'pinn-off-s0'"
    )
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(1, 2.0), (2, 1.0)]
    assert run.data.metrics["final_loss"] == 1.0 and run.info.status == "FINISHED"
