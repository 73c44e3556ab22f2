"""Any path works (issue 34): a checkout whose path holds a space and a non-ASCII letter,
with its venv inside it as `make setup` makes it, runs the workflow's jobs and hooks.
The commands the rules paste together start with that venv's interpreter, by absolute
path: unquoted, bash split it at the space ("/tmp/.../my: No such file or directory")."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from test_pipeline import _workdir


def _venv_inside(checkout: Path) -> Path:
    """A venv in the checkout that sees this one's packages (as `make setup` would give
    it its own): its interpreter's path holds the checkout's."""
    venv = checkout / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths()["purelib"])
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "parent.pth").write_text(f"import site; site.addsitedir({str(purelib)!r})\n")
    return venv / "bin" / "python"


def test_a_checkout_whose_path_has_a_space_and_an_accent_runs_its_jobs(tmp_path):
    checkout = _workdir(tmp_path / "my space" / "ptycho-é")
    python = _venv_inside(checkout)
    run = subprocess.run(
        [
            str(python),
            "-m",
            "snakemake",
            "--cores",
            "1",
            "results/smoke/mlflow/parent.json",
            "--config",
            "preset=smoke",
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (checkout / "results" / "smoke" / "mlflow" / "parent.json").is_file()
    assert (checkout / "results" / "mlflow.db").is_file()
