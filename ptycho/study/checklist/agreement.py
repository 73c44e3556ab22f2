"""The quality item without a ground truth (measured data): does XLA make a reconstruction worse?

On measured data nothing can be scored against a truth. What measured data is judged by
in the field needs none (docs/physics.md, section 6), and each is asked of an XLA mode
against ``off`` at the same precision and seed (and of a reduced precision against
float32 in the same mode), paired by seed, one-sided ("without making it worse"):

* **the data misfit** (:mod:`ptycho.solvers.misfit`: how well the reconstruction explains
  the measured counts; lower is better), as the per-seed relative difference
  ``(arm - reference) / reference``, against the study's relative margin
  (``thresholds.convergence_max_rel``, the margin of the other loss the study judges);
* **the half-scan FRC** (:func:`ptycho.analysis.metrics.half_scan`: the reconstructions from
  the two interleaved halves of the scan correlated ring by ring), amplitude and phase,
  as the difference of its mean over the rings (higher: the halves agree more) against
  the similarity margin ``thresholds.quality_max_ssim_diff``; where each curve crosses the
  1/2-bit curve (the resolution the field reports) is shown beside it, not judged: on an
  object of weak contrast it moves by tens of rings with the rings' noise;
* **the agreement, judged by the training's own variation**: the SSIM of each seed's
  reconstruction against its reference arm's (registered, amplitude scaled, phase plane
  removed, as against a truth) is set against the SSIM between two seeds of the reference
  arm (the yardstick: how alike two trainings that differ only in their seed are). XLA
  passes when its reconstructions are not further from ``off``'s than a new seed's are,
  by more than ``thresholds.quality_max_ssim_diff``. The two samples are unpaired; the
  yardstick's pairs share seeds, so its spread is that of dependent pairs (three pairs
  from three seeds), a slight understatement. With one seed per arm there is no
  yardstick, and the agreement is shown, not judged. The yardstick is measured in the
  run it judges: the more a training's seeds disagree, the further XLA may move a
  reconstruction and pass. It answers "within the training's own variation"; "not
  worse" rests on the misfit and the half-scan FRC, whose margins are fixed.

Each is :func:`ptycho.study.stats.seed_comparison` (NOT WORSE, WORSE or INCONCLUSIVE;
EQUIVALENT or DIFFERENT under ``thresholds.two_sided``); the item PASSes when all are
NOT WORSE. Asking the two arms for the same image (SSIM near 1) asks more than the
question: two trainings whose arithmetic differs by rounding do not end at the same
image (training amplifies any difference), while neither is worse (docs/siemens.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

from ptycho.artifacts import stored_number
from ptycho.errors import PtychoError
from ptycho.study.arms import Arm, pairs
from ptycho.study.checklist import seeds
from ptycho.study.checklist.quality_evidence import AgreementEvidence, BetweenArms, SeedToSeed
from ptycho.study.checklist.result import FAIL, ItemResult, verdict
from ptycho.study.solver_record import MISFIT
from ptycho.study.stats import ALPHA, HIGHER, LOWER, NON_INFERIORITY, SeedComparison, interval_levels, seed_comparison

#: The scores of a reconstruction, with their words in the tables: against the ground
#: truth (the quality item's) or, here, against the reference arm's reconstruction.
COLUMNS = {
    "amp_ssim": "amp SSIM",
    "phase_ssim": "phase SSIM",
    "amp_psnr": "amp PSNR dB",
    "phase_psnr": "phase PSNR dB",
    "amp_mae": "amp MAE",
    "phase_mae": "phase MAE rad",
    "amp_frc50": "amp FRC50 1/px",
    "phase_frc50": "phase FRC50 1/px",
}
SSIM_KEYS = {"amp_ssim": "amplitude SSIM", "phase_ssim": "phase SSIM"}
#: An arm's own measures without a truth (``ptycho evaluate``), which is better, their
#: words, and whether they are judged (as what): the misfit relative to the reference's
#: against the relative margin, the half-scan FRCs' means as differences against the
#: similarity margin of the SSIMs; the crossings (the resolutions) are shown, not judged
#: (:func:`ptycho.analysis.metrics.half_scan` says why).
OWN = {
    MISFIT: (LOWER, "data misfit", "relative"),
    "amp_half_frc_mean": (HIGHER, "amplitude half-scan FRC mean", "difference"),
    "phase_half_frc_mean": (HIGHER, "phase half-scan FRC mean", "difference"),
    "amp_half_frc": (HIGHER, "amplitude half-scan resolution 1/px", None),
    "phase_half_frc": (HIGHER, "phase half-scan resolution 1/px", None),
}


def measured(records: Mapping[str, Mapping]) -> bool:
    """Whether ``ptycho evaluate``'s records are of data without a ground truth."""
    return any(r.get("ground_truth") is False for r in records.values())


def between(images: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> dict[str, float]:
    """The mean over objects of ``images`` scored against ``reference`` as against a truth."""
    from ptycho.analysis.metrics import score_all

    try:
        mean = score_all(list(images), list(reference))["mean"]
    except ValueError as err:
        raise PtychoError(f"the arms' stitched objects cannot be compared ({err}); re-run stitch") from None
    return {k: float(mean[k]) for k in COLUMNS}


def agreement(
    records: Mapping[str, Mapping],
    images: Mapping[str, np.ndarray],
    threshold: float,
    failed: Mapping[str, str] | None = None,
    item: str = "quality",
    *,
    margin: float = 0.05,
    test: str = NON_INFERIORITY,
    alpha: float = ALPHA,
) -> ItemResult:
    """The quality item's record on measured data (the module docstring's rule).

    ``records`` are the arms' evaluate records (their data misfit and half-scan FRC),
    ``images`` their stitched objects by arm name, ``threshold`` the similarity margin
    (the agreement, the half-scan FRC means) and ``margin`` the relative one (the misfit).
    Evidence: ``ground_truth`` (false), ``per_arm`` (:data:`OWN`), ``between_arms`` (per
    pair key: the arm, its reference and the :data:`COLUMNS` scores of one against the
    other), ``comparisons`` (per group: :data:`OWN`'s judged keys and :data:`SSIM_KEYS`,
    the agreement against the yardstick, each a
    :func:`~ptycho.study.stats.seed_comparison` with its ``label``), ``seed_to_seed`` (per
    reference arm with two seeds or more: the mean SSIM between its seeds and each pair's),
    ``threshold``, ``margin`` and ``failed``: an
    :class:`~ptycho.study.checklist.quality_evidence.AgreementEvidence`.
    """
    missing = sorted(set(records) - set(images))
    if missing:
        raise PtychoError(
            f"no stitched objects for arm(s) {', '.join(missing)}: on measured data the quality item compares the "
            "arms' reconstructions; pass every arm's stitched file (check quality --stitched)"
        )
    per_arm = {name: {k: stored_number(r.get("mean", {}).get(k)) for k in OWN} for name, r in sorted(records.items())}
    found = pairs(per_arm)
    scores = {
        p.key: BetweenArms(p.arm.name, p.reference.name, between(images[p.arm.name], images[p.reference.name]))
        for p in found
    }
    by_names = {(s.arm, s.reference): s for s in scores.values()}
    groups = seeds.seed_groups(per_arm)
    yardstick = seed_to_seed(images, [g.seeds_off for g in groups])
    comparisons, words = {}, []
    for g in groups:
        common = sorted(set(g.seeds_mode) & set(g.seeds_off))
        if not common:
            words.append(f"{g.words}: no seed that both arms ran, nothing to compare")
            continue
        comparisons[g.key] = {}
        for key, (better, label, judged_as) in OWN.items():
            arm, ref = ({s: per_arm[side[s]][key] for s in common} for side in (g.seeds_mode, g.seeds_off))
            if judged_as == "relative":
                relative = {s: _relative(arm[s], ref[s]) for s in common}
                label = f"{label}, (arm - reference) / reference"
                c = seed_comparison(
                    relative, dict.fromkeys(relative, 0.0), margin, test, better, label=label, alpha=alpha
                )
                words.append(seeds.comparison_words(g, label, c, percent=True))
            elif judged_as == "difference":
                c = seed_comparison(arm, ref, threshold, test, better, label=label, alpha=alpha)
                words.append(seeds.comparison_words(g, label, c))
            else:
                continue
            comparisons[g.key][key] = c
        ruler = yardstick.get(_arm_key(g.seeds_off))
        for key, label in SSIM_KEYS.items():
            values = {s: by_names[(g.seeds_mode[s], g.seeds_off[s])].score(key) for s in common}
            if ruler is None:
                words.append(
                    f"{g.words}: {label} between their reconstructions {np.mean(list(values.values())):.4f}; "
                    "one seed of the reference arm: no seed-to-seed yardstick to judge it by"
                )
                continue
            c = seed_comparison(
                values,
                ruler.per_pair[key],
                threshold,
                test,
                HIGHER,
                alpha=alpha,
                label=f"{label} between the arms vs between seeds",
                yardstick=True,
            )
            comparisons[g.key][key] = c
            words.append(agreement_words(g.words, label, c))
    judged = [c for per in comparisons.values() for c in per.values()]
    _, status = seeds.judge(judged)
    # The comparisons are in two units (relative, SSIM): the value is each one's reach over
    # its own margin, the worst, judged <= 1 (as accuracy's worst difference over its limit).
    value = max((c.reach() / c.margin for c in judged), default=float("nan"))
    found_words = "; ".join(words) or "no pair to compare (an XLA mode and off, or a reduced precision and float32)"
    summary = (
        f"no ground truth (measured data): each arm against its reference arm of the same seed; {found_words}; "
        f"value: the worst {interval_levels(alpha)[0]} interval's reach over its margin"
    )
    if failed:
        value, status = float("nan"), FAIL
        summary = f"{seeds.failed_summary(failed)} (its reconstruction is from its last good state); {summary}"
    return verdict(
        item,
        value,
        1.0,
        "<=",
        summary,
        AgreementEvidence(
            per_arm=per_arm,
            between_arms=scores,
            comparisons=comparisons,
            seed_to_seed=yardstick,
            threshold=float(threshold),
            margin=float(margin),
            failed=dict(failed or {}),
        ).to_json(),
        status,
    )


def _relative(arm: float, reference: float) -> float:
    """``(arm - reference) / |reference|``: NaN where the reference is 0 or not finite."""
    return (arm - reference) / abs(reference) if math.isfinite(reference) and reference != 0 else float("nan")


def _arm_key(side: Mapping[int, str]) -> str:
    """The key of the arm whose seeds ``side`` names (its model, mode and precision): the
    yardstick's key of a group's reference arm."""
    return Arm.parse(next(iter(side.values())))._replace(seed=0).key("model", "mode", "precision")


def seed_to_seed(images: Mapping[str, np.ndarray], sides: Sequence[Mapping[int, str]]) -> dict[str, SeedToSeed]:
    """The yardstick: for each reference arm trained with two seeds or more, the amplitude
    and phase SSIM of each seed's reconstruction against each other seed's (``per_pair``,
    keyed ``"<seed>-<seed>"``), their means and the number of pairs."""
    out = {}
    for side in sides:
        if len(side) < 2:
            continue
        name = _arm_key(side)
        if name in out:
            continue
        scored = {f"{a}-{b}": between(images[side[a]], images[side[b]]) for a, b in combinations(sorted(side), 2)}
        out[name] = SeedToSeed(
            **{k: float(np.mean([s[k] for s in scored.values()])) for k in SSIM_KEYS},
            pairs=len(scored),
            per_pair={k: {pair: s[k] for pair, s in scored.items()} for k in SSIM_KEYS},
        )
    return out


def agreement_words(words: str, label: str, c: SeedComparison) -> str:
    """One clause: the mean between-arm SSIM against the yardstick's (two seeds of the
    reference arm), the difference's intervals and the outcome, in words."""
    head = (
        f"{words}: {label} between their reconstructions {c.mean_mode:.4f}, between two seeds of the reference "
        f"arm {c.mean_off:.4f}: {c.difference:+.4f}"
    )
    return head + c.words()
