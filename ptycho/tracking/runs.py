"""A job's child run: every write retried on locks, journaled, and carried on offline.

Faults mid-run: each child run is tagged with its host, pid and the pid's start time,
so that :func:`~ptycho.tracking.parent.end_stale_children` can close (KILLED, with the reason in the tag
``ptycho.end_reason``) the runs of jobs that were killed outright; and a :class:`Run`
with a :class:`Journal` appends every write to a local JSON-lines file first, goes on
without the server when it stops answering, and :func:`~ptycho.tracking.replay.replay_journal` sends the file
again later, idempotently.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ptycho.errors import PtychoError
from ptycho.tracking.journal import Journal, journal_of
from ptycho.tracking.provenance import process_identity
from ptycho.tracking.server import is_server, server_down, server_gone, unreachable
from ptycho.tracking.store import (
    JOURNAL_TAG,
    KEY_TAG,
    fit,
    fit_tags,
    flatten_params,
    limit,
    open_client,
    rebuild_command,
    retry,
    safe_key,
    sqlite_path,
)
from ptycho.tracking.writes import END_REASON_TAG, send

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Tag listing the metric keys that received NaN or +-inf (the SQL store keeps NaN but
#: stores +-inf as +-1.797e308, so the tag says which numbers are not what they seem).
NONFINITE_TAG = "ptycho.nonfinite_metrics"


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

    def _write(self, what: str, op: str, conflicts: bool = False, partial=None, **fields: Any) -> None:
        """Journal one write, then :func:`send` it, retried on locks. Offline if the server
        is gone (with a journal); a full disk is a one-line :class:`PtychoError`
        (``partial()``: where a copy that did not fit lies, removed first, so that the
        run's FAILED can still be stored)."""
        line = (self._journal.write if self._journal is not None else _line)(op, self._key, self._uri, **fields)
        if self._offline:
            return
        try:
            retry(
                lambda: send(self._client, self._run_id, line),
                what=what,
                uri=self._uri,
                conflicts=conflicts,
                on_retry=self._count,
            )
        except Exception as exc:
            if disk_full(exc):
                raise PtychoError(self._disk_full(what, partial)) from None
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

    def _disk_full(self, what: str, partial: Callable[[], Path | None] | None) -> str:
        where = None
        if partial is not None:
            try:
                where = partial()
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
        """Log several metrics at one step in one ``log_batch`` call (one per 1000 keys).

        One call per step instead of one per metric: fewer lock acquisitions under
        concurrency, and the values of a step land together. The timestamp is taken
        once, before any attempt, which is what makes a retry (and a replay from the
        journal) idempotent. Values are converted with ``float`` (NumPy and TensorFlow
        scalars work). NaN is stored as NaN; +-inf are stored by the SQL store as
        +-1.797e308, so their keys are also listed in the ``ptycho.nonfinite_metrics`` tag.
        """
        if not metrics:
            return
        timestamp = int(time.time() * 1000)
        step = 0 if step is None else int(step)
        points = []
        for key, value in metrics.items():
            value = float(value)
            if not math.isfinite(value):
                self._nonfinite.add(safe_key(key))
            points.append([safe_key(key), value, timestamp, step])
        tags = (
            {NONFINITE_TAG: fit(",".join(sorted(self._nonfinite)), limit("MAX_TAG_VAL_LENGTH"))}
            if self._nonfinite
            else {}
        )
        self._write("logging metrics", "metrics", metrics=points, tags=tags)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log (nested) params, flattened with dotted keys; see :func:`flatten_params`.

        MLflow params are immutable: logging a key again with a different value is an
        error (an identical value is accepted, which keeps retries harmless).
        """
        self._write("logging params", "params", params=flatten_params(params))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values stringified, cut at MLflow's 8000 characters); later values win."""
        self._write("setting tags", "tags", tags=fit_tags(tags))

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Copy a local file or folder into the run's artifacts (under ``artifact_path``).

        The journal records the file's path (not its content): the file is an output of
        the job and stays where it is for a replay.
        """
        self._write(
            f"logging the artifact {os.path.basename(os.fspath(path))}",
            "artifact",
            partial=lambda: local_artifact(self._client, self._run_id, path, artifact_path),
            path=os.path.abspath(os.fspath(path)),
            artifact_path=artifact_path,
        )

    def log_dataset(self, name: str, digest: str, source_path: str | os.PathLike, split: str) -> None:
        """Record a dataset file as an input of the run, with its split as context.

        Uses ``MlflowClient.log_inputs`` with an ``mlflow.entities.Dataset`` (source type
        ``local``, source ``{"uri": <absolute path>}``) and the ``mlflow.data.context``
        input tag, so the UI shows which data a run used without ``mlflow.data``'s
        pandas-based constructors. MLflow caps digests at 36 characters; the full digest
        is kept in the dataset profile. Concurrent jobs logging the same dataset race to
        insert its shared row, so unique-constraint conflicts are retried as well.
        """
        source = os.path.abspath(os.fspath(source_path))
        self._write(
            f"logging dataset {name!r}", "dataset", conflicts=True, name=name, digest=digest, source=source, split=split
        )

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
        """Register ``local_dir`` as an MLflow 3 logged model of this run, with ``metrics`` linked to it.

        The UI's Models tab (and the run's) then lists the trained network with its
        params, tags and final metrics, and ``dataset`` (name, digest of a dataset logged
        with :meth:`log_dataset`) says what the metrics were measured on. Autologging
        does not fit a custom training loop, hence ``create_logged_model`` +
        ``log_model_artifacts``. Idempotent (see :func:`_log_model`), so journaled and replayed.
        """
        self._write(
            f"logging model {name!r}",
            "model",
            name=name,
            local_dir=os.path.abspath(os.fspath(local_dir)),
            params=flatten_params(params),
            tags=fit_tags(tags),
            metrics={k: float(v) for k, v in metrics.items()},
            step=int(step),
            timestamp=int(time.time() * 1000),
            dataset=list(dataset) if dataset else None,
        )

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
        fields = {"stale": stale} if stale else {}
        self._write(f"marking the run {status}", "end", status=status, end_time=int(time.time() * 1000), **fields)

    def log_table(self, columns: Mapping[str, list], artifact_file: str) -> None:
        """Log ``columns`` as the table artifact ``artifact_file``, replacing it (:func:`write_table`)."""
        self._write("logging a table", "table", columns=dict(columns), artifact_file=artifact_file)


def _line(op: str, run_id: str, uri: str, **fields: Any) -> dict:
    """A journal line, for a run without a journal."""
    return {"op": op, "run_id": run_id, "uri": uri, **fields}


def existing_run(client: Any, uri: str, run_id: str) -> Run:
    """A :class:`Run` bound to an existing run by id (the parent, an arm's run), writing to
    the journal the run names (:data:`JOURNAL_TAG`), so that a rebuilt store gets it too."""
    tags = retry(lambda: client.get_run(run_id), what=f"reading run {run_id}", uri=uri).data.tags
    return Run(client, run_id, uri, journal_of(tags), key=tags.get(KEY_TAG, run_id))


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause) is a full disk or quota: the OS's ENOSPC, or SQLite's
    "database or disk is full" as MLflow's SQL store wraps it."""
    from ptycho.artifacts import _no_space

    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if "database or disk is full" in str(err).lower():
            return True
        err = err.__cause__ or err.__context__
    return _no_space(exc)


def local_artifact(client: Any, run_id: str, path: str | os.PathLike, artifact_path: str | None) -> Path | None:
    """Where ``log_artifact(run_id, path, artifact_path)`` copies ``path`` when the run's
    artifacts are a local folder (a SQLite store's ``mlartifacts``), else None (a server's)."""
    import urllib.parse

    uri = client.get_run(run_id).info.artifact_uri
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("", "file"):
        return None
    base = Path(urllib.parse.unquote(parts.path))
    return base.joinpath(*(artifact_path or "").split("/")) / os.path.basename(os.path.normpath(os.fspath(path)))


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


def end_reason(exc: BaseException) -> str:
    """One line saying why a run ended with ``exc`` (for the ``ptycho.end_reason`` tag)."""
    if isinstance(exc, KeyboardInterrupt):
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
    process's identity (:func:`process_identity`, for :func:`end_stale_children`) and
    ``tags``, and ends FINISHED on a normal exit. On an exception it ends FAILED
    (KILLED for ``KeyboardInterrupt``) with the reason in the ``ptycho.end_reason`` tag,
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
    if is_server(uri):
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
            + (rebuild_command(db.parent) if db is not None else "python -m ptycho track rebuild <results folder>")
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
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        try:
            run.set_tags({END_REASON_TAG: end_reason(exc)})
            run.end(status)
        except Exception as term_exc:  # keep the original error
            _log.warning("could not mark MLflow run %s %s: %s", run.run_id, status, term_exc)
        raise
    run.end(run._exit_status)
