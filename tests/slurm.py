"""A real single-node SLURM for tests: munged, slurmctld and slurmd, started and stopped here.

Debian 12's Slurm 22.05 and munge 0.5.15, run as root without systemd. Everything this
module starts lives in one scratch folder and is found again through its pid file (the
daemons) or its environment (job processes), never by process name:

* ``slurm.conf`` and ``cgroup.conf`` are written there and every daemon and client
  command gets ``SLURM_CONF`` pointing at it, so ``/etc/slurm`` is never touched. Slurm
  reads ``cgroup.conf`` from the folder of the ``slurm.conf`` in force, so one variable
  moves both.
* One exception: snakemake-executor-plugin-slurm-jobstep (0.6) removes every
  ``SLURM_*`` variable but the job's identity, ``SLURM_CONF`` included, from the
  environment of the ``srun`` it runs inside each batch job, and that ``srun`` then finds
  no configuration (real clusters keep it at the default path or run configless). The
  jobs therefore find ``srun`` first on a ``PATH`` entry of this folder, a two-line
  wrapper that sets ``SLURM_CONF`` and runs the real one.
* munged gets its own socket in that folder (``AuthInfo=socket=...`` tells Slurm), so a
  munged already running on the machine is neither needed nor disturbed.
* slurmctld and slurmd listen on free ports picked at start, so two clusters (two
  engineers, two CI jobs) on one machine do not collide.

Packages are installed with apt-get when missing; the package scripts would start the
Debian services through ``invoke-rc.d``, which a ``/usr/sbin/policy-rc.d`` that exits
101 prevents. One is added only if none exists and removed only if it is ours.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
COMMANDS = ("slurmctld", "slurmd", "sinfo", "sbatch", "srun", "squeue", "scancel", "munged")
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_POLICY_MARKER = "# added by ptycho's tests/slurm.py; removed after apt-get install"


class Unavailable(Exception):
    """SLURM cannot be set up here (not root, no apt, no network): a reason to skip."""


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if _which(c) is None]


@contextlib.contextmanager
def _no_service_starts() -> Iterator[None]:
    """A policy-rc.d that forbids service starts, for the duration of an install."""
    ours = not POLICY_RC_D.exists()
    if ours:
        POLICY_RC_D.write_text(f"#!/bin/sh\n{_POLICY_MARKER}\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        if ours and POLICY_RC_D.exists() and _POLICY_MARKER in POLICY_RC_D.read_text():
            POLICY_RC_D.unlink()


def ensure_installed(timeout: float = 900) -> None:
    """Install the Debian packages if any command is missing; raise Unavailable if impossible."""
    if not missing_commands():
        return
    if os.geteuid() != 0:
        raise Unavailable(
            f"SLURM is not installed ({', '.join(missing_commands())} missing) and installing it needs root"
        )
    if _which("apt-get") is None:
        raise Unavailable("SLURM is not installed and there is no apt-get to install it (Debian/Ubuntu only)")
    from apt_install import apt_get  # waits for another test's apt-get (the browser tests' Chromium)

    with _no_service_starts():
        update = apt_get("update", timeout=timeout)
        if update.returncode != 0:
            raise Unavailable(f"apt-get update failed (no network or mirror?): {_tail(update.stderr)}")
        install = apt_get("install", "-y", "--no-install-recommends", *PACKAGES, timeout=timeout)
    if install.returncode != 0:
        raise Unavailable(f"apt-get install {' '.join(PACKAGES)} failed: {_tail(install.stderr)}")
    if missing_commands():
        raise Unavailable(f"installed {' '.join(PACKAGES)} but {', '.join(missing_commands())} still missing")


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_total_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (its parent, init, will reap it).
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat: with the pid, identifies a process even after pid reuse."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class Cluster:
    """One node (``localhost``), one partition (``debug``), in ``root``.

    ``start()`` brings munged, slurmctld and slurmd up and waits until a real ``srun``
    works; ``stop()`` cancels every job, stops each daemon by the pid in its pid file
    (after checking ``/proc/PID/comm``), kills what survives 10 s, and returns the pids
    still alive (none, normally). ``env`` is the environment for client commands and for
    anything that submits jobs (Snakemake): the jobs inherit ``SLURM_CONF`` through
    ``sbatch --export=ALL``.
    """

    DAEMONS = ("munged", "slurmctld", "slurmd")

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_dir = self.root / "munge"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.bin = self.root / "bin"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=f"{self.bin}:{os.environ.get('PATH', '')}")
        self.env.pop("SLURM_JOB_ID", None)  # a test run inside a SLURM job must not look like one here
        self.started: dict[str, int] = {}
        self.seconds_to_ready: float | None = None

    # ---------------------------------------------------------------- configuration
    def pid_file(self, daemon: str) -> Path:
        return self.root / "run" / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.root / "log" / f"{daemon}.log"

    def write_config(self) -> None:
        for sub in ("etc", "run", "log", "state", "spool", "bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged insists on a socket folder owned by its user, writable by nobody else and
        # searchable by everyone (clients must reach the socket).
        munge = pwd.getpwnam("munge")
        self.munge_dir.mkdir(exist_ok=True)
        self.munge_dir.chmod(0o755)
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        self.root.chmod(0o755)  # munged (user munge) must reach its folder
        cpus = os.cpu_count() or 1
        memory = max(1024, _mem_total_mib() - 1024)
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=ptycho-test",
                    "SlurmctldHost=localhost",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "MpiDefault=none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    "DefMemPerCPU=500",  # a job without --mem would otherwise take the whole node
                    "ReturnToService=2",
                    "MinJobAge=300",  # finished jobs stay visible to squeue (the test profile's status command)
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}",
                    f"SlurmctldPidFile={self.pid_file('slurmctld')}",
                    f"SlurmdPidFile={self.pid_file('slurmd')}",
                    f"SlurmctldLogFile={self.log_file('slurmctld')}",
                    f"SlurmdLogFile={self.log_file('slurmd')}",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "JobCompType=jobcomp/none",
                    "MailProg=/bin/true",
                    f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
                    "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        # slurmd 22.05 always loads a cgroup plugin and autodetection fails on some hosts.
        (self.conf.parent / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        # srun inside jobs loses SLURM_CONF to the jobstep plugin (see the module docstring).
        self.bin.mkdir(exist_ok=True)
        srun = self.bin / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_which("srun")} "$@"\n')
        srun.chmod(0o755)

    # ------------------------------------------------------------------------ start
    def _daemon(self, name: str, argv: Sequence[str], user: str | None = None) -> None:
        cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        result = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(
                f"{name} did not start (exit {result.returncode}): {_tail(result.stderr)}{self.log_tail(name)}"
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                pid = int(self.pid_file(name).read_text().split()[0])
                if _alive(pid) and _comm(pid) == name:
                    self.started[name] = pid
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{name} wrote no pid file {self.pid_file(name)} within 20 s{self.log_tail(name)}")

    def start(self, timeout: float = 180) -> None:
        t0 = time.monotonic()
        self.write_config()
        munge_owned = pwd.getpwnam("munge")
        for path in (self.pid_file("munged"), self.log_file("munged")):
            path.touch()
            os.chown(path, munge_owned.pw_uid, munge_owned.pw_gid)
        self._daemon(
            "munged",
            [
                _which("munged"),
                f"--socket={self.munge_socket}",
                f"--pid-file={self.pid_file('munged')}",
                f"--log-file={self.log_file('munged')}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
            user="munge",
        )
        self._daemon("slurmctld", [_which("slurmctld"), "-i", "-f", str(self.conf)])
        self._daemon("slurmd", [_which("slurmd"), "-N", "localhost", "-f", str(self.conf)])
        self.wait_ready(timeout - (time.monotonic() - t0))
        self.seconds_to_ready = time.monotonic() - t0

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def wait_ready(self, timeout: float) -> None:
        """Until the node is idle AND a real job step runs (sinfo alone can report saved state)."""
        deadline = time.monotonic() + max(timeout, 10)
        last = ""
        while time.monotonic() < deadline:
            for name, pid in self.started.items():
                if not _alive(pid):
                    raise RuntimeError(f"{name} (pid {pid}) exited during start-up{self.log_tail(name)}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                state = self.run("sinfo", "-h", "-n", "localhost", "-o", "%t")
                last = f"sinfo: {state.stdout.strip() or _tail(state.stderr)}"
                if state.returncode == 0 and state.stdout.strip() == "idle":
                    probe = self.run("srun", "-N1", "-n1", "--time=1", "true", timeout=60)
                    if probe.returncode == 0:
                        return
                    last = f"srun true: exit {probe.returncode}: {_tail(probe.stderr)}"
            time.sleep(0.5)
        raise RuntimeError(
            f"SLURM not ready after {timeout:.0f} s ({last}){self.log_tail('slurmctld')}{self.log_tail('slurmd')}"
        )

    # ------------------------------------------------------------------------- stop
    def job_ids(self) -> list[str]:
        result = self.run("squeue", "-h", "-o", "%i")
        return result.stdout.split() if result.returncode == 0 else []

    def processes(self) -> dict[int, str]:
        """Every living process of this cluster (pid: start time), daemons excepted.

        Found by environment, not by name: slurmd double-forks its ``slurmstepd``s (they
        end up under init) and they, the jobs and anything submitting (Snakemake) all
        carry this cluster's ``SLURM_CONF``; nothing else on the machine does.
        """
        marker = f"SLURM_CONF={self.conf}".encode() + b"\0"
        found: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                    found[int(entry.name)] = _start_time(int(entry.name))
        return {pid: t for pid, t in found.items() if pid not in self.started.values()}

    def stop(self, grace: float = 10) -> list[int]:
        """Cancel jobs, stop the daemons by pid (slurmd first), kill leftovers; return survivors.

        Each daemon gets SIGTERM if ``/proc/PID/comm`` still names it, SIGKILL after
        ``grace`` s. Job processes still around after that (none, normally: ``scancel``
        ends them) are killed by pid, checked against their recorded start time.
        """
        if "slurmctld" in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                ids = self.job_ids()
                if ids:
                    self.run("scancel", *ids)
                    deadline = time.monotonic() + grace
                    while time.monotonic() < deadline:
                        # cancelled jobs stay listed (CA) for MinJobAge: wait for live ones only
                        live = self.run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,CONFIGURING", "-o", "%i")
                        if live.returncode != 0 or not live.stdout.split():
                            break
                        time.sleep(0.5)
        survivors: list[int] = []
        for name in reversed(self.DAEMONS):
            pid = self.started.get(name)
            with contextlib.suppress(OSError, ValueError, IndexError):
                in_file = int(self.pid_file(name).read_text().split()[0])
                if pid is None and _comm(in_file) == name:
                    pid = in_file  # started, but start() failed before recording it
            if pid is None:
                continue
            if _alive(pid) and _comm(pid) == name:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid) and _comm(pid) == name:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
            if _alive(pid) and _comm(pid) == name:
                survivors.append(pid)
        self.started = {name: pid for name, pid in self.started.items() if pid in survivors}
        left = self.processes()
        for pid, started in left.items():
            if _start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_start_time(p) == t and _alive(p) for p, t in left.items()):
            time.sleep(0.1)
        return survivors + sorted(self.processes())

    # ---------------------------------------------------------------------- reading
    def log_tail(self, daemon: str, lines: int = 15) -> str:
        path = self.log_file(daemon)
        if not path.exists():
            return ""
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        return f"\n--- {path} (last {len(text)} lines)\n" + "\n".join(text)

    def submitted_batch_jobs(self) -> set[str]:
        """Ids of every batch job slurmctld accepted (from its log: one line per sbatch)."""
        text = self.log_file("slurmctld").read_text(errors="replace")
        return {
            word.split("=", 1)[1]
            for line in text.splitlines()
            if "_slurm_rpc_submit_batch_job" in line
            for word in line.split()
            if word.startswith("JobId=")
        }


def scratch_root() -> Path:
    """A fresh folder munged (user munge) can reach: pytest's tmp folders are root-only."""
    return Path(tempfile.mkdtemp(prefix="ptycho-slurm-"))
