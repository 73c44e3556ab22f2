"""The accuracy item's section: the physics and the trained networks' differences, each
with its limit (the judging: :mod:`ptycho.study.checklist.accuracy`)."""

from __future__ import annotations

from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.study.checklist.differences import AccuracyEvidence, NetworkDifference, TranslationCase
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Section
from ptycho.study.tables import Table, fmt


def tables(report: StudyReport) -> list[Table]:
    """The physics per dtype and shift kind, and per mode; the trained networks per model
    and comparison, worst over the models (seeds, the arms' modes); each row with its limit."""
    ev = AccuracyEvidence.from_json(report.evidence("accuracy"))
    strict = fmt(ev.limits.get(REFERENCE_PRECISION, float("nan")))
    groups: dict[tuple[str, str], list[TranslationCase]] = {}
    for case in ev.translation:
        groups.setdefault((case.dtype, case.shifts), []).append(case)
    rows = [
        [
            f"translation, {dtype}, {shifts} shifts",
            "XLA-safe vs reference",
            ", ".join(str(c.batch) for c in cases),
            fmt(max(c.max_abs for c in cases)),
            fmt(max(c.mean_abs for c in cases)),
            strict,
        ]
        for (dtype, shifts), cases in sorted(groups.items())
    ]
    if ev.forward_model is not None:
        for mode, d in ev.forward_model.per_mode.items():
            rows.append(
                ["whole forward model (relative)", f"{mode} vs off", "16", fmt(d.max_abs), fmt(d.mean_abs), strict]
            )
    trained: dict[tuple[str, str], list[tuple[NetworkDifference, int]]] = {}
    for network in ev.trained_inference.values():
        for d in network.comparisons.values():
            trained.setdefault((network.model, d.compared), []).append((d, network.samples))
    for (model, compared), found in trained.items():
        rows.append(
            [
                f"trained {model} at inference (relative)",
                f"{compared} (worst of {len(found)})",
                f"{max(samples for _, samples in found)} patterns",
                fmt(max(d.max_abs for d, _ in found)),
                fmt(max(d.mean_abs for d, _ in found)),
                fmt(found[0][0].limit),
            ]
        )
    return [("", ["what", "compared", "batch sizes", "max abs difference", "mean abs difference", "limit"], rows)]


SECTION = Section(name="accuracy", title="Accuracy", tables=tables)
