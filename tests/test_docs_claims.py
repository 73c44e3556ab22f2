"""What the README, the Snakefile and the SLURM profile say about the default run is what
the default run does: its modes, precision, loss, seeds, epochs, minutes and cluster jobs,
checked against the resolved configuration and a dry run of the workflow."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptycho.cli.values import study_config

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def default():
    return study_config(str(ROOT / "config.yaml"), "default")


def _pinn(cfg, key):
    return cfg.get("per_model", {}).get("pinn", {}).get(key, cfg[key])


def test_the_readme_describes_the_default_matrix_and_loss(default):
    sentence = re.search(r"The default study trains the PINN in (.+?) as the quality reference", README, re.S)
    assert sentence, "README: the sentence describing the default study is gone"
    words = " ".join(sentence.group(1).split())
    modes = re.search(r"`xla: \[(.+?)\]`", words).group(1)
    assert [m.strip().strip('"') for m in modes.split(",")] == _pinn(default, "xla")
    assert "at `precision: [auto]`" in words and len(_pinn(default, "precision")) == 1  # resolved per machine
    seeds = _pinn(default, "seeds")
    assert f"seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}" in words
    assert f"{default['train']['epochs']} epochs" in words
    assert f"with the {default['model']['loss'].upper()} loss (`model.loss`)" in words
    assert "Poisson likelihood the PINN trains with" not in README


def test_the_readme_and_the_snakefile_give_the_same_minutes_for_the_default_run():
    readme = re.search(r"make all +# .*\(about (\d+) min on 2 cores\)", README).group(1)
    snakefile = re.search(r"the default study \(about (\d+) min on 2 cores\)", (ROOT / "Snakefile").read_text())
    timing = re.search(r"about (\d+) min", README[README.index("## How long it takes") :])
    assert snakefile and snakefile.group(1) == readme == timing.group(1)


def test_the_studys_budget_is_the_readmes_minutes(default):
    """The estimate warns over ``budget_min``: the figure the README promises."""
    readme = int(re.search(r"make all +# .*\(about (\d+) min on 2 cores\)", README).group(1))
    assert default["budget_min"] == readme and f"`budget_min` ({readme})" in " ".join(README.split())


def test_the_readmes_minutes_cover_the_last_measured_run():
    """docs/timing.md records the last fresh-clone `make all`; the README rounds it up."""
    readme = int(re.search(r"make all +# .*\(about (\d+) min on 2 cores\)", README).group(1))
    measured = re.search(r"`make all` on a 2-core machine: (\d+) min (\d+) s", (ROOT / "docs/timing.md").read_text())
    minutes = int(measured.group(1)) + int(measured.group(2)) / 60
    assert minutes <= readme < minutes + 5


@pytest.mark.slow
def test_the_slurm_profile_counts_the_default_studys_cluster_jobs(tmp_path):
    """Every job of a dry run but the local rules (and the 'all' target) goes to SLURM."""
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "all", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
         "--configfile", str(ROOT / "config.yaml")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", run.stdout, re.M))
    common = (ROOT / "rules" / "common.smk").read_text()
    local = re.search(r"localrules:\n((?:\s+\w+,?\n)+)", common).group(1).replace(",", "").split()
    jobs = int(counts["total"]) - int(counts["all"]) - sum(int(counts.get(rule, 0)) for rule in local)
    claimed = re.search(r"the default study has (\d+) cluster jobs", (ROOT / "profiles/slurm/config.yaml").read_text())
    assert claimed and int(claimed.group(1)) == jobs
