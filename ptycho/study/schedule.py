"""How the workflow's local jobs share the machine's CPUs: the threads each job declares
to Snakemake so that jobs never share a CPU (:func:`declared_threads`), the threads it
then uses (:func:`job_threads`), how many trainings run at once (:func:`concurrent_jobs`)
and how a training learns the schedule it ran in (:data:`AT_ONCE_ENV`)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask: a cgroup, ``taskset`` or a SLURM
    allocation can give fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def declared_threads(threads: int, cores: int, machine: int) -> int:
    """Threads a local job declares to Snakemake so that jobs never share a CPU.

    Snakemake runs jobs while the sum of their declared threads fits ``--cores``; it
    does not know the machine. ``snakemake --cores 8`` on 2 CPUs would run four
    2-thread trainings at once, eight threads on two cores, where oneDNN's threads
    spin-wait on each other (1 s per step instead of 0.1 s, measured). Scaling each
    job's figure by ``cores / usable`` (usable = min(cores, machine)) makes Snakemake's
    sum track the real CPUs: on 2 CPUs one 2-thread job runs at a time for any
    ``--cores``, on 8 CPUs with ``--cores 8`` four of them. :func:`job_threads` is the
    inverse, the threads the job then really uses.
    """
    usable = max(1, min(cores, machine))
    threads = max(1, min(threads, usable))
    return min(cores, -(-threads * cores // usable))


def concurrent_jobs(threads: int, cores: int, machine: int) -> int:
    """How many jobs of ``threads`` threads each a local run executes at once: the
    pipeline's schedule of its trainings (on 2 CPUs with train_threads 1: two), which the
    benchmark's shared context reproduces."""
    usable = max(1, min(cores, machine))
    return max(1, usable // max(1, min(threads, usable)))


#: How many trainings the workflow runs at once (:func:`concurrent_jobs`), set by the
#: Snakefile for its jobs: through the environment, not params, so that a rerun with
#: another ``--cores`` does not train again, and each training records the schedule it
#: really ran in (the report's training table says it, not the latest run's).
AT_ONCE_ENV = "PTYCHO_TRAININGS_AT_ONCE"


def scheduled_at_once() -> int | None:
    """The trainings the workflow running this job runs at once, or None outside one."""
    value = os.environ.get(AT_ONCE_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def job_threads(declared: int, cores: int, machine: int) -> int:
    """The threads a job declared by :func:`declared_threads` uses (its inverse)."""
    usable = max(1, min(cores, machine))
    return max(1, min(usable, declared * usable // cores))
