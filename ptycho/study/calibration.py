"""A few timed steps of every arm the study plans, on this machine, cached per machine and
config: what the estimate (:mod:`ptycho.study.estimate`) multiplies by the planned work
and what orders the workflow's trainings (:func:`ptycho.study.schedule.training_priority`).

:func:`calibrate` times each (model, mode, precision) in a bench worker, as many
stepping at once as the pipeline runs trainings at once, on a small simulated split of
the study's geometry; :func:`calibration_path` is its cache, keyed by what changes a
step's time and made again when older than :data:`CALIBRATION_MAX_AGE_S`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Format of a cached calibration: a new one re-calibrates.
CALIBRATION_FORMAT = 1
#: Timed steps per arm after its first (compiling) one; their median is the step's time.
CALIBRATION_STEPS = 6
#: Where calibrations are cached: ``$PTYCHO_CACHE``, else ``$XDG_CACHE_HOME/ptycho``, else ``~/.cache/ptycho``.
CACHE_ENV = "PTYCHO_CACHE"
#: A cached calibration older than this (seconds) is made again. A machine's speed is not
#: a constant: on a shared cloud VM (2 cores, AMD EPYC, AVX2) the same arms timed 0.39 s
#: per step one day and 0.27 s the next, and a day-old calibration estimated 2.0 h for a
#: study it now put at 83 min (docs/timing.md). Calibrating costs about a minute.
CALIBRATION_MAX_AGE_S = 12 * 3600


def calibration_due(path: Path, now: float | None = None) -> bool:
    """Whether the calibration at ``path`` must be made (again): none cached, or one older
    than :data:`CALIBRATION_MAX_AGE_S` by its file's time."""
    import time

    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError:
        return True
    return age > CALIBRATION_MAX_AGE_S


@dataclass(frozen=True)
class ArmCost:
    """One (model, mode, precision) as calibrated: seconds to a ready worker (interpreter,
    TensorFlow, the model built), of its first step (trace and compile) and of a step in
    the pipeline's schedule (median)."""

    startup_s: float
    compile_s: float
    step_s: float


def arm_key(model: str, mode: str, precision: str) -> str:
    return f"{model}/{mode}/{precision}"


def bench_arms(cfg: Mapping) -> list[tuple[str, str, str]]:
    """Every (model, mode, precision) the bench times: its lists, float32 always (the
    reference of every precision's ratio)."""
    from ptycho.nets.precision import REFERENCE_PRECISION
    from ptycho.study.workflow import bench_lists

    models, modes, precisions = bench_lists(cfg)
    return [(k, m, p) for k in models for p in dict.fromkeys([REFERENCE_PRECISION, *precisions]) for m in modes]


def planned_arms(cfg: Mapping) -> list[tuple[str, str, str]]:
    """Every (model, mode, precision) the study trains or times, each once."""
    from ptycho.study.workflow import arm_lists

    out = []
    for kind in cfg["models"]:
        modes, precisions, _ = arm_lists(cfg, kind)
        out += [(kind, m, p) for p in precisions for m in modes]
    return list(dict.fromkeys([*out, *bench_arms(cfg)]))


def described(path: str):
    """The user's data file as :func:`ptycho.data.sources.describe` reads it, once per
    version of the file (an estimate asks for it per arm, per split and per cheaper choice,
    and a compressed scan is decompressed to be described)."""
    st = os.stat(path)
    return _described_version(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _described_version(path: str, mtime_ns: int, size: int):  # noqa: ARG001 (the cache's key)
    from ptycho.data.sources import describe

    return describe(path)


def own_scan(cfg: Mapping):
    """The user's training file (:class:`~ptycho.data.sources.Source`), or None to simulate."""
    from ptycho.study.data_files import data_files

    files = data_files(cfg)
    return described(files["train"]) if files else None


def pattern_side(cfg: Mapping) -> int:
    """The side of the patterns the study trains on: the simulation's, or the user's file's
    (``data.n`` where it reduces them)."""
    own = own_scan(cfg)
    if own is None:
        return int(cfg["simulation"]["n"])
    return int((cfg.get("data") or {}).get("n") or own.n)


def calibration_path(cfg: Mapping, at_once: int, threads: int, machine: Mapping) -> Path:
    """The cached calibration of this study's arms on this machine: keyed by what changes a
    step's time (the CPU, its flags and cores, TensorFlow, the arms, the network, the batch,
    the patterns' size, the threads and how many trainings step at once), not by epochs,
    seeds or the doses."""
    from ptycho.study.workflow import model_config, section_for

    key = {
        "format": CALIBRATION_FORMAT,
        "machine": {k: machine.get(k) for k in ("cpu", "cpu_id", "cpu_flags", "cores", "tensorflow", "gpus")},
        "arms": planned_arms(cfg),
        "models": {k: dataclasses.asdict(model_config(cfg, k)) for k in cfg["models"]},
        "batch": {k: section_for(cfg, "train", k)["batch_size"] for k in cfg["models"]},
        "geometry": {
            **{k: cfg["simulation"][k] for k in ("gridsize", "spacing", "probe_kind")},
            "n": pattern_side(cfg),
        },
        "threads": threads,
        "at_once": at_once,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_folder() / "calibration" / f"{digest}.json"


def cache_folder() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptycho"


def calibrate(cfg: Mapping, at_once: int, threads: int) -> dict:
    """Time every planned arm (:func:`planned_arms`) on this machine: each in a bench worker
    (its own interpreter and thread pools) with ``threads`` threads, ``at_once`` of them
    stepping together as the pipeline's trainings do, on one small simulated object of the
    study's geometry (a step's time does not depend on the split's size). Seconds; the
    record is what :func:`ptycho.study.estimate.estimate` reads."""
    import multiprocessing
    import time

    import numpy as np

    from ptycho.data.simulate import simulate_split
    from ptycho.study.bench.coordinator import BenchConfig, _run_shared, _start, _stop
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.resources import scan_size
    from ptycho.study.workflow import model_config, simulation_config, train_config

    sim = dataclasses.replace(simulation_config(cfg), n=pattern_side(cfg))  # the user's data: its side
    # one object just large enough for a few batches of groups: seconds to simulate
    side = sim.n + 8 * sim.stride_train
    while scan_size(side, sim.n, sim.stride_train, sim.gridsize, sim.spacing).groups < 64:
        side += sim.stride_train
    ds = simulate_split(dataclasses.replace(sim, n_objects_train=1, object_size=max(side, sim.n * 2)), "train")
    ctx = multiprocessing.get_context("spawn")
    bench = BenchConfig(threads=threads)
    arms = planned_arms(cfg)
    costs: dict[str, dict] = {}
    for start in range(0, len(arms), at_once):
        group = arms[start : start + at_once]
        workers = []
        try:
            for kind, mode, precision in group:
                t0 = time.perf_counter()
                train_cfg = train_config(cfg, mode, 0, kind, precision)
                workers += _start(ctx, ds, [(model_config(cfg, kind), mode, precision)], train_cfg, bench, threads)
                ready = time.perf_counter() - t0
                first = workers[-1].call("step")
                costs[arm_key(kind, mode, precision)] = {"startup_s": ready, "compile_s": first}
            steps = _run_shared(workers, CALIBRATION_STEPS)
        finally:
            _stop(workers)
        for (kind, mode, precision), samples in zip(group, steps, strict=True):
            costs[arm_key(kind, mode, precision)]["step_s"] = float(np.median(samples))
    return {"format": CALIBRATION_FORMAT, "machine": machine_info(), "at_once": at_once, "arms": costs}


def arm_costs(calibration: Mapping) -> dict[str, ArmCost]:
    return {k: ArmCost(**v) for k, v in calibration["arms"].items()}
