"""The speed item's evidence as a record (:class:`SpeedEvidence`): what
:func:`ptycho.study.checklist.speedup.speedup` found, written by its check
(``checks/speedup.json``, the report's ``items.speedup.evidence``) and read by the report's
speed section, its sentences, the looks and the machines table, so that each key is named
once, here (:mod:`ptycho.study.json_record` writes and reads it). The time-to-quality
comparisons are :class:`~ptycho.study.ttq_comparison.Comparison` records; the benchmark is
kept as its own record's JSON (:class:`~ptycho.study.bench.record.BenchRecord` reads it,
:attr:`SpeedEvidence.bench_record`). Imports nothing of TensorFlow.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.study.bench.record import BenchRecord
from ptycho.study.bench.result import CrossCheck
from ptycho.study.json_record import JsonRecord, write_fields
from ptycho.study.ttq_comparison import Comparison

#: What the verdict was judged by (:attr:`Judged.by`).
BY_TIME_TO_QUALITY, BY_STEP = "time_to_quality", "step"


@dataclass(frozen=True)
class Judged(JsonRecord):
    """What the verdict's value is: one time-to-quality comparison (the best XLA mode's),
    or, without a trained XLA pair, the benchmark's per-step ratio in a context."""

    by: str = ""  #: :data:`BY_TIME_TO_QUALITY` or :data:`BY_STEP`
    comparison: str = ""  #: by time to quality: the comparison's key (``pinn-physics``)
    context: str = ""  #: by step: the benchmark's context (alone, shared)
    arm: str = ""  #: by step: the fastest arm, when one was timed

    def to_json(self) -> dict[str, Any]:
        """Its fields, those that do not apply to how it was judged left out."""
        return {k: v for k, v in write_fields(self).items() if v or k == "by"}


@dataclass(frozen=True)
class SpeedEvidence(JsonRecord):
    """What the speed item measured: its time-to-quality comparisons (each XLA mode vs off
    at the same precision, each reduced precision vs float32 in the same mode), the
    benchmark's per-step findings in words, the cross-check of the benchmark against the
    trainings, and the benchmark and machine themselves."""

    judged: Judged | None = None
    time_to_quality: Mapping[str, Comparison] = field(default_factory=dict)
    context: str = "alone"  #: the benchmark's context the per-step verdict reads
    #: context -> XLA's per-step effect in words (benchmark, fastest mode vs off)
    per_step: Mapping[str, str] = field(default_factory=dict)
    precision: str = ""  #: the precision's own effect in words, never XLA's
    recommendation: str = ""  #: the fastest configuration on this machine kind, in words
    batch: str = ""  #: XLA's per-step effect by batch size, in words
    cross_check: Mapping[str, CrossCheck] = field(default_factory=dict)
    cross_check_words: str = ""
    bench: Mapping[str, Any] = field(default_factory=dict)  #: the benchmark's record (its JSON)
    #: the benchmark's ratios by their words (read by people, never parsed)
    intervals: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    machine: Mapping[str, Any] = field(default_factory=dict)  #: the benchmark's machine record
    #: training arm -> its job's timings
    training_jobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @functools.cached_property
    def bench_record(self) -> BenchRecord:
        """The benchmark as its record, read once."""
        return BenchRecord.of(self.bench)

    def per_step_words(self) -> str:
        """XLA's per-step effect in the verdict's context, in words (``""`` when not measured)."""
        return self.per_step.get(self.context, "")
