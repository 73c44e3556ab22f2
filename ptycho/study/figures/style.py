"""One style for every figure of the report: palette, colour maps, rcParams, and the
figure life cycle (a new figure, a message figure, rendering to PNG, closing).

* the words, colours, markers, line styles and hatching of models, modes and precisions
  are one table each in :mod:`ptycho.study.presentation` (re-exported here:
  :data:`MODE_COLOURS`, :data:`MODEL_LINESTYLES`, :data:`MODEL_MARKERS`,
  :data:`MODEL_HATCHES`, :data:`PRECISION_STYLES`): colour is the mode's, the model is told
  apart by line style, marker and hatching, never by colour, and the precision by a tint,
  the marker's fill and a hatching added to the model's;
* images use perceptually uniform, colour-blind-safe colour maps: ``cividis`` for
  amplitude and (unwrapped) phase, ``PuOr`` with symmetric limits for signed errors;
* every image panel has a colour bar with its unit, every panel a title and axis
  labels; sizes are chosen to be readable at 100 dpi.

Figures are built with ``Figure()`` directly, never registered with pyplot, and every
setting is applied inside :func:`style` (``matplotlib.rc_context(STYLE)``): drawing
changes no global matplotlib state and leaks no figure. :func:`to_png` and
:func:`save_png` render a figure under the same style and close it. The words for models,
modes and precisions are :data:`ptycho.study.presentation.MODEL_WORDS`,
:data:`~ptycho.study.presentation.MODE_WORDS` and :data:`~ptycho.study.presentation.PRECISION_WORDS`.
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.nets.xla import MODES
from ptycho.study.arms import Arm
from ptycho.study.presentation import (  # noqa: F401 (re-exported: the figures' one place to draw from)
    MODE_COLOURS,
    MODEL_HATCHES,
    MODEL_LINESTYLES,
    MODEL_MARKERS,
    NOXLA_COLOUR,
    OKABE_ITO,
    PRECISION_STYLES,
    UNKNOWN_COLOUR,
    XLA_COLOUR,
    mode_look,
    model_look,
    precision_look,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: A mode without a colour (not one of the package's modes).
UNKNOWN_ARM_COLOUR = UNKNOWN_COLOUR
#: Reference lines and annotations.
INK = "#333333"
#: "n/a" and other notes about what is not drawn.
MUTED = "#777777"

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


def style():
    """A context applying :data:`STYLE`; draw (and render) every figure inside it."""
    import matplotlib

    return matplotlib.rc_context(STYLE)


def new_figure(figsize: tuple[float, float], layout: str = "constrained") -> Figure:
    """A new figure, not registered with pyplot; ``"compressed"`` packs grids of images."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=layout)


def na(ax: Axes, text: str = "n/a") -> None:
    """``text`` in the middle of an otherwise empty panel."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=MUTED, fontsize=10)


def message_figure(text: str, figsize: tuple[float, float] = (5.0, 2.0)) -> Figure:
    """A figure saying ``text`` (what there is to draw is missing)."""
    fig = new_figure(figsize)
    ax = fig.add_subplot()
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    na(ax, text)
    return fig


def arm_colour(mode: str | None, precision: str = REFERENCE_PRECISION, pale: bool = True) -> str:
    """The mode's colour (:func:`~ptycho.study.presentation.mode_look`), or grey when the mode
    is unknown, lightened for a reduced precision (its look's ``lighten``) when ``pale``: a
    figure that shows no float32 arm of the same mode passes ``pale=False``, so that its
    modes keep their full, distinct colours (the precision still shows in markers and words)."""
    colour = mode_look(mode).colour if mode else UNKNOWN_ARM_COLOUR
    lighten = precision_look(precision).lighten if pale else 0.0
    if not lighten:
        return colour
    from matplotlib.colors import to_hex

    return to_hex(tint(colour, lighten))


def arm_hatch(model: str, precision: str = REFERENCE_PRECISION) -> str:
    """A bar's or box's hatching: the model's, then the precision's (:mod:`ptycho.study.presentation`)."""
    return model_look(model).hatch + precision_look(precision).hatch


def precision_marks(precision: str, marker: str, points: int) -> dict[str, Any]:
    """``plot`` keywords marking a line of ``points`` points with its precision: nothing for
    float32 (its lines stay plain), else ``marker`` in the precision's fill style on about
    a dozen of its points (every point of a shorter line)."""
    if precision == REFERENCE_PRECISION:
        return {}
    fill = precision_look(precision).fillstyle
    marks = {"marker": marker, "markersize": 5.5, "markevery": max(1, points // 12), "markerfacecoloralt": "white"}
    # The unfilled part is white, not transparent: the line does not show through and fill it.
    marks.update({"markerfacecolor": "white"} if fill == "none" else {"fillstyle": fill})
    return marks


def tint(colour: str, amount: float = 0.78) -> tuple[float, float, float]:
    """``colour`` mixed with white (an opaque fill under the hatching and the points)."""
    from matplotlib.colors import to_rgb

    return tuple(c + (1 - c) * amount for c in to_rgb(colour))


def fmt(value: float, unit: str) -> str:
    """``value`` with three significant digits (whole numbers from 1000) and ``unit``; NaN "n/a"."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.3g}{unit}" if abs(value) < 1000 else f"{value:.0f}{unit}"


def in_order(arms: Iterable[Any], what: str) -> list[Arm]:
    """``arms`` in drawing order: :attr:`~ptycho.study.arms.Arm.order` with the seed last
    (model, precision, mode, seed: the rows of one mode stay together); ValueError naming
    ``what`` for a key that is not an :class:`~ptycho.study.arms.Arm` of the package's
    models, modes and precisions."""
    arms = list(arms)
    for a in arms:
        if not isinstance(a, Arm):
            raise ValueError(f"{what}: keys must be arms (ptycho.study.arms.Arm), got {a!r}")
        if a.model not in MODELS or a.mode not in MODES or a.precision not in PRECISION_STYLES:
            raise ValueError(f"{what}: {a!r} is not an arm of the package's models, modes and precisions")
    return sorted(arms, key=lambda a: (a._replace(seed=0).order, a.seed))


def several_seeds(arms: Iterable[Arm]) -> bool:
    """Whether ``arms`` hold more than one seed (labels then name the seed)."""
    return len({a.seed for a in arms}) > 1


def several_precisions(precisions: Iterable[str]) -> bool:
    """Whether a figure's arms, of ``precisions``, hold more than one (words then name every arm's)."""
    return len(set(precisions)) > 1


def close(fig: Figure) -> None:
    """Unregister ``fig`` from pyplot if it ever was (the report's figures never are)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


def to_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of ``fig`` rendered under :data:`STYLE`; the figure is closed afterwards."""
    return render(fig, ("png",), dpi)["png"]


def render(fig: Figure, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 100) -> dict[str, bytes]:
    """``fig`` in each of ``formats`` (PNG for pages, SVG to scale and edit), rendered under
    :data:`STYLE` with no date or software stamp (the same figure gives the same bytes);
    the figure is closed afterwards."""
    out = {}
    try:
        with style():
            for fmt_ in formats:
                buf = io.BytesIO()
                metadata = {"Software": None} if fmt_ == "png" else {"Date": None, "Creator": None}
                fig.savefig(buf, format=fmt_, dpi=dpi, metadata=metadata)
                out[fmt_] = buf.getvalue()
    finally:
        close(fig)
    return out


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> None:
    """Write ``fig`` as a PNG at ``path`` atomically (rendered first, then renamed into place); closes it."""
    from ptycho.artifacts import atomic_write

    data = to_png(fig, dpi=dpi)

    def write(tmp: str) -> None:
        Path(tmp).write_bytes(data)

    atomic_write(path, write, suffix=".png")
