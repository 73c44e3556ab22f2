"""A pipeline job's child run: what ``ptycho --mlflow-parent JSON`` opens around a command.

:func:`job_run` is the command line's one tracking hook. It reads the parent run's JSON
(written by ``ptycho track start``), names and tags the job's run, opens it as a child
of the parent with a journal beside the pipeline's outputs, closes the runs of earlier
attempts whose process was killed, runs the job (under system metrics when asked) and
sends the job's :class:`~ptycho.tracking.record.JobRecord` to the run.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path

from ptycho.tracking.journal import journal_path
from ptycho.tracking.parent import sweep_children
from ptycho.tracking.provenance import git_commit, source_tags
from ptycho.tracking.record import JobRecord, Progress
from ptycho.tracking.runs import child_run, log_record
from ptycho.tracking.runs import system_metrics as sampling

_log = logging.getLogger(__name__)


def job_tags(command: str, tags: Mapping[str, str], commit: str, parent: Mapping) -> dict[str, str]:
    """The job's own tags: the ones given, the command, the commit, the configuration in
    force (the workflow exports its hash; it may differ from the parent's after a config
    change re-ran some jobs) and the SLURM job, if any."""
    out = dict(tags, command=command, git_commit=commit)
    out.setdefault("config_hash", os.environ.get("PTYCHO_CONFIG_HASH") or parent.get("config_hash", ""))
    if "SLURM_JOB_ID" in os.environ:
        out["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    return out


def job_run(
    parent_json: str | os.PathLike,
    command: str,
    job: Callable[[Progress], JobRecord],
    *,
    tags: Mapping[str, str] | None = None,
    name: str = "",
    params: Mapping[str, str] | None = None,
    device: bool = False,
    system_metrics: bool = False,
    done: Callable[[JobRecord], None] | None = None,
) -> JobRecord:
    """Run ``job(live)`` inside a child run ``name`` (else ``command``) of the parent in
    ``parent_json`` and log its record.

    ``tags``, ``params``: the run's own (``--mlflow-tag``; the arm's params).
    ``device``: tag the TensorFlow device (the job runs TensorFlow in this process).
    ``system_metrics``: sample CPU, memory and GPU while the job runs. ``live(step,
    metrics)`` logs a long job's progress as it goes. ``done(record)`` runs inside the
    run, after the record is logged. Returns the record.
    """
    from ptycho.artifacts import read_json

    parent = read_json(parent_json)
    commit = git_commit(Path.cwd())
    all_tags = job_tags(command, dict(tags or {}), commit, parent)
    name = name or command
    journal = journal_path(parent_json, name)
    if device:
        from ptycho.runtime import device_info

        info = device_info()
        all_tags.update(device=info["device"], gpus=", ".join(info["gpus"]) or "none")
    all_tags.update(source_tags(commit))
    with child_run(parent["tracking_uri"], parent["run_id"], name, all_tags, params, journal=journal) as run:
        end_stale_runs(parent, name)
        with sampling(run) if system_metrics else nullcontext():
            record = job(lambda step, metrics: run.log_metrics(metrics, step=step))
        log_record(run, record, all_tags)
        if done is not None:
            done(record)
    return record


def end_stale_runs(parent: Mapping, name: str) -> None:
    """Close the runs of earlier attempts: replayed from their journal if the job went on
    without the server, KILLED if its process was killed; never fails the job."""
    try:
        swept = sweep_children(parent["tracking_uri"], parent["run_id"], by=f"job {name} (pid {os.getpid()})")
    except Exception as exc:  # bookkeeping of other runs must not stop this one
        _log.warning("could not look for stale MLflow runs: %s", exc)
        return
    for line in swept.lines():
        print(f"ptycho: {line}", file=sys.stderr)
