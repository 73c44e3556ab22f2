"""The gradients item's section: per model and comparison the variables that differ most,
and the finite-difference check (the judging: :mod:`ptycho.study.checklist.gradients`)."""

from __future__ import annotations

from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.study.checklist.differences import GradientsEvidence
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Section
from ptycho.study.tables import Table, fmt


def tables(report: StudyReport) -> list[Table]:
    """Per model and comparison: the variable that differs most (over the whole gradient's
    norm), the whole weight gradient's and the inputs' relative differences, the losses and
    the limit."""
    ev = GradientsEvidence.from_json(report.evidence("gradients"))
    rows = []
    for model, m in ev.models.items():
        for c in m.comparisons.values():
            name, worst = max(c.per_variable.items(), key=lambda kv: kv[1])
            rows.append(
                [
                    model,
                    c.compared,
                    f"{name}: {fmt(worst)}",
                    fmt(c.whole_weights),
                    fmt(c.inputs) + ("" if c.inputs_judged else " (not judged)"),
                    f"{fmt(c.loss)} / {fmt(c.loss_reference)}",
                    fmt(c.limit),
                ]
            )
    fd = ev.finite_differences
    if fd is not None:
        limit = fmt(ev.limits.get(REFERENCE_PRECISION, float("nan")))
        rows.append(
            [
                "PINN physics (float64)",
                f"analytic vs finite differences, {fd.points} points",
                "",
                fmt(fd.max_rel),
                "",
                "",
                limit,
            ]
        )
    header = [
        "model",
        "compared",
        "largest variable difference",
        "whole weight gradient",
        "inputs",
        "loss / reference",
        "limit",
    ]
    return [("", header, rows)]


SECTION = Section(name="gradients", title="Gradients", tables=tables)
