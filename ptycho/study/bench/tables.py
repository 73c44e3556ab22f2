"""A bench record as tables and words: built once by :func:`tables` and
:func:`roofline_words`, rendered as text by :func:`format_table` (the ``ptycho bench``
command) and as Markdown or HTML by the report (:mod:`ptycho.study.tables`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION, short
from ptycho.nets.xla import REFERENCE
from ptycho.study.bench.machine import cpu_words, flags_words
from ptycho.study.bench.record import ArmRatios, BenchArm, BenchRecord, Context, Interval, Peak, Spread
from ptycho.study.bench.result import fastest
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


def _break_even(value: float | None) -> str:
    """A break-even step count: not recorded is "n/a", infinite "never"."""
    if value is None:
        return "n/a"
    return "never" if value == math.inf else f"{value:.0f}"


def _ms(spread: Spread | None) -> str:
    return fmt(1e3 * spread.median) if spread else "n/a"


def _interval(r: Interval | None) -> str:
    """A ratio with its interval, e.g. ``1.25 (1.2 - 1.3)``."""
    return f"{fmt(r.ratio)} ({fmt(r.low)} - {fmt(r.high)})" if r else "n/a"


def _conditions(contexts: Mapping[str, Context]) -> list[list[str]]:
    rows = []
    for name, c in contexts.items():
        f = c.load
        rows.append(
            [
                name,
                str(c.jobs),
                str(c.threads),
                fmt(f.foreign_cores if f else None),
                str(f.of_cores if f and f.of_cores is not None else "n/a"),
                "n/a" if not f else ("CONTAMINATED" if f.contaminated else "clean"),
                f"{fmt(f.load_before if f else None)} / {fmt(f.load_after if f else None)}",
            ]
        )
    return rows


def _arm(a: BenchArm) -> list[str]:
    """An arm's first cells: model, mode, precision (short word)."""
    return [a.model, a.mode, short(a.precision)]


def _timing(a: BenchArm) -> list[str]:
    return [
        *_arm(a),
        fmt(a.compile_s),
        _ms(a.step),
        fmt(1e3 * a.step.iqr),
        _ms(a.shared),
        fmt(1e3 * (a.shared.iqr if a.shared else float("nan"))),
        *(fmt(1e3 * a.components.get(k, float("nan"))) for k in ("network", "physics", "optimizer")),
        fmt(a.peak_rss_mb),
        fmt(a.peak_above_baseline_mb),
        fmt(a.xla_clusters) if a.xla_clusters is not None else "-",
    ]


def _inference(a: BenchArm) -> list[str]:
    return [
        *_arm(a),
        fmt(a.infer_compile_s),
        fmt(a.infer_patterns_per_s),
        fmt(a.naive_patterns_per_s),
        fmt(a.infer_patterns_per_s / a.naive_patterns_per_s),
    ]


def _roofline(a: BenchArm) -> list[str]:
    roof = a.roofline
    return [
        *_arm(a),
        fmt(a.flops_per_step / 1e9) if a.flops_per_step is not None else "n/a",
        _ms(a.step),
        fmt(roof.gflops if roof else None),
        fmt(roof.peak_gflops if roof else None),
        fmt(100 * (roof.of_peak if roof else math.nan)),
    ]


def _peak(peak: Peak | None) -> list[list[str]]:
    gflops = peak.gflops if peak else {}
    ref = gflops.get(compute_dtype(REFERENCE_PRECISION), math.nan)
    return [[dtype, fmt(value), fmt(value / ref)] for dtype, value in gflops.items()]


def _contaminated(peak: Peak | None) -> str:
    """``"; CONTAMINATED: ..."`` when other processes took more than the limit while the
    peak was measured (a lower peak, a higher fraction of it); empty otherwise."""
    f = peak.load if peak else None
    if not (f and f.contaminated):
        return ""
    return (
        f"; CONTAMINATED: other processes kept {fmt(f.foreign_cores)} of {f.of_cores} cores busy "
        "while the peak was measured"
    )


def _ratios(ratios: Mapping[str, Mapping[str, ArmRatios]]) -> list[list[str]]:
    """One row per arm but the reference: XLA's own effect (vs ``off`` at the same
    precision), the precision's own (vs float32 in the same mode), then both together (vs
    ``off`` at float32, the configuration's). Arms from before the precision axis are
    keyed by their mode and are float32."""
    rows = []
    for model, per in ratios.items():
        for key, r in per.items():
            if key == REFERENCE:
                continue
            rows.append(
                [
                    model,
                    r.mode,
                    short(r.precision),
                    _interval(r.xla.get("train_step_alone")),
                    _interval(r.xla.get("train_step_shared")),
                    _interval(r.xla.get("inference")),
                    _interval(r.vs_float32.get("train_step_alone")),
                    _interval(r.vs_float32.get("train_step_shared")),
                    _interval(r.overall.get("train_step_alone")),
                    fmt(r.compile_extra_s),
                    _break_even(r.break_even_steps),
                    _break_even(r.break_even_steps_shared),
                ]
            )
    return rows


def tables(bench: BenchRecord | Mapping) -> list[Table]:
    """The tables of a bench record (:func:`~ptycho.study.bench.run`'s result, as written
    to ``bench.json``): conditions, train-step timings, each arm vs the reference, the
    roofline and the machine's peak, and inference. A record without some part gives
    that table no rows."""
    record = BenchRecord.of(bench)
    arms, contexts, peak = record.arms, record.contexts, record.peak
    how = "; ".join(f"{k}: {c.how}" for k, c in contexts.items())
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
            _ratios(record.ratios),
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
            f"Machine peak: {peak.how if peak and peak.how is not None else 'not measured'}{_contaminated(peak)}",
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


def _batch_points(record: BenchRecord, a: BenchArm) -> list[tuple[str, int, Spread, Interval | None]]:
    """(kind, batch size, the arm's timing, XLA's ratio vs off at its precision) of every
    batch size the arm was timed at: the sweep's and the study's own batch (the main
    measurement), in size order per kind."""
    entry = record.entry(a.model, a.key)
    ratios = entry.xla_batches if entry else {}
    xla = entry.xla if entry else {}
    points = []
    for kind in ("train", "infer"):
        sizes = {b: (rec.spread, ratios.get(kind, {}).get(str(b))) for b, rec in a.batches.get(kind, {}).items()}
        if sizes and a.batch_size:
            if kind == "train":
                sizes.setdefault(int(a.batch_size), (a.step, xla.get("train_step_alone")))
            elif a.infer_batch_samples:
                own = Spread.from_json(quartiles(a.infer_batch_samples))
                sizes.setdefault(int(a.batch_size), (own, xla.get("inference")))
        points += [(kind, b, rec, r) for b, (rec, r) in sorted(sizes.items())]
    return points


def batch_table(bench: BenchRecord | Mapping) -> Table:
    """XLA's own effect by batch size, alone: each swept arm's time per call and per
    sample, and each XLA mode vs ``off`` at the same precision and batch size."""
    record = BenchRecord.of(bench)
    rows = []
    for a in record.arms:
        for kind, b, rec, r in _batch_points(record, a):
            rows.append(
                [
                    a.model,
                    a.mode,
                    short(a.precision),
                    "training step" if kind == "train" else "inference batch",
                    str(b),
                    _ms(rec),
                    fmt(1e3 * rec.median / b),
                    _interval(r) if a.mode != REFERENCE else "(reference)",
                ]
            )
    return (
        "XLA's own effect by batch size, alone (each mode vs off at the same precision and batch; the study's "
        "own batch is the main measurement)",
        ["model", "mode", "precision", "what", "batch", "median ms", "ms per sample", "XLA vs off"],
        rows,
    )


def batch_words(bench: BenchRecord | Mapping) -> str:
    """Where XLA's own effect grows or vanishes with the batch, in one sentence: per swept
    XLA mode, its ratio vs ``off`` at the same precision at each batch size; and the
    inference batch with the highest throughput (a recommendation for this machine)."""
    record = BenchRecord.of(bench)
    parts, best = [], None
    for a in record.arms:
        points = _batch_points(record, a)
        if a.model != SUBJECT or not points:
            continue
        for kind, b, rec, _ in points:
            if kind == "infer" and (best is None or rec.median / b < best[0]):
                best = (rec.median / b, a, b)
        if a.mode == REFERENCE:
            continue
        by_kind = {}
        for kind, b, _, r in points:
            if r:
                by_kind.setdefault(kind, []).append(f"{b}: {fmt(r.ratio)}x")
        if by_kind:
            parts.append(
                f"{a.mode} at {short(a.precision)}: "
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
            f". Highest PINN inference throughput here: {a.mode} at {short(a.precision)} with batch {b} "
            f"({fmt(1 / per_s)} pattern groups/s); a training batch also changes the optimisation, so no training "
            "batch is recommended on speed alone"
        )
    return text


def arm_words(bench: BenchRecord | Mapping, model: str, key: str) -> str:
    """An arm of ``model`` (its :attr:`~ptycho.study.bench.record.BenchArm.key`) in words:
    ``"jit"`` at float32, ``"jit at bf16"`` otherwise."""
    r = BenchRecord.of(bench).entry(model, key)
    return r.label if r else key


def roofline_words(bench: BenchRecord | Mapping) -> str:
    """How close the fastest PINN arm alone is to the machine's limit, and which reduced
    precision the hardware accelerates (measured peaks vs float32's, and the CPU's flags);
    empty for a record without a roofline."""
    record = BenchRecord.of(bench)
    arms = [a for a in record.arms if a.roofline is not None]
    peak = record.peak
    if not arms or not peak:
        return ""
    best = max([a for a in arms if a.model == SUBJECT] or arms, key=lambda a: a.roofline.gflops)
    roof = best.roofline
    ref_dtype = compute_dtype(REFERENCE_PRECISION)
    gains = {d: v / peak.gflops[ref_dtype] for d, v in peak.gflops.items() if d != ref_dtype}
    fast = [d for d, g in gains.items() if g >= ACCELERATED]
    each = ", ".join(f"{d} {g:.2f}x" for d, g in gains.items())
    return (
        f"The fastest {MODEL_WORDS.get(best.model, best.model)} arm alone, "
        f"{arm_words(record, best.model, best.key)}, runs its {best.flops_per_step / 1e9:.2f} GFLOP "
        f"train step at {roof.gflops:.1f} GFLOP/s, {100 * roof.of_peak:.0f} % of this machine's {roof.dtype} "
        f"peak ({roof.peak_gflops:.0f} GFLOP/s, a large matmul on {peak.threads} "
        f"thread{'s' * (peak.threads != 1)}); the hardware "
        f"accelerates {' and '.join(fast) or 'no reduced precision'} (peak vs {ref_dtype}: {each}; CPU"
        f"{flags_words(record.machine) or ' flags not recorded'}){_contaminated(peak)}."
    )


def _machine_and_load(record: BenchRecord) -> str:
    """The console's machine line: as :func:`~ptycho.study.bench.machine.machine_line`, with the
    load at the start and the end of the run (a contaminated run shows here first)."""
    m = record.machine
    start, end = m.get("load_average_start"), m.get("load_average")
    return (
        f"machine: {cpu_words(m)}{flags_words(m)} | {m.get('cores', 'n/a')} cores | load "
        f"{fmt(start[0] if start else None)} at start, {fmt(end[0] if end else None)} at end | "
        f"TF {m.get('tensorflow', 'n/a')} | GPUs {m.get('gpus')}"
    )


def format_table(result: BenchRecord | Mapping) -> str:
    """The text ``ptycho bench`` prints: the machine, every table of :func:`tables` under
    its title, the fastest PINN arm in each context and the roofline in words."""
    record = BenchRecord.of(result)
    parts = [_machine_and_load(record)]
    parts += [f"{title}\n{to_text(header, rows)}" for title, header, rows in tables(record)]
    words = []
    for context in record.contexts:
        found = fastest(record, SUBJECT, context)
        if found:
            entry = record.entry(SUBJECT, found[0])
            words.append(
                f"XLA's own effect on the PINN train step, {context}: the fastest mode is "
                f"{arm_words(record, SUBJECT, found[0])} ({_interval(found[1])} vs {REFERENCE} at "
                f"{short(entry.precision)})"
            )
    words += [w for w in (roofline_words(record), batch_words(record)) if w]
    title, header, rows = batch_table(record)
    if rows:
        parts.append(f"{title}\n{to_text(header, rows)}")
    return "\n\n".join([*parts, "\n".join(words)] if words else parts)
