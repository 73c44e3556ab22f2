"""A job's journal sent again to a tracking store ('ptycho track replay'), idempotently:
runs found by id, metrics with their first timestamps, so a second replay adds nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptycho.errors import PtychoError
from ptycho.tracking.access import preflight
from ptycho.tracking.runs import END_REASON_TAG, _log_dataset, _log_model
from ptycho.tracking.store import open_client, retry

_log = logging.getLogger(__name__)


def _read_journal(path: Path) -> list[dict]:
    records = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise PtychoError(f"{path}: cannot read the MLflow journal ({exc.strerror})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):  # a job killed mid-line: everything before it is whole
                _log.warning("%s: last line is incomplete; skipped", path)
                continue
            raise PtychoError(f"{path}: line {number} is not JSON; not an MLflow journal written by ptycho") from None
    return records


def journal_files(paths: list[str]) -> list[Path]:
    """The ``.jsonl`` files among ``paths``, folders searched recursively; sorted."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.rglob("*.jsonl")))
        elif p.is_file():
            out.append(p)
        else:
            raise PtychoError(
                f"{p}: no such journal file or folder; journals are in <results>/<preset>/mlflow/journal/"
            )
    return out


def _replay_record(client: Any, target: str, run_id: str, rec: dict, counts: dict[str, int], path: Path) -> None:
    """Send one journal record to run ``run_id`` at ``target`` (see :func:`replay_journal`)."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    def send(what: str, fn: Callable[[], Any]) -> None:
        retry(fn, what=what, uri=target, conflicts=what.startswith("logging dataset"))

    op = rec["op"]
    if op == "params":
        params = [Param(k, v) for k, v in rec["params"].items()]
        send("replaying params", lambda: client.log_batch(run_id, params=params))
        counts["params"] += len(params)
    elif op in ("tags", "run"):
        tags = [RunTag(k, v) for k, v in rec.get("tags", {}).items()]
        send("replaying tags", lambda: client.log_batch(run_id, tags=tags))
        counts["tags"] += len(tags)
    elif op == "metrics":
        metrics = [Metric(k, float(v), int(t), int(s)) for k, v, t, s in rec["metrics"]]
        tags = [RunTag(k, v) for k, v in rec.get("tags", {}).items()]
        send("replaying metrics", lambda: client.log_batch(run_id, metrics=metrics, tags=tags))
        counts["metrics"] += len(metrics)
    elif op == "artifact":
        if not os.path.exists(rec["path"]):
            _log.warning("%s: artifact %s is gone; not replayed", path, rec["path"])
            counts["missing_files"] += 1
            return
        send("replaying an artifact", lambda: client.log_artifact(run_id, rec["path"], rec.get("artifact_path")))
        counts["artifacts"] += 1
    elif op == "dataset":
        send(
            "logging dataset",
            lambda: _log_dataset(client, run_id, rec["name"], rec["digest"], rec["source"], rec["split"]),
        )
    elif op == "model":
        send(
            "replaying a logged model",
            lambda: _log_model(client, run_id, **{k: v for k, v in rec.items() if k not in ("op", "run_id", "uri")}),
        )
        counts["models"] += 1
    elif op == "end":
        if rec["status"] == "FINISHED":
            # A job that finished offline may have been marked KILLED as stale meanwhile.
            with contextlib.suppress(MlflowException):
                client.delete_tag(run_id, END_REASON_TAG)
        send(
            "replaying the run's status",
            lambda: client.set_terminated(run_id, rec["status"], end_time=rec.get("end_time")),
        )
        counts["ends"] += 1


def replay_journal(path: str | os.PathLike, uri: str | None = None) -> dict[str, int]:
    """Send everything a job's journal recorded to MLflow again; idempotent.

    For a job that went on after the tracking server stopped answering (or any job:
    replaying a complete journal changes nothing). Params are identical values (MLflow
    accepts them again), tags are upserts, metrics carry their original timestamps (an
    exact duplicate is dropped by MLflow), artifacts are uploaded again to the same
    path, and the run's final status is set. ``uri`` overrides the tracking URI stored
    in the journal (e.g. the server's new address); the runs must exist there. Returns
    counts of what was sent, by kind.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

    path = Path(path)
    counts = {
        "runs": 0,
        "params": 0,
        "metrics": 0,
        "tags": 0,
        "artifacts": 0,
        "models": 0,
        "ends": 0,
        "missing_files": 0,
    }
    checked: set[tuple[str, str]] = set()
    for rec in _read_journal(path):
        target = uri or rec.get("uri", "")
        run_id = rec.get("run_id", "")
        if not target or not run_id or "op" not in rec:
            raise PtychoError(f"{path}: a record without op, run_id or uri; not an MLflow journal written by ptycho")
        if target.startswith(("http://", "https://")) and not any(t == target for t, _ in checked):
            preflight(target)
        client = open_client(target)
        if (target, run_id) not in checked:
            try:
                retry(lambda c=client, r=run_id: c.get_run(r), what="reading a journaled run", uri=target)
            except MlflowException as exc:
                if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                    raise
                raise PtychoError(
                    f"{path}: run {run_id} does not exist at {target}; replay into the store it was created in "
                    "(--tracking-uri)"
                ) from None
            checked.add((target, run_id))
            counts["runs"] += 1

        _replay_record(client, target, run_id, rec, counts, path)
    return counts
