"""The quality item without a ground truth (measured data): do two arms give the same reconstruction?

On measured data nothing can be scored against a truth, but XLA's question needs none:
an XLA mode should reconstruct what ``off`` reconstructs at the same precision and seed
(and a reduced precision what float32 does in the same mode). So each arm's stitched
objects are scored against its reference arm's of the same seed as against a truth, with
the scoring the ground-truth case uses (:func:`ptycho.analysis.metrics.score_all`:
registration, amplitude scale, phase plane removed, SSIM with the reference's data range).

**The rule.** Per comparison and per SSIM (amplitude, phase), the between-arm SSIM of each
seed ``s_k`` (1 = the same reconstruction) is judged with the seed statistics of the
ground-truth case (:func:`ptycho.study.stats.seed_comparison`, paired by seed) as the
difference ``s_k - 1`` against the margin ``thresholds.quality_max_ssim_diff``:
EQUIVALENT when the 90 % interval of the mean between-arm SSIM lies above ``1 - margin``,
DIFFERENT when its 95 % interval lies below it, INCONCLUSIVE otherwise (one seed always).
This asks more than the ground-truth rule (the same reconstruction, not an equally good
one), which is XLA's claim: rounding differences alone should not move a reconstruction
by the margin. Two trainings that drift apart from the same seed are DIFFERENT here even
when both are good; the evidence therefore also gives the reference arm's seed-to-seed
SSIM (how alike two trainings of the same arm are), and every arm's data misfit
(:mod:`ptycho.solvers.misfit`: how well it explains the measured patterns, lower is better).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.study.arms import Arm, pairs
from ptycho.study.checklist import seeds
from ptycho.study.checklist.item import FAIL, verdict
from ptycho.study.stats import DIFFERENT, EQUIVALENT, seed_comparison
from ptycho.study.tables import Table, fmt

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
MISFIT = "data_misfit"


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
) -> dict:
    """The quality item's record on measured data (the module docstring's rule).

    ``records`` are the arms' evaluate records (their data misfit), ``images`` their
    stitched objects by arm name. Evidence: ``ground_truth`` (false), ``per_arm``
    (``data_misfit``), ``between_arms`` (per pair key: the arm, its reference and the
    :data:`COLUMNS` scores of one against the other), ``comparisons`` (per group and SSIM,
    :func:`~ptycho.study.stats.seed_comparison` of ``s_k - 1``), ``seed_to_seed`` (per
    reference arm with two seeds or more: the mean SSIM between its seeds), ``threshold``
    and ``failed``.
    """
    missing = sorted(set(records) - set(images))
    if missing:
        raise PtychoError(
            f"no stitched objects for arm(s) {', '.join(missing)}: on measured data the quality item compares the "
            "arms' reconstructions; pass every arm's stitched file (check quality --stitched)"
        )
    per_arm = {name: {MISFIT: _number(r.get("mean", {}).get(MISFIT))} for name, r in sorted(records.items())}
    found = pairs(per_arm)
    scores = {p.key: {"arm": p.arm.name, "reference": p.reference.name} for p in found}
    for p in found:
        scores[p.key].update(between(images[p.arm.name], images[p.reference.name]))
    by_names = {(s["arm"], s["reference"]): s for s in scores.values()}
    comparisons, words = {}, []
    for g in seeds.seed_groups(per_arm):
        common = sorted(set(g.seeds_mode) & set(g.seeds_off))
        if not common:
            words.append(f"{g.words}: no seed that both arms ran, nothing to compare")
            continue
        comparisons[g.key] = {}
        for key, label in SSIM_KEYS.items():
            values = {s: by_names[(g.seeds_mode[s], g.seeds_off[s])][key] for s in common}
            c = seed_comparison(values, dict.fromkeys(values, 1.0), threshold)
            comparisons[g.key][key] = c
            words.append(agreement_words(g.words, label, c))
    value, status = seeds.judge(c for per in comparisons.values() for c in per.values())
    found_words = "; ".join(words) or "no pair to compare (an XLA mode and off, or a reduced precision and float32)"
    summary = f"no ground truth (measured data): each arm's reconstruction against its reference arm's; {found_words}"
    if failed:
        value, status = float("nan"), FAIL
        summary = f"{seeds.failed_summary(failed)} (its reconstruction is from its last good state); {summary}"
    return verdict(
        item,
        value,
        threshold,
        "<=",
        summary,
        {
            "ground_truth": False,
            "per_arm": per_arm,
            "between_arms": scores,
            "comparisons": comparisons,
            "seed_to_seed": seed_to_seed(images, [g.seeds_off for g in seeds.seed_groups(per_arm)]),
            "threshold": float(threshold),
            "failed": dict(failed or {}),
        },
        status,
    )


def seed_to_seed(images: Mapping[str, np.ndarray], sides: Sequence[Mapping[int, str]]) -> dict[str, dict]:
    """The yardstick: for each reference arm trained with two seeds or more, the mean
    amplitude and phase SSIM of each seed's reconstruction against each other seed's."""
    out = {}
    for side in sides:
        if len(side) < 2:
            continue
        name = Arm.parse(next(iter(side.values())))._replace(seed=0).key("model", "mode", "precision")
        if name in out:
            continue
        scored = [between(images[side[a]], images[side[b]]) for a, b in combinations(sorted(side), 2)]
        out[name] = {k: float(np.mean([s[k] for s in scored])) for k in SSIM_KEYS} | {"pairs": len(scored)}
    return out


def agreement_words(words: str, label: str, c: Mapping[str, Any]) -> str:
    """One clause: the mean between-arm SSIM, its intervals and the outcome, in words."""
    margin = c["margin"]
    head = f"{words}: {label} between their reconstructions {1 + c['difference']:.4f}"
    if not math.isfinite(c["sd"]):
        return (
            f"{head} (one seed per arm: no seed-to-seed spread to judge it by); INCONCLUSIVE, {seeds.needed_words(c)}"
        )
    interval = (
        f"90 % interval {1 + c['low90']:.4f} to {1 + c['high90']:.4f}, 95 % {1 + c['low']:.4f} to "
        f"{1 + c['high']:.4f}, {len(c['seeds_mode'])} seeds, paired by seed"
    )
    judged = {
        EQUIVALENT: f"EQUIVALENT: at least {1 - margin:.4g} (1 - the {margin:.4g} margin), its 90 % interval inside",
        DIFFERENT: f"DIFFERENT: its 95 % interval lies below {1 - margin:.4g} (1 - the {margin:.4g} margin)",
    }.get(c["outcome"], f"INCONCLUSIVE against {1 - margin:.4g} (1 - the {margin:.4g} margin); {seeds.needed_words(c)}")
    return f"{head} ({interval}); {judged}"


def tables(ev: Mapping) -> list[Table]:
    """The quality section's tables on measured data."""
    out: list[Table] = [
        (
            "Per arm: no ground truth (measured data), so no scores; the data misfit of its stitched objects (Poisson "
            "NLL per measured pixel above the saturated model's, 0.5 at the noise level; lower explains the data better)",
            ["arm", "data misfit"],
            [[arm, fmt(m.get(MISFIT))] for arm, m in sorted(ev.get("per_arm", {}).items())],
        )
    ]
    if ev.get("between_arms"):
        out.append(
            (
                "Each arm's reconstruction against its reference arm's (off, or float32) of the same seed, scored as "
                "against a truth (registered, amplitude scaled, phase plane removed; 1 = the same reconstruction)",
                ["comparison", "arm", "reference", *COLUMNS.values()],
                [
                    [key, s["arm"], s["reference"], *(fmt(s.get(k)) for k in COLUMNS)]
                    for key, s in sorted(ev["between_arms"].items())
                ],
            )
        )
    rows = []
    for name, per in sorted(ev.get("comparisons", {}).items()):
        for key, c in per.items():
            needed = _number(c.get("seeds_needed"))
            judged = c["outcome"] + (f", {needed:.0f} seeds needed" if math.isfinite(needed) else "")
            rows.append(
                [
                    name,
                    SSIM_KEYS[key],
                    str(len(c["seeds_mode"])),
                    fmt(1 + _number(c.get("difference"))),
                    _interval(c, "low90", "high90"),
                    _interval(c, "low", "high"),
                    fmt(_number(c.get("spread"))),
                    fmt(1 - c["margin"]),
                    judged,
                ]
            )
    if rows:
        out.append(
            (
                "The arms' agreement across seeds: EQUIVALENT when the 90 % interval of the mean between-arm SSIM lies "
                "above 1 - margin, DIFFERENT when the 95 % interval lies below it, else INCONCLUSIVE",
                [
                    "comparison",
                    "metric",
                    "seeds",
                    "mean SSIM between the arms",
                    "90 % interval",
                    "95 % interval",
                    "seed spread",
                    "1 - margin",
                    "outcome",
                ],
                rows,
            )
        )
    if ev.get("seed_to_seed"):
        out.append(
            (
                "Yardstick: two trainings of the same reference arm with different seeds, against each other (mean "
                "over pairs of seeds)",
                ["reference arm", "amp SSIM", "phase SSIM", "pairs of seeds"],
                [
                    [name, fmt(s["amp_ssim"]), fmt(s["phase_ssim"]), str(s["pairs"])]
                    for name, s in sorted(ev["seed_to_seed"].items())
                ],
            )
        )
    return out


def _interval(c: Mapping, low: str, high: str) -> str:
    lo, hi = _number(c.get(low)), _number(c.get(high))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    return f"{fmt(1 + lo)} - {fmt(1 + hi)}"


def _number(v: Any) -> float:
    return float("nan") if v is None else float(v)


def against_reference(inputs) -> tuple[Arm, dict[Arm, dict[str, Any]]] | None:
    """For the quality figures on measured data: the reference arm and every other
    arm's first stitched object compared with the reference arm's
    (:func:`ptycho.analysis.metrics.compare`, as against a truth); None when the figures'
    dataset has a ground truth. The reference is the first ``off`` arm at float32 (else at
    its first precision) of the first model and seed."""
    from ptycho.analysis.metrics import compare
    from ptycho.artifacts import STITCHED, read_arrays
    from ptycho.data.dataset import GROUND_TRUTH, read_attributes
    from ptycho.nets.precision import REFERENCE_PRECISION

    if read_attributes(inputs.dataset).get(GROUND_TRUTH, True):
        return None
    firsts = {}
    for path in inputs.stitched:
        images = read_arrays(path, ("images",), producer=STITCHED)["images"]
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
