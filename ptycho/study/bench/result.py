"""Reading a benchmark's result: the arms' keys, the ratios (each comparison holding the
other axis fixed: a mode against ``off`` at the same precision, a precision against
float32 in the same mode), the fastest arm, and the arms as MLflow runs. Its
cross-check against the trainings' own step times. Pure functions of the record
:func:`ptycho.study.bench.coordinator.run` returns."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.nets.xla import REFERENCE
from ptycho.study.arms import Arm
from ptycho.study.stats import bootstrap_ratio, break_even_steps
from ptycho.tracking.record import NestedRun


def precision_of(arm: Mapping) -> str:
    """An arm record's precision; records from before the precision axis are float32."""
    return arm.get("precision", REFERENCE_PRECISION)


def arm_key(arm: Mapping) -> str:
    """An arm's key among its model's arms (in ``ratios``): the mode at float32, as before
    the precision axis (``jit``), ``<mode>-<short>`` otherwise (``jit-bf16``)."""
    return Arm(arm["model"], arm["mode"], 0, precision_of(arm)).key("mode", "precision")


def _batch_ratios(ref: Mapping, a: Mapping) -> dict[str, dict[str, dict]]:
    """Per sweep kind and batch size, ``ref``'s time over ``a``'s with its interval."""
    out: dict[str, dict[str, dict]] = {}
    for kind, sizes in a.get("batches", {}).items():
        for b, rec in sizes.items():
            other = ref.get("batches", {}).get(kind, {}).get(b)
            if other:
                out.setdefault(kind, {})[b] = bootstrap_ratio(other["samples_s"], rec["samples_s"])
    return out


def _ready(arm: dict) -> float:
    """Seconds an arm spends getting ready beyond steady steps (compile included)."""
    return arm.get("startup_overhead_s", arm["compile_s"])


def _step_ratios(ref: Mapping, a: Mapping) -> dict[str, dict]:
    """Train-step speed of ``a`` relative to ``ref`` (above 1 = faster), alone and, where
    both were timed there, shared."""
    out = {"train_step_alone": bootstrap_ratio(ref["step_samples_s"], a["step_samples_s"])}
    if "shared" in a and "shared" in ref:
        out["train_step_shared"] = bootstrap_ratio(ref["shared"]["step_samples_s"], a["shared"]["step_samples_s"])
    return out


def ratios(arms: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """Per model and arm (:func:`arm_key`), three comparisons, each holding the other axis fixed:

    * ``xla`` (every mode but ``off``): speed relative to ``off`` at the SAME precision,
      XLA's own effect, the one the speedup item judges; ``xla_batches`` the same per
      batch size of the sweep;
    * ``vs_float32`` (every reduced precision): speed relative to the same mode at
      float32, the precision's own effect, a finding of its own;
    * the top-level measurements: relative to ``off`` at float32, both axes at once: only
      for naming the fastest configuration (:func:`fastest_overall`), never XLA's effect.

    Above 1 = faster. Break-even steps and the extra compile time are against ``off`` at
    the same precision (what choosing the mode costs)."""
    out: dict[str, dict[str, dict]] = {}
    for model in dict.fromkeys(a["model"] for a in arms):
        by_key = {arm_key(a): a for a in arms if a["model"] == model}
        off = by_key.get(REFERENCE)
        if off is None:
            continue
        for key, a in by_key.items():
            r: dict[str, Any] = {"mode": a["mode"], "precision": precision_of(a)}
            if key != REFERENCE:
                r.update(_step_ratios(off, a))
                if a.get("infer_batch_samples_s") and off.get("infer_batch_samples_s"):
                    r["inference"] = bootstrap_ratio(off["infer_batch_samples_s"], a["infer_batch_samples_s"])
            same = by_key.get(arm_key(dict(a, mode=REFERENCE)))
            if a["mode"] != REFERENCE and same is not None:
                ready, ready_off = _ready(a), _ready(same)
                r["xla"] = _step_ratios(same, a)
                if "batches" in a and "batches" in same:
                    r["xla_batches"] = _batch_ratios(same, a)
                if a.get("infer_batch_samples_s") and same.get("infer_batch_samples_s"):
                    r["xla"]["inference"] = bootstrap_ratio(same["infer_batch_samples_s"], a["infer_batch_samples_s"])
                r["compile_extra_s"] = ready - ready_off
                r["break_even_steps"] = break_even_steps(
                    ready, ready_off, a["step_s"]["median"], same["step_s"]["median"]
                )
                if "shared" in a and "shared" in same:
                    r["break_even_steps_shared"] = break_even_steps(
                        ready, ready_off, a["shared"]["step_s"]["median"], same["shared"]["step_s"]["median"]
                    )
            fp32 = by_key.get(arm_key(dict(a, precision=REFERENCE_PRECISION)))
            if precision_of(a) != REFERENCE_PRECISION and fp32 is not None:
                r["vs_float32"] = _step_ratios(fp32, a)
            r["padded_vs_naive"] = a["infer_patterns_per_s"] / a["naive_patterns_per_s"]
            out.setdefault(model, {})[key] = r
    return out


def xla_ratio(entry: Mapping[str, Any], measurement: str) -> dict | None:
    """An arm's speed relative to ``off`` at its own precision (XLA's own effect) for
    ``measurement`` (``train_step_alone``...); ``None`` for ``off`` or when not measured.
    Records from before the split have it at the top level for float32 arms."""
    if "xla" in entry:
        return entry["xla"].get(measurement)
    if entry.get("mode", REFERENCE) != REFERENCE and entry.get("precision", REFERENCE_PRECISION) == REFERENCE_PRECISION:
        return entry.get(measurement)
    return None


def fastest(result: Mapping, model: str = SUBJECT, context: str = "alone") -> tuple[str, dict] | None:
    """The XLA arm (:func:`arm_key`) with the highest train-step ratio vs ``off`` AT ITS OWN
    PRECISION in ``context`` (:func:`xla_ratio`), with its interval; ``None`` if no XLA mode
    was compared with ``off``. A precision's gain is never counted here."""
    per = result.get("ratios", {}).get(model, {})
    return _best({k: xla_ratio(r, f"train_step_{context}") for k, r in per.items()})


def fastest_overall(result: Mapping, model: str = SUBJECT, context: str = "alone") -> tuple[str, dict] | None:
    """The configuration (mode and precision) with the highest train-step ratio vs ``off``
    at float32: a recommendation of what to run on this machine, both axes at once; it
    says nothing about XLA's own effect."""
    per = result.get("ratios", {}).get(model, {})
    return _best({k: r.get(f"train_step_{context}") for k, r in per.items()})


def _best(candidates: Mapping[str, dict | None]) -> tuple[str, dict] | None:
    """The key with the highest ratio among the measured candidates, and its ratio."""
    measured = {k: r for k, r in candidates.items() if r is not None}
    if not measured:
        return None
    best = max(measured, key=lambda k: measured[k]["ratio"])
    return best, measured[best]


def arm_runs(result: Mapping[str, Any]) -> list[NestedRun]:
    """One run per benchmarked arm, all with the same metric keys and the arm in params
    and tags: MLflow's compare view lines the arms up."""
    runs = []
    for a in result["arms"]:
        model, mode, precision = a["model"], a["mode"], precision_of(a)
        metrics = {
            "compile_s": a["compile_s"],
            "step_median_s": a["step_s"]["median"],
            "infer_patterns_per_s": a["infer_patterns_per_s"],
            "peak_rss_mb": a["peak_rss_mb"],
            **{f"{k}_s": c["median"] for k, c in a["components"].items()},
        }
        if "shared" in a:
            metrics["shared_step_median_s"] = a["shared"]["step_s"]["median"]
        if "roofline" in a:
            metrics["flops_per_step"] = a["flops"]["per_step"]
            metrics["gflops"] = a["roofline"]["gflops"]
            if math.isfinite(a["roofline"]["of_peak"]):
                metrics["of_peak"] = a["roofline"]["of_peak"]
        r = result["ratios"].get(model, {}).get(arm_key(a), {})
        if "padded_vs_naive" in r:
            metrics["padded_vs_naive"] = r["padded_vs_naive"]
        for key in ("train_step_alone", "train_step_shared", "inference"):
            if key in r:
                metrics[f"{key}_speedup"] = r[key]["ratio"]
        for key, same in r.get("xla", {}).items():
            metrics[f"{key}_speedup_xla"] = same["ratio"]
        for kind, sizes in r.get("xla_batches", {}).items():
            for b, same in sizes.items():
                metrics[f"{kind}_batch_{b}_speedup_xla"] = same["ratio"]
        for key, same in r.get("vs_float32", {}).items():
            metrics[f"{key}_speedup_vs_float32"] = same["ratio"]
        for key in ("break_even_steps", "compile_extra_s"):
            if key in r and math.isfinite(r[key]):
                metrics[key] = r[key]
        arm = Arm(model, mode, 0, precision)
        runs.append(
            NestedRun(
                f"bench-{arm.key('model', 'mode', 'precision')}",
                {
                    "model": model,
                    "xla": mode,
                    "precision": precision,
                    "mlflow.note.content": f"The benchmark's timing of {arm.label(with_seed=False)}: step and "
                    "compile time alone and in the pipeline's schedule, each XLA mode's ratio to off at the same "
                    "precision (*_speedup_xla).",
                },
                {"arm.model": model, "arm.xla": mode, "arm.precision": precision},
                metrics,
            )
        )
    return runs


def foreign_load(bench: Mapping[str, Any], context: str) -> Mapping[str, Any]:
    """What other processes took while the bench timed ``context`` (``{}`` unrecorded)."""
    return ((bench.get("contexts") or {}).get(context) or {}).get("foreign_load") or {}


#: How far the benchmark's pipeline-schedule step median may lie from the trainings' own
#: (their median over seeds), as a ratio, and still agree: the step medians of one arm's
#: seeds differ by up to 14 % on the study's shared 2-core machines (553-631 ms in a
#: recorded run); 25 % leaves room for that, while a 2x gap is never called agreement.
CROSS_CHECK_TOLERANCE = 1.25


def cross_check(bench: Mapping[str, Any], metas: Sequence[Mapping]) -> dict[str, dict]:
    """The benchmark's pipeline-schedule step medians against the training jobs' own (same
    mode and precision, every seed): ``ratio`` is the bench's median over the trainings'
    median, ``agree`` when it lies within :data:`CROSS_CHECK_TOLERANCE` either way. The
    tolerance is fixed, not the bench's own spread: a contaminated bench (a wide IQR) must
    not agree with anything."""
    import statistics

    out = {}
    for a in bench.get("arms", []):
        shared = a.get("shared", {}).get("step_s")
        if a["model"] != SUBJECT or not shared:
            continue
        arm = Arm(a["model"], a["mode"], 0, a.get("precision", REFERENCE_PRECISION))
        medians = [
            m["timing"]["step_median_s"]
            for m in metas
            if Arm.of_meta(m)._replace(seed=0) == arm and (m.get("timing") or {}).get("step_median_s")
        ]
        if not medians:
            continue
        ratio = shared["median"] / statistics.median(medians)
        out[arm.key("mode", "precision")] = {
            "bench_median_s": shared["median"],
            "bench_iqr_s": shared["iqr"],
            "training_medians_s": medians,
            "ratio": ratio,
            "tolerance": CROSS_CHECK_TOLERANCE,
            "agree": 1 / CROSS_CHECK_TOLERANCE <= ratio <= CROSS_CHECK_TOLERANCE,
        }
    return out


def cross_check_words(checked: Mapping[str, Mapping], contaminated: bool = False) -> str:
    """:func:`cross_check` in one sentence: agree, or DISAGREE and why that matters."""
    if not checked:
        return ""
    bad = [k for k, c in checked.items() if not c["agree"]]
    each = ", ".join(
        f"{k} {1e3 * c['bench_median_s']:.0f} ms vs {'/'.join(f'{1e3 * m:.0f}' for m in c['training_medians_s'])} ms"
        f" ({c['ratio']:.2f}x)"
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
