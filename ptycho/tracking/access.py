"""Can runs be recorded at a tracking URI? Answered in one line before a long job starts."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import urllib.parse
from pathlib import Path

from ptycho.errors import PtychoError
from ptycho.tracking.journal import journaled_parent, write_parent_json
from ptycho.tracking.server import preflight_server, server_down, server_has_run, track_command
from ptycho.tracking.store import (
    JOURNAL_TAG,
    _read_only,
    make_folder,
    read_parent,
    sqlite_path,
    sqlite_problem,
    sqlite_run_id,
    study_uri,
)


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

    SQLite: the database folder must be creatable and take a new file (tried for real:
    :func:`ptycho.artifacts.writable_problem`), and the file, if it exists, writable.
    """
    if uri.startswith(("http://", "https://")):
        preflight_server(uri, timeout)
        return
    scheme = urllib.parse.urlsplit(uri).scheme
    if uri.startswith(("file:", "/", "./", "../", "~")) or (not scheme and not uri.startswith("databricks")):
        # A bare path ("mlruns") is a file store to MLflow too.
        raise PtychoError(
            f"MLflow tracking URI {uri} is a file store, which MLflow 3 refuses; "
            "use sqlite:///<folder>/mlflow.db or unset MLFLOW_TRACKING_URI"
        )
    path = sqlite_path(uri)
    if path is None:
        return
    from ptycho.artifacts import writable_problem

    fix = "choose a writable results folder or set MLFLOW_TRACKING_URI"
    make_folder(path.parent)
    if writable_problem(path.parent, folder=True):
        raise PtychoError(f"MLflow store folder {path.parent} is not writable; {fix}")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise PtychoError(f"MLflow store {path} is not writable; fix its permissions or {fix}")


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


def preflight_store(results: str | os.PathLike, preset: str, timeout: float = 5.0) -> None:
    """One line, before any job, if a study's MLflow store is damaged or lost.

    Jobs would otherwise meet it one by one: a damaged SQLite file fails every write
    with a traceback (and a rerun says "Nothing to be done" over it while the report
    job, if forced, deletes the report), a lost one makes the first job stop at "parent
    run not found". The store is the one the study's ``parent.json`` names, else this
    folder's default. A SQLite file that exists must pass ``PRAGMA quick_check``
    (milliseconds); once the study has run (``parent.json`` or journals in
    ``<results>/<preset>/mlflow/``), the file must exist and hold the parent run, and a
    server must know the parent run. The line names the command that rebuilds the
    store from the journals. Other databases are left to MLflow.

    Nothing is written, but for one repair: a lost ``parent.json`` whose parent run the
    store holds is written again from the journal (:func:`restore_parent_json`), before
    Snakemake sees it missing and runs every job of the study again.
    """
    results = Path(os.path.abspath(results))
    for note in follow_folder(results):
        print(f"ptycho workflow: note: {note}", file=sys.stderr)
    mlflow_dir = results / preset / "mlflow"
    parent_json = mlflow_dir / "parent.json"
    journals = mlflow_dir / "journal"
    if not parent_json.exists():
        note = restore_parent_json(parent_json, timeout)
        if note:
            print(f"ptycho workflow: note: {note}", file=sys.stderr)
    has_run = parent_json.exists() or (journals.is_dir() and any(journals.glob("*.jsonl")))
    fix = f"rebuild it from the journals: {track_command('rebuild', results)}"
    record = read_parent(parent_json) if parent_json.exists() else {}
    if record is None or (record and not record.get("tracking_uri")):
        raise PtychoError(f"{parent_json} is damaged (not the JSON 'track start' writes); {fix}")
    uri, run_id = study_uri(results, record), record.get("run_id", "")
    path = sqlite_path(uri)
    if path is not None:
        if not path.exists():
            if has_run:
                what = (
                    f"with parent run {run_id} of {parent_json}" if run_id else f"with the runs journaled in {journals}"
                )
                raise PtychoError(f"MLflow store {path} is missing (moved or deleted), {what}; {fix}")
            return
        problem = sqlite_problem(path)
        if problem:
            raise PtychoError(f"MLflow store {path} is damaged ({problem}); {fix}")
        if run_id and sqlite_run_id(path, run_id) not in (run_id, None):  # the jobs ask for it by this id
            raise PtychoError(f"MLflow store {path} does not hold parent run {run_id} of {parent_json}; {fix}")
    elif run_id and uri.startswith(("http://", "https://")):
        preflight(uri, timeout)
        if not server_has_run(uri, run_id, timeout):
            raise PtychoError(
                f"MLflow tracking server at {uri} does not hold parent run {run_id} of {parent_json} "
                f"(a new or emptied server?); {fix}"
            )


#: Where a SQLite store records absolute paths under its results folder: (table, column).
_PATH_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
)


def store_home(db: str | os.PathLike) -> str:
    """The results folder a SQLite store was made in, from its experiments' artifact
    locations (``<results>/mlartifacts/<experiment>``, as ``track start`` pins them), or ''."""
    try:
        with contextlib.closing(_read_only(Path(db))) as con:
            rows = con.execute("SELECT artifact_location FROM experiments").fetchall()
    except sqlite3.Error:  # not MLflow's (emptied, busy): nothing to tell
        return ""
    homes = {str(Path(loc).parent.parent) for (loc,) in rows if loc and Path(loc).parent.name == "mlartifacts"}
    return homes.pop() if len(homes) == 1 else ""


def relocate(db: str | os.PathLike) -> str:
    """Point a SQLite store copied or moved to another folder at its new place: every
    artifact location under its old results folder, and the runs' journal tags, now
    under the folder that holds ``db``, in one transaction. MLflow stores them absolute,
    so a copy would read the original's files and a moved store would lose them. Returns
    the old folder ('' when the store is at home, or its home cannot be told)."""
    db = Path(os.path.abspath(db))
    old, new = store_home(db), str(db.parent)
    if not old or old == new:
        return ""
    n = len(old) + 1
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as con, con:
        for table, column in _PATH_COLUMNS:
            con.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                (new, n, n, old + "/"),
            )
        con.execute(
            "UPDATE tags SET value = ? || substr(value, ?) WHERE key = ? AND substr(value, 1, ?) = ?",
            (new, n, JOURNAL_TAG, n, old + "/"),
        )
        for was, now in ((old, new), (json.dumps(old)[1:-1], json.dumps(new)[1:-1])):  # raw and JSON-escaped
            con.execute(
                "UPDATE datasets SET dataset_source = replace(dataset_source, ?, ?)",
                (f'"{was}/', f'"{now}/'),
            )
    return old


def follow_folder(results: str | os.PathLike) -> list[str]:
    """A results folder copied or moved elsewhere, made to work where it is now: its SQLite
    store's artifact locations (:func:`relocate`) and every study's
    ``parent.json`` that named the old store (its mtime kept, so Snakemake re-runs nothing)
    now point into this folder. One line per change; nothing when the folder is at home.
    No MLflow import."""
    results = Path(os.path.abspath(results))
    db = results / "mlflow.db"
    if not db.is_file() or sqlite_problem(db):
        return []
    old = relocate(db)
    notes = [f"{db}: the store was made in {old}; its artifacts now resolve in {results}"] if old else []
    for parent_json in sorted(results.glob("*/mlflow/parent.json")):
        record = read_parent(parent_json)
        was = sqlite_path(str(record.get("tracking_uri") or "")) if record is not None else None
        # the store this study named, left behind (copied from there) or gone (moved from there)
        if was is None or was == db or was.name != db.name or (was.exists() and str(was.parent) != old):
            continue
        write_parent_json(parent_json, {**record, "tracking_uri": f"sqlite:///{db}"})
        notes.append(f"{parent_json}: the study's store is now {db} (was {was})")
    return notes


def restore_parent_json(parent_json: str | os.PathLike, timeout: float = 5.0) -> str:
    """Write a lost ``parent_json`` again from the study's parent journal; one line saying
    so, or ``""`` (nothing journaled, creation cut short, or the store lacks the run).

    Without it, deleting ``parent.json`` mid-run (or a ``track start`` killed right after
    creating the run) leaves that parent RUNNING for good and makes Snakemake run every
    job again under a new one. The file is dated at the parent's start, as it was, so
    that the outputs made since stay newer than it. No MLflow import.
    """
    parent_json = Path(parent_json)
    record = journaled_parent(parent_json)
    if record is None or not record["complete"]:
        return ""
    uri, run_id = record["tracking_uri"], record["run_id"]
    path = sqlite_path(uri)
    if path is not None:  # under its key, else a rebuild's tag of it, else an older rebuild's id
        ok = path.exists() and not sqlite_problem(path)
        run_id = ok and (sqlite_run_id(path, record["key"]) or sqlite_run_id(path, run_id)) or ""
    elif uri.startswith(("http://", "https://")):
        run_id = run_id if not server_down(uri, timeout) and server_has_run(uri, run_id, timeout) else ""
    else:
        run_id = ""
    if not run_id:
        return ""
    keep = ("key", "tracking_uri", "experiment", "config_hash")
    write_parent_json(
        parent_json,
        {"run_id": run_id, **{k: record[k] for k in keep}},
        ns=int(record.get("start_time") or 0) * 1_000_000,
    )
    return (
        f"{parent_json} was missing; written again from the study's journal (parent run {run_id} at {uri}), "
        "so that no finished job runs again"
    )


#: The PINN's arm runs of a study (its parent run's id): the runs that carry each arm's answer.
_ARMS_QUERY = """
SELECT r.run_uuid, r.experiment_id, r.name FROM runs r
JOIN tags p ON p.run_uuid = r.run_uuid AND p.key = 'mlflow.parentRunId' AND p.value = ?
JOIN tags a ON a.run_uuid = r.run_uuid AND a.key = 'rule' AND a.value = 'train'
JOIN tags m ON m.run_uuid = r.run_uuid AND m.key = 'model' AND m.value = 'pinn'
LEFT JOIN tags o ON o.run_uuid = r.run_uuid AND o.key = 'outputs'
WHERE r.status = 'FINISHED' AND r.lifecycle_stage = 'active' AND COALESCE(o.value, 'current') = 'current'
ORDER BY r.name
"""


def pinn_arm_runs(results: str | os.PathLike) -> dict[str, tuple[str, list[str]]]:
    """Per study of a results folder (its preset): its experiment's id and the ids of the
    PINN's arm runs, read from its SQLite store (read-only, no MLflow import): the FINISHED
    ones, without the attempts the report's job tagged ``outputs = superseded``
    (:data:`ptycho.tracking.parent.OUTPUTS_TAG`), under the current parent run or, for arms
    a later config did not re-train, under the parent before it."""
    results = Path(os.path.abspath(results))
    out = {}
    with contextlib.closing(_read_only(results / "mlflow.db")) as con:
        for parent_json in sorted(results.glob("*/mlflow/parent.json")):
            parent = read_parent(parent_json)
            arms: dict[str, tuple[str, str]] = {}  # name -> (run id, experiment), the newest parent's first
            chain = [parent["run_id"]] if parent is not None else []
            while chain and len(chain) <= 100:
                for run_id, experiment, name in con.execute(_ARMS_QUERY, (chain[-1],)).fetchall():
                    arms.setdefault(name, (run_id, experiment))
                row = con.execute(_PREVIOUS_QUERY, (chain[-1],)).fetchone()
                if not row or row[0] in chain:
                    break
                chain.append(row[0])
            if arms:
                ordered = [arms[name] for name in sorted(arms)]
                out[parent_json.parent.parent.name] = (str(ordered[0][1]), [run_id for run_id, _ in ordered])
    return out


#: The parent run before a study's current one (a config change: ptycho.tracking.parent.PREVIOUS_TAG).
_PREVIOUS_QUERY = "SELECT value FROM tags WHERE run_uuid = ? AND key = 'previous_parent'"
