"""The curve figures: loss per epoch of every arm beside its reference (a mode beside
``off``, a reduced precision beside float32), and the Fourier ring correlation of every
arm with the truth. Both take ``{Arm: {...}}``; lines are coloured by mode
(:data:`~ptycho.study.figures.style.MODE_COLOURS`), marked by precision
(:data:`~ptycho.study.figures.style.PRECISION_STYLES`), XLA modes drawn wider and
underneath ``off`` so that arms that agree (the hoped-for result) all stay visible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION
from ptycho.nets.xla import MODES, REFERENCE
from ptycho.study.arms import Arm, pairs
from ptycho.study.figures.inputs import floats
from ptycho.study.figures.style import (
    MODEL_LINESTYLES,
    MODEL_MARKERS,
    MUTED,
    arm_colour,
    in_order,
    message_figure,
    na,
    new_figure,
    precision_marks,
    several_precisions,
    several_seeds,
    style,
)
from ptycho.study.presentation import MODE_WORDS, MODEL_WORDS, PRECISION_WORDS

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _line_width(mode: str, kind: str = "val") -> float:
    """XLA modes drawn wider and underneath ``off``."""
    return (2.8 if kind == "val" else 2.2) if mode != REFERENCE else (1.5 if kind == "val" else 1.2)


def loss_curves(curves: Mapping[Arm, Mapping[str, Any]]) -> Figure:
    """Training (dashed) and validation (solid) loss per epoch of every mode and precision,
    one panel per model and seed.

    ``curves[arm] = {"train": [...], "val": [...]}`` (the figures job's
    :attr:`~ptycho.study.results.StudyResults.loss_curves`). Epochs count from 1.
    The y axis is logarithmic when every finite loss of the panel is positive and they
    span more than a decade; otherwise linear (a Poisson negative log-likelihood can be
    negative). A panel's title gives the largest relative difference of an arm's final
    validation loss from its reference's (:func:`~ptycho.study.arms.pairs`): from ``off``,
    and with several precisions also from float32. Panels go by seed, then model; the
    legend names the precision when there are several.
    """
    if not isinstance(curves, Mapping):
        raise ValueError(
            f"curves: expected a dict arm -> {{'train': [...], 'val': [...]}}, got {type(curves).__name__}"
        )
    groups: dict[tuple[str, int], list[Arm]] = {}
    for arm in in_order(curves, "curves"):
        if not isinstance(curves[arm], Mapping):
            raise ValueError(f"curves[{arm.name!r}]: expected a dict {{'train': [...], 'val': [...]}}")
        groups.setdefault((arm.model, arm.seed), []).append(arm)
    with style():
        if not groups:
            return message_figure("no pair of an XLA mode and off with loss histories")
        from matplotlib.lines import Line2D
        from matplotlib.ticker import FixedLocator, MaxNLocator

        keys = sorted(groups, key=lambda k: (k[1], MODELS.index(k[0])))
        ncols = min(len(keys), 2)
        nrows = math.ceil(len(keys) / ncols)
        fig = new_figure((4.3 * ncols + 0.3, 3.1 * nrows + 0.8))
        axes = fig.subplots(nrows, ncols, squeeze=False)
        several = several_precisions(arm.precision for arm in curves)
        drawn: dict[tuple[str, str, str], None] = {}
        for ax, (model, seed) in zip(axes.flat, keys, strict=False):
            finite: list[np.ndarray] = []
            longest = 0
            finals: dict[Arm, float] = {}
            for arm in groups[model, seed]:
                for kind, ls in (("train", "--"), ("val", "-")):
                    y = floats(curves[arm].get(kind), f"curves[{arm.name!r}][{kind!r}]")
                    if not y.size:
                        continue
                    marks = precision_marks(arm.precision, "o", y.size) or {
                        "marker": "o" if y.size <= 25 else None,
                        "markersize": 2.5 if arm.is_reference else 3.5,
                    }
                    ax.plot(
                        np.arange(1, y.size + 1),
                        y,
                        ls=ls,
                        color=arm_colour(arm.mode, arm.precision, pale=several),
                        lw=_line_width(arm.mode, kind),
                        zorder=3 if arm.is_reference else 2,
                        **marks,
                    )
                    finite.append(y[np.isfinite(y)])
                    longest = max(longest, y.size)
                    drawn[(arm.precision, arm.mode, kind)] = None
                    if kind == "val" and math.isfinite(y[-1]):
                        finals[arm] = float(y[-1])
            title = f"{MODEL_WORDS.get(model, model)}, seed {seed}"
            if not longest:
                ax.set_title(title)
                na(ax, "n/a (no loss history)")
                continue
            vals = np.concatenate(finite) if finite else np.zeros(0)
            if vals.size and vals.min() > 0 and vals.max() / vals.min() > 10:
                ax.set_yscale("log")
            rels: dict[str, list[float]] = {"mode": [], "precision": []}
            for pair in pairs(finals):
                ref = finals[pair.reference]
                rels[pair.axis].append(abs(finals[pair.arm] - ref) / max(abs(ref), 1e-12))
            largest = {axis: f"{max(r):.2%}" if r else "n/a" for axis, r in rels.items()}
            if several:
                reference = PRECISION_WORDS[REFERENCE_PRECISION]
                title += (
                    "\nlargest final validation-loss difference\n"
                    f"from {REFERENCE}: {largest['mode']}, from {reference}: {largest['precision']}"
                )
            else:
                title += f"\nlargest final validation-loss difference from {REFERENCE}: {largest['mode']}"
            ax.set_title(title)
            ax.set_xlabel("epoch")
            ax.set_ylabel("loss")
            ax.xaxis.set_major_locator(
                FixedLocator(range(1, longest + 1)) if longest <= 10 else MaxNLocator(integer=True)
            )
            ax.set_xlim(0.5, longest + 0.5)
            ax.grid(True, which="major")
        for ax in list(axes.flat)[len(keys) :]:
            ax.set_visible(False)
        handles = [
            Line2D(
                [],
                [],
                color=arm_colour(mode, precision, pale=several),
                ls=ls,
                lw=_line_width(mode, kind),
                label=", ".join([MODE_WORDS[mode], *([PRECISION_WORDS[precision]] if several else []), word]),
                **precision_marks(precision, "o", 1),
            )
            for precision in PRECISIONS
            for mode in MODES
            for kind, ls, word in (("train", "--", "training"), ("val", "-", "validation"))
            if (precision, mode, kind) in drawn
        ]
        if handles:  # with several precisions, one column per precision
            ncols = len({precision for precision, _, _ in drawn}) if several else min(len(handles), 4)
            fig.legend(handles=handles, loc="outside lower center", ncols=ncols)
        fig.suptitle(
            "Loss per epoch, every XLA mode vs off" + (" and every precision vs float32" if several else ""),
            fontsize=11,
        )
    return fig


def frc_curves(arms: Mapping[Arm, Mapping[str, Any] | None]) -> Figure:
    """Fourier ring correlation with the ground truth vs spatial frequency: amplitude | phase.

    ``arms[arm] = {"freq": [...], "amp": [...], "phase": [...]}`` with ``freq`` in
    cycles/pixel (0 .. 0.5). One line per arm, coloured by XLA mode, styled by model
    (PINN solid, baseline dashed) and marked by precision (a reduced precision's line is
    paler and carries the model's marker hollow or half filled, float32's is plain); the
    usual 0.5 and 1/7 thresholds are drawn and labelled. A ``None`` arm or a missing curve
    is left out of its panel.
    """
    if not isinstance(arms, Mapping):
        raise ValueError(f"arms: expected a dict arm -> {{'freq', 'amp', 'phase'}}, got {type(arms).__name__}")
    curves = []
    for arm in in_order(arms, "arms"):
        a = arms[arm]
        if a is None:
            continue
        name = arm.name
        if not isinstance(a, Mapping):
            raise ValueError(f"arms[{name!r}]: expected a dict with 'freq', 'amp', 'phase', got {type(a).__name__}")
        freq = floats(a.get("freq"), f"arms[{name!r}]['freq']")
        parts = {}
        for part in ("amp", "phase"):
            c = floats(a.get(part), f"arms[{name!r}][{part!r}]")
            if c.size and c.size != freq.size:
                raise ValueError(f"arms[{name!r}]: {part!r} has {c.size} values but 'freq' has {freq.size}")
            if c.size:
                parts[part] = c
        curves.append((arm, freq, parts))
    with style():
        fig = new_figure((9.0, 4.0))
        axes = fig.subplots(1, 2, squeeze=False)[0]
        several = several_seeds(arm for arm, *_ in curves)
        # A reduced precision is drawn pale only beside its own mode at float32.
        at_fp32 = {(arm.model, arm.mode) for arm, *_ in curves if arm.precision == REFERENCE_PRECISION}
        for ax, part, what in zip(axes, ("amp", "phase"), ("Amplitude", "Phase"), strict=True):
            lows = [0.0]
            n_lines = 0
            for arm, freq, parts in curves:
                if part not in parts:
                    continue
                ax.plot(
                    freq,
                    parts[part],
                    color=arm_colour(arm.mode, arm.precision, pale=(arm.model, arm.mode) in at_fp32),
                    ls=MODEL_LINESTYLES.get(arm.model, ":"),
                    lw=1.4 if arm.is_reference else 2.6,
                    zorder=3 if arm.is_reference else 2,
                    label=arm.label(several),
                    **precision_marks(arm.precision, MODEL_MARKERS.get(arm.model, "o"), freq.size),
                )
                fin = parts[part][np.isfinite(parts[part])]
                if fin.size:
                    lows.append(float(fin.min()))
                n_lines += 1
            for level, text in ((0.5, "0.5"), (1 / 7, "1/7 ≈ 0.143")):
                ax.axhline(level, color="#666666", lw=0.9, ls=":", zorder=1)
                ax.text(0.495, level + 0.012, text, ha="right", va="bottom", fontsize=8, color="#555555")
            ax.set_xlim(0, 0.5)
            ax.set_ylim(min(lows) - 0.05, 1.05)
            ax.set_xlabel("spatial frequency (cycles/pixel)")
            ax.set_ylabel("FRC")
            ax.set_title(f"{what}: FRC with the ground truth")
            ax.grid(True)
            if not n_lines:
                ax.text(0.5, 0.5, "n/a (no FRC curve)", transform=ax.transAxes, ha="center", color=MUTED)
        handles, labels = axes[0].get_legend_handles_labels()
        for h, lab in zip(*axes[1].get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
        if handles:  # inside the phase panel, top right: above the curves' high-frequency tails
            axes[1].legend(handles, labels, loc="upper right", fontsize=7.5, framealpha=0.9, frameon=True)
        fig.suptitle(
            "Resolution: Fourier ring correlation (higher is better; crossings of 0.5 and 1/7 = resolution)",
            fontsize=11,
        )
    return fig
