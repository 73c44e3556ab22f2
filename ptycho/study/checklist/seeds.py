"""What the seed-based items (convergence, quality) share: grouping arms by seed, the
comparison in words and as a table. The statistics are :mod:`ptycho.study.stats`'."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ptycho.nets.xla import REFERENCE
from ptycho.study.arms import Arm, mode_pairs
from ptycho.study.tables import Table, fmt


class SeedGroup:
    """One (model, mode) paired with ``off``: the arm name per seed of each."""

    def __init__(self, arm: Arm, names: Iterable[Arm]):
        names = list(names)
        self.model, self.mode = arm.model, arm.mode
        self.key = arm.key("model", "mode")  #: the evidence's key, e.g. ``pinn-jit``
        self.seeds_mode = {a.seed: a.name for a in names if (a.model, a.mode) == (arm.model, arm.mode)}
        self.seeds_off = {a.seed: a.name for a in names if (a.model, a.mode) == (arm.model, REFERENCE)}


def seed_groups(names: Iterable[str]) -> list[SeedGroup]:
    """Every (model, mode) paired with ``off`` among the arm names, in pairing order."""
    arms = [Arm.parse(n) for n in names]
    out: dict[str, SeedGroup] = {}
    for pair in mode_pairs(arms):
        group = SeedGroup(pair.arm, arms)
        out.setdefault(group.key, group)
    return list(out.values())


def failed_summary(failed: Mapping[str, str]) -> str:
    return "; ".join(f"arm {arm} FAILED in training: {reason}" for arm, reason in sorted(failed.items()))


def comparison_words(model: str, mode: str, label: str, c: Mapping[str, Any], percent: bool = False) -> str:
    """One clause: the mode - off difference, its interval, the seed spread and the verdict, in words."""

    def f(v: float, signed: bool = False) -> str:
        return (f"{v:+.1%}" if signed else f"{v:.1%}") if percent else (f"{v:+.4f}" if signed else f"{v:.4f}")

    n_a, n_b = len(c["seeds_mode"]), len(c["seeds_off"])
    head = f"{'PINN' if model == 'pinn' else model} {mode} - off {label}: {f(c['difference'], True)}"
    if not math.isfinite(c["sd"]):
        return (
            f"{head} (one seed per arm, so no seed-to-seed spread to judge it by); "
            f"{'within' if c['within'] else 'beyond'} the {f(c['margin'])} threshold"
        )
    spread = (
        f"seeds of the same arm differ by up to {f(c['spread'])}"
        if math.isfinite(c["spread"])
        else "one arm has one seed"
    )
    if c["within"]:
        which = "the seed-to-seed spread" if c["margin"] == c["spread"] else "the threshold (above the seed spread)"
        judged = f"the difference is within {which}, {f(c['margin'])}"
        judged += (
            "; its 90 % interval lies inside that too: equivalent at 5 %"
            if c["equivalent"]
            else "; more seeds would be needed to show equivalence (the 90 % interval reaches past it)"
        )
    else:
        judged = f"the difference EXCEEDS both the seed-to-seed spread and the threshold ({f(c['margin'])})"
    return (
        f"{head} (95 % interval {f(c['low'], True)} to {f(c['high'], True)}, {n_a} vs {n_b} seeds); {spread}; {judged}"
    )


def comparison_table(comparisons: Mapping[tuple[str, str], Mapping]) -> Table:
    """The :func:`ptycho.study.stats.seed_comparison` records keyed by (model-mode, metric)."""
    rows = []
    for (name, metric), c in sorted(comparisons.items()):
        judged = "within" if c["within"] else "EXCEEDS"
        rows.append(
            [
                name,
                metric,
                f"{len(c['seeds_mode'])} / {len(c['seeds_off'])}",
                fmt(c["mean_mode"]),
                fmt(c["mean_off"]),
                f"{fmt(c['difference'])} ({fmt(c['low'])} - {fmt(c['high'])})",
                fmt(c["spread"]),
                fmt(c["margin"]),
                f"{judged}{', equivalent' if c['equivalent'] else ''}",
            ]
        )
    return (
        "Each XLA mode vs off across seeds: the difference of the means against the seed-to-seed spread "
        "(margin = the larger of the spread and the threshold)",
        [
            "model-mode",
            "metric",
            "seeds (mode / off)",
            "mean (mode)",
            "mean (off)",
            "difference (95 % interval)",
            "seed spread",
            "margin",
            "verdict",
        ],
        rows,
    )
