"""A bench record as tables and words: built once by :func:`tables` and
:func:`roofline_words`, rendered as text by :func:`format_table` (the ``ptycho bench``
command) and as Markdown or HTML by the report (:mod:`ptycho.study.tables`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION, SHORT
from ptycho.nets.xla import REFERENCE
from ptycho.study.bench.machine import flags_words
from ptycho.study.bench.result import arm_key, fastest, precision_of
from ptycho.study.bench.roofline import compute_dtype
from ptycho.study.presentation import MODEL_WORDS
from ptycho.study.stats import quartiles
from ptycho.study.tables import Table, fmt, to_text

#: A dtype the hardware accelerates has a peak at least this many times float32's: a
#: hardware path about doubles the rate or more (twice the elements per vector, a
#: dot-product instruction such as AVX512_BF16's, AMX tiles; bfloat16 measured 1.8-2.7x
#: on Zen 4); one library's kernel beating another's is less (TensorFlow's Eigen float16
#: matmul on AVX-512 without avx512_fp16: 0.9-1.3x).
ACCELERATED = 1.5


def _break_even(ratios: Mapping, key: str) -> str:
    """A break-even step count; infinite (stored as null in JSON) is "never"."""
    if key not in ratios:
        return "n/a"
    value = ratios[key]
    return "never" if value is None or value == float("inf") else f"{value:.0f}"


def _ms(quart: Mapping | None) -> str:
    return fmt(1e3 * quart["median"]) if quart else "n/a"


def _interval(r: Mapping | None) -> str:
    """A ratio with its interval, e.g. ``1.25 (1.2 - 1.3)``."""
    return f"{fmt(r['ratio'])} ({fmt(r['low'])} - {fmt(r['high'])})" if r else "n/a"


def _conditions(contexts: Mapping) -> list[list[str]]:
    rows = []
    for name, c in contexts.items():
        f = c.get("foreign_load") or {}
        rows.append(
            [
                name,
                str(c.get("jobs")),
                str(c.get("threads")),
                fmt(f.get("foreign_cores")),
                str(f.get("of_cores", "n/a")),
                "n/a" if not f else ("CONTAMINATED" if f.get("contaminated") else "clean"),
                f"{fmt(f.get('load_average_before'))} / {fmt(f.get('load_average_after'))}",
            ]
        )
    return rows


def _short(precision: str) -> str:
    return SHORT.get(precision, precision)


def _arm(a: Mapping) -> list[str]:
    """An arm's first cells: model, mode, precision (short word)."""
    return [a["model"], a["mode"], _short(precision_of(a))]


def _timing(a: Mapping) -> list[str]:
    shared = a.get("shared", {}).get("step_s")
    return [
        *_arm(a),
        fmt(a["compile_s"]),
        _ms(a["step_s"]),
        fmt(1e3 * a["step_s"]["iqr"]),
        _ms(shared),
        fmt(1e3 * (shared or {}).get("iqr", float("nan"))),
        *(
            fmt(1e3 * a.get("components", {}).get(k, {}).get("median", float("nan")))
            for k in ("network", "physics", "optimizer")
        ),
        fmt(a.get("peak_rss_mb")),
        fmt(a.get("peak_above_baseline_mb")),
        fmt(a.get("xla_clusters")) if a.get("xla_clusters") is not None else "-",
    ]


def _inference(a: Mapping) -> list[str]:
    return [
        *_arm(a),
        fmt(a["infer_compile_s"]),
        fmt(a["infer_patterns_per_s"]),
        fmt(a["naive_patterns_per_s"]),
        fmt(a["infer_patterns_per_s"] / a["naive_patterns_per_s"]),
    ]


def _roofline(a: Mapping) -> list[str]:
    roof = a.get("roofline", {})
    return [
        *_arm(a),
        fmt(a["flops"]["per_step"] / 1e9) if "flops" in a else "n/a",
        _ms(a["step_s"]),
        fmt(roof.get("gflops")),
        fmt(roof.get("peak_gflops")),
        fmt(100 * roof.get("of_peak", math.nan)),
    ]


def _peak(peak: Mapping) -> list[list[str]]:
    gflops = peak.get("gflops", {})
    ref = gflops.get(compute_dtype(REFERENCE_PRECISION), math.nan)
    return [[dtype, fmt(value), fmt(value / ref)] for dtype, value in gflops.items()]


def _contaminated(peak: Mapping) -> str:
    """``"; CONTAMINATED: ..."`` when other processes took more than the limit while the
    peak was measured (a lower peak, a higher fraction of it); empty otherwise."""
    f = peak.get("foreign_load") or {}
    if not f.get("contaminated"):
        return ""
    return (
        f"; CONTAMINATED: other processes kept {fmt(f['foreign_cores'])} of {f['of_cores']} cores busy "
        "while the peak was measured"
    )


def _ratios(ratios: Mapping) -> list[list[str]]:
    """One row per arm but the reference: XLA's own effect (vs ``off`` at the same
    precision), the precision's own (vs float32 in the same mode), then both together (vs
    ``off`` at float32, the configuration's). Arms from before the precision axis are
    keyed by their mode and are float32."""
    from ptycho.study.bench.result import xla_ratio

    rows = []
    for model, per in ratios.items():
        for key, r in per.items():
            if key == REFERENCE:
                continue
            vs32 = r.get("vs_float32", {})
            rows.append(
                [
                    model,
                    r.get("mode", key),
                    _short(r.get("precision", REFERENCE_PRECISION)),
                    _interval(xla_ratio(r, "train_step_alone")),
                    _interval(xla_ratio(r, "train_step_shared")),
                    _interval(xla_ratio(r, "inference")),
                    _interval(vs32.get("train_step_alone")),
                    _interval(vs32.get("train_step_shared")),
                    _interval(r.get("train_step_alone")),
                    fmt(r.get("compile_extra_s")),
                    _break_even(r, "break_even_steps"),
                    _break_even(r, "break_even_steps_shared"),
                ]
            )
    return rows


def tables(bench: Mapping) -> list[Table]:
    """The tables of a bench record (:func:`~ptycho.study.bench.run`'s result, as written
    to ``bench.json``): conditions, train-step timings, each arm vs the reference, the
    roofline and the machine's peak, and inference. A record without some part gives
    that table no rows."""
    arms = bench.get("arms", [])
    contexts = bench.get("contexts", {})
    how = "; ".join(f"{k}: {c['how']}" for k, c in contexts.items())
    peak = bench.get("peak", {})
    return [
        (
            "Benchmark conditions: other processes' CPU use while each context was timed (/proc/stat)",
            [
                "context",
                "concurrent arms",
                "threads each",
                "foreign cores busy",
                "of cores",
                "verdict",
                "load average before / after",
            ],
            _conditions(contexts),
        ),
        (
            f"Train-step timings per arm ({how})",
            [
                "model",
                "mode",
                "precision",
                "compile s",
                "alone median ms",
                "alone IQR ms",
                "shared median ms",
                "shared IQR ms",
                "network ms",
                "physics head ms",
                "optimiser ms",
                "peak RSS MB",
                "above start MB",
                "XLA clusters (auto)",
            ],
            [_timing(a) for a in arms],
        ),
        (
            f"Each arm's speed, one axis at a time (the reference's time / the arm's; > 1 means faster; "
            f"95 % bootstrap intervals): XLA = vs {REFERENCE} at the same precision; precision = vs "
            f"{REFERENCE_PRECISION} in the same mode; both = vs {REFERENCE} at {REFERENCE_PRECISION} (the "
            "configuration, not XLA's effect); shared = the pipeline's schedule",
            [
                "model",
                "mode",
                "precision",
                "XLA: step alone",
                "XLA: step shared",
                "XLA: inference",
                "precision: step alone",
                "precision: step shared",
                "both: step alone",
                "extra compile s (vs off, same precision)",
                "break-even steps alone",
                "break-even steps shared",
            ],
            _ratios(bench.get("ratios", {})),
        ),
        (
            "Roofline, alone: FLOPs per train step counted from the layers (Conv2D, Dense; backward = 2x forward) "
            "over the median step, against the machine's peak for the dtype the arm computes in",
            [
                "model",
                "mode",
                "precision",
                "GFLOP per step",
                "alone median ms",
                "GFLOP/s",
                "dtype peak GFLOP/s",
                "% of peak",
            ],
            [_roofline(a) for a in arms],
        ),
        (
            f"Machine peak: {peak.get('how', 'not measured')}{_contaminated(peak)}",
            ["dtype", "GFLOP/s", f"vs {compute_dtype(REFERENCE_PRECISION)}"],
            _peak(peak),
        ),
        (
            "Inference: padded fixed batch vs a per-pattern loop (batch 1)",
            [
                "model",
                "mode",
                "precision",
                "compile s",
                "padded-batch patterns/s",
                "per-pattern patterns/s",
                "padded / per-pattern",
            ],
            [_inference(a) for a in arms],
        ),
    ]


def _batch_points(bench: Mapping, a: Mapping) -> list[tuple[str, int, Mapping, Mapping | None]]:
    """(kind, batch size, the arm's timing, XLA's ratio vs off at its precision) of every
    batch size the arm was timed at: the sweep's and the study's own batch (the main
    measurement), in size order per kind."""
    from ptycho.study.bench.result import xla_ratio

    entry = bench.get("ratios", {}).get(a["model"], {}).get(arm_key(a), {})
    ratios = entry.get("xla_batches", {})
    points = []
    for kind in ("train", "infer"):
        sizes = {int(b): (rec, ratios.get(kind, {}).get(b)) for b, rec in a.get("batches", {}).get(kind, {}).items()}
        if sizes and a.get("batch_size"):
            if kind == "train":
                sizes.setdefault(int(a["batch_size"]), (a["step_s"], xla_ratio(entry, "train_step_alone")))
            elif a.get("infer_batch_samples_s"):
                own = quartiles(a["infer_batch_samples_s"])
                sizes.setdefault(int(a["batch_size"]), (own, xla_ratio(entry, "inference")))
        points += [(kind, b, rec, r) for b, (rec, r) in sorted(sizes.items())]
    return points


def batch_table(bench: Mapping) -> Table:
    """XLA's own effect by batch size, alone: each swept arm's time per call and per
    sample, and each XLA mode vs ``off`` at the same precision and batch size."""
    rows = []
    for a in bench.get("arms", []):
        for kind, b, rec, r in _batch_points(bench, a):
            rows.append(
                [
                    a["model"],
                    a["mode"],
                    _short(precision_of(a)),
                    "training step" if kind == "train" else "inference batch",
                    str(b),
                    _ms(rec),
                    fmt(1e3 * rec["median"] / b),
                    _interval(r) if a["mode"] != REFERENCE else "(reference)",
                ]
            )
    return (
        "XLA's own effect by batch size, alone (each mode vs off at the same precision and batch; the study's "
        "own batch is the main measurement)",
        ["model", "mode", "precision", "what", "batch", "median ms", "ms per sample", "XLA vs off"],
        rows,
    )


def batch_words(bench: Mapping) -> str:
    """Where XLA's own effect grows or vanishes with the batch, in one sentence: per swept
    XLA mode, its ratio vs ``off`` at the same precision at each batch size; and the
    inference batch with the highest throughput (a recommendation for this machine)."""
    parts, best = [], None
    for a in bench.get("arms", []):
        points = _batch_points(bench, a)
        if a["model"] != SUBJECT or not points:
            continue
        for kind, b, rec, _ in points:
            if kind == "infer" and (best is None or rec["median"] / b < best[0]):
                best = (rec["median"] / b, a, b)
        if a["mode"] == REFERENCE:
            continue
        by_kind = {}
        for kind, b, _, r in points:
            if r:
                by_kind.setdefault(kind, []).append(f"{b}: {fmt(r['ratio'])}x")
        if by_kind:
            parts.append(
                f"{a['mode']} at {_short(precision_of(a))}: "
                + "; ".join(
                    f"{'training' if k == 'train' else 'inference'} batch {', '.join(v)}" for k, v in by_kind.items()
                )
            )
    if not parts:
        return ""
    text = "XLA's own per-step effect by batch size (alone, vs off at the same precision and batch): " + " | ".join(
        parts
    )
    if best:
        per_s, a, b = best
        text += (
            f". Highest PINN inference throughput here: {a['mode']} at {_short(precision_of(a))} with batch {b} "
            f"({fmt(1 / per_s)} pattern groups/s); a training batch also changes the optimisation, so no training "
            "batch is recommended on speed alone"
        )
    return text


def arm_words(bench: Mapping, model: str, key: str) -> str:
    """An arm of ``model`` (its :func:`~ptycho.study.bench.result.arm_key`) in words:
    ``"jit"`` at float32, ``"jit at bf16"`` otherwise."""
    r = bench.get("ratios", {}).get(model, {}).get(key, {})
    precision = r.get("precision", REFERENCE_PRECISION)
    mode = r.get("mode", key)
    return mode if precision == REFERENCE_PRECISION else f"{mode} at {_short(precision)}"


def roofline_words(bench: Mapping) -> str:
    """How close the fastest PINN arm alone is to the machine's limit, and which reduced
    precision the hardware accelerates (measured peaks vs float32's, and the CPU's flags);
    empty for a record without a roofline."""
    arms = [a for a in bench.get("arms", []) if "roofline" in a]
    peak = bench.get("peak", {})
    if not arms or not peak:
        return ""
    best = max([a for a in arms if a["model"] == SUBJECT] or arms, key=lambda a: a["roofline"]["gflops"])
    roof = best["roofline"]
    ref_dtype = compute_dtype(REFERENCE_PRECISION)
    gains = {d: v / peak["gflops"][ref_dtype] for d, v in peak["gflops"].items() if d != ref_dtype}
    fast = [d for d, g in gains.items() if g >= ACCELERATED]
    each = ", ".join(f"{d} {g:.2f}x" for d, g in gains.items())
    return (
        f"The fastest {MODEL_WORDS.get(best['model'], best['model'])} arm alone, "
        f"{arm_words(bench, best['model'], arm_key(best))}, runs its {best['flops']['per_step'] / 1e9:.2f} GFLOP "
        f"train step at {roof['gflops']:.1f} GFLOP/s, {100 * roof['of_peak']:.0f} % of this machine's {roof['dtype']} "
        f"peak ({roof['peak_gflops']:.0f} GFLOP/s, a large matmul on {peak['threads']} "
        f"thread{'s' * (peak['threads'] != 1)}); the hardware "
        f"accelerates {' and '.join(fast) or 'no reduced precision'} (peak vs {ref_dtype}: {each}; CPU"
        f"{flags_words(bench.get('machine', {})) or ' flags not recorded'}){_contaminated(peak)}."
    )


def _machine_and_load(bench: Mapping) -> str:
    """The console's machine line: as :func:`~ptycho.study.bench.machine.machine_line`, with the
    load at the start and the end of the run (a contaminated run shows here first)."""
    m = bench.get("machine", {})
    start, end = m.get("load_average_start"), m.get("load_average")
    return (
        f"machine: {m.get('cpu', 'n/a')}{flags_words(m)} | {m.get('cores', 'n/a')} cores | load "
        f"{fmt(start[0] if start else None)} at start, {fmt(end[0] if end else None)} at end | "
        f"TF {m.get('tensorflow', 'n/a')} | GPUs {m.get('gpus')}"
    )


def format_table(result: Mapping) -> str:
    """The text ``ptycho bench`` prints: the machine, every table of :func:`tables` under
    its title, the fastest PINN arm in each context and the roofline in words."""
    parts = [_machine_and_load(result)]
    parts += [f"{title}\n{to_text(header, rows)}" for title, header, rows in tables(result)]
    words = []
    for context in result.get("contexts", {}):
        found = fastest(result, SUBJECT, context)
        if found:
            entry = result["ratios"][SUBJECT][found[0]]
            words.append(
                f"XLA's own effect on the PINN train step, {context}: the fastest mode is "
                f"{arm_words(result, SUBJECT, found[0])} ({_interval(found[1])} vs {REFERENCE} at "
                f"{_short(entry.get('precision', REFERENCE_PRECISION))})"
            )
    words += [w for w in (roofline_words(result), batch_words(result)) if w]
    title, header, rows = batch_table(result)
    if rows:
        parts.append(f"{title}\n{to_text(header, rows)}")
    return "\n\n".join([*parts, "\n".join(words)] if words else parts)
