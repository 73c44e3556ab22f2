"""A rerun that tells the truth (issue 35): outputs lost under later results are made
again, one live run per results folder (even after ``snakemake --unlock``), config files
and work folders that do what the README says, report folders that never hold two
results folders' reports. Each case asserts the one line a user reads or the plan
Snakemake makes; the real Snakemake runs the workflow's own files in a temporary copy."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from test_pipeline import ROOT, _workdir, snakemake

from ptycho.errors import ConfigError, PtychoError
from ptycho.study import run_lock
from ptycho.study.preflight import check_report_folder, holes

SMOKE = ("--config", "preset=smoke")


def _touch(*paths: Path) -> None:
    """Each path made a whole file of its kind, empty: a zip for .keras and .npz, an HDF5
    file for .h5 and .cxi, a JSON object for .json (a rerun moves damaged ones aside); a
    folder for the ptychodus products' (a directory output)."""
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.parent.name == "products":
            p.mkdir(exist_ok=True)
        elif p.suffix in (".keras", ".npz"):
            zipfile.ZipFile(p, "w").close()
        elif p.suffix in (".h5", ".cxi"):
            import h5py

            h5py.File(p, "w").close()
        else:
            p.write_text("{}" if p.suffix == ".json" else "x")


# ------------------------------------------------------------------------ holes
def test_a_missing_file_is_a_hole_only_under_results_made_from_it(tmp_path):
    f = {name: tmp_path / name for name in ("data", "m_a", "m_b", "bench", "r_a", "r_new", "check", "report")}
    _touch(f["data"], f["m_b"], f["r_a"], f["check"], f["report"])
    stages = [
        {"": [str(f["data"])]},
        {"": [str(f["bench"])], "a": [str(f["m_a"])], "b": [str(f["m_b"])], "new": [str(tmp_path / "m_new")]},
        {"": [str(f["check"])], "a": [str(f["r_a"])], "new": [str(f["r_new"])]},
        {"": [str(f["report"])]},
    ]
    # arm a's model is gone under its reconstruction; the bench under the check; arm new is
    # new to the matrix (nothing of it exists): not a hole, the report's inputs re-run it.
    assert holes(stages) == [str(f["bench"]), str(f["m_a"])]
    assert holes([{"": [str(tmp_path / "nothing")]}, {"": [str(tmp_path / "nor-this")]}]) == []  # a fresh study
    # An arm's last file (its metrics) is read by the study's own (the checks): lost, it is a
    # hole ('Nothing to be done' before: only a later file of the arm itself counted), unless
    # the arm is new (nothing of it exists).
    metrics = {"a": [str(tmp_path / "metrics_a")], "b": [str(tmp_path / "metrics_b")], "new": [str(tmp_path / "x")]}
    _touch(tmp_path / "metrics_b")
    assert holes([*stages[:3], metrics, {"": [str(f["report"])]}]) == [str(f["bench"]), str(f["m_a"]), metrics["a"][0]]


def _finished_looking_study(tmp_path: Path, config: tuple[str, ...] = SMOKE) -> Path:
    """The workflow's files with a real parent run and store (the first two jobs, run for
    real), and every later output present, each newer than what it is made from: what
    Snakemake sees after a finished study. Dry runs then show what a rerun would do."""
    work = _workdir(tmp_path)
    done = snakemake(work, "results/smoke/mlflow/parent.json", *config)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = snakemake(work, "-n", "--quiet", "rules", "all", *config)
    assert plan.returncode == 0, plan.stderr[-3000:]
    listed = snakemake(work, "-n", "--summary", "all", *config)  # every output of the plan, one per line
    outputs = [line.split("\t")[0] for line in listed.stdout.splitlines()[1:] if "\t" in line]
    assert any(o.endswith("model.keras") for o in outputs), listed.stdout[-2000:]
    order = ["data/", "solver/solve", "models/", "bench/", "checks/", "/check.json", "reconstructions/", "stitched/"]
    order += ["solver/warm", "metrics/", "products/", "checks/quality", "figures/", "/report/", "reports/"]

    def stage(path: str) -> int:
        return max((i for i, key in enumerate(order) if key in path), default=0)

    t = time.time() - 1000
    for path in sorted(outputs, key=stage):
        p = work / path
        if not p.exists():
            _touch(p)
        os.utime(p, (t + stage(path), t + stage(path)))
    quiet = snakemake(work, "-n", "all", *config)
    assert "Nothing to be done" in quiet.stdout + quiet.stderr, quiet.stdout[-3000:]
    return work


def test_an_output_lost_under_finished_results_is_made_again_with_all_after_it(tmp_path):
    """The forced training killed after its first epoch: Snakemake removed its outputs,
    and the plain rerun said "Nothing to be done" while the report described that model."""
    work = _finished_looking_study(tmp_path)
    for name in ("model.keras", "model.json"):
        (work / "results/smoke/models/pinn-jit-s0" / name).unlink()
    (work / "results/smoke/bench/bench.json").unlink()
    plan = snakemake(work, "-n", "all", *SMOKE)
    assert plan.returncode == 0, plan.stderr[-3000:]
    said = [line for line in plan.stderr.splitlines() if line.startswith("ptycho workflow: 3 output(s) are missing")]
    assert len(said) == 1 and "models/pinn-jit-s0/model.keras" in said[0], plan.stderr[-3000:]
    assert said[0].endswith("their jobs and all that depends on them run again")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout + plan.stderr, re.M))
    assert jobs["train"] == "1" and jobs["bench"] == "1" and jobs["report"] == "1" and jobs["publish_report"] == "1"
    assert "simulate" not in jobs  # what the lost files were made from stays


def test_a_lost_conditions_output_is_made_again_and_a_new_condition_is_no_hole(tmp_path):
    """The conditions' outputs were not in the rerun's stages: a lost test split of a
    condition under its finished check was never made again ('Nothing to be done')."""
    with_condition = (*SMOKE, "conditions=[dense-1e4-poisson]")
    work = _finished_looking_study(tmp_path, with_condition)
    (work / "results/smoke/conditions/dense-1e4-poisson/test.h5").unlink()
    plan = snakemake(work, "-n", "all", *with_condition)
    assert plan.returncode == 0, plan.stderr[-3000:]
    said = [line for line in plan.stderr.splitlines() if line.startswith("ptycho workflow: 1 output(s) are missing")]
    assert len(said) == 1 and "conditions/dense-1e4-poisson/test.h5" in said[0], plan.stderr[-3000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout + plan.stderr, re.M))
    assert jobs["simulate_condition"] == jobs["condition"] == jobs["solve_condition"] == jobs["report"] == "1"
    assert "train" not in jobs
    # a condition new to the config is made, not called lost (the lost file still is)
    plan = snakemake(work, "-n", "all", *SMOKE, "conditions=[dense-1e4-poisson, sparse-1e9-mae]")
    said = [line for line in plan.stderr.splitlines() if "are missing" in line]
    assert plan.returncode == 0 and said[0].startswith("ptycho workflow: 1 output(s)"), plan.stderr[-3000:]
    assert "sparse-1e9-mae" not in said[0]


def test_a_lost_model_of_a_seed_a_look_added_is_made_again(tmp_path):
    """A study that adds seeds (max_seeds): the arms of the seeds a recorded look added
    are checked for holes like the configured ones (they were not: a lost model of an
    added seed stayed lost under its scores)."""
    import yaml

    from ptycho.artifacts import write_json
    from ptycho.study.looks import MORE, Look
    from ptycho.study.workflow import look_plan, resolve

    config = (*SMOKE, "max_seeds=3", "seeds_per_look=1")
    work = _finished_looking_study(tmp_path)
    cfg = resolve(
        yaml.safe_load((work / "config.yaml").read_text()), {"preset": "smoke", "max_seeds": 3, "seeds_per_look": 1}
    )
    plan = look_plan(cfg)
    first = plan.seeds["pinn"]
    added = (*first, max(first) + 1)
    results = work / "results/smoke"
    write_json(results / "looks/0.json", Look(0, plan, {"pinn": first}, {"speedup": "INCONCLUSIVE"}, why=MORE,
                                              next_seeds={"pinn": added}).to_json(), producer="look")  # fmt: skip
    arm = f"pinn-off-s{added[-1]}"
    _touch(results / "metrics" / f"{arm}.json")  # its scores remain, its model is gone
    dry = snakemake(work, "-n", "all", *config)
    said = [line for line in dry.stderr.splitlines() if "output(s) are missing" in line]
    assert said and said[0].startswith("ptycho workflow: 4 output(s) are missing"), dry.stderr[-3000:]
    assert f"models/{arm}/model.json, models/{arm}/model.keras, reconstructions/{arm}.npz" in said[0], said[0]


def test_an_output_damaged_after_its_job_is_moved_aside_and_made_again(tmp_path):
    """A model.keras cut short (a copy, a full disk under cp) was not noticed by a rerun
    ('Nothing to be done'), and its inference then failed on it. A dry run names it and
    changes nothing; a run moves it aside, bytes kept, and makes it again with all after it."""
    work = _finished_looking_study(tmp_path)
    model = work / "results/smoke/models/pinn-jit-s0/model.keras"
    whole = model.read_bytes()
    model.write_bytes(whole[: len(whole) // 2])
    (work / "results/smoke/metrics/pinn-off-s0.json").write_text('{"ssim": ')
    plan = snakemake(work, "-n", "all", *SMOKE)
    assert plan.returncode == 0, plan.stderr[-3000:]
    said = [line for line in plan.stderr.splitlines() if line.startswith("ptycho workflow: 2 output(s) are damaged")]
    assert len(said) == 1, plan.stderr[-3000:]
    assert "models/pinn-jit-s0/model.keras: not a whole zip archive" in said[0]
    assert "metrics/pinn-off-s0.json: not valid JSON" in said[0]
    assert said[0].endswith(
        "a run moves each aside to <name>.damaged and makes it again (this plan does not show those jobs)"
    )
    assert model.read_bytes() == whole[: len(whole) // 2]  # a dry run changes nothing
    touched = snakemake(work, "-t", "results/smoke/config.json", *SMOKE)  # nor does --touch (-t)
    assert touched.returncode == 0 and "are damaged" in touched.stderr, touched.stderr[-3000:]
    assert model.read_bytes() == whole[: len(whole) // 2]

    done = snakemake(work, "results/smoke/config.json", *SMOKE)  # any run: the check is at parse time
    assert done.returncode == 0, done.stderr[-3000:]
    assert not model.exists() and (model.parent / "model.keras.damaged").read_bytes() == whole[: len(whole) // 2]
    plan = snakemake(work, "-n", "all", *SMOKE)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "are damaged" not in plan.stderr
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout + plan.stderr, re.M))
    assert jobs["train"] == "1" and jobs["evaluate"] == "2" and jobs["report"] == "1", plan.stdout[-3000:]


def test_a_lost_metrics_file_or_config_json_is_made_again(tmp_path):
    """A lost metrics/<arm>.json or config.json was never remade ('Nothing to be done'):
    an arm's last file is read by the study's own checks, not by a later file of the arm."""
    work = _finished_looking_study(tmp_path)
    (work / "results/smoke/metrics/pinn-off-s0.json").unlink()
    (work / "results/smoke/config.json").unlink()
    plan = snakemake(work, "-n", "all", *SMOKE)
    assert plan.returncode == 0, plan.stderr[-3000:]
    said = [line for line in plan.stderr.splitlines() if line.startswith("ptycho workflow: 2 output(s) are missing")]
    assert len(said) == 1 and "metrics/pinn-off-s0.json" in said[0] and "config.json" in said[0], plan.stderr[-3000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout + plan.stderr, re.M))
    assert jobs["evaluate"] == "1" and jobs["resolved_config"] == "1" and jobs["report"] == "1"
    assert "train" not in jobs


# ------------------------------------------------------------------------ the study asked for
def test_a_config_file_given_again_does_not_override_the_preset(tmp_path):
    """`--configfile config.yaml --config preset=smoke` planned the default's 7 trainings
    under the smoke label: a config file is read like config.yaml, under the preset."""
    work = _workdir(tmp_path)
    plain = snakemake(work, "-n", "all", *SMOKE)
    again = snakemake(work, "-n", "all", "--configfile", "config.yaml", *SMOKE)
    for run in (plain, again):
        assert run.returncode == 0, run.stderr[-3000:]
        assert re.search(r"^train\s+4$", run.stdout + run.stderr, re.M), run.stdout[-3000:]


def test_the_workflow_runs_from_another_folder(tmp_path):
    work = _workdir(tmp_path / "checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "all", "-s", str(work / "Snakefile"), "-d", str(elsewhere), *SMOKE],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        re.search(r"^train\s+4$", run.stdout + run.stderr, re.M)
        and "results/smoke/models/pinn-off-s0" in run.stdout + run.stderr
    )


# ------------------------------------------------------------------------ report folders
def test_a_report_folder_holding_another_results_folders_report_is_refused(tmp_path):
    cfg = {"results": "rcF/1", "preset": "smoke"}
    folder = tmp_path / "reports" / "rcF-1" / "smoke"
    folder.mkdir(parents=True)
    (folder / "validation.json").write_text(json.dumps({"config": {"results": "rcF/1", "preset": "smoke"}}))
    check_report_folder(cfg, tmp_path)  # its own report: fine
    check_report_folder({**cfg, "results": "rcF//1/"}, tmp_path)  # the same folder, written otherwise
    for other in ("rcF-1", "-rcF-1", "..rcF-1"):
        with pytest.raises(ConfigError) as err:
            check_report_folder({**cfg, "results": other}, tmp_path)
        assert str(err.value) == (
            f"config key 'results' = {other!r} reports to reports/rcF-1/smoke, which holds the report of results "
            "folder 'rcF/1'; choose a results name that does not flatten to the same report folder "
            "(--config results=<folder>), or move that report away"
        )


def test_a_copied_results_folders_own_report_is_not_another_folders(tmp_path):
    """`cp -a qa/base qa/f3`, then the study on qa/f3 twice: the second was refused ('holds
    the report of results folder qa/base': the copy's report names its old place) and only
    --forcerun got out. The copy's own staged report, published as it is, is its own."""
    report = json.dumps({"config": {"results": "qa/base", "preset": "smoke"}})
    staged = tmp_path / "qa" / "f3" / "smoke" / "report" / "validation.json"
    published = tmp_path / "reports" / "qa-f3" / "smoke" / "validation.json"
    for path in (staged, published):
        path.parent.mkdir(parents=True)
        path.write_text(report)
    check_report_folder({"results": "qa/f3", "preset": "smoke"}, tmp_path)
    staged.write_text(json.dumps({"config": {"results": "qa/f3", "preset": "smoke"}}))  # not the one published
    with pytest.raises(ConfigError, match="holds the report of results folder 'qa/base'"):
        check_report_folder({"results": "qa/f3", "preset": "smoke"}, tmp_path)


# ------------------------------------------------------------------------ one live run
def test_a_held_results_folder_is_refused_naming_the_live_run_and_freed_when_it_dies(tmp_path):
    folder = tmp_path / "results" / "smoke"
    code = f"from ptycho.study import run_lock; h = run_lock.hold({str(folder)!r}); print('held', flush=True); input()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PtychoError) as err:
            run_lock.hold(folder)
        assert str(err.value).startswith(f"results folder {folder} is in use by the workflow run of pid {holder.pid} ")
        assert f"(kill {holder.pid})" in str(err.value)
        os.kill(holder.pid, signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
        holder.wait(timeout=30)
        mine = run_lock.hold(folder)
        assert json.loads((folder / run_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
        mine.close()
    finally:
        if holder.poll() is None:
            holder.kill()


def _live_smoke_run(tmp_path: Path) -> tuple[Path, subprocess.Popen]:
    """A smoke study started as users run it (the workflow's profile: rerun-incomplete on),
    in its own session so that a test can end it and its jobs by process group."""
    work = _workdir(tmp_path)
    shutil.copytree(ROOT / "profiles", work / "profiles")
    run = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "all", *SMOKE],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return work, run


def test_unlock_under_a_live_run_does_not_let_a_second_run_start(tmp_path):
    """`snakemake --unlock` drops Snakemake's own lock of a live run; the same command
    then started every training a second time. Now it is one line naming the live run."""
    work, first = _live_smoke_run(tmp_path)
    lock = work / "results" / "smoke" / run_lock.LOCK_FILE
    try:
        deadline = time.time() + 300
        while not (lock.exists() and lock.read_text().strip()) and first.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        assert first.poll() is None and json.loads(lock.read_text())["pid"] == first.pid
        unlock = snakemake(work, "--unlock", *SMOKE)
        assert unlock.returncode == 0, unlock.stderr[-2000:]
        second = snakemake(work, "all", *SMOKE)
        assert second.returncode == 2, second.stderr[-3000:]
        said = [line for line in second.stderr.splitlines() if line.startswith("ptycho workflow: error:")]
        assert len(said) == 1 and f"in use by the workflow run of pid {first.pid} " in said[0], second.stderr[-3000:]
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the live run goes on
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)


# ------------------------------------------------------------------------ no orphans
def test_a_job_still_running_in_the_folder_is_found_and_its_file_goes_with_it(tmp_path):
    parent = tmp_path / "results" / "smoke" / "mlflow" / "parent.json"
    code = (
        "from ptycho.study import run_lock\n"
        f"with run_lock.job_marked({str(parent)!r}, 'ptycho train pinn-off-float32-0'):\n"
        "    print('marked', flush=True); input()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != run_lock.WORKFLOW_ENV}  # its Snakemake is gone
    job = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    folder = parent.parent.parent
    try:
        assert job.stdout.readline().strip() == "marked"
        with pytest.raises(PtychoError) as err:
            run_lock.check_no_live_jobs(folder)
        assert str(err.value).startswith(
            f"1 job(s) of an earlier run still run in {folder} (pid {job.pid}: ptycho train pinn-off-float32-0); "
        )
        assert f"(kill {job.pid})" in str(err.value)
        job.kill()  # a killed job leaves its file, whose lock is free: it marks nothing
        job.wait(timeout=30)
        assert (folder / run_lock.JOBS_FOLDER / f"{job.pid}.lock").exists()
        run_lock.check_no_live_jobs(folder)
        assert not list((folder / run_lock.JOBS_FOLDER).glob("*.lock"))
    finally:
        if job.poll() is None:
            job.kill()
    with run_lock.job_marked(parent, "ptycho infer"):  # a job that ends leaves nothing
        assert [j["command"] for j in run_lock.live_jobs(folder)] == ["ptycho infer"]
    assert not (folder / run_lock.JOBS_FOLDER).exists()


def test_jobs_of_a_live_snakemake_whose_lock_file_was_deleted_are_not_called_orphans(tmp_path):
    """With .workflow.lock deleted under a live run, a second run called its Snakemake
    'gone' and advised killing its jobs; it names the live Snakemake instead."""
    parent = tmp_path / "results" / "smoke" / "mlflow" / "parent.json"
    code = (
        "from ptycho.study import run_lock\n"
        f"with run_lock.job_marked({str(parent)!r}, 'ptycho train pinn-off-s0'):\n"
        "    print('marked', flush=True); input()\n"
    )
    env = {**os.environ, run_lock.WORKFLOW_ENV: run_lock.workflow_marker()}  # this process plays the live Snakemake
    job = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    folder = parent.parent.parent
    try:
        assert job.stdout.readline().strip() == "marked"
        with pytest.raises(PtychoError) as err:
            run_lock.check_no_live_jobs(folder)
        assert str(err.value) == (
            f"a Snakemake (pid {os.getpid()}) is running in {folder} with 1 job(s), although its lock file "
            f".workflow.lock is gone (deleted?); wait for it to end, or stop it (Ctrl-C in its terminal, or "
            f"kill -INT {os.getpid()}), then run again"
        )
    finally:
        job.kill()
        job.wait(timeout=30)


def test_the_jobs_of_a_snakemake_killed_outright_stop(tmp_path):
    """`kill -9` of Snakemake during training: its jobs went on as orphans, writing into
    the results folder beside the user's next run. Each job now watches its Snakemake."""
    import psutil

    work, first = _live_smoke_run(tmp_path)
    jobs_folder = work / "results" / "smoke" / run_lock.JOBS_FOLDER
    jobs: list = []
    try:
        deadline = time.time() + 300
        while time.time() < deadline and first.poll() is None:  # until a training runs
            trainings = [j for j in run_lock.live_jobs(work / "results" / "smoke") if "train" in j["command"]]
            if trainings:
                break
            time.sleep(0.5)
        assert trainings, "no training started"
        jobs = [psutil.Process(int(j["pid"])) for j in run_lock.live_jobs(work / "results" / "smoke")]
        os.kill(first.pid, signal.SIGKILL)  # Snakemake alone: its jobs are not signalled
        first.wait(timeout=30)
        gone, alive = psutil.wait_procs(jobs, timeout=120)
        assert alive == [], [p.pid for p in alive]
        run_lock.check_no_live_jobs(work / "results" / "smoke")  # a new run may start
        assert not list(jobs_folder.glob("*.lock"))
        logs = "".join(p.read_text() for p in (work / "results" / "smoke" / "logs" / "train").glob("*.log"))
        assert f"the workflow's Snakemake (pid {first.pid}) is gone: stopping this job" in logs
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(first.pid, signal.SIGKILL)
        for p in jobs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
