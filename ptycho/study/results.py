"""One reader of a study's outputs: :class:`StudyResults`.

The checklist items (the trained models and the test split the accuracy item runs; the
trainings, scores, stitched objects and bench the others judge), the figures job, the
report job and the solver and conditions views read a study's records through this
class, and nothing else opens them (the MLflow view reads the report's record): each file is
read once, checked against its producer's format (:func:`ptycho.artifacts.read_json`),
and handed on keyed by :class:`~ptycho.study.arms.Arm` (trainings) or by arm name (the
per-arm files, whose stems are arm names).

Snakemake gives each job the exact files it depends on, so a job builds the reader from
those paths (nothing is read until a property asks); a user or notebook opens a whole
results folder with :meth:`StudyResults.folder`. Unreadable or foreign files fail in one
line naming the file and the job to re-run (:class:`~ptycho.errors.PtychoError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.study.arm_summary import ArmSummary
from ptycho.study.arms import Arm, pairs, pattern
from ptycho.study.training_record import Epoch, TrainingRecord

if TYPE_CHECKING:
    from ptycho.study.bench.record import BenchRecord
    from ptycho.study.checklist.result import ItemResult
    from ptycho.study.looks import Look
    from ptycho.study.solver_record import SolveRecord


def _arm_of_file(path: str) -> Arm:
    """The arm a per-arm output belongs to: its file name's stem is the arm's name."""
    try:
        return Arm.parse(Path(path).stem)
    except ValueError as err:
        raise PtychoError(f"{path}: the file is not named after an arm ({err})") from None


def check_producer(item: str) -> str:
    """The job that writes checklist item ``item``'s record: its rule and its format's
    producer (:data:`ptycho.artifacts.FORMATS`), ``check_<item>``."""
    return f"check_{item}"


def _check_producer_of(record: dict) -> str:
    """The producer of a check record, by the item it names."""
    return check_producer(str(record.get("item")))


def _paths(values: Sequence[str | Path] | None) -> tuple[str, ...]:
    return tuple(map(str, values or ()))


@dataclass(frozen=True, eq=False)
class StudyResults:
    """A study's outputs, by kind: the trainings' ``model.json`` (``models``), the arms'
    ``ptycho evaluate`` records (``metrics``), stitched objects (``stitched``) and
    ``ptycho infer`` outputs (``reconstructions``), the test dataset, the benchmark record
    (``bench``), the checklist's records (``checks``), the solver's records (``solver``:
    the flat starts, then optionally the warm starts), the conditions' records
    (``conditions``: ``<condition>/check.json`` and ``solve.json``) and measured data's
    probe refinement record (``probe``). Each property reads what it needs once."""

    models: Sequence[str] = ()
    metrics: Sequence[str] = ()
    stitched: Sequence[str] = ()
    reconstructions: Sequence[str] = ()
    dataset: str | None = None
    bench: str | None = None
    checks: Sequence[str] = ()
    solver: Sequence[str] = ()
    conditions: Sequence[str] = ()
    probe: str | None = None
    looks: Sequence[str] = ()

    def __post_init__(self) -> None:
        for name in ("models", "metrics", "stitched", "reconstructions", "checks", "solver", "conditions"):
            object.__setattr__(self, name, _paths(getattr(self, name)))
        for name in ("dataset", "bench", "probe"):
            value = getattr(self, name)
            object.__setattr__(self, name, None if value is None else str(value))

    @classmethod
    def folder(cls, path: str | Path) -> StudyResults:
        """The outputs of the results folder ``path`` (``results/<study>``), as the
        workflow lays them out; kinds the folder has none of are empty."""
        root = Path(path)
        if not root.is_dir():
            raise PtychoError(f"{root}: no such results folder; pass results/<study> of a run")

        def glob(pattern: str) -> list[str]:
            return sorted(str(p) for p in root.glob(pattern))

        def arms_only(paths: list[str]) -> list[str]:
            """The per-arm files (the solver writes its own beside them: stitched/solver-<mode>.npz)."""
            return [p for p in paths if re.fullmatch(pattern(), Path(p).stem)]

        def one(name: str) -> str | None:
            return str(root / name) if (root / name).is_file() else None

        flat, warm = root / "solver" / "solve.json", root / "solver" / "warm_start.json"
        return cls(
            models=glob("models/*/model.json"),
            metrics=arms_only(glob("metrics/*.json")),
            stitched=arms_only(glob("stitched/*.npz")),
            reconstructions=arms_only(glob("reconstructions/*.npz")),
            dataset=one("data/test.h5"),
            bench=one("bench/bench.json"),
            checks=glob("checks/*.json"),
            solver=[str(p) for p in (flat, warm) if p.is_file()] if flat.is_file() else [],
            conditions=glob("conditions/*/check.json") + glob("conditions/*/solve.json"),
            probe=one("solver/probe.json"),
            looks=glob("looks/*.json"),
        )

    # ------------------------------------------------------------------ the trainings
    @cached_property
    def trainings(self) -> dict[Arm, TrainingRecord]:
        """Arm -> its training record (``model.json``), in the order given; two of one arm
        are refused in one line (which would the study judge?)."""
        from ptycho.artifacts import read_json

        out: dict[Arm, TrainingRecord] = {}
        for path in self.models:
            record = TrainingRecord.of(read_json(path, producer="train"))
            if record.arm in out:
                raise PtychoError(
                    f"{path}: a second training of arm {record.arm.name}; pass each arm's model.json once"
                )
            out[record.arm] = record
        return out

    @property
    def model_dirs(self) -> list[str]:
        """The trained models' folders (what loads the networks themselves)."""
        return [str(Path(p).parent) for p in self.models]

    @cached_property
    def histories(self) -> dict[Arm, tuple[Epoch, ...]]:
        """Arm -> its per-epoch training records (``model.json``'s ``history``)."""
        return {arm: r.history for arm, r in self.trainings.items()}

    @cached_property
    def timings(self) -> dict[str, Mapping[str, Any]]:
        """Arm name -> its training's timing, without the per-step list."""
        return {arm.name: r.timing for arm, r in self.trainings.items()}

    @cached_property
    def failed(self) -> dict[str, str]:
        """Arm name -> reason, for every training whose record says it diverged."""
        return {arm.name: r.failure_words for arm, r in self.trainings.items() if r.failed}

    @cached_property
    def loss_curves(self) -> dict[Arm, dict[str, list]]:
        """Arm -> ``{"train": [...], "val": [...]}`` per epoch, for every arm of a pair
        (:func:`ptycho.study.arms.pairs`: a mode and ``off``, or a reduced precision and
        float32): the compared arm and its reference."""
        histories = self.histories
        out: dict[Arm, dict[str, list]] = {}
        for pair in pairs(histories):
            for arm in (pair.reference, pair.arm):
                out[arm] = {
                    "train": [e.train_loss for e in histories[arm]],
                    "val": [e.val_loss for e in histories[arm]],
                }
        return out

    # ------------------------------------------------------------------ the scores
    @cached_property
    def scores(self) -> dict[str, dict[str, Any]]:
        """Arm name (the file's stem) -> its ``ptycho evaluate`` record."""
        from ptycho.artifacts import read_json

        return {Path(p).stem: read_json(p, producer="evaluate") for p in self.metrics}

    @cached_property
    def images(self) -> dict[str, np.ndarray]:
        """Arm name (the file's stem) -> its stitched objects (``ptycho stitch`` or ``solve``)."""
        from ptycho.artifacts import STITCHED, read_arrays

        return {Path(p).stem: read_arrays(p, ("images",), producer=STITCHED)["images"] for p in self.stitched}

    @cached_property
    def infer_rates(self) -> dict[str, float]:
        """Arm name (the file's stem) -> patterns per second of its ``ptycho infer`` output."""
        from ptycho.artifacts import read_arrays

        rates = {}
        for path in self.reconstructions:
            rec = read_arrays(path, ("seconds", "patterns"), producer="infer")
            rates[Path(path).stem] = float(rec["patterns"] / rec["seconds"])
        return rates

    @cached_property
    def truth(self) -> np.ndarray:
        """The test dataset's first object (complex), the one the figures show."""
        from ptycho.data.dataset import read_dataset

        if self.dataset is None:
            raise PtychoError("no test dataset given; pass the study's data/test.h5")
        return read_dataset(self.dataset).ground_truth(0)

    @cached_property
    def ground_truth(self) -> bool:
        """Whether the test dataset has a ground truth (simulated) or not (measured data)."""
        from ptycho.data.dataset import GROUND_TRUTH, read_attributes

        if self.dataset is None:
            raise PtychoError("no test dataset given; pass the study's data/test.h5")
        return bool(read_attributes(self.dataset).get(GROUND_TRUTH, True))

    @cached_property
    def compared(self) -> dict[Arm, dict[str, Any]]:
        """Arm -> :func:`ptycho.analysis.metrics.compare` of its first stitched object with
        the truth: what the metrics scored, as they scored it."""
        from ptycho.analysis.metrics import compare

        out = {}
        for path in self.stitched:
            images = self.images[Path(path).stem]
            if len(images) == 0 or images[0].shape != self.truth.shape:
                raise PtychoError(f"{path}: stitched images do not match the objects of {self.dataset}; re-run stitch")
            out[_arm_of_file(path)] = compare(images[0], self.truth)
        return out

    @cached_property
    def frc(self) -> dict[Arm, dict[str, Any]]:
        """Arm -> ``{"freq", "amp", "phase"}``: its first object's FRC curves with the truth."""
        out = {}
        for path in self.metrics:
            first = self.scores[Path(path).stem].get("per_image", [{}])[0]
            if "frc_freq" not in first:
                raise PtychoError(
                    f"{path}: no FRC curves in these metrics (written by an older version); re-run 'ptycho evaluate'"
                )
            out[_arm_of_file(path)] = {
                "freq": first["frc_freq"],
                "amp": first["amp_frc_curve"],
                "phase": first["phase_frc_curve"],
            }
        return out

    def arms(self) -> dict[str, ArmSummary]:
        """Arm name -> what the report keeps of it (:class:`~ptycho.study.arm_summary.ArmSummary`):
        its training's timing, last epoch, status and failure (when trained), its mean
        scores and its inference rate where those were given."""
        out: dict[str, ArmSummary] = {}
        for arm, r in self.trainings.items():
            out[arm.name] = ArmSummary(timing=r.timing, final=r.final, status=r.status, failure=r.failure)
        for name, scored in self.scores.items():
            out[name] = replace(out.get(name, ArmSummary()), metrics=scored.get("mean", {}))
        for name, rate in self.infer_rates.items():
            out[name] = replace(out.get(name, ArmSummary()), infer_patterns_per_s=rate)
        return out

    # ------------------------------------------------------------------ the other jobs' records
    @cached_property
    def benchmark(self) -> BenchRecord:
        """The benchmark record (``ptycho bench --out``)."""
        from ptycho.artifacts import read_json
        from ptycho.study.bench.record import BenchRecord

        if not self.bench:
            raise PtychoError("no benchmark record given; pass the JSON written by 'ptycho bench --out' (--bench)")
        timed = read_json(self.bench, producer="bench")
        if "arms" not in timed:
            raise PtychoError(f"{self.bench}: not a benchmark result; pass the JSON written by 'ptycho bench --out'")
        return BenchRecord.from_json(timed, str(self.bench))

    @cached_property
    def checked(self) -> dict[str, ItemResult]:
        """Item -> its result (``ptycho check --out``)."""
        from ptycho.artifacts import read_json
        from ptycho.study.checklist.result import ItemResult

        results = (ItemResult.from_json(read_json(p, producer=_check_producer_of)) for p in self.checks)
        return {r.item: r for r in results}

    @cached_property
    def solver_records(self) -> list[SolveRecord]:
        """The solver's records (``ptycho solve --out``): the flat starts, then the warm ones."""
        from ptycho.artifacts import SOLVER, read_json
        from ptycho.study.solver_record import SolveRecord

        return [SolveRecord.from_json(read_json(p, producer=SOLVER), p) for p in self.solver]

    @cached_property
    def condition_records(self) -> dict[str, dict[str, Any]]:
        """Condition -> ``{"check": ..., "solve": ...}``: its records, by their file names
        (the condition job's as a :class:`~ptycho.study.condition_record.ConditionCheck`, the
        solve job's as a :class:`~ptycho.study.solver_record.SolveRecord`)."""
        from ptycho.artifacts import SOLVER, read_json
        from ptycho.study.condition_record import ConditionCheck
        from ptycho.study.solver_record import SolveRecord

        records: dict[str, dict[str, Any]] = {}
        for path in self.conditions:
            p = Path(path)
            if p.name == "check.json":
                records.setdefault(p.parent.name, {})["check"] = ConditionCheck.from_json(
                    read_json(p, producer="condition")
                )
            elif p.name == "solve.json":
                records.setdefault(p.parent.name, {})["solve"] = SolveRecord.from_json(
                    read_json(p, producer=SOLVER), path
                )
            else:
                raise PtychoError(f"{path}: not a condition's record; pass <condition>/check.json and solve.json")
        return records

    @cached_property
    def look_records(self) -> tuple[Look, ...]:
        """The looks of a study that added seeds until it decided (:mod:`ptycho.study.looks`), in order."""
        from ptycho.artifacts import read_json
        from ptycho.study.looks import Look

        return tuple(sorted((Look.from_json(read_json(p, producer="look")) for p in self.looks), key=lambda k: k.index))

    @cached_property
    def refinement(self) -> dict[str, Any] | None:
        """Measured data's probe refinement as the report keeps it (:mod:`ptycho.study.probe`)."""
        from ptycho.artifacts import read_json
        from ptycho.study.probe import summary

        return summary(read_json(self.probe, producer="refine_probe")) if self.probe else None
