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

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO

from ptycho.errors import PtychoError

#: The lock file in ``results/<preset>/``.
LOCK_FILE = ".workflow.lock"


def hold(folder: str | os.PathLike) -> IO[str]:
    """Lock ``folder`` for this process; the returned file must stay open (referenced) as
    long as the run lasts. Raises a one-line :class:`PtychoError` naming the live run
    when another process holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held open for the run's life)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        text = handle.read()
        handle.close()
        raise PtychoError(busy_message(folder, text)) from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(_me()) + "\n")
    handle.flush()
    return handle


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
