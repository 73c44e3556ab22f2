"""Concurrency, counted: eight real processes logging at once lose and duplicate nothing.

Each process opens a child run of one parent and logs 1000 metric points (10 keys x 100
steps, one call per step as the training loop does), params before and after, tags
and an artifact, all released at the same moment. Against the embedded SQLite store
(the pipeline's default) and against a local MLflow server on 127.0.0.1: every point
must arrive exactly once, every process must succeed. The same points must be in each
process's journal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow_server import free_port, start_server, stop_server
from test_faults import _env

from ptycho import tracking

WORKERS, KEYS, STEPS = 8, 10, 100

_WORKER = """
import json, sys, time
from pathlib import Path
from ptycho import tracking
uri, parent, idx, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
keys, steps = int(sys.argv[5]), int(sys.argv[6])
artifact = sync / f"artifact-{idx}.txt"
artifact.write_text(f"worker {idx}\\n")
(sync / f"ready-{idx}").touch()
while not (sync / "go").exists():
    time.sleep(0.01)
t0 = time.monotonic()
with tracking.child_run(uri, parent, f"worker-{idx}", tags={"worker": idx}, params={"worker": idx},
                        journal=sync / "journal" / f"worker-{idx}.jsonl") as run:
    for step in range(steps):
        run.log_metrics({f"m{k}": idx * 1e6 + k * 1e3 + step for k in range(keys)}, step=step)
    run.log_params({"late": idx})
    run.set_tags({"done": "yes"})
    run.log_artifact(artifact, "files")
(sync / f"result-{idx}.json").write_text(json.dumps({"run_id": run.run_id, "retries": run.retries,
                                                     "seconds": time.monotonic() - t0}))
"""


def _eight_writers(uri: str, sync: Path) -> tuple[str, list[dict]]:
    from mlflow.tracking import MlflowClient

    sync.mkdir()
    parent = tracking.start_parent(uri, "concurrency", "counted", params={"workers": WORKERS}, tags={})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, uri, parent, str(i), str(sync), str(KEYS), str(STEPS)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 300
        while not all((sync / f"ready-{i}").exists() for i in range(WORKERS)):
            assert all(p.poll() is None for p in procs), [p.communicate()[1][-2000:] for p in procs if p.poll()]
            assert time.monotonic() < deadline, "workers did not get ready"
            time.sleep(0.05)
        t0 = time.monotonic()
        (sync / "go").touch()
        outcomes = [p.communicate(timeout=600) for p in procs]
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert [p.returncode for p in procs] == [0] * WORKERS, [err[-2000:] for _, err in outcomes]
    results = [json.loads((sync / f"result-{i}.json").read_text()) for i in range(WORKERS)]
    tracking.finish_run(uri, parent)

    client = MlflowClient(uri)
    exp = client.get_run(parent).info.experiment_id
    children = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(c.info.run_id for c in children) == sorted(r["run_id"] for r in results)
    points = 0
    for child in children:
        idx = int(child.data.tags["worker"])
        assert child.info.status == "FINISHED"
        assert child.data.params == {"worker": str(idx), "late": str(idx)}
        assert child.data.tags["done"] == "yes"
        assert [a.path for a in client.list_artifacts(child.info.run_id, "files")] == [f"files/artifact-{idx}.txt"]
        for k in range(KEYS):
            history = client.get_metric_history(child.info.run_id, f"m{k}")
            assert sorted((m.step, m.value) for m in history) == [(s, idx * 1e6 + k * 1e3 + s) for s in range(STEPS)]
            points += len(history)
        journal = [json.loads(line) for line in (sync / "journal" / f"worker-{idx}.jsonl").read_text().splitlines()]
        assert sum(len(r["metrics"]) for r in journal if r["op"] == "metrics") == KEYS * STEPS
    assert points == WORKERS * KEYS * STEPS == 8000  # every point exactly once
    locked = sum(r["retries"]["locked"] for r in results)
    print(f"\n{uri.split(':')[0]}: {WORKERS} x {KEYS * STEPS} points in {wall:.1f} s, {locked} lock retries")
    return parent, results


@pytest.mark.slow
def test_eight_processes_log_8000_points_to_sqlite_exactly_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    _eight_writers(uri, tmp_path / "sync")


@pytest.mark.slow
def test_eight_processes_log_8000_points_to_a_server_exactly_once(tmp_path):
    port = free_port()
    server = start_server(tmp_path, port)
    try:
        _eight_writers(f"http://127.0.0.1:{port}", tmp_path / "sync")
    finally:
        stop_server(server)
