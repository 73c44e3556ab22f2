"""The report's Conditions section: the study's cheap parts at each operating point.

:func:`load` turns the ``condition`` and ``solve_condition`` jobs' records
(:mod:`ptycho.study.conditions`) into the report's ``conditions`` entry; its first row is
the study's own point (the one its networks trained at), from the checklist, the solver
section and the arms' scores. A condition's accuracy or gradients FAIL fails the verdict:
numerics that a dose or a loss breaks are XLA making it worse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ptycho.nets.models import SUBJECT
from ptycho.study.condition_record import CHECKS
from ptycho.study.json_record import JsonRecord, read_fields, write_fields
from ptycho.study.presentation import MODEL_WORDS
from ptycho.study.section import Section
from ptycho.study.tables import Table

if TYPE_CHECKING:
    from ptycho.study.report.record import StudyReport
    from ptycho.study.solver_record import SolverRun
    from ptycho.study.solver_summary import ModeSummary


@dataclass(frozen=True)
class Check(JsonRecord):
    """One check (accuracy or gradients) at a condition: its status and value, and its
    summary where the condition's own job judged it."""

    status: str
    value: float
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        return write_fields(self, skip=("summary",) if self.summary is None else ())


@dataclass(frozen=True)
class SolverCell(JsonRecord):
    """The solver's flat start at a condition, in its mode: final scores and time per object."""

    mode: str
    amp_ssim: float | None
    phase_ssim: float | None
    seconds_per_object: float
    iterations: float

    @classmethod
    def of_run(cls, mode: str, run: SolverRun | ModeSummary) -> SolverCell:
        """A flat-start run (a ``ptycho solve`` record's, or the report's solver section's)."""
        return cls(mode, run.final.get("amp_ssim"), run.final.get("phase_ssim"), run.seconds_per_object, run.iterations)


@dataclass(frozen=True)
class ConditionRow(JsonRecord):
    """One operating point of the report's Conditions section (the report's ``conditions``
    entry holds the checked ones; :func:`own_row` is the study's own): the one code that
    knows a row's keys."""

    name: str
    trained: bool  #: the study's networks trained here (its own point)
    nphotons: float
    stride_test: int
    loss: str
    checks: Mapping[str, Check]  #: by :data:`CHECKS`
    solver: SolverCell | None
    models: Mapping[str, Mapping[str, float | None]]  #: the trained arms' scores here
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **({} if self.description is None else {"description": self.description}),
            "trained": self.trained,
            "nphotons": self.nphotons,
            "stride_test": self.stride_test,
            "loss": self.loss,
            **{c: check.to_json() for c, check in self.checks.items()},
            "solver": self.solver.to_json() if self.solver else None,
            "models": dict(self.models),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConditionRow:
        return cls(**read_fields(cls, d, skip=("checks",)), checks={c: Check.from_json(d[c]) for c in CHECKS})

    @classmethod
    def of(cls, row: ConditionRow | Mapping[str, Any]) -> ConditionRow:
        return row if isinstance(row, ConditionRow) else cls.from_json(row)


def _solver(record) -> SolverCell:
    """A condition's solver record (:class:`~ptycho.study.solver_record.SolveRecord`): its
    flat start in its (one) mode."""
    run = next(r for r in record.runs if r.flat)
    return SolverCell.of_run(run.mode, run)


def rows(records: Mapping[str, Mapping[str, Any]], config: Mapping) -> list[ConditionRow]:
    """The checked conditions' rows, in the config's order, from their records
    (:attr:`ptycho.study.results.StudyResults.condition_records`); [] without any."""
    from ptycho.errors import PtychoError
    from ptycho.study.conditions import CONDITIONS

    out = []
    for name in [c for c in config.get("conditions", []) if c in records]:
        rec = records[name]
        if "check" not in rec:
            raise PtychoError(f"condition {name}: its check.json is missing; pass it with its solve.json")
        check = rec["check"]
        out.append(
            ConditionRow(
                name,
                False,
                check.nphotons,
                check.stride_test,
                check.loss,
                {c: Check(r.status, r.value, r.summary) for c, r in check.checks.items()},
                _solver(rec["solve"]) if "solve" in rec else None,
                check.models,
                CONDITIONS[name].description if name in CONDITIONS else "",
            )
        )
    return out


def own_row(report: StudyReport) -> ConditionRow:
    """The study's own point, from the report's checklist, solver and arms."""
    from ptycho.study.conditions import own_name, own_settings

    config = report.config
    solver = report.solver
    mode = (solver.warm_mode or solver.fastest) if solver else None
    run = solver.modes.get(mode) if solver else None
    return ConditionRow(
        own_name(config) or "the study's own",
        True,
        float(config["simulation"]["nphotons"]),
        config["simulation"]["stride_test"],
        own_settings(config)["loss"],
        {c: Check(report.items[c].status, report.items[c].value) for c in CHECKS},
        SolverCell.of_run(mode, run) if run else None,
        {arm: a.metrics for arm, a in report.arms.items() if a.metrics},
    )


def failing(report: StudyReport) -> list[str]:
    """``"<condition> <check>"`` for every condition's check that FAILed."""
    return [f"{row.name} {c}" for row in report.conditions for c in CHECKS if row.checks[c].status == "FAIL"]


def _groups(models: Mapping[str, Mapping[str, float]]) -> dict[str, tuple[float, float, int]]:
    """Arms over their seeds: a label per (model, mode, precision) -> mean amplitude and
    phase SSIM and the seeds."""
    from ptycho.nets.precision import SHORT
    from ptycho.study.conditions import mean_scores

    return {
        f"{MODEL_WORDS.get(model, model)} {mode} {SHORT.get(precision, precision)}": (
            g["amp_ssim"],
            g["phase_ssim"],
            g["seeds"],
        )
        for (model, mode, precision), g in mean_scores(models).items()
    }


def _seeds(n: int) -> str:
    return f"{n} seed" + "s" * (n != 1)


def _span(values: Sequence[float]) -> str:
    low, high = f"{min(values):.3f}", f"{max(values):.3f}"
    return low if low == high else f"{low}-{high}"


def _pair(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a:.3f}/{b:.3f}"


def sentence(report: StudyReport) -> str:
    """The report's sentence on the conditions (the section's text and the answer's last lines)."""
    from ptycho.study.conditions import mean_scores

    rows = report.conditions
    if not rows:
        return ""
    names = ", ".join(r.name for r in rows)
    failed = failing(report)
    checks = (
        f"accuracy and gradients FAIL at {', '.join(failed)}"
        if failed
        else "accuracy and gradients PASS at every one (each mode vs off and each precision vs float32 with its data and loss)"
    )
    best = []
    for row in rows:
        pinn = [g for (model, _, _), g in mean_scores(row.models).items() if model == SUBJECT]
        solver = row.solver
        if pinn:
            best.append(
                f"at {row.name} the trained PINN arms score amplitude/phase SSIM "
                f"{_span([g['amp_ssim'] for g in pinn])}/{_span([g['phase_ssim'] for g in pinn])}, the solver "
                f"{_pair(solver.amp_ssim, solver.phase_ssim) if solver else _pair(None, None)}"
            )
    return f"Conditions ({names}, beside the study's own): {checks}; " + "; ".join(best) + "."


def tables(report: StudyReport) -> list[Table]:
    rows = [own_row(report), *report.conditions]
    checks = [
        [
            row.name + (" (trained here)" if row.trained else ""),
            f"{row.nphotons:.0e}",
            str(row.stride_test),
            row.loss,
            *(f"{row.checks[c].status} ({row.checks[c].value:.2g})" for c in CHECKS),
            _pair(row.solver.amp_ssim, row.solver.phase_ssim) if row.solver else _pair(None, None),
            "n/a" if not row.solver else f"{row.solver.seconds_per_object:.2f}",
        ]
        for row in rows
    ]
    groups = [_groups(row.models) for row in rows]
    labels = list(dict.fromkeys(label for g in groups for label in g))
    networks = [
        [
            f"{label} ({_seeds(max(g[label][2] for g in groups if label in g))})",
            *(_pair(*g[label][:2]) if label in g else "-" for g in groups),
        ]
        for label in labels
    ]
    return [
        (
            "Checks and the solver per condition (accuracy, gradients: the worst difference over its limit; "
            "solver: flat start, its mode, one thread unless the study's own)",
            ["condition", "photons", "test stride", "PINN loss", "accuracy", "gradients", "solver amp/phase SSIM",
             "solver s/object"],
            checks,
        ),
        (
            "The study's trained networks at each condition: amplitude/phase SSIM, mean over seeds (inputs "
            "normalised by each test split's own intensity)",
            ["network", *(row.name for row in rows)],
            networks,
        ),
        per_seed_table(rows),
    ]  # fmt: skip


def per_seed_table(rows: Sequence[ConditionRow]) -> Table:
    """Every trained network, seed by seed, at each condition: amplitude/phase SSIM and the
    amplitude's fitted scale (issue 45, item 4). The seed means above can hide one seed far
    from its pair, and the scale says how far the amplitude was put right before scoring."""

    def cell(scores: Mapping[str, float] | None) -> str:
        if not scores:
            return "-"
        scale = scores.get("amp_scale")
        shown = scale is not None and math.isfinite(scale)  # 0 shown: amplitudes that never overlap
        return _pair(scores.get("amp_ssim"), scores.get("phase_ssim")) + (f" (x{scale:.2f})" if shown else "")

    arms = sorted({arm for row in rows for arm in row.models})
    return (
        "The trained networks per seed at each condition: amplitude/phase SSIM (the amplitude's fitted scale: "
        "scores are taken after the amplitude is multiplied by the least-squares factor against the truth; far "
        "from 1, inference's normalisation by the data's mean count put the amplitude off its scale)",
        ["arm", *(row.name for row in rows)],
        [[arm, *(cell(row.models.get(arm)) for row in rows)] for arm in arms],
    )


def _text(report: StudyReport) -> str:
    return sentence(report) or "No condition besides the study's own was checked."


SECTION = Section("conditions", "Conditions", tables, text=_text)
