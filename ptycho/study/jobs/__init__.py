"""The pipeline's jobs: each reads its inputs, does its one thing, writes its outputs
atomically and returns a :class:`~ptycho.tracking.record.JobRecord` of what it did.

One function per tracked CLI command (``ptycho simulate``, ``train``, ...). The CLI
parses arguments into the values these take and hands the record to tracking in one
place (``ptycho.cli``), so nothing here asks whether an MLflow run exists; a test can
call a job and read its record. Heavy libraries are imported inside, as everywhere.
"""

from ptycho.study.jobs.data import export_cxi, import_data, simulate
from ptycho.study.jobs.nets import CURVE_KEYS, evaluate, evaluate_measured, evaluate_scored, infer, stitch, train
from ptycho.study.jobs.study import bench, check, condition, figures, look, report, scaling

__all__ = [
    "CURVE_KEYS",
    "bench",
    "check",
    "condition",
    "evaluate",
    "evaluate_measured",
    "evaluate_scored",
    "export_cxi",
    "figures",
    "import_data",
    "infer",
    "look",
    "report",
    "scaling",
    "simulate",
    "stitch",
    "train",
]
