"""The benchmark's figures: train-step time distributions, where a step's time goes,
and each arm's speed-up over ``off`` with its interval.

They draw the benchmark's record as :class:`~ptycho.study.bench.record.BenchRecord` reads
it (or its JSON, ``ptycho bench --out``, read through it): its arms, each a (model, mode,
precision), and their ratios, each XLA mode against ``off`` at the same precision
(``xla``) and each reduced precision against float32 in the same mode (``vs_float32``).
The record decides what its keys mean and what an older record's missing ones default to;
an arm is drawn per (model, mode, precision), its words naming the precision when the
record has several. Missing pieces are drawn as "n/a"; a record the figures cannot draw
(a mode or precision this ptycho does not know, an arm twice) raises :class:`ValueError`
naming the entry, a broken one :class:`~ptycho.errors.PtychoError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION
from ptycho.nets.xla import MODES, REFERENCE
from ptycho.study.bench.record import MEASUREMENT_WORDS, BenchArm, BenchRecord, Interval, Spread
from ptycho.study.figures.inputs import floats
from ptycho.study.figures.style import (
    INK,
    MODE_COLOURS,
    MODEL_MARKERS,
    MUTED,
    NOXLA_COLOUR,
    PRECISION_STYLES,
    XLA_COLOUR,
    arm_colour,
    arm_hatch,
    fmt,
    message_figure,
    new_figure,
    several_precisions,
    style,
    tint,
)
from ptycho.study.presentation import MODEL_WORDS, PRECISION_WORDS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The benchmark's contexts in titles and labels.
CONTEXT_TITLES = {"alone": "alone", "shared": "pipeline's schedule"}
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


def _precision(precision: str, what: str) -> str:
    """A recorded precision the figures know; ValueError naming ``what`` otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"{what}: 'precision' must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def _arm_order(key: tuple[str, str]) -> tuple[int, int]:
    """Drawing order of a model's ``(mode, precision)`` arms: precision, then mode, as :attr:`Arm.order`."""
    mode, precision = key
    return list(PRECISIONS).index(precision), list(MODES).index(mode)


def _arm_words(mode: str, precision: str, several: bool) -> str:
    """A benchmarked arm in words: its mode (``jit``), and ``at <precision>`` below
    float32 or wherever the figure has several precisions (``jit at bfloat16``)."""
    return f"{mode} at {PRECISION_WORDS[precision]}" if several or precision != REFERENCE_PRECISION else mode


def _bench_arms(bench: BenchRecord) -> dict[str, dict[tuple[str, str], BenchArm]]:
    """``{model: {(mode, precision): arm}}``, models, precisions and modes in the package's orders."""
    by_model: dict[str, dict[tuple[str, str], BenchArm]] = {}
    for i, a in enumerate(bench.arms):
        if a.mode not in MODES:
            raise ValueError(f"arms[{i}]: 'mode' must be one of {', '.join(MODES)}, got {a.mode!r}")
        key = (a.mode, _precision(a.precision, f"arms[{i}]"))
        if key in by_model.setdefault(a.model, {}):
            raise ValueError(
                f"arms[{i}]: a second {a.model} {_arm_words(*key, False)} arm; one per (model, mode, precision) "
                "expected"
            )
        by_model[a.model][key] = a
    return {
        model: dict(sorted(by_model[model].items(), key=lambda kv: _arm_order(kv[0])))
        for model in sorted(by_model, key=lambda m: (_model_rank(m), m))
    }


def _timed(arm: BenchArm, context: str) -> tuple[Spread | None, tuple[float, ...]] | None:
    """An arm's train steps in ``context``: their spread and samples, ``None`` when not timed there."""
    if context == "alone":
        return arm.step, arm.step_samples
    return (arm.shared, arm.shared_samples) if arm.shared is not None or arm.shared_samples else None


def _box(
    ax,
    pos: int,
    timed: tuple[Spread | None, tuple[float, ...]],
    model: str,
    key: tuple[str, str],
    rng: np.random.Generator,
) -> tuple[float, int]:
    """One arm's steps at ``pos``: a box of quartiles and every step jittered over it (or
    the record's quartiles alone); its median in ms and how many steps were drawn."""
    from matplotlib.markers import MarkerStyle

    mode, precision = key
    colour = arm_colour(mode, precision)
    spread, steps = timed
    samples = floats(steps, f"{model} {_arm_words(*key, False)} step_samples_s") * 1e3
    samples = samples[np.isfinite(samples)]
    box_style = dict(
        positions=[pos],
        widths=0.5,
        patch_artist=True,
        medianprops={"color": INK, "lw": 1.6},
        boxprops={"facecolor": tint(colour), "edgecolor": colour, "lw": 1.4, "hatch": arm_hatch(model, precision)},
        whiskerprops={"color": colour, "lw": 1.2},
        capprops={"color": colour, "lw": 1.2},
    )
    if samples.size:
        ax.boxplot([samples], showfliers=False, **box_style)
        x = pos + rng.uniform(-0.13, 0.13, samples.size)
        marker = MarkerStyle(MODEL_MARKERS.get(model, "o"), PRECISION_STYLES[precision].fillstyle)
        # A hollow marker is its outline: drawn in the colour, wider, with no white rim.
        outline = {"edgecolors": "white", "linewidths": 0.4} if marker.is_filled() else {"linewidths": 0.9}
        ax.scatter(x, samples, s=12, color=colour, alpha=0.85, marker=marker, zorder=3, **outline)
        return float(np.median(samples)), samples.size
    if spread is not None and all(math.isfinite(v) for v in (spread.median, spread.q1, spread.q3)):
        q1, med, q3 = (1e3 * v for v in (spread.q1, spread.median, spread.q3))
        ax.bxp([{"med": med, "q1": q1, "q3": q3, "whislo": q1, "whishi": q3, "fliers": []}], **box_style)
        return med, 0
    ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color=MUTED)
    return math.nan, 0


def step_time_distributions(bench: BenchRecord | Mapping[str, Any]) -> Figure:
    """Train-step time of every mode and precision, one column per model, one row per
    context (alone, shared): box (quartiles) and every timed step.

    ``bench`` is the benchmark's record (or its JSON). Each box spans the
    quartiles (whiskers 1.5 IQR, no separate outliers) with the individual steps
    jittered over it, in ms on a linear axis from 0 so heights compare honestly. An arm
    without samples but with quartiles is drawn as a box alone. The first (compiling)
    call is far off this scale and is annotated under each box instead. A reduced
    precision's box is paler and hatched, its steps hollow or half-filled markers
    (:data:`~ptycho.study.figures.style.PRECISION_STYLES`).
    """
    by_model = _bench_arms(BenchRecord.of(bench))
    with style():
        if not by_model:
            return message_figure("no benchmark arms")
        models = list(by_model)
        shared = any(_timed(a, "shared") for per in by_model.values() for a in per.values())
        contexts = ["alone"] + (["shared"] if shared else [])
        keys = sorted({key for per in by_model.values() for key in per}, key=_arm_order)
        several = several_precisions(precision for _, precision in keys)
        fig = new_figure((max(1.25 * len(keys) * len(models) + 1.2, 5.2), 3.9 * len(contexts) + 0.6))
        axes = fig.subplots(len(contexts), len(models), squeeze=False)
        rng = np.random.default_rng(0)  # the jitter is decoration: deterministic, same every render
        for row, context in enumerate(contexts):
            for ax, model in zip(axes[row], models, strict=True):
                ticks, medians, counts = [], {}, []
                for pos, key in enumerate(keys):
                    words = _arm_words(*key, several)
                    a = by_model[model].get(key)
                    source = _timed(a, context) if a is not None else None
                    if source is None:
                        ticks.append(f"{words}\n(not measured)")
                        ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color=MUTED)
                        continue
                    medians[key], n = _box(ax, pos, source, model, key, rng)
                    if n:
                        counts.append(n)
                    compile_text = f"\ncompile {fmt(a.compile_s, ' s')}" if row == 0 else ""
                    ticks.append(f"{words}\n{fmt(medians[key], ' ms')}{compile_text}")
                ax.set_xticks(range(len(keys)), ticks)
                ax.set_xlim(-0.6, len(keys) - 0.4)
                ax.set_ylim(bottom=0)
                ax.set_ylabel(f"train step, {CONTEXT_TITLES.get(context, context)} (ms)")
                ax.grid(True, axis="y")
                # XLA's own effect: each mode against off at ITS precision, never another's.
                gains = {
                    k: medians[(REFERENCE, k[1])] / medians[k]
                    for k in medians
                    if k[0] != REFERENCE and (REFERENCE, k[1]) in medians and medians[k] > 0
                }
                best = max(gains, key=gains.get, default=None)
                n = f", {min(counts)}+ steps per arm" if counts else ""
                ax.set_title(
                    f"{_model_words(model)}, {CONTEXT_TITLES.get(context, context)}{n}\nfastest XLA mode: "
                    + (
                        f"{_arm_words(*best, several)}, {gains[best]:.2f}× {_arm_words(REFERENCE, best[1], several)}"
                        if best and math.isfinite(gains[best])
                        else "n/a"
                    )
                )
        fig.suptitle(
            f"Steady-state train-step time per XLA mode{' and precision' if several else ''}\n"
            "(compile = first call: trace + compile + one step)",
            fontsize=10.5,
        )
    return fig


def component_bars(bench: BenchRecord | Mapping[str, Any]) -> Figure:
    """Where a train step's time goes, per model, mode and precision: one stacked bar each
    (network forward + backward, physics head with the loss, optimiser update), each part
    timed as its own function compiled under the mode, with the whole step's median
    (alone) marked, of the arms of ``bench`` (the record or its JSON) with components. The hatching
    tells the parts apart, so a reduced precision is told by its paler colour and its
    row's words.
    """
    by_model = _bench_arms(BenchRecord.of(bench))
    with style():
        rows = [(model, key, a) for model, per in by_model.items() for key, a in per.items() if a.components]
        if not rows:
            return message_figure("no step components measured")
        from matplotlib.patches import Patch

        several = several_precisions(precision for _, (_, precision), _ in rows)
        fig = new_figure((7.6, 1.6 + 0.48 * len(rows)))
        ax = fig.add_subplot()
        ys = np.arange(len(rows))[::-1].astype(float)
        labels = []
        for y, (model, (mode, precision), a) in zip(ys, rows, strict=True):
            colour = arm_colour(mode, precision)
            words = _arm_words(mode, precision, several)
            left = 0.0
            for key, _, hatch in COMPONENTS:
                value = 1e3 * a.components.get(key, math.nan)
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
            step = 1e3 * a.step.median
            if math.isfinite(step):
                ax.plot([step, step], [y - 0.38, y + 0.38], color=INK, lw=2.0, zorder=4)
            labels.append(f"{_model_words(model)}, {words}\nstep {fmt(step, ' ms')}")
        ax.set_yticks(ys, labels)
        ax.set_xlim(left=0)
        ax.set_xlabel("time per train step (ms, medians); black tick: the whole step, timed as one function")
        ax.grid(True, axis="x", zorder=0)
        ax.tick_params(axis="y", length=0)
        handles = [Patch(facecolor="white", edgecolor=INK, hatch=hatch, label=word) for _, word, hatch in COMPONENTS]
        fig.legend(handles=handles, loc="outside lower center", ncols=3)
        ax.set_title(f"Where the train step's time goes, per XLA mode{' and precision' if several else ''} (alone)")
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


class _Ratio(NamedTuple):
    """One bar of a speed-up figure: ``axis`` "xla" (the mode vs ``off`` at the same
    precision) or "precision" (the precision vs float32 in the same mode)."""

    model: str
    mode: str
    precision: str
    axis: str
    measurement: str
    ratio: float
    low: float
    high: float

    def label(self, several: bool) -> str:
        """``"PINN jit vs off, train step alone"`` (``"PINN jit at bfloat16 vs off at
        bfloat16, ..."`` with several precisions); ``"PINN off: bfloat16 vs float32, ..."``."""
        if self.axis == "precision":
            name = f"{_model_words(self.model)} {self.mode}: {PRECISION_WORDS.get(self.precision, self.precision)}"
            name += f" vs {PRECISION_WORDS[REFERENCE_PRECISION]}"
        else:
            name = f"{_model_words(self.model)} {_arm_words(self.mode, self.precision, several)}"
            name += f" vs {_arm_words(REFERENCE, self.precision, several)}" if several else ""
        return f"{name}, {self.measurement}"


def _measurements(intervals: Mapping[str, Interval]) -> list[tuple[str, float, float, float]]:
    """``(words, ratio, low, high)`` of each measurement of :data:`~ptycho.study.bench.record.MEASUREMENT_WORDS` in ``intervals``."""
    found = [(word, intervals[key]) for key, word in MEASUREMENT_WORDS.items() if key in intervals]
    # a ratio <= 0 is not a timing ratio
    return [(word, *(v if v > 0 else math.nan for v in (i.ratio, i.low, i.high))) for word, i in found]


def _ratio_rows(bench: BenchRecord, axis: str = "xla") -> list[_Ratio]:
    """Every measurement of one axis, in the record's order: ``"xla"``, each XLA mode vs
    ``off`` at the same precision; ``"precision"``, each reduced precision vs float32 in
    the same mode."""
    rows = []
    for model, per in bench.ratios.items():
        for key, entry in per.items():
            precision = _precision(entry.precision, f"ratios[{model!r}][{key!r}]")
            if axis != "precision" and entry.mode == REFERENCE:
                continue
            found = entry.vs_float32 if axis == "precision" else entry.xla
            rows += [_Ratio(model, entry.mode, precision, axis, *m) for m in _measurements(found)]
    return rows


def speedup_bars(bench: BenchRecord | Mapping[str, Any], axis: str = "xla") -> Figure:
    """One axis's speed-up per measurement, the other axis held fixed: ``axis="xla"``,
    each XLA mode vs ``off`` at the same precision (XLA's own effect); ``"precision"``,
    each reduced precision vs float32 in the same mode (the precision's own). Horizontal
    bars from 1 with bootstrap 95 % intervals; the title says what is compared.

    ``bench`` is the benchmark's record (or its JSON); a ratio is "how many times faster
    than the reference" (its time / the arm's); one bar per measurement of
    :data:`~ptycho.study.bench.record.MEASUREMENT_WORDS` recorded, in the record's order. The x axis is logarithmic and symmetric about 1, so 2x faster and 2x slower
    are equally long. A bar has its mode's colour, is hatched for the baseline and
    paler and hatched again for a reduced precision; NaN ``low`` or ``high`` draws no
    interval, a NaN ratio no bar ("n/a").
    """
    rows = _ratio_rows(BenchRecord.of(bench), axis)
    with style():
        if not rows:
            return message_figure(
                "no reduced precision measured against float32" if axis == "precision" else "no speed-up ratios"
            )
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        several = several_precisions([REFERENCE_PRECISION, *(r.precision for r in rows)])  # off at float32 too
        # The title says what is held fixed; the strip and the axis name the reference only.
        reference = PRECISION_WORDS[REFERENCE_PRECISION] if axis == "precision" else REFERENCE
        finite = [v for r in rows for v in (r.ratio, r.low, r.high) if math.isfinite(v)]
        half = max([abs(math.log(v)) for v in finite] + [math.log(1.3)]) * 1.18
        lo, hi = math.exp(-half), math.exp(half)
        # Labels naming precisions are longer: the figure widens so that the axes keep their width.
        fig = new_figure((9.0 if several else 7.4, 1.9 + 0.62 * len(rows)))
        ax = fig.add_subplot()
        ax.set_xscale("log")
        ax.axvspan(lo, 1.0, color=NOXLA_COLOUR, alpha=0.07, lw=0)
        ax.axvspan(1.0, hi, color=XLA_COLOUR, alpha=0.07, lw=0)
        ys = np.arange(len(rows))[::-1].astype(float)
        ticklabels = []
        for y, row in zip(ys, rows, strict=True):
            label, ratio, low, high = row.label(several), row.ratio, row.low, row.high
            if not math.isfinite(ratio):
                ax.text(1.0, y, "  n/a", va="center", ha="left", color=MUTED)
                ticklabels.append(f"{label}\nn/a")
                continue
            mode = row.mode if row.mode in MODE_COLOURS else ("jit" if ratio >= 1.0 else REFERENCE)
            colour = arm_colour(mode, row.precision)
            ax.barh(
                y,
                ratio - 1.0,
                left=1.0,
                height=0.56,
                color=tint(colour, 0.35),
                edgecolor=colour,
                lw=1.2,
                hatch=arm_hatch(row.model, row.precision),
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
            (0.015, f"◀ slower than {reference}", "left", NOXLA_COLOUR),
            (0.985, f"faster than {reference} ▶", "right", XLA_COLOUR),
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
        ax.set_xlabel(f"speed relative to {reference} (×, log scale; 95 % bootstrap interval)")
        ax.grid(True, axis="x", zorder=0)
        ax.tick_params(axis="y", length=0)
        ax.set_title(
            "Precision's own effect: each precision vs float32 in the same mode"
            if axis == "precision"
            else "XLA's own effect: each XLA mode vs off at the same precision"
        )
    return fig
