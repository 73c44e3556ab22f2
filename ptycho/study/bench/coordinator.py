"""Where XLA helps: every XLA mode and precision timed against ``off`` at float32, alone
and with the cores shared.

Each (model, mode, precision) arm runs in its own worker process (:mod:`.worker`: a fresh
interpreter, so its TensorFlow has its own thread pools and XLA flags, and its peak
memory is its own), on the same data, the same initial weights and the same batch
sequence. Measured:

* compile: wall time of the first train step (trace + XLA compile + one step), and
  the start-up overhead: what the first ``1 + warmup`` steps took beyond as many
  steady steps (auto-clustering compiles lazily, on a cluster's second run, so its
  first call alone understates it); break-even counts use the overhead;
* alone: ``repeats`` train steps per arm after ``warmup``, the arms' steps INTERLEAVED
  (one arm steps while the others wait, in alternating order), each worker using
  ``threads`` intra-op threads: load drift hits every arm alike;
* shared, the pipeline's schedule: ``shared_jobs`` arms' step loops at once (the
  trainings the workflow runs at once here), each with ``shared_threads`` threads, in
  two rounds with shifted partners (:func:`_run_scheduled`); samples are kept only while
  the group's loops all run;
* the batch sweep (alone): train steps and inference batches at other batch sizes;
* components (alone): the step cut into the network's forward + backward, the physics
  head (with the loss) forward + backward, and the optimiser update, each a timed
  sub-function compiled under the arm's mode;
* memory: peak RSS of the worker, and above its RSS before the first step (the GPU's
  peak when there is one);
* inference: patterns/s of the fixed-batch predictor (padding included) and of a
  per-pattern loop (batch 1), under the arm's mode, batches interleaved across arms;
* the roofline (:mod:`.roofline`): each arm's FLOPs per train step and achieved GFLOP/s
  alone, against the machine's matmul peak per dtype, measured in a worker with the
  arms' threads alone;
* ratios with 95 % bootstrap intervals (:func:`ratios`): each XLA mode vs ``off`` at the
  same precision (XLA's own effect), each reduced precision vs float32 in the same mode
  (the precision's), and the break-even number of steps
  after which an arm's extra compile time is paid back by its faster steps
  (:mod:`ptycho.study.stats`).

Ratios above 1 mean the arm is faster than the reference; below 1, slower, and said so.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ptycho.config import defaults
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION
from ptycho.nets.xla import MODES, REFERENCE
from ptycho.study.bench.machine import ForeignLoad, cores, load_average, machine_info
from ptycho.study.bench.result import ratios
from ptycho.study.bench.roofline import PEAK_SIZE, achieved
from ptycho.study.bench.worker import _Worker
from ptycho.study.stats import quartiles

_BENCH = defaults("bench")  # warmup and repeats: the schema's (ptycho/config.schema.yaml)


@dataclass(frozen=True)
class BenchConfig:
    warmup: int = _BENCH["warmup"]
    repeats: int = _BENCH["repeats"]  #: timed train steps per arm and context
    component_repeats: int = 20  #: timed calls of each component per arm
    infer_samples: int = 256
    naive_samples: int = 32
    threads: int = 0  #: intra-op threads per worker alone; 0 = all cores
    shared: bool = True  #: also time the arms in the pipeline's schedule (``shared_jobs`` at once)
    shared_threads: int = 1  #: intra-op threads per worker when shared (the pipeline's train_threads)
    #: arms stepping at once when shared: the trainings the workflow runs at once on this
    #: machine (cores // train_threads); 0 = every arm at once
    shared_jobs: int = 0
    #: the batch sweep (alone): training and inference batch sizes timed beside the study's
    #: own, for the arms at ``sweep_precisions`` (empty: every precision); none: no sweep
    train_batches: tuple[int, ...] = ()
    infer_batches: tuple[int, ...] = ()
    batch_repeats: int = _BENCH["batch_repeats"]
    sweep_precisions: tuple[str, ...] = ()
    peak_size: int = PEAK_SIZE  #: side of the square matrices whose product measures the machine's peak


def _start(ctx, ds, arms, train_cfg, bench: BenchConfig, threads: int) -> list[_Worker]:
    """One worker per arm, each started from this (the main) thread: a worker's parent-death
    signal fires when the thread that started it ends (:mod:`ptycho.runtime`)."""
    workers = []
    try:
        for model_cfg, mode, precision in arms:
            spec = {
                "parent": os.getpid(),
                "dataset": ds,
                "model_cfg": dataclasses.asdict(model_cfg),
                "train_cfg": dict(dataclasses.asdict(train_cfg), xla=mode, precision=precision),
                "bench": dataclasses.asdict(bench),
                "threads": threads,
                "count_clusters": MODES[mode].autocluster,
            }
            workers.append(_Worker(ctx, spec))
    except BaseException as exc:
        _stop(workers, exc)
        raise
    return workers


def _stop(workers: Sequence[_Worker], exc: BaseException | None = None) -> None:
    """Stop every worker: after its current command, or at once when the coordinator was
    interrupted (``exc`` not an ``Exception``: SIGTERM, Snakemake's way to stop a job, or Ctrl-C)."""
    for w in workers:
        w.stop(now=exc is not None and not isinstance(exc, Exception))


def run(
    ds,
    model_cfgs,
    train_cfg,
    modes: Sequence[str] = (REFERENCE, "jit"),
    bench: BenchConfig = BenchConfig(),
    precisions: Sequence[str] = (),
) -> dict:
    """Time every (model, mode, precision) arm; return per-arm results, the machine's peak
    and every arm's ratios vs ``off`` at float32.

    ``ds`` is a :class:`~ptycho.data.dataset.Dataset` or the path of a dataset file (passed to
    the workers, which read it themselves). ``off`` and float32 are always added: every
    arm is judged against them.
    """
    import multiprocessing

    from ptycho.nets.precision import parse_precision
    from ptycho.nets.xla import parse_mode

    modes = sorted({REFERENCE, *map(parse_mode, modes)}, key=list(MODES).index)
    precisions = sorted({REFERENCE_PRECISION, *map(parse_precision, precisions)}, key=list(PRECISIONS).index)
    ctx = multiprocessing.get_context("spawn")
    arms = [(m, mode, precision) for m in model_cfgs for precision in precisions for mode in modes]
    n_cores = cores()
    alone_threads = bench.threads or n_cores
    started = {"load_average": load_average(), "time": time.time()}

    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    workers = _start(ctx, ds, arms, train_cfg, bench, alone_threads)
    try:
        for (model_cfg, mode, precision), w in zip(arms, workers, strict=True):  # one at a time: compile alone
            results[(model_cfg.kind, mode, precision)] = {
                "model": model_cfg.kind,
                "mode": mode,
                "precision": precision,
                "model_config": dataclasses.asdict(model_cfg),
                "batch_size": train_cfg.batch_size,
                "compile_s": w.call("step"),
            }
        warm = {i: [w.call("step") for _ in range(bench.warmup)] for i, w in enumerate(workers)}
        alone: dict[int, list[float]] = {i: [] for i in range(len(workers))}
        order = list(range(len(workers)))
        with ForeignLoad([w.process.pid for w in workers]) as alone_load:
            for r in range(bench.repeats):
                for i in order if r % 2 == 0 else order[::-1]:
                    alone[i].append(workers[i].call("step"))
        inference = _interleaved_inference(workers)
        if bench.train_batches or bench.infer_batches:
            swept = [i for i, (_, _, p) in enumerate(arms) if not bench.sweep_precisions or p in bench.sweep_precisions]
            for i, rec in zip(swept, _batch_sweep([workers[i] for i in swept], bench), strict=True):
                model_cfg, mode, precision = arms[i]
                results[(model_cfg.kind, mode, precision)]["batches"] = rec
        with ForeignLoad([workers[0].process.pid]) as peak_load:  # the machine's, with the arms' threads alone
            peak = workers[0].call("peak")
        for i, ((model_cfg, mode, precision), w) in enumerate(zip(arms, workers, strict=True)):
            res = results[(model_cfg.kind, mode, precision)]
            res.update(inference[i])
            res["step_s"] = quartiles(alone[i])
            res["step_samples_s"] = alone[i]
            # Auto-clustering compiles lazily (on a cluster's second run), after the first
            # call: the time the first 1 + warmup calls took beyond as many steady steps
            # is the honest cost of getting ready, for every mode alike.
            ready = [res["compile_s"], *warm[i]]
            res["startup_overhead_s"] = max(0.0, sum(ready) - len(ready) * res["step_s"]["median"])
            res["flops"] = w.call("flops")
            res["roofline"] = achieved(res["flops"], res["step_s"]["median"], precision, peak)
            res["components"] = w.call("components", bench.component_repeats)
            res.update(w.call("memory"))
            res["xla_clusters"] = w.call("clusters")
        if bench.shared and len(workers) > 1:
            if bench.shared_threads != alone_threads:
                for w in workers:
                    w.stop()
                workers = _start(ctx, ds, arms, train_cfg, bench, bench.shared_threads)
            for w in workers:  # untimed, one arm at a time: compile (new workers) or settle after inference
                for _ in range(1 + bench.warmup):
                    w.call("step")
            jobs = min(bench.shared_jobs or len(workers), len(workers))
            with ForeignLoad([w.process.pid for w in workers]) as shared_load:
                samples = _run_scheduled(workers, bench.repeats, jobs)
            for (model_cfg, mode, precision), s in zip(arms, samples, strict=True):
                results[(model_cfg.kind, mode, precision)]["shared"] = {"step_s": quartiles(s), "step_samples_s": s}
    except BaseException as exc:
        _stop(workers, exc)
        raise
    _stop(workers)
    contexts = {
        "alone": {
            "jobs": 1,
            "threads": alone_threads,
            "how": "one arm steps at a time, arms interleaved, each with all its threads",
            "foreign_load": alone_load.record(n_cores),
        }
    }
    if bench.shared and len(arms) > 1:
        jobs = min(bench.shared_jobs or len(arms), len(arms))
        contexts["shared"] = {
            "jobs": jobs,
            "threads": bench.shared_threads,
            "how": shared_how(len(arms), jobs, bench.shared_jobs, bench.shared_threads, alone_threads, n_cores),
            "schedule": "pipeline" if bench.shared_jobs else "all",
            # the trainings the pipeline runs at once here, which this context reproduces
            "trainings_at_once": bench.shared_jobs or None,
            "foreign_load": shared_load.record(n_cores),
        }
    machine = machine_info(gpus=max((w.description["gpus"] for w in workers), default=None))
    machine["load_average_start"] = started["load_average"]
    arms_out = [results[(m.kind, mode, precision)] for m, mode, precision in arms]
    peak["threads"] = alone_threads
    peak["foreign_load"] = peak_load.record(n_cores)
    peak["how"] = (
        f"best of {peak['repeats']} tf.linalg.matmul of two {peak['size']} x {peak['size']} matrices per dtype, "
        f"{alone_threads} thread{'s' * (alone_threads != 1)}, in one worker (the arms' threads alone)"
    )
    return {
        "machine": machine,
        "modes": modes,
        "precisions": precisions,
        "peak": peak,
        "contexts": contexts,
        "arms": arms_out,
        "ratios": ratios(arms_out),
        "wall_s": time.time() - started["time"],
    }


def _threads(n: int) -> str:
    return f"{n} thread{'s' * (n != 1)}"


def shared_how(arms: int, jobs: int, trainings_at_once: int, threads: int, alone_threads: int, n_cores: int) -> str:
    """The shared context in words: ``jobs`` of the ``arms``' step loops at once, each with
    ``threads``; ``trainings_at_once`` the pipeline's own count (0: not given, every arm at
    once). With one training at a time (``--cores 1``, a cluster) nothing shares the cores,
    and the words say so rather than describe partners there were none of."""
    if jobs <= 1:
        same = (
            "its conditions are alone's, timed again"
            if threads == alone_threads
            else f"only its threads differ from alone ({threads} vs {alone_threads})"
        )
        return (
            f"one arm's step loop at a time, {_threads(threads)} on {n_cores} cores: the pipeline runs its "
            f"trainings one at a time here, so no arm shared the cores with another, and {same}"
        )
    each = f"{_threads(threads)} each on {n_cores} cores"
    if jobs < arms:
        pipeline = f" (the {trainings_at_once} trainings the pipeline runs at once here)" if trainings_at_once else ""
        return f"{jobs} arms' step loops at once, {each}, every arm in turn with two different partners{pipeline}"
    pipeline = f" (the pipeline runs up to {trainings_at_once} trainings at once here)" if trainings_at_once else ""
    return f"all {arms} arms' step loops at once, {each}{pipeline}"


def _interleaved_inference(workers: list[_Worker]) -> list[dict]:
    """Padded-batch and per-pattern inference of every arm, batches interleaved across
    arms (alternating order) as the train steps are: load drift hits all arms alike."""
    setups = [w.call("inference_setup") for w in workers]
    batch_times: list[list[float]] = [[] for _ in workers]
    samples = [0] * len(workers)
    single: list[list[float]] = [[] for _ in workers]
    order = list(range(len(workers)))
    for b in range(max(s["batches"] for s in setups)):
        for i in order if b % 2 == 0 else order[::-1]:
            if b < setups[i]["batches"]:
                seconds, real = workers[i].call("infer_batch", b)
                batch_times[i].append(seconds)
                samples[i] += real
    for k in range(max(s["naive"] for s in setups)):
        for i in order if k % 2 == 0 else order[::-1]:
            if k < setups[i]["naive"]:
                single[i].append(workers[i].call("infer_single", k))
    out = []
    for i, s in enumerate(setups):
        c = s["patterns_per_sample"]
        out.append(
            {
                "infer_compile_s": s["infer_compile_s"],
                "infer_batch_samples_s": batch_times[i],
                "infer_patterns_per_s": samples[i] * c / sum(batch_times[i]),
                "naive_samples_s": single[i],
                "naive_patterns_per_s": len(single[i]) * c / sum(single[i]),
            }
        )
    return out


def _batch_sweep(workers: list[_Worker], bench: BenchConfig) -> list[dict]:
    """Each worker's train step and inference batch at every size of the sweep, alone,
    arms interleaved (alternating order) as the main timings are: per arm
    ``{"train" | "infer": {"<size>": quartiles, samples_s, per_sample_s, compile_s}}``."""
    compiled = [w.call("sweep_setup", list(bench.train_batches), list(bench.infer_batches)) for w in workers]
    out: list[dict] = [{"train": {}, "infer": {}} for _ in workers]
    order = list(range(len(workers)))
    for kind, sizes in (("train", bench.train_batches), ("infer", bench.infer_batches)):
        for b in sizes:
            samples: dict[int, list[float]] = {i: [] for i in order}
            for r in range(bench.batch_repeats):
                for i in order if r % 2 == 0 else order[::-1]:
                    samples[i].append(workers[i].call(f"sweep_{kind}", b))
            for i in order:
                q = quartiles(samples[i])
                out[i][kind][str(b)] = {
                    **q,
                    "samples_s": samples[i],
                    "per_sample_s": q["median"] / b,
                    "compile_s": compiled[i][kind][b],
                }
    return out


def _run_scheduled(workers: list[_Worker], repeats: int, jobs: int) -> list[list[float]]:
    """Every arm's steps taken while ``jobs`` arms' loops run at once, as the workflow
    runs its trainings (``jobs`` = the trainings it runs at once on this machine).

    With fewer jobs than arms, the arms run in groups of ``jobs`` in two rounds, the
    second with the groups shifted by one arm, so each arm shares the cores with two
    different partners (an arm's step time depends on what runs beside it); each round
    takes half of ``repeats`` per arm. With ``jobs`` = every arm, all at once."""
    n = len(workers)
    if jobs >= n:
        return _run_shared(workers, repeats)
    out: list[list[float]] = [[] for _ in workers]
    rounds = (0, 1) if jobs > 1 else (0,)  # one arm at a time has no partner to vary
    per_round = -(-repeats // len(rounds))
    for shift in rounds:
        order = [(i + shift) % n for i in range(n)]
        groups = [order[k : k + jobs] for k in range(0, n, jobs)]
        if len(groups[-1]) < jobs:  # fill the last group with arms from the start: always `jobs` loops at once
            groups[-1] = groups[-1] + order[: jobs - len(groups[-1])]
        for group in groups:
            samples = _run_shared([workers[i] for i in group], per_round)
            for i, s in zip(group, samples, strict=True):
                if len(out[i]) < repeats:
                    out[i].extend(s[: repeats - len(out[i])])
    return out


def _run_shared(workers: list[_Worker], repeats: int) -> list[list[float]]:
    """Every worker's step loop at once; all stop when the slowest has ``repeats`` steps.

    Each worker always has one ``step`` outstanding: it gets the next as soon as it
    answers, so all loops run concurrently until the slowest has its samples, and every
    kept sample was taken while all the other loops were stepping too (the answers to
    the last outstanding steps are dropped).
    """
    import multiprocessing.connection as mpc

    out: list[list[float]] = [[] for _ in workers]
    conns = {w.conn: i for i, w in enumerate(workers)}
    for w in workers:
        w.send("step")
    while min(len(s) for s in out) < repeats:
        for conn in mpc.wait(list(conns)):
            i = conns[conn]
            status, value = conn.recv()
            if status == "error":
                from ptycho.errors import PtychoError

                raise PtychoError(f"bench: the {workers[i].name} worker failed: {value}")
            out[i].append(value)
            workers[i].send("step")  # keep loading the machine until the slowest is done
    for w in workers:  # drain the last answers (taken while others may have stopped: dropped)
        w._receive()
    return out
