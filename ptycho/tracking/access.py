"""Can runs be recorded at a tracking URI? Answered in one line before a long job starts."""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.parse
import urllib.request

from ptycho.errors import PtychoError
from ptycho.tracking.store import sqlite_path


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
