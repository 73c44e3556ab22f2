"""What the seed-based items (convergence, quality) share: grouping arms by seed, the
judgement and the comparison in words (its table is the report's,
:mod:`ptycho.study.report.items.seeds`). The statistics are :mod:`ptycho.study.stats`'."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ptycho.study.arms import Arm, Pair, pairs
from ptycho.study.checklist.result import FAIL, INCONCLUSIVE, PASS
from ptycho.study.stats import DIFFERENT, EQUIVALENT, SeedComparison, overall, signed_words


class SeedGroup:
    """One comparison across seeds (a :class:`~ptycho.study.arms.Pair` but for the seed:
    a mode vs ``off``, or a reduced precision vs float32): the arm name per seed of each
    side. ``seeds_mode`` is the judged side, ``seeds_off`` its reference."""

    def __init__(self, pair: Pair, names: Iterable[Arm]):
        names = list(names)
        self.pair = pair
        self.key = pair.group  #: the evidence's key, e.g. ``pinn-jit`` or ``pinn-off-bf16-vs-fp32``
        self.words = pair.words()  #: e.g. ``PINN jit - off``

        def seeds_of(arm: Arm) -> dict[int, str]:
            return {a.seed: a.name for a in names if a._replace(seed=0) == arm._replace(seed=0)}

        self.seeds_mode = seeds_of(pair.arm)
        self.seeds_off = seeds_of(pair.reference)


def seed_groups(names: Iterable[str]) -> list[SeedGroup]:
    """Every comparison across seeds among the arm names (:func:`ptycho.study.arms.pairs`),
    in pairing order: the modes' first, then the precisions'."""
    arms = [Arm.parse(n) for n in names]
    out: dict[str, SeedGroup] = {}
    for pair in pairs(arms):
        group = SeedGroup(pair, arms)
        out.setdefault(group.key, group)
    return list(out.values())


def failed_summary(failed: Mapping[str, str]) -> str:
    return "; ".join(f"arm {arm} FAILED in training: {reason}" for arm, reason in sorted(failed.items()))


def judge(comparisons: Iterable[SeedComparison]) -> tuple[float, str]:
    """(value, status) of a seed-based item: the value is how far the 90 % intervals reach
    (:meth:`~ptycho.study.stats.SeedComparison.reach`, largest; NaN if one has none), the
    status PASS only when every comparison is EQUIVALENT or NOT WORSE, FAIL when one is
    DIFFERENT or WORSE (or there is none, or a difference is undefined), INCONCLUSIVE otherwise."""
    comparisons = list(comparisons)
    if not comparisons or any(math.isnan(c.difference) for c in comparisons):
        return float("nan"), FAIL  # nothing compared, or an undefined metric: no evidence is no pass
    reaches = [c.reach() for c in comparisons]
    value = max(reaches) if all(math.isfinite(r) for r in reaches) else float("nan")
    outcome = overall(c.outcome for c in comparisons)
    return value, {EQUIVALENT: PASS, DIFFERENT: FAIL}.get(outcome, INCONCLUSIVE)


def comparison_words(group: SeedGroup, label: str, c: SeedComparison, percent: bool = False) -> str:
    """One clause: the group's difference (mode - off, or reduced precision - float32),
    its intervals, the seed spread and the outcome, in words."""
    return f"{group.words} {label}: {signed_words(c.difference, percent)}" + c.words(percent)
