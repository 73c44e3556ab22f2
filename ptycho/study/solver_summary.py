"""The report's ``solver`` entry as types: the conventional solver beside the networks.

:func:`ptycho.study.solver_view.summarise` builds a :class:`SolverSummary` from the solve
job's records (:mod:`ptycho.study.solver_record`) and the networks' arms; the report
stores its JSON (its keys are the records' field names, :mod:`ptycho.study.json_record`)
and the solver and conditions sections read it back.
Without a ground truth (measured data) the quality is the data misfit and ``target`` is
``None``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.study.bench.record import Interval
from ptycho.study.json_record import JsonRecord
from ptycho.study.solver_record import CurvePoint, WarmStart


@dataclass(frozen=True)
class Reach(JsonRecord):
    """Where a flat-start solve first reaches a quality: its iterations and seconds per object."""

    iterations: float
    seconds: float


@dataclass(frozen=True)
class ModeSummary(JsonRecord):
    """The solver's flat start in one XLA mode: its timing, why it stopped, its quality at
    the end and over its checkpoints (``curve``: iteration, scores, seconds per object)."""

    compile_s: float
    seconds_per_iteration: float
    iterations: float
    stopped: tuple[str, ...]
    seconds_per_object: float
    final: Mapping[str, float | None]
    target: Reach | None  #: where it reaches the solver's target quality (ground truth only)
    curve: tuple[CurvePoint, ...]


@dataclass(frozen=True)
class NetworkSummary:
    """A trained network arm beside the solver: its quality (amplitude and phase SSIM and
    phase PSNR; without a ground truth its own measures), its inference time for one
    object's patterns and its training time."""

    arm: str
    quality: Mapping[str, float | None]
    seconds_per_object: float | None
    training_minutes: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            **self.quality,
            "seconds_per_object": self.seconds_per_object,
            "training_minutes": self.training_minutes,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NetworkSummary:
        own = ("arm", "seconds_per_object", "training_minutes")
        return cls(
            d["arm"],
            {k: v for k, v in d.items() if k not in own},
            d.get("seconds_per_object"),
            d.get("training_minutes"),
        )


@dataclass(frozen=True)
class SolverSummary(JsonRecord):
    """The report's ``solver`` entry."""

    ground_truth: bool = True
    engine: str = "apg"
    config: Mapping[str, Any] = field(default_factory=dict)
    objects: int = 0
    patterns: int = 0
    modes: Mapping[str, ModeSummary] = field(kw_only=True)  #: flat starts, by XLA mode
    ratios: Mapping[str, Interval] = field(default_factory=dict)  #: each mode's iteration speed vs off
    half_scan: Mapping[str, Any] | None = None  #: measured data: the half-scan resolution of one mode
    fastest: str = field(kw_only=True)  #: the mode with the fastest iteration
    networks: tuple[NetworkSummary, ...] = ()
    match: Mapping[str, Reach | None] = field(default_factory=dict)  #: network arm -> where the solver matches it
    warm_start: tuple[WarmStart, ...] = ()  #: one row per start from a network's reconstruction
    warm_mode: str = ""

    @property
    def best(self) -> ModeSummary:
        """The fastest mode's flat start, the one the headline and the matches speak of."""
        return self.modes[self.fastest]

    @classmethod
    def of(cls, solver: SolverSummary | Mapping[str, Any]) -> SolverSummary:
        return solver if isinstance(solver, SolverSummary) else cls.from_json(solver)
