"""The machine a benchmark ran on, and what else ran on it meanwhile (psutil).

:func:`machine_info` is recorded beside every set of timings; :class:`ForeignLoad`
says whether other processes took CPU while a block was timed; :func:`rss_mb` and
:func:`peak_rss_mb` are a worker's memory. Imports no TensorFlow.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence

import psutil

#: Other processes' CPU use, in cores, above which a measurement is marked contaminated.
FOREIGN_LOAD_LIMIT = 0.25
#: The ``/proc/cpuinfo`` flags that say which dtypes the cores accelerate: AVX-512 (float32
#: at 16 lanes), its bfloat16 and float16 dot products, and the AMX tiles (bfloat16, float16).
DTYPE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


def cores() -> int:
    """Logical CPUs of the machine (1 if unknown)."""
    return psutil.cpu_count() or 1


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return list(psutil.getloadavg())


def _cpuinfo(text: str | None = None) -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (or of its ``text``; empty where
    there is none)."""
    if text is None:
        try:
            with open("/proc/cpuinfo") as fh:
                text = fh.read()
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block ends at its blank line
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def _cpu_model(fields: Mapping[str, str] | None = None) -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, where psutil has none), else the platform's word."""
    fields = _cpuinfo() if fields is None else fields
    return fields.get("model name") or platform.processor() or ""


def cpu_id(fields: Mapping[str, str] | None = None) -> str | None:
    """``family 26 model 2``: the x86 family and model numbers (``/proc/cpuinfo``), None where
    not recorded. They tell CPU generations apart where the model name does not: a virtual
    machine's is often its vendor's generic word, "AMD EPYC" for Zen 3, Zen 4 and Zen 5
    (families 25, 25 and 26) alike, whose bfloat16 and AVX-512 speeds differ."""
    fields = _cpuinfo() if fields is None else fields
    family, model = fields.get("cpu family"), fields.get("model")
    return f"family {family} model {model}" if family and model else None


def cpu_words(m: Mapping) -> str:
    """A machine record's CPU in words: ``AMD EPYC family 26 model 2``; the model name alone
    in records made before :func:`cpu_id` was (2026-12-04) or off x86."""
    cpu = str(m.get("cpu") or "CPU not recorded")
    return f"{cpu} {m['cpu_id']}" if m.get("cpu_id") else cpu


def cpu_flags(fields: Mapping[str, str] | None = None) -> list[str]:
    """Which of :data:`DTYPE_FLAGS` the CPU has (``/proc/cpuinfo``; empty where it is not Linux's)."""
    present = set((_cpuinfo() if fields is None else fields).get("flags", "").split())
    return [f for f in DTYPE_FLAGS if f in present]


#: Environment variables naming the hardware a study plans for instead of this machine's
#: (:func:`hardware`): the CPU's flags (as ``/proc/cpuinfo`` lists them, space or comma
#: separated; ``none``) and the GPU's compute capability (``8.0``; ``none``). The workflow
#: sets both to what it detected, so that the jobs of a cluster, which parse the workflow
#: again on their nodes, resolve ``precision: auto`` as the submitting host did.
CPU_FLAGS_ENV = "PTYCHO_CPU_FLAGS"
GPU_ENV = "PTYCHO_GPU_CAPABILITY"


def gpu_capability() -> tuple[int, int] | None:
    """The CUDA compute capability of the first GPU TensorFlow would use, without starting
    TensorFlow (the workflow asks while it is parsed): None with the CPU build
    (``tensorflow-cpu``, the default lock), with ``CUDA_VISIBLE_DEVICES`` empty or ``-1``,
    or when ``nvidia-smi`` is missing or does not answer within 10 s."""
    import shutil
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("tensorflow-cpu")
        return None  # the CPU build runs on the CPU, whatever GPUs the machine has
    except PackageNotFoundError:
        pass
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
        return _capability(out[0]) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _capability(text: str) -> tuple[int, int]:
    major, minor = text.strip().split(".")
    return int(major), int(minor)


def hardware():
    """The :class:`~ptycho.nets.precision.Hardware` the study plans for: this machine's
    (:func:`cpu_flags`, :func:`gpu_capability`), or what :data:`CPU_FLAGS_ENV` and
    :data:`GPU_ENV` name. A value that cannot be read is a one-line
    :class:`~ptycho.errors.ConfigError` naming the variable."""
    from ptycho.errors import ConfigError
    from ptycho.nets.precision import Hardware

    flags_text = os.environ.get(CPU_FLAGS_ENV)
    if flags_text is None:
        flags = tuple(cpu_flags())
    else:
        given = set(flags_text.replace(",", " ").split()) - {"none"}
        flags = tuple(f for f in DTYPE_FLAGS if f in given)
    gpu_text = os.environ.get(GPU_ENV)
    if gpu_text is None:
        return Hardware(flags, gpu_capability())
    if gpu_text.strip().lower() in ("", "none"):
        return Hardware(flags, None)
    try:
        return Hardware(flags, _capability(gpu_text))
    except ValueError:
        raise ConfigError(
            f"environment variable {GPU_ENV}={gpu_text!r} is not a GPU compute capability; give one such as 8.0, "
            f"or none for a machine without a GPU (or unset it to use this machine's)"
        ) from None


def hardware_environment(hw) -> dict[str, str]:
    """The environment that makes :func:`hardware` say ``hw`` in another process."""
    capability = hw.gpu_capability
    return {
        CPU_FLAGS_ENV: " ".join(hw.cpu_flags) or "none",
        GPU_ENV: f"{capability[0]}.{capability[1]}" if capability else "none",
    }


def machine_info(gpus: int | None = None) -> dict:
    """CPU model and dtype flags, cores, load average and library versions, recorded beside timings.

    Imports no TensorFlow (its version comes from the package metadata): the report and
    the benchmark's coordinator do not need it. ``gpus`` is what a process that did
    start TensorFlow counted (the benchmark's workers); ``None`` when nobody asked.
    """
    from importlib.metadata import PackageNotFoundError, version

    tensorflow = "not installed"
    for dist in ("tensorflow", "tensorflow-cpu"):  # the GPU lock's and the CPU lock's
        with contextlib.suppress(PackageNotFoundError):
            tensorflow = version(dist)
            break
    fields = _cpuinfo()  # read once for the model, its numbers and its flags
    return {
        "cpu": _cpu_model(fields),
        "cpu_id": cpu_id(fields),
        "cpu_flags": cpu_flags(fields),
        "cores": psutil.cpu_count(),
        "load_average": load_average(),
        "tensorflow": tensorflow,
        "python": platform.python_version(),
        "gpus": gpus,
    }


# ------------------------------------------------------------- foreign load
def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot: user, nice, system, irq,
    softirq and steal time (iowait and idle are not busy; guest time is inside user).
    ``None`` if the system does not say."""
    try:
        t = psutil.cpu_times()
    except (psutil.Error, OSError):
        return None
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; 0 if it is gone (or unreadable)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return 0.0
    return t.user + t.system


class ForeignLoad:
    """How busy OTHER processes kept the CPU while a block ran.

    The machine's busy CPU time minus that of this process and the ``pids`` it measures
    with, over the block's wall time: the average number of cores that foreign work
    took. A benchmark cannot promise it ran alone; this says whether it did.
    """

    def __init__(self, pids: Sequence[int] = ()):
        self.pids = [os.getpid(), *pids]

    def _own(self) -> float:
        return sum(process_cpu_seconds(p) for p in self.pids)

    def __enter__(self):
        self.load_before = load_average()[0]
        self.wall0, self.busy0, self.own0 = time.perf_counter(), busy_cpu_seconds(), self._own()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall0
        busy1, own1 = busy_cpu_seconds(), self._own()
        self.foreign_cpu_s = (
            max(0.0, (busy1 - self.busy0) - (own1 - self.own0))
            if busy1 is not None and self.busy0 is not None
            else math.nan
        )
        self.load_after = load_average()[0]

    def record(self, cores: int, limit: float = FOREIGN_LOAD_LIMIT) -> dict:
        cores_busy = self.foreign_cpu_s / self.wall if self.wall > 0 else math.nan
        return {
            "foreign_cpu_s": self.foreign_cpu_s,
            "wall_s": self.wall,
            "foreign_cores": cores_busy,
            "of_cores": cores,
            "load_average_before": self.load_before,
            "load_average_after": self.load_after,
            "contaminated": bool(not cores_busy <= limit),
            "limit_cores": limit,
        }


# --------------------------------------------------------------------- memory
def rss_mb() -> float:
    """This process's resident set size now, in MiB (Linux's VmRSS)."""
    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident set size, in MiB.

    psutil has no high-water mark, so Linux's ``VmHWM`` (``/proc/self/status``) is read;
    elsewhere ``getrusage``'s ``ru_maxrss`` (kB on Linux).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine_line(m: Mapping) -> str:
    """The machine in one line: CPU (with its dtype flags, where recorded), cores, device,
    load, TensorFlow and Python."""
    load = m.get("load_average")
    load = ", ".join(f"{v:.2f}" for v in load) if load else "n/a"
    gpus = m.get("gpus")
    device = "device n/a" if gpus is None else (f"device GPU ({gpus})" if gpus else "device CPU (no GPU)")
    return (
        f"{cpu_words(m)}{flags_words(m)}, {m.get('cores', 'n/a')} cores, {device}, load average {load}; "
        f"TensorFlow {m.get('tensorflow', 'n/a')}, Python {m.get('python', 'n/a')}"
    )


def flags_words(m: Mapping) -> str:
    """`` (avx512f, avx512_bf16)``: the machine record's dtype flags, "none of ..." if it has none
    of them, nothing if the record predates them."""
    if "cpu_flags" not in m:
        return ""
    return f" ({', '.join(m['cpu_flags'])})" if m["cpu_flags"] else f" (none of {', '.join(DTYPE_FLAGS)})"
