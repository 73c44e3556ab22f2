"""What a checklist item gives: its result (:class:`ItemResult`), its statuses and
:func:`verdict`, which judges a value against a threshold. The one place that knows a
check record's keys; imports nothing of the study but the records' JSON rules
(:mod:`ptycho.study.json_record`), so that every reader (the results folder's reader,
the report, the jobs) may import it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptycho.study.json_record import JsonRecord

if TYPE_CHECKING:
    from ptycho.study.stats import SeedComparison

#: An item's statuses: INCONCLUSIVE is for the seed-based items whose evidence is too thin
#: to say either way (:func:`ptycho.study.stats.seed_comparison`); it is not a PASS.
PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


@dataclass(frozen=True)
class ItemResult(JsonRecord):
    """One checklist item's result: what the ``check`` job writes (``checks/<item>.json``),
    the report's ``items.<item>``; its keys are its fields (:mod:`ptycho.study.json_record`).
    ``evidence`` is the item's own record (its
    comparisons, tables' rows), read by the item's tables and words."""

    item: str
    status: str  #: PASS, FAIL or INCONCLUSIVE
    value: float
    threshold: float
    comparison: str  #: "<=" or ">=": the side of the threshold a PASS is on
    summary: str  #: one sentence
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def seed_comparisons(self) -> dict[str, dict[str, SeedComparison]]:
        """A seed-based item's comparisons across seeds (convergence, quality), read once:
        comparison key -> metric -> its :class:`~ptycho.study.stats.SeedComparison`.
        Convergence compares one metric per key, named ``""`` here; ``{}`` for an item
        without such comparisons."""
        from ptycho.study.stats import SeedComparison

        out = {}
        for key, found in (self.evidence.get("comparisons") or {}).items():
            per = {"": found} if "outcome" in found else found
            out[key] = {metric: SeedComparison.from_json(c) for metric, c in per.items()}
        return out


def verdict(
    item: str,
    value: float,
    threshold: float,
    comparison: str,
    summary: str,
    evidence: dict,
    status: str | None = None,
) -> ItemResult:
    """An item's result; without ``status``, PASS when the value is on the right side of
    the threshold, and a NaN value always FAILs (no evidence is no pass)."""
    ok = math.isfinite(value) and (value <= threshold if comparison == "<=" else value >= threshold)
    return ItemResult(
        item, status or (PASS if ok else FAIL), float(value), float(threshold), comparison, summary, evidence
    )
