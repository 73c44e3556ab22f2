"""A job's process: TensorFlow's start-up log lines, the device it runs on, its life
bound to its parent's, and the memory it may use.

TensorFlow's C++ libraries print their start-up notices (oneDNN, CPU features, CUDA
probing) while they load, *before* absl logging is initialised, so
``TF_CPP_MIN_LOG_LEVEL`` does not reach them (TF 2.21; tensorflow/tensorflow#100442):
every job log used to open with five such lines, one of them the error-looking
``E0000 ... failed call to cuInit`` on machines without a GPU. (The CPU lock installs
``tensorflow-cpu``, which has no CUDA code and so no cuInit line at all.)
:func:`import_tensorflow` loads TensorFlow with file descriptor 2 pointed at a temporary
file, then passes on only the lines at or above the level ``TF_CPP_MIN_LOG_LEVEL`` asks
for (default 1 here: warnings and errors; ``0`` shows everything). Errors are always kept.
After import TensorFlow honours the variable itself.

No orphans: a process of the package's ends when the process that started it ends,
even by SIGKILL. Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) asks the kernel
to signal the child then; :func:`die_with_parent` sets it in a Python process of ours (a
``python -m ptycho`` command, :func:`bind_command_to_parent`; a bench worker),
:func:`dies_with_this_process` in any other program we start (``subprocess.Popen``'s
``preexec_fn``). The kernel sends it when the *thread* that forked the child ends: start
such children from the main thread (or a thread that outlives them). Elsewhere than
Linux these are no-ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

#: absl/glog line prefix: severity letter, MMDD, time (before absl is initialised the
#: seconds are Unix time: "00:00:1795415821.87"), thread id, file:line].
_NATIVE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]]+\] ")
_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_LEVELS = {"I": 0, "W": 1, "E": 2, "F": 3}
#: The default for jobs: TensorFlow's INFO notices hidden, warnings and errors shown.
DEFAULT_LOG_LEVEL = "1"


def min_log_level() -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as an int (0-3); anything else counts as 0 (show all)."""
    value = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip()
    return int(value) if value in ("0", "1", "2", "3") else 0


def filter_native_lines(text: str, level: int) -> str:
    """The lines of ``text`` worth showing at ``level``: native log lines below it, absl's
    pre-initialisation banner and the continuation of a dropped line are removed; errors
    (E, F) and everything that is not a native log line (Python warnings) are kept."""
    kept, dropping = [], False
    for line in text.splitlines(keepends=True):
        match = _NATIVE.match(line)
        if match:
            dropping = _LEVELS[match.group(1)] < min(level, 2)
        elif line.rstrip("\n") == _BANNER:
            dropping = level > 0
        elif not (dropping and line.startswith(("To enable the following instructions", " "))):
            dropping = False  # a line of its own: kept
        if not dropping:
            kept.append(line)
    return "".join(kept)


@contextlib.contextmanager
def native_stderr_filtered(level: int) -> Iterator[None]:
    """Capture file descriptor 2 (C++ and Python writes alike) while the block runs, then
    write what :func:`filter_native_lines` keeps to the real stderr, in order."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = filter_native_lines(capture.read().decode("utf-8", errors="replace"), level)
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def import_tensorflow() -> Any:
    """Import TensorFlow and initialise its devices with the start-up notices filtered."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LOG_LEVEL)
    with native_stderr_filtered(min_log_level()):
        import tensorflow as tf

        tf.config.list_physical_devices()
    return tf


def device_info() -> dict[str, Any]:
    """What this process computes on: ``device`` ("GPU" or "CPU"), the GPU names, and
    whether this TensorFlow build has CUDA at all. Recorded on every TensorFlow job's run."""
    tf = import_tensorflow()
    gpus = tf.config.list_physical_devices("GPU")
    names = []
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        names.append(details.get("device_name", gpu.name))
    return {
        "device": "GPU" if gpus else "CPU",
        "gpus": names,
        "gpu_count": len(gpus),
        "cuda_build": bool(tf.test.is_built_with_cuda()),
        "tensorflow": tf.__version__,
    }


# ------------------------------------------------------------------ no orphans
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: Set in every job Snakemake starts (rules/common.smk): a workflow job.
_JOB_MARKER = "PTYCHO_CONFIG_HASH"


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved now (in the parent: no dynamic loading after a fork), or
    ``None`` where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _bind(prctl: Callable[..., int], parent: int, sig: int) -> bool:
    """Ask for ``sig`` when the parent ends; if ``parent`` is already gone (it ended between
    the fork and this call: the kernel will never send the signal), deliver it now."""
    if prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


def die_with_parent(parent: int | None = None, sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send this process ``sig`` when its parent ends, however it ends.

    ``parent``: the pid the caller knows started this process (a worker is told its
    coordinator's); by default the parent now, and nothing is bound when that is init
    (pid 1: this process was orphaned before it got here). Returns whether it is bound."""
    prctl = _prctl()
    parent = os.getppid() if parent is None else parent
    if prctl is None or parent <= 1:
        return False
    return _bind(prctl, parent, sig)


def dies_with_this_process(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child (any program) gets ``sig``
    when this process ends (the parent-death signal survives ``exec``); ``None`` where
    there is no ``prctl``. Call Popen from the main thread (see the module's note)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def bind() -> None:  # in the child, between fork and exec
        _bind(prctl, parent, sig)

    return bind


def bind_command_to_parent() -> bool:
    """``python -m ptycho``: the command ends (SIGTERM, which the CLI turns into an
    interruption that stops its own children) when the process that started it ends: a
    Snakemake job's shell killed, ``make`` stopped. Not a command started under ``nohup``
    outside the workflow: SIGHUP ignored says its user asked it to outlive the terminal's
    shell. A workflow job is bound even so (Snakemake itself may run under nohup)."""
    detached = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and _JOB_MARKER not in os.environ
    return False if detached else die_with_parent()


# ------------------------------------------------------------------ memory
def _cgroup_limits() -> list[int]:
    """The memory limits of this process's cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), at the root of the namespace and at its own path."""
    paths = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    paths.append(f"/sys/fs/cgroup{path}/memory.max")
                elif "memory" in controllers.split(","):
                    paths.append(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    limits = []
    for path in paths:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" (v2) or a huge number (v1): no limit
            limits.append(int(text))
    return limits


#: The address space TensorFlow needs to start and run its first compiled step, whatever
#: the job: its libraries, thread pools and arenas are reserved, not used. Measured on 2
#: CPUs (TensorFlow 2.x, ``ptycho train`` of a 16-px model, one thread, XLA jit): under
#: ``ulimit -v`` of 2.4 GB it aborted ("cannot allocate memory for thread-local data",
#: exit 127), of 1.9 GiB with a 64-line std::bad_alloc dump (exit 134); 2.6 GiB ran.
TF_ADDRESS_SPACE_BYTES = int(2.5 * 2**30)


def address_space_limit() -> int | None:
    """This process's address-space limit (``ulimit -v``) in bytes, or None."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft in (resource.RLIM_INFINITY, -1) or soft <= 0 else int(soft)


def address_space_problem() -> str | None:
    """Why TensorFlow cannot start under this process's address-space limit (``ulimit
    -v``), in words for one line, or None: a limit below :data:`TF_ADDRESS_SPACE_BYTES`
    ends every TensorFlow job in native code (exit 127, 134 or 139, a long dump), where
    no Python error can name the cause."""
    soft = address_space_limit()
    if soft is None or soft >= TF_ADDRESS_SPACE_BYTES:
        return None
    return (
        f"this process may use {soft / 2**30:.1f} GiB of address space (ulimit -v), less than the "
        f"{TF_ADDRESS_SPACE_BYTES / 2**30:.1f} GiB TensorFlow reserves to start, whatever the job; raise the "
        "limit (ulimit -v, or a cgroup memory limit instead: it counts memory used, not reserved)"
    )


def machine_memory_bytes() -> int:
    """Memory the jobs of this machine may use: its physical memory, or this process's
    cgroup limit (a container, a SLURM allocation) or address-space limit (``ulimit -v``)
    if smaller."""
    import psutil

    limits = [psutil.virtual_memory().total, *_cgroup_limits()]
    soft = address_space_limit()
    if soft is not None:
        limits.append(soft)
    return min(limits)
