"""The quality item's section: per arm and per comparison across seeds, on measured data the
arms against each other, and the reconstructions, error maps and FRC curves (the judging:
:mod:`ptycho.study.checklist.quality` and :mod:`~ptycho.study.checklist.agreement`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptycho.errors import PtychoError
from ptycho.study.arms import Arm
from ptycho.study.checklist.agreement import OWN
from ptycho.study.checklist.quality import COLUMNS
from ptycho.study.checklist.quality_evidence import AgreementEvidence, evidence_of
from ptycho.study.report.items import seeds
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Figure, Section
from ptycho.study.tables import Table, fmt


def tables(report: StudyReport) -> list[Table]:
    ev = evidence_of(report.evidence("quality"))
    if isinstance(ev, AgreementEvidence):
        return measured_tables(ev, report)
    header = list(COLUMNS.values())
    out = [
        (
            "Per arm (test split, stitched objects, mean over images)",
            ["arm", *header],
            [[arm, *(fmt(m.get(k)) for k in COLUMNS)] for arm, m in sorted(ev.per_arm.items())],
        )
    ]
    found = report.seed_comparisons("quality")
    if found:
        compared = {(name, metric.replace("_", " ")): c for name, per in found.items() for metric, c in per.items()}
        out.append(seeds.comparison_table(compared))
        source = seeds.source_table(compared)
        if source:
            out.append(source)
    for differences, title, first in (
        (ev.arm_differences, "Each arm minus its reference (off, or float32), per seed", "comparison"),
        (ev.pinn_minus_baseline, "PINN minus baseline (physics-informed vs supervised)", "mode, seed"),
    ):
        if differences:
            rows = [[name, *(fmt(d.get(k)) for k in COLUMNS)] for name, d in sorted(differences.items())]
            out.append((title, [first, *header], rows))
    return out


def measured_tables(ev: AgreementEvidence, report: StudyReport) -> list[Table]:
    """The quality section's tables on measured data (``ev``: the item's evidence)."""
    out: list[Table] = [
        (
            "Per arm: no ground truth (measured data), so no scores; the data misfit of its stitched objects (Poisson "
            "NLL per measured pixel above the saturated model's, 0.5 at the noise level; lower explains the data "
            "better), the half-scan FRC's mean over the rings (the reconstructions from the two halves of the scan "
            "correlated; higher agrees more) and where it crosses the 1/2-bit curve (the resolution, cycles/px; "
            "higher is finer, 0.5 is Nyquist)",
            ["arm", *(label for _, label, _ in OWN.values())],
            [[arm, *(fmt(m.get(k)) for k in OWN)] for arm, m in sorted(ev.per_arm.items())],
        )
    ]
    if ev.between_arms:
        out.append(
            (
                "Each arm's reconstruction against its reference arm's (off, or float32) of the same seed, scored as "
                "against a truth (registered, amplitude scaled, phase plane removed; 1 = the same reconstruction)",
                ["comparison", "arm", "reference", *COLUMNS.values()],
                [
                    [key, s.arm, s.reference, *(fmt(s.score(k)) for k in COLUMNS)]
                    for key, s in sorted(ev.between_arms.items())
                ],
            )
        )
    comparisons = {
        (name, c.label or metric): c
        for name, per in report.seed_comparisons("quality").items()
        for metric, c in per.items()
    }
    if comparisons:
        out.append(
            seeds.comparison_table(
                comparisons,
                "Each arm against its reference across seeds: the data misfit as the relative difference (arm - "
                "reference) / reference against the relative margin, the half-scan FRC means as differences against "
                "the SSIM margin, both paired by seed; the SSIM between the arms against the SSIM between two seeds of "
                "the reference arm (unpaired), against the SSIM margin",
            )
        )
    if ev.seed_to_seed:
        out.append(
            (
                "Yardstick: two trainings of the same reference arm with different seeds, against each other (mean "
                "over pairs of seeds)",
                ["reference arm", "amp SSIM", "phase SSIM", "pairs of seeds"],
                [
                    [name, fmt(s.amp_ssim), fmt(s.phase_ssim), str(s.pairs)]
                    for name, s in sorted(ev.seed_to_seed.items())
                ],
            )
        )
    return out


def against_reference(results) -> tuple[Arm, dict[Arm, dict[str, Any]]] | None:
    """For the quality figures on measured data: the reference arm and every other
    arm's first stitched object compared with the reference arm's
    (:func:`ptycho.analysis.metrics.compare`, as against a truth); None when the figures'
    dataset has a ground truth. The reference is the first ``off`` arm at float32 (else at
    its first precision) of the first model and seed."""
    from ptycho.analysis.metrics import compare
    from ptycho.nets.precision import REFERENCE_PRECISION

    if results.ground_truth:
        return None
    firsts = {}
    for path in results.stitched:
        images = results.images[Path(path).stem]
        if len(images) == 0:
            raise PtychoError(f"{path}: no stitched object; re-run stitch")
        firsts[Arm.parse(Path(path).stem)] = images[0]
    if not firsts:
        raise PtychoError("no stitched objects to show; pass the arms' stitched files")
    ordered = sorted(firsts, key=lambda a: a.order)
    ref = next(
        (a for a in ordered if a.is_reference and a.precision == REFERENCE_PRECISION),
        next((a for a in ordered if a.is_reference), ordered[0]),
    )
    compared = {arm: compare(image, firsts[ref]) for arm, image in firsts.items() if arm != ref}
    if not compared:
        raise PtychoError(f"only the reference arm {ref.name} was reconstructed: no other arm to compare with it")
    return ref, compared


def _grid(inputs):
    from ptycho.study.figures import images

    measured = against_reference(inputs)  # no ground truth: the reference arm stands in for it
    if measured:
        ref, compared = measured
        return images.reconstruction_grid(*images.common_window(compared), reference=f"Reference: {ref.label()}")
    return images.reconstruction_grid(*images.common_window(inputs.compared))


def _errors(inputs):
    from ptycho.study.figures import images

    measured = against_reference(inputs)
    if measured:
        ref, compared = measured
        return images.error_maps(*images.common_window(compared), against=f"the reference arm ({ref.label()})")
    return images.error_maps(*images.common_window(inputs.compared))


def _frc(inputs):
    from ptycho.study.figures import curves
    from ptycho.study.figures.style import message_figure

    if not inputs.ground_truth:
        return message_figure(
            "no ground truth (measured data): no Fourier ring correlation with a truth;\n"
            "the arms against each other are in the quality tables",
            (6.5, 2.0),
        )
    return curves.frc_curves(inputs.frc)


SECTION = Section(
    name="quality",
    title="Quality",
    tables=tables,
    figures=(
        Figure("reconstructions", "reconstruction grid", _grid),
        Figure("errors", "error maps", _errors),
        Figure("frc", "Fourier ring correlation curves", _frc),
    ),
)
