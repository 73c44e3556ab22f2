"""The study's parent run: created once per results folder ('ptycho track start'), given
the table of its children and closed by the report; children of killed jobs are
found stale and marked KILLED here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ptycho.errors import PtychoError
from ptycho.tracking.access import preflight
from ptycho.tracking.provenance import (
    HOST_TAG,
    PID_START_TAG,
    PID_TAG,
    config_hash,
    git_commit,
    process_alive,
    source_tags,
)
from ptycho.tracking.runs import END_REASON_TAG, Journal, create_journaled_run, journal_of
from ptycho.tracking.store import (
    default_tracking_uri,
    fit_tags,
    flatten_params,
    open_client,
    retry,
    safe_key,
    sqlite_path,
)

_log = logging.getLogger(__name__)
_RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
#: How a run can end (:func:`finish_run`), the normal end first.
END_STATUSES = ("FINISHED", "FAILED", "KILLED")
#: The parent run's journal, ``journal/parent.jsonl`` beside the jobs' (no job is named so).
PARENT_JOURNAL = "parent"


def _artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts of a SQLite store go next to the database, not into the cwd.

    MLflow's default for a SQLite store is ``./mlruns`` relative to the working
    directory of whichever process created the experiment; pinning it beside the
    database keeps a results folder self-contained. Servers choose their own.
    """
    path = sqlite_path(uri)
    if path is None:
        return None
    return str(path.parent / "mlartifacts" / safe_key(experiment).replace("/", "_").replace(" ", "_"))


def _experiment_id(client, uri: str, name: str) -> str:
    """Id of experiment ``name``, creating it; safe when processes race to create it."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

    exp = retry(lambda: client.get_experiment_by_name(name), what=f"looking up experiment {name!r}", uri=uri)
    if exp is None:
        try:
            return retry(
                lambda: client.create_experiment(name, artifact_location=_artifact_location(uri, name)),
                what=f"creating experiment {name!r}",
                uri=uri,
            )
        except MlflowException as exc:
            if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
        # Another process created it between our look-up and our insert.
        _log.debug("MLflow experiment %r was created concurrently; using it", name)
        exp = retry(lambda: client.get_experiment_by_name(name), what=f"looking up experiment {name!r}", uri=uri)
        if exp is None:
            raise PtychoError(f"MLflow experiment {name!r} exists but cannot be read at {uri}; check the store")
    if exp.lifecycle_stage != "active":
        raise PtychoError(
            f"MLflow experiment {name!r} is deleted; restore it with "
            f"'mlflow experiments restore --experiment-id {exp.experiment_id}' or use another experiment name"
        )
    return exp.experiment_id


def start_parent(
    uri: str,
    experiment: str,
    run_name: str,
    params: Mapping[str, Any],
    tags: Mapping[str, Any],
    journal: str | os.PathLike | None = None,
) -> str:
    """Create the parent run of a study and return its id.

    The parent holds what all jobs share (the study configuration as flattened params,
    provenance tags); each job then opens a :func:`child_run` under it from its own
    process, by id. The experiment is created if missing, race-safely. If logging the
    params fails, the run is marked FAILED before the error propagates, so no
    half-created parent is left RUNNING. With ``journal`` (a ``.jsonl`` path) the run's
    creation and every later write to it here (artifacts, the children's table, its end)
    are journaled, so that a lost store can be rebuilt with the parent at the top.
    """
    from mlflow.entities import Param

    client = open_client(uri)
    exp_id = _experiment_id(client, uri, experiment)
    book = Journal(journal) if journal is not None else None
    run_id = create_journaled_run(client, uri, exp_id, run_name, fit_tags(tags), book, experiment=experiment)
    try:
        flat = flatten_params(params)
        if book is not None:
            book.append({"op": "params", "run_id": run_id, "uri": uri, "params": flat})
        entities = [Param(k, v) for k, v in flat.items()]
        retry(lambda: client.log_batch(run_id, params=entities), what="logging params", uri=uri)
    except BaseException:
        with contextlib.suppress(Exception):
            finish_run(uri, run_id, "FAILED")
        raise
    return run_id


def _journal(client, uri: str, run_id: str) -> Journal | None:
    """The journal of run ``run_id`` (its :data:`~ptycho.tracking.runs.JOURNAL_TAG`), or None."""
    run = retry(lambda: client.get_run(run_id), what=f"reading run {run_id}", uri=uri)
    return journal_of(run.data.tags)


def _append(book: Journal | None, op: str, run_id: str, uri: str, **fields: Any) -> None:
    if book is not None:
        book.append({"op": op, "run_id": run_id, "uri": uri, **fields})


def finish_run(uri: str, run_id: str, status: str = END_STATUSES[0]) -> None:
    """Mark ``run_id`` terminated with ``status`` (FINISHED, FAILED or KILLED), journaled.

    A separate call because the parent outlives the process that created it: the
    pipeline's final rule closes it once every job has finished.
    """
    if status not in _RUN_STATUSES:
        raise ValueError(f"status must be one of {_RUN_STATUSES}, not {status!r}")
    client = open_client(uri)
    end_time = int(time.time() * 1000)
    _append(_journal(client, uri, run_id), "end", run_id, uri, status=status, end_time=end_time)
    retry(
        lambda: client.set_terminated(run_id, status, end_time=end_time),
        what=f"marking run {run_id} {status}",
        uri=uri,
    )


def log_artifact_to(uri: str, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
    """Copy a local file or folder into the artifacts of any run, by id (e.g. the parent).

    For writes to a run this process did not open with :func:`child_run`, such as the
    final report attached to the study's parent run before :func:`finish_run`. Journaled
    (the file's path, as a job's artifacts are) when the run has a journal.
    """
    client = open_client(uri)
    _append(
        _journal(client, uri, run_id),
        "artifact",
        run_id,
        uri,
        path=os.path.abspath(os.fspath(path)),
        artifact_path=artifact_path,
    )
    retry(
        lambda: client.log_artifact(run_id, os.fspath(path), artifact_path),
        what=f"logging an artifact to run {run_id}",
        uri=uri,
    )


def write_table(client, run_id: str, columns: Mapping[str, list], artifact_file: str) -> None:
    """Log ``columns`` as the table artifact ``artifact_file`` of ``run_id``, replacing it.

    The file is what ``MlflowClient.log_table`` writes (JSON ``{"columns", "data"}``) and
    the run gets the same ``mlflow.loggedArtifacts`` entry, so the UI shows a table; but
    ``log_table`` appends to an existing table, which would repeat every row each time
    the report runs again or a journal is replayed: here the file is replaced.
    """
    import json
    import tempfile

    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    names = list(columns)
    rows = [
        [None if isinstance(v, float) and not math.isfinite(v) else v for v in row]  # JSON has no NaN
        for row in zip(*(columns[c] for c in names), strict=True)
    ]
    folder, name = os.path.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        local.write_text(json.dumps({"columns": names, "data": rows}, default=str))
        client.log_artifact(run_id, str(local), folder or None)
    listed = json.loads(client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
    entry = {"path": artifact_file, "type": "table"}
    if entry not in listed:
        client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps([*listed, entry]))


def log_children_table(uri: str, parent_run_id: str, artifact_file: str = "child_runs.json") -> int:
    """Log a table of the parent's child runs (name, rule, arm, status, duration, metrics)
    on the parent run, so that one page shows the whole pipeline; returns the row count."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    client = open_client(uri)
    experiment_id = retry(
        lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri
    ).info.experiment_id
    runs = retry(
        lambda: client.search_runs(
            [experiment_id],
            f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'",
            max_results=5000,
            order_by=["attributes.start_time ASC"],
        ),
        what="listing the child runs",
        uri=uri,
    )
    keys = sorted({k for r in runs for k in r.data.metrics if not k.startswith("system/") and not k.endswith("_image")})
    columns: dict[str, list] = {
        c: [] for c in ("run", "run_id", "rule", "model", "xla", "seed", "status", "duration_s", *keys)
    }
    for r in runs:
        tags, info = r.data.tags, r.info
        columns["run"].append(tags.get(MLFLOW_RUN_NAME, info.run_name))
        columns["run_id"].append(info.run_id)
        for tag in ("rule", "model", "xla", "seed"):
            columns[tag].append(tags.get(tag, ""))
        columns["status"].append(info.status)
        columns["duration_s"].append(round((info.end_time - info.start_time) / 1000, 1) if info.end_time else None)
        for key in keys:
            columns[key].append(r.data.metrics.get(key))
    book = _journal(client, uri, parent_run_id)
    _append(book, "table", parent_run_id, uri, artifact_file=artifact_file, columns=columns)
    retry(
        lambda: write_table(client, parent_run_id, columns, artifact_file),
        what="logging the child-run table",
        uri=uri,
    )
    return len(runs)


def close_pipeline(uri: str, parent_run_id: str, artifacts: Iterable[tuple[str, str | None]]) -> None:
    """The study's last step: ``artifacts`` (the report, its figures) attached to the
    parent run, the table of its children logged, and the parent marked FINISHED."""
    for path, folder in artifacts:
        log_artifact_to(uri, parent_run_id, path, folder)
    log_children_table(uri, parent_run_id)
    finish_run(uri, parent_run_id, "FINISHED")


def end_stale_children(uri: str, parent_run_id: str, *, by: str = "") -> list[str]:
    """Mark KILLED every RUNNING child of ``parent_run_id`` whose process is gone.

    A job killed with ``kill -9`` (or by the OOM killer, or a node that rebooted)
    cannot close its run, which would stay RUNNING for good. Each child records its
    host, pid and the pid's start time (:func:`process_identity`); a RUNNING child
    whose host is this one and whose process no longer exists (or is another process
    with the same pid) is stale: it gets the tag ``ptycho.end_reason`` and status
    KILLED. Children of other hosts, and children without these tags, are left alone:
    from here it cannot be told whether they still run. Called when a pipeline starts
    and when each job starts. Returns the ids of the runs it ended.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = open_client(uri)
    parent = retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri)
    running = retry(
        lambda: client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}' and attributes.status = 'RUNNING'",
            max_results=5000,
        ),
        what="looking for stale runs",
        uri=uri,
    )
    host = socket.gethostname()
    ended = []
    for run in running:
        tags = run.data.tags
        if tags.get(HOST_TAG) != host:
            continue
        try:
            pid = int(tags.get(PID_TAG, ""))
        except ValueError:
            continue
        if process_alive(pid, tags.get(PID_START_TAG, "")):
            continue
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        reason = (
            f"stale: process {pid} on {host} ended without closing this run (killed, e.g. kill -9 or "
            f"out of memory); marked KILLED at {when}{' by ' + by if by else ''}"
        )
        run_id = run.info.run_id
        end_time = int(time.time() * 1000)
        # Journaled as a guess ("stale"): a rebuild ignores it if the job's own end is journaled.
        _append(journal_of(tags), "end", run_id, uri, status="KILLED", end_time=end_time, stale=reason)
        retry(lambda r=run_id, t=reason: client.set_tag(r, END_REASON_TAG, t), what="tagging a stale run", uri=uri)
        retry(
            lambda r=run_id, t=end_time: client.set_terminated(r, "KILLED", end_time=t),
            what="marking a stale run KILLED",
            uri=uri,
        )
        _log.info("MLflow run %s (%s) was stale: %s", run_id, run.info.run_name, reason)
        ended.append(run_id)
    return ended


def start_pipeline(
    config: Mapping[str, Any],
    results_dir: str,
    experiment: str,
    run_name: str,
    tags: Mapping[str, Any],
    out: str,
    log: str | None = None,
) -> dict:
    """Create a pipeline's parent run and write ``out`` (JSON: run id, tracking URI).

    Every job of the pipeline reads ``out`` to log as a child of this run. Called once
    per results folder by the workflow (``rules/common.smk``) and by ``ptycho track start``.
    """

    from ptycho.artifacts import write_json
    from ptycho.tracking.job import journal_path

    uri = default_tracking_uri(results_dir)
    preflight(uri)
    commit = git_commit(Path.cwd())
    all_tags = dict(tags, git_commit=commit, config_hash=config_hash(config), **source_tags(commit))
    run_id = start_parent(uri, experiment, run_name, config, all_tags, journal=journal_path(out, PARENT_JOURNAL))
    record = {"run_id": run_id, "tracking_uri": uri, "experiment": experiment, "config_hash": all_tags["config_hash"]}
    write_json(out, record)
    if log:
        Path(log).write_text(f"MLflow parent run {run_id} at {uri}\n")
    return record
