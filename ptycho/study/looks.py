"""Seeds added until the verdict decides (issue 45): the plan of looks, one look's
judgement and its record.

A study may set ``max_seeds``: it then starts with its configured seeds and, after they
are trained and scored, *looks*: the items whose outcome rests on the seeds
(:data:`SEEDED`: convergence, quality, speed) are judged on the seeds so far. While one is
INCONCLUSIVE, ``seeds_per_look`` seeds are added to every arm of each model with an open
comparison (all of that model's arms, so that its comparisons stay paired by seed), up to
``max_seeds`` per arm; the workflow trains them (a Snakemake checkpoint: on a cluster they
run at once) and looks again.

Looking again at the same error rate would call a worse arm NOT WORSE more often than
the rate says (``tests/test_error_rate.py`` measures it). So each look, and each item's
check at the look it decided at, judge at a lower level (:attr:`Plan.levels`) that rises with
the seeds, set by simulation so that the chance of a false claim at ANY planned look is at
most the study's ``alpha``: the looks spend it, little at the first (alpha spending,
:func:`~ptycho.study.stats.sequential_levels`; it was once one constant level, Pocock's,
and before that the Bonferroni split ``alpha / looks``). A study without ``max_seeds``
plans one look: its verdict is judged at ``alpha``, as before.

A look stops the study when every seeded item decides (:data:`DECIDED`), at the last
planned look (:data:`CAP`), or when an open comparison's mean sits so near the margin that
its spread says more than :data:`~ptycho.study.stats.MAX_SEEDS` seeds per arm would settle
it (:data:`FUTILE`; stopping early never raises the error rate). Any smaller number an open
comparison's spread names is recorded, not acted on: an estimate from three seeds is itself
too noisy to give up on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptycho.errors import ConfigError
from ptycho.study.arms import Arm
from ptycho.study.checklist.result import INCONCLUSIVE, ItemResult
from ptycho.study.json_record import JsonRecord, write_fields
from ptycho.study.stats import sequential_levels

#: ``max_seeds: auto``: the cap is the most seeds per arm the study's estimate on this
#: machine fits in ``budget_min`` (:func:`ptycho.study.estimate.seeds_in_budget`), recorded
#: in :data:`CAP_FILE` under the study's folder when the workflow first calibrates.
AUTO = "auto"
CAP_FILE = Path("looks", "cap.json")
#: The checklist items whose outcome rests on the seeds, in report order.
SEEDED = ("convergence", "quality", "speedup")
#: Why a look stopped the study, or that it did not.
DECIDED, CAP, FUTILE, MORE = "decided", "cap", "futile", "more seeds"


@dataclass(frozen=True)
class Plan(JsonRecord):
    """The looks a study plans: the configured seeds of its models that compare arms (a
    model trained in one mode and precision has nothing to leave open), the most seeds per
    arm (``None``: one look, no seeds added), how many a look adds, and the study's error rate."""

    seeds: Mapping[str, tuple[int, ...]]
    max_seeds: int | None = None
    seeds_per_look: int = 2
    alpha: float = 0.05

    @classmethod
    def of(cls, cfg: Mapping[str, Any], lists: Mapping[str, tuple], cap: int | None = None) -> Plan:
        """The plan of a resolved config whose models train ``lists`` (model -> modes,
        precisions, seeds: :func:`ptycho.study.workflow.arm_lists`): the seeds of the models
        that compare arms (one mode and precision leaves nothing open); a ``max_seeds``
        below an arm's seed count is one line. ``max_seeds: auto`` plans up to ``cap``, what
        the budget fits on this machine (:func:`recorded_cap`; ``None``: no look adds seeds)."""
        seeds = {kind: tuple(s) for kind, (modes, precisions, s) in lists.items() if len(modes) * len(precisions) > 1}
        most_seeds = cap if cfg.get("max_seeds") == AUTO else cfg.get("max_seeds")
        plan = cls(seeds, most_seeds, int(cfg.get("seeds_per_look", 2)), float(cfg["thresholds"]["alpha"]))
        most = max(len(s) for s in seeds.values())
        if plan.max_seeds is not None and plan.max_seeds < most:
            raise ConfigError(
                f"config key 'max_seeds' = {plan.max_seeds} is below the {most} seeds an arm already has; raise it "
                "(max_seeds=6) or leave it out (no seeds are then added)"
            )
        return plan

    @property
    def looks(self) -> int:
        """Looks planned: the first, then one per ``seeds_per_look`` seeds until the model with the
        fewest seeds reaches ``max_seeds``."""
        if self.max_seeds is None:
            return 1
        fewest = min(len(s) for s in self.seeds.values())
        return 1 + max(0, math.ceil((self.max_seeds - fewest) / self.seeds_per_look))

    @property
    def sequential(self) -> bool:
        """More than one look planned: the workflow's ``look`` checkpoint runs."""
        return self.looks > 1

    def sizes(self, kind: str) -> tuple[int, ...]:
        """Seeds per arm of model ``kind`` at each planned look, if every look before adds them."""
        first, most = len(self.seeds[kind]), max(self.max_seeds or 0, len(self.seeds[kind]))
        return tuple(dict.fromkeys(min(first + k * self.seeds_per_look, most) for k in range(self.looks)))

    @property
    def levels(self) -> tuple[float, ...]:
        """The error rate each planned look, and each item's verdict at the look it decided at,
        is judged at: rising with the seeds, so that the study keeps ``alpha`` over all of
        them (:func:`~ptycho.study.stats.sequential_levels`; per look the strictest of its
        models' sequences). ``(alpha,)`` for one look."""
        if not self.sequential:
            return (self.alpha,)
        per = [sequential_levels(self.alpha, self.sizes(kind)) for kind in self.seeds]
        return tuple(min(p[min(k, len(p) - 1)] for p in per) for k in range(self.looks))

    def level(self, index: int) -> float:
        """Look ``index``'s level (:attr:`levels`); a look the plan does not have is an error."""
        if not 0 <= index < self.looks:
            raise ConfigError(f"look {index} is not one of this plan's {self.looks} looks (0 to {self.looks - 1})")
        return self.levels[index]

    def added(self, seeds: Iterable[int]) -> tuple[int, ...]:
        """``seeds`` with this plan's next ones (the smallest unused numbers above them),
        at most ``max_seeds`` in all."""
        seeds = tuple(seeds)
        room = (self.max_seeds or len(seeds)) - len(seeds)
        new = range(max(seeds) + 1, max(seeds) + 1 + max(0, min(self.seeds_per_look, room)))
        return (*seeds, *new)

    def at_cap(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """``cfg`` with each of this plan's models at ``max_seeds`` seeds: the most the looks
        may train (what the estimate states beside the configured seeds')."""
        import copy

        out = copy.deepcopy(dict(cfg))
        for kind, seeds in self.seeds.items():
            while len(seeds) < (self.max_seeds or 0):
                seeds = self.added(seeds)
            out.setdefault("per_model", {}).setdefault(kind, {})["seeds"] = list(seeds)
        return out


@dataclass(frozen=True)
class Open(JsonRecord):
    """A comparison a look left INCONCLUSIVE: its item, key (``pinn-jit``, as the item's
    evidence keys it), model, and the seeds per arm its own spread says would settle it
    (NaN: it cannot say, e.g. one seed per arm)."""

    item: str
    key: str
    model: str
    needed: float = math.nan


@dataclass(frozen=True)
class Look(JsonRecord):
    """One look: the seeds it judged (per model), each seeded item's status (at this look's
    level, :meth:`Plan.level`, or as an earlier look decided it), the look at which each
    decided item decided (``settled``: item -> look index), the comparisons still open, and
    its decision (``stop``, ``why``, and the seeds per model of the next look)."""

    index: int
    plan: Plan
    seeds: Mapping[str, tuple[int, ...]]
    statuses: Mapping[str, str]
    open: tuple[Open, ...] = ()
    why: str = DECIDED
    next_seeds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    settled: Mapping[str, int] = field(default_factory=dict)

    @property
    def stop(self) -> bool:
        return self.why != MORE

    def needed(self) -> float:
        """The most seeds per arm an open comparison needs by its own spread (NaN: unknown)."""
        values = [o.needed for o in self.open]
        if not values or any(math.isnan(v) for v in values):
            return math.nan
        return max(values)

    def words(self) -> str:
        """The look in one sentence: seeds, the items' statuses and what it decided."""
        counts = ", ".join(f"{m} {_seeds(len(s))}" for m, s in self.seeds.items())
        statuses = ", ".join(
            f"{item} {status}"
            + (f" (at look {self.settled[item] + 1})" if self.settled.get(item, self.index) < self.index else "")
            for item, status in self.statuses.items()
        )
        head = f"look {self.index + 1} of {self.plan.looks} ({counts} per arm; {statuses})"
        opened = ", ".join(sorted({f"{o.item} {o.key}" for o in self.open}))
        needed = self.needed()
        need = f"; by their spread they need {needed:.0f} seeds per arm" if math.isfinite(needed) else ""
        if math.isinf(needed):
            from ptycho.study.stats import MAX_SEEDS

            need = f"; by their spread they need more than {MAX_SEEDS} seeds per arm"
        if self.why == DECIDED:
            return f"{head}: every seeded item decided, stopped"
        if self.why == CAP:
            return f"{head}: still open ({opened}{need}), stopped at the cap of {self.plan.max_seeds} seeds per arm"
        if self.why == FUTILE:
            return f"{head}: still open ({opened}{need}), stopped"
        more = ", ".join(f"{m} to {len(s)}" for m, s in self.next_seeds.items() if len(s) > len(self.seeds.get(m, ())))
        return f"{head}: still open ({opened}{need}), seeds added ({more})"

    def to_json(self) -> dict[str, Any]:
        """Its fields, and for a reader of the file what follows from them: the looks
        planned, this look's level, the most seeds an open comparison needs, whether it
        stopped, and the look in words."""
        derived = {"looks_planned": self.plan.looks, "alpha": self.plan.level(self.index), "needed": self.needed()}
        return {**write_fields(self), **derived, "stop": self.stop, "summary": self.words()}


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def open_comparisons(results: Mapping[str, ItemResult], threshold: Mapping[str, float]) -> list[Open]:
    """The comparisons of the INCONCLUSIVE seeded items that are themselves undecided:
    quality and convergence by their seed comparisons' outcomes, speed by its PINN XLA
    comparisons that neither pass nor fail at ``threshold["speedup"]``."""

    out = []
    for name in ("convergence", "quality"):
        result = results.get(name)
        if result is None or result.status != INCONCLUSIVE:
            continue
        for key, per in result.seed_comparisons().items():
            undecided = [c for c in per.values() if c.outcome == INCONCLUSIVE]
            if undecided:
                needed = max(c.seeds_needed for c in undecided)
                out.append(Open(name, key, _model_of(key), needed))
    speed = results.get("speedup")
    if speed is not None and speed.status == INCONCLUSIVE:
        from ptycho.nets.models import SUBJECT
        from ptycho.study.checklist.speed_evidence import SpeedEvidence

        for key, c in SpeedEvidence.from_json(speed.evidence).time_to_quality.items():
            if c.is_xla(SUBJECT) and c.measured and c.passes(threshold["speedup"]) is None:
                out.append(Open("speedup", key, c.model, c.seeds_needed()))
    return out


def _model_of(key: str) -> str:
    """The model of an evidence key (``pinn-jit``, ``baseline-off-bf16-vs-fp32``)."""
    return key.split("-", 1)[0]


def decide(plan: Plan, index: int, seeds: Mapping[str, tuple[int, ...]], results: Mapping[str, ItemResult],
           opened: Iterable[Open], previous: Look | None = None) -> Look:  # fmt: skip
    """Look ``index`` of ``plan`` on ``seeds`` (per model), given its seeded items'
    results and their open comparisons: stop (decided, at the cap, or futile) or add seeds.
    An item that decided at an earlier look (``previous`` carries it) keeps that decision,
    whatever ``results`` say of it now: the levels keep the error rate of deciding at ANY
    look, so a decision once reached stands (a group-sequential test's rejection is final;
    judged again on more seeds it could only be lost, never be made safer)."""
    settled = dict(previous.settled) if previous is not None else {}
    statuses = {}
    for name in SEEDED:
        if name in settled:
            statuses[name] = previous.statuses[name]
        elif name in results:
            statuses[name] = results[name].status
            if statuses[name] != INCONCLUSIVE:
                settled[name] = index
    opened = tuple(o for o in opened if statuses.get(o.item) == INCONCLUSIVE)
    look = Look(index, plan, dict(seeds), statuses, opened, settled=settled)
    if INCONCLUSIVE not in statuses.values():
        return look
    if index + 1 >= plan.looks:
        return dataclasses.replace(look, why=CAP)
    if math.isinf(look.needed()):  # a mean at the margin's edge: more than MAX_SEEDS would not settle it
        return dataclasses.replace(look, why=FUTILE)
    models = {o.model for o in opened} or set(seeds)
    grown = {m: plan.added(s) if m in models else s for m, s in seeds.items()}
    if grown == dict(seeds):  # every open model is at the cap already
        return dataclasses.replace(look, why=CAP)
    return dataclasses.replace(look, why=MORE, next_seeds=grown)


def deciding(chain: tuple[Look, ...] | list[Look], item: str) -> Look:
    """The look whose seeds and level judge ``item`` in the verdict: the one it decided at,
    else the last of ``chain`` (the looks taken, in order)."""
    last = chain[-1]
    return chain[last.settled[item]] if item in last.settled else last


def _cap_basis(plan: Plan, budget_min: float) -> dict[str, Any]:
    """What a recorded ``max_seeds: auto`` cap was worked out for: the budget, the seeds of
    the models that compare arms and how many a look adds (``plan`` before any cap). Another
    of these, and the cap is worked out again."""
    seeds = {kind: list(s) for kind, s in sorted(plan.seeds.items())}
    return {"budget_min": budget_min, "seeds": seeds, "seeds_per_look": plan.seeds_per_look}


def record_cap(folder: str | os.PathLike, plan: Plan, budget_min: float, cap: int, total_s: float) -> None:
    """Record the cap ``max_seeds: auto`` resolved to in ``folder`` (the study's results),
    with what it was worked out for (``plan`` before any cap, the budget) and the estimate
    at the cap, so that every later parse of the workflow (a rerun, a cluster job) plans
    the same looks."""
    from ptycho.artifacts import write_json

    record = {**_cap_basis(plan, budget_min), "max_seeds": int(cap), "estimate_s": float(total_s)}
    write_json(Path(folder, CAP_FILE), record, "seed_cap")


def recorded_cap(folder: str | os.PathLike, plan: Plan, budget_min: float) -> int | None:
    """The cap recorded by :func:`record_cap` when it was worked out for the same budget,
    seeds and ``seeds_per_look`` (``plan`` before any cap); else ``None``."""
    from ptycho.artifacts import read_json
    from ptycho.errors import PtychoError

    try:
        record = read_json(Path(folder, CAP_FILE), "seed_cap")
    except (PtychoError, OSError, ValueError):
        return None
    basis = {key: record.get(key) for key in ("budget_min", "seeds", "seeds_per_look")}
    return int(record["max_seeds"]) if basis == json.loads(json.dumps(_cap_basis(plan, budget_min))) else None


def arms_with_seeds(names: Iterable[str], seeds: Mapping[str, Iterable[int]]) -> list[str]:
    """The matrix ``names`` (the first look's arms) with each model's arms at ``seeds``:
    the modes and precisions of the first look, the seeds of another."""
    from ptycho.study.arms import arm_name

    first = [Arm.parse(n) for n in names]
    out: dict[str, None] = {}
    for model in dict.fromkeys(a.model for a in first):
        kinds = dict.fromkeys((a.mode, a.precision) for a in first if a.model == model)
        for seed in seeds.get(model, sorted({a.seed for a in first if a.model == model})):
            for mode, precision in kinds:
                out[arm_name(model, mode, seed, precision)] = None
    return list(out)


def _recorded_look(folder: str | os.PathLike, k: int) -> Look | None:
    """Look ``k``'s record under ``folder/looks/``, or ``None`` when there is none or it
    cannot be read (read while the workflow is parsed, which never stops on it)."""
    from ptycho.artifacts import read_json
    from ptycho.errors import PtychoError

    path = Path(folder, "looks", f"{k}.json")
    if not path.is_file():
        return None
    try:
        return Look.from_json(read_json(path, "look"))
    except (PtychoError, OSError, AttributeError, KeyError, TypeError, ValueError):
        return None


def replanned(folder: str | os.PathLike, plan: Plan) -> str:
    """A warning when the looks recorded under ``folder/looks/`` were planned otherwise
    than ``plan`` (another cap, seeds or rate; "" when none or the same): the workflow
    judges the looks again at the new plan's levels, but a plan changed after its study has
    looked spends the error rate again, so its verdict no longer keeps ``alpha`` (the
    levels assume the plan fixed before the first look: Lan & DeMets)."""
    first = _recorded_look(folder, 0)
    if first is None or first.plan == plan:
        return ""
    before, changed = first.plan, []
    if before.max_seeds != plan.max_seeds:
        changed.append(f"up to {before.max_seeds} seeds per arm, now {plan.max_seeds}")
    for kind in sorted({*before.seeds, *plan.seeds}):
        was, now = before.seeds.get(kind, ()), plan.seeds.get(kind, ())
        if tuple(was) != tuple(now):
            changed.append(f"{kind} seeds {list(was)}, now {list(now)}")
    if before.seeds_per_look != plan.seeds_per_look:
        changed.append(f"{before.seeds_per_look} seeds a look, now {plan.seeds_per_look}")
    if before.alpha != plan.alpha:
        changed.append(f"alpha {before.alpha:g}, now {plan.alpha:g}")
    return (
        f"the looks recorded in {Path(folder, 'looks')} were planned otherwise ({'; '.join(changed)}): they are "
        f"judged again at the new plan's levels, but a plan changed after the study has looked no longer keeps its "
        f"error rate at {plan.alpha:g}; for that, run the new plan in a new results folder (--config results=...)"
    )


def recorded_arms(folder: str | os.PathLike, plan: Plan, names: Iterable[str]) -> list[str]:
    """The arms ``names`` (the first look's) and those of the looks recorded under
    ``folder/looks/`` for this ``plan``, from the first until one stopped: what a rerun
    checks for lost outputs (``rules/rerun.smk``), read while the workflow is parsed. A
    look that cannot be read, or was planned otherwise (another ``max_seeds``), ends the
    chain: its checkpoint makes it again, and parsing never stops on it."""
    names = list(names)
    out = dict.fromkeys(names)
    k = 0
    while plan.sequential and (look := _recorded_look(folder, k)) is not None:
        if look.plan != plan:
            break
        out.update(dict.fromkeys(arms_with_seeds(names, {**look.seeds, **look.next_seeds})))
        if look.stop:
            break
        k += 1
    return list(out)
