"""The tracking store: its URI, opening it once, fitting values to MLflow's limits,
and retrying writes while SQLite is locked.

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
  ``database is locked``; every write here is therefore wrapped in :func:`retry`:
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
:meth:`~ptycho.tracking.runs.Run.log_dataset` retries those conflicts, and the retry links the existing row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ptycho.errors import PtychoError, causes
from ptycho.tracking.server import is_server, server_defaults

_log = logging.getLogger(__name__)
#: Where a run's journal is (absolute path): how a write to a run by id from another
#: process (the parent's closing, a stale run's KILLED) is journaled beside the job's own.
JOURNAL_TAG = "ptycho.journal"
#: A run's key, the id MLflow first gave it, by which its journal names it; a rebuilt run
#: (created again under a new id) carries it as this tag.
KEY_TAG = "ptycho.key"

T = TypeVar("T")

#: Total time (seconds) one write keeps retrying on a locked store before giving up.
#: Long enough to ride out a schema migration or a burst of eight jobs finishing at once;
#: short enough that a store that is really stuck fails the job instead of hanging it.
RETRY_SECONDS = 60.0
_FIRST_DELAY = 0.05
_MAX_DELAY = 5.0

_TRUNCATED = "...[truncated]"


def limit(name: str) -> int:
    """MLflow's own limit ``name`` (``mlflow.utils.validation``: ``MAX_TAG_VAL_LENGTH``,
    ...), to fit a value before the call instead of having it rejected."""
    from mlflow.utils import validation

    return getattr(validation, name)


def safe_key(key: str) -> str:
    """``key`` made acceptable to MLflow as a param, metric or tag name.

    MLflow allows alphanumerics, ``_ - . : /`` and spaces, at most 250 characters, and
    rejects names that change under path normalisation; anything else becomes ``_``
    here rather than failing a job over the spelling of a configuration key.
    """
    out = "".join(c if (c.isalnum() or c in "_-.: /") else "_" for c in str(key))[: limit("MAX_ENTITY_KEY_LENGTH")]
    if not _path_unique(out):
        out = out.replace("/", "_")
    if not _path_unique(out):
        out = ("_" + out)[: limit("MAX_ENTITY_KEY_LENGTH")]
    return out


def _path_unique(name: str) -> bool:
    import posixpath

    norm = posixpath.normpath(name)
    return norm == name and norm != "." and not norm.startswith("..") and not norm.startswith("/")


def fit(value: str, limit: int) -> str:
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
            out[safe_key(name)] = fit(
                "{}" if isinstance(value, Mapping) else _as_text(value), limit("MAX_PARAM_VAL_LENGTH")
            )
    return out


def fit_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {safe_key(k): fit(_as_text(v), limit("MAX_TAG_VAL_LENGTH")) for k, v in tags.items()}


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
    make_folder(folder, "results folder")
    return f"sqlite:///{folder / 'mlflow.db'}"


def make_folder(folder: Path, noun: str = "MLflow store folder") -> None:
    """Create ``folder`` (and its parents), or a one-line :class:`PtychoError` naming it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PtychoError(
            f"cannot create {noun} {folder} ({exc.strerror}); choose a writable results folder or set MLFLOW_TRACKING_URI"
        ) from None


def sqlite_path(uri: str) -> Path | None:
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


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite file (never creates one)."""

    return sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=10)


def sqlite_problem(path: str | os.PathLike) -> str:
    """Why the SQLite file at ``path`` is damaged (SQLite's words), or ``""`` if it is not.

    ``PRAGMA quick_check`` on a read-only connection: milliseconds for a study's store,
    nothing written, and it finds what a truncated or overwritten file shows (``database
    disk image is malformed``, ``file is not a database``). A store that is busy (locked
    by a writer for longer than 10 s) is in use, not damaged: ``""``.
    """
    try:
        with contextlib.closing(_read_only(Path(path))) as con:
            rows = con.execute("PRAGMA quick_check").fetchall()
    except sqlite3.Error as exc:
        text = " ".join(str(exc).split())
        return "" if "locked" in text.lower() else text
    bad = [str(r[0]) for r in rows if r and r[0] != "ok"]
    return f"{bad[0]}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}" if bad else ""


def sqlite_run_id(path: str | os.PathLike, key: str) -> str | None:
    """The id the SQLite store at ``path`` holds run ``key`` under (itself, or the run a
    rebuild tagged with it, :data:`KEY_TAG`); ``""`` when it holds neither (or the file
    has no MLflow tables), None when that cannot be told (busy). Read-only, no MLflow import."""
    try:
        with contextlib.closing(_read_only(Path(path))) as con:
            row = (
                con.execute("SELECT run_uuid FROM runs WHERE run_uuid = ?", (key,)).fetchone()
                or con.execute(
                    "SELECT run_uuid FROM tags WHERE key = ? AND value = ? LIMIT 1", (KEY_TAG, key)
                ).fetchone()
            )
    except sqlite3.Error as exc:
        return None if "locked" in str(exc).lower() else ""
    return row[0] if row else ""


def read_parent(path: str | os.PathLike) -> dict | None:
    """A study's ``parent.json`` as ``track start`` writes it (a mapping with ``run_id``),
    or None (missing, unreadable, or not that JSON)."""
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(Path(path).read_text())
        if isinstance(record, dict) and record.get("run_id"):
            return record
    return None


def study_uri(results: str | os.PathLike, record: dict | None) -> str:
    """The store a study's jobs write to: the one its ``parent.json`` (``record``) names
    (its jobs log there whatever the environment says now), else ``MLFLOW_TRACKING_URI``,
    else ``<results>/mlflow.db``, the store ``track start`` would create."""
    uri = str((record or {}).get("tracking_uri") or "") or os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    return uri or f"sqlite:///{Path(os.path.abspath(results)) / 'mlflow.db'}"


def study_sqlite(results: str | os.PathLike, preset: str) -> Path | None:
    """The SQLite file a study's jobs write to (:func:`study_uri`), or None (a server,
    another database). Reads, never creates."""
    return sqlite_path(study_uri(results, read_parent(Path(results) / preset / "mlflow" / "parent.json")))


def sqlite_write_problem(path: str | os.PathLike) -> str:
    """Why SQLite could not write the store at ``path`` (``strerror``-like), or ``""``.

    SQLite writes the file itself and, beside it, its rollback journal (and
    :func:`ensure_store` its ``.lock``), so the file must open for writing and its folder
    take a new file. Both are tried for real (the file opened for appending and closed
    at once, nothing written; a temporary file made and removed): permission bits say
    nothing for root, and a read-only mount refuses root too. A file that does not exist
    yet needs only the folder (:func:`ptycho.artifacts.writable_problem`).
    """
    from ptycho.artifacts import writable_problem

    path = Path(path)
    folder = writable_problem(path.parent, folder=True)
    if folder:
        return f"its folder {path.parent} takes no new file: {folder}"
    if path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            return exc.strerror or type(exc).__name__
    return ""


def _transient(exc: BaseException, conflicts: bool) -> str:
    """Why a later attempt can succeed (``"locked"``, ``"conflict"``), or ``""`` if it cannot.

    "database is locked" / "database table is locked" is SQLite's busy error, wrapped by
    SQLAlchemy in ``OperationalError`` and by MLflow in ``MlflowException``; the chain
    of causes is searched so that every wrapping is recognised. With ``conflicts``,
    unique-constraint violations count too: they happen when two processes insert the
    same shared row at once (a dataset logged by concurrent jobs), and the retry finds
    the row the other process committed.
    """
    for err in causes(exc):
        text = str(err).lower()
        if "database is locked" in text or "database table is locked" in text or "sqlite_busy" in text:
            return "locked"
        if conflicts and ("unique constraint failed" in text or isinstance(err, sqlite3.IntegrityError)):
            return "conflict"
    return ""


def retry(
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
        retry(lambda: MlflowClient(uri).search_experiments(max_results=1), what="opening the store", uri=uri)
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

    path = sqlite_path(uri)
    if path is None:
        return
    with contextlib.suppress(ImportError):  # the slow import, kept outside the lock
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    make_folder(path.parent)
    try:
        fh = open(path.with_name(path.name + ".lock"), "a")
    except OSError as exc:
        raise PtychoError(
            f"cannot create the MLflow store's lock {path}.lock ({exc.strerror}); "
            "choose a writable results folder or set MLFLOW_TRACKING_URI"
        ) from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            _open_store(uri)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_client(uri: str):
    from mlflow.tracking import MlflowClient

    if is_server(uri):
        server_defaults()
    ensure_store(uri)
    return MlflowClient(uri)


#: The experiment's kind (MLflow 3 opens a machine-learning experiment on its runs, not on
#: the GenAI overview) and its description (MLflow's note).
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.note.content": (
        "Does XLA make physics-informed ptychographic reconstruction faster without making it worse? One parent "
        "run per pipeline (its description: the verdict and the answer in three sentences; the report attached), "
        "one child run per job. Each arm's run is named as the arm (pinn-off-s0, pinn-physics-bf16-s1) and carries "
        "its answer: quality (amp_ssim, phase_ssim), time to quality (quality_time_s), step and compile time, "
        "and the network as an MLflow model. Compare arms: filter tags.rule = 'train' and tags.model = 'pinn', "
        "group by tags.xla, select runs and press Compare."
    ),
}


def artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts of a SQLite store go next to the database, not into the cwd.

    MLflow's default for a SQLite store is ``./mlruns`` relative to the working
    directory of whichever process created the experiment; pinning it beside the
    database keeps a results folder self-contained. Servers choose their own.
    """
    path = sqlite_path(uri)
    if path is None:
        return None
    return str(path.parent / "mlartifacts" / safe_key(experiment).replace("/", "_").replace(" ", "_"))


def experiment_id(client, uri: str, name: str) -> str:
    """Id of experiment ``name``, creating it; safe when processes race to create it."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

    exp = retry(lambda: client.get_experiment_by_name(name), what=f"looking up experiment {name!r}", uri=uri)
    if exp is None:
        try:
            return retry(
                lambda: client.create_experiment(name, artifact_location=artifact_location(uri, name)),
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
    for key, value in EXPERIMENT_TAGS.items():
        if exp.tags.get(key) is None:
            retry(
                lambda k=key, v=value: client.set_experiment_tag(exp.experiment_id, k, v),
                what="tagging the experiment",
                uri=uri,
                conflicts=True,  # processes racing to tag a new experiment
            )
    return exp.experiment_id


def find_run(client: Any, uri: str, run_id: str, by_key: bool = True) -> str | None:
    """The id this store holds run ``run_id`` under: itself, else (``by_key``) the run a
    rebuild tagged with it as its key (:data:`KEY_TAG`); None when it holds neither."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

    try:
        retry(lambda: client.get_run(run_id), what=f"reading run {run_id}", uri=uri)
        return run_id
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            raise
    if not by_key:
        return None
    experiments = [e.experiment_id for e in retry(client.search_experiments, what="listing experiments", uri=uri)]
    query = f"tags.`{KEY_TAG}` = '{run_id}'"
    found = retry(lambda: client.search_runs(experiments, query, max_results=1), what="finding a run", uri=uri)
    return found[0].info.run_id if found else None
