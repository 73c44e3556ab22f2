"""Where XLA helps: every XLA mode timed against ``off``, alone and with the cores shared.

Each (model, mode) arm runs in its own worker process (a fresh interpreter, so its
TensorFlow has its own thread pools and XLA flags, and its peak memory is its own),
on the same data, the same initial weights and the same batch sequence. Measured:

* compile: wall time of the first train step (trace + XLA compile + one step), and
  the start-up overhead: what the first ``1 + warmup`` steps took beyond as many
  steady steps (auto-clustering compiles lazily, on a cluster's second run, so its
  first call alone understates it); break-even counts use the overhead;
* alone: ``repeats`` train steps per arm after ``warmup``, the arms' steps INTERLEAVED
  (one arm steps while the others wait, in alternating order), each worker using
  ``threads`` intra-op threads: load drift hits every arm alike;
* shared: every arm's step loop running at once, each with ``shared_threads``
  threads, the way the pipeline's training jobs share the machine; samples are kept
  only while all loops run (the loops stop together when the slowest has ``repeats``);
* components (alone): the step cut into the network's forward + backward, the physics
  head (with the loss) forward + backward, and the optimiser update, each a timed
  sub-function compiled under the arm's mode;
* memory: peak RSS of the worker, and above its RSS before the first step (the GPU's
  peak when there is one);
* inference: patterns/s of the fixed-batch predictor (padding included) and of a
  per-pattern loop (batch 1), under the arm's mode, batches interleaved across arms;
* ratios vs ``off`` with 95 % bootstrap intervals, and the break-even number of steps
  after which a mode's extra compile time is paid back by its faster steps.

Ratios above 1 mean the mode is faster than ``off``; below 1, slower, and said so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def machine_info(gpus: int | None = None) -> dict:
    """CPU model, cores, load average and library versions, recorded beside timings.

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
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "tensorflow": tensorflow,
        "python": platform.python_version(),
        "gpus": gpus,
    }


@dataclass(frozen=True)
class BenchConfig:
    warmup: int = 3
    repeats: int = 60  #: timed train steps per arm and context
    component_repeats: int = 20  #: timed calls of each component per arm
    infer_samples: int = 256
    naive_samples: int = 32
    threads: int = 0  #: intra-op threads per worker alone; 0 = all cores
    shared: bool = True  #: also time every arm's loop at once
    shared_threads: int = 1  #: intra-op threads per worker when shared (the pipeline's train_threads)


# ------------------------------------------------------------------ statistics
def quartiles(values: Sequence[float]) -> dict:
    if not len(values):
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "iqr": float("nan"), "n": 0}
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": len(values)}


def bootstrap_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """Ratio of medians ``median(numerator) / median(denominator)`` with a bootstrap interval.

    Both samples are resampled with replacement, independently; the interval is the
    percentile interval of the resampled ratios. With fewer than 2 samples on either
    side the interval is NaN.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    ratio = float(np.median(num) / np.median(den)) if num.size and den.size else float("nan")
    if num.size < 2 or den.size < 2:
        return {"ratio": ratio, "low": float("nan"), "high": float("nan"), "level": level, "resamples": 0}
    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(num, (resamples, num.size)), axis=1)
    b = np.median(rng.choice(den, (resamples, den.size)), axis=1)
    low, high = np.percentile(a / b, [50 * (1 - level), 50 * (1 + level)])
    return {"ratio": ratio, "low": float(low), "high": float(high), "level": level, "resamples": resamples}


def break_even_steps(compile_s: float, compile_off_s: float, step_s: float, step_off_s: float) -> float:
    """Steps after which a mode's extra compile time is repaid by faster steps.

    0 when it compiles no slower and steps no slower; ``inf`` when its steps are not
    faster (its extra compile time is never paid back).
    """
    extra = compile_s - compile_off_s
    gain = step_off_s - step_s
    if not all(math.isfinite(v) for v in (extra, gain)):
        return math.nan
    if extra <= 0 and gain >= 0:
        return 0.0
    if gain <= 0:
        return math.inf
    return max(0.0, extra / gain)


# ------------------------------------------------------------- foreign load
#: Other processes' CPU use, in cores, above which a measurement is marked contaminated.
FOREIGN_LOAD_LIMIT = 0.25


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used (``/proc/<pid>/stat``); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ForeignLoad:
    """How busy OTHER processes kept the CPU while a block ran.

    The machine's busy CPU time (``/proc/stat``) minus that of this process and the
    ``pids`` it measures with, over the block's wall time: the average number of cores
    that foreign work took. A benchmark cannot promise it ran alone; this says whether
    it did.
    """

    def __init__(self, pids: Sequence[int] = ()):
        self.pids = [os.getpid(), *pids]

    def _own(self) -> float:
        return sum(_process_cpu_seconds(p) for p in self.pids)

    def __enter__(self):
        self.load_before = os.getloadavg()[0]
        self.wall0, self.busy0, self.own0 = time.perf_counter(), _busy_cpu_seconds(), self._own()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall0
        busy1, own1 = _busy_cpu_seconds(), self._own()
        self.foreign_cpu_s = (
            max(0.0, (busy1 - self.busy0) - (own1 - self.own0))
            if busy1 is not None and self.busy0 is not None
            else math.nan
        )
        self.load_after = os.getloadavg()[0]

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


# ---------------------------------------------------------------------- worker
def _worker(conn, spec: dict) -> None:
    """Worker process main: builds one arm, then answers the coordinator's commands."""
    env = {
        "TF_NUM_INTRAOP_THREADS": str(spec["threads"]),
        "TF_NUM_INTEROP_THREADS": "1" if spec["threads"] <= 2 else "2",
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
    }
    from ptycho.nets.xla import xla_flags_environment

    env.update(xla_flags_environment())
    if spec["count_clusters"]:
        import tempfile

        dump = tempfile.mkdtemp(prefix="ptycho-clusters-")
        env["TF_DUMP_GRAPH_PREFIX"] = dump
        env["TF_XLA_FLAGS"] += " --tf_xla_clustering_debug"
    os.environ.update(env)
    from ptycho.runtime import import_tensorflow

    import_tensorflow()  # its start-up notices filtered
    try:
        arm = _WorkerArm(spec)
        conn.send(("ready", arm.describe()))
        while True:
            command, arg = conn.recv()
            if command == "stop":
                break
            conn.send(("ok", getattr(arm, command)(*arg)))
    except Exception as exc:  # reported to the coordinator, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        if spec["count_clusters"]:
            import shutil

            shutil.rmtree(env["TF_DUMP_GRAPH_PREFIX"], ignore_errors=True)
        conn.close()


def _rss_mb(field: str = "VmRSS") -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _WorkerArm:
    """One (model, mode) arm inside its worker: trainer, components, predictor."""

    def __init__(self, spec: dict):
        from ptycho.config import from_dict
        from ptycho.nets.models import ModelConfig
        from ptycho.nets.train import TrainConfig, Trainer, prepare

        self.spec = spec
        ds = spec["dataset"]
        if isinstance(ds, str):
            from ptycho.data.dataset import read_dataset

            ds = read_dataset(ds)
        self.model_cfg = from_dict(ModelConfig, spec["model_cfg"])
        self.train_cfg = from_dict(TrainConfig, spec["train_cfg"])
        self.data = prepare(ds, self.model_cfg.kind)
        self.trainer = Trainer(
            self.model_cfg, self.train_cfg, ds.n, self.data.inputs.shape[-1], ds.probe, self.data.physics
        )
        self.rng = np.random.default_rng(self.train_cfg.seed)  # same seed in every arm: the same batches
        self.baseline_rss_mb = _rss_mb()

    def describe(self) -> dict:
        import tensorflow as tf

        return {
            "model": self.model_cfg.kind,
            "mode": self.train_cfg.xla,
            "gpus": len(tf.config.list_physical_devices("GPU")),
        }

    def _batch(self):
        d, bs = self.data, self.train_cfg.batch_size
        idx = self.rng.choice(len(d.inputs), bs, replace=False)
        return d.inputs[idx], d.offsets[idx], {k: v[idx] for k, v in d.targets.items()}

    def step(self) -> float:
        b = self._batch()
        t0 = time.perf_counter()
        float(self.trainer.train_step(*b))
        return time.perf_counter() - t0

    def clusters(self) -> int | None:
        """XLA clusters TensorFlow's auto-clustering formed (dumped graphs), if counted."""
        from ptycho.nets.xla import count_clusters

        prefix = os.environ.get("TF_DUMP_GRAPH_PREFIX")
        return count_clusters(prefix) if prefix else None

    def components(self, repeats: int) -> dict:
        """Median time of the step's three parts, each compiled under the arm's mode."""
        import tensorflow as tf

        from ptycho.nets.xla import compile_step

        t, mode = self.trainer, self.train_cfg.xla
        x, offsets, targets = self._batch()
        amp, phase = t.network(x, training=False)
        ones = (tf.ones_like(amp), tf.ones_like(phase))
        net_mode = "off" if mode == "physics" else mode  # the physics mode leaves the network to oneDNN

        def network(x, d_amp, d_phase):
            with tf.GradientTape() as tape:
                a, p = t.network(x, training=True)
            return tape.gradient([a, p], t.network.trainable_variables, output_gradients=[d_amp, d_phase])

        def physics(a, p, offsets, targets):
            with tf.GradientTape() as tape:
                tape.watch([a, p])
                loss = tf.reduce_mean(t.physics_loss(a, p, offsets, targets))
            return tape.gradient(loss, [a, p, t.log_scale])

        grads = [tf.zeros_like(v) for v in t.variables]  # zero gradients: Adam still does all its work

        def optimizer(grads):
            t.optimizer.apply(grads, t.variables)
            return tf.constant(0.0)

        parts = {
            "network": (compile_step(network, net_mode), (x, *ones)),
            "physics": (compile_step(physics, "off" if mode == "physics" else mode), (amp, phase, offsets, targets)),
            "optimizer": (compile_step(optimizer, mode), (grads,)),
        }
        samples: dict[str, list[float]] = {k: [] for k in parts}
        for fn, args in parts.values():
            _block(fn(*args))  # compile
        for _ in range(repeats):
            for name, (fn, args) in parts.items():
                t0 = time.perf_counter()
                _block(fn(*args))
                samples[name].append(time.perf_counter() - t0)
        return {name: {"median": float(np.median(s)), "samples_s": s} for name, s in samples.items()}

    def inference_setup(self) -> dict:
        """Build and compile the padded-batch and the per-pattern predictors."""
        from ptycho.nets.infer import Predictor

        bs, mode, cfg = self.train_cfg.batch_size, self.train_cfg.xla, self.spec["bench"]
        self.inputs = self.data.inputs[: cfg["infer_samples"]]
        self.predictor = Predictor(self.trainer.network, bs, mode)
        t0 = time.perf_counter()
        self.predictor(self.inputs[:1])
        compile_s = time.perf_counter() - t0
        self.single = Predictor(self.trainer.network, 1, mode)
        for _ in range(2):  # auto-clustering compiles lazily, after a cluster's first runs
            self.predictor(self.inputs[:bs])
            self.single(self.inputs[:1])
        starts = list(range(0, len(self.inputs), bs))
        return {
            "infer_compile_s": compile_s,
            "batches": len(starts),
            "naive": min(cfg["naive_samples"], len(self.inputs)),
            "patterns_per_sample": self.inputs.shape[-1],
        }

    def infer_batch(self, i: int) -> tuple[float, int]:
        """Seconds of the ``i``-th padded batch, and how many real samples it held."""
        bs = self.train_cfg.batch_size
        chunk = self.inputs[i * bs : (i + 1) * bs]
        t0 = time.perf_counter()
        self.predictor(chunk)
        return time.perf_counter() - t0, len(chunk)

    def infer_single(self, i: int) -> float:
        """Seconds of one pattern group through the batch-1 predictor."""
        t0 = time.perf_counter()
        self.single(self.inputs[i : i + 1])
        return time.perf_counter() - t0

    def memory(self) -> dict:
        import tensorflow as tf

        out = {
            "peak_rss_mb": _rss_mb("VmHWM"),
            "baseline_rss_mb": self.baseline_rss_mb,
            "traces": dict(self.trainer.traces),
        }
        out["peak_above_baseline_mb"] = out["peak_rss_mb"] - out["baseline_rss_mb"]
        if tf.config.list_physical_devices("GPU"):
            out["gpu_peak_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        return out


def _block(out) -> None:
    """Wait for ``out`` (a tensor or a structure of them) to be computed."""
    import tensorflow as tf

    for t in tf.nest.flatten(out):
        if hasattr(t, "numpy"):
            t.numpy()


# ----------------------------------------------------------------- coordinator
class _Worker:
    """The coordinator's handle on one worker process."""

    def __init__(self, ctx, spec: dict):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, spec), daemon=True)
        self.process.start()
        child.close()
        self.name = f"{spec['model_cfg']['kind']} {spec['train_cfg']['xla']}"
        self.description = self._receive()

    def _receive(self):
        try:
            status, value = self.conn.recv()
        except EOFError:
            from ptycho.errors import PtychoError

            raise PtychoError(
                f"bench: the {self.name} worker died (exit code {self.process.exitcode}); see its output above"
            ) from None
        if status == "error":
            from ptycho.errors import PtychoError

            raise PtychoError(f"bench: the {self.name} worker failed: {value}")
        return value

    def call(self, command: str, *args):
        self.conn.send((command, args))
        return self._receive()

    def send(self, command: str, *args) -> None:
        self.conn.send((command, args))

    def stop(self) -> None:
        try:
            self.conn.send(("stop", ()))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _start(ctx, ds, arms, train_cfg, bench: BenchConfig, threads: int) -> list[_Worker]:
    workers = []
    try:
        for model_cfg, mode in arms:
            spec = {
                "dataset": ds,
                "model_cfg": dataclasses.asdict(model_cfg),
                "train_cfg": dict(dataclasses.asdict(train_cfg), xla=mode),
                "bench": dataclasses.asdict(bench),
                "threads": threads,
                "count_clusters": mode == "auto",
            }
            workers.append(_Worker(ctx, spec))
    except BaseException:
        for w in workers:
            w.stop()
        raise
    return workers


def run(ds, model_cfgs, train_cfg, modes: Sequence[str] = ("off", "jit"), bench: BenchConfig = BenchConfig()) -> dict:
    """Time every (model, mode) arm; return per-arm results and per-mode ratios vs ``off``.

    ``ds`` is a :class:`~ptycho.data.dataset.Dataset` or the path of a dataset file (passed to
    the workers, which read it themselves).
    """
    import multiprocessing

    from ptycho.nets.xla import MODES, REFERENCE, parse_mode

    modes = [parse_mode(m) for m in modes]
    if REFERENCE not in modes:
        modes = [REFERENCE, *modes]  # every mode is judged against off
    modes = sorted(set(modes), key=list(MODES).index)
    ctx = multiprocessing.get_context("spawn")
    arms = [(m, mode) for m in model_cfgs for mode in modes]
    cores = os.cpu_count() or 1
    alone_threads = bench.threads or cores
    started = {"load_average": list(os.getloadavg()), "time": time.time()}

    results: dict[tuple[str, str], dict[str, Any]] = {}
    workers = _start(ctx, ds, arms, train_cfg, bench, alone_threads)
    try:
        for (model_cfg, mode), w in zip(arms, workers, strict=True):  # one at a time: compile alone
            results[(model_cfg.kind, mode)] = {
                "model": model_cfg.kind,
                "mode": mode,
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
        for i, ((model_cfg, mode), w) in enumerate(zip(arms, workers, strict=True)):
            res = results[(model_cfg.kind, mode)]
            res.update(inference[i])
            res["step_s"] = quartiles(alone[i])
            res["step_samples_s"] = alone[i]
            # Auto-clustering compiles lazily (on a cluster's second run), after the first
            # call: the time the first 1 + warmup calls took beyond as many steady steps
            # is the honest cost of getting ready, for every mode alike.
            ready = [res["compile_s"], *warm[i]]
            res["startup_overhead_s"] = max(0.0, sum(ready) - len(ready) * res["step_s"]["median"])
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
            with ForeignLoad([w.process.pid for w in workers]) as shared_load:
                samples = _run_shared(workers, bench.repeats)
            for (model_cfg, mode), s in zip(arms, samples, strict=True):
                results[(model_cfg.kind, mode)]["shared"] = {"step_s": quartiles(s), "step_samples_s": s}
    finally:
        for w in workers:
            w.stop()
    contexts = {
        "alone": {
            "jobs": 1,
            "threads": alone_threads,
            "how": "one arm steps at a time, arms interleaved, each with all its threads",
            "foreign_load": alone_load.record(cores),
        }
    }
    if bench.shared and len(arms) > 1:
        contexts["shared"] = {
            "jobs": len(arms),
            "threads": bench.shared_threads,
            "how": f"all {len(arms)} arms' step loops at once, {bench.shared_threads} threads each "
            f"on {cores} cores (as the pipeline's training jobs run)",
            "foreign_load": shared_load.record(cores),
        }
    machine = machine_info(gpus=max((w.description["gpus"] for w in workers), default=None))
    machine["load_average_start"] = started["load_average"]
    arms_out = [results[(m.kind, mode)] for m, mode in arms]
    return {
        "machine": machine,
        "modes": modes,
        "contexts": contexts,
        "arms": arms_out,
        "ratios": ratios(arms_out),
        "wall_s": time.time() - started["time"],
    }


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


def _ready(arm: dict) -> float:
    """Seconds an arm spends getting ready beyond steady steps (compile included)."""
    return arm.get("startup_overhead_s", arm["compile_s"])


def ratios(arms: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """Per model and mode: speed relative to ``off`` (above 1 = faster), with intervals."""
    out: dict[str, dict[str, dict]] = {}
    for model in dict.fromkeys(a["model"] for a in arms):
        by_mode = {a["mode"]: a for a in arms if a["model"] == model}
        off = by_mode.get("off")
        if off is None:
            continue
        for mode, a in by_mode.items():
            if mode == "off":
                continue
            ready, ready_off = _ready(a), _ready(off)
            r = {
                "train_step_alone": bootstrap_ratio(off["step_samples_s"], a["step_samples_s"]),
                "compile_extra_s": ready - ready_off,
                "break_even_steps": break_even_steps(ready, ready_off, a["step_s"]["median"], off["step_s"]["median"]),
            }
            if "shared" in a and "shared" in off:
                r["train_step_shared"] = bootstrap_ratio(off["shared"]["step_samples_s"], a["shared"]["step_samples_s"])
                r["break_even_steps_shared"] = break_even_steps(
                    ready, ready_off, a["shared"]["step_s"]["median"], off["shared"]["step_s"]["median"]
                )
            if a.get("infer_batch_samples_s") and off.get("infer_batch_samples_s"):
                r["inference"] = bootstrap_ratio(off["infer_batch_samples_s"], a["infer_batch_samples_s"])
            r["padded_vs_naive"] = a["infer_patterns_per_s"] / a["naive_patterns_per_s"]
            out.setdefault(model, {})[mode] = r
        out.setdefault(model, {})["off"] = {
            "padded_vs_naive": off["infer_patterns_per_s"] / off["naive_patterns_per_s"]
        }
    return out


def fastest(result: dict, model: str = "pinn", context: str = "alone") -> tuple[str, dict] | None:
    """The mode with the highest train-step ratio vs ``off`` in ``context`` (``off`` itself
    if no mode beats it with confidence), with its interval."""
    key = f"train_step_{context}"
    modes = {m: r[key] for m, r in result.get("ratios", {}).get(model, {}).items() if key in r}
    if not modes:
        return None
    best = max(modes, key=lambda m: modes[m]["ratio"])
    return best, modes[best]


def format_table(result: dict) -> str:
    """Plain-text tables of a :func:`run` result: per arm, then per mode vs off."""
    m = result["machine"]
    lines = [
        f"machine: {m['cpu']} | {m['cores']} cores | load {m['load_average_start'][0]:.2f} at start, "
        f"{m['load_average'][0]:.2f} at end | TF {m['tensorflow']} | GPUs {m['gpus']}",
        "contexts: " + "; ".join(f"{k}: {c['how']}" for k, c in result["contexts"].items()),
        f"{'model':9s} {'mode':8s} {'compile s':>9s} {'alone ms':>9s} {'IQR':>6s} {'shared ms':>10s} {'IQR':>6s} "
        f"{'net ms':>7s} {'phys ms':>7s} {'opt ms':>7s} {'peak MB':>8s} {'infer p/s':>10s} {'1-by-1 p/s':>10s}",
    ]
    for a in result["arms"]:
        sh = a.get("shared", {}).get("step_s", {})
        c = a["components"]
        lines.append(
            f"{a['model']:9s} {a['mode']:8s} {a['compile_s']:9.2f} {1e3 * a['step_s']['median']:9.1f} "
            f"{1e3 * a['step_s']['iqr']:6.1f} {1e3 * sh.get('median', math.nan):10.1f} {1e3 * sh.get('iqr', math.nan):6.1f} "
            f"{1e3 * c['network']['median']:7.1f} {1e3 * c['physics']['median']:7.1f} {1e3 * c['optimizer']['median']:7.1f} "
            f"{a['peak_rss_mb']:8.0f} {a['infer_patterns_per_s']:10.1f} {a['naive_patterns_per_s']:10.1f}"
        )

    def ci(r):
        return f"{r['ratio']:.2f}x ({r['low']:.2f}-{r['high']:.2f})" if r else "n/a"

    for name, c in result["contexts"].items():
        f = c.get("foreign_load")
        if f:
            lines.append(
                f"{name}: other processes kept {f['foreign_cores']:.2f} of {f['of_cores']} cores busy"
                + (" -- CONTAMINATED, not a measurement alone" if f["contaminated"] else " (clean)")
            )
    lines.append(
        f"{'model':9s} {'mode':8s} {'vs off alone':>20s} {'vs off shared':>20s} {'inference':>20s} "
        f"{'break-even steps':>17s} {'padded/1-by-1':>14s}"
    )
    for model, per in result["ratios"].items():
        for mode, r in per.items():
            if mode == "off":
                continue
            be = r["break_even_steps"]
            lines.append(
                f"{model:9s} {mode:8s} {ci(r['train_step_alone']):>20s} {ci(r.get('train_step_shared')):>20s} "
                f"{ci(r.get('inference')):>20s} {'never' if math.isinf(be) else f'{be:.0f}':>17s} "
                f"{r['padded_vs_naive']:13.1f}x"
            )
    for context in result["contexts"]:
        best = fastest(result, "pinn", context)
        if best:
            lines.append(f"fastest PINN train step, {context}: {best[0]} ({ci(best[1])} vs off)")
    return "\n".join(lines)
