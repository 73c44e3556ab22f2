"""Checklist item *speedup*: is some arm's PINN train step faster than ``off``'s at float32?

An arm is an XLA mode at a precision (``off`` at bfloat16 is one: a reduced precision
without XLA). Collected from the benchmark job's record (``ptycho bench``: every arm
timed alone and with the cores shared, interleaved, with bootstrap intervals, and its
roofline); no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ptycho.artifacts import read_json
from ptycho.errors import PtychoError
from ptycho.nets.precision import REFERENCE_PRECISION, SHORT
from ptycho.nets.xla import REFERENCE
from ptycho.study.arms import MODEL_WORDS, Arm
from ptycho.study.checklist.item import Figure, Inputs, Item, verdict
from ptycho.study.figures.timing import MEASUREMENTS
from ptycho.study.tables import Table, fmt

#: Below this many timed steps per arm a percentile bootstrap of the median is not
#: trusted (with 3 equal samples it gives a zero-width interval): the summary says so.
MIN_STEPS_FOR_INTERVAL = 10
CONTEXT_WORDS = {"alone": "alone on the machine", "shared": "with the cores shared by every arm's training"}


def speedup_intervals(bench: Mapping[str, Any]) -> dict[str, dict]:
    """``"PINN jit, train step alone" -> {ratio, low, high}`` for every model, arm and
    measurement of the benchmark (speed relative to ``off`` at float32: above 1 = faster;
    ``"PINN jit at bf16, ..."`` for a reduced precision); the report record's index of the
    benchmark's ratios, read by people, never parsed."""
    from ptycho.study.bench import arm_words

    out = {}
    for model, per in bench.get("ratios", {}).items():
        label = MODEL_WORDS.get(model, model.capitalize())
        for arm, r in per.items():
            for key, word in MEASUREMENTS.items():
                if key in r:
                    out[f"{label} {arm_words(bench, model, arm)}, {word}"] = r[key]
    return out


def _steps(bench: Mapping[str, Any], model: str, context: str) -> int:
    counts = [
        (a["step_s"] if context == "alone" else a.get("shared", {}).get("step_s", {})).get("n", 0)
        for a in bench["arms"]
        if a["model"] == model
    ]
    return min(counts, default=0)


def _effect(bench: Mapping[str, Any], arm: str, context: str, reliable: bool) -> str:
    """The best arm's effect in words: ``"the fastest XLA mode, jit, ...: 1.25x off"``;
    with reduced-precision arms, ``"the fastest arm, jit at bf16, ...: 1.60x off at fp32
    and 1.10x off at bf16"``, the second ratio being what XLA adds at that precision."""
    from ptycho.study.bench import arm_words, reference_words

    entry = bench["ratios"]["pinn"][arm]
    r = entry[f"train_step_{context}"]
    vs = reference_words(bench)
    noun = "XLA mode" if vs == REFERENCE else "arm"
    name = arm_words(bench, "pinn", arm)
    ratio = f"{r['ratio']:.2f}x {vs}"
    same = entry.get("same_precision", {}).get(f"train_step_{context}")
    if same:
        ratio += f" and {same['ratio']:.2f}x {REFERENCE} at {SHORT[entry['precision']]}"
    if r["ratio"] >= 1.0 and reliable and r["low"] > 1.0:
        return f"the fastest {noun}, {name}, makes the PINN train step faster: {ratio}"
    if r["ratio"] >= 1.0 and reliable:
        return f"no {noun} makes the PINN train step measurably faster (best: {name}, {ratio}, interval includes 1)"
    if r["ratio"] >= 1.0:
        return f"the fastest {noun} is {name}: {ratio}"
    return f"every {noun} makes the PINN train step SLOWER (best: {name}, {ratio})"


def speedup(
    bench: Mapping[str, Any], threshold: float, train_timings: Mapping[str, Any] | None = None, context: str = "alone"
) -> dict:
    """The fastest arm's PINN train step vs ``off`` at float32, in ``context`` (alone | shared).

    The arms are every XLA mode at every precision benchmarked. The value judged is the
    lower bound of the fastest arm's ratio's 95 % bootstrap interval (with fewer than
    :data:`MIN_STEPS_FOR_INTERVAL` steps per arm, the ratio itself, and the summary says
    so): PASS means some arm is faster with confidence in that context. The summary names
    the arm (mode, precision). Both contexts, every arm, every interval, the roofline and
    the machine are evidence; a slower XLA is a finding, stated as such.
    """
    from ptycho.study.bench import fastest

    words = {}
    verdict_value, verdict_text = float("nan"), ""
    for ctx in bench.get("contexts", {}):
        best = fastest(bench, "pinn", ctx)
        if best is None:
            continue
        arm, r = best
        entry = bench["ratios"]["pinn"][arm]
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
            "arm": arm,
            "mode": entry.get("mode", arm),
            "precision": entry.get("precision", REFERENCE_PRECISION),
            "ratio": r["ratio"],
            "low": r["low"],
            "high": r["high"],
            "reliable": reliable,
            "contaminated": bool(foreign.get("contaminated")),
            "text": f"{CONTEXT_WORDS.get(ctx, ctx).capitalize()}{judged}: {_effect(bench, arm, ctx, reliable)} "
            f"({spread})",
        }
        if ctx == context:
            verdict_value = r["low"] if reliable else r["ratio"]
            verdict_text = words[ctx]["text"]
    if not words:
        summary = "no PINN timings for off and another arm: the speedup was not measured"
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
    """The verdict's summary, the roofline in words (how close the fastest arm is to the
    machine's peak, which precision the hardware accelerates) and the machine."""
    from ptycho.study.bench import roofline_words
    from ptycho.study.bench.machine import machine_line

    item = report["items"]["speedup"]
    roof = roofline_words(item["evidence"].get("bench", {}))
    machine = machine_line(item["evidence"].get("machine", {}))
    return f"{item['summary']}. {roof + ' ' if roof else ''}Benchmark machine: {machine}."


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
