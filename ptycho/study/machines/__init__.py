"""The study's answer per machine kind (``python -m ptycho machines``; docs/machines.md):
the finished reports of several runs of ONE study, made on machines of different kinds
(one report answers for its own kind only), set side by side. :mod:`.sources` reads them
(results folders, report folders or files, MLflow stores); :mod:`.table` judges and renders."""

from ptycho.study.machines.sources import load
from ptycho.study.machines.table import write

__all__ = ["load", "write"]
