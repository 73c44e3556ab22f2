"""The validation report's figures: pure functions of arrays and evidence dicts.

Every function takes plain NumPy arrays, lists and dicts (the pipeline's JSON/NPZ
artefacts, already loaded) and returns a new :class:`matplotlib.figure.Figure`. Figures
are built with ``Figure()`` directly, never registered with pyplot, and every style
setting is applied inside ``matplotlib.rc_context(STYLE)``: calling these functions
changes no global matplotlib state and leaks no figure. :func:`to_png` and
:func:`save_png` render a figure (under the same style) and close it.

One style for the whole report:

* each XLA mode has one colour in every figure (:data:`MODE_COLOURS`, Okabe-Ito):
  ``off`` (no XLA) vermillion, ``jit`` blue, ``auto`` bluish green, ``physics``
  reddish purple; the model is told apart by line style, marker and hatching
  (:data:`MODEL_LINESTYLES`, :data:`MODEL_MARKERS`, :data:`MODEL_HATCHES`), never by colour;
* images use perceptually uniform, colour-blind-safe colour maps: ``cividis`` for
  amplitude and (unwrapped) phase, ``PuOr`` with symmetric limits for signed errors;
* every image panel has a colour bar with its unit (phase in rad, amplitude is a
  dimensionless transmission), every panel a title and axis labels; sizes are chosen
  to be readable at 100 dpi.

Missing optional pieces (an arm that is ``None``, a NaN ratio, an empty loss history)
are drawn as "n/a"; structurally wrong inputs (mismatched shapes, a value of the wrong
kind) raise :class:`ValueError` naming the offending entry.
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.nets.models import MODEL_KINDS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "AMPLITUDE_CMAP",
    "ERROR_CMAP",
    "MODE_COLOURS",
    "MODEL_HATCHES",
    "MODEL_LINESTYLES",
    "MODEL_MARKERS",
    "NOXLA_COLOUR",
    "OKABE_ITO",
    "PHASE_CMAP",
    "STYLE",
    "WRAPPED_PHASE_CMAP",
    "XLA_COLOUR",
    "arm_colour",
    "common_window",
    "component_bars",
    "error_maps",
    "frc_curves",
    "loss_curves",
    "reconstruction_grid",
    "save_png",
    "speedup_bars",
    "step_time_distributions",
    "to_png",
]

# ------------------------------------------------------------------ palette and style
#: Okabe & Ito (2008) colour-blind-safe qualitative palette.
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
#: One colour per XLA mode, in every figure (Okabe-Ito vermillion, blue, bluish green, reddish purple).
MODE_COLOURS = {"off": "#D55E00", "jit": "#0072B2", "auto": "#009E73", "physics": "#CC79A7"}
#: Whole-step XLA (``jit``), and no XLA (``off``): the two ends of the comparison.
XLA_COLOUR = MODE_COLOURS["jit"]
NOXLA_COLOUR = MODE_COLOURS["off"]
#: An arm whose name does not parse as ``model-mode-sN``.
UNKNOWN_ARM_COLOUR = "#999999"
MODE_WORDS = {"off": "no XLA (off)", "jit": "XLA jit", "auto": "XLA auto", "physics": "XLA physics"}
#: Reference lines and annotations.
INK = "#333333"

MODEL_LINESTYLES = {"pinn": "-", "baseline": "--"}
MODEL_MARKERS = {"pinn": "o", "baseline": "s"}
MODEL_HATCHES = {"pinn": "", "baseline": "///"}
MODEL_NAMES = {"pinn": "PINN", "baseline": "Baseline"}
_MODEL_ORDER = MODEL_KINDS

#: Amplitude maps: perceptually uniform, designed to read the same for deuteranopes.
AMPLITUDE_CMAP = "cividis"
#: Phase maps. The study's phases are unwrapped, plane-corrected and span about pi rad
#: peak to peak, i.e. they do not wrap; a cyclic map (``twilight``) would give both ends
#: of that range nearly the same colour and hide the sign of a feature, so phase uses
#: the same sequential ``cividis`` as amplitude. Only a phase spanning a full turn
#: (wrapped data, range >= 0.95 * 2 pi) is shown with the cyclic ``twilight`` on
#: [-pi, pi], where equal colours at the ends are then the truth.
PHASE_CMAP = "cividis"
WRAPPED_PHASE_CMAP = "twilight"
#: Signed errors: ColorBrewer's colour-blind-safe diverging map, white at zero, with
#: symmetric limits so equal colours mean equal magnitudes of either sign.
ERROR_CMAP = "PuOr"

#: rcParams applied (locally, via ``rc_context``) to every figure of the report.
STYLE: dict[str, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "normal",
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "axes.prop_cycle": f"cycler('color', {list(OKABE_ITO[1:] + OKABE_ITO[:1])!r})",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": INK,
    "axes.labelcolor": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "grid.color": "#d9d9d9",
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.6,
    "image.cmap": AMPLITUDE_CMAP,
    "image.interpolation": "nearest",
    "figure.constrained_layout.h_pad": 0.06,
    "figure.constrained_layout.w_pad": 0.06,
}


def _style():
    import matplotlib

    return matplotlib.rc_context(STYLE)


def _figure(figsize: tuple[float, float], layout: str = "constrained") -> Figure:
    """A new figure, not registered with pyplot; ``"compressed"`` packs grids of images."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=layout)


# ------------------------------------------------------------------------- arm names
def _parse(name: str) -> tuple[str | None, str | None, int | None]:
    """``(model, mode, seed)`` of an arm name, or Nones if it is not ``model-mode-sN``."""
    from ptycho.study.arms import parse_arm

    try:
        return tuple(parse_arm(name))
    except (ValueError, TypeError):
        return None, None, None


def arm_colour(mode: str | None) -> str:
    """The mode's colour (:data:`MODE_COLOURS`), or grey when the arm is unknown."""
    return MODE_COLOURS.get(mode, UNKNOWN_ARM_COLOUR) if mode else UNKNOWN_ARM_COLOUR


def _arm_word(mode: str | None) -> str:
    return MODE_WORDS.get(mode, str(mode))


def _mode_rank(mode: str | None) -> int:
    return list(MODE_COLOURS).index(mode) if mode in MODE_COLOURS else len(MODE_COLOURS)


def _model_name(model: str | None) -> str:
    return MODEL_NAMES.get(model, model) if model else "?"


def _model_rank(model: str | None) -> int:
    return _MODEL_ORDER.index(model) if model in _MODEL_ORDER else len(_MODEL_ORDER)


def _arm_sort_key(name: str) -> tuple:
    model, mode, seed = _parse(name)
    return (_model_rank(model), model or "", _mode_rank(mode), -1 if seed is None else seed, name)


def _arm_label(name: str, with_seed: bool) -> str:
    """``"PINN, XLA jit"`` (``", seed 1"`` appended when the figure holds several seeds)."""
    model, mode, seed = _parse(name)
    if model is None:
        return name
    label = f"{_model_name(model)}, {_arm_word(mode)}"
    return f"{label}, seed {seed}" if with_seed else label


def _several_seeds(names) -> bool:
    return len({_parse(n)[2] for n in names}) > 1


def _group_label(key: str) -> str:
    """``"pinn-s0"`` -> ``"PINN, seed 0"`` (the convergence evidence's curve groups)."""
    model, _, seed = str(key).rpartition("-")
    if model and seed.startswith("s") and seed[1:].isdigit():
        return f"{_model_name(model)}, seed {seed[1:]}"
    return str(key)


def _line_width(mode: str | None, kind: str = "val") -> float:
    """XLA modes drawn wider and underneath ``off``: when the arms agree (the hoped-for
    result) every line stays visible."""
    return (2.8 if kind == "val" else 2.2) if mode != "off" else (1.5 if kind == "val" else 1.2)


# ---------------------------------------------------------------------- small helpers
def _floats(values: Any, what: str) -> np.ndarray:
    """1-D float array (JSON ``null`` -> NaN); ``None`` -> empty."""
    if values is None:
        return np.zeros(0)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a sequence of numbers, got {type(values).__name__}") from None
    if arr.ndim > 1:
        raise ValueError(f"{what}: expected a 1-D sequence, got shape {arr.shape}")
    return arr.reshape(-1)


def _number(value: Any, what: str) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {value!r}") from None


def _na(ax: Axes, text: str = "n/a") -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777", fontsize=10)


def _message_figure(text: str, figsize: tuple[float, float] = (5.0, 2.0)) -> Figure:
    fig = _figure(figsize)
    ax = fig.add_subplot()
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    _na(ax, text)
    return fig


def _finite_range(*arrays: np.ndarray) -> tuple[float, float] | None:
    vals = [a[np.isfinite(a)] for a in arrays if a is not None and a.size]
    vals = [v for v in vals if v.size]
    if not vals:
        return None
    lo = min(float(v.min()) for v in vals)
    hi = max(float(v.max()) for v in vals)
    return lo, hi


# -------------------------------------------------------------------- image figures
def common_window(
    comparisons: Mapping[str, Mapping[str, Any]],
) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The truth and every arm, from :func:`ptycho.analysis.metrics.compare` results, over one window.

    ``compare`` removes a fixed frame, or more for an arm whose registration shift exceeds
    the allowance (a badly trained model), so the arms' scored windows can differ. The
    figures show the window all of them share, in truth coordinates (``crop`` is
    ``[row0, row1, col0, col1]``), so every panel shows the same object pixels.
    Returns ``((truth_amp, truth_phase), {name: (amp, phase)})``.
    """
    if not comparisons:
        raise ValueError("no reconstructions to show")
    crops = {name: [int(v) for v in c["crop"]] for name, c in comparisons.items()}
    r0, c0 = max(k[0] for k in crops.values()), max(k[2] for k in crops.values())
    r1, c1 = min(k[1] for k in crops.values()), min(k[3] for k in crops.values())
    if r1 <= r0 or c1 <= c0:
        raise ValueError(f"the arms' scored windows do not overlap ({crops})")

    def cut(img: np.ndarray, crop: list[int]) -> np.ndarray:
        return np.asarray(img)[r0 - crop[0] : r1 - crop[0], c0 - crop[2] : c1 - crop[2]]

    shown = {name: (cut(c["amp"], crops[name]), cut(c["phase"], crops[name])) for name, c in comparisons.items()}
    name, first = next(iter(comparisons.items()))
    truth = (cut(first["truth_amp"], crops[name]), cut(first["truth_phase"], crops[name]))
    return truth, shown


def _image_pair(what: str, value: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(amp, phase)`` as 2-D float arrays of one shape; ``None`` stays ``None`` (missing)."""
    if value is None:
        return None
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"{what}: expected a pair (amplitude, phase) of 2-D arrays, got {type(value).__name__}")
    out = []
    for part, arr in zip(("amplitude", "phase"), value, strict=True):
        arr = np.asarray(arr)
        if np.iscomplexobj(arr):
            raise ValueError(f"{what}: {part} is complex; pass |O| and angle(O) as real arrays")
        if arr.ndim != 2:
            raise ValueError(f"{what}: {part} must be 2-D, got shape {arr.shape}")
        out.append(arr.astype(np.float64))
    if out[0].shape != out[1].shape:
        raise ValueError(f"{what}: amplitude {out[0].shape} and phase {out[1].shape} differ in shape")
    return out[0], out[1]


def _images(truth: Any, arms: Any) -> tuple[tuple[np.ndarray, np.ndarray], list[tuple[str, Any]]]:
    t = _image_pair("truth", truth)
    if t is None:
        raise ValueError("truth: the ground truth (amplitude, phase) is required")
    if not isinstance(arms, Mapping):
        raise ValueError(f"arms: expected a dict name -> (amplitude, phase), got {type(arms).__name__}")
    rows = []
    for name in sorted(arms, key=_arm_sort_key):
        pair = _image_pair(f"arm {name!r}", arms[name])
        if pair is not None and pair[0].shape != t[0].shape:
            raise ValueError(f"arm {name!r}: shape {pair[0].shape} differs from the truth's {t[0].shape}")
        rows.append((name, pair))
    return t, rows


def _limits(rng: tuple[float, float] | None) -> tuple[float, float]:
    if rng is None:
        return 0.0, 1.0
    lo, hi = rng
    if hi <= lo:  # a flat image: a small window centred on its value
        pad = max(abs(lo) * 0.05, 1e-6)
        return lo - pad, hi + pad
    return lo, hi


def _image_panel(
    fig: Figure,
    ax: Axes,
    img: np.ndarray,
    *,
    cmap: str,
    vmin: float,
    vmax: float,
    title: str,
    cbar_label: str,
    extend: str = "neither",
) -> None:
    im = ax.imshow(img, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03, extend=extend)
    cb.set_label(cbar_label)
    cb.ax.tick_params(labelsize=8)
    ax.set_title(title)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    if not np.isfinite(img).any():
        ax.text(0.5, 0.5, "n/a (no finite pixel)", transform=ax.transAxes, ha="center", va="center", color="#777777")


def _label_image_axes(axes: np.ndarray) -> None:
    """Pixel-axis labels on the outer panels only (inner ones repeat them)."""
    for ax in axes[-1, :]:
        ax.set_xlabel("x (pixel)")
    for ax in axes[:, 0]:
        ax.set_ylabel("y (pixel)")


def _row_height(shape: tuple[int, int]) -> float:
    h, w = shape
    return 2.75 * min(max(h / w, 0.4), 2.5) + 0.55


def reconstruction_grid(
    truth: tuple[np.ndarray, np.ndarray],
    arms: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    phase_cmap: str | None = None,
) -> Figure:
    """Ground truth and each arm's reconstruction: rows truth, arm 1, ...; columns amplitude | phase.

    Parameters
    ----------
    truth : (amplitude, phase)
        2-D real arrays of one shape; phase in rad.
    arms : dict
        Arm name (``"pinn-jit-s0"``) -> ``(amplitude, phase)`` of the truth's shape, already
        registered, scaled and plane-corrected; ``None`` draws an "n/a" row. Rows are
        ordered PINN before baseline, then by mode (off, jit, auto, physics), then by seed.
    phase_cmap : str, optional
        Colour map of the phase column; by default :data:`PHASE_CMAP`, or
        :data:`WRAPPED_PHASE_CMAP` when the truth's phase spans a full turn.

    Each column shares one colour scale, the truth's range, so a reconstruction that
    over- or undershoots saturates visibly instead of being rescaled to look right.
    """
    (t_amp, t_ph), rows = _images(truth, arms)
    with _style():
        amp_lim = _limits(_finite_range(t_amp))
        ph_range = _finite_range(t_ph)
        wrapped = ph_range is not None and ph_range[1] - ph_range[0] >= 0.95 * 2 * np.pi
        cmap_ph = phase_cmap or (WRAPPED_PHASE_CMAP if wrapped else PHASE_CMAP)
        ph_lim = (-np.pi, np.pi) if wrapped else _limits(ph_range)
        several = _several_seeds([n for n, _ in rows])
        panels = [("Ground truth", (t_amp, t_ph))] + [(_arm_label(n, several), p) for n, p in rows]
        fig = _figure((7.6, 0.3 + _row_height(t_amp.shape) * len(panels)), layout="compressed")
        axes = fig.subplots(len(panels), 2, squeeze=False)
        for (label, pair), (ax_a, ax_p) in zip(panels, axes, strict=True):
            if pair is None:
                for ax, part in ((ax_a, "amplitude"), (ax_p, "phase")):
                    ax.set_title(f"{label}: {part}")
                    _na(ax, "n/a (no reconstruction)")
                continue
            _image_panel(
                fig,
                ax_a,
                pair[0],
                cmap=AMPLITUDE_CMAP,
                vmin=amp_lim[0],
                vmax=amp_lim[1],
                title=f"{label}: amplitude",
                cbar_label="|O| (unitless)",
                extend=_extend(pair[0], *amp_lim),
            )
            _image_panel(
                fig,
                ax_p,
                pair[1],
                cmap=cmap_ph,
                vmin=ph_lim[0],
                vmax=ph_lim[1],
                title=f"{label}: phase",
                cbar_label="phase (rad)",
                extend=_extend(pair[1], *ph_lim),
            )
        _label_image_axes(axes)
        fig.suptitle("Reconstructions (registered, common colour scale per column)", fontsize=11)
    return fig


def _extend(img: np.ndarray, vmin: float, vmax: float) -> str:
    """Colour-bar arrows where ``img`` leaves the colour scale (saturated pixels)."""
    finite = img[np.isfinite(img)]
    if not finite.size:
        return "neither"
    low, high = bool(finite.min() < vmin), bool(finite.max() > vmax)
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(low, high)]


def error_maps(
    truth: tuple[np.ndarray, np.ndarray],
    arms: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    clip_percentile: float = 99.5,
) -> Figure:
    """Signed error (arm - truth) of each arm: rows arms, columns amplitude | phase.

    The phase error is wrapped to (-pi, pi] (phase is defined modulo 2 pi). Each column
    shares one symmetric diverging scale ``[-L, L]`` with ``L`` the ``clip_percentile``
    percentile of ``|error|`` over all arms (a handful of edge pixels do not wash out
    the rest); pixels beyond it saturate and the colour bar shows an arrow. Each panel's
    title gives the RMSE over its finite pixels.
    """
    (t_amp, t_ph), rows = _images(truth, arms)
    if not 0 < clip_percentile <= 100:
        raise ValueError(f"clip_percentile must be in (0, 100], got {clip_percentile}")
    with _style():
        if not rows:
            return _message_figure("no reconstructions to compare with the truth")
        errs = []
        for name, pair in rows:
            if pair is None:
                errs.append((name, None))
                continue
            d_amp = pair[0] - t_amp
            d_ph = np.angle(np.exp(1j * (pair[1] - t_ph)))
            d_ph[~np.isfinite(pair[1] - t_ph)] = np.nan
            errs.append((name, (d_amp, d_ph)))
        lims = [_symmetric_limit([e[i] for _, e in errs if e is not None], clip_percentile) for i in (0, 1)]
        several = _several_seeds([n for n, _ in rows])
        fig = _figure((7.6, 0.3 + _row_height(t_amp.shape) * len(rows)), layout="compressed")
        axes = fig.subplots(len(rows), 2, squeeze=False)
        for (name, err), row in zip(errs, axes, strict=True):
            label = _arm_label(name, several)
            for i, (ax, part, unit) in enumerate(
                zip(row, ("amplitude", "phase"), ("Δ|O| (unitless)", "Δφ (rad)"), strict=True)
            ):
                if err is None:
                    ax.set_title(f"{label}: {part} error")
                    _na(ax, "n/a (no reconstruction)")
                    continue
                e = err[i]
                finite = e[np.isfinite(e)]
                rmse = float(np.sqrt(np.mean(finite**2))) if finite.size else math.nan
                _image_panel(
                    fig,
                    ax,
                    e,
                    cmap=ERROR_CMAP,
                    vmin=-lims[i],
                    vmax=lims[i],
                    title=f"{label}: {part} error\nRMSE {_fmt(rmse, ' rad' if i else '')}",
                    cbar_label=unit,
                    extend=_extend(e, -lims[i], lims[i]),
                )
        _label_image_axes(axes)
        fig.suptitle("Signed errors against the ground truth (symmetric scale per column)", fontsize=11)
    return fig


def _symmetric_limit(errors: list[np.ndarray], percentile: float) -> float:
    vals = [np.abs(e[np.isfinite(e)]) for e in errors]
    vals = np.concatenate(vals) if vals else np.zeros(0)
    if not vals.size:
        return 1.0
    lim = float(np.percentile(vals, percentile))
    if lim <= 0:
        lim = float(vals.max())
    return lim if lim > 0 else 1e-6


# ----------------------------------------------------------------------- loss curves
def loss_curves(curves: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Training (dashed) and validation (solid) loss per epoch of every mode, one panel per
    model and seed.

    ``curves`` is the convergence item's ``evidence["curves"]``: ``{"pinn-s0": {"off":
    {"train": [...], "val": [...]}, "jit": {...}}}``. Epochs count from 1. The y axis is
    logarithmic when every finite loss of the panel is positive and they span more than
    a decade; otherwise linear (a Poisson negative log-likelihood can be negative). A
    panel's title gives the largest relative difference of a mode's final validation
    loss from ``off``'s.
    """
    if not isinstance(curves, Mapping):
        raise ValueError(f"curves: expected the convergence evidence's curves dict, got {type(curves).__name__}")
    for key, group in curves.items():
        if not isinstance(group, Mapping) or not all(isinstance(v, Mapping) for v in group.values()):
            raise ValueError(f"curves[{key!r}]: expected a dict mode -> {{'train': [...], 'val': [...]}}")
    with _style():
        if not curves:
            return _message_figure("no pair of an XLA mode and off with loss histories")
        from matplotlib.lines import Line2D
        from matplotlib.ticker import FixedLocator, MaxNLocator

        def order(key):
            model, _, seed = str(key).rpartition("-")
            number = int(seed[1:]) if seed[:1] == "s" and seed[1:].isdigit() else -1
            return (number, _model_rank(model), str(key))

        keys = sorted(curves, key=order)
        ncols = min(len(keys), 2)
        nrows = math.ceil(len(keys) / ncols)
        fig = _figure((4.3 * ncols + 0.3, 3.1 * nrows + 0.8))
        axes = fig.subplots(nrows, ncols, squeeze=False)
        drawn: dict[tuple[str, str], None] = {}
        for ax, key in zip(axes.flat, keys, strict=False):
            group = curves[key]
            finite: list[np.ndarray] = []
            longest = 0
            finals = {}
            for mode in sorted(group, key=_mode_rank):
                for kind, ls in (("train", "--"), ("val", "-")):
                    y = _floats(group[mode].get(kind), f"curves[{key!r}][{mode!r}][{kind!r}]")
                    if not y.size:
                        continue
                    x = np.arange(1, y.size + 1)
                    ax.plot(
                        x,
                        y,
                        ls=ls,
                        color=arm_colour(mode),
                        marker="o" if y.size <= 25 else None,
                        markersize=2.5 if mode == "off" else 3.5,
                        lw=_line_width(mode, kind),
                        zorder=3 if mode == "off" else 2,
                    )
                    finite.append(y[np.isfinite(y)])
                    longest = max(longest, y.size)
                    drawn[(mode, kind)] = None
                    if kind == "val" and math.isfinite(y[-1]):
                        finals[mode] = float(y[-1])
            title = _group_label(key)
            if not longest:
                ax.set_title(title)
                _na(ax, "n/a (no loss history)")
                continue
            vals = np.concatenate(finite) if finite else np.zeros(0)
            if vals.size and vals.min() > 0 and vals.max() / vals.min() > 10:
                ax.set_yscale("log")
            rels = [
                abs(v - finals["off"]) / max(abs(finals["off"]), 1e-12)
                for m, v in finals.items()
                if m != "off" and "off" in finals
            ]
            ax.set_title(
                f"{title}\nlargest final validation-loss difference from off: "
                + (f"{max(rels):.2%}" if rels else "n/a")
            )
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
                [], [], color=arm_colour(mode), ls=ls, lw=_line_width(mode, kind), label=f"{_arm_word(mode)}, {word}"
            )
            for mode in MODE_COLOURS
            for kind, ls, word in (("train", "--", "training"), ("val", "-", "validation"))
            if (mode, kind) in drawn
        ]
        if handles:
            fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4))
        fig.suptitle("Loss per epoch, every XLA mode vs off", fontsize=11)
    return fig


# ---------------------------------------------------------------- step-time boxplots
def _bench_arms(arms: Any) -> dict[str, dict[str, Mapping]]:
    if isinstance(arms, Mapping) or not isinstance(arms, Sequence):
        raise ValueError(f"arms: expected bench.json's 'arms' list, got {type(arms).__name__}")
    by_model: dict[str, dict[str, Mapping]] = {}
    for i, a in enumerate(arms):
        if not isinstance(a, Mapping):
            raise ValueError(f"arms[{i}]: expected a dict, got {type(a).__name__}")
        if not isinstance(a.get("model"), str) or a.get("mode") not in MODE_COLOURS:
            raise ValueError(
                f"arms[{i}]: needs 'model' (str) and 'mode' (one of {', '.join(MODE_COLOURS)}), "
                f"got {a.get('model')!r}, {a.get('mode')!r}"
            )
        if a["mode"] in by_model.setdefault(a["model"], {}):
            raise ValueError(f"arms[{i}]: a second {a['model']} {a['mode']} arm; one per (model, mode) expected")
        by_model[a["model"]][a["mode"]] = a
    return by_model


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
    with _style():
        if not by_model:
            return _message_figure("no benchmark arms")
        models = sorted(by_model, key=lambda m: (_model_rank(m), m))
        contexts = ["alone"] + (
            ["shared"] if any("shared" in a for per in by_model.values() for a in per.values()) else []
        )
        modes = sorted({m for per in by_model.values() for m in per}, key=_mode_rank)
        fig = _figure((max(1.25 * len(modes) * len(models) + 1.2, 5.2), 3.9 * len(contexts) + 0.6))
        axes = fig.subplots(len(contexts), len(models), squeeze=False)
        rng = np.random.default_rng(0)  # the jitter is decoration: deterministic, same every render
        for row, context in enumerate(contexts):
            for ax, model in zip(axes[row], models, strict=True):
                ticks, medians, counts = [], {}, []
                for pos, mode in enumerate(modes):
                    a = by_model[model].get(mode)
                    colour = arm_colour(mode)
                    source = (a if context == "alone" else a.get("shared")) if a is not None else None
                    if source is None:
                        ticks.append(f"{mode}\n(not measured)")
                        ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color="#777777")
                        continue
                    samples = _floats(source.get("step_samples_s"), f"{model} {mode} step_samples_s") * 1e3
                    samples = samples[np.isfinite(samples)]
                    quart = source.get("step_s") if isinstance(source.get("step_s"), Mapping) else {}
                    box_style = dict(
                        positions=[pos],
                        widths=0.5,
                        patch_artist=True,
                        showfliers=False,
                        medianprops={"color": INK, "lw": 1.6},
                        boxprops={
                            "facecolor": _tint(colour),
                            "edgecolor": colour,
                            "lw": 1.4,
                            "hatch": MODEL_HATCHES.get(model, ""),
                        },
                        whiskerprops={"color": colour, "lw": 1.2},
                        capprops={"color": colour, "lw": 1.2},
                    )
                    med = math.nan
                    if samples.size:
                        ax.boxplot([samples], **box_style)
                        x = pos + rng.uniform(-0.13, 0.13, samples.size)
                        ax.scatter(
                            x,
                            samples,
                            s=12,
                            color=colour,
                            alpha=0.85,
                            edgecolors="white",
                            linewidths=0.4,
                            marker=MODEL_MARKERS.get(model, "o"),
                            zorder=3,
                        )
                        med = float(np.median(samples))
                        counts.append(samples.size)
                    elif all(math.isfinite(_number(quart.get(k), k)) for k in ("median", "q1", "q3")):
                        q1, med, q3 = (1e3 * _number(quart[k], k) for k in ("q1", "median", "q3"))
                        ax.bxp(
                            [{"med": med, "q1": q1, "q3": q3, "whislo": q1, "whishi": q3, "fliers": []}],
                            **{k: v for k, v in box_style.items() if k != "showfliers"},
                        )
                    else:
                        ax.text(pos, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", color="#777777")
                    medians[mode] = med
                    comp = _number(a.get("compile_s"), f"{model} compile_s")
                    ticks.append(f"{mode}\n{_fmt(med, ' ms')}" + (f"\ncompile {_fmt(comp, ' s')}" if row == 0 else ""))
                ax.set_xticks(range(len(modes)), ticks)
                ax.set_xlim(-0.6, len(modes) - 0.4)
                ax.set_ylim(bottom=0)
                ax.set_ylabel(f"train step, {context} (ms)")
                ax.grid(True, axis="y")
                off = medians.get("off", math.nan)
                best = min(
                    (m for m in medians if m != "off" and math.isfinite(medians[m])),
                    key=lambda m: medians[m],
                    default=None,
                )
                n = f", {min(counts)}+ steps per arm" if counts else ""
                ratio = off / medians[best] if best and medians[best] > 0 else math.nan
                ax.set_title(
                    f"{_model_name(model)}, {context}{n}\nfastest XLA mode: "
                    + (f"{best}, {ratio:.2f}× off" if math.isfinite(ratio) else "n/a")
                )
        fig.suptitle(
            "Steady-state train-step time per XLA mode\n(compile = first call: trace + compile + one step)",
            fontsize=10.5,
        )
    return fig


# ------------------------------------------------------------------ step components
COMPONENTS = (
    ("network", "network fwd+bwd", "///"),
    ("physics", "physics head + loss fwd+bwd", ""),
    ("optimizer", "optimiser update", "..."),
)


def component_bars(arms: Sequence[Mapping[str, Any]]) -> Figure:
    """Where a train step's time goes, per model and mode: one stacked bar each (network
    forward + backward, physics head with the loss, optimiser update), each part timed
    as its own function compiled under the mode, with the whole step's median (alone)
    marked. ``arms`` is ``bench.json["arms"]`` with ``components``.
    """
    by_model = _bench_arms(arms)
    with _style():
        rows = [
            (model, mode, a)
            for model in sorted(by_model, key=_model_rank)
            for mode, a in sorted(by_model[model].items(), key=lambda kv: _mode_rank(kv[0]))
            if isinstance(a.get("components"), Mapping)
        ]
        if not rows:
            return _message_figure("no step components measured")
        from matplotlib.patches import Patch

        fig = _figure((7.6, 1.6 + 0.48 * len(rows)))
        ax = fig.add_subplot()
        ys = np.arange(len(rows))[::-1].astype(float)
        labels = []
        for y, (model, mode, a) in zip(ys, rows, strict=True):
            left = 0.0
            for key, _, hatch in COMPONENTS:
                value = 1e3 * _number((a["components"].get(key) or {}).get("median"), f"{model} {mode} {key}")
                if not math.isfinite(value):
                    continue
                ax.barh(
                    y,
                    value,
                    left=left,
                    height=0.62,
                    color=_tint(arm_colour(mode), 0.45),
                    edgecolor=arm_colour(mode),
                    hatch=hatch,
                    lw=1.0,
                    zorder=2,
                )
                if value > 4:
                    ax.text(
                        left + value / 2, y, f"{value:.0f}", ha="center", va="center", fontsize=7.5, color=INK, zorder=3
                    )
                left += value
            step = 1e3 * _number((a.get("step_s") or {}).get("median"), f"{model} {mode} step_s")
            if math.isfinite(step):
                ax.plot([step, step], [y - 0.38, y + 0.38], color=INK, lw=2.0, zorder=4)
            labels.append(f"{_model_name(model)}, {mode}\nstep {_fmt(step, ' ms')}")
        ax.set_yticks(ys, labels)
        ax.set_xlim(left=0)
        ax.set_xlabel("time per train step (ms, medians); black tick: the whole step, timed as one function")
        ax.grid(True, axis="x", zorder=0)
        ax.tick_params(axis="y", length=0)
        handles = [Patch(facecolor="white", edgecolor=INK, hatch=hatch, label=word) for _, word, hatch in COMPONENTS]
        fig.legend(handles=handles, loc="outside lower center", ncols=3)
        ax.set_title("Where the train step's time goes, per XLA mode (alone)")
    return fig


def _tint(colour: str, amount: float = 0.78) -> tuple[float, float, float]:
    """``colour`` mixed with white (an opaque fill under the hatching and the points)."""
    from matplotlib.colors import to_rgb

    return tuple(c + (1 - c) * amount for c in to_rgb(colour))


def _fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.3g}{unit}" if abs(value) < 1000 else f"{value:.0f}{unit}"


# ----------------------------------------------------------------------- speed-up bars
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
    for side in (
        sorted((t for t in _NICE_RATIOS if t > 1), key=float),
        sorted((t for t in _NICE_RATIOS if t < 1), reverse=True),
    ):
        last = 0.0
        for t in side:
            if abs(math.log(t)) > half:
                break
            if abs(math.log(t)) - last >= gap:
                ticks.append(t)
                last = abs(math.log(t))
    return sorted(ticks)


def _label_model(label: str) -> str | None:
    low = label.lower()
    return next((m for m in _MODEL_ORDER if m in low), None)


def _label_mode(label: str) -> str | None:
    words = label.replace(",", " ").split()
    return next((m for m in MODE_COLOURS if m in words), None)


def speedup_bars(ratios: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Speed-up of each XLA mode vs off per measurement: horizontal bars from 1 with
    bootstrap 95 % intervals.

    ``ratios`` maps a label (``"PINN jit, train step alone"``) to ``{"ratio", "low",
    "high"}``, the ratio being "how many times faster than off" (off's time / the mode's).
    The x axis is logarithmic and symmetric about 1, so 2x faster and 2x slower are
    equally long. A bar has its mode's colour (named in the label) and is hatched for
    the baseline; NaN ``low`` or ``high`` draws no interval, a NaN ratio no bar ("n/a").
    Labels keep their order.
    """
    if not isinstance(ratios, Mapping):
        raise ValueError(f"ratios: expected a dict label -> {{'ratio', 'low', 'high'}}, got {type(ratios).__name__}")
    rows = []
    for label, r in ratios.items():
        if not isinstance(r, Mapping) or "ratio" not in r:
            raise ValueError(f"ratios[{label!r}]: expected a dict with 'ratio' (and 'low', 'high'), got {r!r}")
        vals = [_number(r.get(k), f"ratios[{label!r}][{k!r}]") for k in ("ratio", "low", "high")]
        vals = [v if v > 0 else math.nan for v in vals]  # a ratio <= 0 is not a timing ratio
        rows.append((str(label), *vals))
    with _style():
        if not rows:
            return _message_figure("no speed-up ratios")
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        finite = [v for _, *vals in rows for v in vals if math.isfinite(v)]
        half = max([abs(math.log(v)) for v in finite] + [math.log(1.3)]) * 1.18
        lo, hi = math.exp(-half), math.exp(half)
        fig = _figure((7.4, 1.9 + 0.62 * len(rows)))
        ax = fig.add_subplot()
        ax.set_xscale("log")
        ax.axvspan(lo, 1.0, color=NOXLA_COLOUR, alpha=0.07, lw=0)
        ax.axvspan(1.0, hi, color=XLA_COLOUR, alpha=0.07, lw=0)
        ys = np.arange(len(rows))[::-1].astype(float)
        ticklabels = []
        for y, (label, ratio, low, high) in zip(ys, rows, strict=True):
            model = _label_model(label)
            if not math.isfinite(ratio):
                ax.text(1.0, y, "  n/a", va="center", ha="left", color="#777777")
                ticklabels.append(f"{label}\nn/a")
                continue
            colour = arm_colour(_label_mode(label) or ("jit" if ratio >= 1.0 else "off"))
            ax.barh(
                y,
                ratio - 1.0,
                left=1.0,
                height=0.56,
                color=_tint(colour, 0.35),
                edgecolor=colour,
                lw=1.2,
                hatch=MODEL_HATCHES.get(model, ""),
                zorder=2,
            )
            ci = ""
            if math.isfinite(low) and math.isfinite(high):
                ax.errorbar(
                    ratio,
                    y,
                    xerr=[[max(ratio - low, 0.0)], [max(high - ratio, 0.0)]],
                    fmt="none",
                    ecolor=INK,
                    elinewidth=1.3,
                    capsize=4,
                    zorder=3,
                )
                ci = f" [{low:.2f}, {high:.2f}]"
            ticklabels.append(f"{label}\n{ratio:.2f}×{ci}")
        ax.axvline(1.0, color=INK, lw=1.2, zorder=4)
        # A strip under the bars for the labels of the line and of the two regions.
        label_y = -0.95
        ax.text(
            1.0,
            label_y,
            " no change ",
            ha="center",
            va="center",
            fontsize=8.5,
            color=INK,
            zorder=5,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": INK, "lw": 0.8},
        )
        ax.text(
            0.015,
            label_y,
            "◀ slower than off",
            transform=ax.get_yaxis_transform(),
            ha="left",
            va="center",
            color=NOXLA_COLOUR,
            fontsize=9.5,
            fontweight="bold",
        )
        ax.text(
            0.985,
            label_y,
            "faster than off ▶",
            transform=ax.get_yaxis_transform(),
            ha="right",
            va="center",
            color=XLA_COLOUR,
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


# ------------------------------------------------------------------------- FRC curves
def frc_curves(arms: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Fourier ring correlation with the ground truth vs spatial frequency: amplitude | phase.

    ``arms[name] = {"freq": [...], "amp": [...], "phase": [...]}`` with ``freq`` in
    cycles/pixel (0 .. 0.5). One line per arm, coloured by XLA mode and styled by model
    (PINN solid, baseline dashed), XLA modes wider and underneath so that identical
    arms all stay visible; the usual 0.5 and 1/7 thresholds are drawn and labelled. A ``None`` arm or a missing curve is left out of its panel.
    """
    if not isinstance(arms, Mapping):
        raise ValueError(f"arms: expected a dict name -> {{'freq', 'amp', 'phase'}}, got {type(arms).__name__}")
    curves = []
    for name in sorted(arms, key=_arm_sort_key):
        a = arms[name]
        if a is None:
            continue
        if not isinstance(a, Mapping):
            raise ValueError(f"arms[{name!r}]: expected a dict with 'freq', 'amp', 'phase', got {type(a).__name__}")
        freq = _floats(a.get("freq"), f"arms[{name!r}]['freq']")
        parts = {}
        for part in ("amp", "phase"):
            c = _floats(a.get(part), f"arms[{name!r}][{part!r}]")
            if c.size and c.size != freq.size:
                raise ValueError(f"arms[{name!r}]: {part!r} has {c.size} values but 'freq' has {freq.size}")
            if c.size:
                parts[part] = c
        curves.append((name, freq, parts))
    with _style():
        fig = _figure((9.0, 4.0))
        axes = fig.subplots(1, 2, squeeze=False)[0]
        several = _several_seeds([n for n, *_ in curves])
        for ax, part, what in zip(axes, ("amp", "phase"), ("Amplitude", "Phase"), strict=True):
            lows = [0.0]
            n_lines = 0
            for name, freq, parts in curves:
                if part not in parts:
                    continue
                model, mode, _ = _parse(name)
                ax.plot(
                    freq,
                    parts[part],
                    color=arm_colour(mode),
                    ls=MODEL_LINESTYLES.get(model, ":"),
                    lw=2.6 if mode != "off" else 1.4,
                    zorder=3 if mode == "off" else 2,
                    label=_arm_label(name, several),
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
                ax.text(0.5, 0.5, "n/a (no FRC curve)", transform=ax.transAxes, ha="center", color="#777777")
        handles, labels = axes[0].get_legend_handles_labels()
        h2, l2 = axes[1].get_legend_handles_labels()
        for h, lab in zip(h2, l2, strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 4))
        fig.suptitle(
            "Resolution: Fourier ring correlation (higher is better; crossings of 0.5 and 1/7 = resolution)",
            fontsize=11,
        )
    return fig


# ------------------------------------------------------------------ quality vs time
def quality_vs_time(points: Sequence[Mapping[str, Any]], target: float | None = 0.85) -> Figure:
    """Amplitude and phase SSIM against training minutes, one line per recipe (model and settings).

    ``points``: ``{"recipe", "minutes", "amp_ssim", "phase_ssim"}`` each (a recipe's
    points are joined in order of minutes), so a user can pick a budget; ``target``
    draws the quality the default study aims for.
    """
    fig = _figure((9.0, 4.4))
    axes = fig.subplots(1, 2, sharex=True)
    recipes: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        recipes.setdefault(str(p["recipe"]), []).append(p)
    for i, (recipe, pts) in enumerate(recipes.items()):
        pts = sorted(pts, key=lambda p: float(p["minutes"]))
        colour = OKABE_ITO[1:][i % (len(OKABE_ITO) - 1)]
        for ax, key in zip(axes, ("amp_ssim", "phase_ssim"), strict=True):
            ax.plot(
                [float(p["minutes"]) for p in pts],
                [float(p[key]) for p in pts],
                marker=MODEL_MARKERS["pinn"],
                color=colour,
                label=recipe,
            )
    for ax, what in zip(axes, ("amplitude", "phase"), strict=True):
        if target is not None:
            ax.axhline(target, color=INK, linestyle=":", linewidth=1.0)
        ax.set_xlabel("training minutes per arm (this machine)")
        ax.set_ylabel(f"{what} SSIM")
        ax.set_title(what)
        ax.grid(True)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 2))
    return fig


# ------------------------------------------------------------------------ rendering
def _close(fig: Figure) -> None:
    """Unregister ``fig`` from pyplot if it ever was (figures of this module never are)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


def to_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of ``fig`` rendered under :data:`STYLE`; the figure is closed afterwards."""
    buf = io.BytesIO()
    try:
        with _style():
            fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    finally:
        _close(fig)
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> None:
    """Write ``fig`` as a PNG at ``path`` atomically (rendered first, then renamed into place); closes it."""
    from ptycho.artifacts import atomic_write

    data = to_png(fig, dpi=dpi)

    def write(tmp: str) -> None:
        Path(tmp).write_bytes(data)

    atomic_write(path, write, suffix=".png")
