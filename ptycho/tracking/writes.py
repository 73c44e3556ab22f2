"""Each kind of write to a run, as MLflow receives it: the one place a journal line
(:mod:`ptycho.tracking.journal`) meets MLflow, for a job's live writes
(:class:`~ptycho.tracking.runs.Run`) and a replay (:mod:`ptycho.tracking.replay`) alike.
Every kind is idempotent, so that a retry or a replay adds nothing: params are the same
values, tags upserts, metrics carry their first timestamp (MLflow drops an exact
duplicate), artifacts overwrite the same path, a dataset and a logged model are found
before they are created, a table is replaced.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ptycho.tracking.store import limit, safe_key

#: Why a run ended other than FINISHED: the one-line error, or what found it stale.
END_REASON_TAG = "ptycho.end_reason"


def send(client: Any, run_id: str, line: Mapping[str, Any]) -> None:
    """Send one journal line to run ``run_id``."""
    from mlflow.entities import Metric, Param, RunTag

    op = line["op"]
    if op == "params":
        client.log_batch(run_id, params=[Param(k, v) for k, v in line["params"].items()])
    elif op in ("tags", "run"):
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in (line.get("tags") or {}).items()])
    elif op == "metrics":  # MlflowClient.log_batch splits a batch at MLflow's limits itself
        metrics = [Metric(k, float(v), int(t), int(s)) for k, v, t, s in line["metrics"]]
        client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v) for k, v in line.get("tags", {}).items()])
    elif op == "artifact":
        client.log_artifact(run_id, line["path"], line.get("artifact_path"))
    elif op == "dataset":
        _log_dataset(client, run_id, line["name"], line["digest"], line["source"], line["split"])
    elif op == "model":
        _log_model(client, run_id, **{k: v for k, v in line.items() if k not in ("op", "run_id", "uri")})
    elif op == "table":
        write_table(client, run_id, line["columns"], line["artifact_file"])
    elif op == "end":
        if line.get("stale"):
            client.set_tag(run_id, END_REASON_TAG, line["stale"])
        client.set_terminated(run_id, line["status"], end_time=line.get("end_time"))


def write_table(client, run_id: str, columns: Mapping[str, list], artifact_file: str) -> None:
    """Log ``columns`` as the table artifact ``artifact_file`` of ``run_id``, replacing it.

    The file is what ``MlflowClient.log_table`` writes (JSON ``{"columns", "data"}``) and
    the run gets the same ``mlflow.loggedArtifacts`` entry, so the UI shows a table; but
    ``log_table`` appends to an existing table, which would repeat every row each time
    the report runs again or a journal is replayed: here the file is replaced.
    """
    import json
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


def _log_dataset(client: Any, run_id: str, name: str, digest: str, source_path: str | os.PathLike, split: str) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = Dataset(
        name=name,
        digest=digest[: limit("MAX_DATASET_DIGEST_SIZE")],
        source_type="local",
        source=json.dumps({"uri": os.path.abspath(os.fspath(source_path))}),
        schema=None,
        profile=json.dumps({"digest": digest, "split": split}),
    )
    inputs = [DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, split)])]
    client.log_inputs(run_id, datasets=inputs)


def _log_model(
    client: Any,
    run_id: str,
    name: str,
    local_dir: str,
    params: Mapping[str, str],
    tags: Mapping[str, str],
    metrics: Mapping[str, float],
    step: int,
    timestamp: int,
    dataset: list[str] | None,
) -> str:
    """Create (or find) the logged model ``name`` of ``run_id``, upload ``local_dir`` once,
    link ``metrics`` to it, and list it as the run's output; returns its model id.

    A second call (a retry, a journal replay) finds the model by name and source run
    instead of creating another, and re-sends metrics with the same timestamp, which
    MLflow drops as duplicates.
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    run = client.get_run(run_id)
    experiment_id = run.info.experiment_id
    found = client.search_logged_models(
        [experiment_id], max_results=1, filter_string=f"name = '{name}' AND source_run_id = '{run_id}'"
    )
    model = (
        found[0]
        if found
        else client.create_logged_model(
            experiment_id, name=name, source_run_id=run_id, params=dict(params), tags=dict(tags), model_type="keras"
        )
    )
    if model.status != LoggedModelStatus.READY:
        client.log_model_artifacts(model.model_id, local_dir)
        client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    dataset_name, dataset_digest = (
        (dataset[0], dataset[1][: limit("MAX_DATASET_DIGEST_SIZE")]) if dataset else (None, None)
    )
    for key, value in metrics.items():
        client.log_metric(
            run_id,
            safe_key(key),
            value,
            timestamp=timestamp,
            step=step,
            model_id=model.model_id,
            dataset_name=dataset_name,
            dataset_digest=dataset_digest,
        )
    if model.model_id not in {o.model_id for o in (run.outputs.model_outputs if run.outputs else [])}:
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
    return model.model_id
