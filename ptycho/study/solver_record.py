"""The solve job's record (``solver/solve.json``, ``solver/warm_start.json``, a condition's
``solve.json``) as typed records: one :class:`SolverRun` per (mode, start), and the
:class:`SolveRecord` that holds them with the data and the ratios. :meth:`to_json` and
:meth:`from_json` are the only code that knows its keys; the solve job writes it, the
results reader (:attr:`ptycho.study.results.StudyResults.solver_records`) reads it, and
the solver and conditions views take it from there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptycho.artifacts import stored_number
from ptycho.errors import PtychoError

#: The start from a unit object (no prior); the others are named after their networks.
FLAT = "flat"


@dataclass(frozen=True)
class SolverRun:
    """One (mode, start) of a solve: its timing per iteration and per object, why it
    stopped, the misfit per iteration, quality at the checkpoints (``curve``: the
    iteration and the scores, or without a ground truth the data misfit) and at the end."""

    mode: str
    start: str
    compile_s: float  #: per object
    iterations: float  #: per object, on average
    stopped: tuple[str, ...]
    seconds_per_iteration: float  #: median, after the warm-up
    seconds_per_object: float
    iteration_seconds: tuple[float, ...]
    misfit: tuple[float, ...]
    curve: tuple[Mapping[str, float], ...]
    final: Mapping[str, Any]

    @property
    def flat(self) -> bool:
        return self.start == FLAT

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "start": self.start,
            "compile_s": self.compile_s,
            "iterations": self.iterations,
            "stopped": list(self.stopped),
            "seconds_per_iteration": self.seconds_per_iteration,
            "seconds_per_object": self.seconds_per_object,
            "iteration_seconds": list(self.iteration_seconds),
            "misfit": list(self.misfit),
            "curve": [dict(p) for p in self.curve],
            "final": dict(self.final),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SolverRun:
        return cls(
            d["mode"],
            d["start"],
            stored_number(d["compile_s"]),
            stored_number(d["iterations"]),
            tuple(d.get("stopped", ())),
            stored_number(d["seconds_per_iteration"]),
            stored_number(d["seconds_per_object"]),
            tuple(stored_number(v) for v in d.get("iteration_seconds", ())),
            tuple(stored_number(v) for v in d.get("misfit", ())),
            tuple(d.get("curve", ())),
            d.get("final") or {},
        )


@dataclass(frozen=True)
class SolveRecord:
    """One solve job: the engine and its settings, the data (digest, objects, patterns,
    whether it has a ground truth), the modes and starts, a :class:`SolverRun` each, and
    per mode its iteration time relative to ``off`` (``ratios``, a bootstrap interval),
    the warm starts' table and, without a ground truth, the half-scan resolution."""

    engine: str
    config: Mapping[str, Any]
    dataset_digest: str
    ground_truth: bool
    objects: int
    patterns: int
    modes: tuple[str, ...]
    starts: Mapping[str, str | None]
    runs: tuple[SolverRun, ...]
    #: None when ``off`` was not among the modes (no key in the JSON)
    ratios: Mapping[str, Mapping[str, float]] | None = None
    warm_start: tuple[Mapping[str, Any], ...] = ()
    half_scan: Mapping[str, Any] | None = None

    def flat_runs(self) -> dict[str, SolverRun]:
        """Mode -> its run from the flat start."""
        return {r.mode: r for r in self.runs if r.flat}

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "config": dict(self.config),
            "dataset_digest": self.dataset_digest,
            "ground_truth": self.ground_truth,
            "objects": self.objects,
            "patterns": self.patterns,
            "modes": list(self.modes),
            "starts": dict(self.starts),
            "runs": [r.to_json() for r in self.runs],
            **({"ratios": {k: dict(v) for k, v in self.ratios.items()}} if self.ratios is not None else {}),
            "warm_start": [dict(row) for row in self.warm_start],
            **({"half_scan": dict(self.half_scan)} if self.half_scan is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], path: str = "") -> SolveRecord:
        """The record as ``ptycho solve --out`` wrote it (records from before a key existed
        read with its default); PtychoError naming ``path`` for anything else."""
        try:
            return cls(
                d["engine"],
                d.get("config") or {},
                d.get("dataset_digest", ""),
                bool(d.get("ground_truth", True)),
                int(d["objects"]),
                int(d["patterns"]),
                tuple(d.get("modes", ())),
                d.get("starts") or {},
                tuple(SolverRun.from_json(r) for r in d["runs"]),
                d.get("ratios"),
                tuple(d.get("warm_start") or ()),
                d.get("half_scan"),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PtychoError(f"{path}: not a solver record; pass the JSON written by 'ptycho solve --out'") from None
