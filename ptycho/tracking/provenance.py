"""Where a run came from: the git commit, the configuration's hash, MLflow's source
tags, and the process that owns it (host, pid and the pid's start time), by which a
later job tells a run left RUNNING by a killed process from one whose job still runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Mapping
from typing import Any

#: Tags naming the process that owns a child run: how a later job tells a run left
#: RUNNING by a killed process (stale) from one whose job is still going (live).
HOST_TAG, PID_TAG, PID_START_TAG = "ptycho.host", "ptycho.pid", "ptycho.pid_start"


def git_commit(repo_dir: str | os.PathLike) -> str:
    """The checked-out commit of ``repo_dir``, or ``''``; never raises.

    Tagging runs with the code version is provenance, not a requirement: a copy of the
    sources without ``.git``, a missing ``git`` binary or a repository git refuses to
    read must not stop a job, so every failure gives ``''``.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=os.fspath(repo_dir),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    sha = out.stdout.strip()
    if out.returncode != 0 or not sha or any(c not in "0123456789abcdef" for c in sha):
        return ""
    return sha


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's reserved source tags (the UI's "Source" and "Version" columns) for a run
    of this workflow at ``commit`` ('' outside a git checkout: no version tag)."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE

    tags = {MLFLOW_SOURCE_NAME: "ptycho", MLFLOW_SOURCE_TYPE: "JOB"}
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    return tags


def config_hash(config: Mapping[str, Any]) -> str:
    """First 16 hex characters of the SHA-256 of ``config`` as canonical JSON.

    Canonical (sorted keys, no whitespace) so that the same configuration always gives
    the same hash whatever the key order, and runs with identical settings can be
    grouped by one short tag. Values JSON cannot encode are hashed by their ``str``.
    """
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _process_start(pid: int) -> str:
    """When process ``pid`` started (psutil's creation time, to the 10 ms), or ``""``."""
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return ""


def process_identity(pid: int | None = None) -> dict[str, str]:
    """Tags naming this process: host name, pid and the pid's start time.

    The start time tells a live job from a later, unrelated process that got the same
    pid after the job was killed.
    """
    pid = os.getpid() if pid is None else pid
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PID_START_TAG: _process_start(pid)}


def process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` (started at ``start``, if known) still runs on this host."""
    now = _process_start(pid) if pid > 0 else ""
    return bool(now) and (not start or now == start)
