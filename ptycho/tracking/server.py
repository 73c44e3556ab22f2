"""A tracking server, seen from a job: MLflow's HTTP settings for it, and one-request
probes (no MLflow import) that say in one line whether it answers, refuses this host
name, is not MLflow, or is gone, and how to bring it back.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ptycho.errors import PtychoError

#: MLflow's settings for a tracking server in this project's processes, unless the user
#: set them. HTTP retries: 3, 0, 2 and 4 s apart (plus up to 1 s of jitter each), 20 s per
#: attempt. MLflow's own defaults (7 retries, backoff factor 2, 120 s) are made for
#: rate-limited hosted services and hang every call to a tracking server that is gone for
#: about 4 min 20 s; a job here then goes on offline (its journal) or stops, in seconds. A
#: short restart of the server is still ridden out, and what a job could not send is
#: replayed from its journal. And no "View run ... at: <url>" line on stdout at every run's
#: end (a sweep ending or replaying runs would print one per run among its own lines).
SERVER_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (HTTP or HTTPS)."""
    return uri.startswith(("http://", "https://"))


def server_defaults(environ: dict | None = None) -> None:
    """Put :data:`SERVER_DEFAULTS` into ``environ`` (this process's environment) where the
    user has not set them; MLflow reads them at every request. Values already set win."""
    environ = os.environ if environ is None else environ
    for key, value in SERVER_DEFAULTS.items():
        environ.setdefault(key, value)


def replay_command(journal: str | os.PathLike) -> str:
    """The command that sends a journal file or folder to MLflow again, as a user types it
    here (the path relative to the current folder if inside it)."""
    import shlex

    path = Path(os.path.abspath(journal))
    cwd = Path.cwd()
    shown = os.path.relpath(path, cwd) if cwd in path.parents else str(path)
    return f"python -m ptycho track replay {shlex.quote(shown)}"


def server_gone(uri: str, reason: str, journal: str | os.PathLike | None) -> str:
    """The one line for a tracking server found gone: how to bring it back, and that the
    re-run (or the replay command, by hand) sends what the jobs journaled meanwhile."""
    line = (
        f"MLflow tracking server at {uri} is unreachable ({reason}); start it again ('make mlflow-server') and re-run"
    )
    if journal is None:
        return line + ", or unset MLFLOW_TRACKING_URI"
    return (
        line + ": the re-run replays what the jobs journaled meanwhile (by hand, once the server is back: "
        f"{replay_command(journal)})"
    )


def unreachable(exc: BaseException) -> str:
    """A short reason if ``exc`` says the tracking server cannot be reached, else ``""``.

    MLflow's REST client has already retried with backoff (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
    ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``) when its error reaches us; what is left is a
    connection refused, reset or timed out somewhere in the chain of causes.
    """
    seen: set[int] = set()
    err: BaseException | None = exc
    markers = (
        "connection refused",
        "max retries exceeded",
        "failed to establish a new connection",
        "connection aborted",
        "connection reset",
        "remotedisconnected",
        "read timed out",
        "connect timeout",
        "name or service not known",
        "temporary failure in name resolution",
    )
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


def server_down(uri: str, timeout: float = 5.0) -> str:
    """Why the tracking server at ``uri`` cannot be reached at all (refused, timed out, no
    such host), or ``""`` if it answers anything; no MLflow import, one request.

    Asked before a job's first MLflow call: MLflow would retry that call (see
    :data:`SERVER_DEFAULTS`), and a job started after its server went
    away should say so in seconds. An HTTP error is an answer: its meaning (a 403 for the
    host name, a 404 for a wrong path) is :func:`preflight`'s to explain.
    """
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout):
            return ""
    except urllib.error.HTTPError:
        return ""
    except urllib.error.URLError as exc:
        reason = str(exc.reason)
    except (OSError, http.client.HTTPException) as exc:
        reason = str(exc) or type(exc).__name__
    return " ".join(reason.split())


def server_has_run(uri: str, run_id: str, timeout: float) -> bool:
    """False only if the server says the run does not exist; anything else is for the jobs to meet."""
    url = uri.rstrip("/") + "/api/2.0/mlflow/runs/get?run_id=" + urllib.parse.quote(run_id)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(300).decode("utf-8", "replace")
        except Exception:  # a broken body does not change the verdict
            body = ""
        return not (exc.code == 404 and "RESOURCE_DOES_NOT_EXIST" in body)
    except (OSError, ValueError, http.client.HTTPException):
        return True


def preflight_server(uri: str, timeout: float) -> None:
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
