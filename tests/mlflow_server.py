"""A local MLflow tracking server for tests: ``make mlflow-server``'s command on 127.0.0.1.

Started in its own process group and stopped by that group's id (the server runs
uvicorn workers), never by name. And a fake one (:func:`fake_server`), for the answers
of a server the probes must read: one loopback HTTP server, stopped on exit.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ptycho import tracking


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlflow_answer(request: http.server.BaseHTTPRequestHandler) -> tuple[int, bytes]:
    """MLflow 3's answer to a GET: /health for anyone, its API only for Host 127.0.0.1
    (its DNS-rebinding protection), 404 off the API path."""
    if request.path == "/health":
        return 200, b"OK"
    if not request.path.startswith("/api/2.0/mlflow/"):
        return 404, b"Not Found"
    if request.headers["Host"].split(":")[0] != "127.0.0.1":
        return 403, b"Invalid Host header - possible DNS rebinding attack detected"
    return 200, b'{"experiments": []}'


@contextlib.contextmanager
def fake_server(
    answer: Callable[[http.server.BaseHTTPRequestHandler], tuple[int, bytes]] = mlflow_answer,
) -> Iterator[int]:
    """A loopback HTTP server answering every GET with ``answer(request)`` (code, body);
    yields its port, and is stopped when the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = answer(self)
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def start_server(folder: Path, port: int) -> subprocess.Popen:
    """``make mlflow-server``'s command on 127.0.0.1 (one worker); its own process group."""
    mlflow = Path(sys.executable).with_name("mlflow")
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(folder / f"server-{time.monotonic_ns()}.log", "wb")
    proc = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow-server.db'}",
            "--artifacts-destination",
            str(folder / "mlflow-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 180
    while True:
        try:
            tracking.preflight(f"http://127.0.0.1:{port}", timeout=5)
            return proc
        except Exception:
            assert proc.poll() is None, "mlflow server exited at start"
            assert time.monotonic() < deadline, "mlflow server did not answer within 180 s"
            time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM its process group by PID (the server and its workers), SIGKILL after 20 s.
    The leader is reaped as it exits: an unreaped (zombie) leader still counts as a member
    of its group, so the group would look alive until the SIGKILL deadline."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.wait(5)
                return
            time.sleep(0.2)
