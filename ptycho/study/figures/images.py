"""The image figures: each arm's reconstruction beside the truth, and its signed error.

Both take the truth and ``{Arm: (amplitude, phase)}`` as 2-D real arrays of one shape
(:func:`common_window` cuts :func:`ptycho.analysis.metrics.compare` results to them);
an arm whose value is ``None`` is drawn as an "n/a" row; structurally wrong arrays
raise :class:`ValueError` naming the arm. Rows follow
:func:`~ptycho.study.figures.style.in_order` (model, precision, mode, seed) and are named
by :meth:`Arm.label`, which names a precision below float32.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.study.arms import Arm
from ptycho.study.figures.style import (
    AMPLITUDE_CMAP,
    ERROR_CMAP,
    MUTED,
    PHASE_CMAP,
    WRAPPED_PHASE_CMAP,
    fmt,
    in_order,
    message_figure,
    na,
    new_figure,
    several_seeds,
    style,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Pair = tuple[np.ndarray, np.ndarray]


def common_window(compared: Mapping[Arm, Mapping[str, Any]]) -> tuple[Pair, dict[Arm, Pair]]:
    """The truth and every arm, from :func:`ptycho.analysis.metrics.compare` results, over one window.

    ``compare`` removes a fixed frame, or more for an arm whose registration shift exceeds
    the allowance (a badly trained model), so the arms' scored windows can differ. The
    figures show the window all of them share, in truth coordinates (``crop`` is
    ``[row0, row1, col0, col1]``), so every panel shows the same object pixels.
    Returns ``((truth_amp, truth_phase), {arm: (amp, phase)})``.
    """
    if not compared:
        raise ValueError("no reconstructions to show")
    crops = {arm: [int(v) for v in c["crop"]] for arm, c in compared.items()}
    r0, c0 = max(k[0] for k in crops.values()), max(k[2] for k in crops.values())
    r1, c1 = min(k[1] for k in crops.values()), min(k[3] for k in crops.values())
    if r1 <= r0 or c1 <= c0:
        raise ValueError(f"the arms' scored windows do not overlap ({crops})")

    def cut(img: np.ndarray, crop: list[int]) -> np.ndarray:
        return np.asarray(img)[r0 - crop[0] : r1 - crop[0], c0 - crop[2] : c1 - crop[2]]

    shown = {arm: (cut(c["amp"], crops[arm]), cut(c["phase"], crops[arm])) for arm, c in compared.items()}
    arm, first = next(iter(compared.items()))
    truth = (cut(first["truth_amp"], crops[arm]), cut(first["truth_phase"], crops[arm]))
    return truth, shown


def _image_pair(what: str, value: Any) -> Pair | None:
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


def _images(truth: Any, arms: Any) -> tuple[Pair, list[tuple[Arm, Pair | None]]]:
    t = _image_pair("truth", truth)
    if t is None:
        raise ValueError("truth: the ground truth (amplitude, phase) is required")
    if not isinstance(arms, Mapping):
        raise ValueError(f"arms: expected a dict arm -> (amplitude, phase), got {type(arms).__name__}")
    rows = []
    for arm in in_order(arms, "arms"):
        pair = _image_pair(f"arm {arm.name!r}", arms[arm])
        if pair is not None and pair[0].shape != t[0].shape:
            raise ValueError(f"arm {arm.name!r}: shape {pair[0].shape} differs from the truth's {t[0].shape}")
        rows.append((arm, pair))
    return t, rows


def _finite_range(*arrays: np.ndarray) -> tuple[float, float] | None:
    vals = [a[np.isfinite(a)] for a in arrays if a is not None and a.size]
    vals = [v for v in vals if v.size]
    if not vals:
        return None
    return min(float(v.min()) for v in vals), max(float(v.max()) for v in vals)


def _limits(rng: tuple[float, float] | None) -> tuple[float, float]:
    if rng is None:
        return 0.0, 1.0
    lo, hi = rng
    if hi <= lo:  # a flat image: a small window centred on its value
        pad = max(abs(lo) * 0.05, 1e-6)
        return lo - pad, hi + pad
    return lo, hi


def _extend(img: np.ndarray, vmin: float, vmax: float) -> str:
    """Colour-bar arrows where ``img`` leaves the colour scale (saturated pixels)."""
    finite = img[np.isfinite(img)]
    if not finite.size:
        return "neither"
    low, high = bool(finite.min() < vmin), bool(finite.max() > vmax)
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(low, high)]


def _image_panel(
    fig: Figure, ax: Axes, img: np.ndarray, *, cmap: str, vmin: float, vmax: float, title: str, cbar_label: str
) -> None:
    """``img`` on a fixed colour scale with its colour bar (arrows where it saturates)."""
    im = ax.imshow(img, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03, extend=_extend(img, vmin, vmax))
    cb.set_label(cbar_label)
    cb.ax.tick_params(labelsize=8)
    ax.set_title(title)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    if not np.isfinite(img).any():
        ax.text(0.5, 0.5, "n/a (no finite pixel)", transform=ax.transAxes, ha="center", va="center", color=MUTED)


def _wrap_titles(arms: Iterable[Arm]) -> bool:
    """Whether panel titles put the part (``amplitude``) on a line below the arm: an arm
    label naming a precision, and a seed, is too long for one line over a panel."""
    return any(a.precision != REFERENCE_PRECISION for a in arms)


def _grid(rows: int, shape: tuple[int, int], wrap: bool) -> tuple[Figure, np.ndarray]:
    """A figure of ``rows`` x (amplitude, phase) image panels of ``shape``, each row taller
    by a title line when titles ``wrap``."""
    h, w = shape
    row_height = 2.75 * min(max(h / w, 0.4), 2.5) + 0.55 + (0.18 if wrap else 0.0)
    fig = new_figure((7.6, 0.3 + row_height * rows), layout="compressed")
    return fig, fig.subplots(rows, 2, squeeze=False)


def _label_image_axes(axes: np.ndarray) -> None:
    """Pixel-axis labels on the outer panels only (inner ones repeat them)."""
    for ax in axes[-1, :]:
        ax.set_xlabel("x (pixel)")
    for ax in axes[:, 0]:
        ax.set_ylabel("y (pixel)")


def reconstruction_grid(
    truth: Pair, arms: Mapping[Arm, Pair | None], *, phase_cmap: str | None = None, reference: str = "Ground truth"
) -> Figure:
    """Ground truth and each arm's reconstruction: rows truth, arm 1, ...; columns amplitude | phase.

    ``truth`` and each arm's value are ``(amplitude, phase)``, 2-D real arrays of one
    shape (phase in rad), already registered, scaled and plane-corrected. ``phase_cmap``
    is the phase column's colour map; by default :data:`PHASE_CMAP`, or
    :data:`WRAPPED_PHASE_CMAP` when the truth's phase spans a full turn. Each column
    shares one colour scale, the truth's range, so a reconstruction that over- or
    undershoots saturates visibly instead of being rescaled to look right. ``reference``
    names the first row (on measured data the reference arm's reconstruction stands in
    for the truth).
    """
    (t_amp, t_ph), rows = _images(truth, arms)
    with style():
        amp_lim = _limits(_finite_range(t_amp))
        ph_range = _finite_range(t_ph)
        wrapped = ph_range is not None and ph_range[1] - ph_range[0] >= 0.95 * 2 * np.pi
        cmap_ph = phase_cmap or (WRAPPED_PHASE_CMAP if wrapped else PHASE_CMAP)
        ph_lim = (-np.pi, np.pi) if wrapped else _limits(ph_range)
        several = several_seeds(a for a, _ in rows)
        wrap = _wrap_titles(a for a, _ in rows)
        sep = ":\n" if wrap else ": "
        panels = [(reference, (t_amp, t_ph))] + [(a.label(several), p) for a, p in rows]
        fig, axes = _grid(len(panels), t_amp.shape, wrap)
        for (label, pair), (ax_a, ax_p) in zip(panels, axes, strict=True):
            if pair is None:
                for ax, part in ((ax_a, "amplitude"), (ax_p, "phase")):
                    ax.set_title(f"{label}{sep}{part}")
                    na(ax, "n/a (no reconstruction)")
                continue
            for ax, img, cmap, (lo, hi), part, unit in (
                (ax_a, pair[0], AMPLITUDE_CMAP, amp_lim, "amplitude", "|O| (unitless)"),
                (ax_p, pair[1], cmap_ph, ph_lim, "phase", "phase (rad)"),
            ):
                _image_panel(fig, ax, img, cmap=cmap, vmin=lo, vmax=hi, title=f"{label}{sep}{part}", cbar_label=unit)
        _label_image_axes(axes)
        fig.suptitle("Reconstructions (registered, common colour scale per column)", fontsize=11)
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


def error_maps(
    truth: Pair, arms: Mapping[Arm, Pair | None], *, clip_percentile: float = 99.5, against: str = "the ground truth"
) -> Figure:
    """Signed error (arm - truth) of each arm: rows arms, columns amplitude | phase.
    ``against`` names the truth in the title (on measured data: the reference arm).

    The phase error is wrapped to (-pi, pi] (phase is defined modulo 2 pi). Each column
    shares one symmetric diverging scale ``[-L, L]`` with ``L`` the ``clip_percentile``
    percentile of ``|error|`` over all arms (a handful of edge pixels do not wash out
    the rest); pixels beyond it saturate and the colour bar shows an arrow. Each panel's
    title gives the RMSE over its finite pixels.
    """
    (t_amp, t_ph), rows = _images(truth, arms)
    if not 0 < clip_percentile <= 100:
        raise ValueError(f"clip_percentile must be in (0, 100], got {clip_percentile}")
    with style():
        if not rows:
            return message_figure("no reconstructions to compare with the truth")
        errs = []
        for arm, pair in rows:
            if pair is None:
                errs.append((arm, None))
                continue
            d_amp = pair[0] - t_amp
            d_ph = np.angle(np.exp(1j * (pair[1] - t_ph)))
            d_ph[~np.isfinite(pair[1] - t_ph)] = np.nan
            errs.append((arm, (d_amp, d_ph)))
        lims = [_symmetric_limit([e[i] for _, e in errs if e is not None], clip_percentile) for i in (0, 1)]
        several = several_seeds(a for a, _ in rows)
        wrap = _wrap_titles(a for a, _ in rows)
        sep = ":\n" if wrap else ": "
        fig, axes = _grid(len(rows), t_amp.shape, wrap)
        for (arm, err), row in zip(errs, axes, strict=True):
            label = arm.label(several)
            for i, (ax, part, unit) in enumerate(
                zip(row, ("amplitude", "phase"), ("Δ|O| (unitless)", "Δφ (rad)"), strict=True)
            ):
                if err is None:
                    ax.set_title(f"{label}{sep}{part} error")
                    na(ax, "n/a (no reconstruction)")
                    continue
                e = err[i]
                finite = e[np.isfinite(e)]
                rmse = float(np.sqrt(np.mean(finite**2))) if finite.size else math.nan
                title = f"{label}{sep}{part} error\nRMSE {fmt(rmse, ' rad' if i else '')}"
                _image_panel(fig, ax, e, cmap=ERROR_CMAP, vmin=-lims[i], vmax=lims[i], title=title, cbar_label=unit)
        _label_image_axes(axes)
        fig.suptitle(f"Signed errors against {against} (symmetric scale per column)", fontsize=11)
    return fig
