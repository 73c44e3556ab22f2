"""``apt-get`` for the tests that install what they drive (Chromium: tests/test_browser.py;
SLURM: tests/slurm.py), safe to run while another test installs too: the test workers
(pytest-xdist) can reach both installers at once, and apt takes a lock that a second
``apt-get update`` does not wait for."""

from __future__ import annotations

import subprocess
import time


def apt_get(
    *args: str, sudo: bool = False, env: dict | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess:
    """``apt-get ARGS``, waiting for other apt/dpkg runs on the machine to finish.

    ``DPkg::Lock::Timeout`` makes dpkg wait for its lock; the lists lock taken by
    ``update`` is retried here, for 5 min at most.
    """
    command = [
        *(["sudo", "-n"] if sudo else []),
        "env",
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "-o",
        "DPkg::Lock::Timeout=300",
        *args,
    ]
    deadline = time.monotonic() + 300
    repaired = False
    while True:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if "dpkg was interrupted" in result.stderr and not repaired:
            # An install stopped midway (a timeout, a killed test) leaves dpkg refusing every
            # later one, which would turn the SLURM test into a skip: finish it, once, as
            # apt's own message says.
            repaired = True
            configure = [*(["sudo", "-n"] if sudo else []), "env", "DEBIAN_FRONTEND=noninteractive"]
            subprocess.run([*configure, "dpkg", "--configure", "-a"], env=env, capture_output=True, timeout=timeout)
            continue
        if result.returncode == 0 or "lock" not in result.stderr.lower() or time.monotonic() > deadline:
            return result
        time.sleep(5)
