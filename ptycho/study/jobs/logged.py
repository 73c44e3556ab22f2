"""What the jobs log of their inputs: settings as prefixed params, datasets as MLflow dataset inputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ptycho.tracking.record import DatasetInput, JobRecord


def prefixed(prefix: str, cfg: Any) -> dict[str, Any]:
    """A settings dataclass as MLflow params, each key under ``prefix``."""
    return {f"{prefix}.{k}": v for k, v in dataclasses.asdict(cfg).items()}


def dataset_input(name: str, digest: str, path: str, split: str) -> DatasetInput:
    """A dataset file as a run's input (its digest, its absolute path, its split)."""
    return DatasetInput(name, digest, str(Path(path).resolve()), split)


def with_dataset(record: JobRecord, name: str, ds, path: str, split: str) -> JobRecord:
    """``record`` with the dataset ``ds`` read from ``path`` as its input and its digest as a tag."""
    record.tags["dataset_digest"] = ds.attrs["digest"]
    record.datasets.append(dataset_input(name, ds.attrs["digest"], path, split))
    return record
