"""The MLflow tracking layer against a real SQLite store (no mocks of MLflow).

The pipeline runs up to eight ``ptycho`` processes at once against one store, so the
tests that matter most start real processes together: eight children of one parent
logging 40 steps each must leave exactly 8 x 40 values per metric, and four processes
creating the same experiments on a brand-new database must all succeed. A store that is
lost or damaged is rebuilt from the journals with everything it held, once, and the
workflow says so in one line before any job.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from mlflow_server import fake_server

from ptycho import tracking
from ptycho.errors import PtychoError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"


@pytest.fixture
def client(uri):
    from mlflow.tracking import MlflowClient

    tracking.ensure_store(uri)
    return MlflowClient(uri)


# ------------------------------------------------------------------ helpers, URIs
def test_default_tracking_uri_prefers_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking.default_tracking_uri(tmp_path / "r") == "http://127.0.0.1:5000"
    assert not (tmp_path / "r").exists()


def test_default_tracking_uri_is_an_absolute_sqlite_file(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    got = tracking.default_tracking_uri("results/sub")
    assert got == f"sqlite:///{tmp_path / 'results' / 'sub' / 'mlflow.db'}"
    assert got.startswith("sqlite:////")
    assert (tmp_path / "results" / "sub").is_dir()


def test_flatten_params_config_hash_and_git_commit(tmp_path):
    flat = tracking.flatten_params({"model": {"lr": 1e-3, "layers": [8, 16], "opt": {}}, "bad key!": "x" * 7000})
    assert flat["model.lr"] == "0.001"
    assert flat["model.layers"] == "[8, 16]"
    assert flat["model.opt"] == "{}"
    assert len(flat["bad key_"]) == 6000 and flat["bad key_"].endswith("[truncated]")

    assert tracking.config_hash({"a": 1, "b": {"c": 2}}) == tracking.config_hash({"b": {"c": 2}, "a": 1})
    assert tracking.config_hash({"a": 1}) != tracking.config_hash({"a": 2})
    assert len(tracking.config_hash({})) == 16

    assert tracking.git_commit(tmp_path) == ""  # not a checkout
    assert tracking.git_commit(tmp_path / "missing") == ""
    sha = tracking.git_commit(REPO)
    assert sha == "" or len(sha) == 40


# ------------------------------------------------------------------------ preflight
def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_preflight_reads_each_answer_of_a_server_as_mlflow_gives_it():
    """An answer passes (200; 401 and 403 are authentication, the jobs carry the
    credentials); MLflow's host-name refusal, a 404 off its API, a redirect urllib does
    not follow and a server error are one line each."""
    answers = {}
    with fake_server(lambda request: answers["now"]) as port:
        uri = f"http://127.0.0.1:{port}"
        for code, body, said in [
            (200, b"{}", ""),
            (401, b"Unauthorized", ""),
            (403, b"Permission denied", ""),
            (403, b"Invalid Host header - possible DNS rebinding attack detected", "refuses requests addressed to"),
            (404, b"Not Found", "has no MLflow tracking API (HTTP 404"),
            (304, b"", "is unreachable (HTTP 304"),
            (500, b"boom", "is unreachable (HTTP 500"),
        ]:
            answers["now"] = (code, body)
            if not said:
                tracking.preflight(uri, timeout=5)
                continue
            with pytest.raises(PtychoError, match=re.escape(said)):
                tracking.preflight(uri, timeout=5)


def test_preflight_unreachable_server_is_one_line():
    uri = f"http://127.0.0.1:{_unused_port()}"
    with pytest.raises(PtychoError) as err:
        tracking.preflight(uri, timeout=2)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"MLflow tracking server at {uri} is unreachable (")
    assert "make mlflow-server" in msg and "unset MLFLOW_TRACKING_URI" in msg


def test_preflight_sqlite_and_file_store(uri, tmp_path):
    tracking.preflight(uri)  # creates the folder; nothing else
    assert (tmp_path / "results").is_dir()
    with pytest.raises(PtychoError, match="file store"):
        tracking.preflight(f"file://{tmp_path}/mlruns")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_preflight_unwritable_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PtychoError, match="not writable"):
            tracking.preflight(f"sqlite:///{folder / 'mlflow.db'}")
    finally:
        folder.chmod(0o700)


# ------------------------------------------------------------- a job's record
def test_log_record_sends_everything_a_job_reports_and_nests_its_arm_runs(uri, client, tmp_path):
    # The CLI's one tracking hook: what a job returns (ptycho.study.jobs) reaches its run.
    from ptycho.tracking.record import DatasetInput, JobRecord, NestedRun
    from ptycho.tracking.runs import log_record

    parent = tracking.start_parent(uri, "study", "p", params={}, tags={})
    report = tmp_path / "report.json"
    report.write_text("{}")
    data = tmp_path / "test.h5"
    data.write_bytes(b"x")
    record = JobRecord(
        params={"model.depth": 3},
        tags={"status": "PASS"},
        datasets=[DatasetInput("test.h5", "a" * 64, str(data), "test")],
        metrics={"amp_ssim": 0.9},
        stepped=[(0, {"amp_ssim_image": 0.8}), (1, {"amp_ssim_image": 1.0})],
        artifacts=[(str(report), "report")],
        nested=[NestedRun("benchmark-pinn-jit", {"xla": "jit"}, {"arm.xla": "jit"}, {"step_median_s": 0.1})],
        failure="diverged at epoch 3",
    )
    job_tags = {"rule": "benchmark", "xla": "off"}
    with tracking.child_run(uri, parent, "benchmark", job_tags) as run:
        log_record(run, record, job_tags)
    r = client.get_run(run.run_id)
    assert r.info.status == "FAILED" and r.data.tags[tracking.END_REASON_TAG] == "diverged at epoch 3"
    assert r.data.params == {"model.depth": "3"} and r.data.tags["status"] == "PASS"
    assert r.data.metrics["amp_ssim"] == 0.9
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "amp_ssim_image")] == [(0, 0.8), (1, 1.0)]
    assert [a.path for a in client.list_artifacts(run.run_id, "report")] == ["report/report.json"]
    assert r.inputs.dataset_inputs[0].dataset.name == "test.h5"
    (arm,) = [x for x in client.search_runs([r.info.experiment_id]) if x.info.run_name == "benchmark-pinn-jit"]
    assert arm.data.tags["mlflow.parentRunId"] == run.run_id
    assert arm.data.tags["rule"] == "benchmark" and arm.data.tags["xla"] == "jit"  # the job's tags, its own win
    assert arm.data.params == {"arm.xla": "jit"} and arm.data.metrics == {"step_median_s": 0.1}


def test_a_new_kind_of_logged_value_is_a_record_field_and_its_kind(uri, client, tmp_path, monkeypatch):
    # One place (ptycho/tracking/record.py): a JobRecord field and its KINDS entry. Here a
    # text artifact, added by this module alone: logged live, journaled, and sent again by
    # a replay into a store that lost the run, with what the replay counts.
    import dataclasses

    from ptycho.tracking import record as rec
    from ptycho.tracking.runs import log_record

    @dataclasses.dataclass
    class WithNotes(rec.JobRecord):
        notes: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    kind = rec.Kind(
        send=lambda client, run_id, line: client.log_text(run_id, line["text"], line["file"]),
        what=lambda line: f"logging the note {line['file']}",
        line=lambda note: {"file": note[0], "text": note[1]},
        values=lambda r: getattr(r, "notes", []),
        count=("artifacts", ""),
    )
    monkeypatch.setitem(rec.KINDS, "note", kind)
    journal = tmp_path / "journal" / "job.jsonl"
    parent = tracking.start_parent(uri, "study", "p", params={}, tags={}, journal=tmp_path / "journal" / "parent.jsonl")
    with tracking.child_run(uri, parent, "job", {"rule": "x"}, journal=journal) as run:
        log_record(run, WithNotes(metrics={"m": 1.0}, notes=[("notes/why.txt", "because")]), {})
    assert Path(client.download_artifacts(run.run_id, "notes/why.txt", str(tmp_path))).read_text() == "because"

    other = f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"  # a store that never held the run
    replayed = tracking.replay_journals([journal], other)
    (counts,) = [c for path, c in replayed.files if path == journal.resolve()]
    assert counts["artifacts"] == 1 and counts["metrics"] == 1 and counts["created"] == 1  # the parent: its own file
    again = tracking.store.open_client(other)
    (copy,) = [
        r for r in again.search_runs([e.experiment_id for e in again.search_experiments()]) if r.info.run_name == "job"
    ]
    assert [a.path for a in again.list_artifacts(copy.info.run_id, "notes")] == ["notes/why.txt"]


def test_job_run_names_tags_and_journals_a_commands_run(uri, client, tmp_path, monkeypatch, capsys):
    # What `ptycho --mlflow-parent P --mlflow-tag rule=train --mlflow-tag model=pinn ... train` opens.
    from ptycho.tracking.journal import journal_path
    from ptycho.tracking.record import JobRecord

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("PTYCHO_CONFIG_HASH", "feedface")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    parent_json = tmp_path / "results" / "smoke" / "mlflow" / "parent.json"
    parent = tracking.start_pipeline({"preset": "smoke"}, str(tmp_path / "results"), "study", "p", {}, str(parent_json))
    with tracking.child_run(uri, parent["run_id"], "killed-before", {"rule": "train"}) as stale:
        pass  # a finished run: not stale
    done = []

    def job(live):
        live(0, {"loss": 2.0})
        live(1, {"loss": 1.0})
        return JobRecord(metrics={"final": 1.0}, summary="trained")

    tags = {"rule": "train", "model": "pinn", "xla": "jit", "seed": "0", "other": "x"}
    params = {"arm.model": "pinn", "arm.xla": "jit", "arm.seed": "0"}
    record = tracking.job_run(
        parent_json, "train", job, tags=tags, name="pinn-jit-s0", params=params, system_metrics=False, done=done.append
    )
    assert done == [record] and record.summary == "trained"
    (r,) = [x for x in client.search_runs([client.get_run(parent["run_id"]).info.experiment_id])
            if x.info.run_name == "pinn-jit-s0"]  # fmt: skip
    assert r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == parent["run_id"]
    assert r.data.params == {"arm.model": "pinn", "arm.xla": "jit", "arm.seed": "0"}
    assert {k: r.data.tags[k] for k in ("command", "config_hash", "slurm_job_id", "other", "mlflow.source.name")} == {
        "command": "train",
        "config_hash": "feedface",
        "slurm_job_id": "42",
        "other": "x",
        "mlflow.source.name": "ptycho",
    }
    assert [m.value for m in client.get_metric_history(r.info.run_id, "loss")] == [2.0, 1.0]
    assert r.data.metrics["final"] == 1.0
    assert journal_path(parent_json, "pinn-jit-s0").is_file()
    assert journal_path(parent_json, "a/b") == parent_json.parent / "journal" / "a_b.jsonl"
    assert stale.run_id != r.info.run_id and "stale" not in capsys.readouterr().err
    # no name: the command names the run
    tracking.job_run(parent_json, "inspect", lambda live: JobRecord())
    assert journal_path(parent_json, "inspect").is_file()


# ------------------------------------------------------------- parent and children
def test_parent_with_children(uri, client, tmp_path):
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT, MLFLOW_PARENT_RUN_ID

    parent = tracking.start_parent(
        uri,
        "study",
        "xla-vs-eager",
        params={"sim": {"n": 64, "probe": {"kind": "defocused"}}, "seeds": [1, 2]},
        tags={"git_commit": "abc", "config_hash": tracking.config_hash({"n": 64})},
    )
    data = tmp_path / "train.h5"
    data.write_bytes(b"not really hdf5")
    artifact = tmp_path / "timings.json"
    artifact.write_text("{}")

    with tracking.child_run(uri, parent, "train-pinn", tags={"job": "train"}, params={"model": {"lr": 0.001}}) as run:
        for step in range(5):
            run.log_metrics({"loss": 1.0 / (step + 1), "ssim": 0.1 * step}, step=step)
        run.log_metrics({"psnr": 30.5}, step=4)
        run.log_metrics({"diverged": float("nan"), "blowup": float("inf")}, step=5)
        run.log_params({"epochs": 5})
        run.set_tags({"xla": True})
        summary = tmp_path / "summary.json"
        summary.write_text('{"a": 1}')
        run.log_artifact(summary)
        run.log_artifact(artifact, artifact_path="bench")
        run.log_dataset("train", "f" * 64, data, "train")
        good = run.run_id

    with pytest.raises(ValueError, match="boom"):
        with tracking.child_run(uri, parent, "train-broken", tags={"job": "train"}) as run:
            run.log_metrics({"loss": 1.0}, step=0)
            raise ValueError("boom")
    bad = run.run_id

    assert client.get_run(parent).info.status == "RUNNING"
    tracking.existing_run(tracking.store.open_client(uri), uri, parent).log_artifact(artifact, "report")
    tracking.finish_run(uri, parent)

    p = client.get_run(parent)
    assert p.info.status == "FINISHED"
    assert p.info.run_name == "xla-vs-eager"
    assert p.data.params == {"sim.n": "64", "sim.probe.kind": "defocused", "seeds": "[1, 2]"}
    assert p.data.tags["git_commit"] == "abc"
    assert [a.path for a in client.list_artifacts(parent, "report")] == ["report/timings.json"]
    exp = client.get_experiment(p.info.experiment_id)
    assert exp.name == "study"
    assert exp.artifact_location.endswith("results/mlartifacts/study")  # beside the DB, not in the cwd

    g = client.get_run(good)
    assert g.info.status == "FINISHED" and g.info.run_name == "train-pinn"
    assert g.data.tags[MLFLOW_PARENT_RUN_ID] == parent
    assert g.data.tags["job"] == "train" and g.data.tags["xla"] == "True"
    assert g.data.params == {"model.lr": "0.001", "epochs": "5"}
    loss = sorted((m.step, m.value) for m in client.get_metric_history(good, "loss"))
    assert loss == [(s, 1.0 / (s + 1)) for s in range(5)]
    assert [m.step for m in client.get_metric_history(good, "ssim")] == list(range(5))
    assert g.data.metrics["psnr"] == 30.5
    assert math.isnan(client.get_metric_history(good, "diverged")[0].value)
    assert client.get_metric_history(good, "blowup")[0].value > 1e300  # SQL store's stand-in for inf
    assert g.data.tags[tracking.NONFINITE_TAG] == "blowup,diverged"
    assert {a.path for a in client.list_artifacts(good)} == {"summary.json", "bench"}
    (ds,) = g.inputs.dataset_inputs
    assert ds.dataset.name == "train" and ds.dataset.digest == "f" * 36
    assert json.loads(ds.dataset.profile)["digest"] == "f" * 64
    assert json.loads(ds.dataset.source)["uri"] == str(data)
    assert {t.key: t.value for t in ds.tags}[MLFLOW_DATASET_CONTEXT] == "train"

    b = client.get_run(bad)
    assert b.info.status == "FAILED"
    assert b.data.tags[MLFLOW_PARENT_RUN_ID] == parent
    assert [m.value for m in client.get_metric_history(bad, "loss")] == [1.0]


def test_an_interrupt_that_a_library_wrapped_or_a_clean_up_replaced_ends_the_run_killed(uri, client):
    # Ctrl-C reaches a job wherever it is: inside a library that turns it into its own
    # error, or in a clean-up that fails on the way out. The job stopped because it was
    # told to, so its run ends KILLED with the interruption as the reason, not FAILED.
    parent = tracking.start_parent(uri, "study", "p", params={}, tags={})
    ended = {}
    for name, error in (("wrapped", "raise_from"), ("replaced", "context"), ("broken", None)):
        with pytest.raises(BaseException) as raised:
            with tracking.child_run(uri, parent, name, {"rule": "train"}) as run:
                if error is None:
                    raise ValueError("not an interrupt")
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt as interrupt:
                    if error == "raise_from":
                        raise RuntimeError("UnknownError: KeyboardInterrupt in a callback") from interrupt
                    raise OSError("clean-up on the way out failed")  # noqa: B904 (the chain is the point)
        assert not isinstance(raised.value, KeyboardInterrupt)  # the job's own error still propagates
        r = client.get_run(run.run_id)
        ended[name] = (r.info.status, r.data.tags[tracking.END_REASON_TAG].split(":")[0])
    assert ended == {
        "wrapped": ("KILLED", "interrupted"),
        "replaced": ("KILLED", "interrupted"),
        "broken": ("FAILED", "ValueError"),
    }


def test_logged_model_system_metrics_and_the_child_table(uri, client, tmp_path):
    from mlflow.entities import LoggedModelStatus

    parent = tracking.start_parent(uri, "study", "p", params={}, tags={})
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.keras").write_bytes(b"weights")
    (model_dir / "model.json").write_text("{}")
    data = tmp_path / "train.h5"
    data.write_bytes(b"x")
    journal = tmp_path / "journal" / "train.jsonl"
    with tracking.child_run(
        uri,
        parent,
        "train-pinn-off-s0",
        tags={"rule": "train", "model": "pinn", "xla": "off"},
        params={"model": "pinn"},
        journal=journal,
    ) as run:
        with tracking.system_metrics(run, interval=60):  # shorter than one interval: still sampled once
            run.log_dataset("train.h5", "d" * 64, data, "train")
            run.log_model(
                "pinn-off-s0",
                model_dir,
                params={"model.filters": 32},
                tags={"xla": "off"},
                step=3,
                metrics={"final_val_loss": 0.25},
                dataset=("train.h5", "d" * 64),
            )
    with tracking.child_run(uri, parent, "evaluate-pinn-off-s0", tags={"rule": "evaluate", "model": "pinn"}) as ev:
        ev.log_metrics({"amp_ssim": 0.7})

    (model,) = client.search_logged_models([client.get_run(parent).info.experiment_id])
    assert model.name == "pinn-off-s0" and model.source_run_id == run.run_id
    assert model.status == LoggedModelStatus.READY and model.params == {"model.filters": "32"}
    assert {m.key: (m.value, m.step, m.dataset_name) for m in model.metrics} == {
        "final_val_loss": (0.25, 3, "train.h5")
    }
    assert sorted(a.path for a in client.list_logged_model_artifacts(model.model_id)) == ["model.json", "model.keras"]
    r = client.get_run(run.run_id)
    assert [o.model_id for o in r.outputs.model_outputs] == [model.model_id]
    assert 0 <= r.data.metrics["system/cpu_utilization_percentage"] <= 100
    assert r.data.metrics["system/system_memory_usage_megabytes"] > 0

    # The journal replays the model idempotently: still one model, one value per metric.
    counts = tracking.replay_journals([journal]).files[0][1]
    assert counts["models"] == 1
    assert len(client.search_logged_models([r.info.experiment_id])) == 1
    assert len(client.get_metric_history(run.run_id, "final_val_loss")) == 1

    assert tracking.log_children_table(uri, parent) == 2
    local = client.download_artifacts(parent, "child_runs.json", str(tmp_path / "dl"))
    table = json.loads(Path(local).read_text())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert [(x["run"], x["rule"], x["status"]) for x in rows] == [
        ("train-pinn-off-s0", "train", "FINISHED"),
        ("evaluate-pinn-off-s0", "evaluate", "FINISHED"),
    ]
    assert rows[1]["amp_ssim"] == 0.7 and rows[0]["final_val_loss"] == 0.25
    assert not any(c.startswith("system/") for c in table["columns"])


def test_child_of_a_missing_parent_is_a_one_line_error(uri, client):
    with pytest.raises(PtychoError, match="parent run 0123abc not found") as err:
        with tracking.child_run(uri, "0123abc", "orphan", tags={}):
            pass
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- locks
def _hold_exclusive_lock(db: Path, seconds: float) -> threading.Thread:
    """Lock ``db`` like a long writer would (BEGIN EXCLUSIVE) for ``seconds``."""
    ready = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(db, timeout=30, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        ready.set()
        time.sleep(seconds)
        con.execute("COMMIT")
        con.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    ready.wait(10)
    return thread


def test_retry_rides_out_a_real_sqlite_lock(tmp_path):
    db = tmp_path / "scratch.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x INTEGER)").connection.commit()
    retries: list[str] = []

    def write() -> None:
        con = sqlite3.connect(db, timeout=0)  # no busy wait: every collision raises
        try:
            con.execute("INSERT INTO t VALUES (1)")
            con.commit()
        finally:
            con.close()

    holder = _hold_exclusive_lock(db, 0.8)
    tracking.store.retry(write, what="testing", uri="sqlite:///scratch", on_retry=retries.append)
    holder.join()
    assert retries and set(retries) == {"locked"}
    assert sqlite3.connect(db).execute("SELECT count(*) FROM t").fetchone() == (1,)  # written once

    holder = _hold_exclusive_lock(db, 2.0)
    with pytest.raises(PtychoError, match="stayed locked for 0 s while testing") as err:
        tracking.store.retry(write, what="testing", uri="sqlite:///scratch", budget=0.3)
    holder.join()
    assert "\n" not in str(err.value)


def test_a_held_lock_delays_but_loses_nothing(uri, client, tmp_path):
    """A writer holding the database for 1.5 s: MLflow's busy timeout or our retry waits it out."""
    parent = tracking.start_parent(uri, "study", "p", params={}, tags={})
    with tracking.child_run(uri, parent, "c", tags={}) as run:
        run.log_metrics({"loss": 1.0}, step=0)
        holder = _hold_exclusive_lock(tmp_path / "results" / "mlflow.db", 1.5)
        t0 = time.monotonic()
        run.log_metrics({"loss": 0.5}, step=1)
        waited = time.monotonic() - t0
        holder.join()
    assert waited > 1.0
    assert sorted((m.step, m.value) for m in client.get_metric_history(run.run_id, "loss")) == [(0, 1.0), (1, 0.5)]


# ------------------------------------------------------------- concurrent processes
#: Imported once by the fork server, so that eight workers do not each spend seconds
#: importing MLflow on a two-core machine. The fork server itself never opens a
#: database, so no SQLite connection is ever shared across a fork.
_PRELOAD = ["mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "ptycho.tracking"]


def _spawn(code: str, args_per_worker: list[dict], sync: Path, timeout: float = 150) -> list[dict]:
    """Run ``code`` in one fresh process per ``args``, release them together, return their results.

    Workers are real processes (multiprocessing ``forkserver``: forked from a server
    that has only imported MLflow). Each touches ``ready-<i>`` and waits for ``go``, so
    the writes start at the same moment, then stores ``result`` as ``result-<i>.json``.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    procs = []
    for i, args in enumerate(args_per_worker):
        scope = {"__name__": "__worker__", "sync": sync, "idx": i, **args}
        procs.append(ctx.Process(target=exec, args=(_BARRIER + code + _RESULT, scope), daemon=True))
        procs[-1].start()
    try:
        deadline = time.monotonic() + timeout
        while not all((sync / f"ready-{i}").exists() for i in range(len(procs))):
            assert all(p.exitcode in (None, 0) for p in procs), "a worker died before the start (see stderr)"
            assert time.monotonic() < deadline, "workers did not get ready in time"
            time.sleep(0.02)
        (sync / "go").touch()
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        assert [p.exitcode for p in procs] == [0] * len(procs), "a worker failed (see stderr)"
        return [json.loads((sync / f"result-{i}.json").read_text()) for i in range(len(procs))]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


_BARRIER = """
import json, time
from ptycho import tracking
(sync / f"ready-{idx}").touch()
while not (sync / "go").exists():
    time.sleep(0.01)
t0 = time.monotonic()
"""

_RESULT = """
(sync / f"result-{idx}.json").write_text(json.dumps(result))
"""

_CHILD_WORKER = """
with tracking.child_run(uri, parent, f"worker-{idx}", tags={"worker": idx}, params={"worker": idx, "opt": {"lr": 1e-3}}) as run:
    run.log_dataset("train", "d" * 64, sync / "train.h5", "train")  # the same dataset from every worker
    for step in range(steps):
        run.log_metrics({"loss": idx + step / 100, "psnr": 20 + step, "ssim": step / steps}, step=step)
    run.log_params({"late": idx})
    run.set_tags({"done": "yes"})
result = {"run_id": run.run_id, "retries": run.retries, "seconds": time.monotonic() - t0}
"""


def test_eight_concurrent_children_lose_and_duplicate_nothing(uri, client, tmp_path):
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    workers, steps = 8, 40
    parent = tracking.start_parent(uri, "study", "concurrency", params={"workers": workers}, tags={})
    sync = tmp_path / "sync"
    sync.mkdir()
    t0 = time.monotonic()
    results = _spawn(_CHILD_WORKER, [{"uri": uri, "parent": parent, "steps": steps}] * workers, sync)
    wall = time.monotonic() - t0
    tracking.finish_run(uri, parent)

    exp_id = client.get_run(parent).info.experiment_id
    children = client.search_runs([exp_id], filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent}'")
    assert len(children) == workers
    assert {c.info.run_id for c in children} == {r["run_id"] for r in results}
    for child in children:
        idx = int(child.data.tags["worker"])
        assert child.info.status == "FINISHED"
        assert child.data.params == {"worker": str(idx), "opt.lr": "0.001", "late": str(idx)}
        assert child.data.tags["done"] == "yes"
        expected = {
            "loss": [(s, idx + s / 100) for s in range(steps)],
            "psnr": [(s, 20.0 + s) for s in range(steps)],
            "ssim": [(s, s / steps) for s in range(steps)],
        }
        for key, want in expected.items():
            history = client.get_metric_history(child.info.run_id, key)
            assert len(history) == steps, (key, idx, len(history))  # none lost, none duplicated
            assert sorted((m.step, m.value) for m in history) == want
        assert len(child.inputs.dataset_inputs) == 1
    locked = sum(r["retries"]["locked"] for r in results)
    conflict = sum(r["retries"]["conflict"] for r in results)
    print(
        f"\n{workers} workers x {steps} steps: {wall:.1f} s wall; retries: {locked} locked, {conflict} conflict; "
        f"worker logging s {[round(r['seconds'], 1) for r in results]}"
    )


_PARENT_WORKER = """
import logging
raced = []
class Catch(logging.Handler):
    def emit(self, record):
        raced.append(record.getMessage())
log = logging.getLogger("ptycho.tracking")
log.setLevel(logging.DEBUG)
log.addHandler(Catch())
tracking.ensure_store(uri)  # all at once on a new file: the migration race
(sync / f"stored-{idx}").touch()  # second barrier, so the experiment races start together too
while len(list(sync.glob("stored-*"))) < workers:
    time.sleep(0.002)
run_ids = [tracking.start_parent(uri, f"shared-{k}", f"parent-{idx}", params={"i": idx}, tags={}) for k in range(3)]
result = {"run_ids": run_ids, "raced": sum("created concurrently" in m for m in raced)}
"""


def test_processes_racing_on_a_new_store_share_one_experiment(uri, tmp_path):
    """Four processes: first-time schema migration, then three experiment-creation races.

    Every process must succeed and each experiment must exist once, holding all four
    parents. Whether a given race is lost (creation fails with RESOURCE_ALREADY_EXISTS
    and the process adopts the winner's experiment) depends on timing; the count is
    printed with ``-s``.
    """
    from mlflow.tracking import MlflowClient

    workers = 4
    sync = tmp_path / "sync"
    sync.mkdir()
    assert not (tmp_path / "results" / "mlflow.db").exists()
    results = _spawn(_PARENT_WORKER, [{"uri": uri, "workers": workers}] * workers, sync)

    client = MlflowClient(uri)
    for k in range(3):
        exps = [e for e in client.search_experiments() if e.name == f"shared-{k}"]
        assert len(exps) == 1
        runs = client.search_runs([exps[0].experiment_id])
        assert sorted(r.info.run_id for r in runs) == sorted(r["run_ids"][k] for r in results)
        assert len(runs) == workers
    print(f"\nexperiment creations lost to a concurrent process: {sum(r['raced'] for r in results)} of {3 * workers}")


# ------------------------------------------------------- the store rebuilt from the journals
def store_snapshot(uri: str) -> dict:
    """Everything a study's store holds, run ids replaced by run names (a run's key is its
    experiment and the names of its ancestors and itself), so that a store rebuilt with
    new ids compares equal to the original: per run its status, start and end times,
    params, tags, every metric point (step, timestamp, value), artifacts, datasets and
    model outputs; per logged model its run, params, tags, status, metrics and files.
    Values are compared by their ``repr`` (NaN equals NaN)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    out: dict = {}
    for exp in client.search_experiments():
        runs = client.search_runs([exp.experiment_id], max_results=5000)
        by_id = {r.info.run_id: r for r in runs}

        def name(run, by_id=by_id) -> str:
            parent = by_id.get(run.data.tags.get("mlflow.parentRunId", ""))
            return (name(parent) + "/" if parent else "") + run.info.run_name

        def artifacts(run_id: str, folder: str | None = None) -> list[str]:
            found = []
            for a in client.list_artifacts(run_id, folder):
                found += artifacts(run_id, a.path) if a.is_dir else [a.path]
            return found

        for r in runs:
            out.setdefault((exp.name, name(r)), []).append(
                {
                    "status": r.info.status,
                    "start": r.info.start_time,
                    "end": r.info.end_time,
                    "params": r.data.params,
                    # ids differ in a rebuilt store: the parent's id, and the key tag naming the run's first id
                    "tags": {k: v for k, v in r.data.tags.items() if k not in ("mlflow.parentRunId", "ptycho.key")},
                    "metrics": {
                        k: sorted(
                            (m.step, m.timestamp, repr(m.value)) for m in client.get_metric_history(r.info.run_id, k)
                        )
                        for k in r.data.metrics
                    },
                    "artifacts": sorted(artifacts(r.info.run_id)),
                    "datasets": sorted(
                        (d.dataset.name, d.dataset.digest, d.dataset.source, *sorted((t.key, t.value) for t in d.tags))
                        for d in r.inputs.dataset_inputs
                    ),
                    "model_outputs": [o.step for o in r.outputs.model_outputs] if r.outputs else [],
                }
            )
        for m in client.search_logged_models([exp.experiment_id]):
            out.setdefault((exp.name, "model " + m.name, name(by_id[m.source_run_id])), []).append(
                {
                    "params": m.params,
                    "tags": m.tags,
                    "status": str(m.status),
                    "metrics": sorted((x.key, x.value, x.step, x.timestamp, x.dataset_name) for x in m.metrics or []),
                    "files": sorted(a.path for a in client.list_logged_model_artifacts(m.model_id)),
                }
            )
    return out


def metric_points(snapshot: dict) -> int:
    """The metric points of every run of a :func:`store_snapshot`, counted."""
    return sum(len(p) for key, runs in snapshot.items() if len(key) == 2 for r in runs for p in r["metrics"].values())


def _forget_open_stores() -> None:
    """Make this process see the SQLite files as a new process would: MLflow keeps each
    store's engine, and with it open connections that would go on reading a file moved
    aside or deleted since (and SQLite would never see the new file at that path)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service import utils
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    utils._artifact_repos_cache.clear()  # and each run's and model's artifact folder, by id
    for engine in SqlAlchemyStore._engine_map.values():
        engine.dispose()
    SqlAlchemyStore._engine_map.clear()
    _tracking_store_registry._get_store_with_resolved_uri.cache_clear()


def _track(*args: str) -> tuple[int, str, str]:
    """``python -m ptycho track ARGS`` as a new process would run it, in this one (its
    environment and SIGTERM handler restored)."""
    import contextlib
    import io
    import signal
    from unittest import mock

    from ptycho.cli import main

    _forget_open_stores()
    out, err = io.StringIO(), io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)
    with mock.patch.dict(os.environ), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["track", *args])
        except SystemExit as exc:  # argparse
            code = exc.code
        finally:
            signal.signal(signal.SIGTERM, handler)
            _forget_open_stores()
    return code, out.getvalue(), err.getvalue()


def _tracked_study(work: Path, jobs: bool = True, files: Path | None = None) -> Path:
    """A small study as the workflow tracks it, in ``work/results/smoke``: the parent run
    (``track start``), a training job (params, tags, metrics at steps, a dataset, an
    artifact, a logged model), a benchmark job with a nested run, and the report's
    closing of the parent (artifact, children's table, FINISHED); only the parent run
    without ``jobs``. Returns parent.json."""
    from ptycho.tracking.record import DatasetInput, JobRecord, LoggedModel, NestedRun

    parent_json = work / "results" / "smoke" / "mlflow" / "parent.json"
    config = {"preset": "smoke", "train": {"epochs": 2}}
    parent = tracking.start_pipeline(
        config, str(work / "results"), "study", "study-smoke", {"preset": "smoke"}, str(parent_json)
    )
    if not jobs:
        return parent_json
    files = files or work  # where the job's outputs are (the pipeline's: in the results folder)
    data = files / "train.h5"
    data.write_bytes(b"x")
    model = files / "model"
    model.mkdir()
    (model / "model.keras").write_bytes(b"weights")
    (model / "model.json").write_text("{}")
    report = files / "report.json"
    report.write_text("{}")

    def train(live):
        live(1, {"loss": 2.0, "val_loss": float("nan")})
        live(2, {"loss": 1.0, "val_loss": 1.5})
        return JobRecord(
            params={"train.lr": 0.1},
            tags={"status": "ok"},
            datasets=[DatasetInput("train.h5", "d" * 64, str(data), "train")],
            metrics={"final_loss": 1.0},
            artifacts=[(str(report), "report")],
            model=LoggedModel(
                "pinn-off-s0",
                str(model),
                {"filters": 4},
                {"xla": "off"},
                {"final_loss": 1.0},
                2,
                ("train.h5", "d" * 64),
            ),
        )

    arm = {"rule": "train", "model": "pinn", "xla": "off", "seed": "0"}
    tracking.job_run(parent_json, "train", train, tags=arm, name="pinn-off-s0")
    nested = NestedRun("bench-pinn-off", {"xla": "off"}, {"arm.xla": "off"}, {"step_median_s": 0.1})
    tracking.job_run(
        parent_json, "bench", lambda live: JobRecord(metrics={"s": 0.1}, nested=[nested]), tags={"rule": "bench"}
    )
    # the report's job: the verdict and the report on the parent, the arm's answer on its run
    others = {"": JobRecord(tags={"verdict": "PASS"}, artifacts=[(str(report), "report")])}
    others["pinn-off-s0"] = JobRecord(metrics={"amp_ssim": 0.9, "quality_time_s": 12.0})
    tracking.close_pipeline(parent["tracking_uri"], parent["run_id"], others)
    return parent_json


def test_a_lost_store_is_rebuilt_from_the_journals_once(tmp_path, monkeypatch):
    # Issue 24, item 1: with the SQLite file moved aside, `track replay <journal folder>`
    # refused ("run ... does not exist") and the pipeline stopped at "parent run not found".
    from mlflow.tracking import MlflowClient

    from ptycho.tracking.journal import journal_path
    from ptycho.tracking.record import JobRecord

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent_json = _tracked_study(tmp_path)
    first = json.loads(parent_json.read_text())
    uri, db = first["tracking_uri"], tmp_path / "results" / "mlflow.db"
    journal = parent_json.parent / "journal"
    # A stale-run sweep that guessed KILLED after the job had ended on its own (as when it
    # finished offline): the job's own end wins in a rebuild, as it does in the store.
    train_id = next(json.loads(line)["run_id"] for line in journal_path(parent_json, "pinn-off-s0").open())
    with journal_path(parent_json, "pinn-off-s0").open("a") as fh:
        fh.write(
            json.dumps({"op": "end", "run_id": train_id, "uri": uri, "status": "KILLED", "end_time": 1, "stale": "x"})
            + "\n"
        )
    before = store_snapshot(uri)
    assert {k[1] for k in before if len(k) == 2} == {
        "study-smoke",
        "study-smoke/pinn-off-s0",
        "study-smoke/bench",
        "study-smoke/bench/bench-pinn-off",
    }
    assert metric_points(before) >= 6 and any(k[1] == "model pinn-off-s0" for k in before)
    stamp = parent_json.stat().st_mtime_ns

    # The issue's command, into an empty store: the whole tree comes back, with new ids.
    db.rename(tmp_path / "aside.db")
    code, out, err = _track("replay", str(journal))
    assert code == 0, err
    assert store_snapshot(uri) == before
    rebuilt = json.loads(parent_json.read_text())
    assert rebuilt["run_id"] != first["run_id"] and rebuilt["tracking_uri"] == uri
    assert MlflowClient(uri).get_run(rebuilt["run_id"]).info.run_name == "study-smoke"
    assert parent_json.stat().st_mtime_ns == stamp  # Snakemake re-runs no job for it
    assert f"{parent_json}: the study's parent run is now {rebuilt['run_id']}" in out

    # Again, and the README's command: nothing is added.
    for args in (("replay", str(journal)), ("rebuild", "results")):
        code, out, err = _track(*args)
        assert code == 0, err
        assert store_snapshot(uri) == before
    assert "0 run(s) created again, 4 already there" in out

    # The pipeline carries on under the rebuilt parent, and the store is lost once more:
    # runs journaled under new ids and under the first ids rebuild as one tree.
    tracking.job_run(parent_json, "figures", lambda live: JobRecord(metrics={"n": 3.0}), tags={"rule": "figures"})
    tracking.finish_run(uri, rebuilt["run_id"], "FINISHED")
    grown = store_snapshot(uri)
    assert ("study", "study-smoke/figures") in grown
    db.unlink()
    code, out, err = _track("rebuild", "results")
    assert code == 0, err
    assert "5 run(s) created again, 0 already there" in out
    assert store_snapshot(uri) == grown
    assert metric_points(store_snapshot(uri)) == metric_points(grown)


def test_journals_an_older_rebuild_extended_with_rebuilt_lines_still_find_its_runs(tmp_path, monkeypatch):
    # Versions 1bd3668..bdde171 rebuilt a lost store without tagging the runs with their
    # key: they appended {"op": "rebuilt", "run_id": <new id>, "from": <key>} to the
    # journal that created each run and wrote parent.json with the new id and no key.
    # Such a folder must replay into that store without creating a run, give its parent
    # back from the journal when parent.json is lost, and rebuild once more when lost.
    from mlflow.tracking import MlflowClient

    from ptycho.tracking.access import restore_parent_json
    from ptycho.tracking.journal import journaled_parent

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent_json = _tracked_study(tmp_path)
    first = json.loads(parent_json.read_text())
    uri, db, journal = first["tracking_uri"], tmp_path / "results" / "mlflow.db", parent_json.parent / "journal"
    before = store_snapshot(uri)
    db.rename(tmp_path / "aside.db")
    assert _track("replay", str(journal))[0] == 0
    # The store as the older version left it: new ids, no key tags, `rebuilt` lines.
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("study").experiment_id
    new_id = {r.data.tags["ptycho.key"]: r.info.run_id for r in client.search_runs([exp], max_results=100)}
    for run_id in new_id.values():
        client.delete_tag(run_id, "ptycho.key")
    for path in sorted(journal.glob("*.jsonl")):
        keys = [json.loads(line)["run_id"] for line in path.open() if '"op":"run"' in line]
        with path.open("a") as fh:
            for key in keys:
                line = {"op": "rebuilt", "run_id": new_id[key], "from": key, "uri": uri, "name": "x"}
                fh.write(json.dumps(line) + "\n")
    old = {k: v for k, v in first.items() if k != "key"}
    parent_json.write_text(json.dumps({**old, "run_id": new_id[first["key"]]}))
    held = store_snapshot(uri)
    assert held == before

    code, out, err = _track("rebuild", "results")
    assert code == 0, err
    assert "0 run(s) created again, 4 already there" in out
    assert store_snapshot(uri) == before

    parent_json.unlink()
    got = journaled_parent(parent_json)
    assert (got["run_id"], got["key"], got["complete"]) == (new_id[first["key"]], first["key"], True)
    assert "written again from the study's journal" in restore_parent_json(parent_json)
    assert json.loads(parent_json.read_text())["run_id"] == new_id[first["key"]]

    db.unlink()
    code, out, err = _track("rebuild", "results")
    assert code == 0, err
    assert "4 run(s) created again, 0 already there" in out
    assert store_snapshot(uri) == before


def test_a_damaged_store_is_moved_aside_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent_json = _tracked_study(tmp_path)
    uri, db = json.loads(parent_json.read_text())["tracking_uri"], tmp_path / "results" / "mlflow.db"
    before = store_snapshot(uri)
    os.truncate(db, db.stat().st_size // 2)

    code, out, err = _track("replay", str(parent_json.parent / "journal"))
    assert code != 0
    assert err.strip().splitlines() == [
        f"ptycho track: error: MLflow store {db} is damaged (database disk image is malformed); "
        "rebuild it from the journals: python -m ptycho track rebuild results"
    ]
    code, out, err = _track("rebuild", "results")
    assert code == 0, err
    (aside,) = tmp_path.glob("results/mlflow.db.damaged-*")
    assert out.startswith(f"moved the damaged MLflow store {db} (database disk image is malformed) aside to {aside}\n")
    assert store_snapshot(uri) == before


def test_a_results_folder_copied_or_moved_elsewhere_opens_with_its_own_artifacts(tmp_path, monkeypatch):
    # Issue 32, item 3: MLflow stores artifact locations absolute, so a copied results
    # folder read the original's files and a moved one lost them (and the workflow
    # refused it: parent.json named the old store).
    import shutil

    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = tmp_path / "first"
    first.mkdir()
    monkeypatch.chdir(first)
    parent_json = _tracked_study(first, files=first / "results" / "smoke")
    before = repr(store_snapshot(json.loads(parent_json.read_text())["tracking_uri"]))
    shutil.copytree(first, tmp_path / "copy")
    first.rename(tmp_path / "moved")  # the original is gone: nothing may read it
    for work in (tmp_path / "copy", tmp_path / "moved"):
        monkeypatch.chdir(work)
        stamp = (work / "results" / "smoke" / "mlflow" / "parent.json").stat().st_mtime_ns
        assert _workflow_check(work) == ""  # relocated while the workflow is parsed
        record = json.loads((work / "results" / "smoke" / "mlflow" / "parent.json").read_text())
        assert record["tracking_uri"] == f"sqlite:///{work / 'results' / 'mlflow.db'}"
        assert (work / "results" / "smoke" / "mlflow" / "parent.json").stat().st_mtime_ns == stamp
        assert tracking.follow_folder(work / "results") == []  # once is enough
        _forget_open_stores()
        client = MlflowClient(record["tracking_uri"])
        parent = client.get_run(record["run_id"])
        assert parent.info.artifact_uri.startswith(str(work / "results" / "mlartifacts"))
        report = client.download_artifacts(record["run_id"], "report/report.json", str(work / "dl"))
        assert Path(report).read_text() == "{}"
        (model,) = client.search_logged_models([parent.info.experiment_id])
        assert model.artifact_location.startswith(str(work / "results" / "mlartifacts"))
        assert sorted(a.path for a in client.list_logged_model_artifacts(model.model_id)) == [
            "model.json",
            "model.keras",
        ]
        # the same store as before, read here; and rebuilt from the journals here, the same again
        assert repr(store_snapshot(record["tracking_uri"])) == before.replace(str(first), str(work))
        (work / "results" / "mlflow.db").unlink()
        code, out, err = _track("rebuild", "results")
        assert code == 0 and "missing_files=0" in out, err
        assert repr(store_snapshot(record["tracking_uri"])) == before.replace(str(first), str(work))


def _workflow_check(work: Path) -> str:
    """What the workflow says while it is parsed (rules/common.smk), '' if it goes on."""
    import yaml

    from ptycho.study.preflight import parse_time_checks

    base = yaml.safe_load((REPO / "config.yaml").read_text())
    try:
        # the experiment _tracked_study names (a study renamed on a results folder is refused)
        parse_time_checks(base, {"preset": "smoke", "study": "study"}, work)
    except PtychoError as exc:
        return f"ptycho workflow: error: {exc}"
    return ""


@pytest.mark.parametrize(
    "damage", ["truncated", "moved aside", "emptied", "parent.json lost too", "parent.json behind a rebuild"]
)
def test_a_damaged_or_lost_store_is_one_line_at_workflow_start(tmp_path, monkeypatch, damage):
    # Issue 24, item 1: a truncated store let a rerun say "Nothing to be done" (and
    # `-R report` print 340 lines and delete the report); a moved one stopped the first
    # job at "MLflow parent run ... not found".
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent_json = _tracked_study(tmp_path, jobs=False)
    run_id = json.loads(parent_json.read_text())["run_id"]
    db = tmp_path / "results" / "mlflow.db"
    assert _workflow_check(tmp_path) == ""
    fix = "; rebuild it from the journals: python -m ptycho track rebuild results"
    if damage == "truncated":
        os.truncate(db, db.stat().st_size // 2)
        expected = f"MLflow store {db} is damaged (database disk image is malformed){fix}"
    elif damage == "moved aside":
        db.rename(tmp_path / "elsewhere.db")
        expected = f"MLflow store {db} is missing (moved or deleted), with parent run {run_id} of {parent_json}{fix}"
    elif damage == "emptied":
        db.write_bytes(b"")
        expected = f"MLflow store {db} does not hold parent run {run_id} of {parent_json}{fix}"
    elif damage == "parent.json behind a rebuild":
        # the store holds the parent only under a new id, tagged with this one as its key;
        # the jobs ask for this id, so the check does too
        record = json.loads(parent_json.read_text())
        db.unlink()
        assert _track("rebuild", "results")[0] == 0
        parent_json.write_text(json.dumps(record))
        expected = f"MLflow store {db} does not hold parent run {run_id} of {parent_json}{fix}"
    else:
        db.unlink()
        parent_json.unlink()
        expected = f"MLflow store {db} is missing (moved or deleted), with the runs journaled in {parent_json.parent / 'journal'}{fix}"
    listing = sorted(tmp_path.rglob("*"))
    said = _workflow_check(tmp_path)
    assert said == f"ptycho workflow: error: {expected}"
    assert sorted(tmp_path.rglob("*")) == listing  # the check wrote nothing

    code, out, err = _track("rebuild", "results")
    assert code == 0, err
    assert _workflow_check(tmp_path) == ""
    assert json.loads(parent_json.read_text())["run_id"] != run_id


def test_the_reports_job_tags_which_attempt_of_an_arm_made_its_outputs(tmp_path, monkeypatch):
    """The README's filter gave 11 runs for 6 arms: KILLED attempts under the same names.
    The report's job tags the run whose answer it logs ``outputs = current`` and the arm's
    other attempts ``superseded``; the compare link of ``track ui`` lists the current ones."""
    from mlflow.tracking import MlflowClient

    from ptycho.tracking.access import pinn_arm_runs
    from ptycho.tracking.record import JobRecord

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent = json.loads(_tracked_study(tmp_path).read_text())
    client = MlflowClient(parent["tracking_uri"])
    experiment = client.get_run(parent["run_id"]).info.experiment_id
    tags = {"mlflow.parentRunId": parent["run_id"], "rule": "train", "model": "pinn"}
    older = client.create_run(experiment, start_time=1, tags=tags, run_name="pinn-off-s0").info.run_id
    client.set_terminated(older, "FINISHED")
    killed = client.create_run(experiment, tags=tags, run_name="pinn-off-s0").info.run_id
    client.set_terminated(killed, "KILLED")
    others = {"pinn-off-s0": JobRecord(metrics={"amp_ssim": 0.9})}
    tracking.close_pipeline(parent["tracking_uri"], parent["run_id"], others)
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent['run_id']}' and tags.rule = 'train'")
    outputs = {r.info.run_id: r.data.tags.get("outputs") for r in runs}
    (current,) = [run_id for run_id, tag in outputs.items() if tag == "current"]
    assert current not in (older, killed) and outputs[older] == outputs[killed] == "superseded"
    assert client.get_run(current).data.metrics["amp_ssim"] == 0.9
    assert pinn_arm_runs(tmp_path / "results")["smoke"][1] == [current]


def test_a_changed_config_gets_a_new_parent_run_and_the_old_keeps_its_own(tmp_path, monkeypatch):
    """The verdict of a re-run with another config sat on the first run's parent, beside
    params (precision, epochs, config hash) that did not produce it. ``track start --renew``
    (the workflow's onstart) makes a new parent when the config changed; parent.json keeps
    its time, so no finished job re-runs, and the report still finds the arms' runs."""
    import os

    from mlflow.tracking import MlflowClient

    from ptycho.tracking import config_hash
    from ptycho.tracking.access import pinn_arm_runs
    from ptycho.tracking.record import JobRecord

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    parent_json = _tracked_study(tmp_path)
    first = json.loads(parent_json.read_text())
    config = {"preset": "smoke", "train": {"epochs": 2}}
    same = tracking.start_pipeline(config, "results", "study", "study-smoke", {}, str(parent_json), renew=True)
    assert same["run_id"] == first["run_id"]  # nothing changed: the same parent
    os.utime(parent_json, ns=(1_000_000_000, 1_000_000_000))
    changed = {"preset": "smoke", "train": {"epochs": 3}}
    new = tracking.start_pipeline(changed, "results", "study", "study-smoke", {}, str(parent_json), renew=True)
    assert new["run_id"] != first["run_id"] and new["config_hash"] == config_hash(changed)
    assert json.loads(parent_json.read_text()) == new and parent_json.stat().st_mtime_ns == 1_000_000_000
    client = MlflowClient(first["tracking_uri"])
    old_run, new_run = client.get_run(first["run_id"]), client.get_run(new["run_id"])
    assert old_run.data.params["train.epochs"] == "2" and new_run.data.params["train.epochs"] == "3"
    assert (
        old_run.data.tags["superseded_by"] == new["run_id"] and new_run.data.tags["previous_parent"] == first["run_id"]
    )
    assert old_run.data.tags["verdict"] == "PASS"  # the old study's verdict stays with it
    # the report of the new config: its verdict on the new parent, the arm's answer on the arm's run (under the old)
    others = {"": JobRecord(tags={"verdict": "FAIL"}), "pinn-off-s0": JobRecord(metrics={"amp_ssim": 0.5})}
    tracking.close_pipeline(new["tracking_uri"], new["run_id"], others)
    assert client.get_run(new["run_id"]).data.tags["verdict"] == "FAIL"
    assert client.get_run(first["run_id"]).data.tags["verdict"] == "PASS"
    ((arm,),) = [ids for _, ids in pinn_arm_runs(tmp_path / "results").values()]
    assert client.get_run(arm).data.metrics["amp_ssim"] == 0.5 and client.get_run(arm).info.run_name == "pinn-off-s0"


def test_two_threads_that_find_the_server_gone_at_once_warn_once_and_journal_every_line(tmp_path, capsys):
    """The system-metrics thread logs into the job's run beside the job's own thread: when
    the server goes, both writes fail, but the run goes offline once, with one warning."""
    from ptycho.tracking.journal import Journal
    from ptycho.tracking.runs import Run

    class GoneServer:  # every call fails slowly, as MLflow's retries do, so that the two overlap
        def __getattr__(self, name):
            def call(*args, **kwargs):
                time.sleep(0.2)
                raise ConnectionRefusedError(111, "Connection refused")

            return call

    journal = Journal(tmp_path / "train.jsonl")
    run = Run(GoneServer(), "r1", "http://127.0.0.1:9", journal)
    start = threading.Barrier(2)

    def write(key: str) -> None:
        start.wait()
        for step in range(3):
            run.log_metrics({key: float(step)}, step=step)

    threads = [threading.Thread(target=write, args=(key,)) for key in ("val_loss", "system/cpu")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "stopped answering" in line]
    assert len(warnings) == 1, warnings
    lines = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert sorted((m[0], m[3]) for line in lines for m in line["metrics"]) == sorted(
        (key, step) for key in ("val_loss", "system/cpu") for step in range(3)
    )
