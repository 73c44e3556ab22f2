"""A tracking server, seen from a job: MLflow's HTTP settings for it, and one-request
probes (no MLflow import) that say in one line whether it answers, refuses this host
name, is not MLflow, or is gone, and how to bring it back. And the server itself, as
``make mlflow-server`` runs it (:func:`serve`): announced once it answers, stopped with
its runner.
"""

from __future__ import annotations

import http.client
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from ptycho.errors import ConfigError, PtychoError, causes

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


def track_command(verb: str, path: str | os.PathLike) -> str:
    """``python -m ptycho track <verb> <path>`` as a user types it here (the path relative
    to the current folder if inside it): the replay of a journal, the rebuild of a store."""
    import shlex

    path, cwd = Path(os.path.abspath(path)), Path.cwd()
    shown = os.path.relpath(path, cwd) if path == cwd or cwd in path.parents else str(path)
    return f"python -m ptycho track {verb} {shlex.quote(shown)}"


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
        f"{track_command('replay', journal)})"
    )


def unreachable(exc: BaseException) -> str:
    """A short reason if ``exc`` says the tracking server cannot be reached, else ``""``.

    MLflow's REST client has already retried with backoff (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
    ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``) when its error reaches us; what is left is a
    connection refused, reset or timed out somewhere in the chain of causes.
    """
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
    for err in causes(exc):
        if isinstance(err, ConnectionError | TimeoutError):
            return type(err).__name__
        text = str(err).lower()
        for marker in markers:
            if marker in text:
                return marker
    return ""


def _get(url: str, timeout: float, opener: Callable = urllib.request.urlopen) -> tuple[int | None, str, str]:
    """One GET of ``url``, never through MLflow: ``(HTTP status, start of the body, "")``
    when the server answers (an HTTP error is an answer), ``(None, "", why)`` when it does
    not (refused, timed out, no such host, not a URL)."""
    try:
        with opener(urllib.request.Request(url, method="GET"), timeout=timeout) as response:
            return response.status, "", ""
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(300).decode("utf-8", "replace")
        except Exception:  # a broken body does not change the verdict
            body = ""
        return exc.code, body, ""
    except urllib.error.URLError as exc:
        reason = str(exc.reason)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = str(exc) or type(exc).__name__
    return None, "", " ".join(reason.split())


def _search_url(uri: str) -> str:
    """The request every job makes first: an experiment search (not ``/health``, which
    MLflow exempts from its host-name check)."""
    return uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"


def server_down(uri: str, timeout: float = 5.0) -> str:
    """Why the tracking server at ``uri`` cannot be reached at all (refused, timed out, no
    such host), or ``""`` if it answers anything; no MLflow import, one request.

    Asked before a job's first MLflow call: MLflow would retry that call (see
    :data:`SERVER_DEFAULTS`), and a job started after its server went
    away should say so in seconds. An HTTP error is an answer: its meaning (a 403 for the
    host name, a 404 for a wrong path) is :func:`preflight_server`'s to explain.
    """
    if not is_server(uri):
        return ""  # a database: no server to ask
    status, _, reason = _get(_search_url(uri), timeout)
    return "" if status is not None else reason


def server_has_run(uri: str, run_id: str, timeout: float) -> bool:
    """False only if the server says the run does not exist; anything else is for the jobs to meet."""
    status, body, _ = _get(uri.rstrip("/") + "/api/2.0/mlflow/runs/get?run_id=" + urllib.parse.quote(run_id), timeout)
    return not (status == 404 and "RESOURCE_DOES_NOT_EXIST" in body)


def preflight_server(uri: str, timeout: float) -> None:
    """A one-line :class:`PtychoError` with the fix unless the server at ``uri`` answers
    MLflow's API for this host name (see :func:`ptycho.tracking.access.preflight`)."""
    url = _search_url(uri)
    status, body, reason = _get(url, timeout)
    if status is not None and (
        200 <= status < 300 or status == 401 or (status == 403 and "invalid host header" not in body.lower())
    ):
        return  # an answer; 401 and 403 are authentication: the real calls carry the credentials
    if status == 403:
        host = urllib.parse.urlsplit(uri).netloc
        raise PtychoError(
            f"MLflow tracking server at {uri} refuses requests addressed to {host!r} (HTTP 403, its "
            f"DNS-rebinding protection); restart it with MLFLOW_ALLOWED_HOSTS='{host}' make mlflow-server, "
            "or put its private IP address in MLFLOW_TRACKING_URI"
        )
    if status == 404:
        raise PtychoError(
            f"{uri} answers but has no MLflow tracking API (HTTP 404 from {url}); "
            "check the address (scheme, host, port, path) in MLFLOW_TRACKING_URI"
        )
    fix = "start it with 'make mlflow-server' (MLFLOW_HOST=0.0.0.0 when jobs run on other nodes) or unset MLFLOW_TRACKING_URI"
    raise PtychoError(
        f"MLflow tracking server at {uri} is unreachable ({reason or f'HTTP {status} from {url}'}); {fix}"
    )


# ------------------------------------------------------------------ the server itself
#: How long :func:`serve` waits for its server to answer: MLflow 3 takes 20-51 s to
#: start on a 2-CPU machine (imports, the store's migrations), more on a busy one.
SERVE_TIMEOUT = 300.0
#: Where ``mlflow server`` listens without ``--host`` and ``--port``.
_MLFLOW_HOST, _MLFLOW_PORT = "127.0.0.1", "5000"
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine: no proxy


def _option(command: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag value`` or ``--flag=value``) in ``command``, if given."""
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def local_url(host: str, port: str | int) -> str:
    """Where this machine reaches a server listening on ``host``: a wildcard address
    (``0.0.0.0``, ``::``) through the loopback one."""
    host = host.strip("[]")
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether the server at ``url`` answers its health endpoint (``/health``, which MLflow
    exempts from its host-name check) with 200; asked directly, never through a proxy."""
    return _get(url.rstrip("/") + "/health", timeout, _LOCAL.open)[0] == 200


def port_taken(host: str, port: str | int) -> str:
    """Why a server could not listen on ``host:port`` ('' when nothing listens there): asked
    by connecting to it (a wildcard host through loopback), never by binding it.

    Asked before a server starts, because a port already taken by another server makes
    the health check answer for that one: the new server was announced at its address,
    then failed with 'Address already in use' and exited 0."""
    import socket
    from urllib.parse import urlsplit

    target = urlsplit(local_url(host, port)).hostname or "127.0.0.1"
    try:
        with socket.create_connection((target, int(port)), timeout=2.0):
            return "another process listens there"
    except OSError:
        return ""


def refuse_taken_port(host: str, port: str | int, fix: str) -> None:
    """One line (:class:`PtychoError`) when ``host:port`` is taken, naming ``fix``."""
    why = port_taken(host, port)
    if why:
        raise PtychoError(
            f"port {port} on {host} is already in use ({why}: a tracking server running already?); use that one, "
            f"stop it by its pid, or {fix}"
        )


def _stop(proc, grace: float = 30.0) -> None:
    """SIGTERM (MLflow passes it on to its web server's workers), SIGKILL after ``grace``."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve(
    command: Sequence[str],
    tracking_uri: str | None = None,
    timeout: float = SERVE_TIMEOUT,
    announce: Sequence[str] = (),
    port_fix: str = "choose another port (--port)",
) -> int:
    """Run a tracking server's ``command`` (``mlflow server ...``) until it ends; its exit code.

    Says ``starting MLflow server on HOST:PORT ...`` first and ``MLflow server serving at
    URL`` only once the server answers (:func:`answers`, polled for at most ``timeout``
    seconds; the address is the command's ``--host`` and ``--port``), with the
    ``MLFLOW_TRACKING_URI`` jobs should export (``tracking_uri``), then the ``announce``
    lines (``make ui``'s addresses: links printed before the server answers led to a
    refused connection for a minute under load). A port already taken is one line naming
    ``port_fix``. The server ends with this
    process, even a killed one (:func:`ptycho.runtime.dies_with_this_process`), and is
    stopped when this process is interrupted (SIGTERM, Ctrl-C), gives up or fails."""
    import subprocess

    from ptycho.runtime import dies_with_this_process

    if not command:
        raise ConfigError("name the server's command after '--' (e.g. -- mlflow server --port 5001)")
    host, port = _option(command, "--host") or _MLFLOW_HOST, _option(command, "--port") or _MLFLOW_PORT
    url = local_url(host, port)
    refuse_taken_port(host, port, port_fix)
    loopback = host.strip("[]") in ("127.0.0.1", "localhost", "::1")
    # the hint is for a tracking server (make mlflow-server names the URI jobs use), not make ui
    where = " (this machine only; MLFLOW_HOST=0.0.0.0 for jobs on other nodes)" if loopback and tracking_uri else ""
    print(f"starting MLflow server on {host}:{port}{where} ...", flush=True)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, preexec_fn=dies_with_this_process())
    except OSError as exc:
        raise PtychoError(f"cannot run {command[0]} ({exc.strerror or exc})") from None
    try:
        while not answers(url):
            code = proc.poll()
            if code is not None:
                raise PtychoError(
                    f"the MLflow server exited (code {code}) before it answered at {url}; see its output above"
                )
            if time.monotonic() - started > timeout:
                raise PtychoError(
                    f"the MLflow server did not answer at {url}/health within {timeout:.0f} s; stopped it"
                )
            time.sleep(0.5)
        export = f": export MLFLOW_TRACKING_URI={tracking_uri}" if tracking_uri else ""
        print(f"MLflow server serving at {url} (answered after {time.monotonic() - started:.0f} s){export}", flush=True)
        for line in announce:  # what the caller has to say once the server answers (make ui's addresses)
            print(line, flush=True)
        return proc.wait()
    finally:
        if proc.poll() is None:
            _stop(proc)
