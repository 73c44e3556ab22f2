"""How the workflow's local jobs share the machine's CPUs: the threads each job declares
to Snakemake so that jobs never share a CPU (:func:`declared_threads`), the threads it
then uses (:func:`job_threads`), how many trainings run at once (:func:`concurrent_jobs`)
and how a training learns the schedule it ran in (:data:`AT_ONCE_ENV`)."""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence

from ptycho.study.arms import Arm


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


def _seed_rank(seed: int, planned: Sequence[int]) -> int:
    """A seed's place in order: among the planned seeds, its index; a seed a look adds (the
    next whole numbers above them, several at a time), after them by its value, so that two
    added seeds do not tie."""
    if seed in planned:
        return planned.index(seed)
    return bisect.bisect_left(planned, seed) + max(0, seed - (planned[-1] if planned else -1) - 1)


def training_priority(arm: Arm, planned: Sequence[Arm], seconds: Callable[[Arm], float]) -> int:
    """The Snakemake priority of one training (higher starts first), from each training's
    expected ``seconds`` (the calibration's, or the records' relative costs).

    Three orders, most significant first:

    * **Longest groups first**: a group is the arms of one model and precision, weighed by
      its longest arm. With two trainings at a time the last one otherwise runs alone while
      the other slot idles (a PINN jit arm took its last 4.5 min alone at b5dd022).
    * **Seeds in order**: the modes of one seed, an XLA arm and its ``off`` reference, start
      together and are timed on the same machine state, not all ``off`` arms in one load
      window and the XLA arms in another.
    * **The slower mode of a seed first.** When one mode's epochs are faster (``physics``
      95 s against ``off``'s 104 s on an AVX2 EPYC, 2026-12-02), its arm ends first and the
      freed slot starts the next seed. Starting that seed's slower arm there, and its
      faster arm when the slow one of this seed ends, makes the two end together, so each
      seed pair starts (or ends) side by side and the offset never grows beyond one pair's
      difference. Started faster first (the modes of a seed tied before, and that run's
      scheduler took the faster), the offset grew by that difference with every seed,
      until the last ``off`` arm trained beside the baseline.

    ``planned`` are the study's arms; ``arm`` may be a seed a look added (not among them).
    The priorities are ranks, small integers: Snakemake's MILP scheduler weighs them in one
    objective with the cores, where seconds (about 1e9 once scaled) would drown a rank's step
    of 1 in the solver's tolerance."""
    groups: dict[tuple[str, str], list[Arm]] = {}
    for a in (*planned, arm):
        groups.setdefault((a.model, a.precision), []).append(a)
    key = (arm.model, arm.precision)
    shortest_first = sorted(groups, key=lambda g: max(seconds(a) for a in groups[g]))
    fastest_first = sorted(dict.fromkeys(a.mode for a in groups[key]), key=lambda m: seconds(arm._replace(mode=m)))
    seeds = sorted({a.seed for a in planned if (a.model, a.precision) == key})
    slot = max(0, 999 - _seed_rank(arm.seed, seeds))
    return shortest_first.index(key) * 100_000 + slot * 100 + min(fastest_first.index(arm.mode), 99)
