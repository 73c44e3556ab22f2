"""Reading a benchmark's result: the arms' keys, the ratios (each comparison holding the
other axis fixed: a mode against ``off`` at the same precision, a precision against
float32 in the same mode), the fastest arm, and the arms as MLflow runs. Its
cross-check against the trainings' own step times. Pure functions of the record
:func:`ptycho.study.bench.coordinator.run` returns, read through
:class:`~ptycho.study.bench.record.BenchRecord` (a record's JSON is accepted too)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.nets.xla import REFERENCE
from ptycho.study.arms import Arm
from ptycho.study.bench.record import ArmRatios, BenchArm, BenchRecord, Interval
from ptycho.study.json_record import JsonRecord
from ptycho.study.stats import bootstrap_ratio, break_even_steps
from ptycho.study.training_record import TrainingRecord
from ptycho.tracking.record import NestedRun


def _batch_ratios(ref: BenchArm, a: BenchArm) -> dict[str, dict[str, dict]]:
    """Per sweep kind and batch size, ``ref``'s time over ``a``'s with its interval."""
    out: dict[str, dict[str, dict]] = {}
    for kind, sizes in a.batches.items():
        for b, rec in sizes.items():
            other = ref.batches.get(kind, {}).get(b)
            if other:
                out.setdefault(kind, {})[str(b)] = bootstrap_ratio(other.samples, rec.samples)
    return out


def _step_ratios(ref: BenchArm, a: BenchArm) -> dict[str, dict]:
    """Train-step speed of ``a`` relative to ``ref`` (above 1 = faster), alone and, where
    both were timed there, shared."""
    out = {"train_step_alone": bootstrap_ratio(ref.step_samples, a.step_samples)}
    if a.shared is not None and ref.shared is not None:
        out["train_step_shared"] = bootstrap_ratio(ref.shared_samples, a.shared_samples)
    return out


def ratios(arms: Sequence[Mapping | BenchArm]) -> dict[str, dict[str, dict]]:
    """Per model and arm (:attr:`~ptycho.study.bench.record.BenchArm.key`), three comparisons, each holding the other axis fixed:

    * ``xla`` (every mode but ``off``): speed relative to ``off`` at the SAME precision,
      XLA's own effect, the one the speedup item judges; ``xla_batches`` the same per
      batch size of the sweep;
    * ``vs_float32`` (every reduced precision): speed relative to the same mode at
      float32, the precision's own effect, a finding of its own;
    * the top-level measurements: relative to ``off`` at float32, both axes at once: only
      for naming the fastest configuration (:func:`fastest_overall`), never XLA's effect.

    Above 1 = faster. Break-even steps and the extra compile time are against ``off`` at
    the same precision (what choosing the mode costs). The result is the record's JSON
    (:class:`~ptycho.study.bench.record.ArmRatios` reads it)."""
    typed = [a if isinstance(a, BenchArm) else BenchArm.from_json(a) for a in arms]
    out: dict[str, dict[str, dict]] = {}
    for model in dict.fromkeys(a.model for a in typed):
        by_arm = {a.arm: a for a in typed if a.model == model}
        off = by_arm.get(Arm(model, REFERENCE, 0, REFERENCE_PRECISION))
        if off is None:
            continue
        for a in by_arm.values():
            r: dict[str, Any] = {"mode": a.mode, "precision": a.precision}
            if a is not off:
                r.update(_step_ratios(off, a))
                if a.infer_batch_samples and off.infer_batch_samples:
                    r["inference"] = bootstrap_ratio(off.infer_batch_samples, a.infer_batch_samples)
            same = by_arm.get(a.arm._replace(mode=REFERENCE))
            if a.mode != REFERENCE and same is not None:
                r["xla"] = _step_ratios(same, a)
                if a.batches and same.batches:
                    r["xla_batches"] = _batch_ratios(same, a)
                if a.infer_batch_samples and same.infer_batch_samples:
                    r["xla"]["inference"] = bootstrap_ratio(same.infer_batch_samples, a.infer_batch_samples)
                r["compile_extra_s"] = a.startup_overhead_s - same.startup_overhead_s
                r["break_even_steps"] = break_even_steps(
                    a.startup_overhead_s, same.startup_overhead_s, a.step.median, same.step.median
                )
                if a.shared is not None and same.shared is not None:
                    r["break_even_steps_shared"] = break_even_steps(
                        a.startup_overhead_s, same.startup_overhead_s, a.shared.median, same.shared.median
                    )
            fp32 = by_arm.get(a.arm._replace(precision=REFERENCE_PRECISION))
            if a.precision != REFERENCE_PRECISION and fp32 is not None:
                r["vs_float32"] = _step_ratios(fp32, a)
            r["padded_vs_naive"] = a.infer_patterns_per_s / a.naive_patterns_per_s
            out.setdefault(model, {})[a.key] = r
    return out


def xla_ratio(entry: ArmRatios | Mapping[str, Any], measurement: str) -> Interval | None:
    """An arm's speed relative to ``off`` at its own precision (XLA's own effect) for
    ``measurement`` (``train_step_alone``...); ``None`` for ``off`` or when not measured."""
    if not isinstance(entry, ArmRatios):
        entry = ArmRatios.from_json(entry, entry.get("mode", REFERENCE))
    return entry.xla.get(measurement)


def fastest(bench: BenchRecord | Mapping, model: str = SUBJECT, context: str = "alone") -> tuple[str, Interval] | None:
    """The XLA arm (its key) with the highest train-step ratio vs ``off`` AT ITS OWN
    PRECISION in ``context`` (:func:`xla_ratio`), with its interval; ``None`` if no XLA mode
    was compared with ``off``. A precision's gain is never counted here."""
    per = BenchRecord.of(bench).ratios.get(model, {})
    return _best({k: r.xla.get(f"train_step_{context}") for k, r in per.items()})


def fastest_overall(
    bench: BenchRecord | Mapping, model: str = SUBJECT, context: str = "alone"
) -> tuple[str, Interval] | None:
    """The configuration (mode and precision) with the highest train-step ratio vs ``off``
    at float32: a recommendation of what to run on this machine, both axes at once; it
    says nothing about XLA's own effect."""
    per = BenchRecord.of(bench).ratios.get(model, {})
    return _best({k: r.overall.get(f"train_step_{context}") for k, r in per.items()})


def _best(candidates: Mapping[str, Interval | None]) -> tuple[str, Interval] | None:
    """The key with the highest ratio among the measured candidates, and its ratio."""
    measured = {k: r for k, r in candidates.items() if r is not None}
    if not measured:
        return None
    best = max(measured, key=lambda k: measured[k].ratio)
    return best, measured[best]


def arm_runs(bench: BenchRecord | Mapping[str, Any]) -> list[NestedRun]:
    """One run per benchmarked arm, all with the same metric keys and the arm in params
    and tags: MLflow's compare view lines the arms up."""
    record = BenchRecord.of(bench)
    runs = []
    for a in record.arms:
        metrics = {
            "compile_s": a.compile_s,
            "step_median_s": a.step.median,
            "infer_patterns_per_s": a.infer_patterns_per_s,
            "peak_rss_mb": a.peak_rss_mb,
            **{f"{k}_s": median for k, median in a.components.items()},
        }
        if a.shared is not None:
            metrics["shared_step_median_s"] = a.shared.median
        if a.roofline is not None:
            metrics["flops_per_step"] = a.flops_per_step
            metrics["gflops"] = a.roofline.gflops
            if math.isfinite(a.roofline.of_peak):
                metrics["of_peak"] = a.roofline.of_peak
        r = record.entry(a.model, a.key)
        if r is not None:
            if r.padded_vs_naive is not None:
                metrics["padded_vs_naive"] = r.padded_vs_naive
            for key, overall in r.overall.items():
                metrics[f"{key}_speedup"] = overall.ratio
            for key, same in r.xla.items():
                metrics[f"{key}_speedup_xla"] = same.ratio
            for kind, sizes in r.xla_batches.items():
                for b, same in sizes.items():
                    metrics[f"{kind}_batch_{b}_speedup_xla"] = same.ratio
            for key, same in r.vs_float32.items():
                metrics[f"{key}_speedup_vs_float32"] = same.ratio
            for key, value in (("break_even_steps", r.break_even_steps), ("compile_extra_s", r.compile_extra_s)):
                if value is not None and math.isfinite(value):
                    metrics[key] = value
        runs.append(
            NestedRun(
                f"bench-{a.arm.key('model', 'mode', 'precision')}",
                {
                    "model": a.model,
                    "xla": a.mode,
                    "precision": a.precision,
                    "mlflow.note.content": f"The benchmark's timing of {a.arm.label(with_seed=False)}: step and "
                    "compile time alone and in the pipeline's schedule, each XLA mode's ratio to off at the same "
                    "precision (*_speedup_xla).",
                },
                {"arm.model": a.model, "arm.xla": a.mode, "arm.precision": a.precision},
                metrics,
            )
        )
    return runs


#: How far the benchmark's pipeline-schedule step median may lie from the trainings' own
#: (their median over seeds), as a ratio, and still agree: the step medians of one arm's
#: seeds differ by up to 14 % on the study's shared 2-core machines (553-631 ms in a
#: recorded run); 25 % leaves room for that, while a 2x gap is never called agreement.
CROSS_CHECK_TOLERANCE = 1.25


@dataclass(frozen=True)
class CrossCheck(JsonRecord):
    """The benchmark's step in the pipeline's schedule against the trainings' own, one arm
    (mode, precision): :func:`cross_check`."""

    bench_median_s: float = math.nan
    bench_iqr_s: float = math.nan
    training_medians_s: tuple[float, ...] = ()
    ratio: float = math.nan  #: the bench's median over the trainings' median
    tolerance: float = math.nan  #: agreement within this factor either way
    agree: bool = False


def cross_check(
    bench: BenchRecord | Mapping[str, Any], metas: Sequence[TrainingRecord | Mapping]
) -> dict[str, CrossCheck]:
    """The benchmark's pipeline-schedule step medians against the training jobs' own (same
    mode and precision, every seed; ``metas``: the trainings' records or ``model.json``):
    ``ratio`` is the bench's median over the trainings'
    median, ``agree`` when it lies within :data:`CROSS_CHECK_TOLERANCE` either way. The
    tolerance is fixed, not the bench's own spread: a contaminated bench (a wide IQR) must
    not agree with anything."""
    import statistics

    records = [TrainingRecord.of(m) for m in metas]
    out = {}
    for a in BenchRecord.of(bench).arms_of(SUBJECT):
        if a.shared is None:
            continue
        medians = [r.step_median_s for r in records if r.arm._replace(seed=0) == a.arm and r.step_median_s]
        if not medians:
            continue
        ratio = a.shared.median / statistics.median(medians)
        out[a.arm.key("mode", "precision")] = CrossCheck(
            bench_median_s=a.shared.median,
            bench_iqr_s=a.shared.iqr,
            training_medians_s=tuple(medians),
            ratio=ratio,
            tolerance=CROSS_CHECK_TOLERANCE,
            agree=1 / CROSS_CHECK_TOLERANCE <= ratio <= CROSS_CHECK_TOLERANCE,
        )
    return out


def cross_check_words(checked: Mapping[str, CrossCheck], contaminated: bool = False) -> str:
    """:func:`cross_check` in one sentence: agree, or DISAGREE and why that matters."""
    if not checked:
        return ""
    bad = [k for k, c in checked.items() if not c.agree]
    each = ", ".join(
        f"{k} {1e3 * c.bench_median_s:.0f} ms vs {'/'.join(f'{1e3 * m:.0f}' for m in c.training_medians_s)} ms"
        f" ({c.ratio:.2f}x)"
        for k, c in checked.items()
    )
    within = f"within {100 * (CROSS_CHECK_TOLERANCE - 1):.0f} %"
    if bad:
        why = " (the bench's shared context was CONTAMINATED by other processes)" if contaminated else ""
        return (
            f"The benchmark's pipeline-schedule steps DISAGREE with the trainings' own for {', '.join(bad)}, not "
            f"{within}{why} (bench median vs trainings' medians: {each}): the bench's per-step figures in that "
            "context are not what the trainings met, so they are evidence only; the speed item reads the "
            "trainings' own steps"
        )
    return f"The benchmark's pipeline-schedule steps agree with the trainings' own {within} ({each})"
