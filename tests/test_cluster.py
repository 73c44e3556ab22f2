"""Cluster submission: the SLURM profiles against a real SLURM, and MLflow across nodes.

The slow test starts a one-node SLURM (``tests/slurm.py``: munged, slurmctld, slurmd,
installed with apt-get when missing), runs the smoke pipeline through it with
``--profile profiles/slurm --profile tests/profiles/slurm-test`` and checks that every
job went through sbatch and that MLflow holds the runs a local run would create; then
makes one job fail and checks that the failure is reported, by Snakemake and in
MLflow. It needs root (to install and run the daemons) and skips without it; CI runs
as root. ``-s`` prints how long each phase took.

The fast tests pin the profiles' rules (every entry explained, nothing
cluster-specific in the default profile) and the tracking-server checks that make a
cluster run fail in one line up front.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import mlflow_server
import numpy as np
import pytest
import yaml
from test_pipeline import _workdir

from ptycho import tracking
from ptycho.errors import PtychoError

ROOT = Path(__file__).resolve().parent.parent
SLURM_PROFILE = ROOT / "profiles" / "slurm" / "config.yaml"
TEST_PROFILE = ROOT / "tests" / "profiles" / "slurm-test" / "config.yaml"
DEFAULT_PROFILE = ROOT / "profiles" / "default" / "config.yaml"
PROFILE_ARGS = ("--profile", str(SLURM_PROFILE.parent), "--profile", str(TEST_PROFILE.parent))


# ------------------------------------------------------------------------ profiles
def _entries_without_comment(path: Path) -> list[str]:
    """Lines setting a value with no comment on the line or right above it.

    A nested block header (``  train:``) needs none: its entries carry theirs.
    """
    lines = path.read_text().splitlines()
    bare = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("#") or "#" in text or (text.endswith(":") and line.startswith(" ")):
            continue
        if i == 0 or not lines[i - 1].strip().startswith("#"):
            bare.append(line)
    return bare


@pytest.mark.parametrize("profile", [SLURM_PROFILE, TEST_PROFILE, DEFAULT_PROFILE], ids=lambda p: p.parent.name)
def test_every_profile_entry_says_why(profile):
    assert yaml.safe_load(profile.read_text()), f"{profile} is empty"
    assert _entries_without_comment(profile) == []


def test_slurm_profile_requests_what_the_plugin_understands():
    prof = yaml.safe_load(SLURM_PROFILE.read_text())
    assert prof["executor"] == "slurm"
    # Real clusters have accounting: the plugin's default (sacct) polling is kept.
    assert "slurm-status-command" not in prof and "slurm-init-seconds-before-status-checks" not in prof
    train = prof["set-resources"]["train"]
    # snakemake-executor-plugin-slurm 2.8 turns 'gpu' into --gpus=N (gpu_model/gres are the alternatives).
    assert train["gpu"] >= 1 and {"mem_mb", "runtime", "cpus_per_task"} <= set(train)
    assert {"mem_mb", "runtime"} <= set(prof["default-resources"])
    assert prof["retries"] >= 1 and prof["latency-wait"] >= 5 and prof["jobs"] >= 1
    # bench asks for workflow.cores, which a cluster executor leaves undefined.
    assert prof["cores"] >= 1 and "bench" in prof["set-threads"]


def test_default_profile_holds_no_cluster_keys():
    """Snakemake lets the workflow profile override --profile key by key: no key may collide."""
    default = set(yaml.safe_load(DEFAULT_PROFILE.read_text()))
    cluster = set(yaml.safe_load(SLURM_PROFILE.read_text())) | set(yaml.safe_load(TEST_PROFILE.read_text()))
    assert default.isdisjoint(cluster)
    assert not any(
        k.startswith("slurm") or k in ("executor", "jobs", "cores", "latency-wait", "retries") for k in default
    )


def test_test_profile_polls_with_squeue_after_two_seconds():
    prof = yaml.safe_load(TEST_PROFILE.read_text())
    assert prof["slurm-status-command"] == "squeue"
    assert prof["slurm-init-seconds-before-status-checks"] == 2
    assert "gpu" not in str(prof.get("set-resources", {}))


# ----------------------------------------------------------- tracking server checks
def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_server():
    """A fake MLflow 3 server (its answers: /health for anyone, the API only for Host 127.0.0.1)."""
    with mlflow_server.fake_server() as port:
        yield port


def test_preflight_passes_a_server_that_answers_the_api(fake_server):
    tracking.preflight(f"http://127.0.0.1:{fake_server}", timeout=5)


def test_preflight_refuses_a_server_that_rejects_the_host_name(fake_server):
    """/health answers anyone, so only an API call shows the 403 jobs on other nodes would get."""
    uri = f"http://localhost:{fake_server}"
    with pytest.raises(PtychoError) as err:
        tracking.preflight(uri, timeout=5)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"MLflow tracking server at {uri} refuses requests addressed to 'localhost:{fake_server}'")
    assert "MLFLOW_ALLOWED_HOSTS" in msg and "make mlflow-server" in msg


def test_preflight_refuses_an_address_without_the_mlflow_api(fake_server):
    uri = f"http://127.0.0.1:{fake_server}/not-mlflow"
    with pytest.raises(PtychoError, match=r"has no MLflow tracking API \(HTTP 404"):
        tracking.preflight(uri, timeout=5)


def test_preflight_environment_checks_only_a_server(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.preflight_environment()  # embedded store: left to the parent run's job
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    tracking.preflight_environment()
    assert not (tmp_path / "new").exists()  # no side effects while the workflow is parsed
    uri = f"http://127.0.0.1:{_unused_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(PtychoError, match=f"MLflow tracking server at {uri} is unreachable"):
        tracking.preflight_environment(timeout=2)


def test_unreachable_tracking_server_stops_the_workflow_before_any_job(tmp_path):
    """What ``snakemake --profile profiles/slurm all`` must do with a server that is down.

    Run with the local executor: the check belongs to the parse phase, which is the same
    for every executor, and a job that never starts cannot be submitted.
    """
    work = _workdir(tmp_path)
    uri = f"http://127.0.0.1:{_unused_port()}"
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "all", "--config", "preset=smoke"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("ptycho workflow: error:")]
    assert len(errors) == 1 and f"MLflow tracking server at {uri} is unreachable" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not re.search(r"(?m)^(local)?rule ", result.stdout + result.stderr)  # no job started
    assert not (work / "results").exists()


@pytest.mark.slow
def test_mlflow_server_target_serves_jobs_that_address_it_by_host_name(tmp_path):
    """``make mlflow-server`` as a cluster uses it: bound to all interfaces, reached by name.

    Its database and artifacts go to ``tmp_path`` (``CURDIR`` overridden); ``-o`` keeps
    make from rebuilding the venv. A run logged through the host name must land, its
    artifact uploaded through the server; a name that is not allowed gets the one-line
    403 explanation, and ``MLFLOW_ALLOWED_HOSTS`` adds names to the defaults.
    """
    port = _unused_port()
    env = dict(os.environ, MLFLOW_HOST="0.0.0.0", MLFLOW_PORT=str(port), MLFLOW_ALLOWED_HOSTS=f"127.0.0.3:{port}")
    server = subprocess.Popen(
        ["make", "-s", "-o", ".venv/.installed", "mlflow-server", f"CURDIR={tmp_path}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # its own process group: make, mlflow and its workers
    try:
        by_name = f"http://{socket.gethostname()}:{port}"
        deadline = time.monotonic() + 240
        while True:
            try:
                tracking.preflight(by_name, timeout=5)
                break
            except PtychoError:
                assert server.poll() is None, server.stdout.read()[-3000:]
                assert time.monotonic() < deadline, "make mlflow-server did not answer within 240 s"
                time.sleep(1)
        tracking.preflight(f"http://127.0.0.3:{port}")
        with pytest.raises(PtychoError, match=rf"refuses requests addressed to '127.0.0.2:{port}' \(HTTP 403"):
            tracking.preflight(f"http://127.0.0.2:{port}")

        parent = tracking.start_parent(by_name, "cluster-server", "pipeline", params={"a": 1}, tags={})
        note = tmp_path / "note.txt"
        note.write_text("from a compute node\n")
        with tracking.child_run(by_name, parent, "train", tags={"rule": "train"}) as run:
            run.log_metrics({"loss": 0.5}, step=1)
            run.log_artifact(note)
        tracking.finish_run(by_name, parent)
        uploaded = list((tmp_path / "results" / "mlflow-artifacts").rglob("note.txt"))
        assert [p.read_text() for p in uploaded] == ["from a compute node\n"]
        assert (tmp_path / "results" / "mlflow-server.db").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(server.pid):
            time.sleep(0.2)
        if _group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# -------------------------------------------------------------------- real SLURM
@pytest.fixture(scope="module")
def cluster():
    """A running one-node SLURM for this module; stopped, and checked gone, afterwards."""
    import slurm

    if os.geteuid() != 0:
        pytest.skip("a real SLURM needs root (apt-get install, munged, slurmctld, slurmd); CI runs as root")
    try:
        slurm.ensure_installed()
    except slurm.Unavailable as why:
        pytest.skip(f"no SLURM: {why}")
    node = slurm.Cluster(slurm.scratch_root())
    try:
        node.start()
        print(f"\nSLURM ready in {node.seconds_to_ready:.1f} s ({node.root})")
        yield node
    finally:
        survivors = node.stop()
        logs = "".join(node.log_tail(d) for d in node.DAEMONS) if survivors else ""
        shutil.rmtree(node.root, ignore_errors=True)
        assert not survivors, f"processes left after stopping SLURM: {survivors}{logs}"


def _snakemake(cluster, work: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """Snakemake through SLURM; on timeout SIGINT (it cancels its jobs), then SIGKILL after 60 s."""
    env = dict(cluster.env, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("MLFLOW_TRACKING_URI", None)  # the embedded store in the work folder
    cmd = [sys.executable, "-m", "snakemake", "--cores", "8", *PROFILE_ARGS, *args]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"snakemake {' '.join(args)} still running after {timeout:.0f} s; interrupted\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _runs(work: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{work / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xla-ptycho")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    # The jobs' runs (the benchmark's per-arm runs nest one level deeper, in its job).
    ids = {r.info.run_id for r in parents}
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in ids]
    return parents, children


@pytest.mark.slow
@pytest.mark.cluster
def test_smoke_pipeline_through_slurm_tracks_every_job_and_reports_a_failure(cluster, tmp_path):
    work = _workdir(tmp_path)
    shutil.copytree(ROOT / "profiles", work / "profiles")  # profiles/default applies itself, as for a user
    timings = {}

    # What a local run would log: one child run per tracked job, named by its rule tag.
    t0 = time.monotonic()
    plan = _snakemake(cluster, work, "all", "--config", "preset=smoke", "--dry-run", "--printshellcmds", timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = plan.stdout + plan.stderr
    expected = Counter(re.findall(r"--mlflow-tag rule=(\S+)", planned))
    assert {"simulate": 1, "train": 4, "infer": 4, "stitch": 4, "evaluate": 4}.items() <= expected.items()
    timings["dry run"] = time.monotonic() - t0

    t0 = time.monotonic()
    before = cluster.submitted_batch_jobs()
    first = _snakemake(cluster, work, "all", "--config", "preset=smoke", timeout=3600)
    timings["smoke pipeline through SLURM"] = time.monotonic() - t0
    assert first.returncode == 0, first.stderr[-5000:]
    submitted = cluster.submitted_batch_jobs() - before
    # What Snakemake says it submitted is what slurmctld accepted, and it did submit.
    reported = set(re.findall(r"has been submitted with SLURM jobid (\d+)", first.stdout + first.stderr))
    assert reported == submitted and len(submitted) >= sum(expected.values())

    parents, children = _runs(work)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert Counter(r.data.tags["rule"] for r in children) == expected
    assert all(r.info.status == "FINISHED" for r in children)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children)
    job_ids = [r.data.tags.get("slurm_job_id") for r in children]
    assert None not in job_ids, "a job ran outside SLURM (no slurm_job_id tag)"
    assert len(set(job_ids)) == len(job_ids) and set(job_ids) <= submitted  # one sbatch job each
    assert (work / "reports" / "smoke" / "validation.json").exists()

    # A job that fails on a cluster is reported as failed: by Snakemake and in MLflow.
    t0 = time.monotonic()
    stitched = work / "results" / "smoke" / "stitched" / "pinn-jit-s0.npz"
    # a whole .npz without the stitched arrays: a file cut short would be moved aside and made
    # again by the rerun (rules/rerun.smk), not handed to the job
    np.savez(stitched, unrelated=np.zeros(3))
    target = "results/smoke/metrics/pinn-jit-s0.json"
    failed = _snakemake(cluster, work, target, "--forcerun", "evaluate", "--config", "preset=smoke", timeout=900)
    timings["failing job"] = time.monotonic() - t0
    assert failed.returncode != 0
    assert "Error in rule evaluate" in failed.stdout + failed.stderr
    parents, children_after = _runs(work)
    new = [r for r in children_after if r.info.run_id not in {c.info.run_id for c in children}]
    attempts = 1 + yaml.safe_load(SLURM_PROFILE.read_text())["retries"]
    assert len(new) == attempts  # one child run per attempt: the profile's retries reach the cluster
    assert all(
        r.data.tags["rule"] == "evaluate" and r.data.tags["model"] == "pinn" and r.data.tags["xla"] == "jit"
        for r in new
    )
    assert all(r.info.status == "FAILED" for r in new)
    assert all(r.data.tags.get("slurm_job_id") in cluster.submitted_batch_jobs() for r in new)
    assert parents[0].info.status == "FAILED"  # the workflow's onerror handler

    print("\n" + "\n".join(f"{k}: {v:.0f} s" for k, v in timings.items()))


def test_a_server_on_a_port_already_taken_is_one_line_not_an_announcement(tmp_path, cli):
    """`ptycho serve` and `make ui` on a taken port announced the OTHER server's address as
    theirs (its /health answered), then failed with 'Address already in use' and exit 0."""
    with mlflow_server.fake_server() as port:
        served = cli(
            "serve", "--", sys.executable, "-c", "print('never run')", "--host", "127.0.0.1", "--port", str(port)
        )
        assert served.returncode != 0 and "serving at" not in served.stdout and "never run" not in served.stdout
        (line,) = [x for x in served.stderr.splitlines() if x.strip()]
        assert f"port {port} on 127.0.0.1 is already in use" in line and "choose another port (--port)" in line
        results = tmp_path / "results"
        results.mkdir()
        sqlite3.connect(results / "mlflow.db").close()
        ui = cli("track", "ui", str(results), "--port", str(port))
        assert ui.returncode != 0 and "MLflow UI at" not in ui.stdout
        (line,) = [x for x in ui.stderr.splitlines() if x.strip()]
        assert f"port {port} on 127.0.0.1 is already in use" in line and "make ui UI_PORT=5002" in line
