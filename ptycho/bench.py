"""XLA vs no-XLA timings measured in one run: compile, steady-state step, inference.

For each model and arm this measures, on the same data and the same initial weights:

* compile time: wall time of the first train-step call (trace + XLA compile + one step);
* steady-state train step: ``repeats`` timed steps after ``warmup`` untimed ones,
  the two arms' steps interleaved (:func:`bench_model`), reported as median and
  interquartile range;
* inference: patterns per second of the fixed-batch predictor (padding included),
  after its own first (compiling) call, with each batch's time kept (the sample the
  report's bootstrap interval is drawn from), and of a naive per-pattern loop (batch 1).

Ratios (no-XLA / XLA) are printed from this one run, next to the machine description;
a ratio below 1 means XLA is slower, and is reported as such.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from dataclasses import dataclass

import numpy as np


def machine_info() -> dict:
    """CPU model, cores, load average and library versions, recorded beside timings."""
    import tensorflow as tf

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
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
    }


@dataclass(frozen=True)
class BenchConfig:
    warmup: int = 3
    repeats: int = 60
    infer_samples: int = 256
    naive_samples: int = 32


def _quartiles(values: list[float]) -> dict:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": len(values)}


class _Arm:
    """One (model, arm) ready to time: trainer compiled, same batch sequence as its twin."""

    def __init__(self, ds, model_cfg, train_cfg, bench: BenchConfig):
        from ptycho.train import Trainer, prepare

        self.model_cfg, self.train_cfg, self.bench = model_cfg, train_cfg, bench
        self.data = prepare(ds, model_cfg.kind)
        self.trainer = Trainer(model_cfg, train_cfg, ds.n, self.data.inputs.shape[-1], ds.probe, self.data.physics)
        self.rng = np.random.default_rng(train_cfg.seed)  # same seed in both arms: the same batches
        self.steps: list[float] = []
        t0 = time.perf_counter()
        self.step()
        self.compile_s = time.perf_counter() - t0

    def step(self) -> float:
        d, bs = self.data, self.train_cfg.batch_size
        idx = self.rng.choice(len(d.inputs), bs, replace=False)
        b = d.inputs[idx], d.offsets[idx], {k: v[idx] for k, v in d.targets.items()}
        t0 = time.perf_counter()
        float(self.trainer.train_step(*b))
        return time.perf_counter() - t0

    def timed_step(self) -> None:
        self.steps.append(self.step())

    def inference(self) -> dict:
        from ptycho.infer import Predictor

        bs, xla, bench = self.train_cfg.batch_size, self.train_cfg.xla, self.bench
        predictor = Predictor(self.trainer.network, bs, xla)
        inputs = self.data.inputs[: bench.infer_samples]
        t0 = time.perf_counter()
        predictor(inputs[:1])
        infer_compile = time.perf_counter() - t0
        batch_times = []  # one sample per padded batch: the distribution behind the interval
        for start in range(0, len(inputs), bs):
            chunk = inputs[start : start + bs]
            t0 = time.perf_counter()
            predictor(chunk)
            batch_times.append(time.perf_counter() - t0)
        single = Predictor(self.trainer.network, 1, xla)
        single(inputs[:1])
        n_naive = min(bench.naive_samples, len(inputs))
        t0 = time.perf_counter()
        for i in range(n_naive):
            single(inputs[i : i + 1])
        naive_s = time.perf_counter() - t0
        c = inputs.shape[-1]
        return {
            "infer_compile_s": infer_compile,
            "infer_patterns_per_s": len(inputs) * c / sum(batch_times),
            "infer_batch_samples_s": batch_times,
            "naive_patterns_per_s": n_naive * c / naive_s,
        }

    def result(self, inference: dict) -> dict:
        return {
            "model": self.model_cfg.kind,
            "xla": self.train_cfg.xla,
            "model_config": dataclasses.asdict(self.model_cfg),  # what was timed, checkable against training
            "batch_size": self.train_cfg.batch_size,
            "compile_s": self.compile_s,
            "step_s": _quartiles(self.steps),
            "step_samples_s": self.steps,
            **inference,
            "traces": dict(self.trainer.traces),
        }


def bench_model(ds, model_cfg, train_cfg, bench: BenchConfig) -> list[dict]:
    """Both arms of one model, their timed steps INTERLEAVED (XLA, no-XLA, no-XLA, XLA, ...).

    On a shared machine the load drifts; timing the arms one after the other would put
    the drift into the ratio. Alternating the steps (and their order) makes both arms
    see the same background, so the ratio of medians compares the arms, not the minutes.
    """
    from dataclasses import replace

    arms = [_Arm(ds, model_cfg, replace(train_cfg, xla=xla), bench) for xla in (True, False)]
    for _ in range(bench.warmup):
        for arm in arms:
            arm.step()
    for r in range(bench.repeats):
        for arm in arms if r % 2 == 0 else arms[::-1]:
            arm.timed_step()
    return [arm.result(arm.inference()) for arm in arms]


def run(ds, model_cfgs, train_cfg, bench: BenchConfig = BenchConfig()) -> dict:
    """Both arms for every model config; returns per-arm results and no-XLA/XLA ratios."""
    arms = [a for model_cfg in model_cfgs for a in bench_model(ds, model_cfg, train_cfg, bench)]
    ratios = {}
    for model_cfg in model_cfgs:
        on = next(a for a in arms if a["model"] == model_cfg.kind and a["xla"])
        off = next(a for a in arms if a["model"] == model_cfg.kind and not a["xla"])
        ratios[model_cfg.kind] = {
            "train_step_speedup": off["step_s"]["median"] / on["step_s"]["median"],
            "inference_speedup": on["infer_patterns_per_s"] / off["infer_patterns_per_s"],
            "padded_vs_naive_xla": on["infer_patterns_per_s"] / on["naive_patterns_per_s"],
        }
    return {"machine": machine_info(), "arms": arms, "ratios": ratios}


def format_table(result: dict) -> str:
    """Plain-text table of a :func:`run` result."""
    m = result["machine"]
    lines = [
        f"machine: {m['cpu']} | {m['cores']} cores | load {m['load_average'][0]:.2f} | TF {m['tensorflow']} | GPUs {m['gpus']}",
        f"{'model':9s} {'arm':7s} {'compile s':>10s} {'step median s':>14s} {'step IQR s':>11s} {'infer pat/s':>12s} {'naive pat/s':>12s}",
    ]
    for a in result["arms"]:
        lines.append(
            f"{a['model']:9s} {'xla' if a['xla'] else 'no-xla':7s} {a['compile_s']:10.2f} {a['step_s']['median']:14.4f} "
            f"{a['step_s']['iqr']:11.4f} {a['infer_patterns_per_s']:12.1f} {a['naive_patterns_per_s']:12.1f}"
        )
    for kind, r in result["ratios"].items():
        verdict = "faster" if r["train_step_speedup"] >= 1 else "SLOWER"
        lines.append(
            f"{kind}: XLA train step {r['train_step_speedup']:.2f}x ({verdict} than no-XLA), "
            f"inference {r['inference_speedup']:.2f}x, padded-batch vs per-pattern (XLA) {r['padded_vs_naive_xla']:.1f}x"
        )
    return "\n".join(lines)
