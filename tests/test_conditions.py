"""Conditions: the study's cheap parts at other operating points (ptycho.study.conditions).

Which conditions a study checks (its own training point once), their simulated test
splits (the pair's object at the condition's dose and overlap), the checks and scores at
one, and a condition added by one record here: planned by a real Snakemake and reported.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import ptycho.study.conditions as conditions_module
from ptycho.study.conditions import CONDITIONS, Condition, checked, own_name, settings

ROOT = Path(__file__).resolve().parent.parent
#: The one record of the addition: PtychoPINN's dose with the MAE loss, at sparse overlap.
SPARSE_LOW = Condition("sparse-1e4-mae", "sparse overlap at 1e4 photons, MAE (a test condition)", 1e4, 0.375, "mae")


def register(setitem=None) -> None:
    """Add the record (``setitem``: pytest's ``monkeypatch.setitem``; None: for good, in a
    process of its own)."""
    setitem = setitem or (lambda mapping, key, value: mapping.__setitem__(key, value))
    setitem(conditions_module.CONDITIONS, SPARSE_LOW.name, SPARSE_LOW)


@pytest.fixture
def base():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def _resolve(base, **overrides):
    from ptycho.study.workflow import resolve

    return resolve(base, overrides)


def test_the_schema_offers_exactly_the_registered_conditions():
    from ptycho.config import schema
    from ptycho.study.workflow import load_schema

    assert schema()["properties"]["conditions"]["items"]["enum"] == list(CONDITIONS)
    assert load_schema()["properties"]["conditions"]["items"]["enum"] == list(CONDITIONS)


def test_the_default_study_checks_two_conditions_besides_its_own_training_point(base):
    cfg = _resolve(base)
    assert own_name(cfg) == "dense-1e9-mae"
    got = checked(cfg)
    assert list(got) == ["dense-1e4-poisson", "sparse-1e9-mae"]
    assert got["dense-1e4-poisson"]["simulation"] == {**cfg["simulation"], "nphotons": 1e4}
    assert got["dense-1e4-poisson"]["loss"] == "poisson"
    assert got["sparse-1e9-mae"]["simulation"]["stride_test"] == 24  # 3/8 of n = 64
    assert got["sparse-1e9-mae"]["simulation"]["stride_train"] == cfg["simulation"]["stride_train"]


def test_the_lowdose_preset_trains_at_one_condition_and_checks_the_others(base):
    cfg = _resolve(base, preset="lowdose")
    assert own_name(cfg) == "dense-1e4-poisson"
    assert list(checked(cfg)) == ["dense-1e9-mae", "sparse-1e9-mae"]


def test_a_condition_keeps_its_overlap_at_another_patch_size(base):
    cfg = _resolve(base, preset="smoke")  # n = 32
    assert settings(CONDITIONS["dense-1e9-mae"], cfg)["simulation"]["stride_test"] == 5
    assert settings(CONDITIONS["sparse-1e9-mae"], cfg)["simulation"]["stride_test"] == 12
    assert checked(cfg) == {}  # the smoke preset lists none (its tests ask for them)


def test_no_condition_runs_on_your_own_data(base, tmp_path):
    from ptycho.study.conditions import skipped_words

    cfg = _resolve(base)
    own = {**cfg, "data": {"train": "a.cxi", "test": "b.cxi"}}
    assert checked(own) == {}
    # and the config's conditions are not dropped without a word (the workflow's warning line)
    assert skipped_words(own).startswith(f"conditions {', '.join(cfg['conditions'])} are not run on your own data")
    assert skipped_words(cfg) == "" and skipped_words({**own, "conditions": []}) == ""


def test_an_unknown_condition_is_one_line_naming_the_choices(base):
    from ptycho.errors import ConfigError

    with pytest.raises(ConfigError, match="conditions.*dense-1e9-mae") as err:
        _resolve(base, conditions=["dense-1e3-mae"])
    assert "\n" not in str(err.value)


def test_a_test_split_alone_holds_the_pairs_object_at_its_own_dose(small_cfg, tmp_path):
    from dataclasses import replace

    from ptycho.data.dataset import read_dataset
    from ptycho.data.simulate import simulate
    from ptycho.study import jobs

    low = replace(small_cfg, nphotons=1e4)
    jobs.simulate(low, None, str(tmp_path / "test.h5"), progress=False)
    alone, pair = read_dataset(tmp_path / "test.h5"), simulate(small_cfg)["test"]
    assert not (tmp_path / "train.h5").exists()
    np.testing.assert_array_equal(alone.objects, pair.objects)  # the same object, other photons
    assert alone.attrs["nphotons"] == 1e4
    mean_counts = alone.diffraction.reshape(len(alone.diffraction), -1).sum(axis=1).mean()
    assert mean_counts == pytest.approx(1e4, rel=0.05)


@pytest.fixture(scope="module")
def trained(pair, tmp_path_factory):
    """A PINN trained briefly on the shared pair (plumbing: not better than a blank yet)."""
    pytest.importorskip("tensorflow")
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, train

    out = tmp_path_factory.mktemp("pinn-off-s0")
    train(
        pair["train"],
        ModelConfig(kind="pinn", filters=4),
        TrainConfig(epochs=1, batch_size=8, xla="off", fail_on_collapse=False),
        out,
        progress=False,
    )
    return out


def test_the_checks_at_a_condition_judge_its_data_and_loss_and_score_the_trained_networks(trained, small_cfg, tmp_path):
    from dataclasses import replace

    from ptycho.artifacts import read_json
    from ptycho.data.dataset import write_dataset
    from ptycho.data.simulate import simulate_split
    from ptycho.study import jobs

    path = tmp_path / "test.h5"
    write_dataset(path, simulate_split(replace(small_cfg, nphotons=1e4), "test"))
    record = jobs.condition(
        "dense-1e4-poisson",
        str(path),
        [str(trained / "model.json")],
        str(tmp_path / "check.json"),
        modes=["jit"],
        precisions=["float32"],
        thresholds={},
    )
    out = read_json(tmp_path / "check.json", producer="condition")
    assert out["condition"] == "dense-1e4-poisson" and out["loss"] == "poisson" and out["nphotons"] == 1e4
    assert out["accuracy"]["status"] == "PASS" and out["gradients"]["status"] == "PASS"
    # The networks at inference on this split, jit vs off; the translation suite is the
    # checklist's, the forward model runs on this split's own geometry and scale, per mode.
    assert out["accuracy"]["evidence"]["translation"] == []
    forward = out["accuracy"]["evidence"]["forward_model"]
    assert set(forward["modes"]) == {"jit"} and 0 <= forward["max_abs"] < 1e-5
    assert "forward model on this data's geometry and scale, modes jit vs off" in out["accuracy"]["summary"]
    assert set(out["accuracy"]["evidence"]["trained_inference"]) == {"pinn-off-s0"}
    # The gradients with the condition's loss: the Poisson NLL is negative where the MAE is not.
    assert out["gradients"]["evidence"]["models"]["pinn"]["loss_off"] < 0
    assert out["gradients"]["evidence"]["finite_differences"] is None
    scores = out["models"]["pinn-off-s0"]
    assert 0 <= scores["amp_ssim"] <= 1 and 0 <= scores["phase_ssim"] <= 1
    assert record.metrics["pinn-off-s0.amp_ssim"] == scores["amp_ssim"] and record.tags["status"] == "PASS"


def _row(name: str, status: str = "PASS") -> dict:
    return {
        "name": name,
        "description": "",
        "trained": False,
        "nphotons": 1e4,
        "stride_test": 24,
        "loss": "mae",
        "accuracy": {"status": status, "value": 0.5, "summary": ""},
        "gradients": {"status": "PASS", "value": 0.1, "summary": ""},
        "solver": {"mode": "jit", "amp_ssim": 0.9, "phase_ssim": 0.95, "seconds_per_object": 1.5, "iterations": 30},
        "models": {"pinn-off-s0": {"amp_ssim": 0.7, "phase_ssim": 0.8, "amp_scale": 1.37},
                   "pinn-jit-s0": {"amp_ssim": 0.71, "phase_ssim": 0.79}},
    }  # fmt: skip


def _report(base, rows, tmp_path):
    from ptycho.study import checklist, report
    from ptycho.study.checklist.result import verdict

    cfg = _resolve(base, preset="smoke", conditions=[*CONDITIONS])
    items = {name: verdict(name, 0.0, 1.0, "<=", f"{name} summary", {}) for name in checklist.names()}
    arms = {"pinn-off-s0": {"metrics": {"amp_ssim": 0.8, "phase_ssim": 0.9}}}
    rec = report.build(items, arms, cfg, {"cpu": "test cpu", "cores": 2}, conditions=rows)
    assert rec.to_json()["conditions"] == rows  # a row's JSON, read into its type and written again
    assert report.StudyReport.from_json(rec.to_json()) == rec
    return rec, report.write(rec, tmp_path)["md"].read_text()


def test_a_condition_added_by_its_record_is_reported_and_its_failure_fails_the_verdict(monkeypatch, base, tmp_path):
    from ptycho.study import report

    register(monkeypatch.setitem)
    rec, md = _report(base, [_row(SPARSE_LOW.name)], tmp_path)
    assert rec.verdict == "PASS"
    assert "## Conditions" in md and SPARSE_LOW.name in md
    assert "| PINN off fp32 (1 seed) | 0.800/0.900 | 0.700/0.800 |" in md  # own point, then the condition
    assert f"Conditions ({SPARSE_LOW.name}, beside the study's own): accuracy and gradients PASS" in md
    assert f"at {SPARSE_LOW.name} the trained PINN arms score amplitude/phase SSIM 0.700-0.710/0.790-0.800" in md
    # Seed by seed, with the amplitude's fitted scale where the scores record it (issue 45, item 4).
    assert "The trained networks per seed at each condition" in md
    assert "| pinn-off-s0 | 0.800/0.900 | 0.700/0.800 (x1.37) |" in md
    assert "| pinn-jit-s0 | - | 0.710/0.790 |" in md
    from ptycho.study.conditions_view import ConditionRow, per_seed_table

    row = _row(SPARSE_LOW.name)
    row["models"]["pinn-jit-s1"] = {"amp_ssim": 0.0, "phase_ssim": 0.79, "amp_scale": 0.0}
    assert ["pinn-jit-s1", "0.000/0.790 (x0.00)"] in per_seed_table([ConditionRow.from_json(row)])[2]  # shown: 0
    failed, md = _report(base, [_row(SPARSE_LOW.name, "FAIL")], tmp_path / "failed")
    assert failed.verdict == "FAIL" and f"accuracy and gradients FAIL at {SPARSE_LOW.name} accuracy" in md
    lines = report.console_lines(failed, tmp_path / "validation.html")  # what `make all` ends with
    assert lines[0] == f"Verdict: FAIL (conditions FAIL at {SPARSE_LOW.name} accuracy)"
    assert lines[-2].startswith(f"Conditions: FAIL at {SPARSE_LOW.name} accuracy")
    assert report.console_lines(rec, "x")[-2].startswith("Precision")  # nothing more when they pass


def test_a_real_snakemake_plans_the_jobs_of_a_condition_added_by_its_record(tmp_path):
    """Snakemake in a process where the record was added before it read the Snakefile, as an
    edit of ptycho/study/conditions.py would add it (a dry run)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_conditions; "
        "test_conditions.register(); from snakemake.cli import main; main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "-n", "-p", "--cores", "2", "all",
         "--config", f"results={tmp_path}/r", "allow_results_outside=true", "preset=smoke",
         f"conditions=[{SPARSE_LOW.name},dense-1e4-poisson]"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    for name, stride, photons in ((SPARSE_LOW.name, 12, "10000.0"), ("dense-1e4-poisson", 5, "10000.0")):
        (line,) = re.findall(rf"^.*simulate --quiet --test \S+/conditions/{name}/test\.h5 .*$", out.stdout, re.M)
        assert f"--nphotons {photons}" in line and re.search(rf"--stride-test {stride}\b", line)
        assert re.search(rf"condition --name {name} --dataset \S+/conditions/{name}/test\.h5", out.stdout)
        assert re.search(rf"solve --dataset \S+/conditions/{name}/test\.h5 --modes jit", out.stdout)
    assert re.search(r"report .*--conditions \S+/conditions/sparse-1e4-mae/check\.json", out.stdout)


@pytest.mark.slow
@pytest.mark.long
def test_the_smoke_study_with_a_condition_reports_it_and_tracks_its_jobs(tmp_path):
    """The whole smoke study with one condition: its jobs run, the report's Conditions
    section and record hold it, and its jobs are child runs of the study's parent."""
    from mlflow.tracking import MlflowClient
    from test_pipeline import _workdir, snakemake

    work = _workdir(tmp_path)
    done = snakemake(work, "all", "--config", "preset=smoke", "conditions=[dense-1e4-poisson]")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    (row,) = report["conditions"]
    assert row["name"] == "dense-1e4-poisson" and row["loss"] == "poisson" and row["nphotons"] == 1e4
    assert row["accuracy"]["status"] == "PASS" and row["gradients"]["status"] == "PASS"
    assert set(row["models"]) == set(report["arms"])  # every trained network, applied there
    assert 0 < row["solver"]["amp_ssim"] <= 1 and row["solver"]["seconds_per_object"] > 0
    md = (work / "reports" / "smoke" / "validation.md").read_text()
    assert "## Conditions" in md and "| dense-1e4-poisson | 1e+04 | 5 | poisson | PASS" in md
    assert "Conditions (dense-1e4-poisson, beside the study's own)" in md
    client = MlflowClient(f"sqlite:///{work / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xla-ptycho")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    rules = {r.data.tags.get("rule"): r for r in runs if r.data.tags.get("condition") == "dense-1e4-poisson"}
    assert set(rules) == {"simulate_condition", "condition", "solve_condition"}
    assert all(r.info.status == "FINISHED" and r.data.tags.get("mlflow.parentRunId") for r in rules.values())
    assert rules["condition"].data.metrics["accuracy_pass"] == 1.0
