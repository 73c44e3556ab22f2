"""Can runs be recorded at a tracking URI? Answered in one line before a long job starts."""

from __future__ import annotations

import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ptycho.errors import PtychoError
from ptycho.tracking.journal import journaled_parent
from ptycho.tracking.store import (
    rebuild_command,
    relocate,
    server_down,
    server_has_run,
    sqlite_has_run,
    sqlite_path,
    sqlite_problem,
    sqlite_run_id,
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
        _preflight_server(uri, timeout)
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PtychoError(f"cannot create MLflow store folder {path.parent} ({exc.strerror}); {fix}") from None
    if writable_problem(path.parent, folder=True):
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
    import json

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
    fix = f"rebuild it from the journals: {rebuild_command(results)}"
    record = {}
    if parent_json.exists():
        try:
            record = json.loads(parent_json.read_text())
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or not record.get("run_id") or not record.get("tracking_uri"):
            raise PtychoError(f"{parent_json} is damaged (not the JSON 'track start' writes); {fix}")
    uri = record.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    uri = uri or f"sqlite:///{results / 'mlflow.db'}"
    run_id = record.get("run_id", "")
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
        if run_id and sqlite_has_run(path, run_id) is False:
            raise PtychoError(f"MLflow store {path} does not hold parent run {run_id} of {parent_json}; {fix}")
    elif run_id and uri.startswith(("http://", "https://")):
        preflight(uri, timeout)
        if not server_has_run(uri, run_id, timeout):
            raise PtychoError(
                f"MLflow tracking server at {uri} does not hold parent run {run_id} of {parent_json} "
                f"(a new or emptied server?); {fix}"
            )


def follow_folder(results: str | os.PathLike) -> list[str]:
    """A results folder copied or moved elsewhere, made to work where it is now: its SQLite
    store's artifact locations (:func:`~ptycho.tracking.store.relocate`) and every study's
    ``parent.json`` that named the old store (its mtime kept, so Snakemake re-runs nothing)
    now point into this folder. One line per change; nothing when the folder is at home.
    No MLflow import."""
    import json

    from ptycho.artifacts import write_json

    results = Path(os.path.abspath(results))
    db = results / "mlflow.db"
    if not db.is_file() or sqlite_problem(db):
        return []
    old = relocate(db)
    notes = [f"{db}: the store was made in {old}; its artifacts now resolve in {results}"] if old else []
    for parent_json in sorted(results.glob("*/mlflow/parent.json")):
        try:
            record = json.loads(parent_json.read_text())
            was = sqlite_path(str(record.get("tracking_uri") or ""))
        except (OSError, ValueError, AttributeError):
            continue
        # the store this study named, left behind (copied from there) or gone (moved from there)
        if was is None or was == db or was.name != db.name or (was.exists() and str(was.parent) != old):
            continue
        stamp = parent_json.stat()
        write_json(parent_json, {**record, "tracking_uri": f"sqlite:///{db}"})
        os.utime(parent_json, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
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
    from ptycho.artifacts import write_json

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
    write_json(parent_json, {"run_id": run_id, **{k: record[k] for k in keep}})
    start = int(record.get("start_time") or 0) * 1_000_000
    if start:
        os.utime(parent_json, ns=(start, start))
    return (
        f"{parent_json} was missing; written again from the study's journal (parent run {run_id} at {uri}), "
        "so that no finished job runs again"
    )
