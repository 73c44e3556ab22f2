"""Conda environments pin the same versions as requirements.lock (conda is not installable here)."""

from __future__ import annotations

import re
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
        assert text.count("    conda:") == len(re.findall(r"(?m)^rule ", text)), rules.name
