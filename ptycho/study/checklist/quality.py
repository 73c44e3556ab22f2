"""Checklist item *quality*: each XLA mode's reconstructions are as good as ``off``'s, and
each reduced precision's as float32's.

Collected from ``ptycho evaluate``'s metrics of every arm (stitched test objects against
the ground truth); no TensorFlow. The verdict compares each mode with ``off`` across
seeds, against the seed-to-seed spread (:func:`ptycho.study.stats.seed_comparison`).
On measured data (no ground truth) each arm's data misfit, half-scan resolution and
agreement with its reference are judged instead (:mod:`ptycho.study.checklist.agreement`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ptycho.artifacts import stored_number
from ptycho.nets.models import SUBJECT
from ptycho.study.arms import Arm, pairs
from ptycho.study.checklist import agreement, seeds
from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.quality_evidence import QualityEvidence
from ptycho.study.checklist.result import FAIL, ItemResult, verdict
from ptycho.study.stats import ALPHA, HIGHER, NON_INFERIORITY, seed_comparison

#: The metrics of an arm, with their words in the report's tables: the scores the
#: comparison between arms keeps too (one table, :data:`agreement.COLUMNS`).
COLUMNS = agreement.COLUMNS
QUALITY_KEYS = tuple(COLUMNS)
SSIM_KEYS = {"amp_ssim": "amplitude SSIM", "phase_ssim": "phase SSIM"}  #: the verdict's metrics, in words


def quality(
    metrics: Mapping[str, Mapping[str, Any]],
    threshold: float,
    failed: Mapping[str, str] | None = None,
    test: str = NON_INFERIORITY,
    alpha: float = ALPHA,
) -> ItemResult:
    """SSIM/PSNR/MAE/FRC per arm; the verdict compares each mode with ``off`` (at the same
    precision) and each reduced precision with float32 (in the same mode) across seeds.

    For each such comparison (:func:`ptycho.study.arms.pairs`) and SSIM (amplitude, phase),
    :func:`seed_comparison` judges the arm - reference difference of the means over seeds, with its intervals from the
    seed-to-seed spread, against the margin ``threshold``, by ``test``: non-inferiority
    (the study's question, "without making it worse": NOT WORSE or WORSE) or equivalence
    (EQUIVALENT or DIFFERENT). The item PASSes only when every comparison is NOT WORSE (or
    EQUIVALENT), FAILs when one is WORSE (or DIFFERENT), and is INCONCLUSIVE otherwise (one
    seed per arm always is). The value is how far the 90 % intervals reach on the worse
    side (either side, two-sided): at most the threshold when the item passes. Evidence also holds every metric's
    per-seed arm - reference difference and, per mode and seed, PINN - baseline (the
    physics-informed model's margin over the supervised one): a
    :class:`~ptycho.study.checklist.quality_evidence.QualityEvidence`. An arm in ``failed``
    (diverged in training; its reconstruction is from its last good state) makes the
    item FAIL with the reason.
    """

    per_arm = {name: {k: stored_number(m["mean"].get(k)) for k in QUALITY_KEYS} for name, m in sorted(metrics.items())}
    diffs, arm_differences = {}, {}
    for pair in pairs(per_arm):
        a, b = per_arm[pair.arm.name], per_arm[pair.reference.name]
        diffs[pair.key] = {k: abs(a[k] - b[k]) for k in SSIM_KEYS}
        arm_differences[pair.key] = {k: a[k] - b[k] for k in QUALITY_KEYS}
    comparisons, words = {}, []
    for g in seeds.seed_groups(per_arm):
        comparisons[g.key] = {}
        for key in SSIM_KEYS:
            c = seed_comparison(
                {s: per_arm[n][key] for s, n in g.seeds_mode.items()},
                {s: per_arm[n][key] for s, n in g.seeds_off.items()},
                threshold,
                test,
                HIGHER,
                alpha=alpha,
            )
            comparisons[g.key][key] = c
            words.append(seeds.comparison_words(g, SSIM_KEYS[key], c))
    value, status = seeds.judge(c for per in comparisons.values() for c in per.values())
    summary = (
        "; ".join(words) if words else "no pair to compare (an XLA mode and off, or a reduced precision and float32)"
    )
    pinn_vs_baseline = {}
    for name in per_arm:
        arm = Arm.parse(name)
        base = arm._replace(model="baseline").name
        if arm.model == SUBJECT and base in per_arm:
            pinn_vs_baseline[arm.key("mode", "precision", "seed")] = {
                k: per_arm[name][k] - per_arm[base][k] for k in QUALITY_KEYS
            }
    if failed:
        value, status = float("nan"), FAIL
        summary = f"{seeds.failed_summary(failed)} (its reconstruction is from its last good state); {summary}"
    return verdict(
        ITEM.name,
        value,
        threshold,
        "<=",
        summary,
        QualityEvidence(
            per_arm=per_arm,
            comparisons=comparisons,
            threshold=float(threshold),
            ssim_differences=diffs,
            arm_differences=arm_differences,
            pinn_minus_baseline=pinn_vs_baseline,
            failed=dict(failed or {}),
        ).to_json(),
        status,
    )


def collect(inputs: Inputs, threshold: float) -> ItemResult:
    results = inputs.results
    failed, records = results.failed, results.scores
    if agreement.measured(records):
        return agreement.agreement(
            records,
            results.images,
            threshold,
            failed,
            ITEM.name,
            margin=inputs.margin,
            test=inputs.test,
            alpha=inputs.alpha,
        )
    return quality(records, threshold, failed, inputs.test, inputs.alpha)


ITEM = Item(
    name="quality",
    collect=collect,
    threshold="quality_max_ssim_diff",
)
