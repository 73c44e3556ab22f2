"""Per-model arm lists: ``per_model.<kind>.xla|precision|seeds`` choose what each model
trains (a study spends its training time where its question is), the study's own lists
stay the default, and everything downstream (pairs, warm starts, the DAG) follows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptycho.errors import ConfigError
from ptycho.study.arms import Arm, pairs
from ptycho.study.workflow import arm_lists, arms, resolve, warm_arms

ROOT = Path(__file__).resolve().parents[1]

SPLIT = {
    "pinn": {"xla": ["off", "physics"], "precision": ["mixed_bfloat16"], "seeds": [0, 1, 2]},
    "baseline": {"xla": ["off"], "seeds": [0]},
}


@pytest.fixture
def base():
    """config.yaml without its own per-model and bench lists (the default study has both),
    and with the old two-mode float32 matrix, so each test states the lists it is about."""
    plain = yaml.safe_load((ROOT / "config.yaml").read_text())
    plain.pop("bench", None)
    for own in plain.get("per_model", {}).values():
        for key in ("xla", "precision", "seeds"):
            own.pop(key, None)
    return {**plain, "xla": ["off", "jit"], "precision": ["float32"], "seeds": [0, 1]}


def test_a_model_without_its_own_lists_trains_the_studys(base):
    cfg = resolve(
        base, {"models": ["pinn", "baseline"], "xla": ["off", "jit"], "precision": ["float32"], "seeds": [0, 1]}
    )
    assert arm_lists(cfg, "pinn") == (["off", "jit"], ["float32"], [0, 1])
    assert arms(cfg) == [
        "pinn-off-s0", "pinn-off-s1", "pinn-jit-s0", "pinn-jit-s1",
        "baseline-off-s0", "baseline-off-s1", "baseline-jit-s0", "baseline-jit-s1",
    ]  # fmt: skip


def test_each_models_own_lists_replace_the_studys_for_that_model_only(base):
    cfg = resolve(base, {"xla": ["off", "jit"], "per_model": SPLIT})
    assert arms(cfg) == [
        "pinn-off-bf16-s0", "pinn-off-bf16-s1", "pinn-off-bf16-s2",
        "pinn-physics-bf16-s0", "pinn-physics-bf16-s1", "pinn-physics-bf16-s2",
        "baseline-off-s0",
    ]  # fmt: skip
    # The study's lists are untouched: the bench and the accuracy/gradients items use them.
    assert cfg["xla"] == ["off", "jit"] and cfg["precision"] == ["float32"]
    # Only what was trained is paired: physics vs off per seed, nothing for the baseline.
    assert [p.key for p in pairs(arms(cfg))] == [f"pinn-s{s}-physics-bf16" for s in (0, 1, 2)]


def test_own_lists_keep_the_per_model_train_settings(base):
    cfg = resolve(base, {"per_model": {"baseline": {"train": {"epochs": 3}, "xla": [False]}}})
    assert arm_lists(cfg, "baseline")[0] == ["off"]  # false reads as off, like the study's list
    assert cfg["per_model"]["baseline"]["train"] == {"epochs": 3}


def test_the_solver_warm_starts_from_each_models_off_arm_at_float32_when_trained(base):
    cfg = resolve(base, {"per_model": {"pinn": {"precision": ["mixed_bfloat16", "float32"], "seeds": [3, 4]}}})
    assert warm_arms(cfg)["pinn"] == "pinn-off-s3"
    cfg = resolve(base, {"per_model": SPLIT})
    assert warm_arms(cfg) == {"pinn": "pinn-off-bf16-s0", "baseline": "baseline-off-s0"}
    assert all(Arm.parse(a).mode == "off" for a in warm_arms(cfg).values())
    cfg = resolve(base, {"per_model": {"baseline": {"xla": ["jit"]}}})
    assert "baseline" not in warm_arms(cfg)  # no off arm: no warm start from it


@pytest.mark.parametrize(
    ("own", "fragment"),
    [
        ({"pinn": {"xla": ["off", "warp"]}}, "config key 'per_model.pinn.xla.1': 'warp' is not allowed"),
        ({"pinn": {"xla": ["jit", True]}}, "config key 'per_model.pinn.xla': ['jit', True] names a mode twice"),
        ({"baseline": {"precision": ["bfloat16"]}}, "config key 'per_model.baseline.precision.0'"),
        ({"pinn": {"seeds": []}}, "config key 'per_model.pinn.seeds'"),
        ({"pinn": {"seeds": [-1]}}, "config key 'per_model.pinn.seeds.0'"),
        ({"pinn": {"modes": ["off"]}}, "config key 'per_model.pinn'"),
    ],
)
def test_a_bad_own_list_is_one_line_naming_its_key(base, own, fragment):
    with pytest.raises(ConfigError) as err:
        resolve(base, {"per_model": own})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_dag_trains_exactly_the_listed_arms(tmp_path):
    """The real Snakemake, dry-run: train jobs are the per-model arms, and each trained arm
    is inferred, stitched and scored (seconds; nothing runs)."""
    override = json.dumps(SPLIT)  # JSON is YAML, which --config reads
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "2", "all", "--quiet", "rules",
         "--config", f"results={tmp_path}/r", "allow_results_outside=true", f"per_model={override}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    counts = dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) == 2)
    assert counts["train"] == "7" and counts["infer"] == "7" and counts["evaluate"] == "7"


def test_the_bench_times_its_own_lists_else_the_studys(base):
    from ptycho.study.workflow import bench_lists

    cfg = resolve(base, {"models": ["pinn", "baseline"], "xla": ["off", "physics"], "precision": ["mixed_bfloat16"]})
    assert bench_lists(cfg) == (["pinn", "baseline"], ["off", "physics"], ["mixed_bfloat16"])
    cfg = resolve(base, {"bench": {"models": ["pinn"], "xla": ["off", True, "auto"], "precision": ["float32"]}})
    assert bench_lists(cfg) == (["pinn"], ["off", "jit", "auto"], ["float32"])


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"models": ["pinn"], "bench": {"models": ["baseline"]}}, "config key 'bench.models': baseline is not one"),
        ({"bench": {"xla": ["jit", True]}}, "config key 'bench.xla': ['jit', True] names a mode twice"),
        ({"bench": {"precision": []}}, "config key 'bench.precision'"),
    ],
)
def test_a_bad_bench_list_is_one_line_naming_its_key(base, overrides, fragment):
    with pytest.raises(ConfigError) as err:
        resolve(base, overrides)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_bench_rule_times_the_bench_lists(tmp_path):
    """The real Snakemake's bench job gets bench.models|xla|precision as its flags."""
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2", "bench",
         "--config", f"results={tmp_path}/r", "allow_results_outside=true",
         'bench={"models": [pinn], "xla": ["off", auto], "precision": [mixed_bfloat16]}'],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    command = next(line for line in out.stdout.splitlines() if " bench --models " in line)
    assert "bench --models pinn --modes off auto --precisions mixed_bfloat16 " in command


def test_accuracy_and_gradients_check_every_mode_and_precision_trained_or_timed(base):
    from ptycho.study.workflow import checked_lists

    cfg = resolve(base, {"xla": ["off", "physics"], "precision": ["mixed_bfloat16"]})
    assert checked_lists(cfg) == (["off", "physics"], ["mixed_bfloat16"])
    cfg = resolve(
        base,
        {
            "xla": ["off", "physics"],
            "precision": ["mixed_bfloat16"],
            "bench": {"xla": ["jit", "off"], "precision": ["float32"]},
        },
    )
    assert checked_lists(cfg) == (["off", "physics", "jit"], ["mixed_bfloat16", "float32"])


@pytest.mark.parametrize(
    ("preset", "loss", "nphotons"),
    [("default", "mae", "1000000000.0"), ("lowdose", "poisson", "10000.0")],
)
def test_the_gradients_item_checks_the_studys_own_loss_and_dose(tmp_path, preset, loss, nphotons):
    """Issue 43: the gradients check once ran at its own default point (Poisson, 1e6
    photons) whatever the study trained; the real Snakemake's job gets the study's, and
    the two sided question is asked only where the config says so."""
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2", "all", "--forcerun", "check_gradients",
         "--config", f"preset={preset}", f"results={tmp_path}/r", "allow_results_outside=true",
         "thresholds={two_sided: true}"],
        cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ, "PTYCHO_CALIBRATE": "0"},
    )  # fmt: skip
    lines = out.stdout.splitlines()
    command = next(line for line in lines if " check gradients " in line)
    assert f"--loss {loss} --nphotons {nphotons} " in command
    for item in ("quality", "convergence"):
        assert "--two-sided " in next(line for line in lines if f" check {item} " in line)
