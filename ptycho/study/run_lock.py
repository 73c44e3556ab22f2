"""One live workflow per results folder.

Snakemake's own lock (``.snakemake/locks``) guards the work folder, and ``snakemake
--unlock`` removes it without asking whether its run is alive: the next command then
starts the same trainings beside the live ones (both write one model, MLflow holds each
training twice, the first run dies with ``MissingOutputException``). The workflow
therefore holds its own lock on ``results/<preset>/``: an exclusive ``flock`` on a file
there, held by the Snakemake process for its whole life. The kernel drops it when that
process ends by any means (``kill -9``, a lost node, a power cut), so it is never stale
and never needs an unlock; while it is held, a second run is refused in one line naming
the live process. The file also records that process (pid, start time, host, command)
for the message; it is left in place, as only the lock on it counts.

The descriptor is not inherited by jobs (Python opens files non-inheritable, PEP 446): a
job that outlives a killed Snakemake does not keep the folder locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ptycho.errors import PtychoError

#: The lock file in ``results/<preset>/``.
LOCK_FILE = ".workflow.lock"


def hold(folder: str | os.PathLike) -> IO[str]:
    """Lock ``folder`` for this process; the returned file must stay open (referenced) as
    long as the run lasts. Raises a one-line :class:`PtychoError` naming the live run
    when another process holds it."""
    from ptycho.artifacts import write_error

    folder = Path(folder)
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held open for the run's life)
    except OSError as exc:
        raise write_error(path, exc, atomic=False) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        text = handle.read()
        handle.close()
        raise PtychoError(busy_message(folder, text)) from None
    try:
        _record(handle, _me())
    except OSError as exc:  # a full disk: the lock is taken, its record could not be written
        with contextlib.suppress(OSError):  # closing flushes the same bytes again
            handle.close()
        raise write_error(path, exc, atomic=False) from None
    return handle


def held(folder: str | os.PathLike) -> bool:
    """Whether another process holds ``folder``'s lock (a live run there); takes nothing."""
    try:
        with open(Path(folder) / LOCK_FILE, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:  # no lock file: no run has held it
        return False
    return False


def _record(handle: IO[str], who: dict) -> None:
    """Write the locking process's record (``who``) into its lock file, in place."""
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(who) + "\n")
    handle.flush()


def _me() -> dict:
    try:
        import psutil

        started = psutil.Process().create_time()
    except Exception:  # noqa: BLE001 (informational only)
        started = time.time()
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(sys.argv[1:])[:300],
    }


def busy_message(folder: Path, text: str) -> str:
    """The one line for a folder another run holds, from the holder's record (``text``)."""
    try:
        who = json.loads(text)
        pid, host, started = who["pid"], who["host"], who["started_utc"]
    except (ValueError, KeyError, TypeError):
        return (
            f"results folder {folder} is in use by another workflow run (its lock file {LOCK_FILE} is held); "
            "wait for it to end, or stop it, then run again"
        )
    return (
        f"results folder {folder} is in use by the workflow run of pid {pid} on {host}, started {started}; "
        f"wait for it to end, or stop it (kill {pid}) and run again (snakemake --unlock does not stop that run)"
    )


# ------------------------------------------------------------------ the jobs of a run
#: Each running job's lock file, in ``results/<preset>/``: ``.jobs/<pid>.lock``.
JOBS_FOLDER = ".jobs"
#: The environment variable naming the Snakemake process that runs the jobs
#: (``pid:start time:host``, set by the workflow while it is parsed in its main process).
WORKFLOW_ENV = "PTYCHO_WORKFLOW"


def workflow_marker() -> str:
    """This process as :data:`WORKFLOW_ENV` names it."""
    import psutil

    return f"{os.getpid()}:{psutil.Process().create_time():.3f}:{socket.gethostname()}"


@contextlib.contextmanager
def job_marked(parent_json: str | os.PathLike | None, command: str) -> Iterator[None]:
    """Mark this process as a running job of a workflow's results folder while the block
    runs: an exclusive ``flock`` on ``results/<preset>/.jobs/<pid>.lock``, the folder
    found from the job's ``--mlflow-parent`` (``results/<preset>/mlflow/parent.json``;
    another layout marks nothing). A new run's :func:`check_no_live_jobs` finds it while
    the process lives (the jobs of a killed Snakemake that are still ending); the file
    goes when the block ends, and a file left by a killed job has a free lock, which
    marks nothing. Where nothing can be locked (a read-only or lock-less filesystem)
    the job runs unmarked."""
    parent = Path(parent_json) if parent_json else None
    if parent is None or parent.parent.name != "mlflow":
        yield
        return
    path = parent.parent.parent / JOBS_FOLDER / f"{os.getpid()}.lock"
    handle = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 (held open for the job's life)
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _record(handle, {**_me(), "command": command, "workflow": os.environ.get(WORKFLOW_ENV, "")})
    except OSError:
        pass
    try:
        yield
    finally:
        if handle is not None:
            path.unlink(missing_ok=True)
            handle.close()
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # when it was the last


def live_jobs(folder: str | os.PathLike) -> list[dict]:
    """The jobs of an earlier run still running in ``folder`` (their records), each file
    of a finished one removed."""
    live = []
    for path in sorted((Path(folder) / JOBS_FOLDER).glob("*.lock")):
        try:
            with open(path, "r+", encoding="utf-8") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    try:
                        live.append(json.loads(handle.read()))
                    except ValueError:
                        live.append({"pid": path.stem, "command": "?"})
                    continue
                path.unlink(missing_ok=True)  # its job ended: the lock was free
        except OSError:
            continue
    return live


def check_no_live_jobs(folder: str | os.PathLike) -> None:
    """One line if jobs of an earlier run (a Snakemake killed outright) still run here."""
    live = live_jobs(folder)
    running = next((pid for pid in (live_workflow(j.get("workflow")) for j in live) if pid), None)
    if running is not None:  # their Snakemake lives: a run is going on, its lock file was removed
        raise PtychoError(
            f"a Snakemake (pid {running}) is running in {folder} with {len(live)} job(s), although its lock file "
            f"{LOCK_FILE} is gone (deleted?); wait for it to end, or stop it (Ctrl-C in its terminal, or "
            f"kill -INT {running}), then run again"
        )
    if live:
        pids = " ".join(str(j.get("pid")) for j in live)
        what = ", ".join(f"pid {j.get('pid')}: {j.get('command', '?')}" for j in live[:3])
        raise PtychoError(
            f"{len(live)} job(s) of an earlier run still run in {folder} ({what}{', ...' if len(live) > 3 else ''}); "
            f"they stop by themselves within seconds once their Snakemake is gone: wait, or stop them (kill {pids}), "
            "then run again"
        )


def live_workflow(marker: str | None) -> int | None:
    """The pid of the Snakemake that ``marker`` (:func:`workflow_marker`) names, if it still
    runs on this host (the same pid and start time); None otherwise."""
    import psutil

    try:
        pid_text, started_text, host = (marker or "").split(":", 2)
        pid, started = int(pid_text), float(started_text)
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    try:
        return pid if abs(psutil.Process(pid).create_time() - started) < 1.0 else None
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return pid  # someone's process: not a sign that Snakemake is gone


def watch_workflow(marker: str | None, interval: float = 2.0) -> bool:
    """In a job: end this process (SIGTERM, which the CLI turns into an interruption that
    ends its MLflow run KILLED) when the Snakemake named by ``marker`` is gone, however it
    went (``kill -9``: Snakemake then cannot stop its jobs, which would go on writing into
    the results folder beside the user's next run). A daemon thread polls every
    ``interval`` seconds. Only for a Snakemake on this host (a cluster job's runs
    elsewhere: the scheduler owns it). Returns whether it watches."""
    import signal
    import threading

    pid = live_workflow(marker)
    if pid is None or pid == os.getpid():
        return False

    def alive() -> bool:
        return live_workflow(marker) == pid

    def watch() -> None:
        while alive():
            time.sleep(interval)
        sys.stderr.write(f"ptycho: the workflow's Snakemake (pid {pid}) is gone: stopping this job\n")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ptycho-watch-workflow", daemon=True).start()
    return True
