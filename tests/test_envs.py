"""Conda environments pin the same versions as requirements.lock (conda is not installable here)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("env", sorted((ROOT / "envs").glob("*.yaml")), ids=lambda p: p.name)
def test_conda_env_pins_agree_with_the_lock(env):
    spec = yaml.safe_load(env.read_text())
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)
    pins = [p for p in pip if "==" in p]
    assert pins, "an environment must pin its packages"
    lock = _lock()
    for pin in pins:
        name, version = pin.split("==")
        assert lock.get(name.lower().replace("_", "-")) == version, f"{env.name}: {pin} disagrees with the lock"
    python = next(d for d in spec["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert python == "python=3.11"


def test_every_rule_uses_a_pinned_environment():
    for rules in (ROOT / "rules").glob("*.smk"):
        text = rules.read_text()
        assert text.count("    conda:") == len(re.findall(r"(?m)^ *(?:rule|checkpoint) ", text)), rules.name


def _rules(*methods):
    """The workflow's rules as Snakemake parses them with these deployment methods:
    {name: (conda env, shell command template, params.ptycho)}; parsing needs no conda."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DeploymentSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=2),
            config_settings=ConfigSettings(config={"preset": "smoke"}),
            deployment_settings=DeploymentSettings(deployment_method=set(methods)),
            snakefile=ROOT / "Snakefile",
            workdir=ROOT,
        )
        workflow.dag()  # parses the Snakefile
        return {r.name: (r.conda_env, r.shellcmd, getattr(r.params, "ptycho", None)) for r in workflow._workflow.rules}


def test_under_sdm_conda_every_job_runs_the_package_with_the_envs_interpreter():
    """`snakemake --sdm conda` activates envs/ptycho.yaml for each job, which puts the env's
    bin first on PATH: every job must be a shell command that runs `python -m ptycho`
    from PATH (no run: block in Snakemake's process, no absolute venv interpreter)."""
    import sys

    from snakemake.settings.types import DeploymentMethod

    jobs = {name: rule for name, rule in _rules(DeploymentMethod.CONDA).items() if rule[1] is not None}
    targets = {"all", "datasets", "models", "metrics"}
    assert set(_rules(DeploymentMethod.CONDA)) - set(jobs) == targets  # only the target rules run nothing
    for name, (env, command, ptycho) in jobs.items():
        assert env == "../envs/ptycho.yaml", name
        runs = command.replace("{params.ptycho}", ptycho or "{params.ptycho}")
        assert runs.startswith("python -m ptycho "), f"{name}: {runs}"
    # Without conda, jobs use the interpreter running Snakemake (make all's venv), by path.
    for name, (_, command, ptycho) in _rules().items():
        if command is not None:
            assert command.replace("{params.ptycho}", ptycho or "").startswith(f"{sys.executable} -m ptycho "), name


def _pins(name: str) -> dict[str, str]:
    return {
        line.split("==")[0]: line.split("==")[1]
        for line in (ROOT / name).read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }


def test_the_gpu_lock_is_the_cpu_lock_with_cuda_tensorflow():
    cpu, gpu = _pins("requirements.lock"), _pins("requirements-gpu.lock")
    assert "tensorflow" not in cpu and cpu["tensorflow-cpu"] == gpu["tensorflow"]  # same TensorFlow version
    assert {k: v for k, v in gpu.items() if k != "tensorflow" and not k.startswith("nvidia-")} == {
        k: v for k, v in cpu.items() if k != "tensorflow-cpu"
    }
    assert {"nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12"} <= set(gpu)


def _make_plan(tmp_path, *args: str) -> str:
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), f"VENV={tmp_path / 'venv'}", "setup", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_setup_installs_the_lock_of_the_chosen_tensorflow_and_the_choice_sticks(tmp_path):
    assert 'pip install -q -r "requirements.lock"' in _make_plan(tmp_path)
    assert 'pip install -q -r "requirements-gpu.lock"' in _make_plan(tmp_path, "GPU=1")
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed-gpu").touch()  # set up with GPU=1 before
    assert "Nothing to be done" in _make_plan(tmp_path)  # make all keeps the GPU build...
    assert "requirements-gpu.lock" in _make_plan(tmp_path, "-W", "requirements-gpu.lock")  # ...and its lock
    switch = _make_plan(tmp_path, "GPU=0")
    assert "rm -rf" in switch and "requirements.lock" in switch  # switching rebuilds the venv


@pytest.mark.slow
@pytest.mark.long
def test_both_locks_resolve_on_pypi_as_written(tmp_path):
    """pip resolves each lock as a closed set (metadata only: nothing is installed)."""
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    for lock in ("requirements.lock", "requirements-gpu.lock"):
        report = tmp_path / f"{lock}.json"
        result = subprocess.run(
            [
                str(venv / "bin" / "pip"),
                "install",
                "-q",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                "-r",
                str(ROOT / lock),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        import json

        resolved = {
            i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
            for i in json.loads(report.read_text())["install"]
        }
        pins = {k.lower().replace("_", "-"): v for k, v in _pins(lock).items()}
        assert {k: v for k, v in resolved.items() if k not in ("pip", "setuptools", "wheel")} == pins, lock
