"""The quality item's evidence as records: what it measured, against a ground truth
(:class:`QualityEvidence`, :func:`ptycho.study.checklist.quality.quality`) or on measured
data without one (:class:`AgreementEvidence`, :func:`ptycho.study.checklist.agreement.agreement`),
written by its check (``checks/quality.json``, the report's ``items.quality.evidence``) and
read by the report's quality section, its answers and its words, so that each key is named
once, here (:mod:`ptycho.study.json_record` writes and reads them; :func:`evidence_of`
tells the two apart). Imports nothing of TensorFlow.

A score table (:data:`Scores`) maps a metric's key (``amp_ssim``, ``phase_frc50``, ... :
:data:`ptycho.study.checklist.agreement.COLUMNS`, or an arm's own measures without a truth,
:data:`~ptycho.study.checklist.agreement.OWN`) to its value: a mapping by metric, not a
record, since which metrics a table holds is the table's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.study.json_record import JsonRecord
from ptycho.study.stats import SeedComparison

#: metric key -> value (NaN where it could not be scored)
Scores = Mapping[str, float]


@dataclass(frozen=True)
class QualityEvidence(JsonRecord):
    """What the quality item measured against the ground truth: the arms' scores, their
    comparisons across seeds, and each arm's differences from its reference and from the
    supervised baseline."""

    #: arm -> its scores (mean over the test images)
    per_arm: Mapping[str, Scores] = field(default_factory=dict)
    #: comparison group (:func:`ptycho.study.checklist.seeds.seed_groups`) -> SSIM key -> judged
    comparisons: Mapping[str, Mapping[str, SeedComparison]] = field(default_factory=dict)
    threshold: float = math.nan  #: the margin in SSIM
    #: pair of arms -> the absolute difference of each SSIM
    ssim_differences: Mapping[str, Scores] = field(default_factory=dict)
    #: pair of arms (an arm and its reference, one seed) -> arm minus reference, every score
    arm_differences: Mapping[str, Scores] = field(default_factory=dict)
    #: PINN arm (mode, precision, seed) -> PINN minus the baseline, every score
    pinn_minus_baseline: Mapping[str, Scores] = field(default_factory=dict)
    #: arm -> why its training FAILED
    failed: Mapping[str, str] = field(default_factory=dict)

    @property
    def ground_truth(self) -> bool:
        return True


@dataclass(frozen=True)
class BetweenArms(JsonRecord):
    """One arm's reconstruction scored against its reference arm's (same seed) as against a
    truth (:func:`ptycho.study.checklist.agreement.between`): its scores, 1 (SSIM) for the
    same reconstruction. Stored flat, the scores beside ``arm`` and ``reference``; which
    scores they are is :data:`~ptycho.study.checklist.agreement.COLUMNS`'s, not this
    record's."""

    arm: str
    reference: str
    scores: Scores = field(default_factory=dict)

    def score(self, key: str) -> float:
        """The score named ``key`` (NaN when it was not scored)."""
        value = self.scores.get(key)
        return math.nan if value is None else float(value)

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "reference": self.reference, **self.scores}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BetweenArms:
        scores = {k: math.nan if v is None else float(v) for k, v in d.items() if k not in ("arm", "reference")}
        return cls(str(d["arm"]), str(d["reference"]), scores)


@dataclass(frozen=True)
class SeedToSeed(JsonRecord):
    """The yardstick of one reference arm: its seeds' reconstructions against each other."""

    amp_ssim: float  #: mean over the pairs of seeds
    phase_ssim: float
    pairs: int
    #: SSIM key -> pair of seeds (``"<seed>-<seed>"``) -> its SSIM
    per_pair: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class AgreementEvidence(JsonRecord):
    """What the quality item measured on data without a ground truth: each arm's own
    measures, the arms against each other, their comparisons across seeds and the
    seed-to-seed yardstick (the module docstring of :mod:`ptycho.study.checklist.agreement`)."""

    ground_truth: bool = False
    #: arm -> its own measures (data misfit, half-scan FRC: :data:`~ptycho.study.checklist.agreement.OWN`)
    per_arm: Mapping[str, Scores] = field(default_factory=dict)
    #: pair key -> the arm against its reference
    between_arms: Mapping[str, BetweenArms] = field(default_factory=dict)
    #: comparison group -> measure -> judged
    comparisons: Mapping[str, Mapping[str, SeedComparison]] = field(default_factory=dict)
    #: reference arm (model, mode, precision) with two seeds or more -> the yardstick
    seed_to_seed: Mapping[str, SeedToSeed] = field(default_factory=dict)
    threshold: float = math.nan  #: the similarity margin (the agreement, the half-scan FRC means)
    margin: float = math.nan  #: the relative margin (the misfit)
    failed: Mapping[str, str] = field(default_factory=dict)


def evidence_of(evidence: Mapping[str, Any]) -> QualityEvidence | AgreementEvidence:
    """The record of a quality item's evidence (a report's or ``checks/quality.json``'s):
    on measured data (``ground_truth`` false) its agreement's, else its quality's."""
    if evidence.get("ground_truth") is False:
        return AgreementEvidence.from_json(evidence)
    return QualityEvidence.from_json(evidence)
