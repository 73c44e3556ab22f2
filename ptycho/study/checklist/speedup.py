"""Checklist item *speedup*: does XLA make the PINN reach its quality sooner?

XLA's own effect only: each XLA mode against ``off`` AT THE SAME precision. The value
judged is the time to quality (:mod:`ptycho.study.time_to_quality`) of the trained arms,
whose steps were timed in the pipeline's own schedule: the lower end of the fastest XLA
mode's 95 % interval must lie above the threshold. The per-step ratios of the benchmark
(``ptycho bench``: alone, and in the pipeline's schedule) and of the trainings stay as
evidence. The precision's effect (each precision against float32 in the same mode) is
a finding of its own, never counted as XLA's; the fastest configuration overall is
named as a recommendation, labelled as such. No TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ptycho.errors import PtychoError
from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION, short
from ptycho.nets.xla import REFERENCE
from ptycho.study import time_to_quality as ttq
from ptycho.study import ttq_comparison as ttc
from ptycho.study.arms import Arm, Pair
from ptycho.study.bench.record import MEASUREMENT_WORDS, BenchRecord, Interval
from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.result import FAIL, INCONCLUSIVE, PASS, ItemResult, verdict
from ptycho.study.checklist.speed_evidence import BY_STEP, BY_TIME_TO_QUALITY, Judged, SpeedEvidence
from ptycho.study.presentation import MODEL_WORDS
from ptycho.study.stats import ALPHA
from ptycho.study.training_record import TrainingRecord

#: Below this many timed steps per arm a percentile bootstrap of the median is not
#: trusted (with 3 equal samples it gives a zero-width interval): the summary says so.
MIN_STEPS_FOR_INTERVAL = 10
CONTEXT_WORDS = {"alone": "alone on the machine", "shared": "in the pipeline's schedule"}


def speedup_intervals(bench: BenchRecord) -> dict[str, dict]:
    """``"PINN jit vs off at fp32, train step alone" -> {ratio, low, high}`` for every
    model, XLA mode and measurement of the benchmark, each against ``off`` at its own
    precision, and ``"PINN off at bf16 vs fp32, ..."`` for each reduced precision against
    float32 in the same mode; the report record's index of the benchmark's ratios, read
    by people, never parsed."""
    out = {}
    for model, per in bench.ratios.items():
        label = MODEL_WORDS.get(model, model.capitalize())
        for r in per.values():
            for key, word in MEASUREMENT_WORDS.items():
                if key in r.xla:
                    out[f"{label} {r.mode} vs {REFERENCE} at {short(r.precision)}, {word}"] = r.xla[key].to_json()
                if key in r.vs_float32:
                    out[f"{label} {r.mode}: {short(r.precision)} vs {short(REFERENCE_PRECISION)}, {word}"] = (
                        r.vs_float32[key].to_json()
                    )
    return out


def ratio_words(r: Interval) -> str:
    """A benchmark ratio in words (:func:`ptycho.study.ttq_comparison.ratio_words`)."""
    return ttc.ratio_words(r.ratio, r.low, r.high)


def effect_words(r: Interval) -> str:
    """A benchmark ratio's effect (:func:`ptycho.study.ttq_comparison.effect_words`)."""
    return ttc.effect_words(r.ratio, r.low, r.high)


# ----------------------------------------------------------------- time to quality
def time_to_quality(
    metas: Sequence[TrainingRecord | Mapping], margin: float, alpha: float = ALPHA
) -> dict[str, ttc.Comparison]:
    """Every comparison the trained arms allow (``metas``: their records, or their
    ``model.json``), each holding the other axis fixed, keyed
    like the other items' (:attr:`~ptycho.study.arms.Pair.group`): each XLA mode vs
    ``off`` at the same precision (``pinn-physics-bf16``) and each reduced precision vs
    float32 in the same mode (``pinn-off-bf16-vs-fp32``); each interval at ``1 - alpha``."""
    by_arm: dict[Arm, list[TrainingRecord]] = {}
    for r in map(TrainingRecord.of, metas):
        by_arm.setdefault(r.arm._replace(seed=0), []).append(r)
    out = {}
    for arm in sorted(by_arm, key=lambda a: a.order):
        candidates = []
        if arm.mode != REFERENCE:
            candidates.append(Pair(arm, arm.reference))
        if arm.precision != REFERENCE_PRECISION:
            candidates.append(Pair(arm, arm._replace(precision=REFERENCE_PRECISION)))
        for pair in candidates:
            if pair.reference in by_arm:
                c = ttq.compare(ttq.runs_of(by_arm[arm]), ttq.runs_of(by_arm[pair.reference]), margin, level=1 - alpha)
                out[pair.group] = c.of_pair(pair)
    return out


# ------------------------------------------------------------------ per step (bench)
def _bench_xla_words(bench: BenchRecord) -> dict[str, str]:
    """Per context: the fastest XLA mode's per-step ratio vs ``off`` at its own precision."""
    from ptycho.study.bench import fastest

    out = {}
    for ctx in bench.contexts:
        best = fastest(bench, SUBJECT, ctx)
        if best is None:
            continue
        arm, r = best
        n = bench.steps(SUBJECT, ctx)
        reliable = n >= MIN_STEPS_FOR_INTERVAL and r.bounded
        how = effect_words(r) if reliable else "too few steps for an interval"
        foreign = bench.load(ctx)
        dirty = (
            f"; CONTAMINATED: other processes kept {foreign.foreign_cores:.2f} of {foreign.of_cores} cores busy"
            if foreign and foreign.contaminated
            else ""
        )
        ratio = ratio_words(r) if reliable else f"{r.ratio:.2f}x"
        entry = bench.entry(SUBJECT, arm)  # both sides named with their (one) precision
        out[ctx] = (
            f"{CONTEXT_WORDS.get(ctx, ctx)}: {entry.mode} at {short(entry.precision)} {ratio} "
            f"{REFERENCE} at {short(entry.precision)} ({how}, median of {n} steps per arm{dirty})"
        )
    return out


def _bench_verdict(bench: BenchRecord, context: str) -> tuple[float, str | None]:
    """The value of the verdict when no trained XLA pair exists: the fastest XLA mode's
    per-step ratio vs ``off`` at its precision in ``context`` (lower end of its interval),
    and that arm's key."""
    from ptycho.study.bench import fastest

    best = fastest(bench, SUBJECT, context)
    if best is None:
        return float("nan"), None
    r = best[1]
    reliable = bench.steps(SUBJECT, context) >= MIN_STEPS_FOR_INTERVAL and math.isfinite(r.low)
    return (r.low if reliable else r.ratio), best[0]


def precision_finding(bench: BenchRecord, ttq_records: Mapping[str, ttc.Comparison]) -> str:
    """The precision's own effect in one sentence: each reduced precision vs float32 in the
    same mode, per step (benchmark, both contexts) and in time to quality where both were
    trained; empty when no reduced precision was measured. Not XLA's effect."""
    parts = []
    for r in bench.ratios.get(SUBJECT, {}).values():
        vs = r.vs_float32
        if r.mode != REFERENCE or not vs:
            continue
        steps = ", ".join(
            f"{ratio_words(vs[k])} {CONTEXT_WORDS.get(k.removeprefix('train_step_'), k)}"
            for k in ("train_step_alone", "train_step_shared")
            if k in vs
        )
        parts.append(f"{short(r.precision)} vs {short(REFERENCE_PRECISION)} with {REFERENCE}, per step: {steps}")
    for c in ttq_records.values():
        if c.axis == "precision" and c.model == SUBJECT and c.measured:
            parts.append(f"in time to quality, {c.sentence()}")
    if not parts:
        return ""
    return "Precision: its own effect, not XLA's (each precision vs float32 in the same mode): " + "; ".join(parts)


def recommendation(bench: BenchRecord, context: str) -> str:
    """The fastest configuration per step on this machine, both axes at once, labelled as a
    recommendation (it is not XLA's effect); empty without a benchmark. A configuration is
    recommended over ``off`` at float32 only where the benchmark shows it faster (its
    interval above 1); otherwise the reference itself is, and the best other one is named
    with its interval."""
    from ptycho.study.bench import arm_words
    from ptycho.study.bench.machine import cpu_words, flags_words
    from ptycho.study.bench.result import fastest_overall

    best = fastest_overall(bench, SUBJECT, context)
    if best is None:
        return ""
    arm, r = best
    entry = bench.entry(SUBJECT, arm)
    reduced = entry.precision != REFERENCE_PRECISION
    xla = entry.mode != REFERENCE
    whose = {(True, True): "XLA and precision together", (True, False): "the precision's alone"}.get(
        (reduced, xla), "XLA's alone"
    )
    head = f"Recommendation for this machine kind ({cpu_words(bench.machine)}{flags_words(bench.machine)}): "
    where = CONTEXT_WORDS.get(context, context)
    reference = f"{REFERENCE} at {short(REFERENCE_PRECISION)}"
    if effect_words(r) != ttc.FASTER:  # not shown faster than the reference: recommend the reference
        return (
            f"{head}{reference}, the reference; no other PINN configuration is shown faster per step {where} "
            f"(the fastest, {arm_words(bench, SUBJECT, arm)}, {ratio_words(r)} {reference}: {effect_words(r)})"
        )
    return (
        f"{head}the fastest PINN configuration per step {where} is {arm_words(bench, SUBJECT, arm)}, "
        f"{ratio_words(r)} {reference} ({whose})"
    )


def speedup(
    bench: BenchRecord | Mapping[str, Any],
    threshold: float,
    train_timings: Mapping[str, Any] | None = None,
    context: str = "alone",
    metas: Sequence[TrainingRecord | Mapping] = (),
    margin: float = Inputs.margin,
    alpha: float = ALPHA,
) -> ItemResult:
    """XLA's own effect on the PINN: time to quality of every trained XLA mode vs ``off`` at
    the same precision (``metas``: the trainings' ``model.json``; ``margin``: the
    convergence margin that widens the target). Each comparison says whether it passes
    (:meth:`~ptycho.study.ttq_comparison.Comparison.passes`): PASS when one XLA mode
    reaches the quality sooner with confidence (the value: its interval's lower end),
    FAIL when every one is shown short of the threshold (below it, or no measurable
    effect), INCONCLUSIVE otherwise: not resolved, two seeds of one arm never reaching the
    target, or no seed of it doing so where its ratio (then an upper bound) would pass.
    One PASS among several modes and precisions is not corrected for their number: read
    each mode's own answer in the summary. Without
    a trained XLA pair, the benchmark's per-step ratio vs ``off`` at the same precision in
    ``context`` is judged instead, and the summary says so. The benchmark's per-step
    ratios (alone and in the pipeline's schedule), the precision's own effect and the
    fastest configuration overall are evidence, never XLA's value.
    """
    from ptycho.study.bench.result import cross_check, cross_check_words

    bench = BenchRecord.of(bench)
    train_timings = dict(train_timings or {})
    records = time_to_quality(metas, margin, alpha)
    xla = {k: c for k, c in records.items() if c.is_xla(SUBJECT)}
    per_step = _bench_xla_words(bench)
    status = None
    if xla:
        # PASS when one XLA mode is shown fast enough, FAIL when every one is shown not to
        # be, else INCONCLUSIVE (not resolved: no failure of XLA, a measurement too coarse)
        said = {k: c.passes(threshold) for k, c in xla.items() if c.measured}
        passing = [k for k, ok in said.items() if ok]
        open_ = [k for k, ok in said.items() if ok is None]
        if passing:
            best_key, status = max(passing, key=lambda k: xla[k].judged_value), PASS
        elif open_:
            best_key, status = max(open_, key=lambda k: xla[k].ratio), INCONCLUSIVE
        else:  # all shown short of the threshold (or none measured: no evidence is no pass)
            best_key, status = (max(said, key=lambda k: xla[k].ratio), FAIL) if said else (next(iter(xla)), None)
        value = xla[best_key].judged_value
        head = "XLA's own effect on the PINN's time to quality (each mode vs off at the same precision, steps timed "
        head += "in the pipeline's schedule): " + "; ".join(c.sentence() for c in xla.values())
        judged = Judged(BY_TIME_TO_QUALITY, comparison=best_key)
    else:
        value, best_arm = _bench_verdict(bench, context)
        head = (
            "No trained XLA pair to time to quality; XLA's own per-step effect "
            f"(the fastest mode vs off at the same precision, {CONTEXT_WORDS.get(context, context)}): "
            + (per_step.get(context, "not measured"))
        )
        judged = Judged(BY_STEP, context=context, arm=best_arm or "")
    if not xla and not per_step:
        head = "no PINN timings of off and an XLA mode at the same precision: the speedup was not measured"
    from ptycho.study.bench import batch_words

    checked = cross_check(bench, metas)
    summary = head
    if xla and per_step:
        summary += "; per step (benchmark, fastest XLA mode vs off at its precision): " + "; ".join(per_step.values())
    return verdict(
        ITEM.name,
        value,
        threshold,
        ">=",
        summary,
        SpeedEvidence(
            judged=judged,
            time_to_quality=records,
            context=context,
            per_step=per_step,
            precision=precision_finding(bench, records),
            recommendation=recommendation(bench, context),
            batch=batch_words(bench),
            cross_check=checked,
            cross_check_words=cross_check_words(checked, bench.contaminated("shared")),
            bench=bench.to_json(),
            intervals=speedup_intervals(bench),
            machine=bench.machine,
            training_jobs=train_timings,
        ).to_json(),
        status,
    )


def collect(inputs: Inputs, threshold: float) -> ItemResult:
    results = inputs.results
    if not results.bench:
        raise PtychoError("check speedup: needs --bench (the JSON written by 'ptycho bench --out')")
    return speedup(
        results.benchmark,
        threshold,
        results.timings,
        context=inputs.context,
        metas=list(results.trainings.values()),
        margin=inputs.margin,
        alpha=inputs.alpha,
    )


ITEM = Item(
    name="speedup",
    collect=collect,
    threshold="speedup_min",
)
