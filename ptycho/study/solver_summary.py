"""The report's ``solver`` entry as types: the conventional solver beside the networks.

:func:`ptycho.study.solver_view.summarise` builds a :class:`SolverSummary` from the solve
job's records (:mod:`ptycho.study.solver_record`) and the networks' arms; the report
stores its JSON (:meth:`SolverSummary.to_json`, :meth:`SolverSummary.from_json`: the one
code that knows the entry's keys) and the solver and conditions sections read it back.
Without a ground truth (measured data) the quality is the data misfit and ``target`` is
``None``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.study.bench.record import Interval


@dataclass(frozen=True)
class Reach:
    """Where a flat-start solve first reaches a quality: its iterations and seconds per object."""

    iterations: float
    seconds: float

    def to_json(self) -> dict[str, float]:
        return {"iterations": self.iterations, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Reach | None:
        return None if not d else cls(d["iterations"], d["seconds"])


@dataclass(frozen=True)
class ModeSummary:
    """The solver's flat start in one XLA mode: its timing, why it stopped, its quality at
    the end and over its checkpoints (``curve``: iteration, scores, seconds per object)."""

    compile_s: float
    seconds_per_iteration: float
    iterations: float
    stopped: tuple[str, ...]
    seconds_per_object: float
    final: Mapping[str, float]
    target: Reach | None  #: where it reaches the solver's target quality (ground truth only)
    curve: tuple[Mapping[str, float], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "compile_s": self.compile_s,
            "seconds_per_iteration": self.seconds_per_iteration,
            "iterations": self.iterations,
            "stopped": list(self.stopped),
            "seconds_per_object": self.seconds_per_object,
            "final": dict(self.final),
            "target": self.target.to_json() if self.target else None,
            "curve": [dict(p) for p in self.curve],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModeSummary:
        return cls(
            d["compile_s"],
            d["seconds_per_iteration"],
            d["iterations"],
            tuple(d["stopped"]),
            d["seconds_per_object"],
            d["final"],
            Reach.from_json(d.get("target")),
            tuple(d["curve"]),
        )


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
class SolverSummary:
    """The report's ``solver`` entry."""

    ground_truth: bool
    engine: str
    config: Mapping[str, Any]
    objects: int
    patterns: int
    modes: Mapping[str, ModeSummary]  #: flat starts, by XLA mode
    fastest: str  #: the mode with the fastest iteration
    ratios: Mapping[str, Interval] = field(default_factory=dict)  #: each mode's iteration speed vs off
    half_scan: Mapping[str, Any] | None = None  #: measured data: the half-scan resolution of one mode
    networks: tuple[NetworkSummary, ...] = ()
    match: Mapping[str, Reach | None] = field(default_factory=dict)  #: network arm -> where the solver matches it
    warm_start: tuple[Mapping[str, Any], ...] = ()  #: one row per start from a network's reconstruction
    warm_mode: str = ""

    @property
    def best(self) -> ModeSummary:
        """The fastest mode's flat start, the one the headline and the matches speak of."""
        return self.modes[self.fastest]

    def to_json(self) -> dict[str, Any]:
        return {
            "ground_truth": self.ground_truth,
            "engine": self.engine,
            "config": dict(self.config),
            "objects": self.objects,
            "patterns": self.patterns,
            "modes": {m: r.to_json() for m, r in self.modes.items()},
            "ratios": {m: r.to_json() for m, r in self.ratios.items()},
            "half_scan": self.half_scan,
            "fastest": self.fastest,
            "networks": [n.to_json() for n in self.networks],
            "match": {arm: r.to_json() if r else None for arm, r in self.match.items()},
            "warm_start": [dict(row) for row in self.warm_start],
            "warm_mode": self.warm_mode,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SolverSummary:
        return cls(
            ground_truth=d.get("ground_truth", True),
            engine=d.get("engine", "apg"),
            config=d.get("config") or {},
            objects=d.get("objects", 0),
            patterns=d.get("patterns", 0),
            modes={m: ModeSummary.from_json(r) for m, r in d["modes"].items()},
            fastest=d["fastest"],
            ratios={m: Interval.from_json(r) for m, r in (d.get("ratios") or {}).items()},
            half_scan=d.get("half_scan"),
            networks=tuple(NetworkSummary.from_json(n) for n in d.get("networks", ())),
            match={arm: Reach.from_json(r) for arm, r in (d.get("match") or {}).items()},
            warm_start=tuple(d.get("warm_start", ())),
            warm_mode=d.get("warm_mode", ""),
        )

    @classmethod
    def of(cls, solver: SolverSummary | Mapping[str, Any]) -> SolverSummary:
        return solver if isinstance(solver, SolverSummary) else cls.from_json(solver)
