"""The Snakemake workflow, run for real in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ptycho.study.arms import Arm
from ptycho.study.checklist import names as checklist_names

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW_FILES = ("Snakefile", "config.yaml", "rules", "envs", "ptycho")


def _workdir(tmp: Path) -> Path:
    for name in WORKFLOW_FILES:
        src, dst = ROOT / name, tmp / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return tmp


def snakemake(workdir: Path, *args: str, timeout: int = 1500, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "8", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


def test_workflow_lints_clean(tmp_path):
    result = snakemake(_workdir(tmp_path), "--lint")
    assert result.returncode == 0, result.stderr
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_dry_run_of_the_default_config_lists_the_whole_matrix(tmp_path):
    result = snakemake(_workdir(tmp_path), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for rule in (
        "simulate",
        "train",
        "infer",
        "stitch",
        "evaluate",
        "check_accuracy",
        "check_gradients",
        "check_convergence",
        "check_quality",
        "check_speedup",
        "bench",
        "solve",
        "warm_start",
        "figures",
        "report",
    ):
        assert rule in out


def _planned_outputs(work: Path, *config: str) -> set[str]:
    result = snakemake(work, "--summary", *(("--config", *config) if config else ()))
    assert result.returncode == 0, result.stderr
    return {line.split("\t")[0] for line in result.stdout.splitlines()[1:] if line.strip()}


def test_each_preset_writes_its_own_report_and_results_only(tmp_path):
    work = _workdir(tmp_path)
    default, smoke = _planned_outputs(work), _planned_outputs(work, "preset=smoke")
    assert {f"reports/default/validation.{e}" for e in ("json", "md", "html")} <= default
    assert {f"reports/smoke/validation.{e}" for e in ("json", "md", "html")} <= smoke
    assert not default & smoke, "two presets would write the same file"
    assert all(p.startswith(("reports/smoke/", "results/smoke/")) for p in smoke), sorted(smoke)
    # A second results folder of the same preset has its own report (7816575 wrote both to
    # reports/smoke/, the second overwriting the first's).
    other = _planned_outputs(work, "preset=smoke", "results=runs/b")
    assert not other & smoke, "two results folders would write the same file"
    assert {f"reports/runs-b/smoke/validation.{e}" for e in ("json", "md", "html")} <= other


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train={epoch: 3}", "config key 'train': Additional properties are not allowed ('epoch' was unexpected)"),
        ("train={epochs: ten}", "config key 'train.epochs': 'ten' is not of type 'integer'"),
        ("preset=huge", "config key 'preset': 'huge' has no block under 'presets'"),
    ],
)
def test_bad_config_fails_before_any_job_with_one_line(tmp_path, override, message):
    work = _workdir(tmp_path)
    result = snakemake(work, "--config", override)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("ptycho workflow: error:")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in result.stderr
    assert not (work / "results").exists()


#: The smoke study with two XLA modes trained: physics is an arm, compared with off (the
#: smoke preset's own jit arm is trained by the browser, cluster and Siemens star tests'
#: pipelines). auto is benched (below), so the accuracy and gradients checks compare it too.
TRAINED_MODES = ("off", "physics")
#: Every mode the checks compare with off: the trained ones and the bench's.
CHECKED_MODES = ("off", "auto", "physics")
#: ... and two precisions: each mode compared with off at each, bfloat16 with float32 in each mode.
TWO_PRECISIONS = "precision=[float32,mixed_bfloat16]"
#: The smoke preset gives the baseline and the bench their own lists, which win over the
#: study's (as the default study does): the baseline trains one mode beside off (its pairs
#: judged as the PINN's), the bench times the PINN's off and auto (auto's clusters are
#: counted) at both precisions, with a training batch sweep, which the smoke preset leaves
#: out (the inference sweep is tests/test_science_cli.py's). The whole matrix for both models
#: cost CI 16 trainings and 16 bench arms where 6 and 4 test the same paths (each bench arm is
#: two worker processes, the bench the longest job; bfloat16 is emulated on an AVX2-only CI
#: machine, several times slower).
BASELINE_MODES = ("off", "jit")
BENCH_MODES = ("off", "auto")
BASELINE_AND_BENCH = (
    f"per_model={{baseline: {{xla: [{','.join(BASELINE_MODES)}], precision: [float32]}}}}",
    f"bench={{models: [pinn], xla: [{','.join(BENCH_MODES)}], precision: [float32,mixed_bfloat16], "
    "train_batches: [4], infer_batches: []}",
)
MATRIX = (f"xla=[{','.join(TRAINED_MODES)}]", TWO_PRECISIONS, *BASELINE_AND_BENCH)


@pytest.mark.slow
def test_smoke_pipeline_end_to_end_with_mlflow_runs_and_report(tmp_path):
    from mlflow.tracking import MlflowClient

    from ptycho.study.report import figures, verdict_line

    work = _workdir(tmp_path)
    # Another preset's report (the default study's) is left untouched by a smoke run.
    other = work / "reports" / "default" / "validation.json"
    other.parent.mkdir(parents=True)
    other.write_text('{"verdict": "PASS"}')
    # With the estimate (ptycho.study.estimate): a real calibration of every arm, first.
    estimate_env = {"PTYCHO_CALIBRATE": "1", "PTYCHO_CACHE": str(tmp_path / "cache")}
    # A hang guard, not a time limit: the whole test took 17 min on 2 cores; CI may be 1.5x slower.
    first = snakemake(work, "all", "--config", "preset=smoke", *MATRIX, env=estimate_env, timeout=3000)
    assert other.read_text() == '{"verdict": "PASS"}'
    assert sorted(p.name for p in other.parent.iterdir()) == ["validation.json"]
    assert first.returncode == 0, first.stderr[-3000:]

    report = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    # The estimate was printed before the first job and set beside what the run took.
    lines = first.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "this study will take about" in line]
    jobs = [i for i, line in enumerate(lines) if line.startswith(("rule ", "localrule "))]
    assert len(said) == 1 and said[0] < min(jobs), lines[:20]
    estimate = report["cost"]["estimate"]
    assert estimate["trainings"] == len(report["arms"]) and estimate["total_s"] > 0
    print(
        f"smoke estimate {estimate['total_s']:.0f} s, took {report['cost']['span_s']:.0f} s"
    )  # the closing note's figure
    assert "Estimated " in (work / "reports" / "smoke" / "validation.md").read_text()
    # The run ends with the answer: the verdict, the three sentences and the report's path.
    tail = [line for line in first.stdout.splitlines() if line.strip()]
    at = max(i for i, line in enumerate(tail) if line.startswith("Verdict: "))
    assert tail[at] == verdict_line(report) and tail[at].startswith(f"Verdict: {report['verdict']}")
    assert [line.split(":")[0] for line in tail[at + 1 : at + 4]] == ["Speed", "Quality", "Precision"]
    assert tail[at + 4] == f"Report: {(work / 'reports' / 'smoke' / 'validation.html').resolve()}"
    # The first lines say which run this is: preset, config hash, commit (none: a copy), parent run.
    head = (work / "reports" / "smoke" / "validation.md").read_text().splitlines()[:3]
    prov = report["provenance"]
    assert head[0] == "# XLA validation report: preset `smoke`"
    assert prov["preset"] == "smoke" and len(prov["config_hash"]) == 16 and prov["mlflow_run_id"]
    assert f"config {prov['config_hash']}" in head[2] and prov["mlflow_run_id"] in head[2]
    assert set(report["items"]) == set(checklist_names())  # JSON keys are written sorted
    for item in report["items"].values():
        assert item["status"] in ("PASS", "FAIL", "INCONCLUSIVE") and "threshold" in item and "value" in item
    assert report["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert (work / "reports" / "smoke" / "validation.html").read_text().count("<section") >= 4
    modes = TRAINED_MODES
    pinn_arms = {f"pinn-{x}{p}-s0" for x in modes for p in ("", "-bf16")}
    assert set(report["arms"]) == pinn_arms | {f"baseline-{x}-s0" for x in BASELINE_MODES}
    pairs = {f"pinn-s0-{x}{p}" for x in modes[1:] for p in ("", "-bf16")}  # each mode vs off
    pairs |= {f"pinn-s0-{x}-bf16-vs-fp32" for x in modes}  # bfloat16 vs float32 in each mode
    pairs |= {f"baseline-s0-{x}" for x in BASELINE_MODES[1:]}
    assert set(report["items"]["convergence"]["evidence"]["pairs"]) == pairs
    assert set(report["items"]["quality"]["evidence"]["ssim_differences"]) == pairs
    checked = CHECKED_MODES
    compared = {f"{x}{p}" for x in checked[1:] for p in ("", "-bf16")} | {f"{x}-bf16-vs-fp32" for x in checked}
    assert set(report["items"]["gradients"]["evidence"]["models"]["pinn"]["comparisons"]) == compared
    inference = report["items"]["accuracy"]["evidence"]["trained_inference"]
    assert set(inference) == set(report["arms"])  # every trained network, at inference
    assert set(inference["pinn-off-bf16-s0"]["comparisons"]) == compared - {
        "physics",
        "physics-bf16",
        "physics-bf16-vs-fp32",
    }
    bench = report["items"]["speedup"]["evidence"]["bench"]
    timed = {(a["model"], a["mode"], a["precision"]) for a in bench["arms"]}
    assert timed == {("pinn", x, p) for x in BENCH_MODES for p in ("float32", "mixed_bfloat16")}
    assert all("4" in a["batches"]["train"] for a in bench["arms"])  # the batch sweep
    assert set(bench["contexts"]) == {"alone", "shared"}
    assert next(a for a in bench["arms"] if a["mode"] == "auto")["xla_clusters"] > 0  # auto really clustered
    assert len(report["figures"]) == len(figures())
    # The solver beside the networks: every mode timed against off, every network arm
    # as methods, warm starts from both models' off arms.
    solver = report["solver"]
    assert set(solver["modes"]) == set(modes) and set(solver["ratios"]) == set(modes[1:])
    assert {n["arm"] for n in solver["networks"]} == set(report["arms"])
    assert {w["start"] for w in solver["warm_start"]} == {"pinn", "baseline"}
    html = (work / "reports" / "smoke" / "validation.html").read_text()
    assert html.count("data:image/png;base64,") == len(figures())

    # `snakemake --report` works (no --cores needed) and shows every figure with its caption.
    sm_report = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--report",
            "reports/snakemake-report.html",
            "--config",
            "preset=smoke",
            *MATRIX,
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sm_report.returncode == 0, sm_report.stderr[-3000:]
    assert (work / "reports" / "snakemake-report.html").stat().st_size > 100_000
    assert all(f"Adding {name}.png" in sm_report.stderr + sm_report.stdout for name in report["figures"])

    client = MlflowClient(f"sqlite:///{work / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xla-ptycho")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent_id = parents[0].info.run_id
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]
    expected = Counter(
        {
            "simulate": 1,
            "export_cxi": 2,
            "train": 6,
            "infer": 6,
            "stitch": 6,
            "evaluate": 6,
            "bench": 1,
            "check_accuracy": 1,
            "check_gradients": 1,
            "check_convergence": 1,
            "check_quality": 1,
            "check_speedup": 1,
            "solve": 1,
            "warm_start": 1,
            "figures": 1,
            "report": 1,
        }
    )
    assert Counter(r.data.tags["rule"] for r in children) == expected
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(
        r.data.tags["mlflow.source.git.commit"] == r.data.tags["git_commit"] for r in runs if r.data.tags["git_commit"]
    ) and all("mlflow.source.name" in r.data.tags for r in runs)
    epochs = report["config"]["train"]["epochs"]
    experiment_id = experiment.experiment_id
    models = {m.source_run_id: m for m in client.search_logged_models([experiment_id])}
    for run in (r for r in children if r.data.tags["rule"] in ("train", "infer", "stitch", "evaluate")):
        tags = run.data.tags  # the arm in tags and params: the compare view lines the arms up
        assert {"model", "xla", "precision", "seed", "config_hash", "git_commit"} <= set(tags)
        assert {k: run.data.params[f"arm.{k}"] for k in ("model", "xla", "precision", "seed")} == {
            k: tags[k] for k in ("model", "xla", "precision", "seed")
        }
        # one name per arm: its files, its training run and its logged model; its other jobs' runs after it
        word = "-bf16" if tags["precision"] == "mixed_bfloat16" else ""
        arm = f"{tags['model']}-{tags['xla']}{word}-s{tags['seed']}"
        assert run.info.run_name == (arm if tags["rule"] == "train" else f"{arm}-{tags['rule']}")
        assert tags["mlflow.note.content"].startswith(Arm.parse(arm).label())  # every run says what it is
    for log in sorted((work / "results" / "smoke" / "logs" / "train").glob("*.log")):
        # A person can follow it: one line per epoch, a final summary, no start-up noise.
        lines = log.read_text().splitlines()
        assert [ln.split(":")[0] for ln in lines if ln.startswith("epoch ")] == [
            f"epoch {e}/{epochs}" for e in range(1, epochs + 1)
        ], log.read_text()
        assert f"epochs={epochs} train_loss=" in lines[-1]
        assert not [ln for ln in lines if "cuInit" in ln or ln.startswith(("E0000", "I0000", "WARNING: All log"))]
    for run in (r for r in children if r.data.tags["rule"] == "train"):
        assert run.data.tags["device"] == "CPU"
        history = client.get_metric_history(run.info.run_id, "val_loss")
        assert [m.step for m in history] == list(range(1, epochs + 1))  # none lost, none duplicated
        assert "compile_s" in run.data.metrics and "system/cpu_utilization_percentage" in run.data.metrics
        model = models[run.info.run_id]  # the trained network as an MLflow logged model, metrics linked
        assert str(model.status) == "READY" and {"final_val_loss", "final_train_loss"} <= {m.key for m in model.metrics}
        assert model.name == run.info.run_name
        # the arm's run carries its answer: quality on the test split, time to quality
        metrics = run.data.metrics
        assert {"amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr", "amp_frc50", "phase_frc50"} <= set(metrics)
        arm = report["arms"][run.info.run_name]
        assert metrics["amp_ssim"] == arm["metrics"]["amp_ssim"] and metrics["step_median_s"] > 0
        if run.data.tags["model"] == "pinn":
            assert metrics["quality_time_s"] > 0 and metrics["quality_steps"] >= 1
        assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["train.h5"]
    # The PINN's logged model loads with MLflow and reconstructs as `ptycho infer` did.
    import mlflow.pyfunc
    import numpy as np

    from ptycho.data.dataset import read_dataset
    from ptycho.nets.inputs import layout

    trained = next(r for r in children if r.info.run_name == "pinn-physics-s0")
    mlflow.set_tracking_uri(f"sqlite:///{work / 'results' / 'mlflow.db'}")  # conftest restores it after the test
    loaded = mlflow.pyfunc.load_model(f"models:/{models[trained.info.run_id].model_id}")
    mlmodel = (work / "results" / "smoke" / "models" / "pinn-physics-s0" / "mlflow-model" / "MLmodel").read_text()
    assert "model_code_path: python_model.py" in mlmodel and str(work) not in mlmodel  # no absolute path
    test = read_dataset(work / "results" / "smoke" / "data" / "test.h5")
    inferred = np.load(work / "results" / "smoke" / "reconstructions" / "pinn-physics-s0.npz")
    out = loaded.predict(
        layout(test, "pinn", test.counts), params={"intensity_norm": float(inferred["intensity_norm"])}
    )
    amp, phase = (np.moveaxis(out[k], -1, 1).reshape(-1, *out[k].shape[1:3]) for k in ("amplitude", "phase"))
    inferred = inferred["patches"]
    assert np.abs((amp * np.exp(1j * phase)).astype(np.complex64) - inferred).max() <= 1e-6
    with pytest.raises(Exception, match="holds no photons"):  # all NaN before, without an error
        loaded.predict(np.zeros_like(layout(test, "pinn", test.counts)[:2]))
    # The parent carries the verdict, each item's status and value, and the answer as its description.
    parent = parents[0]
    assert parent.data.tags["verdict"] == report["verdict"] and parent.data.metrics["verdict_pass"] in (0.0, 1.0)
    assert {parent.data.tags[f"check.{k}"] for k in report["items"]} <= {"PASS", "FAIL", "INCONCLUSIVE"}
    assert parent.data.tags["mlflow.note.content"].startswith(f"{verdict_line(report)}. Speed: ")
    assert any(k.startswith("xla_ttq_ratio.") for k in parent.data.metrics)
    assert (
        experiment.tags["mlflow.experimentKind"] == "custom_model_development"
        and experiment.tags["mlflow.note.content"]
    )
    for split in ("train", "test"):  # the datasets as CXI 1.6 too, which read back to the same data
        from ptycho.data.cxi import import_cxi
        from ptycho.data.dataset import read_dataset, write_dataset

        back = import_cxi(work / "results" / "smoke" / "data" / f"{split}.cxi")
        original = read_dataset(work / "results" / "smoke" / "data" / f"{split}.h5")
        assert write_dataset(tmp_path / f"{split}-back.h5", back) == original.attrs["digest"]
    for run in (r for r in children if r.data.tags["rule"] == "evaluate"):
        assert {"amp_ssim", "phase_ssim", "amp_psnr", "amp_frc50"} <= set(run.data.metrics)
        assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["test.h5"]
    assert len(models) == len(report["arms"]) == 6
    bench_run = next(r for r in children if r.data.tags["rule"] == "bench")
    # One nested run per benchmarked arm, every one with the same metric keys.
    arm_runs = {
        (r.data.params["arm.model"], r.data.params["arm.xla"], r.data.params["arm.precision"]): r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == bench_run.info.run_id
    }
    assert set(arm_runs) == timed
    for (model, mode, _), run in arm_runs.items():
        assert {"step_median_s", "shared_step_median_s", "network_s", "physics_s", "peak_rss_mb", "compile_s"} <= set(
            run.data.metrics
        )
        assert run.data.tags["model"] == model and run.data.tags["xla"] == mode
        if mode != "off":
            assert {"train_step_alone_speedup", "train_step_shared_speedup"} <= set(run.data.metrics)
    assert "system/cpu_utilization_percentage" in bench_run.data.metrics
    # The parent holds a table of its child runs.
    table = json.loads(Path(client.download_artifacts(parent_id, "child_runs.json", str(tmp_path / "dl"))).read_text())
    assert len(table["data"]) == len(children)
    assert [a.path for a in client.list_artifacts(bench_run.info.run_id, "bench")] == ["bench/bench.json"]
    parent_params = parents[0].data.params
    assert parent_params["train.epochs"] == str(epochs)

    # Nothing to do the second time.
    again = snakemake(work, "all", "--config", "preset=smoke", *MATRIX)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr

    # A changed training setting re-trains (Snakemake skips the params checks downstream
    # of any job that must re-run, so no job may sit downstream of a config-derived file).
    retrain = snakemake(work, "all", "--dry-run", "--config", "preset=smoke", *MATRIX, "train={epochs: 3}")
    assert retrain.returncode == 0
    assert "rule train:" in retrain.stdout and "Params have changed" in retrain.stdout

    # Flipping a threshold re-runs only that check and the report, and flips the verdict.
    model_json = work / "results" / "smoke" / "models" / "pinn-physics-s0" / "model.json"
    trained_at = model_json.stat().st_mtime_ns
    strict = snakemake(work, "all", "--config", "preset=smoke", *MATRIX, "thresholds={speedup_min: 1000.0}")
    assert strict.returncode == 0, strict.stderr[-3000:]
    flipped = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    assert flipped["items"]["speedup"]["status"] == "FAIL"
    assert flipped["verdict"] == "FAIL"
    assert model_json.stat().st_mtime_ns == trained_at  # no retraining
    rules_run = {
        line.split()[-1].rstrip(":")
        for line in strict.stdout.splitlines() + strict.stderr.splitlines()
        if line.startswith(("rule ", "localrule "))
    }
    assert rules_run == {"resolved_config", "check_speedup", "report", "publish_report", "all"}
    parents_after = {
        r.info.run_id: r
        for r in client.search_runs([experiment.experiment_id], max_results=1000)
        if "mlflow.parentRunId" not in r.data.tags
    }
    # A parent run is one study: the changed config has its own, with its verdict; the first
    # keeps its params and verdict, and the two name each other.
    new_id = json.loads((work / "results" / "smoke" / "mlflow" / "parent.json").read_text())["run_id"]
    old, new = parents_after[parent_id], parents_after[new_id]
    assert len(parents_after) == 2 and new_id != parent_id
    assert new.data.params["thresholds.speedup_min"] == "1000.0" and old.data.params["thresholds.speedup_min"] == "1.0"
    assert new.data.tags["verdict"] == "FAIL" and old.data.tags["verdict"] == report["verdict"]
    assert new.data.tags["previous_parent"] == parent_id and old.data.tags["superseded_by"] == new_id
    assert new.info.status == "FINISHED"


def test_every_rule_is_named_after_the_command_it_runs_and_its_mlflow_rule_tag():
    """One name per job: the rule, its ``ptycho`` command (``check <item>`` as ``check_<item>``)
    and the ``rule`` tag of its MLflow run, so a run found in the UI names the rule to re-run."""
    import re

    for path in sorted((ROOT / "rules").glob("*.smk")):
        text = path.read_text()
        for rule, body in re.findall(r"(?ms)^rule (\w+):\n(.*?)(?=^rule |\Z)", text):
            tag = re.search(r'tracking\("(\w+)"', body)
            if tag:
                assert tag.group(1) == rule, f"{path.name}: rule {rule} tags its runs rule={tag.group(1)}"
            command = re.search(r"\{params\.track\}(?: --threads \S+)? ([\w-]+)(?: (\w+))?", body)
            if command:
                name = command.group(1).replace("-", "_")
                if name == "check":
                    name += "_" + command.group(2)
                # A rule that runs another rule's command on other inputs: warm starts, and a
                # condition's test split and solver (rules/conditions.smk).
                other_inputs = ("warm_start", f"{name}_condition")
                assert rule in (name, *other_inputs), f"{path.name}: rule {rule} runs 'ptycho {command.group(1)}'"
