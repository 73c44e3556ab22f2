"""What the report keeps of one arm (``validation.json``'s ``arms.<name>``) as a type:
:class:`ArmSummary`, the one code that knows that entry's keys. The results reader builds
it (:meth:`ptycho.study.results.StudyResults.arms`), the report record holds it, and its
views (the training table, the MLflow answers, the solver's and the conditions' tables)
read its fields.

An entry has what the study gave of the arm: its training (``timing``, ``final``,
``status``, ``failure``) when it was trained, its mean scores (``metrics``) when it was
scored, its inference rate when it was timed; the JSON names only what it has, and no
other key (an older report's extra keys are not carried into a new one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptycho.study.json_record import JsonRecord
from ptycho.study.training_record import DIVERGED, FAILED


@dataclass(frozen=True)
class ArmSummary(JsonRecord):
    """One arm of the report: its training's timing and last epoch, its status and
    failure (``timing`` None: not trained in this study's records), its mean scores
    (``metrics`` None: not scored) and its inference rate (None: not timed)."""

    #: the training's timing without its per-step list (:attr:`TrainingRecord.timing`)
    timing: Mapping[str, Any] | None = None
    #: the training's last epoch line, as stored (None: it ended before its first epoch did)
    final: Mapping[str, Any] | None = None
    status: str | None = None
    failure: str | None = None
    metrics: Mapping[str, Any] | None = None
    infer_patterns_per_s: float | None = None

    @property
    def trained(self) -> bool:
        """A training was recorded for it (its timing, or at least its status)."""
        return self.timing is not None or self.status is not None

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    @property
    def failure_words(self) -> str:
        """Why a failed training failed (``diverged`` when its record says nothing)."""
        return self.failure or DIVERGED

    def _timed(self, key: str) -> Any:
        return (self.timing or {}).get(key)

    @property
    def compile_s(self) -> float | None:
        return self._timed("compile_s")

    @property
    def step_median_s(self) -> float | None:
        return self._timed("step_median_s")

    @property
    def train_wall_s(self) -> float | None:
        """The training's wall time, its epochs and validation readings."""
        return self._timed("train_wall_s")

    @property
    def trainings_at_once(self) -> int | None:
        """How many trainings ran beside each other when this one did (None: not recorded)."""
        return self._timed("trainings_at_once")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.trained:
            timing = None if self.timing is None else dict(self.timing)
            out.update(timing=timing, final=self.final, status=self.status, failure=self.failure)
        if self.metrics is not None:
            out["metrics"] = dict(self.metrics)
        if self.infer_patterns_per_s is not None:
            out["infer_patterns_per_s"] = self.infer_patterns_per_s
        return out

    @classmethod
    def of(cls, arm: ArmSummary | Mapping[str, Any]) -> ArmSummary:
        return arm if isinstance(arm, ArmSummary) else cls.from_json(arm)
