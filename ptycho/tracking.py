"""MLflow tracking for pipeline jobs: one parent run per study, one child run per job.

The Snakemake pipeline runs each job as its own ``ptycho`` process, up to eight at once,
all writing to the same tracking store. Three facts shape this module:

* **No active-run stack.** Every call goes through :class:`mlflow.tracking.MlflowClient`
  with an explicit run id, never ``mlflow.start_run``; the fluent API keeps a
  process-global stack of active runs, which this project forbids (no global mutable
  state) and which cannot express "a child of a run started by another process".
* **SQLite is the embedded default, and it has one writer at a time.** MLflow 3 refuses
  the file store, so without ``MLFLOW_TRACKING_URI`` the store is
  ``sqlite:///<results>/mlflow.db``. Concurrent writers queue on SQLite's database lock.
  MLflow 3 (checked on 3.17) sets ``PRAGMA busy_timeout = 20000`` on every session it opens, which
  overrides a ``?timeout=`` in the URI (SQLAlchemy does pass that on to
  ``sqlite3.connect``, but MLflow's pragma replaces it), so this module adds no URI
  option. What the busy timeout cannot absorb (a lock held for longer than 20 s, e.g. by
  a schema migration, a slow shared filesystem or a UI query) surfaces as
  ``database is locked``; every write here is therefore wrapped in :func:`_retry`:
  bounded exponential backoff with jitter on lock errors (about 60 s in all), then a
  one-line :class:`~ptycho.errors.PtychoError`.
* **Retrying a write never duplicates it.** A write that fails on a lock is rolled back
  by MLflow's session (SQLite commits atomically), so nothing of it is stored. MLflow's
  ``log_batch`` is several transactions (params, metrics, tags), though, so a retry may
  repeat a part that did commit; that repetition is harmless because the entities are
  built once, before the first attempt: metrics carry the same timestamp, step and value
  on every attempt and MLflow drops an exact duplicate of a stored metric (it is the
  table's primary key), an identical param is skipped, and a tag is an upsert.

First access to a new SQLite file creates and migrates the schema, and MLflow does that
without a lock when a store object is built; processes doing it at once fail ("table
experiments already exists", "duplicate column name"). :func:`ensure_store` serialises it with ``fcntl.flock`` on a ``.lock`` file
next to the database (a lock that also works across nodes where the filesystem honours
``flock``), and every entry point here calls it first.

A third race needs no lock but a retry: concurrent jobs logging the same dataset all
try to insert its one shared row, and all but the first fail on a unique constraint;
:meth:`Run.log_dataset` retries those conflicts, and the retry links the existing row.

Faults mid-run: each child run is tagged with its host, pid and the pid's start time,
so that :func:`end_stale_children` can close (KILLED, with the reason in the tag
``ptycho.end_reason``) the runs of jobs that were killed outright; and a :class:`Run`
with a :class:`Journal` appends every write to a local JSON-lines file first, goes on
without the server when it stops answering, and :func:`replay_journal` sends the file
again later, idempotently.

MLflow is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import json
import logging
import math
import os
import random
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ptycho.errors import PtychoError

__all__ = [
    "RETRY_SECONDS",
    "Run",
    "child_run",
    "config_hash",
    "default_tracking_uri",
    "ensure_store",
    "finish_run",
    "flatten_params",
    "git_commit",
    "log_artifact_to",
    "log_children_table",
    "source_tags",
    "preflight",
    "preflight_environment",
    "process_identity",
    "replay_journal",
    "start_parent",
    "end_stale_children",
    "system_metrics",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Total time (seconds) one write keeps retrying on a locked store before giving up.
#: Long enough to ride out a schema migration or a burst of eight jobs finishing at once;
#: short enough that a store that is really stuck fails the job instead of hanging it.
RETRY_SECONDS = 60.0
_FIRST_DELAY = 0.05
_MAX_DELAY = 5.0

# MLflow's limits (mlflow.utils.validation), copied so that values are fitted before
# the call instead of being rejected by it.
_MAX_PARAM_VALUE = 6000
_MAX_TAG_VALUE = 8000
_MAX_KEY = 250
_MAX_PARAMS_TAGS_PER_BATCH = 100
_MAX_METRICS_PER_BATCH = 1000
_MAX_DATASET_DIGEST = 36
_TRUNCATED = "...[truncated]"

#: Tag listing the metric keys that received NaN or +-inf (the SQL store keeps NaN but
#: stores +-inf as +-1.797e308, so the tag says which numbers are not what they seem).
NONFINITE_TAG = "ptycho.nonfinite_metrics"

_RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")

#: Tags naming the process that owns a child run: how a later job tells a run left
#: RUNNING by a killed process (stale) from one whose job is still going (live).
HOST_TAG, PID_TAG, PID_START_TAG = "ptycho.host", "ptycho.pid", "ptycho.pid_start"
#: Why a run ended other than FINISHED: the one-line error, or what found it stale.
END_REASON_TAG = "ptycho.end_reason"


# --------------------------------------------------------------------- small helpers
def git_commit(repo_dir: str | os.PathLike) -> str:
    """The checked-out commit of ``repo_dir``, or ``''``; never raises.

    Tagging runs with the code version is provenance, not a requirement: a copy of the
    sources without ``.git``, a missing ``git`` binary or a repository git refuses to
    read must not stop a job, so every failure gives ``''``.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=os.fspath(repo_dir),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    sha = out.stdout.strip()
    if out.returncode != 0 or not sha or any(c not in "0123456789abcdef" for c in sha):
        return ""
    return sha


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's reserved source tags (the UI's "Source" and "Version" columns) for a run
    of this workflow at ``commit`` ('' outside a git checkout: no version tag)."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE

    tags = {MLFLOW_SOURCE_NAME: "ptycho", MLFLOW_SOURCE_TYPE: "JOB"}
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    return tags


def config_hash(config: Mapping[str, Any]) -> str:
    """First 16 hex characters of the SHA-256 of ``config`` as canonical JSON.

    Canonical (sorted keys, no whitespace) so that the same configuration always gives
    the same hash whatever the key order, and runs with identical settings can be
    grouped by one short tag. Values JSON cannot encode are hashed by their ``str``.
    """
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _safe_key(key: str) -> str:
    """``key`` made acceptable to MLflow as a param, metric or tag name.

    MLflow allows alphanumerics, ``_ - . : /`` and spaces, at most 250 characters, and
    rejects names that change under path normalisation; anything else becomes ``_``
    here rather than failing a job over the spelling of a configuration key.
    """
    out = "".join(c if (c.isalnum() or c in "_-.: /") else "_" for c in str(key))[:_MAX_KEY]
    if not _path_unique(out):
        out = out.replace("/", "_")
    if not _path_unique(out):
        out = ("_" + out)[:_MAX_KEY]
    return out


def _path_unique(name: str) -> bool:
    import posixpath

    norm = posixpath.normpath(name)
    return norm == name and norm != "." and not norm.startswith("..") and not norm.startswith("/")


def _fit(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters with a visible marker if it was longer."""
    return value if len(value) <= limit else value[: limit - len(_TRUNCATED)] + _TRUNCATED


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return json.dumps(value, default=str)
    return str(value)


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings (and dataclasses) flattened to ``{"a.b.c": "value"}``.

    MLflow params are flat string pairs; dotted keys keep the configuration's structure
    readable and searchable (``params.model.lr``). Values longer than MLflow's 6000
    characters are truncated with a marker; an empty mapping is kept as ``"{}"``.
    """
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, Mapping) and value:
            out.update(flatten_params(value, prefix=f"{name}."))
        else:
            out[_safe_key(name)] = _fit("{}" if isinstance(value, Mapping) else _as_text(value), _MAX_PARAM_VALUE)
    return out


def _tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {_safe_key(k): _fit(_as_text(v), _MAX_TAG_VALUE) for k, v in tags.items()}


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ------------------------------------------------------------------------- URIs, store
def default_tracking_uri(results_dir: str | os.PathLike) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<abs results_dir>/mlflow.db``.

    The environment wins so that a shared tracking server (or another database) can be
    chosen without touching the pipeline. The fallback is SQLite because MLflow 3
    refuses the file store; the path is absolute because Snakemake jobs may run in
    other working directories, and the folder is created because SQLite will not.
    """
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    folder = Path(os.path.abspath(os.path.expanduser(os.fspath(results_dir))))
    if "?" in str(folder) or "#" in str(folder):
        raise PtychoError(
            f"results folder {folder} contains '?' or '#', which a sqlite URI cannot carry; "
            "rename it or set MLFLOW_TRACKING_URI"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PtychoError(
            f"cannot create results folder {folder} ({exc.strerror}); choose a writable folder or set MLFLOW_TRACKING_URI"
        ) from None
    return f"sqlite:///{folder / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` URI (absolute), or None (not sqlite / in memory)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if not rest.startswith("///"):
        return None  # "sqlite://" is an in-memory database
    path = rest[3:].split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    return Path(os.path.abspath(path))


def _transient(exc: BaseException, conflicts: bool) -> str:
    """Why a later attempt can succeed (``"locked"``, ``"conflict"``), or ``""`` if it cannot.

    "database is locked" / "database table is locked" is SQLite's busy error, wrapped by
    SQLAlchemy in ``OperationalError`` and by MLflow in ``MlflowException``; the chain
    of causes is searched so that every wrapping is recognised. With ``conflicts``,
    unique-constraint violations count too: they happen when two processes insert the
    same shared row at once (a dataset logged by concurrent jobs), and the retry finds
    the row the other process committed.
    """
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = str(err).lower()
        if "database is locked" in text or "database table is locked" in text or "sqlite_busy" in text:
            return "locked"
        if conflicts and ("unique constraint failed" in text or isinstance(err, sqlite3.IntegrityError)):
            return "conflict"
        err = err.__cause__ or err.__context__
    return ""


def _retry(
    fn: Callable[[], T],
    *,
    what: str,
    uri: str,
    budget: float = RETRY_SECONDS,
    conflicts: bool = False,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """``fn()``, retried with exponential backoff and jitter while the store is locked.

    Why retrying is safe: SQLite rolls back a transaction that fails on the lock, so a
    failed attempt stored nothing, and the callers build their entities (timestamps
    included) before calling, so a repeated part of a multi-transaction call is an exact
    duplicate that MLflow drops (see the module docstring).

    Delays start at 50 ms and double up to 5 s, each drawn from [d/2, d] so that jobs
    that collided once do not collide again in lockstep. After ``budget`` seconds the
    last error is raised as a one-line :class:`PtychoError`. Every retry is logged at
    DEBUG and its reason (``"locked"`` or ``"conflict"``) passed to ``on_retry`` (the
    counters of :class:`Run`), never to module state.
    """
    rng = random.Random()
    deadline = time.monotonic() + budget
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            reason = _transient(exc, conflicts)
            if not reason:
                raise
            delay = min(_MAX_DELAY, _FIRST_DELAY * 2**attempt)
            delay = rng.uniform(delay / 2, delay)
            if time.monotonic() + delay > deadline:
                raise PtychoError(
                    f"MLflow store {uri} {'stayed locked' if reason == 'locked' else 'kept conflicting'} "
                    f"for {budget:.0f} s while {what}; "
                    "run fewer jobs at once or use a tracking server ('make mlflow-server')"
                ) from exc
            attempt += 1
            _log.debug("MLflow store %s while %s; retry %d in %.2f s", reason, what, attempt, delay)
            if on_retry is not None:
                on_retry(reason)
            time.sleep(delay)


def _open_store(uri: str) -> None:
    """Build (and cache, per process) MLflow's store for ``uri``, migrating a new file."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        # Any call builds the store; MLflow caches it per URI for the process.
        _retry(lambda: MlflowClient(uri).search_experiments(max_results=1), what="opening the store", uri=uri)
    except MlflowException as exc:
        if "out-of-date database schema" in str(exc):
            raise PtychoError(
                f"MLflow store {uri} has an older schema than MLflow here; back it up, then run 'mlflow db upgrade {uri}'"
            ) from None
        raise


def ensure_store(uri: str) -> None:
    """Create or migrate a SQLite store once, even when many processes start together.

    MLflow creates and migrates a SQLite database the first time a process opens it,
    without a lock (its own ``_safe_initialize_tables`` lock is not used on that path),
    so simultaneous first access runs migrations over each other and fails with "table
    already exists" or "duplicate column". Here the store is opened under an exclusive
    ``flock`` on ``<database>.lock`` beside the database: the first holder migrates, the
    rest wait and then find the tables. The lock is held only for opening (tens of ms
    once MLflow's store module is imported, which happens before locking), and it
    works wherever the database is shared and ``flock`` is honoured. Also catches an
    older schema, which MLflow will not migrate on its own. Non-SQLite URIs (servers,
    other databases) manage this themselves: no-op.
    """
    import fcntl

    path = _sqlite_path(uri)
    if path is None:
        return
    with contextlib.suppress(ImportError):  # the slow import, kept outside the lock
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path.with_name(path.name + ".lock"), "a")
    except OSError as exc:
        raise PtychoError(
            f"cannot create MLflow store folder {path.parent} ({exc.strerror}); "
            "choose a writable results folder or set MLFLOW_TRACKING_URI"
        ) from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            _open_store(uri)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    ensure_store(uri)
    return MlflowClient(uri)


def preflight(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, with a fix, if runs could not be recorded at ``uri``.

    Called before a long job so that an unreachable server or an unwritable results
    folder is reported in one line up front, not as a traceback after hours of
    training. File stores are refused because MLflow 3 refuses them. Cheap: no MLflow
    import.

    HTTP(S): the server must answer the request every job makes first (an experiment
    search under ``<uri>/api/2.0/mlflow/``) within ``timeout`` s. Not ``/health``:
    MLflow 3 exempts that from its Host-header check, so a server started without
    ``--allowed-hosts`` answers it and then refuses (403) every API call addressed to
    it by host name, which is how jobs on other nodes reach it. A 401 or another 403
    passes (authentication: the real calls carry the credentials); a 404 means the URI
    does not lead to MLflow's API and fails.

    SQLite: the database folder must be creatable and writable (and the file, if it
    exists).
    """
    if uri.startswith(("http://", "https://")):
        _preflight_server(uri, timeout)
        return
    scheme = urllib.parse.urlsplit(uri).scheme
    if uri.startswith(("file:", "/", "./", "../", "~")) or (not scheme and not uri.startswith("databricks")):
        # A bare path ("mlruns") is a file store to MLflow too.
        raise PtychoError(
            f"MLflow tracking URI {uri} is a file store, which MLflow 3 refuses; "
            "use sqlite:///<folder>/mlflow.db or unset MLFLOW_TRACKING_URI"
        )
    path = _sqlite_path(uri)
    if path is None:
        return
    fix = "choose a writable results folder or set MLFLOW_TRACKING_URI"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PtychoError(f"cannot create MLflow store folder {path.parent} ({exc.strerror}); {fix}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise PtychoError(f"MLflow store folder {path.parent} is not writable; {fix}")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise PtychoError(f"MLflow store {path} is not writable; fix its permissions or {fix}")


def _preflight_server(uri: str, timeout: float) -> None:
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    fix = "start it with 'make mlflow-server' (MLFLOW_HOST=0.0.0.0 when jobs run on other nodes) or unset MLFLOW_TRACKING_URI"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(300).decode("utf-8", "replace")
        except Exception:  # a broken body does not change the verdict
            body = ""
        if exc.code == 403 and "invalid host header" in body.lower():
            host = urllib.parse.urlsplit(uri).netloc
            raise PtychoError(
                f"MLflow tracking server at {uri} refuses requests addressed to {host!r} (HTTP 403, its "
                f"DNS-rebinding protection); restart it with MLFLOW_ALLOWED_HOSTS='{host}' make mlflow-server, "
                "or put its private IP address in MLFLOW_TRACKING_URI"
            ) from None
        if exc.code in (401, 403):
            return  # authentication: the real calls carry the credentials (MLFLOW_TRACKING_TOKEN, ...)
        if exc.code == 404:
            raise PtychoError(
                f"{uri} answers but has no MLflow tracking API (HTTP 404 from {url}); "
                "check the address (scheme, host, port, path) in MLFLOW_TRACKING_URI"
            ) from None
        reason = f"HTTP {exc.code} from {url}"
    except urllib.error.URLError as exc:
        reason = str(exc.reason)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = str(exc) or type(exc).__name__
    reason = " ".join(reason.split())
    raise PtychoError(f"MLflow tracking server at {uri} is unreachable ({reason}); {fix}")


def preflight_environment(timeout: float = 5.0) -> None:
    """Check the tracking server named by ``MLFLOW_TRACKING_URI``, if any; no side effects.

    For the workflow to call while it is parsed, i.e. on the submitting host before any
    job exists: with ``snakemake --profile profiles/slurm`` the parent run's job would
    otherwise be the first to find a server that is down, refuses the host name or is
    not MLflow, after queueing. Raises :class:`PtychoError` (one line) as
    :func:`preflight` does. Without the variable, and for SQLite and other database
    URIs, nothing is checked here: the parent run's job checks (and creates) the
    embedded store, and a lint or dry run must not create folders.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if uri and not uri.startswith("sqlite:"):
        preflight(uri, timeout)


# ----------------------------------------------------------------------------- runs
def _artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts of a SQLite store go next to the database, not into the cwd.

    MLflow's default for a SQLite store is ``./mlruns`` relative to the working
    directory of whichever process created the experiment; pinning it beside the
    database keeps a results folder self-contained. Servers choose their own.
    """
    path = _sqlite_path(uri)
    if path is None:
        return None
    return str(path.parent / "mlartifacts" / _safe_key(experiment).replace("/", "_").replace(" ", "_"))


def _experiment_id(client, uri: str, name: str) -> str:
    """Id of experiment ``name``, creating it; safe when processes race to create it."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

    exp = _retry(lambda: client.get_experiment_by_name(name), what=f"looking up experiment {name!r}", uri=uri)
    if exp is None:
        try:
            return _retry(
                lambda: client.create_experiment(name, artifact_location=_artifact_location(uri, name)),
                what=f"creating experiment {name!r}",
                uri=uri,
            )
        except MlflowException as exc:
            if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
        # Another process created it between our look-up and our insert.
        _log.debug("MLflow experiment %r was created concurrently; using it", name)
        exp = _retry(lambda: client.get_experiment_by_name(name), what=f"looking up experiment {name!r}", uri=uri)
        if exp is None:
            raise PtychoError(f"MLflow experiment {name!r} exists but cannot be read at {uri}; check the store")
    if exp.lifecycle_stage != "active":
        raise PtychoError(
            f"MLflow experiment {name!r} is deleted; restore it with "
            f"'mlflow experiments restore --experiment-id {exp.experiment_id}' or use another experiment name"
        )
    return exp.experiment_id


def start_parent(uri: str, experiment: str, run_name: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> str:
    """Create the parent run of a study and return its id.

    The parent holds what all jobs share (the study configuration as flattened params,
    provenance tags); each job then opens a :func:`child_run` under it from its own
    process, by id. The experiment is created if missing, race-safely. If logging the
    params fails, the run is marked FAILED before the error propagates, so no
    half-created parent is left RUNNING.
    """
    from mlflow.entities import Param

    client = _client(uri)
    exp_id = _experiment_id(client, uri, experiment)
    run_tags = _tags(tags)
    run = _retry(
        lambda: client.create_run(exp_id, tags=run_tags, run_name=run_name),
        what=f"creating run {run_name!r}",
        uri=uri,
    )
    run_id = run.info.run_id
    try:
        entities = [Param(k, v) for k, v in flatten_params(params).items()]
        for chunk in _chunks(entities, _MAX_PARAMS_TAGS_PER_BATCH):
            _retry(lambda c=chunk: client.log_batch(run_id, params=c), what="logging params", uri=uri)
    except BaseException:
        with contextlib.suppress(Exception):
            _retry(lambda: client.set_terminated(run_id, "FAILED"), what="marking the run FAILED", uri=uri)
        raise
    return run_id


def finish_run(uri: str, run_id: str, status: str = "FINISHED") -> None:
    """Mark ``run_id`` terminated with ``status`` (FINISHED, FAILED or KILLED).

    A separate call because the parent outlives the process that created it: the
    pipeline's final rule closes it once every job has finished.
    """
    if status not in _RUN_STATUSES:
        raise ValueError(f"status must be one of {_RUN_STATUSES}, not {status!r}")
    client = _client(uri)
    _retry(lambda: client.set_terminated(run_id, status), what=f"marking run {run_id} {status}", uri=uri)


def log_artifact_to(uri: str, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
    """Copy a local file or folder into the artifacts of any run, by id (e.g. the parent).

    For writes to a run this process did not open with :func:`child_run`, such as the
    final report attached to the study's parent run before :func:`finish_run`.
    """
    client = _client(uri)
    _retry(
        lambda: client.log_artifact(run_id, os.fspath(path), artifact_path),
        what=f"logging an artifact to run {run_id}",
        uri=uri,
    )


class Journal:
    """An append-only JSON-lines copy of everything a job logs, kept beside its outputs.

    One line per write (``run``, ``params``, ``metrics``, ``tags``, ``artifact``,
    ``dict``, ``dataset``, ``end``), each with the run id and tracking URI, written
    *before* the write to MLflow is attempted. Whatever happens to the tracking server,
    what the job computed is on disk, and :func:`replay_journal` sends it again.
    Metrics keep the timestamp they were first sent with, so a replay is an exact
    duplicate that MLflow drops: replaying twice adds nothing.

    A journal that cannot be written (disk full) is reported once as a warning and then
    skipped; it never stops the job, whose MLflow writes go on.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._broken = False

    def append(self, record: Mapping[str, Any]) -> None:
        if self._broken:
            return
        line = json.dumps(record, separators=(",", ":"), default=str)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            self._broken = True
            _log.warning("cannot write the MLflow journal %s (%s); MLflow alone records this job", self.path, exc.strerror)


def _unreachable(exc: BaseException) -> str:
    """A short reason if ``exc`` says the tracking server cannot be reached, else ``""``.

    MLflow's REST client has already retried with backoff (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
    ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``) when its error reaches us; what is left is a
    connection refused, reset or timed out somewhere in the chain of causes.
    """
    seen: set[int] = set()
    err: BaseException | None = exc
    markers = ("connection refused", "max retries exceeded", "failed to establish a new connection",
               "connection aborted", "connection reset", "remotedisconnected", "read timed out",
               "connect timeout", "name or service not known", "temporary failure in name resolution")
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ConnectionError | TimeoutError):
            return type(err).__name__
        text = str(err).lower()
        for marker in markers:
            if marker in text:
                return marker
        err = err.__cause__ or err.__context__
    return ""


class Run:
    """One child run, bound to a client and a run id; every write retried on locks.

    A small wrapper instead of MLflow's fluent functions so that the run is explicit
    (no process-global active run) and each write goes through :func:`_retry`.
    :attr:`retries` counts the retries this object's writes needed, by reason, so
    callers and tests can see contention without module-level counters.

    With a :class:`Journal`, every write is first appended to it. If the tracking
    server stops answering (after MLflow's own retries with backoff), the run goes
    *offline*: one warning line says where the journal is and how to replay it, the
    job carries on, and later writes go to the journal only (:attr:`offline`).
    Without a journal a lost server is an error, as before.
    """

    def __init__(self, client: Any, run_id: str, uri: str, journal: Journal | None = None):
        self._client = client
        self._run_id = run_id
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
    def offline(self) -> str:
        """Why the tracking server was given up on (``""`` while it answers)."""
        return self._offline

    @property
    def journal(self) -> Journal | None:
        return self._journal

    def _count(self, reason: str) -> None:
        self._retries[reason] += 1

    def _record(self, op: str, **fields: Any) -> None:
        if self._journal is not None:
            self._journal.append({"op": op, "run_id": self._run_id, "uri": self._uri, **fields})

    def _call(self, what: str, fn: Callable[[], T], conflicts: bool = False) -> T | None:
        if self._offline:
            return None
        try:
            return _retry(fn, what=what, uri=self._uri, conflicts=conflicts, on_retry=self._count)
        except Exception as exc:
            reason = _unreachable(exc) if self._journal is not None else ""
            if not reason:
                raise
            self._offline = reason
            print(
                f"ptycho: warning: MLflow tracking server at {self._uri} stopped answering ({reason}) while {what}; "
                f"the job goes on and keeps what it logs in {self._journal.path}; when the server is back, run "
                f"'python -m ptycho track replay {self._journal.path}'",
                file=sys.stderr,
                flush=True,
            )
            return None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log several metrics at one step in one ``log_batch`` call (one per 1000 keys).

        One call per step instead of one per metric: fewer lock acquisitions under
        concurrency, and the values of a step land together. The timestamp is taken
        once, before any attempt, which is what makes a retry (and a replay from the
        journal) idempotent. Values are converted with ``float`` (NumPy and TensorFlow
        scalars work). NaN is stored as NaN; +-inf are stored by the SQL store as
        +-1.797e308, so their keys are also listed in the ``ptycho.nonfinite_metrics`` tag.
        """
        from mlflow.entities import Metric, RunTag

        if not metrics:
            return
        timestamp = int(time.time() * 1000)
        step = 0 if step is None else int(step)
        entities = []
        for key, value in metrics.items():
            value = float(value)
            if not math.isfinite(value):
                self._nonfinite.add(_safe_key(key))
            entities.append(Metric(_safe_key(key), value, timestamp, step))
        tags = (
            [RunTag(NONFINITE_TAG, _fit(",".join(sorted(self._nonfinite)), _MAX_TAG_VALUE))] if self._nonfinite else []
        )
        self._record("metrics", metrics=[[m.key, m.value, m.timestamp, m.step] for m in entities],
                     tags={t.key: t.value for t in tags})
        for i, chunk in enumerate(_chunks(entities, _MAX_METRICS_PER_BATCH)):
            extra = tags if i == 0 else []
            self._call(
                "logging metrics", lambda c=chunk, t=extra: self._client.log_batch(self._run_id, metrics=c, tags=t)
            )

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        """Log one metric; see :meth:`log_metrics`."""
        self.log_metrics({key: value}, step=step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log (nested) params, flattened with dotted keys; see :func:`flatten_params`.

        MLflow params are immutable: logging a key again with a different value is an
        error (an identical value is accepted, which keeps retries harmless).
        """
        from mlflow.entities import Param

        flat = flatten_params(params)
        self._record("params", params=flat)
        entities = [Param(k, v) for k, v in flat.items()]
        for chunk in _chunks(entities, _MAX_PARAMS_TAGS_PER_BATCH):
            self._call("logging params", lambda c=chunk: self._client.log_batch(self._run_id, params=c))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values stringified, cut at MLflow's 8000 characters); later values win."""
        from mlflow.entities import RunTag

        fitted = _tags(tags)
        self._record("tags", tags=fitted)
        entities = [RunTag(k, v) for k, v in fitted.items()]
        for chunk in _chunks(entities, _MAX_PARAMS_TAGS_PER_BATCH):
            self._call("setting tags", lambda c=chunk: self._client.log_batch(self._run_id, tags=c))

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Copy a local file or folder into the run's artifacts (under ``artifact_path``).

        The journal records the file's path (not its content): the file is an output of
        the job and stays where it is for a replay.
        """
        self._record("artifact", path=os.path.abspath(os.fspath(path)), artifact_path=artifact_path)
        self._call(
            "logging an artifact",
            lambda: self._client.log_artifact(self._run_id, os.fspath(path), artifact_path),
        )

    def log_dict(self, obj: dict, filename: str) -> None:
        """Store ``obj`` as a JSON or YAML artifact (chosen by the extension of ``filename``)."""
        self._record("dict", obj=obj, filename=filename)
        self._call("logging a dict", lambda: self._client.log_dict(self._run_id, obj, filename))

    def log_figure(self, fig: Any, filename: str) -> None:
        """Store a matplotlib figure as an image artifact (format from ``filename``); not journaled."""
        self._call("logging a figure", lambda: self._client.log_figure(self._run_id, fig, filename))

    def log_dataset(self, name: str, digest: str, source_path: str | os.PathLike, split: str) -> None:
        """Record a dataset file as an input of the run, with its split as context.

        Uses ``MlflowClient.log_inputs`` with an ``mlflow.entities.Dataset`` (source type
        ``local``, source ``{"uri": <absolute path>}``) and the ``mlflow.data.context``
        input tag, so the UI shows which data a run used without ``mlflow.data``'s
        pandas-based constructors. MLflow caps digests at 36 characters; the full digest
        is kept in the dataset profile. Concurrent jobs logging the same dataset race to
        insert its shared row, so unique-constraint conflicts are retried as well.
        """
        self._record("dataset", name=name, digest=digest, source=os.path.abspath(os.fspath(source_path)), split=split)
        self._call(
            f"logging dataset {name!r}",
            lambda: _log_dataset(self._client, self._run_id, name, digest, source_path, split),
            conflicts=True,
        )

    def log_model(self, name: str, local_dir: str | os.PathLike, *, params: Mapping[str, Any],
                  tags: Mapping[str, Any], metrics: Mapping[str, float], step: int,
                  dataset: tuple[str, str] | None = None) -> None:
        """Register ``local_dir`` as an MLflow 3 logged model of this run, with ``metrics`` linked to it.

        The UI's Models tab (and the run's) then lists the trained network with its
        params, tags and final metrics, and ``dataset`` (name, digest of a dataset logged
        with :meth:`log_dataset`) says what the metrics were measured on. Autologging
        does not fit a custom training loop, hence ``create_logged_model`` +
        ``log_model_artifacts``. Idempotent (see :func:`_log_model`), so journaled and replayed.
        """
        record = {"name": name, "local_dir": os.path.abspath(os.fspath(local_dir)), "params": flatten_params(params),
                  "tags": _tags(tags), "metrics": {k: float(v) for k, v in metrics.items()}, "step": int(step),
                  "timestamp": int(time.time() * 1000), "dataset": list(dataset) if dataset else None}
        self._record("model", **record)
        self._call(f"logging model {name!r}", lambda: _log_model(self._client, self._run_id, **record))

    def fail_on_exit(self, reason: str) -> None:
        """End this run FAILED with ``reason`` (tag ``ptycho.end_reason``) even if the block exits normally.

        For a job that records a failure as a result (a diverged training written as a
        FAILED model) instead of raising it.
        """
        self.set_tags({END_REASON_TAG: reason})
        self._exit_status = "FAILED"

    def _terminate(self, status: str) -> None:
        end_time = int(time.time() * 1000)
        self._record("end", status=status, end_time=end_time)
        self._call(f"marking the run {status}",
                   lambda: self._client.set_terminated(self._run_id, status, end_time=end_time))


def _log_dataset(client: Any, run_id: str, name: str, digest: str, source_path: str | os.PathLike, split: str) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = Dataset(
        name=name,
        digest=digest[:_MAX_DATASET_DIGEST],
        source_type="local",
        source=json.dumps({"uri": os.path.abspath(os.fspath(source_path))}),
        schema=None,
        profile=json.dumps({"digest": digest, "split": split}),
    )
    inputs = [DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, split)])]
    client.log_inputs(run_id, datasets=inputs)


def _log_model(client: Any, run_id: str, name: str, local_dir: str, params: Mapping[str, str],
               tags: Mapping[str, str], metrics: Mapping[str, float], step: int, timestamp: int,
               dataset: list[str] | None) -> str:
    """Create (or find) the logged model ``name`` of ``run_id``, upload ``local_dir`` once,
    link ``metrics`` to it, and list it as the run's output; returns its model id.

    A second call (a retry, a journal replay) finds the model by name and source run
    instead of creating another, and re-sends metrics with the same timestamp, which
    MLflow drops as duplicates.
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    run = client.get_run(run_id)
    experiment_id = run.info.experiment_id
    found = client.search_logged_models([experiment_id], max_results=1,
                                        filter_string=f"name = '{name}' AND source_run_id = '{run_id}'")
    model = found[0] if found else client.create_logged_model(experiment_id, name=name, source_run_id=run_id,
                                                             params=dict(params), tags=dict(tags), model_type="keras")
    if model.status != LoggedModelStatus.READY:
        client.log_model_artifacts(model.model_id, local_dir)
        client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    dataset_name, dataset_digest = (dataset[0], dataset[1][:_MAX_DATASET_DIGEST]) if dataset else (None, None)
    for key, value in metrics.items():
        client.log_metric(run_id, _safe_key(key), value, timestamp=timestamp, step=step, model_id=model.model_id,
                          dataset_name=dataset_name, dataset_digest=dataset_digest)
    if model.model_id not in {o.model_id for o in (run.outputs.model_outputs if run.outputs else [])}:
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
    return model.model_id


@contextlib.contextmanager
def system_metrics(run: Run, interval: float = 5.0) -> Iterator[None]:
    """Sample CPU, memory, disk and network (and GPU when one is present) into ``run``
    every ``interval`` s while the block runs, as ``system/...`` metrics.

    MLflow's own ``SystemMetricsMonitor`` samples, bound to an explicit run id (no
    active run); its writes go through :meth:`Run.log_metrics`, so they are retried on
    locks and journaled like everything else. The CPU series is machine-wide: it also
    shows whether anything else ran beside a job. A block shorter than one interval
    still logs the samples it took. ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` overrides
    ``interval``.
    """
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    class _Monitor(SystemMetricsMonitor):
        def publish_metrics(self, metrics: dict) -> None:
            if metrics:
                run.log_metrics({f"system/{k}": v for k, v in metrics.items()}, step=self._logging_step)
            self._logging_step += 1
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
        if any(m._metrics for m in monitor.monitors):
            monitor.publish_metrics(monitor.aggregate_metrics())


def log_children_table(uri: str, parent_run_id: str, artifact_file: str = "child_runs.json") -> int:
    """Log a table of the parent's child runs (name, rule, arm, status, duration, metrics)
    on the parent run, so that one page shows the whole pipeline; returns the row count."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    client = _client(uri)
    experiment_id = _retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri).info.experiment_id
    runs = _retry(lambda: client.search_runs([experiment_id], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'",
                                             max_results=5000, order_by=["attributes.start_time ASC"]),
                  what="listing the child runs", uri=uri)
    keys = sorted({k for r in runs for k in r.data.metrics if not k.startswith("system/") and not k.endswith("_image")})
    columns: dict[str, list] = {c: [] for c in ("run", "run_id", "rule", "model", "xla", "seed", "status", "duration_s",
                                                *keys)}
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
    _retry(lambda: client.log_table(parent_run_id, columns, artifact_file), what="logging the child-run table", uri=uri)
    return len(runs)


# -------------------------------------------------------------- stale runs, identity
def _process_start(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot (``/proc``), or ``""``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return ""
    # Field 2 (comm) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def process_identity(pid: int | None = None) -> dict[str, str]:
    """Tags naming this process: host name, pid and the pid's start time.

    The start time tells a live job from a later, unrelated process that got the same
    pid after the job was killed.
    """
    pid = os.getpid() if pid is None else pid
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PID_START_TAG: _process_start(pid)}


def _process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` (started at ``start``, if known) still runs on this host."""
    if pid <= 0:
        return False
    if os.path.isdir("/proc"):
        now = _process_start(pid)
        return bool(now) and (not start or now == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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

    client = _client(uri)
    parent = _retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri)
    running = _retry(
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
        if _process_alive(pid, tags.get(PID_START_TAG, "")):
            continue
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        reason = (f"stale: process {pid} on {host} ended without closing this run (killed, e.g. kill -9 or "
                  f"out of memory); marked KILLED at {when}{' by ' + by if by else ''}")
        run_id = run.info.run_id
        _retry(lambda r=run_id, t=reason: client.set_tag(r, END_REASON_TAG, t), what="tagging a stale run", uri=uri)
        _retry(lambda r=run_id: client.set_terminated(r, "KILLED"), what="marking a stale run KILLED", uri=uri)
        _log.info("MLflow run %s (%s) was stale: %s", run_id, run.info.run_name, reason)
        ended.append(run_id)
    return ended


def end_reason(exc: BaseException) -> str:
    """One line saying why a run ended with ``exc`` (for the ``ptycho.end_reason`` tag)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted: SIGINT or SIGTERM (Ctrl-C, or Snakemake or SLURM cancelled the job)"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return _fit(f"{type(exc).__name__}: {text}", _MAX_TAG_VALUE)


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
    A server that cannot be reached when the run is opened is a one-line error.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = _client(uri)
    try:
        parent = _retry(lambda: client.get_run(parent_run_id), what="reading the parent run", uri=uri)
    except MlflowException as exc:
        reason = _unreachable(exc)
        if reason:
            raise PtychoError(
                f"MLflow tracking server at {uri} is unreachable ({reason}); start it again ('make mlflow-server') "
                "and re-run, or unset MLFLOW_TRACKING_URI"
            ) from None
        if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            raise
        raise PtychoError(
            f"MLflow parent run {parent_run_id} not found at {uri}; start the study's parent run first"
        ) from None
    run_tags = {**_tags(tags), **process_identity(), MLFLOW_PARENT_RUN_ID: parent_run_id}
    info = _retry(
        lambda: client.create_run(parent.info.experiment_id, tags=run_tags, run_name=name),
        what=f"creating run {name!r}",
        uri=uri,
    ).info
    book = Journal(journal) if journal is not None else None
    run = Run(client, info.run_id, uri, book)
    run._record("run", experiment_id=parent.info.experiment_id, name=name, tags=run_tags,
                start_time=info.start_time)
    try:
        if params:
            run.log_params(params)
        yield run
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        try:
            run.set_tags({END_REASON_TAG: end_reason(exc)})
            run._terminate(status)
        except Exception as term_exc:  # keep the original error
            _log.warning("could not mark MLflow run %s %s: %s", run.run_id, status, term_exc)
        raise
    run._terminate(run._exit_status)


# ------------------------------------------------------------------------- replay
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
            raise PtychoError(f"{p}: no such journal file or folder; journals are in <results>/<preset>/mlflow/journal/")
    return out


def _replay_record(client: Any, target: str, run_id: str, rec: dict, counts: dict[str, int], path: Path) -> None:
    """Send one journal record to run ``run_id`` at ``target`` (see :func:`replay_journal`)."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    def send(what: str, fn: Callable[[], Any]) -> None:
        _retry(fn, what=what, uri=target, conflicts=what.startswith("logging dataset"))

    op = rec["op"]
    if op == "params":
        params = [Param(k, v) for k, v in rec["params"].items()]
        for chunk in _chunks(params, _MAX_PARAMS_TAGS_PER_BATCH):
            send("replaying params", lambda c=chunk: client.log_batch(run_id, params=c))
        counts["params"] += len(params)
    elif op in ("tags", "run"):
        tags = [RunTag(k, v) for k, v in rec.get("tags", {}).items()]
        for chunk in _chunks(tags, _MAX_PARAMS_TAGS_PER_BATCH):
            send("replaying tags", lambda c=chunk: client.log_batch(run_id, tags=c))
        counts["tags"] += len(tags)
    elif op == "metrics":
        metrics = [Metric(k, float(v), int(t), int(s)) for k, v, t, s in rec["metrics"]]
        tags = [RunTag(k, v) for k, v in rec.get("tags", {}).items()]
        for i, chunk in enumerate(_chunks(metrics, _MAX_METRICS_PER_BATCH)):
            extra = tags if i == 0 else []
            send("replaying metrics", lambda c=chunk, t=extra: client.log_batch(run_id, metrics=c, tags=t))
        counts["metrics"] += len(metrics)
    elif op == "artifact":
        if not os.path.exists(rec["path"]):
            _log.warning("%s: artifact %s is gone; not replayed", path, rec["path"])
            counts["missing_files"] += 1
            return
        send("replaying an artifact", lambda: client.log_artifact(run_id, rec["path"], rec.get("artifact_path")))
        counts["artifacts"] += 1
    elif op == "dict":
        send("replaying a dict", lambda: client.log_dict(run_id, rec["obj"], rec["filename"]))
        counts["artifacts"] += 1
    elif op == "dataset":
        send("logging dataset", lambda: _log_dataset(client, run_id, rec["name"], rec["digest"], rec["source"],
                                                     rec["split"]))
    elif op == "model":
        send("replaying a logged model", lambda: _log_model(client, run_id, **{k: v for k, v in rec.items()
                                                                               if k not in ("op", "run_id", "uri")}))
        counts["models"] += 1
    elif op == "end":
        if rec["status"] == "FINISHED":
            # A job that finished offline may have been marked KILLED as stale meanwhile.
            with contextlib.suppress(MlflowException):
                client.delete_tag(run_id, END_REASON_TAG)
        send("replaying the run's status",
             lambda: client.set_terminated(run_id, rec["status"], end_time=rec.get("end_time")))
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
    counts = {"runs": 0, "params": 0, "metrics": 0, "tags": 0, "artifacts": 0, "models": 0, "ends": 0, "missing_files": 0}
    checked: set[tuple[str, str]] = set()
    for rec in _read_journal(path):
        target = uri or rec.get("uri", "")
        run_id = rec.get("run_id", "")
        if not target or not run_id or "op" not in rec:
            raise PtychoError(f"{path}: a record without op, run_id or uri; not an MLflow journal written by ptycho")
        if target.startswith(("http://", "https://")) and not any(t == target for t, _ in checked):
            preflight(target)
        client = _client(target)
        if (target, run_id) not in checked:
            try:
                _retry(lambda c=client, r=run_id: c.get_run(r), what="reading a journaled run", uri=target)
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


def start_pipeline(config: Mapping[str, Any], results_dir: str, experiment: str, run_name: str,
                   tags: Mapping[str, Any], out: str, log: str | None = None) -> dict:
    """Create a pipeline's parent run and write ``out`` (JSON: run id, tracking URI).

    Every job of the pipeline reads ``out`` to log as a child of this run. Called once
    per results folder by the workflow (``rules/common.smk``) and by ``ptycho track start``.
    """
    from pathlib import Path

    from ptycho.artifacts import write_json

    uri = default_tracking_uri(results_dir)
    preflight(uri)
    commit = git_commit(Path.cwd())
    all_tags = dict(tags, git_commit=commit, config_hash=config_hash(config), **source_tags(commit))
    run_id = start_parent(uri, experiment, run_name, config, all_tags)
    record = {"run_id": run_id, "tracking_uri": uri, "experiment": experiment, "config_hash": all_tags["config_hash"]}
    write_json(out, record)
    if log:
        Path(log).write_text(f"MLflow parent run {run_id} at {uri}\n")
    return record
