"""A bench record as tables: built once by :func:`tables`, rendered as text by
:func:`format_table` (the ``ptycho bench`` command) and as Markdown or HTML by the
report (:mod:`ptycho.study.tables`)."""

from __future__ import annotations

from collections.abc import Mapping

from ptycho.nets.xla import REFERENCE
from ptycho.study.bench.coordinator import fastest
from ptycho.study.tables import Table, fmt, to_text


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


def _timing(a: Mapping) -> list[str]:
    shared = a.get("shared", {}).get("step_s")
    return [
        a["model"],
        a["mode"],
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
        a["model"],
        a["mode"],
        fmt(a["infer_compile_s"]),
        fmt(a["infer_patterns_per_s"]),
        fmt(a["naive_patterns_per_s"]),
        fmt(a["infer_patterns_per_s"] / a["naive_patterns_per_s"]),
    ]


def _ratios(ratios: Mapping) -> list[list[str]]:
    return [
        [
            model,
            mode,
            _interval(r.get("train_step_alone")),
            _interval(r.get("train_step_shared")),
            _interval(r.get("inference")),
            fmt(r.get("compile_extra_s")),
            _break_even(r, "break_even_steps"),
            _break_even(r, "break_even_steps_shared"),
        ]
        for model, per in ratios.items()
        for mode, r in per.items()
        if mode != REFERENCE
    ]


def tables(bench: Mapping) -> list[Table]:
    """The tables of a bench record (:func:`~ptycho.study.bench.run`'s result, as written
    to ``bench.json``): conditions, train-step timings, each mode vs the reference, and
    inference. A record without some part gives that table no rows."""
    arms = bench.get("arms", [])
    contexts = bench.get("contexts", {})
    how = "; ".join(f"{k}: {c['how']}" for k, c in contexts.items())
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
            f"Train-step timings per mode ({how})",
            [
                "model",
                "mode",
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
            f"Each mode vs {REFERENCE} ({REFERENCE}'s time / the mode's; > 1 means faster), 95 % bootstrap intervals",
            [
                "model",
                "mode",
                "train step alone",
                "train step shared",
                "inference (padded batch)",
                "extra compile s",
                "break-even steps alone",
                "break-even steps shared",
            ],
            _ratios(bench.get("ratios", {})),
        ),
        (
            "Inference: padded fixed batch vs a per-pattern loop (batch 1)",
            ["model", "mode", "compile s", "padded-batch patterns/s", "per-pattern patterns/s", "padded / per-pattern"],
            [_inference(a) for a in arms],
        ),
    ]


def _machine_and_load(bench: Mapping) -> str:
    """The console's machine line: as :func:`~ptycho.study.bench.machine.machine_line`, with the
    load at the start and the end of the run (a contaminated run shows here first)."""
    m = bench.get("machine", {})
    start, end = m.get("load_average_start"), m.get("load_average")
    return (
        f"machine: {m.get('cpu', 'n/a')} | {m.get('cores', 'n/a')} cores | load "
        f"{fmt(start[0] if start else None)} at start, {fmt(end[0] if end else None)} at end | "
        f"TF {m.get('tensorflow', 'n/a')} | GPUs {m.get('gpus')}"
    )


def format_table(result: Mapping) -> str:
    """The text ``ptycho bench`` prints: the machine, every table of :func:`tables` under
    its title, and the fastest PINN mode in each context."""
    parts = [_machine_and_load(result)]
    parts += [f"{title}\n{to_text(header, rows)}" for title, header, rows in tables(result)]
    best = []
    for context in result.get("contexts", {}):
        found = fastest(result, "pinn", context)
        if found:
            best.append(f"fastest PINN train step, {context}: {found[0]} ({_interval(found[1])} vs {REFERENCE})")
    return "\n\n".join([*parts, "\n".join(best)] if best else parts)
