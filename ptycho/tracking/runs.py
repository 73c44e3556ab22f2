"""A job's child run: every write retried on locks, journaled, and carried on offline.

Faults mid-run: each child run is tagged with its host, pid and the pid's start time,
so that :func:`~ptycho.tracking.parent.sweep_children` can close (KILLED, with the reason in the tag
``ptycho.end_reason``) the runs of jobs that were killed outright; and a :class:`Run`
with a :class:`Journal` appends every write to a local JSON-lines file first, goes on
without the server when it stops answering, and :func:`~ptycho.tracking.replay.replay_journals` sends the file
again later, idempotently.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ptycho.artifacts import no_space
from ptycho.errors import PtychoError, causes
from ptycho.tracking.journal import Journal, journal_of
from ptycho.tracking.provenance import process_identity
from ptycho.tracking.record import END_REASON_TAG, KINDS, NOTE_TAG, DatasetInput, JobRecord, Kind, LoggedModel, send
from ptycho.tracking.server import server_down, server_gone, track_command, unreachable
from ptycho.tracking.store import (
    JOURNAL_TAG,
    KEY_TAG,
    fit,
    fit_tags,
    limit,
    open_client,
    retry,
    sqlite_path,
)

_log = logging.getLogger(__name__)

#: Tag listing the metric keys that received NaN or +-inf (the SQL store keeps NaN but
#: stores +-inf as +-1.797e308, so the tag says which numbers are not what they seem).
NONFINITE_TAG = "ptycho.nonfinite_metrics"


def _file_identity(path: Path | None) -> tuple[int, int] | None:
    """``(device, inode)`` of a file, or None (no file, or not a file store)."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st is not None else None


class Run:
    """One child run, bound to a client and a run id; every write retried on locks.

    A small wrapper instead of MLflow's fluent functions so that the run is explicit
    (no process-global active run) and each write goes through :func:`retry`.
    :attr:`retries` counts the retries this object's writes needed, by reason, so
    callers and tests can see contention without module-level counters.

    With a :class:`Journal`, every write is first appended to it. If the tracking
    server stops answering (after MLflow's own retries with backoff), the run goes
    *offline*: one warning line says where the journal is and how to replay it, the
    job carries on, and later writes go to the journal only.
    Without a journal a lost server is an error, as before.

    One lock serialises a run's writes: the system-metrics thread (:func:`system_metrics`)
    logs into the same run as the job's own thread, and without it both could find the
    server gone at once and each warn, or interleave their journal lines.
    """

    def __init__(self, client: Any, run_id: str, uri: str, journal: Journal | None = None, key: str = ""):
        self._client = client
        self._run_id = run_id
        self._key = key or run_id  # how the journal names the run (its first id)
        self._uri = uri
        self._journal = journal
        self._offline = ""
        self._exit_status = "FINISHED"
        self._retries = {"locked": 0, "conflict": 0}
        self._nonfinite: set[str] = set()
        self._store = _file_identity(sqlite_path(uri))  # the store file this run was made in
        self._lock = threading.RLock()

    @property
    def run_id(self) -> str:
        """The MLflow run id."""
        return self._run_id

    @property
    def uri(self) -> str:
        """The tracking URI this run lives at."""
        return self._uri

    @property
    def retries(self) -> dict[str, int]:
        """Retries so far: ``"locked"`` (store busy) and ``"conflict"`` (concurrent insert)."""
        return dict(self._retries)

    @property
    def journal(self) -> Journal | None:
        return self._journal

    def _count(self, reason: str) -> None:
        self._retries[reason] += 1

    def log(self, op: str, value: Any) -> None:
        """Log one value of kind ``op`` (:data:`~ptycho.tracking.record.KINDS`): journal its
        line, then send it, retried on locks. Offline if the server is gone (with a
        journal); a full disk is a one-line :class:`PtychoError` (a copy that did not fit
        removed first, so that the run's FAILED can still be stored)."""
        with self._lock:
            self._log(op, value)

    def _log(self, op: str, value: Any) -> None:
        kind = KINDS[op]
        fields = kind.line(value)
        if op == "metrics":  # +-inf is stored as +-1.797e308: the tag says which keys are not what they seem
            self._nonfinite.update(k for k, v, _, _ in fields["metrics"] if not math.isfinite(v))
            if self._nonfinite:
                fields["tags"] = {NONFINITE_TAG: fit(",".join(sorted(self._nonfinite)), limit("MAX_TAG_VAL_LENGTH"))}
        line = {"op": op, "run_id": self._key, "uri": self._uri, **fields}
        if self._journal is not None:
            self._journal.write(**line)
        if self._offline:
            return
        what = kind.what(line)
        try:
            retry(
                lambda: send(self._client, self._run_id, line),
                what=what,
                uri=self._uri,
                conflicts=kind.conflicts,
                on_retry=self._count,
            )
        except Exception as exc:
            if no_space(exc):
                raise PtychoError(self._disk_full(what, kind, line)) from None
            db = sqlite_path(self._uri)
            if db is not None and _file_identity(db) != self._store and self._journal is not None:
                # Deleted or moved under the job (SQLite then refuses writes to the open,
                # unlinked file: 'attempt to write a readonly database', a 150-line trace),
                # or replaced since by a new, empty store (a job that started after it went).
                self._offline = "store gone"
                print(
                    f"ptycho: warning: MLflow store {db} was deleted or moved while {what}; the job goes on and "
                    f"keeps what it logs in {self._journal.path}; when the run ends, rebuild the store from the "
                    f"journals: {track_command('rebuild', db.parent)}",
                    file=sys.stderr,
                    flush=True,
                )
                return
            reason = unreachable(exc) if self._journal is not None else ""
            if not reason:
                raise
            self._offline = reason
            print(
                f"ptycho: warning: MLflow tracking server at {self._uri} stopped answering ({reason}) while {what}; "
                f"the job goes on and keeps what it logs in {self._journal.path}; when the server is back, re-run the "
                f"workflow (its start replays the journal) or run 'python -m ptycho track replay {self._journal.path}'",
                file=sys.stderr,
                flush=True,
            )

    def _disk_full(self, what: str, kind: Kind, line: Mapping[str, Any]) -> str:
        where = None
        if kind.partial is not None:
            try:
                where = kind.partial(self._client, self._run_id, line)
                if where is not None and where.is_dir() and not where.is_symlink():
                    import shutil

                    shutil.rmtree(where, ignore_errors=True)
                elif where is not None:
                    where.unlink(missing_ok=True)
            except Exception as exc:  # the line below is what matters
                _log.debug("could not remove a partial MLflow artifact: %s", exc)
        place = f"the device of {where.parent}" if where is not None else "a device"
        return (
            f"no space left on {place} while {what} (MLflow run {self._run_id}); the run ends FAILED: "
            "free space there or choose another results folder, then re-run"
        )

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log metrics at one step in one ``log_batch`` (NaN kept; +-inf stored as
        +-1.797e308 by the SQL store, so their keys are listed in ``ptycho.nonfinite_metrics``)."""
        if metrics:
            self.log("metrics", (step, metrics))

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log (nested) params, flattened with dotted keys (:func:`flatten_params`); an
        identical value logged again is accepted, a different one is MLflow's error."""
        self.log("params", params)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values stringified, cut at MLflow's 8000 characters); later values win."""
        self.log("tags", tags)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Copy a local file or folder into the run's artifacts (the journal keeps its path)."""
        self.log("artifact", (path, artifact_path))

    def log_dataset(self, name: str, digest: str, source_path: str | os.PathLike, split: str) -> None:
        """Record a dataset file as an input of the run, with its split as context (the
        UI's Dataset column; MLflow caps digests at 36 characters, the profile keeps it all)."""
        self.log("dataset", DatasetInput(name, digest, os.fspath(source_path), split))

    def log_model(
        self,
        name: str,
        local_dir: str | os.PathLike,
        *,
        params: Mapping[str, Any],
        tags: Mapping[str, Any],
        metrics: Mapping[str, float],
        step: int,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        """Register ``local_dir`` as an MLflow 3 logged model of this run, ``metrics`` linked
        to it and measured on ``dataset`` (name, digest of a dataset the run logged)."""
        self.log("model", LoggedModel(name, os.fspath(local_dir), params, tags, metrics, step, dataset))

    def fail_on_exit(self, reason: str) -> None:
        """End this run FAILED with ``reason`` (tag ``ptycho.end_reason``) even if the block exits normally.

        For a job that records a failure as a result (a diverged training written as a
        FAILED model) instead of raising it.
        """
        self.set_tags({END_REASON_TAG: reason})
        self._exit_status = "FAILED"

    def end(self, status: str, stale: str = "") -> None:
        """End the run with ``status``; ``stale``: why a sweep ends a run its job left open
        (journaled as a guess: a replay keeps the job's own end if it journaled one)."""
        self.log("end", (status, stale))

    def log_table(self, columns: Mapping[str, list], artifact_file: str) -> None:
        """Log ``columns`` as the table artifact ``artifact_file``, replacing it (:func:`write_table`)."""
        self.log("table", (columns, artifact_file))


def existing_run(client: Any, uri: str, run_id: str) -> Run:
    """A :class:`Run` bound to an existing run by id (the parent, an arm's run), writing to
    the journal the run names (:data:`JOURNAL_TAG`), so that a rebuilt store gets it too."""
    tags = retry(lambda: client.get_run(run_id), what=f"reading run {run_id}", uri=uri).data.tags
    return Run(client, run_id, uri, journal_of(tags), key=tags.get(KEY_TAG, run_id))


def create_journaled_run(
    client: Any,
    uri: str,
    experiment_id: str,
    name: str,
    tags: Mapping[str, str],
    journal: Journal | None,
    experiment: str | None = None,
    parent: str = "",
) -> str:
    """Create a run tagged with its journal's path and journal its creation; returns its id.

    The ``run`` line holds all a rebuild needs to create the run again in an empty store:
    its name, tags, start time, its parent's key (``parent``) or, for a run without a
    parent, the experiment's name (a new store numbers experiments anew).
    """
    run_tags = {**tags, **({JOURNAL_TAG: str(journal.path.resolve())} if journal is not None else {})}
    info = retry(
        lambda: client.create_run(experiment_id, tags=run_tags, run_name=name),
        what=f"creating run {name!r}",
        uri=uri,
    ).info
    if journal is not None:
        named = {"experiment": experiment} if experiment else {"parent": parent} if parent else {}
        journal.write(
            "run",
            info.run_id,
            uri,
            experiment_id=experiment_id,
            **named,
            name=name,
            tags=run_tags,
            start_time=info.start_time,
        )
    return info.run_id


@contextlib.contextmanager
def system_metrics(run: Run, interval: float = 5.0) -> Iterator[None]:
    """Sample CPU, memory, disk and network (and GPU when one is present) into ``run``
    every ``interval`` s while the block runs, as ``system/...`` metrics.

    MLflow's own ``SystemMetricsMonitor`` samples, bound to an explicit run id (no
    active run); its writes go through :meth:`Run.log_metrics`, so they are retried on
    locks and journaled like everything else. The CPU series is machine-wide: it also
    shows whether anything else ran beside a job. A block shorter than one interval
    still logs a sample, and the last, partial interval is logged at its end. ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` overrides
    ``interval``.
    """
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    class _Monitor(SystemMetricsMonitor):
        step = 0

        def publish_metrics(self, metrics: dict) -> None:
            if metrics:
                run.log_metrics({f"system/{k}": v for k, v in metrics.items()}, step=self.step)
            self.step += 1
            for monitor in self.monitors:
                monitor.clear_metrics()

    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # its start/stop lines are not news
    monitor = _Monitor(run.run_id, sampling_interval=interval, tracking_uri=run.uri)
    monitor.collect_metrics()  # one sample now: the block may end before the first interval
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()
        monitor.collect_metrics()  # and the last, partial interval
        monitor.publish_metrics(monitor.aggregate_metrics())


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is an interrupt or was raised while one unwound: a ``KeyboardInterrupt``
    (SIGINT, or SIGTERM as the CLI turns it) that a library wrapped in its own error, or
    that a clean-up on the way out replaced, still ended the job because it was told to."""
    return any(isinstance(err, KeyboardInterrupt) for err in causes(exc))


def end_reason(exc: BaseException) -> str:
    """One line saying why a run ended with ``exc`` (for the ``ptycho.end_reason`` tag)."""
    if interrupted(exc):
        return "interrupted: SIGINT or SIGTERM (Ctrl-C, or Snakemake or SLURM cancelled the job)"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return fit(f"{type(exc).__name__}: {text}", limit("MAX_TAG_VAL_LENGTH"))


@contextlib.contextmanager
def child_run(
    uri: str,
    parent_run_id: str,
    name: str,
    tags: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    journal: str | os.PathLike | None = None,
) -> Iterator[Run]:
    """Open a child run of ``parent_run_id`` for the duration of a ``with`` block.

    The run is tagged ``mlflow.parentRunId`` (how MLflow nests runs in the UI), this
    process's identity (:func:`process_identity`, for :func:`~ptycho.tracking.parent.sweep_children`) and
    ``tags``, and ends FINISHED on a normal exit. On an exception it ends FAILED
    (KILLED when interrupted, :func:`interrupted`) with the reason in the ``ptycho.end_reason`` tag,
    and the exception propagates unchanged; a failure to record that status is logged,
    never allowed to replace the original error. With ``journal`` (a ``.jsonl`` path),
    everything is also appended there (see :class:`Journal`, :class:`Run`).
    A server that cannot be reached when the run is opened is a one-line error, in
    seconds (one probe, not MLflow's retries), naming the replay of the journal folder.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    journal_folder = Path(journal).parent if journal is not None else None
    reason = server_down(uri)  # seconds, where MLflow's retries of get_run would take their budget
    if reason:
        raise PtychoError(server_gone(uri, reason, journal_folder))
    client = open_client(uri)
    try:
        parent = retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri)
    except MlflowException as exc:
        reason = unreachable(exc)
        if reason:
            raise PtychoError(server_gone(uri, reason, journal_folder)) from None
        if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            raise
        db = sqlite_path(uri)
        raise PtychoError(
            f"MLflow parent run {parent_run_id} not found at {uri}; start the study's parent run first, or, "
            "if the store was lost or replaced, rebuild it from the journals: "
            + (
                track_command("rebuild", db.parent)
                if db is not None
                else "python -m ptycho track rebuild <results folder>"
            )
        ) from None
    run_tags = {**fit_tags(tags), **process_identity(), MLFLOW_PARENT_RUN_ID: parent_run_id}
    book = Journal(journal) if journal is not None else None
    parent_key = parent.data.tags.get(KEY_TAG, parent_run_id)
    run_id = create_journaled_run(client, uri, parent.info.experiment_id, name, run_tags, book, parent=parent_key)
    run = Run(client, run_id, uri, book)
    try:
        if params:
            run.log_params(params)
        yield run
    except BaseException as exc:
        status = "KILLED" if interrupted(exc) else "FAILED"
        try:
            run.set_tags({END_REASON_TAG: end_reason(exc)})
            run.end(status)
        except Exception as term_exc:  # keep the original error
            _log.warning("could not mark MLflow run %s %s: %s", run.run_id, status, term_exc)
        raise
    run.end(run._exit_status)


def log_record(run: Run, record: JobRecord, job_tags: Mapping[str, Any]) -> None:
    """Send ``record`` to ``run``: its values kind by kind (:data:`~ptycho.tracking.record.KINDS`),
    the nested runs (each with the job's tags, overridden by its own), and a failure."""
    for op, kind in KINDS.items():
        for value in kind.values(record) if kind.values is not None else ():
            run.log(op, value)
    inherited = {k: v for k, v in job_tags.items() if k != NOTE_TAG}  # a nested run says what it is itself
    for nested in record.nested:
        journal = run.journal.path.with_name(f"{nested.name}.jsonl") if run.journal is not None else None
        with child_run(
            run.uri, run.run_id, nested.name, {**inherited, **nested.tags}, nested.params, journal=journal
        ) as child:
            child.log_metrics(nested.metrics)
    if record.failure:
        run.fail_on_exit(record.failure)
