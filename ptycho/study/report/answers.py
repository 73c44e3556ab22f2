"""What the report adds to the study's other MLflow runs (the MLflow view of the record):
each arm's run gets its answer (quality, inference rate, time to quality), the parent the
verdict, each item's status and value, the headline ratios with their flags and the
report's sentences as its description (:func:`answers`)."""

from __future__ import annotations

import math

from ptycho.nets.models import SUBJECT
from ptycho.study.arms import ANSWER_METRICS, Arm
from ptycho.study.report.record import StudyReport, reads_report
from ptycho.study.report.words import answer, rest_lines, verdict_line
from ptycho.tracking.record import JobRecord


def _measured_answers(report: StudyReport, arms: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``arms`` with each arm's answer when the quality item had no ground truth: its own
    measures (:data:`ptycho.study.checklist.agreement.OWN`: data misfit, half-scan
    resolutions) and the SSIM of its reconstruction against its reference arm's
    (``amp_ssim_vs_reference``, ``phase_ssim_vs_reference``; off at its precision, for off
    float32 in its mode: its evidence's ``between_arms``, the modes' pairs first); as it
    was otherwise."""
    from ptycho.study.checklist.agreement import OWN
    from ptycho.study.checklist.quality_evidence import AgreementEvidence, evidence_of

    evidence = evidence_of(report.evidence("quality"))
    if not isinstance(evidence, AgreementEvidence):
        return arms
    for name, arm in report.arms.items():
        for key in OWN:
            value = (arm.metrics or {}).get(key)
            if isinstance(value, int | float):
                arms.setdefault(name, {})[key] = value
    for pair in evidence.between_arms.values():
        own = arms.setdefault(pair.arm, {})
        if "amp_ssim_vs_reference" not in own:
            for key in ("amp_ssim", "phase_ssim"):
                if math.isfinite(pair.score(key)):
                    own[f"{key}_vs_reference"] = pair.score(key)
    return arms


@reads_report
def answers(report: StudyReport) -> dict[str, JobRecord]:
    """What the report adds to other runs of the study, by run name ('' = the parent), so
    that one run per arm carries its answer and the parent the study's.

    Each arm's run (its training: :meth:`~ptycho.study.arms.Arm.run_name`) gets its
    quality (:data:`ANSWER_METRICS`), its inference rate and its time to the quality
    target of its XLA comparison (the ``off`` arm at its precision defines it; steps x
    the training's own median step, compile time apart): ``quality_time_s``,
    ``quality_time_with_compile_s``, ``quality_steps``, ``quality_reached`` (named so that
    MLflow's compare view, which sorts keys, shows them with the SSIMs, above the
    ``system/`` samples). The parent gets the verdict and each item's status (tags
    ``verdict``, ``check.<item>``) and value (metrics), the headline ratios per PINN mode
    (``xla_ttq_<stat>.<mode>[-<precision>]``: ``ratio``, its 95 % interval ``low`` and
    ``high``, ``per_step``, ``ratio_with_compile``, with paired seeds the factors'
    intervals and why the path moves (``resolvable_gain``, ``exponent``, ``loss_spread``:
    :meth:`~ptycho.study.ttq_comparison.Comparison.metrics`), and the flags
    ``upper_bound`` and ``inconclusive``, 1 when the ratio is not a measured one), and the report's three sentences as
    its description. On measured data (no ground truth) an arm's quality is its
    agreement with its reference arm and its data misfit (:func:`_measured_answers`).
    """
    arms: dict[str, dict[str, float]] = {}
    for name, arm in report.arms.items():
        metrics = {k: arm.metrics[k] for k in ANSWER_METRICS if k in (arm.metrics or {})}
        if arm.infer_patterns_per_s is not None:
            metrics["infer_patterns_per_s"] = arm.infer_patterns_per_s
        arms[name] = metrics
    arms = _measured_answers(report, arms)
    parent_metrics: dict[str, float] = {"verdict_pass": float(report.verdict == "PASS")}
    for c in report.time_to_quality.values():
        if not c.is_xla():  # an arm's target is its XLA comparison's (off at its precision)
            continue
        for side, mode, precision in (("arm", c.mode, c.precision), ("reference", c.reference_mode, c.precision)):
            for reach in getattr(c, side):
                arms.setdefault(Arm(c.model, mode, reach.seed, precision).name, {}).update(reach.metrics())
        if c.model == SUBJECT:
            key = Arm(c.model, c.mode, 0, c.precision).key("mode", "precision")
            parent_metrics.update({f"xla_ttq_{stat}.{key}": v for stat, v in c.metrics().items()})
    tags = {"verdict": report.verdict}
    for item, rec in report.items.items():
        tags[f"check.{item}"] = rec.status
        value = rec.value
        if math.isfinite(value):  # NaN: no value, nothing logged as one
            parent_metrics[f"check.{item}.value"] = value
    note = (
        f"{verdict_line(report)}. "
        + " ".join(answer(report))
        + " "
        + rest_lines(report)
        + " The report is attached (report/validation.html); each arm's run (named as the arm, e.g. pinn-off-s0) "
        "carries its quality and time to quality: filter tags.rule = 'train' and tags.outputs = 'current' and compare."
    )
    if report.looks:  # a study that added seeds until it decided: how far it went, and why it stopped
        parent_metrics.update({"looks_taken": len(report.looks), "looks_planned": report.looks[-1].plan.looks})
        parent_metrics.update({f"seeds.{m}": len(s) for m, s in report.looks[-1].seeds.items()})
        tags["looks.stopped"] = report.looks[-1].why
    tags["mlflow.note.content"] = note
    out = {"": JobRecord(metrics=parent_metrics, tags=tags)}
    out.update({name: JobRecord(metrics=m) for name, m in arms.items() if m})
    return out
