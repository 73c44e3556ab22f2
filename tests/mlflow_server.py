"""A local MLflow tracking server for tests: ``make mlflow-server``'s command on 127.0.0.1.

Started in its own process group and stopped by that group's id (the server runs
uvicorn workers), never by name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ptycho import tracking


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
