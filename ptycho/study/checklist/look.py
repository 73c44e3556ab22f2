"""One look of a study that adds seeds until it decides (:mod:`ptycho.study.looks`): the
seeded checklist items judged on the seeds so far, at the plan's level for that look."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ptycho.errors import ConfigError
from ptycho.study import checklist
from ptycho.study.bench.record import BenchRecord
from ptycho.study.checklist.speedup import speedup
from ptycho.study.looks import Look, Plan, decide, open_comparisons


def judge(index: int, plan: Plan, inputs, thresholds: Mapping[str, float], previous: Look | None = None) -> Look:
    """Look ``index``: the seeded items not decided at an earlier look (``previous``, the
    look before) judged on ``inputs`` (a :class:`~ptycho.study.checklist.Inputs` whose
    results are the look's trainings and scores) at the plan's level for that look. Speed
    is judged from the trainings alone: the benchmark, which times the first seeds' arms,
    decides nothing a seed could change."""
    if previous is not None and (previous.plan != plan or previous.index != index - 1):
        raise ConfigError(
            f"the look before look {index} is look {previous.index} of another plan or index; pass look {index - 1}'s "
            "record of the same plan (--previous), or make the looks again"
        )
    inputs = dataclasses.replace(inputs, alpha=plan.level(index))
    trainings = list(inputs.results.trainings.values())
    settled = previous.settled if previous is not None else {}
    judges = {
        "convergence": lambda: checklist.get("convergence").collect(inputs, thresholds["convergence"]),
        "quality": lambda: checklist.get("quality").collect(inputs, thresholds["quality"]),
        "speedup": lambda: speedup(
            BenchRecord.from_json({}), thresholds["speedup"], metas=trainings, margin=inputs.margin,
            alpha=plan.level(index),
        ),
    }  # fmt: skip
    results = {name: judged() for name, judged in judges.items() if name not in settled}
    seeds: dict[str, set[int]] = {}
    for arm in inputs.results.trainings:
        seeds.setdefault(arm.model, set()).add(arm.seed)
    ordered = {m: tuple(sorted(seeds[m])) for m in plan.seeds if m in seeds}
    return decide(plan, index, ordered, results, open_comparisons(results, thresholds), previous)
