"""The benchmark's figures: train-step time distributions, where a step's time goes,
and each mode's speed-up over ``off`` with its interval.

They read the benchmark record (``ptycho bench --out``) as written: its ``arms`` list
(each with ``model`` and ``mode``) and its ``ratios`` dict (model -> mode ->
measurement -> ``{"ratio", "low", "high"}``). Missing pieces are drawn as "n/a";
structurally wrong records raise :class:`ValueError` naming the entry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.xla import MODES, REFERENCE
from ptycho.study.arms import MODEL_WORDS
from ptycho.study.figures.inputs import floats, number
from ptycho.study.figures.style import (
    INK,
    MODE_COLOURS,
    MODEL_HATCHES,
    MODEL_MARKERS,
    MUTED,
    NOXLA_COLOUR,
    XLA_COLOUR,
    arm_colour,
    fmt,
    message_figure,
    new_figure,
    style,
    tint,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The benchmark's speed-up measurements (keys of a mode's ``ratios`` entry), in drawing order, and their words.
MEASUREMENTS = {
    "train_step_alone": "train step alone",
    "train_step_shared": "train step shared",
    "inference": "inference",
}
#: The parts of a train step timed on their own: key, words, hatching.
COMPONENTS = (
    ("network", "network fwd+bwd", "///"),
    ("physics", "physics head + loss fwd+bwd", ""),
    ("optimizer", "optimiser update", "..."),
)


def _model_rank(model: str) -> int:
    return MODELS.index(model) if model in MODELS else len(MODELS)


def _model_words(model: str) -> str:
    return MODEL_WORDS.get(model, model)


def _bench_arms(arms: Any) -> dict[str, dict[str, Mapping]]:
    """``{model: {mode: arm record}}``, models and modes in the package's orders."""
    if isinstance(arms, Mapping) or not isinstance(arms, Sequence):
        raise ValueError(f"arms: expected bench.json's 'arms' list, got {type(arms).__name__}")
    by_model: dict[str, dict[str, Mapping]] = {}
    for i, a in enumerate(arms):
        if not isinstance(a, Mapping):
            raise ValueError(f"arms[{i}]: expected a dict, got {type(a).__name__}")
        if not isinstance(a.get("model"), str) or a.get("mode") not in MODES:
            raise ValueError(
                f"arms[{i}]: needs 'model' (str) and 'mode' (one of {', '.join(MODES)}), "
                f"got {a.get('model')!r}, {a.get('mode')!r}"
            )
        if a["mode"] in by_model.setdefault(a["model"], {}):
            raise ValueError(f"arms[{i}]: a second {a['model']} {a['mode']} arm; one per (model, mode) expected")
        by_model[a["model"]][a["mode"]] = a
    return {
        model: dict(sorted(by_model[model].items(), key=lambda kv: list(MODES).index(kv[0])))
        for model in sorted(by_model, key=lambda m: (_model_rank(m), m))
    }


def _box(ax, pos: int, source: Mapping, model: str, mode: str, rng: np.random.Generator) -> tuple[float, int]:
    """One arm's steps at ``pos``: a box of quartiles and every step jittered over it (or
    the record's quartiles alone); its median in ms and how many steps were drawn."""
    colour = arm_colour(mode)
    samples = floats(source.get("step_samples_s"), f"{model} {mode} step_samples_s") * 1e3
    samples = samples[np.isfinite(samples)]
    quart = source.get("step_s") if isinstance(source.get("step_s"), Mapping) else {}
    box_style = dict(
        positions=[pos],
        widths=0.5,
        patch_artist=True,
        medianprops={"color": INK, "lw": 1.6},
        boxprops={"facecolor": tint(colour), "edgecolor": colour, "lw": 1.4, "hatch": MODEL_HATCHES.get(model, "")},
        whiskerprops={"color": colour, "lw": 1.2},
        capprops={"color": colour, "lw": 1.2},
    )
    if samples.size:
        ax.boxplot([samples], showfliers=False, **box_style)
        x = pos + rng.uniform(-0.13, 0.13, samples.size)
        marker = MODEL_MARKERS.get(model, "o")
        ax.scatter(
            x, samples, s=12, color=colour, alpha=0.85, edgecolors="white", linewidths=0.4, marker=marker, zorder=3
        )
        return float(np.median(samples)), samples.size
    if all(math.isfinite(number(quart.get(k), k)) for k in ("median", "q1", "q3")):
        q1, med, q3 = (1e3 * number(quart[k], k) for k in ("q1", "median", "q3"))
        ax.bxp([{"med": med, "q1": q1, "q3": q3, "whislo": q1, "whishi": q3, "fliers": []}], **box_style)
        return med, 0
    ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color=MUTED)
    return math.nan, 0


def step_time_distributions(arms: Sequence[Mapping[str, Any]]) -> Figure:
    """Train-step time of every mode, one column per model, one row per context (alone,
    shared): box (quartiles) and every timed step.

    ``arms`` is ``bench.json["arms"]``: ``{"model", "mode", "step_samples_s", "compile_s",
    "step_s": {...}, "shared": {"step_samples_s", "step_s"}, ...}``. Each box spans the
    quartiles (whiskers 1.5 IQR, no separate outliers) with the individual steps
    jittered over it, in ms on a linear axis from 0 so heights compare honestly. An arm
    without samples but with quartiles is drawn as a box alone. The first (compiling)
    call is far off this scale and is annotated under each box instead.
    """
    by_model = _bench_arms(arms)
    with style():
        if not by_model:
            return message_figure("no benchmark arms")
        models = list(by_model)
        shared = any("shared" in a for per in by_model.values() for a in per.values())
        contexts = ["alone"] + (["shared"] if shared else [])
        modes = [m for m in MODES if any(m in per for per in by_model.values())]
        fig = new_figure((max(1.25 * len(modes) * len(models) + 1.2, 5.2), 3.9 * len(contexts) + 0.6))
        axes = fig.subplots(len(contexts), len(models), squeeze=False)
        rng = np.random.default_rng(0)  # the jitter is decoration: deterministic, same every render
        for row, context in enumerate(contexts):
            for ax, model in zip(axes[row], models, strict=True):
                ticks, medians, counts = [], {}, []
                for pos, mode in enumerate(modes):
                    a = by_model[model].get(mode)
                    source = (a if context == "alone" else a.get("shared")) if a is not None else None
                    if source is None:
                        ticks.append(f"{mode}\n(not measured)")
                        ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color=MUTED)
                        continue
                    medians[mode], n = _box(ax, pos, source, model, mode, rng)
                    if n:
                        counts.append(n)
                    comp = number(a.get("compile_s"), f"{model} compile_s")
                    compile_text = f"\ncompile {fmt(comp, ' s')}" if row == 0 else ""
                    ticks.append(f"{mode}\n{fmt(medians[mode], ' ms')}{compile_text}")
                ax.set_xticks(range(len(modes)), ticks)
                ax.set_xlim(-0.6, len(modes) - 0.4)
                ax.set_ylim(bottom=0)
                ax.set_ylabel(f"train step, {context} (ms)")
                ax.grid(True, axis="y")
                off = medians.get(REFERENCE, math.nan)
                compared = [m for m in medians if m != REFERENCE and math.isfinite(medians[m])]
                best = min(compared, key=lambda m: medians[m], default=None)
                n = f", {min(counts)}+ steps per arm" if counts else ""
                ratio = off / medians[best] if best and medians[best] > 0 else math.nan
                ax.set_title(
                    f"{_model_words(model)}, {context}{n}\nfastest XLA mode: "
                    + (f"{best}, {ratio:.2f}× off" if math.isfinite(ratio) else "n/a")
                )
        fig.suptitle(
            "Steady-state train-step time per XLA mode\n(compile = first call: trace + compile + one step)",
            fontsize=10.5,
        )
    return fig


def component_bars(arms: Sequence[Mapping[str, Any]]) -> Figure:
    """Where a train step's time goes, per model and mode: one stacked bar each (network
    forward + backward, physics head with the loss, optimiser update), each part timed
    as its own function compiled under the mode, with the whole step's median (alone)
    marked. ``arms`` is ``bench.json["arms"]`` with ``components``.
    """
    by_model = _bench_arms(arms)
    with style():
        rows = [
            (model, mode, a)
            for model, per in by_model.items()
            for mode, a in per.items()
            if isinstance(a.get("components"), Mapping)
        ]
        if not rows:
            return message_figure("no step components measured")
        from matplotlib.patches import Patch

        fig = new_figure((7.6, 1.6 + 0.48 * len(rows)))
        ax = fig.add_subplot()
        ys = np.arange(len(rows))[::-1].astype(float)
        labels = []
        for y, (model, mode, a) in zip(ys, rows, strict=True):
            colour = arm_colour(mode)
            left = 0.0
            for key, _, hatch in COMPONENTS:
                value = 1e3 * number((a["components"].get(key) or {}).get("median"), f"{model} {mode} {key}")
                if not math.isfinite(value):
                    continue
                ax.barh(
                    y,
                    value,
                    left=left,
                    height=0.62,
                    color=tint(colour, 0.45),
                    edgecolor=colour,
                    hatch=hatch,
                    lw=1.0,
                    zorder=2,
                )
                if value > 4:
                    ax.text(
                        left + value / 2, y, f"{value:.0f}", ha="center", va="center", fontsize=7.5, color=INK, zorder=3
                    )
                left += value
            step = 1e3 * number((a.get("step_s") or {}).get("median"), f"{model} {mode} step_s")
            if math.isfinite(step):
                ax.plot([step, step], [y - 0.38, y + 0.38], color=INK, lw=2.0, zorder=4)
            labels.append(f"{_model_words(model)}, {mode}\nstep {fmt(step, ' ms')}")
        ax.set_yticks(ys, labels)
        ax.set_xlim(left=0)
        ax.set_xlabel("time per train step (ms, medians); black tick: the whole step, timed as one function")
        ax.grid(True, axis="x", zorder=0)
        ax.tick_params(axis="y", length=0)
        handles = [Patch(facecolor="white", edgecolor=INK, hatch=hatch, label=word) for _, word, hatch in COMPONENTS]
        fig.legend(handles=handles, loc="outside lower center", ncols=3)
        ax.set_title("Where the train step's time goes, per XLA mode (alone)")
    return fig


_NICE_RATIOS = (
    0.02,
    0.05,
    0.1,
    0.2,
    0.25,
    0.5,
    0.8,
    0.9,
    0.95,
    1.05,
    1.1,
    1.25,
    1.5,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    20.0,
    50.0,
)


def _ratio_ticks(half: float) -> list[float]:
    """Readable ticks on a log axis ``[e^-half, e^half]``: 1, then outwards, at least a ninth of the span apart."""
    gap = 2 * half / 9
    ticks = [1.0]
    for side in (sorted(t for t in _NICE_RATIOS if t > 1), sorted((t for t in _NICE_RATIOS if t < 1), reverse=True)):
        last = 0.0
        for t in side:
            if abs(math.log(t)) > half:
                break
            if abs(math.log(t)) - last >= gap:
                ticks.append(t)
                last = abs(math.log(t))
    return sorted(ticks)


def _ratio_rows(ratios: Any) -> list[tuple[str, str, str, float, float, float]]:
    """``(model, mode, label, ratio, low, high)`` per model, mode and measurement, in the record's order."""
    if not isinstance(ratios, Mapping):
        raise ValueError(
            f"ratios: expected bench.json's 'ratios' dict model -> mode -> measurement, got {type(ratios).__name__}"
        )
    rows = []
    for model, per in ratios.items():
        if not isinstance(per, Mapping) or not all(isinstance(r, Mapping) for r in per.values()):
            raise ValueError(f"ratios[{model!r}]: expected a dict mode -> measurement -> {{'ratio', 'low', 'high'}}")
        for mode, r in per.items():
            for key, word in MEASUREMENTS.items():
                if key not in r:
                    continue
                what = f"ratios[{model!r}][{mode!r}][{key!r}]"
                if not isinstance(r[key], Mapping) or "ratio" not in r[key]:
                    raise ValueError(f"{what}: expected a dict with 'ratio' (and 'low', 'high'), got {r[key]!r}")
                vals = [number(r[key].get(k), f"{what}[{k!r}]") for k in ("ratio", "low", "high")]
                vals = [v if v > 0 else math.nan for v in vals]  # a ratio <= 0 is not a timing ratio
                rows.append((model, mode, f"{_model_words(model)} {mode}, {word}", *vals))
    return rows


def speedup_bars(ratios: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Figure:
    """Speed-up of each XLA mode vs off per measurement: horizontal bars from 1 with
    bootstrap 95 % intervals.

    ``ratios`` is ``bench.json["ratios"]``: model -> mode -> ``{"train_step_alone":
    {"ratio", "low", "high"}, "train_step_shared": ..., "inference": ..., ...}``, the
    ratio being "how many times faster than off" (off's time / the mode's); one bar per
    measurement of :data:`MEASUREMENTS` present, labelled ``"PINN jit, train step
    alone"``, in the record's order. The x axis is logarithmic and symmetric about 1, so
    2x faster and 2x slower are equally long. A bar has its mode's colour and is hatched
    for the baseline; NaN ``low`` or ``high`` draws no interval, a NaN ratio no bar ("n/a").
    """
    rows = _ratio_rows(ratios)
    with style():
        if not rows:
            return message_figure("no speed-up ratios")
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        finite = [v for *_, ratio, low, high in rows for v in (ratio, low, high) if math.isfinite(v)]
        half = max([abs(math.log(v)) for v in finite] + [math.log(1.3)]) * 1.18
        lo, hi = math.exp(-half), math.exp(half)
        fig = new_figure((7.4, 1.9 + 0.62 * len(rows)))
        ax = fig.add_subplot()
        ax.set_xscale("log")
        ax.axvspan(lo, 1.0, color=NOXLA_COLOUR, alpha=0.07, lw=0)
        ax.axvspan(1.0, hi, color=XLA_COLOUR, alpha=0.07, lw=0)
        ys = np.arange(len(rows))[::-1].astype(float)
        ticklabels = []
        for y, (model, mode, label, ratio, low, high) in zip(ys, rows, strict=True):
            if not math.isfinite(ratio):
                ax.text(1.0, y, "  n/a", va="center", ha="left", color=MUTED)
                ticklabels.append(f"{label}\nn/a")
                continue
            colour = arm_colour(mode if mode in MODE_COLOURS else ("jit" if ratio >= 1.0 else REFERENCE))
            hatch = MODEL_HATCHES.get(model, "")
            ax.barh(
                y,
                ratio - 1.0,
                left=1.0,
                height=0.56,
                color=tint(colour, 0.35),
                edgecolor=colour,
                lw=1.2,
                hatch=hatch,
                zorder=2,
            )
            ci = ""
            if math.isfinite(low) and math.isfinite(high):
                xerr = [[max(ratio - low, 0.0)], [max(high - ratio, 0.0)]]
                ax.errorbar(ratio, y, xerr=xerr, fmt="none", ecolor=INK, elinewidth=1.3, capsize=4, zorder=3)
                ci = f" [{low:.2f}, {high:.2f}]"
            ticklabels.append(f"{label}\n{ratio:.2f}×{ci}")
        ax.axvline(1.0, color=INK, lw=1.2, zorder=4)
        # A strip under the bars for the labels of the line and of the two regions.
        label_y = -0.95
        box = {"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": INK, "lw": 0.8}
        ax.text(1.0, label_y, " no change ", ha="center", va="center", fontsize=8.5, color=INK, zorder=5, bbox=box)
        for x, text, ha, colour in (
            (0.015, "◀ slower than off", "left", NOXLA_COLOUR),
            (0.985, "faster than off ▶", "right", XLA_COLOUR),
        ):
            ax.text(
                x,
                label_y,
                text,
                transform=ax.get_yaxis_transform(),
                ha=ha,
                va="center",
                color=colour,
                fontsize=9.5,
                fontweight="bold",
            )
        ax.set_xlim(lo, hi)
        ax.set_ylim(-1.35, len(rows) - 0.4)
        ax.set_yticks(ys, ticklabels)
        ax.xaxis.set_major_locator(FixedLocator(_ratio_ticks(half)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_xlabel("speed relative to off (×, log scale; 95 % bootstrap interval)")
        ax.grid(True, axis="x", zorder=0)
        ax.tick_params(axis="y", length=0)
        ax.set_title("Each XLA mode vs off: speed-up per measurement and context")
    return fig
