"""The report in words, from its record: the verdict line and what decides it, the three
sentences (XLA's speed, XLA's quality, the precision's own effect), the lines that follow
them (the user's data, what is INCONCLUSIVE, the recommendation, the solver, the
conditions, failed trainings), the provenance and cost lines and what ``make all`` prints
last. One sentence, one function; the views and the MLflow view read them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION, SHORT
from ptycho.study import conditions_view
from ptycho.study.arms import Pair
from ptycho.study.report.record import REPORT_FILES, StudyReport, reads_report
from ptycho.study.stats import SeedComparison


@reads_report
def cost_line(report: StudyReport) -> str:
    """One sentence: the run's wall time and its largest parts (empty without benchmarks)."""
    return report.cost.words()


@reads_report
def speed_sentence(report: StudyReport) -> str:
    """XLA's own speed in one sentence: per precision, the fastest XLA mode's time to
    quality vs ``off`` at that precision with its interval, where it was timed, and the
    plain answer (faster, SLOWER, no measurable effect, not resolved)."""
    best: dict[str, Any] = {}  # per precision, the fastest measured XLA mode of the PINN
    for c in report.time_to_quality.values():
        if c.is_xla(SUBJECT) and c.measured and (c.precision not in best or c.ratio > best[c.precision].ratio):
            best[c.precision] = c
    if best:
        return (
            "Speed: XLA vs off at the same precision, time to quality in the pipeline's schedule: "
            + "; ".join(c.headline() for c in best.values())
            + "."
        )
    words = report.speed.per_step_words()
    if words:
        return f"Speed: XLA vs off at the same precision, per train step (no trained XLA pair), {words}."
    return "Speed: not measured (no PINN timings of off and an XLA mode at the same precision)."


@reads_report
def _subject_comparisons(report: StudyReport, axis: str) -> list[tuple[Pair, dict[str, SeedComparison]]]:
    """The quality item's across-seed comparisons of the study's subject along ``axis``
    ("mode" or "precision"), metric by metric, each with its
    :class:`~ptycho.study.arms.Pair` (from the arms, never from parsing the evidence's keys)."""
    from ptycho.study.checklist.seeds import seed_groups

    comparisons = report.seed_comparisons("quality")
    return [
        (g.pair, comparisons[g.key])
        for g in seed_groups(report.arms)
        if g.key in comparisons and g.pair.axis == axis and g.pair.arm.model == SUBJECT
    ]


@reads_report
def _mode_parts(report: StudyReport, vs: str, ssim) -> list[str]:
    """``"<mode> <vs>: amplitude ..., phase ..."`` for each PINN mode vs off at the same
    precision, each SSIM comparison ``m`` put in words by ``ssim(word, m)``."""
    parts = []
    for pair, c in _subject_comparisons(report, "mode"):
        arm = pair.arm
        label = arm.mode if arm.precision == REFERENCE_PRECISION else f"{arm.mode} at {SHORT[arm.precision]}"
        metrics = [ssim(word, c[k]) for k, word in (("amp_ssim", "amplitude"), ("phase_ssim", "phase")) if k in c]
        parts.append(f"{label} {vs}: " + ", ".join(metrics))
    return parts


@reads_report
def quality_sentence(report: StudyReport) -> str:
    """XLA's own effect on the reconstructions in one sentence: each PINN mode vs ``off``
    at the same precision, amplitude and phase SSIM, outcome and the interval its outcome
    reads (the ``1 - 2 alpha`` one: 90 % at the default alpha, wider when the looks spend it;
    without a ground truth: the SSIM between the two arms' reconstructions,
    :func:`agreement_sentence`)."""
    from ptycho.study.checklist.quality_evidence import evidence_of

    if not evidence_of(report.evidence("quality")).ground_truth:
        return agreement_sentence(report)

    def difference(word: str, m: SeedComparison) -> str:
        interval = f", {m.levels[0]} interval {m.low90:+.3f} to {m.high90:+.3f}" if math.isfinite(m.low90) else ""
        return f"{word} SSIM {m.difference:+.3f}{interval}: {m.outcome}"

    parts = _mode_parts(report, "- off", difference)
    if not parts:
        return f"Quality: {report.items['quality'].summary}."
    margin = report.items["quality"].threshold
    return f"Quality: XLA vs off at the same precision (PINN, margin {margin:g} SSIM): " + "; ".join(parts) + "."


@reads_report
def agreement_sentence(report: StudyReport) -> str:
    """The quality sentence on measured data: for each PINN mode against off of the same
    seed and precision, the data misfit (relative difference) and the half-scan FRC means
    (differences), each with the end of its ``1 - 2 alpha`` interval (90 % at the default
    alpha) on the worse side, and the SSIM
    between the two arms' reconstructions against the SSIM between two seeds of off, each
    with its outcome (:mod:`ptycho.study.checklist.agreement`)."""
    from ptycho.study.stats import LOWER

    def worse_end(m: SeedComparison) -> float:
        return m.high90 if m.better == LOWER else m.low90  # the 1 - 2 alpha interval's worse end

    def relative(word: str, m: SeedComparison) -> str:
        bound = f" ({m.levels[0]} interval to {worse_end(m):+.1%})" if math.isfinite(worse_end(m)) else ""
        return f"{word} {m.difference:+.1%}{bound}: {m.outcome}"

    def difference(word: str, m: SeedComparison) -> str:
        bound = f" ({m.levels[0]} interval to {worse_end(m):+.3f})" if math.isfinite(worse_end(m)) else ""
        return f"{word} {m.difference:+.3f}{bound}: {m.outcome}"

    def agreement(word: str, m: SeedComparison) -> str:
        return f"{word} {m.mean_mode:.3f} vs {m.mean_off:.3f}: {m.outcome}"

    parts = []
    for pair, c in _subject_comparisons(report, "mode"):
        arm = pair.arm
        label = arm.mode if arm.precision == REFERENCE_PRECISION else f"{arm.mode} at {SHORT[arm.precision]}"
        own = [relative("data misfit", c["data_misfit"])] if "data_misfit" in c else []
        own += [
            difference(word, c[k])
            for k, word in (("amp_half_frc_mean", "half-scan FRC mean amplitude"), ("phase_half_frc_mean", "phase"))
            if k in c
        ]
        agreed = [agreement(word, c[k]) for k, word in (("amp_ssim", "amplitude"), ("phase_ssim", "phase")) if k in c]
        parts.append(
            f"{label} vs off: "
            + ", ".join(own)
            + (f"; SSIM between the two against between two seeds of off, {', '.join(agreed)}" if agreed else "")
        )
    if not parts:
        return f"Quality: {report.items['quality'].summary}."
    from ptycho.study.checklist.quality_evidence import AgreementEvidence

    ev = AgreementEvidence.from_json(report.evidence("quality"))
    return (
        "Quality, no ground truth (measured data): each XLA mode against off of the same seed and precision (PINN; "
        f"margins {ev.margin:.0%} relative and {ev.threshold:g} similarity): " + "; ".join(parts) + "."
    )


@reads_report
def data_sentence(report: StudyReport) -> str:
    """Which data the study ran on when it was not simulated (config ``data``), or nothing."""
    from ptycho.study.data_files import data_files

    data = data_files(report.config)  # its files; data.n and data.reduce alone are no data
    if not data:
        return ""
    from ptycho.study.checklist.quality_evidence import evidence_of

    truth = evidence_of(report.evidence("quality")).ground_truth
    probe = report.probe
    refined = (
        f" Probe: the file's estimate refined by the solver on the training split ({probe['patterns']} patterns, "
        f"{probe['iterations']} iterations): it moved {probe['probe_change']:.0%} (relative, up to phase and scale), "
        f"and the solver's data misfit fell from {probe['misfit_given_probe']:.3g} with the given probe to "
        f"{probe['misfit_refined_probe']:.3g}; every arm trained, and every reconstruction was scored, with it."
        if probe
        else ""
    )
    return (
        f"Data: your own files, train {data.get('train')}, test {data.get('test')} "
        f"({'with a ground truth' if truth else 'no ground truth: measured data, nothing scored against a truth'})."
        + refined
    )


@reads_report
def precision_sentence(report: StudyReport) -> str:
    """The precision's own effect (never counted as XLA's) in one sentence."""
    words = report.speed.precision
    outcomes = [
        f"{pair.words()}: amplitude {c['amp_ssim'].outcome}, phase {c['phase_ssim'].outcome}"
        for pair, c in _subject_comparisons(report, "precision")
        if "amp_ssim" in c and "phase_ssim" in c
    ]
    if not words and not outcomes:
        return "Precision: only float32 was measured."
    quality = f"; quality {'; '.join(outcomes)}" if outcomes else ""
    return f"{words or 'Precision: no per-step timing of a reduced precision'}{quality}."


@reads_report
def answer(report: StudyReport) -> list[str]:
    """The report's three sentences: XLA's speed, XLA's quality, the precision's effect."""
    return [speed_sentence(report), quality_sentence(report), precision_sentence(report)]


@reads_report
def rest_lines(report: StudyReport) -> str:
    """What follows the three sentences: the data when it is the user's own, the items
    whose evidence is INCONCLUSIVE, the recommendation, the solver's sentence, the
    conditions' and any failed training."""
    unsettled = [name for name, item in report.items.items() if item.status == "INCONCLUSIVE"]
    parts = [
        data_sentence(report),
        f"INCONCLUSIVE: {', '.join(unsettled)} (the evidence does not settle it; each item says what would, "
        "and where that is more seeds, a new study with a larger budget_min (max_seeds auto) or max_seeds lets the "
        "looks add them)." * bool(unsettled),
    ]
    rec = report.speed.recommendation
    if rec:
        parts.append(rec + ".")
    if report.solver:
        from ptycho.study import solver_view

        parts.append(solver_view.headline(report.solver) + ".")
    parts.append(conditions_view.sentence(report))
    parts.append(failed_sentence(report))
    return " ".join(p for p in parts if p)


@reads_report
def mlflow_url(report: StudyReport) -> str:
    """The MLflow UI's page of the parent run when the run was tracked on a server (an
    http(s) tracking URI, and the experiment's id known); empty for a local store
    (``make ui`` serves it)."""
    prov = report.provenance
    uri, run, exp = prov.tracking_uri, prov.mlflow_run_id, prov.experiment_id
    if not run or not uri.startswith(("http://", "https://")) or not exp:
        return ""
    return f"{uri.rstrip('/')}/#/experiments/{exp}/runs/{run}"


@reads_report
def decided_by(report: StudyReport) -> str:
    """What decides a verdict other than PASS, in words: the failed trainings, items and
    conditions, then the items that are INCONCLUSIVE (``speedup FAIL; quality INCONCLUSIVE``);
    '' for a PASS. So the first screen says what failed without a scroll to the checklist."""
    if report.verdict == "PASS":
        return ""
    items = report.items
    failed = [f"training FAILED for {arm}" for arm in sorted(report.failed_arms)]
    failed += [f"{name} FAIL" for name, it in items.items() if it.status == "FAIL"]
    failed += [f"conditions FAIL at {', '.join(conditions_view.failing(report))}"] * bool(
        conditions_view.failing(report)
    )
    open_ = [name for name, it in items.items() if it.status == "INCONCLUSIVE"]
    return "; ".join([*failed, *([f"{', '.join(open_)} INCONCLUSIVE"] if open_ else [])])


@reads_report
def verdict_line(report: StudyReport) -> str:
    """``Verdict: FAIL (speedup FAIL; quality INCONCLUSIVE)``: the verdict and what decides it."""
    why = decided_by(report)
    return f"Verdict: {report.verdict}" + (f" ({why})" if why else "")


@reads_report
def console_lines(report: StudyReport, path: str | Path) -> list[str]:
    """What ``make all`` prints last: the verdict with the three sentences (and the
    conditions whose checks failed it, and the looks of a study that added seeds, if
    any), and where the report is."""
    from ptycho.study.looks_view import headline

    failed = conditions_view.failing(report)
    why = [f"Conditions: FAIL at {', '.join(failed)} (the report's Conditions section)."] if failed else []
    looked = [headline(report.looks)] if report.looks else []
    return [verdict_line(report), *answer(report), *why, *looked, f"Report: {path}"]


def print_answer(json_path: str | Path) -> None:
    """Print :func:`console_lines` of a published report (the workflow's ``onsuccess``):
    the verdict, the three sentences and the HTML view's path. A missing or unreadable
    report prints one line saying so, never a traceback: the run itself succeeded."""
    import json

    json_path = Path(json_path)
    try:
        report = StudyReport.from_json(json.loads(json_path.read_text()))
        lines = console_lines(report, json_path.with_name(REPORT_FILES["html"]).resolve())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"ptycho: no answer to print from {json_path} ({type(exc).__name__}: {exc})")
        return
    print("\n".join(["", *lines]), flush=True)


@reads_report
def failed_sentence(report: StudyReport) -> str:
    """One sentence naming every arm whose training diverged, or nothing."""
    failed = report.failed_arms
    return " ".join(f"Training FAILED for {arm}: {reason}." for arm, reason in sorted(failed.items()))


@reads_report
def provenance_line(report: StudyReport) -> str:
    """Which run this report is of: preset, config hash, git commit, MLflow parent run."""
    prov = report.provenance
    commit = (prov.git_commit or "")[:12] or "unknown (not a git checkout)"
    preset = prov.preset or report.config.get("preset") or "?"
    parts = [f"Preset {preset}", f"config {prov.config_hash or '?'}", f"commit {commit}"]
    auto = report.config.get("auto_precision")
    if auto:  # what `precision: auto` chose on the machine it ran on, and why
        parts.insert(1, f"precision auto = {auto['precision']} ({auto['reason']})")
    if prov.mlflow_run_id:
        parts.append(f"MLflow parent run {prov.mlflow_run_id}")
    return "; ".join(parts) + f"; generated {report.generated_utc}"
