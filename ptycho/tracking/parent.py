"""The study's parent run: created once per results folder ('ptycho track start'), given
the table of its children and closed by the report. Sweeps ('track sweep' when the
workflow starts, each job's start, 'track finish' when it stops on an error) close what
faults left open: a child whose job went on without the tracking server gets its journal
replayed, a child of a killed job is marked KILLED, and a parent of the study that
``parent.json`` does not name (an orphan) is marked KILLED. A lost ``parent.json`` is
found again in the study's parent journal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptycho.errors import PtychoError
from ptycho.tracking.access import preflight
from ptycho.tracking.journal import (
    PARENT_JOURNAL,
    Journal,
    journal_of,
    journal_path,
    journaled_end,
    journaled_parent,
    parent_record,
)
from ptycho.tracking.provenance import (
    HOST_TAG,
    PID_START_TAG,
    PID_TAG,
    config_hash,
    git_commit,
    process_alive,
    process_identity,
    source_tags,
)
from ptycho.tracking.record import JobRecord
from ptycho.tracking.replay import replay_journals
from ptycho.tracking.runs import Run, create_journaled_run, existing_run, log_record
from ptycho.tracking.server import server_down, server_gone
from ptycho.tracking.store import (
    JOURNAL_TAG,
    KEY_TAG,
    default_tracking_uri,
    experiment_id,
    find_run,
    fit_tags,
    flatten_params,
    open_client,
    read_parent,
    retry,
)

_log = logging.getLogger(__name__)
_RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
#: How a run can end (:func:`finish_run`), the normal end first.
END_STATUSES = ("FINISHED", "FAILED", "KILLED")


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
    client = open_client(uri)
    exp_id = experiment_id(client, uri, experiment)
    book = Journal(journal) if journal is not None else None
    # The creator's identity, as a job's run has its process's: a sweep tells a parent
    # being created now from one whose 'track start' died before parent.json named it.
    run_tags = {**fit_tags(tags), **process_identity()}
    run_id = create_journaled_run(client, uri, exp_id, run_name, run_tags, book, experiment=experiment)
    try:
        Run(client, run_id, uri, book).log_params(params)
    except BaseException:
        with contextlib.suppress(Exception):
            finish_run(uri, run_id, "FAILED")
        raise
    return run_id


def finish_run(uri: str, run_id: str, status: str = END_STATUSES[0]) -> None:
    """Mark ``run_id`` terminated with ``status`` (FINISHED, FAILED or KILLED), journaled.

    A separate call because the parent outlives the process that created it: the
    pipeline's final rule closes it once every job has finished.
    """
    if status not in _RUN_STATUSES:
        raise ValueError(f"status must be one of {_RUN_STATUSES}, not {status!r}")
    existing_run(open_client(uri), uri, run_id).end(status)


def _runs(client, uri: str, parent_run_id: str, where: str, order: str = "ASC", children: bool = True) -> list:
    """The runs of the parent's experiment matching ``where`` (an MLflow filter), only its
    children unless ``children`` is False, by start time (``order``)."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    experiment = retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri).info.experiment_id
    query = " and ".join(
        [*([f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'"] * children), *([where] * bool(where))]
    )
    return retry(
        lambda: client.search_runs([experiment], query, max_results=5000, order_by=[f"attributes.start_time {order}"]),
        what="listing runs of the study",
        uri=uri,
    )


def log_children_table(uri: str, parent_run_id: str, artifact_file: str = "child_runs.json") -> int:
    """Log a table of the parent's child runs (name, rule, arm, status, duration, metrics)
    on the parent run, so that one page shows the whole pipeline; returns the row count."""
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

    client = open_client(uri)
    runs = _runs(client, uri, parent_run_id, "")
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
    existing_run(client, uri, parent_run_id).log_table(columns, artifact_file)
    return len(runs)


#: The tag that says which attempt of a job made the study's outputs: the report's job
#: sets ``current`` on the run whose answer it logs (the newest FINISHED of that name) and
#: ``superseded`` on the other runs of the same name (killed or earlier attempts), so that
#: ``tags.outputs = 'current'`` picks one run per arm.
OUTPUTS_TAG = "outputs"


def _chain(client, uri: str, parent_run_id: str, limit: int = 100) -> list[str]:
    """The study's parent runs, newest first: ``parent_run_id`` and those before it
    (:data:`PREVIOUS_TAG`), whose children made the outputs a later config did not re-run."""
    chain = [parent_run_id]
    while len(chain) < limit:
        try:
            previous = retry(lambda: client.get_run(chain[-1]), what="reading a parent run", uri=uri).data.tags.get(
                PREVIOUS_TAG
            )
        except Exception:  # a rebuilt store without the older parent: the chain ends there
            break
        if not previous or previous in chain:
            break
        chain.append(previous)
    return chain


def close_pipeline(uri: str, parent_run_id: str, others: Mapping[str, Any]) -> None:
    """The study's last step: each record of ``others`` logged on its run (by name among
    the parent's children, the newest FINISHED one, tagged :data:`OUTPUTS_TAG` ``current``
    and its other attempts ``superseded``, under this parent or one before it in the
    study's chain, :func:`_chain`; '' = the parent: the verdict, the report), the
    table of the children logged, and the parent marked FINISHED."""
    from dataclasses import replace

    client = open_client(uri)
    for name, record in others.items():
        if not name:
            log_record(existing_run(client, uri, parent_run_id), record, {})
            continue
        found = sorted(
            (
                r
                for p in _chain(client, uri, parent_run_id)
                for r in _runs(client, uri, p, f"attributes.run_name = '{name}'")
            ),
            key=lambda r: r.info.start_time or 0,
            reverse=True,
        )
        best = next((r for r in found if r.info.status == "FINISHED"), found[0] if found else None)
        if best is None:
            _log.warning(
                "no MLflow run %r under the parent run %s; its answer is in the report only", name, parent_run_id
            )
            continue
        tagged = replace(record, tags={**record.tags, OUTPUTS_TAG: "current"})
        log_record(existing_run(client, uri, best.info.run_id), tagged, {})
        for other in found:
            if other.info.run_id != best.info.run_id and other.data.tags.get(OUTPUTS_TAG) != "superseded":
                log_record(
                    existing_run(client, uri, other.info.run_id), JobRecord(tags={OUTPUTS_TAG: "superseded"}), {}
                )
    log_children_table(uri, parent_run_id)
    finish_run(uri, parent_run_id, "FINISHED")


@dataclass
class Swept:
    """What a sweep of a study's runs did, by run id."""

    #: RUNNING children whose process is gone, marked KILLED with the reason.
    killed: list[str] = field(default_factory=list)
    #: RUNNING runs whose journal holds more than the store (a job that went on, or
    #: finished, while the tracking server was gone): their journal sent again.
    replayed: list[str] = field(default_factory=list)
    #: RUNNING parent runs of the same study that ``parent.json`` no longer names, KILLED.
    orphans: list[str] = field(default_factory=list)

    def add(self, other: Swept) -> None:
        """Count what ``other`` (another sweep) did too."""
        self.killed += other.killed
        self.replayed += other.replayed
        self.orphans += other.orphans

    def lines(self) -> list[str]:
        out = []
        if self.replayed:
            out.append(
                f"replayed the journals of {len(self.replayed)} MLflow run(s) whose job went on without the "
                f"tracking server: {', '.join(self.replayed)}"
            )
        if self.killed:
            out.append(f"marked {len(self.killed)} stale MLflow run(s) of killed jobs KILLED: {', '.join(self.killed)}")
        if self.orphans:
            out.append(f"marked {len(self.orphans)} orphan MLflow parent run(s) KILLED: {', '.join(self.orphans)}")
        return out


def _replay_quietly(path: Path, run_id: str) -> bool:
    """Replay the journal ``path`` (:func:`~ptycho.tracking.replay.replay_journals`); a
    failure is a warning, never the sweep's end. True if it was replayed."""

    try:
        replay_journals([path])
    except Exception as exc:  # bookkeeping: the sweep goes on with the next run
        _log.warning("could not replay the MLflow journal %s of run %s: %s", path, run_id, exc)
        return False
    return True


def sweep_children(uri: str, parent_run_id: str, *, by: str = "") -> Swept:
    """Close what the RUNNING children of ``parent_run_id`` left open: replay, else KILLED.

    A job whose tracking server went away went on offline and journaled everything,
    its end included (:class:`~ptycho.tracking.runs.Run`): its run, RUNNING in the
    store, is not stale but behind. Its journal is replayed, which ends it as the job
    did (FINISHED, with its last metrics and model), whatever host it ran on.

    A job killed with ``kill -9`` (or by the OOM killer, or a node that rebooted)
    cannot close its run, which would stay RUNNING for good. Each child records its
    host, pid and the pid's start time (:func:`process_identity`); a RUNNING child
    whose host is this one and whose process no longer exists (or is another process
    with the same pid) is stale: what its journal holds is replayed first, then it gets
    the tag ``ptycho.end_reason`` and status KILLED. Children of other hosts without a
    journaled end, and children without these tags, are left alone: from here it cannot
    be told whether they still run. Called when a pipeline starts, when each job starts
    and when the workflow stops on an error.
    """
    client = open_client(uri)
    running = _runs(client, uri, parent_run_id, "attributes.status = 'RUNNING'")
    host = socket.gethostname()
    out = Swept()
    for run in running:
        tags, run_id = run.data.tags, run.info.run_id
        journal = Path(tags[JOURNAL_TAG]) if tags.get(JOURNAL_TAG) else None
        if journal is not None and journal.is_file() and journaled_end(journal, tags.get(KEY_TAG, run_id)):
            if _replay_quietly(journal, run_id):
                out.replayed.append(run_id)
                continue
        if tags.get(HOST_TAG) != host:
            continue
        try:
            pid = int(tags.get(PID_TAG, ""))
        except ValueError:
            continue
        if process_alive(pid, tags.get(PID_START_TAG, "")):
            continue
        if journal is not None and journal.is_file():
            _replay_quietly(journal, run_id)  # what the job logged offline before it was killed
        why = f"stale: process {pid} on {host} ended without closing this run (killed, e.g. kill -9 or out of memory)"
        reason = _end_stale(client, uri, run_id, tags, why, by)
        _log.info("MLflow run %s (%s) was stale: %s", run_id, run.info.run_name, reason)
        out.killed.append(run_id)
    return out


def _end_stale(client, uri: str, run_id: str, tags: Mapping[str, str], why: str, by: str) -> str:
    """End a run its process left open KILLED, journaled, saying ``why``, when and ``by``
    whom; returns the reason (tag ``ptycho.end_reason``)."""
    reason = f"{why}; marked KILLED at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}{' by ' + by if by else ''}"
    Run(client, run_id, uri, journal_of(tags), key=tags.get(KEY_TAG, run_id)).end("KILLED", stale=reason)
    return reason


def end_orphan_parents(uri: str, parent_run_id: str, journal: str | os.PathLike, *, by: str = "") -> Swept:
    """Mark KILLED the RUNNING parent runs of this study other than ``parent_run_id``.

    A study has one parent run, named by its ``parent.json``; every parent run carries
    the study's parent journal (tag ``ptycho.journal``) and its creator's identity from
    its creation. A RUNNING one that ``parent.json`` does not name was orphaned (its
    ``track start`` killed before it wrote ``parent.json``, or ``parent.json`` replaced):
    nothing would ever close it. Its children are swept, then it ends KILLED with the
    reason, unless its creator still runs on this host (it is being started). Returns
    what was done (``orphans``, and the children's ``killed``, ``replayed``).
    """
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = open_client(uri)
    book = str(Path(journal).resolve())
    running = _runs(client, uri, parent_run_id, "attributes.status = 'RUNNING'", children=False)
    host = socket.gethostname()
    out = Swept()
    for run in running:
        tags, run_id = run.data.tags, run.info.run_id
        if run_id == parent_run_id or tags.get(MLFLOW_PARENT_RUN_ID) or tags.get(JOURNAL_TAG) != book:
            continue
        if tags.get(HOST_TAG) == host and tags.get(PID_TAG, "").isdigit():
            if process_alive(int(tags[PID_TAG]), tags.get(PID_START_TAG, "")):
                continue
        out.add(sweep_children(uri, run_id, by=by))
        why = (
            f"orphan: the study's parent.json names parent run {parent_run_id}, not this one (its 'track start' "
            "was killed, or parent.json was lost or replaced)"
        )
        _end_stale(client, uri, run_id, tags, why, by)
        out.orphans.append(run_id)
    return out


def sweep_study(parent_json: str | os.PathLike, *, by: str = "") -> Swept:
    """:func:`sweep_children` of the study's parent, and :func:`end_orphan_parents`; one
    line naming the replay when the tracking server is gone."""

    record = parent_record(parent_json)
    uri, run_id = record["tracking_uri"], record["run_id"]
    reason = server_down(uri)
    if reason:
        raise PtychoError(server_gone(uri, reason, journal_path(parent_json, PARENT_JOURNAL).parent))
    out = sweep_children(uri, run_id, by=by)
    out.add(end_orphan_parents(uri, run_id, journal_path(parent_json, PARENT_JOURNAL), by=by))
    return out


def finish_study(parent_json: str | os.PathLike, status: str = END_STATUSES[0], *, by: str = "") -> tuple[str, Swept]:
    """End the study's parent run with ``status`` after sweeping its children; returns its id.

    The workflow's error hook: the children of jobs killed with it are closed now, not
    at the next start. When the tracking server is gone, the end is journaled (the
    re-run or a replay sends it) and the line says how to bring the server back.
    """

    if status not in _RUN_STATUSES:
        raise ValueError(f"status must be one of {_RUN_STATUSES}, not {status!r}")
    record = parent_record(parent_json)
    uri, run_id = record["tracking_uri"], record["run_id"]
    reason = server_down(uri)
    if reason:
        book = Journal(journal_path(parent_json, PARENT_JOURNAL))
        book.write("end", record.get("key") or run_id, uri, status=status, end_time=int(time.time() * 1000))
        raise PtychoError(
            f"MLflow parent run {run_id} not marked {status}, its end journaled: "
            + server_gone(uri, reason, book.path.parent)
        )
    swept = sweep_study(parent_json, by=by)
    finish_run(uri, run_id, status)
    return run_id, swept


def _adopt_parent(uri: str, out: str | os.PathLike, config: Mapping[str, Any]) -> dict | None:
    """The study's parent run as its journal names it, for a ``parent.json`` that was lost
    or never written (``track start`` killed after creating the run): the same run goes on
    instead of an orphan and a new one. Its params are completed if its creation was cut
    short. None when nothing is journaled or the store (``uri``) does not hold that run."""
    from mlflow.entities import Param

    record = journaled_parent(out)
    if record is None or record["tracking_uri"] != uri:
        return None
    client = open_client(uri)
    run_id = find_run(client, uri, record["key"]) or find_run(client, uri, record["run_id"], by_key=False)
    if run_id is None:
        return None
    if not record["complete"]:
        flat = flatten_params(config)
        Journal(journal_path(out, PARENT_JOURNAL)).write("params", record["key"], uri, params=flat)
        entities = [Param(k, v) for k, v in flat.items()]
        retry(lambda: client.log_batch(run_id, params=entities), what="logging params", uri=uri)
    print(
        f"ptycho: {out} was missing; the study's journaled parent run {run_id} goes on (no new parent run)",
        file=sys.stderr,
    )
    return {**{k: record[k] for k in ("key", "tracking_uri", "experiment", "config_hash")}, "run_id": run_id}


#: Tags that chain a study's parent runs when its configuration changed: the new parent
#: names the one before it, the old one names the one that took over (:func:`start_pipeline`).
PREVIOUS_TAG, SUPERSEDED_TAG = "previous_parent", "superseded_by"


def _create_parent(
    uri: str, config: Mapping[str, Any], experiment: str, run_name: str, tags: Mapping[str, Any], journal: Path
) -> dict:
    """A new parent run of the study, its params ``config``; its ``parent.json`` record."""
    commit = git_commit(Path.cwd())
    all_tags = dict(tags, git_commit=commit, config_hash=config_hash(config), **source_tags(commit))
    all_tags.setdefault(
        "mlflow.note.content",
        f"The study's parent run ({run_name}): its params are the resolved configuration; one child run per "
        "job. When the report has run, this description holds the verdict and the answer, the tags verdict "
        "and check.<item> each item's status, and the report is attached.",
    )
    run_id = start_parent(uri, experiment, run_name, config, all_tags, journal=journal)
    return {
        "run_id": run_id,
        "key": run_id,  # how the journals name it, whatever id a rebuilt store gives it
        "tracking_uri": uri,
        "experiment": experiment,
        # for links to the run in the MLflow UI (the report's first screen)
        "experiment_id": experiment_id(open_client(uri), uri, experiment),
        "config_hash": all_tags["config_hash"],
    }


def start_pipeline(
    config: Mapping[str, Any],
    results_dir: str,
    experiment: str,
    run_name: str,
    tags: Mapping[str, Any],
    out: str,
    log: str | None = None,
    renew: bool = False,
) -> dict:
    """Create a pipeline's parent run and write ``out`` (JSON: run id, tracking URI).

    Every job of the pipeline reads ``out`` to log as a child of this run. Called once
    per results folder by the workflow (``rules/common.smk``) and by ``ptycho track start``.
    A parent run the study's journal already holds is taken up again instead (``out``
    lost, or its ``track start`` killed before writing it: :func:`_adopt_parent`), and
    any other RUNNING parent of the study is closed as an orphan (:func:`end_orphan_parents`).

    ``renew`` (the workflow, before its first job): with ``out`` there, a new parent only
    if the configuration changed since its run was created (its config hash), so that a
    parent run describes one study and its verdict sits beside the params that produced
    it. The new run is tagged :data:`PREVIOUS_TAG` (the old one keeps its params, children
    and verdict, tagged :data:`SUPERSEDED_TAG`), and ``out`` keeps its modification time:
    it is every job's input, and a new parent must not re-run jobs whose outputs stand
    (their runs stay under the parent that made them; the report finds them along the chain).
    """

    from ptycho.artifacts import write_json

    journal = journal_path(out, PARENT_JOURNAL)
    if renew:
        old = read_parent(out)
        if old is None or old.get("config_hash") == config_hash(config):
            return old or {}
        uri = old["tracking_uri"]
        preflight(uri)
        record = _create_parent(uri, config, experiment, run_name, {**tags, PREVIOUS_TAG: old["run_id"]}, journal)
        client = open_client(uri)
        with contextlib.suppress(Exception):  # the old run may be gone from a rebuilt store: the new one stands
            log_record(existing_run(client, uri, old["run_id"]), JobRecord(tags={SUPERSEDED_TAG: record["run_id"]}), {})
        stat = os.stat(out)
        write_json(out, record)
        os.utime(out, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        print(
            f"ptycho: the study's configuration changed (config {old.get('config_hash')} -> {record['config_hash']}): "
            f"new MLflow parent run {record['run_id']} (the previous one, {old['run_id']}, keeps its own)",
            file=sys.stderr,
        )
        return record
    uri = default_tracking_uri(results_dir)
    preflight(uri)
    record = None if Path(out).exists() else _adopt_parent(uri, out, config)
    if record is None:
        record = _create_parent(uri, config, experiment, run_name, tags, journal)
    write_json(out, record)
    run_id = record["run_id"]
    try:  # an earlier parent of this study that nothing names any more
        end_orphan_parents(uri, run_id, journal, by="'ptycho track start'")
    except Exception as exc:  # bookkeeping of other runs must not stop the study
        _log.warning("could not look for orphan MLflow parent runs: %s", exc)
    if log:
        Path(log).write_text(f"MLflow parent run {run_id} at {uri}\n")
    return record
