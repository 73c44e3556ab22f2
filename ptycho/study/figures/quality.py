"""Quality against training time: amplitude and phase SSIM per training budget, one
line per recipe (drawn for ``docs/quality-vs-time.png``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ptycho.nets.models import SUBJECT
from ptycho.study.figures.style import INK, MODEL_MARKERS, OKABE_ITO, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def quality_vs_time(points: Sequence[Mapping[str, Any]], target: float | None = 0.85) -> Figure:
    """Amplitude and phase SSIM against training minutes, one line per recipe (model and settings).

    ``points``: ``{"recipe", "minutes", "amp_ssim", "phase_ssim"}`` each (a recipe's
    points are joined in order of minutes), so a user can pick a budget; ``target``
    draws the quality the default study aims for.
    """
    fig = new_figure((9.0, 4.4))
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
                marker=MODEL_MARKERS[SUBJECT],
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
