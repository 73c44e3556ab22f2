"""The benchmark: every XLA mode and precision timed against the reference, each arm in
its own process.

:mod:`.coordinator` runs it (:func:`run`), :mod:`.record` reads its record
(:class:`~.record.BenchRecord`), :mod:`.result` derives from it (:func:`ratios`,
:func:`fastest`, :func:`arm_runs`), :mod:`.worker` is the arm's process, :mod:`.machine` the machine and its foreign load
(psutil), :mod:`.roofline` the FLOPs and the machine's peak, :mod:`.tables` the record's
tables and words (:func:`tables`, :func:`format_table`, :func:`roofline_words`). Its
statistics are :mod:`ptycho.study.stats`. Imports no TensorFlow.
"""

from __future__ import annotations

from ptycho.study.bench.coordinator import BenchConfig, run
from ptycho.study.bench.machine import ForeignLoad, machine_info
from ptycho.study.bench.result import arm_runs, fastest, fastest_overall, ratios, xla_ratio
from ptycho.study.bench.tables import arm_words, batch_table, batch_words, format_table, roofline_words, tables

__all__ = [
    "BenchConfig",
    "arm_runs",
    "arm_words",
    "batch_table",
    "batch_words",
    "ForeignLoad",
    "fastest",
    "fastest_overall",
    "format_table",
    "machine_info",
    "ratios",
    "roofline_words",
    "run",
    "tables",
    "xla_ratio",
]
