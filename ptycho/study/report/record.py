"""The report's record, ``validation.json``, as a type (:class:`StudyReport`, whose
fields are its keys): :func:`build` assembles it from the checklist's results, the arms,
the solver's and the conditions' entries and the run's cost (:func:`pipeline_cost`, from
the jobs' Snakemake benchmark files); its format is one number
(:data:`REPORT_SCHEMA_VERSION`). The JSON is the contract (docs/report.md): an overall
``verdict`` and ``items.{accuracy, gradients, convergence, quality, speedup}``, each with
``status``, ``value``, ``threshold`` and ``evidence``. The views take the record
(:func:`reads_report` lets them take its JSON too)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ptycho.artifacts import FORMATS
from ptycho.study import checklist
from ptycho.study.arm_summary import ArmSummary
from ptycho.study.bench.record import BenchRecord
from ptycho.study.checklist.result import ItemResult
from ptycho.study.checklist.speed_evidence import SpeedEvidence
from ptycho.study.conditions_view import ConditionRow
from ptycho.study.estimate import Estimate
from ptycho.study.json_record import JsonRecord, read_fields, write_fields
from ptycho.study.looks import Look
from ptycho.study.solver_summary import SolverSummary
from ptycho.study.stats import SeedComparison
from ptycho.study.ttq_comparison import Comparison

#: The report's format: one number, its producer's (:data:`ptycho.artifacts.FORMATS`), in
#: the record as ``schema_version`` (2: XLA modes replace the boolean arms).
REPORT_SCHEMA_VERSION = FORMATS["report"]


T = TypeVar("T")

#: The question the study answers, the record's first line.
QUESTION = "Does XLA make physics-informed ptychographic reconstruction faster without making it worse?"


@dataclass(frozen=True)
class StepCost(JsonRecord):
    """One step's jobs (a rule's Snakemake benchmark files): how many, their summed wall
    and CPU seconds and the largest peak RSS."""

    jobs: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0


@dataclass(frozen=True)
class RunCost(JsonRecord):
    """Where a run's time went (:func:`pipeline_cost`) and what the workflow estimated
    before its first job (:class:`~ptycho.study.estimate.Estimate`; ``None`` when it made
    none). Empty (no steps) without benchmark files."""

    steps: Mapping[str, StepCost] = field(default_factory=dict)
    span_s: float = 0.0
    job_wall_s: float = 0.0
    job_cpu_s: float = 0.0
    estimate: Estimate | None = None

    def __bool__(self) -> bool:
        return bool(self.steps)

    @property
    def largest(self) -> list[tuple[str, StepCost]]:
        """The steps, largest wall time first (the file keeps them in key order)."""
        return sorted(self.steps.items(), key=lambda kv: -kv[1].wall_s)

    def to_json(self) -> dict[str, Any]:
        return write_fields(self) if self else {}

    def words(self) -> str:
        """One sentence: the estimate beside the run's wall time, and its largest parts
        (empty without benchmarks)."""
        if not self:
            return ""
        parts = [
            f"{name} {v.wall_s / 60:.1f} min ({v.jobs} job{'s' if v.jobs != 1 else ''})" for name, v in self.largest[:3]
        ]
        e = self.estimate
        estimated = (
            f"Estimated {e.total_s / 60:.1f} min before its first job ({e.trainings} trainings "
            f"{e.training_s / 60:.1f} min, bench {e.bench_s / 60:.1f} min, rest {e.rest_s / 60:.1f} min); "
            if e
            else ""
        )
        return (
            f"{estimated}{'t' if estimated else 'T'}his run took {self.span_s / 60:.1f} min from its first job to "
            f"the report (jobs' wall time {self.job_wall_s / 60:.1f} min in all, CPU {self.job_cpu_s / 60:.1f} min); "
            f"largest: {', '.join(parts)}."
        )


@dataclass(frozen=True)
class Provenance(JsonRecord):
    """Which run a report is of: its preset, config hash and git commit (``None``: not a
    git checkout), and the MLflow parent run (its id, tracking URI and experiment)."""

    preset: str = ""
    config_hash: str = ""
    git_commit: str | None = ""
    mlflow_run_id: str = ""
    tracking_uri: str = ""
    experiment_id: str = ""


@dataclass(frozen=True)
class StudyReport:
    """The report's record as a type: ``validation.json``'s keys are its fields
    (:mod:`ptycho.study.json_record`). Its items are :class:`ItemResult`, its arms
    :class:`ArmSummary`; the machine, the cost, the config, the provenance, the solver's entry, the conditions'
    rows and the probe refinement are the JSON their own modules write."""

    schema_version: int = REPORT_SCHEMA_VERSION
    question: str = QUESTION
    verdict: str = ""
    items: Mapping[str, ItemResult] = field(default_factory=dict)
    arms: Mapping[str, ArmSummary] = field(default_factory=dict)
    failed_arms: Mapping[str, str] = field(default_factory=dict)
    machine: Mapping[str, Any] = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    cost: RunCost = field(default_factory=RunCost)
    config: Mapping[str, Any] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    solver: SolverSummary | None = None
    conditions: tuple[ConditionRow, ...] = ()
    probe: Mapping[str, Any] | None = None
    #: the looks of a study that added seeds until it decided (:mod:`ptycho.study.looks`)
    looks: tuple[Look, ...] = ()
    generated_utc: str = ""

    def evidence(self, item: str) -> Mapping[str, Any]:
        """An item's evidence (``{}`` for an item the record lacks)."""
        found = self.items.get(item)
        return found.evidence if found else {}

    def seed_comparisons(self, item: str) -> dict[str, dict[str, SeedComparison]]:
        """A seed-based item's comparisons across seeds, by key and metric
        (:meth:`ItemResult.seed_comparisons`; ``{}`` for an item the record lacks)."""
        found = self.items.get(item)
        return found.seed_comparisons() if found else {}

    @functools.cached_property
    def speed(self) -> SpeedEvidence:
        """The speed item's evidence as its record, read once (empty without the item)."""
        return SpeedEvidence.from_json(self.evidence("speedup"))

    @property
    def time_to_quality(self) -> dict[str, Comparison]:
        """The speed item's time-to-quality comparisons, by key (each XLA mode vs off at its
        precision, each reduced precision vs float32 in its mode)."""
        return dict(self.speed.time_to_quality)

    @property
    def bench(self) -> BenchRecord:
        """The benchmark record the speed item's evidence embeds (empty without one)."""
        return self.speed.bench_record

    def to_json(self) -> dict[str, Any]:
        """Its fields; the solver, conditions, probe and looks only when it has them."""
        return write_fields(self, tuple(k for k in ("solver", "conditions", "probe", "looks") if not getattr(self, k)))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StudyReport:
        """A record as written (or any part of one: what is missing is empty)."""
        items = {name: _item(name, r) for name, r in (d.get("items") or {}).items()}
        return cls(**read_fields(cls, d, skip=("items",)), items=items)

    @classmethod
    def of(cls, report: StudyReport | Mapping[str, Any]) -> StudyReport:
        """``report`` as a record: itself, or read from its JSON."""
        return report if isinstance(report, StudyReport) else cls.from_json(report)


def reads_report(fn: Callable[..., T]) -> Callable[..., T]:
    """A view of the report whose first argument may also be the record's JSON (a
    ``validation.json`` read back, a test's part-record): it gets a :class:`StudyReport`."""

    @functools.wraps(fn)
    def view(report: StudyReport | Mapping[str, Any], *args: Any, **kwargs: Any) -> T:
        return fn(StudyReport.of(report), *args, **kwargs)

    return view


def _item(name: str, r: Mapping[str, Any]) -> ItemResult:
    """An item of a report record; a part-record's missing fields are empty."""
    empty = {"item": name, "status": "", "value": None, "threshold": None, "comparison": ">=", "summary": ""}
    return ItemResult.from_json({**empty, **r})


def build(
    items: Mapping[str, ItemResult],
    arms: Mapping[str, ArmSummary | Mapping[str, Any]],
    config: Mapping,
    machine: Mapping | None = None,
    figures: tuple[str, ...] = (),
    cost: RunCost | None = None,
    provenance: Provenance | None = None,
    solver: SolverSummary | None = None,
    conditions: Sequence[ConditionRow | Mapping] = (),
    probe: Mapping | None = None,
    looks: Sequence[Look] = (),
) -> StudyReport:
    """Assemble the report record. ``arms`` maps arm name -> its :class:`ArmSummary`
    (:meth:`ptycho.study.results.StudyResults.arms`; or its JSON);
    ``cost`` is :func:`pipeline_cost` of the run's job benchmarks; ``provenance`` says
    which run this is (config hash, git commit, MLflow parent run; the preset is added
    from ``config``), shown in the views' first lines; ``solver`` is
    :func:`ptycho.study.solver_view.summarise` of the conventional solver's records;
    ``conditions`` the rows of :func:`ptycho.study.conditions_view.rows` (a condition's
    accuracy or gradients FAIL fails the verdict); ``probe`` the summary of measured
    data's probe refinement (:func:`ptycho.study.probe.summary`); ``looks`` the looks of a
    study that added seeds until it decided (:mod:`ptycho.study.looks`)."""
    names = checklist.names()
    missing = [name for name in names if name not in items]
    if missing:
        raise ValueError(f"checklist items missing from the report: {', '.join(missing)}")
    arms = {name: ArmSummary.of(arm) for name, arm in arms.items()}
    failed = {name: arm.failure_words for name, arm in arms.items() if arm.failed}
    conditions = [ConditionRow.of(row) for row in conditions]
    statuses = {items[name].status for name in names}
    statuses |= {check.status for row in conditions for check in row.checks.values()}
    # PASS only when every item passes; INCONCLUSIVE (too few seeds to say) is not a PASS.
    verdict = (
        "FAIL" if failed or statuses - {"PASS", "INCONCLUSIVE"} else max(statuses, key=("PASS", "INCONCLUSIVE").index)
    )
    prov = provenance or Provenance()
    return StudyReport(
        verdict=verdict,
        items={name: items[name] for name in names},
        arms=arms,
        failed_arms=failed,
        machine=dict(machine or {}),
        figures=tuple(figures),
        cost=cost or RunCost(),
        config={k: v for k, v in config.items() if k != "presets"},
        provenance=dataclasses.replace(prov, preset=prov.preset or config.get("preset", "")),
        generated_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        solver=solver,
        conditions=tuple(conditions),
        probe=dict(probe) if probe else None,
        looks=tuple(looks),
    )


def pipeline_cost(bench_dir: str | Path) -> RunCost:
    """Where the run's time went, from Snakemake's ``benchmark:`` files (one TSV per job).

    Per step (the folder or file name under ``bench_dir``: train, infer, stitch, ...):
    jobs, their summed wall and CPU seconds and the largest peak RSS. ``span_s`` runs
    from the first job's start (its end minus its wall time) to the last job's end, so
    it counts the time jobs waited for each other but not the report itself; a span much
    longer than the jobs' sum would mean the outputs come from several invocations.
    """
    import csv

    steps: dict[str, list[tuple[float, float, float]]] = {}
    starts, ends = [], []
    for path in sorted(Path(bench_dir).rglob("*.tsv")):
        rel = path.relative_to(bench_dir)
        step = rel.parts[0] if len(rel.parts) > 1 else path.stem
        try:
            with open(path, newline="") as fh:
                rows = list(csv.DictReader(fh, delimiter="\t"))
            wall = float(rows[-1]["s"])
        except (OSError, KeyError, IndexError, ValueError):
            continue  # a job killed mid-write leaves no usable line: its time is unknown, not zero
        row = rows[-1]
        end = path.stat().st_mtime
        starts.append(end - wall)
        ends.append(end)
        steps.setdefault(step, []).append((wall, _column(row, "cpu_time"), _column(row, "max_rss")))
    if not steps:
        return RunCost()
    per = {
        step: StepCost(len(jobs), sum(j[0] for j in jobs), sum(j[1] for j in jobs), max(j[2] for j in jobs))
        for step, jobs in steps.items()
    }
    return RunCost(
        dict(sorted(per.items(), key=lambda kv: -kv[1].wall_s)),
        max(ends) - min(starts),
        sum(v.wall_s for v in per.values()),
        sum(v.cpu_s for v in per.values()),
    )


def _column(row: Mapping[str, str], key: str) -> float:
    """A benchmark column as a number; Snakemake writes "NA" (or nothing) where it could not measure."""
    try:
        return float(row.get(key) or 0.0)
    except ValueError:
        return 0.0


#: The files of one report, by key: the record and its two views.
REPORT_FILES = {"json": "validation.json", "md": "validation.md", "html": "validation.html"}
