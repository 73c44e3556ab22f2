"""The benchmark: every XLA mode timed against the reference, each arm in its own process.

:mod:`.coordinator` runs it (:func:`run`, :func:`ratios`, :func:`fastest`),
:mod:`.worker` is the arm's process, :mod:`.machine` the machine and its foreign load
(psutil), :mod:`.tables` the record's tables (:func:`tables`, :func:`format_table`).
Its statistics are :mod:`ptycho.study.stats`. Imports no TensorFlow.
"""

from __future__ import annotations

from ptycho.study.bench.coordinator import BenchConfig, arm_runs, fastest, ratios, run
from ptycho.study.bench.machine import ForeignLoad, machine_info
from ptycho.study.bench.tables import format_table, tables

__all__ = [
    "BenchConfig",
    "arm_runs",
    "ForeignLoad",
    "fastest",
    "format_table",
    "machine_info",
    "ratios",
    "run",
    "tables",
]
