"""What one job tells MLflow, as one value.

The study's job functions (:mod:`ptycho.study.jobs`) build a :class:`JobRecord` whether
or not a run exists; the CLI hands it to :func:`log_record` in one place. A job's code
therefore never asks "is there a run?", and what it reports is a plain value a test can
read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.tracking.runs import Run, child_run

#: MLflow's tag for a run's description (its note, shown on the run's page).
NOTE_TAG = "mlflow.note.content"


@dataclass(frozen=True)
class DatasetInput:
    """A dataset file a run used (the runs table's Dataset column)."""

    name: str
    digest: str
    source: str  #: absolute path
    split: str


@dataclass(frozen=True)
class LoggedModel:
    """A trained network to register as an MLflow 3 logged model of the run."""

    name: str
    local_dir: str
    params: Mapping[str, Any]
    tags: Mapping[str, Any]
    metrics: Mapping[str, float]
    step: int
    dataset: tuple[str, str] | None = None  #: (name, digest) of a dataset logged by the run


@dataclass(frozen=True)
class NestedRun:
    """A run nested under the job's run (one per benchmarked arm), same keys in each."""

    name: str
    tags: Mapping[str, Any]
    params: Mapping[str, Any]
    metrics: Mapping[str, float]


@dataclass
class JobRecord:
    """Everything a job logs, in the order :func:`log_record` sends it."""

    summary: str = ""  #: what the command prints (one line, or a table)
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    datasets: list[DatasetInput] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    #: Metrics at a step (per image, per epoch): ``(step, {key: value})``.
    stepped: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    #: ``(local path, artifact folder or None)``.
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)
    model: LoggedModel | None = None
    nested: list[NestedRun] = field(default_factory=list)
    #: A failure recorded as a result (a diverged training): the run ends FAILED with this
    #: reason while the job itself succeeds, so that the report can say so.
    failure: str = ""
    #: The study's parent run this job closes (``track start``'s record: ``run_id``,
    #: ``tracking_uri``): the report's job.
    close_parent: Mapping[str, str] | None = None
    #: What to log on other runs of the study before closing it, by run name ('' = the
    #: parent): the verdict on the parent, each arm's answer on the arm's run.
    others: dict[str, JobRecord] = field(default_factory=dict)


#: A job's live progress (a training's epochs): ``(step, {key: value})``.
Progress = Callable[[int, Mapping[str, float]], None]


def log_record(run: Run, record: JobRecord, job_tags: Mapping[str, Any]) -> None:
    """Send ``record`` to ``run``: params, tags, datasets, metrics, artifacts, the model,
    the nested runs (each with the job's tags, overridden by its own), and a failure."""
    if record.params:
        run.log_params(record.params)
    if record.tags:
        run.set_tags(record.tags)
    for d in record.datasets:
        run.log_dataset(d.name, d.digest, d.source, d.split)
    if record.metrics:
        run.log_metrics(record.metrics)
    for step, metrics in record.stepped:
        run.log_metrics(metrics, step=step)
    for path, folder in record.artifacts:
        run.log_artifact(path, folder)
    if record.model is not None:
        m = record.model
        run.log_model(
            m.name, m.local_dir, params=m.params, tags=m.tags, metrics=m.metrics, step=m.step, dataset=m.dataset
        )
    inherited = {k: v for k, v in job_tags.items() if k != NOTE_TAG}  # a nested run says what it is itself
    for nested in record.nested:
        journal = run.journal.path.with_name(f"{nested.name}.jsonl") if run.journal is not None else None
        with child_run(
            run.uri, run.run_id, nested.name, {**inherited, **nested.tags}, nested.params, journal=journal
        ) as child:
            child.log_metrics(nested.metrics)
    if record.failure:
        run.fail_on_exit(record.failure)
