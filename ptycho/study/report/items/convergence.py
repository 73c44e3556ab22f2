"""The convergence item's section: the comparison across seeds, the per-seed final losses
and the loss curves (the judging: :mod:`ptycho.study.checklist.convergence`)."""

from __future__ import annotations

from ptycho.study.checklist.convergence import ConvergenceEvidence
from ptycho.study.report.items import seeds
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Figure, Section
from ptycho.study.tables import Table, fmt


def tables(report: StudyReport) -> list[Table]:
    """The across-seed comparison (when there is one), then the per-seed final losses."""
    ev = ConvergenceEvidence.from_json(report.evidence("convergence"))
    out = []
    found = report.seed_comparisons("convergence")
    if found:
        metric = "final val loss above the floor / the reference's mean"
        compared = {(name, metric): c for name, per in found.items() for c in per.values()}
        out.append(seeds.comparison_table(compared))
        source = seeds.source_table(compared)
        if source:
            out.append(source)
    rows = [
        [
            name,
            fmt(p.final_val_loss),
            fmt(p.final_val_loss_off),
            fmt(p.relative_difference),
            ", ".join(f"{arm}: {fmt(ok)}" for arm, ok in sorted(p.decreased.items())),
        ]
        for name, p in sorted(ev.pairs.items())
    ]
    header = ["model, seed, mode", "final val loss (mode)", "final val loss (off)", "relative difference", "decreased"]
    return [*out, ("Per seed (the final validation loss read through its last readings' noise)", header, rows)]


def _draw_losses(inputs):
    from ptycho.study.figures import curves

    return curves.loss_curves(inputs.loss_curves)


SECTION = Section(
    name="convergence",
    title="Convergence",
    tables=tables,
    figures=(Figure("losses", "loss curves of every mode and off", _draw_losses),),
)
