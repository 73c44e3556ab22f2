"""What a job tells MLflow, as one value, and each kind of write as MLflow receives it.

The study's job functions (:mod:`ptycho.study.jobs`) build a :class:`JobRecord` whether
or not a run exists; the CLI hands it to :func:`~ptycho.tracking.runs.log_record` in one
place. A job's code therefore never asks "is there a run?", and what it reports is a
plain value a test can read.

Each kind of write is one entry of :data:`KINDS`: the record's values it logs, the
journal line (:mod:`ptycho.tracking.journal`) such a value becomes, how a line is sent
to MLflow (for a job's live writes and a replay alike) and what a replay counts. A new
kind of logged value is a field of :class:`JobRecord` and its entry in :data:`KINDS`.
Every kind is idempotent, so that a retry or a replay adds nothing: params are the same
values, tags upserts, metrics carry their first timestamp (MLflow drops an exact
duplicate), artifacts overwrite the same path, a dataset and a logged model are found
before they are created, a table is replaced.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptycho.tracking.store import fit_tags, flatten_params, limit, safe_key

#: MLflow's tag for a run's description (its note, shown on the run's page).
NOTE_TAG = "mlflow.note.content"
#: Why a run ended other than FINISHED: the one-line error, or what found it stale.
END_REASON_TAG = "ptycho.end_reason"


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
    """Everything a job logs: its values in the order of :data:`KINDS`, then the nested runs."""

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


@dataclass(frozen=True)
class Kind:
    """One kind of write to a run (a journal line's ``op``)."""

    #: Send one journal line of this kind to run ``run_id``: ``send(client, run_id, line)``.
    send: Callable[[Any, str, Mapping[str, Any]], None]
    #: What a message says the write was doing, from the line.
    what: Callable[[Mapping[str, Any]], str]
    #: The line's fields for one value, taken once before any attempt, so that a retry or
    #: a replay sends the same line (None: written by the tracking layer itself).
    line: Callable[[Any], dict] | None = None
    #: The values of this kind in a :class:`JobRecord` (None: none).
    values: Callable[[JobRecord], Iterable[Any]] | None = None
    #: What a replay counts a line as, and the field whose length is its count ('': one).
    count: tuple[str, str] = ("", "")
    #: Whether a unique-constraint conflict is retried (a row concurrent jobs share).
    conflicts: bool = False
    #: Where a copy that did not fit lies (``partial(client, run_id, line)``), to remove.
    partial: Callable[[Any, str, Mapping[str, Any]], Path | None] | None = None


def _now() -> int:
    return int(time.time() * 1000)


def _log_batch(client: Any, run_id: str, line: Mapping[str, Any]) -> None:
    """Params, metrics (``[key, value, timestamp, step]``) and tags of a line in one call;
    ``MlflowClient.log_batch`` splits a batch at MLflow's limits itself."""
    from mlflow.entities import Metric, Param, RunTag

    client.log_batch(
        run_id,
        params=[Param(k, v) for k, v in (line.get("params") or {}).items()],
        metrics=[Metric(k, float(v), int(t), int(s)) for k, v, t, s in line.get("metrics") or []],
        tags=[RunTag(k, v) for k, v in (line.get("tags") or {}).items()],
    )


def _metrics_line(value: tuple[int | None, Mapping[str, float]]) -> dict:
    step, metrics = value
    now, step = _now(), int(step or 0)
    return {"metrics": [[safe_key(k), float(v), now, step] for k, v in metrics.items()]}


def _send_dataset(client: Any, run_id: str, line: Mapping[str, Any]) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = Dataset(
        name=line["name"],
        digest=line["digest"][: limit("MAX_DATASET_DIGEST_SIZE")],
        source_type="local",
        source=json.dumps({"uri": line["source"]}),
        schema=None,
        profile=json.dumps({"digest": line["digest"], "split": line["split"]}),
    )
    client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, line["split"])])])


def _model_line(m: LoggedModel) -> dict:
    return {
        "name": m.name,
        "local_dir": os.path.abspath(os.fspath(m.local_dir)),
        "params": flatten_params(m.params),
        "tags": fit_tags(m.tags),
        "metrics": {k: float(v) for k, v in m.metrics.items()},
        "step": int(m.step),
        "timestamp": _now(),
        "dataset": list(m.dataset) if m.dataset else None,
    }


def _send_model(client: Any, run_id: str, line: Mapping[str, Any]) -> str:
    """Create (or find) the logged model ``name`` of ``run_id``, upload ``local_dir`` once,
    link ``metrics`` to it, and list it as the run's output; returns its model id.

    A second call (a retry, a journal replay) finds the model by name and source run
    instead of creating another, and re-sends metrics with the same timestamp, which
    MLflow drops as duplicates.
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    run = client.get_run(run_id)
    experiment_id, name = run.info.experiment_id, line["name"]
    found = client.search_logged_models(
        [experiment_id], max_results=1, filter_string=f"name = '{name}' AND source_run_id = '{run_id}'"
    )
    model = (
        found[0]
        if found
        else client.create_logged_model(
            experiment_id,
            name=name,
            source_run_id=run_id,
            params=dict(line["params"]),
            tags=dict(line["tags"]),
            model_type="keras",
        )
    )
    if model.status != LoggedModelStatus.READY:
        client.log_model_artifacts(model.model_id, line["local_dir"])
        client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    dataset = line.get("dataset")
    dataset_name, dataset_digest = (
        (dataset[0], dataset[1][: limit("MAX_DATASET_DIGEST_SIZE")]) if dataset else (None, None)
    )
    for key, value in line["metrics"].items():
        client.log_metric(
            run_id,
            safe_key(key),
            value,
            timestamp=line["timestamp"],
            step=line["step"],
            model_id=model.model_id,
            dataset_name=dataset_name,
            dataset_digest=dataset_digest,
        )
    if model.model_id not in {o.model_id for o in (run.outputs.model_outputs if run.outputs else [])}:
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, line["step"])])
    return model.model_id


def write_table(client: Any, run_id: str, columns: Mapping[str, list], artifact_file: str) -> None:
    """Log ``columns`` as the table artifact ``artifact_file`` of ``run_id``, replacing it.

    The file is what ``MlflowClient.log_table`` writes (JSON ``{"columns", "data"}``) and
    the run gets the same ``mlflow.loggedArtifacts`` entry, so the UI shows a table; but
    ``log_table`` appends to an existing table, which would repeat every row each time
    the report runs again or a journal is replayed: here the file is replaced.
    """
    import tempfile

    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    names = list(columns)
    rows = [
        [None if isinstance(v, float) and not math.isfinite(v) else v for v in row]  # JSON has no NaN
        for row in zip(*(columns[c] for c in names), strict=True)
    ]
    folder, name = os.path.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        local.write_text(json.dumps({"columns": names, "data": rows}, default=str))
        client.log_artifact(run_id, str(local), folder or None)
    listed = json.loads(client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
    entry = {"path": artifact_file, "type": "table"}
    if entry not in listed:
        client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps([*listed, entry]))


def _send_end(client: Any, run_id: str, line: Mapping[str, Any]) -> None:
    if line.get("stale"):
        client.set_tag(run_id, END_REASON_TAG, line["stale"])
    client.set_terminated(run_id, line["status"], end_time=line.get("end_time"))


def _local_artifact(client: Any, run_id: str, line: Mapping[str, Any]) -> Path | None:
    """Where an ``artifact`` line's file lands when the run's artifacts are a local folder
    (a SQLite store's ``mlartifacts``), else None (a server's)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(client.get_run(run_id).info.artifact_uri)
    if parts.scheme not in ("", "file"):
        return None
    base = Path(urllib.parse.unquote(parts.path)).joinpath(*(line.get("artifact_path") or "").split("/"))
    return base / os.path.basename(os.path.normpath(line["path"]))


#: Every kind of write, by journal ``op``, in the order a :class:`JobRecord` is logged.
KINDS: dict[str, Kind] = {
    "params": Kind(
        line=lambda params: {"params": flatten_params(params)},
        send=_log_batch,
        what=lambda line: "logging params",
        values=lambda r: [r.params] if r.params else [],
        count=("params", "params"),
    ),
    "tags": Kind(
        line=lambda tags: {"tags": fit_tags(tags)},
        send=_log_batch,
        what=lambda line: "setting tags",
        values=lambda r: [r.tags] if r.tags else [],
        count=("tags", "tags"),
    ),
    "dataset": Kind(
        line=lambda d: {"name": d.name, "digest": d.digest, "source": os.path.abspath(d.source), "split": d.split},
        send=_send_dataset,
        what=lambda line: f"logging dataset {line['name']!r}",
        values=lambda r: r.datasets,
        conflicts=True,  # concurrent jobs logging the same dataset race to insert its row
    ),
    "metrics": Kind(
        line=_metrics_line,
        send=_log_batch,
        what=lambda line: "logging metrics",
        values=lambda r: [(step, m) for step, m in [(0, r.metrics), *r.stepped] if m],
        count=("metrics", "metrics"),
    ),
    "artifact": Kind(
        line=lambda a: {"path": os.path.abspath(os.fspath(a[0])), "artifact_path": a[1]},
        send=lambda client, run_id, line: client.log_artifact(run_id, line["path"], line.get("artifact_path")),
        what=lambda line: f"logging the artifact {os.path.basename(line['path'])}",
        values=lambda r: r.artifacts,
        count=("artifacts", ""),
        partial=_local_artifact,
    ),
    "model": Kind(
        line=_model_line,
        send=_send_model,
        what=lambda line: f"logging model {line['name']!r}",
        values=lambda r: [r.model] if r.model is not None else [],
        count=("models", ""),
    ),
    "table": Kind(
        line=lambda t: {"columns": dict(t[0]), "artifact_file": t[1]},
        send=lambda client, run_id, line: write_table(client, run_id, line["columns"], line["artifact_file"]),
        what=lambda line: "logging a table",
        count=("artifacts", ""),
    ),
    "run": Kind(  # a run's creation (journaled where it is created; its tags sent again on a replay)
        send=_log_batch,
        what=lambda line: "tagging the run",
        count=("tags", "tags"),
    ),
    "end": Kind(
        line=lambda end: {"status": end[0], "end_time": _now(), **({"stale": end[1]} if end[1] else {})},
        send=_send_end,
        what=lambda line: f"marking the run {line['status']}",
        count=("ends", ""),
    ),
}


def send(client: Any, run_id: str, line: Mapping[str, Any]) -> None:
    """Send one journal line to run ``run_id``."""
    KINDS[line["op"]].send(client, run_id, line)
