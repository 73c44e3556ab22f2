"""The benchmark's worker process: one (model, mode, precision) arm in a fresh interpreter.

:func:`_worker` is the process's main: it sets the arm's thread counts and XLA flags
before TensorFlow starts, builds the arm (:class:`_WorkerArm`: trainer, components,
predictors) and answers the coordinator's commands, one ``(command, args)`` message
at a time, with ``("ready" | "ok" | "error", value)``. :class:`_Worker` is the
coordinator's handle on such a process.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from ptycho.study.bench.machine import peak_rss_mb, rss_mb


def _exit_on_sigterm(signum, frame) -> None:  # noqa: ARG001
    raise SystemExit(128 + signum)  # an exit, not a kill: the worker's finally blocks run


def _worker(conn, spec: dict) -> None:
    """Worker process main: builds one arm, then answers the coordinator's commands.

    First of all it binds its life to the coordinator's (``spec["parent"]``, its pid): a
    coordinator killed, even by SIGKILL, ends its workers too (SIGTERM, which ends this
    process at its next Python instruction, its cleanup done)."""
    from ptycho.runtime import die_with_parent

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    die_with_parent(spec["parent"])
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


class _WorkerArm:
    """One (model, mode, precision) arm inside its worker: trainer, components, predictor."""

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
        self.n, self.probe = ds.n, ds.probe  # for the batch sweep's trainers
        self.rng = np.random.default_rng(self.train_cfg.seed)  # same seed in every arm: the same batches
        self.baseline_rss_mb = rss_mb()

    def describe(self) -> dict:
        import tensorflow as tf

        return {
            "model": self.model_cfg.kind,
            "mode": self.train_cfg.xla,
            "precision": self.train_cfg.precision,
            "gpus": len(tf.config.list_physical_devices("GPU")),
        }

    def _batch(self, batch_size: int | None = None):
        d, bs = self.data, batch_size or self.train_cfg.batch_size
        idx = self.rng.choice(len(d.inputs), bs, replace=len(d.inputs) < bs)
        return d.inputs[idx], d.offsets[idx], {k: v[idx] for k, v in d.targets.items()}

    def sweep_setup(self, train_sizes: list[int], infer_sizes: list[int]) -> dict:
        """A trainer per training batch size and a predictor per inference batch size (a
        compiled step is traced for one shape only), each compiled by a first, timed call."""
        import dataclasses

        from ptycho.nets.infer import Predictor
        from ptycho.nets.train import Trainer

        self.sweep_trainers, self.sweep_predictors, compile_s = {}, {}, {"train": {}, "infer": {}}
        channels = self.data.inputs.shape[-1]
        for b in train_sizes:
            cfg = dataclasses.replace(self.train_cfg, batch_size=b)
            trainer = Trainer(self.model_cfg, cfg, self.n, channels, self.probe, self.data.physics)
            self.sweep_trainers[b] = trainer
            compile_s["train"][b] = self.sweep_train(b)
        for b in infer_sizes:
            self.sweep_predictors[b] = Predictor(self.trainer.network, b, self.train_cfg.xla)
            compile_s["infer"][b] = self.sweep_infer(b)
            self.sweep_infer(b)  # auto-clustering compiles lazily, after a cluster's first runs
        return compile_s

    def sweep_train(self, batch_size: int) -> float:
        """Seconds of one train step at ``batch_size``."""
        b = self._batch(batch_size)
        t0 = time.perf_counter()
        float(self.sweep_trainers[batch_size].train_step(*b))
        return time.perf_counter() - t0

    def sweep_infer(self, batch_size: int) -> float:
        """Seconds of one full inference batch of ``batch_size`` pattern groups."""
        idx = self.rng.choice(len(self.data.inputs), batch_size, replace=len(self.data.inputs) < batch_size)
        x = self.data.inputs[idx]
        t0 = time.perf_counter()
        self.sweep_predictors[batch_size](x)
        return time.perf_counter() - t0

    def step(self) -> float:
        b = self._batch()
        t0 = time.perf_counter()
        float(self.trainer.train_step(*b))
        return time.perf_counter() - t0

    def flops(self) -> dict:
        """The network's FLOPs per train step (:func:`~ptycho.study.bench.roofline.train_step_flops`)."""
        from ptycho.study.bench.roofline import train_step_flops

        return train_step_flops(self.trainer.network, self.train_cfg.batch_size)

    def peak(self) -> dict:
        """The machine's matmul peak per dtype, with this worker's threads (:mod:`.roofline`)."""
        from ptycho.study.bench.roofline import peak_gflops

        return peak_gflops(self.spec["bench"]["peak_size"])

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
            # As the step compiles them: a mode without XLA in its step (physics) leaves the
            # network to oneDNN, and its head is t.physics_loss, its own XLA function.
            "network": (compile_step(network, mode), (x, *ones)),
            "physics": (compile_step(physics, mode), (amp, phase, offsets, targets)),
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
            "peak_rss_mb": peak_rss_mb(),
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


class _Worker:
    """The coordinator's handle on one worker process."""

    def __init__(self, ctx, spec: dict):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, spec), daemon=True)
        self.process.start()
        child.close()
        self.name = f"{spec['model_cfg']['kind']} {spec['train_cfg']['xla']} {spec['train_cfg']['precision']}"
        try:
            self.description = self._receive()
        except BaseException as exc:  # a worker that failed to start, or an interruption: not left running
            self.stop(now=not isinstance(exc, Exception))
            raise

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

    def stop(self, now: bool = False) -> None:
        """Ask the worker to stop after its current command (30 s, then SIGKILL); ``now``
        (the coordinator interrupted: SIGTERM or Ctrl-C) SIGTERM at once, SIGKILL after 10 s."""
        if now:
            self.process.terminate()
        else:
            try:
                self.conn.send(("stop", ()))
            except (BrokenPipeError, OSError):
                pass
        self.process.join(10 if now else 30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
