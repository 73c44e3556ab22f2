"""The tables of the comparisons across seeds (convergence, quality, time to quality): each
comparison's intervals and outcome, and where the seed-to-seed spread comes from."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ptycho.study.stats import SeedComparison, interval_levels
from ptycho.study.tables import Table, fmt

#: What :func:`comparison_table` compares, by default.
ACROSS_SEEDS = (
    "Each XLA mode vs off (at each precision) and each reduced precision vs float32 (in each mode) across seeds"
)


def comparison_table(comparisons: Mapping[tuple[str, str], SeedComparison], subject: str = ACROSS_SEEDS) -> Table:
    """The comparisons across seeds keyed by (comparison, metric)
    (:meth:`~ptycho.study.report.record.StudyReport.seed_comparisons`); ``subject`` is the
    title's first part, what is compared."""
    rows, levels = [], interval_levels()
    for (name, metric), c in sorted(comparisons.items()):
        levels = c.levels  # one alpha per study
        judged = c.outcome + (f", {c.seeds_needed:.0f} seeds needed" if c.seeds_needed < float("inf") else "")
        rows.append(
            [
                name,
                metric,
                f"{len(c.seeds_mode)} / {len(c.seeds_off)}",
                fmt(c.mean_mode),
                fmt(c.mean_off),
                f"{fmt(c.difference)} ({fmt(c.low90)} - {fmt(c.high90)})",
                f"{fmt(c.low)} - {fmt(c.high)}",
                fmt(c.spread),
                fmt(c.margin),
                judged,
            ]
        )
    narrow, wide = levels
    return (
        f"{subject}: NOT WORSE when the {narrow} interval's end on the worse side (a one-sided {wide} bound) lies "
        "within the margin (the threshold), WORSE when its other end lies beyond it; two-sided (thresholds.two_sided): "
        f"EQUIVALENT when the {narrow} interval lies inside +-margin, DIFFERENT when the {wide} interval lies outside "
        "it; else INCONCLUSIVE",
        [
            "comparison",
            "metric",
            "seeds (arm / reference)",
            "mean (arm)",
            "mean (reference)",
            f"difference ({narrow} interval)",
            f"{wide} interval",
            "seed spread",
            "margin",
            "outcome",
        ],
        rows,
    )


def split_table(title: str, rows: list[list[str]], unit: str = "differences") -> Table | None:
    """A table of where a seed-to-seed spread comes from (issue 45, item 2), one row per
    comparison: its name, what is compared, the seeds, the spread between seeds of one arm,
    that of the paired ``unit`` and the seed's own share; None without a row."""
    header = ["comparison", "metric", "seeds per arm", "sd between seeds (one arm)", f"sd of the paired {unit}"]
    return (title, [*header, "the seed's share", "the arms' own share"], rows) if rows else None


def split_row(name: str, metric: str, seeds: int, seed_sd: float, paired_sd: float, share: float) -> list[str]:
    return [name, metric, str(seeds), fmt(seed_sd), fmt(paired_sd), f"{share:.0%}", f"{1 - share:.0%}"]


def source_table(comparisons: Mapping[tuple[str, str], SeedComparison]) -> Table | None:
    """Where the seed-to-seed spread comes from, per comparison and metric whose arms ran
    the same seeds (two or more): the spread of one arm's seeds against the spread of the
    per-seed differences, and the seed's own share of the variance
    (:attr:`~ptycho.study.stats.SeedComparison.seed_share`). None when no comparison is
    paired with a spread on both sides."""
    rows = []
    for (name, metric), c in sorted(comparisons.items()):
        if math.isfinite(c.seed_share):
            rows.append(split_row(name, metric, len(c.seeds_mode), c.seed_sd, c.sd, c.seed_share))
    return split_table(
        "Where the seed-to-seed spread comes from: two seeds of one arm differ by their initial weights and batch "
        "order, which an arm and its reference share seed by seed, and by the arms' own arithmetic; the seed's share "
        "is what pairing by seed removes from the comparison (1 - sd(differences)^2 / (2 sd(seeds)^2))",
        rows,
    )
