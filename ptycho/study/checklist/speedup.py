"""Checklist item *speedup*: is some XLA mode's PINN train step faster than ``off``'s?

Collected from the benchmark job's record (``ptycho bench``: every arm timed alone and
with the cores shared, interleaved, with bootstrap intervals); no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ptycho.artifacts import read_json
from ptycho.errors import PtychoError
from ptycho.study.arms import MODEL_WORDS, Arm
from ptycho.study.checklist.item import Figure, Inputs, Item, verdict
from ptycho.study.figures.timing import MEASUREMENTS
from ptycho.study.tables import Table, fmt

#: Below this many timed steps per arm a percentile bootstrap of the median is not
#: trusted (with 3 equal samples it gives a zero-width interval): the summary says so.
MIN_STEPS_FOR_INTERVAL = 10
CONTEXT_WORDS = {"alone": "alone on the machine", "shared": "with the cores shared by every arm's training"}


def speedup_intervals(bench: Mapping[str, Any]) -> dict[str, dict]:
    """``"PINN jit, train step alone" -> {ratio, low, high}`` for every model, mode and
    measurement of the benchmark (speed relative to ``off``: above 1 = faster); the
    report record's index of the benchmark's ratios, read by people, never parsed."""
    out = {}
    for model, per in bench.get("ratios", {}).items():
        label = MODEL_WORDS.get(model, model.capitalize())
        for mode, r in per.items():
            for key, word in MEASUREMENTS.items():
                if key in r:
                    out[f"{label} {mode}, {word}"] = r[key]
    return out


def _steps(bench: Mapping[str, Any], model: str, context: str) -> int:
    counts = [
        (a["step_s"] if context == "alone" else a.get("shared", {}).get("step_s", {})).get("n", 0)
        for a in bench["arms"]
        if a["model"] == model
    ]
    return min(counts, default=0)


def _effect(mode: str, r: Mapping[str, float], reliable: bool) -> str:
    if r["ratio"] >= 1.0 and reliable and r["low"] > 1.0:
        return f"the fastest XLA mode, {mode}, makes the PINN train step faster: {r['ratio']:.2f}x off"
    if r["ratio"] >= 1.0 and reliable:
        return (
            f"no XLA mode makes the PINN train step measurably faster (best: {mode}, {r['ratio']:.2f}x off, "
            "interval includes 1)"
        )
    if r["ratio"] >= 1.0:
        return f"the fastest XLA mode is {mode}: {r['ratio']:.2f}x off"
    return f"every XLA mode makes the PINN train step SLOWER (best: {mode}, {r['ratio']:.2f}x off)"


def speedup(
    bench: Mapping[str, Any], threshold: float, train_timings: Mapping[str, Any] | None = None, context: str = "alone"
) -> dict:
    """The fastest XLA mode's PINN train step vs ``off``, in ``context`` (alone | shared).

    The value judged is the lower bound of that ratio's 95 % bootstrap interval (with
    fewer than :data:`MIN_STEPS_FOR_INTERVAL` steps per arm, the ratio itself, and the
    summary says so): PASS means some XLA mode is faster with confidence in that
    context. Both contexts, every mode, every interval and the machine are evidence; a
    slower XLA is a finding, stated as such.
    """
    from ptycho.study.bench import fastest

    words = {}
    verdict_value, verdict_text = float("nan"), ""
    for ctx in bench.get("contexts", {}):
        best = fastest(bench, "pinn", ctx)
        if best is None:
            continue
        mode, r = best
        n = _steps(bench, "pinn", ctx)
        reliable = n >= MIN_STEPS_FOR_INTERVAL and math.isfinite(r["low"]) and math.isfinite(r["high"])
        spread = (
            f"95% CI {r['low']:.2f}-{r['high']:.2f}, median of {n} steps per arm"
            if reliable
            else f"median of {n} steps per arm, too few for a confidence interval: judged on the ratio itself"
        )
        judged = " (the verdict's context)" if ctx == context else ""
        foreign = bench["contexts"][ctx].get("foreign_load") or {}
        if foreign.get("contaminated"):
            spread += (
                f"; CONTAMINATED: other processes kept {foreign['foreign_cores']:.2f} of "
                f"{foreign['of_cores']} cores busy during it"
            )
        words[ctx] = {
            "mode": mode,
            "ratio": r["ratio"],
            "low": r["low"],
            "high": r["high"],
            "reliable": reliable,
            "contaminated": bool(foreign.get("contaminated")),
            "text": f"{CONTEXT_WORDS.get(ctx, ctx).capitalize()}{judged}: {_effect(mode, r, reliable)} ({spread})",
        }
        if ctx == context:
            verdict_value = r["low"] if reliable else r["ratio"]
            verdict_text = words[ctx]["text"]
    if not words:
        summary = "no PINN timings for off and an XLA mode: the speedup was not measured"
    else:
        others = [w["text"][0].lower() + w["text"][1:] for c, w in words.items() if c != context]
        summary = "; ".join(([verdict_text] if verdict_text else [f"No {context} measurement to judge"]) + others)
    return verdict(
        ITEM.name,
        verdict_value,
        threshold,
        ">=",
        summary,
        {
            "context": context,
            "per_context": words,
            "bench": bench,
            "intervals": speedup_intervals(bench),
            "machine": bench.get("machine", {}),
            "training_jobs": dict(train_timings or {}),
        },
    )


def collect(inputs: Inputs, threshold: float) -> dict:
    from ptycho.study.jobs import timing

    if not inputs.bench:
        raise PtychoError("check speedup: needs --bench (the JSON written by 'ptycho bench --out')")
    timings = {Arm.of_meta(m).name: timing(m) for m in map(read_json, inputs.model_jsons)}
    return speedup(read_json(inputs.bench), threshold, timings, context=inputs.context)


def text(report: Mapping) -> str:
    item = report["items"]["speedup"]
    from ptycho.study.bench.machine import machine_line

    return f"{item['summary']}. Benchmark machine: {machine_line(item['evidence'].get('machine', {}))}."


def training_table(report: Mapping) -> Table:
    rows = []
    for name, arm in sorted(report["arms"].items()):
        t = arm.get("timing", {})
        status = arm.get("status", "FINISHED")
        if status == "FAILED":
            status = f"FAILED: {arm.get('failure') or 'diverged'}"
        rows.append(
            [
                name,
                status,
                fmt(t.get("compile_s")),
                fmt(t.get("step_median_s")),
                fmt(t.get("train_wall_s")),
                fmt(arm.get("infer_patterns_per_s")),
            ]
        )
    return (
        "Training jobs (shared the CPU with other jobs: indicative only)",
        ["arm", "training", "compile s", "step median s", "train wall s", "infer patterns/s"],
        rows,
    )


def tables(report: Mapping) -> list[Table]:
    from ptycho.study.bench import tables as bench_tables

    return [*bench_tables(report["items"]["speedup"]["evidence"].get("bench", {})), training_table(report)]


def _figure(kind: str):
    def draw(inputs):
        from ptycho.study.figures import timing

        bench = inputs.bench
        if kind == "speedup":
            return timing.speedup_bars(bench.get("ratios", {}))
        return getattr(timing, kind)(bench["arms"])

    return draw


ITEM = Item(
    name="speedup",
    title="Speedup",
    text=text,
    tables=tables,
    figures=(
        Figure("step_times", "step-time distributions", _figure("step_time_distributions")),
        Figure("components", "where the step time goes, per mode", _figure("component_bars")),
        Figure("speedup", "speedup with bootstrap intervals", _figure("speedup")),
    ),
    collect=collect,
    threshold="speedup_min",
)
