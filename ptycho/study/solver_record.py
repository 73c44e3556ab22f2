"""The solve job's record (``solver/solve.json``, ``solver/warm_start.json``, a condition's
``solve.json``) as typed records: one :class:`SolverRun` per (mode, start), and the
:class:`SolveRecord` that holds them with the data and the ratios. Their JSON keys are
their field names (:mod:`ptycho.study.json_record`); the solve job writes it, the
results reader (:attr:`ptycho.study.results.StudyResults.solver_records`) reads it, and
the solver and conditions views take it from there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.errors import PtychoError
from ptycho.study.json_record import JsonRecord, read_fields, write_fields

#: The start from a unit object (no prior); the others are named after their networks.
FLAT = "flat"
#: A checkpoint's scores against a ground truth, and its quality without one: how well
#: the object explains the data (lower is better).
SCORES, MISFIT = ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr"), "data_misfit"


@dataclass(frozen=True)
class CurvePoint(JsonRecord):
    """A solve's objects at one checkpoint: their mean amplitude and phase SSIM and PSNR
    against the ground truth, or without one their data misfit (lower explains the data
    better); ``seconds`` per object to get there where the report's summary adds it. It
    writes the scores of its kind (a score stored as null, an infinite PSNR, stays null)
    and ``seconds`` where it has them."""

    iteration: int
    amp_ssim: float | None = None
    phase_ssim: float | None = None
    amp_psnr: float | None = None
    phase_psnr: float | None = None
    data_misfit: float | None = None
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        other = (MISFIT,) if self.data_misfit is None else SCORES
        return write_fields(self, other + (("seconds",) if self.seconds is None else ()))

    def reaches(self, amp: float, phase: float) -> bool:
        """Its amplitude and phase SSIM both reach ``amp`` and ``phase``."""
        return self.amp_ssim is not None and self.amp_ssim >= amp and self.phase_ssim >= phase


@dataclass(frozen=True)
class WarmStart(JsonRecord):
    """A warm start against one target: the flat start's quality after ``flat_iterations``
    (its SSIMs, or without a ground truth its data misfit), and the iterations the start
    from a network's reconstruction needed to reach it (``None``: it never did), the
    iterations and seconds per object that saved. It writes the targets of its kind."""

    mode: str
    start: str
    flat_iterations: int
    target_amp_ssim: float | None = None
    target_phase_ssim: float | None = None
    target_data_misfit: float | None = None
    iterations: int | None = None
    iterations_saved: int | None = None
    seconds_saved: float | None = None

    def to_json(self) -> dict[str, Any]:
        other = ("target_data_misfit",) if self.target_data_misfit is None else ("target_amp_ssim", "target_phase_ssim")
        return write_fields(self, other)


@dataclass(frozen=True)
class SolverRun(JsonRecord):
    """One (mode, start) of a solve: its timing per iteration and per object, why it
    stopped, the misfit per iteration, quality at the checkpoints (``curve``: the
    iteration and the scores, or without a ground truth the data misfit) and at the end."""

    mode: str
    start: str
    compile_s: float  #: per object
    iterations: float  #: per object, on average
    stopped: tuple[str, ...] = field(default=(), kw_only=True)
    seconds_per_iteration: float  #: median, after the warm-up
    seconds_per_object: float
    iteration_seconds: tuple[float, ...] = field(default=(), kw_only=True)
    misfit: tuple[float, ...] = field(default=(), kw_only=True)
    curve: tuple[CurvePoint, ...] = field(default=(), kw_only=True)
    final: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    @property
    def flat(self) -> bool:
        return self.start == FLAT


@dataclass(frozen=True)
class SolveRecord(JsonRecord):
    """One solve job: the engine and its settings, the data (digest, objects, patterns,
    whether it has a ground truth), the modes and starts, a :class:`SolverRun` each, and
    per mode its iteration time relative to ``off`` (``ratios``, a bootstrap interval),
    the warm starts' table and, without a ground truth, the half-scan resolution."""

    engine: str
    config: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    dataset_digest: str = field(default="", kw_only=True)
    ground_truth: bool = field(default=True, kw_only=True)
    objects: int
    patterns: int
    modes: tuple[str, ...] = field(default=(), kw_only=True)
    starts: Mapping[str, str | None] = field(default_factory=dict, kw_only=True)
    runs: tuple[SolverRun, ...]
    #: None when ``off`` was not among the modes (no key in the JSON)
    ratios: Mapping[str, Mapping[str, float]] | None = None
    warm_start: tuple[WarmStart, ...] = ()
    half_scan: Mapping[str, Any] | None = None

    def flat_runs(self) -> dict[str, SolverRun]:
        """Mode -> its run from the flat start."""
        return {r.mode: r for r in self.runs if r.flat}

    def to_json(self) -> dict[str, Any]:
        """Its fields; ``ratios`` and ``half_scan`` only when there are some."""
        skip = tuple(k for k in ("ratios", "half_scan") if getattr(self, k) is None)
        return write_fields(self, skip)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], path: str = "") -> SolveRecord:
        """The record as ``ptycho solve --out`` wrote it (records from before a key existed
        read with its default); PtychoError naming ``path`` for anything else."""
        try:
            return cls(**read_fields(cls, d))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PtychoError(f"{path}: not a solver record; pass the JSON written by 'ptycho solve --out'") from None
