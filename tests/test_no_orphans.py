"""No orphans (#35 item 7): a process the package starts ends when its parent ends, even
by SIGKILL, and a command stopped by SIGTERM (Snakemake's way) stops its children first.

The real paths, each in its own processes: the bench's coordinator under a wrapper shell
as Snakemake runs it (the wrapper killed), the coordinator itself killed or stopped
(its workers), ``ptycho serve`` killed (its server), and the helpers of
:mod:`ptycho.runtime` on their own (a program started through ``preexec_fn``; a Python
process whose parent was gone before it bound itself). Every process a test starts is
killed by its PID in a ``finally``. The deadlines are generous: these are correctness
checks, not timings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
#: How long a child may take to end once its parent is gone.
DEADLINE = 30.0
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")


def _gone(proc: psutil.Process) -> bool:
    """Ended: no such process, or a zombie (ended, not yet reaped by its new parent)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _alive_after(procs: list[psutil.Process], deadline: float = DEADLINE) -> list[str]:
    """The processes of ``procs`` still running ``deadline`` seconds from now (their command lines)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and not all(_gone(p) for p in procs):
        time.sleep(0.2)
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if not _gone(p):
                alive.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
    return alive


def _kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL each by its PID (psutil checks that the PID was not reused)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _wait_for(what: str, found, timeout: float = 120.0):
    """Poll ``found()`` until it returns something truthy; fail after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = found()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def _python(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, cwd=ROOT, **kwargs
    )


# ------------------------------------------------------------------ the helpers themselves
def _kill_parent_then_no_child(parent: subprocess.Popen, ready: str = "") -> None:
    """``parent`` prints its child's pid (and the child's ``ready`` line): SIGKILL it, and
    its child must be gone soon after."""
    procs = [psutil.Process(parent.pid)]
    try:
        procs.append(psutil.Process(int(parent.stdout.readline())))
        if ready:
            assert parent.stdout.readline().strip() == ready
        parent.kill()
        parent.wait(10)
        assert _alive_after(procs[1:]) == []
    finally:
        _kill_all(procs)
        parent.wait(10)


def test_a_program_started_with_the_helper_ends_when_its_parent_is_killed():
    parent = _python(
        """
        import subprocess, sys, time
        from ptycho.runtime import dies_with_this_process

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 preexec_fn=dies_with_this_process())
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    _kill_parent_then_no_child(parent)


RACE_CHILD = """
import os, time
from ptycho.runtime import die_with_parent

parent = os.getppid()
print("started", flush=True)
while os.getppid() == parent:  # until the parent is killed
    time.sleep(0.05)
die_with_parent(parent)  # too late for the kernel: it must signal this process itself
time.sleep(600)
"""


def test_a_process_whose_parent_died_before_it_bound_itself_ends_at_once(tmp_path):
    """The race: the parent gone between the fork and the ``prctl`` (the kernel will never
    signal it then); :func:`ptycho.runtime.die_with_parent` sees the new parent and ends."""
    (tmp_path / "child.py").write_text(RACE_CHILD)
    parent = _python(
        f"""
        import subprocess, sys, time

        child = subprocess.Popen([sys.executable, {str(tmp_path / "child.py")!r}])
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    _kill_parent_then_no_child(parent, ready="started")


@pytest.mark.parametrize(
    ("nohup", "job", "bound"),
    [(False, False, True), (True, False, False), (True, True, True)],
    ids=["a-command", "under-nohup", "a-workflow-job-under-nohup"],
)
def test_a_command_is_bound_to_its_parent_unless_started_under_nohup_outside_the_workflow(nohup, job, bound):
    env = {k: v for k, v in os.environ.items() if k != "PTYCHO_CONFIG_HASH"}
    if job:
        env["PTYCHO_CONFIG_HASH"] = "0123"
    code = (
        "import signal; "
        # as nohup leaves it, or as a terminal does (set either way: an ignored SIGHUP is
        # inherited, and this test may itself run under nohup)
        + f"signal.signal(signal.SIGHUP, signal.{'SIG_IGN' if nohup else 'SIG_DFL'}); "
        + "from ptycho.runtime import bind_command_to_parent; print(bind_command_to_parent())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == str(bound), out.stderr


# ------------------------------------------------------------------ the bench
BENCH = [
    "bench",
    "--config",
    str(ROOT / "config.yaml"),
    "--preset",
    "smoke",
    "--models",
    "pinn",
    "--modes",
    "off",
    "--precisions",
    "float32",
    "--no-shared",
    "--warmup",
    "0",
    "--repeats",
    "100000",  # minutes of timing: a coordinator left running would still be at it
    "--train-batches",
    "--infer-batches",
    "--object-size",
    "48",
]


def _worker_of(coordinator: psutil.Process) -> psutil.Process | None:
    """The coordinator's arm worker (a spawned interpreter) once it runs its own code: it
    loads TensorFlow (after binding itself to the coordinator, :mod:`ptycho.study.bench.worker`)."""
    with contextlib.suppress(psutil.Error):
        for child in coordinator.children():
            if "spawn_main" in " ".join(child.cmdline()) and any("tensorflow" in m.path for m in child.memory_maps()):
                return child
    return None


def _family(proc: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [proc, *proc.children(recursive=True)]
    return [proc]


def test_killing_the_bench_jobs_wrapper_ends_its_coordinator_and_workers(tmp_path):
    """Snakemake runs a job as ``bash -c 'set -euo pipefail; python -m ptycho ... > log 2>&1'``:
    the wrapper killed (SIGKILL), the coordinator gets SIGTERM, stops its worker and ends."""
    log = tmp_path / "bench.log"
    command = " ".join([sys.executable, "-m", "ptycho", *BENCH, ">", str(log), "2>&1"])
    # as Snakemake starts it: with the workflow's job marker, so that the command binds to
    # its shell even where the tests run under nohup (SIGHUP ignored reads as "detached")
    env = dict(os.environ, PTYCHO_CONFIG_HASH="test")
    wrapper = subprocess.Popen(["/bin/bash", "-c", f"set -euo pipefail; {command}"], cwd=tmp_path, env=env)
    procs = [psutil.Process(wrapper.pid)]
    try:
        coordinator = _wait_for("the coordinator's start", lambda: psutil.Process(wrapper.pid).children())[0]
        procs.append(coordinator)
        procs.append(_wait_for("the worker's start", lambda: _worker_of(coordinator)))
        procs += [p for p in _family(coordinator) if p not in procs]
        wrapper.kill()
        wrapper.wait(10)
        assert _alive_after(procs[1:]) == [], log.read_text()[-3000:]
        assert "ptycho bench: interrupted" in log.read_text().splitlines()
    finally:
        _kill_all(procs)
        wrapper.wait(10)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_the_bench_coordinators_workers_end_with_it(tmp_path, sig):
    """SIGKILL: the workers' parent-death signal; SIGTERM (Snakemake stopping a job): the
    coordinator stops its workers before it exits, 130 and one line."""
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "ptycho", *BENCH], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    procs = [psutil.Process(coordinator.pid)]
    try:
        procs.append(_wait_for("the worker's start", lambda: _worker_of(procs[0])))
        procs += [p for p in _family(procs[0]) if p not in procs]
        coordinator.send_signal(sig)
        _, err = coordinator.communicate(timeout=DEADLINE)
        assert _alive_after(procs[1:]) == [], err[-3000:]
        if sig == signal.SIGTERM:
            assert coordinator.returncode == 130 and "ptycho bench: interrupted" in err.splitlines(), err[-3000:]
    finally:
        _kill_all(procs)
        coordinator.wait(10)


# ------------------------------------------------------------------ ptycho serve (make mlflow-server)
FAKE_SERVER = """
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])
time.sleep(float(sys.argv[sys.argv.index("--delay") + 1]))  # a server slow to start, as MLflow's


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", port), Health)
print("fake server: listening", flush=True)
server.serve_forever()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, *extra: str, delay: float = 2.0) -> tuple[subprocess.Popen, int]:
    (tmp_path / "fake_server.py").write_text(FAKE_SERVER)
    port = _free_port()
    server = [sys.executable, str(tmp_path / "fake_server.py"), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ptycho", "serve", *extra, "--", *server, "--delay", str(delay)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, port


def test_serve_announces_the_server_only_once_it_answers_and_stops_it_when_stopped(tmp_path):
    proc, port = _serve(tmp_path, "--tracking-uri", "http://node1:5001")
    procs = [psutil.Process(proc.pid)]
    try:
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
        assert lines[0] == (
            f"starting MLflow server on 127.0.0.1:{port} (this machine only; MLFLOW_HOST=0.0.0.0 for jobs on "
            "other nodes) ..."
        )
        assert lines[1] == "fake server: listening"  # the announcement comes after, never before
        assert lines[2].startswith(f"MLflow server serving at http://127.0.0.1:{port} (answered after ")
        assert lines[2].endswith(": export MLFLOW_TRACKING_URI=http://node1:5001")
        procs += psutil.Process(proc.pid).children()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 130 and err.splitlines() == ["ptycho serve: interrupted"], err
        assert _alive_after(procs[1:]) == []
    finally:
        _kill_all(procs)
        proc.wait(10)


def test_serve_killed_takes_its_server_with_it(tmp_path):
    proc, _ = _serve(tmp_path, delay=0.0)
    procs = [psutil.Process(proc.pid)]
    try:
        _wait_for("the announcement", lambda: "serving at" in proc.stdout.readline())
        procs += psutil.Process(proc.pid).children()
        assert len(procs) == 2
        proc.kill()
        proc.wait(10)
        assert _alive_after(procs[1:]) == []
    finally:
        _kill_all(procs)
        proc.wait(10)


def test_serve_says_in_one_line_when_the_server_ends_before_it_answers(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ptycho", "serve", "--", sys.executable, "-c", "raise SystemExit(3)", "--port", "9"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "ptycho serve: error: the MLflow server exited (code 3) before it answered at http://127.0.0.1:9; "
        "see its output above"
    ]
    assert "serving at" not in r.stdout
