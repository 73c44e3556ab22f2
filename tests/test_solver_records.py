"""The conventional solver is a record: a second engine, added here by its record and its
class alone, is parsed from the config, planned by a real Snakemake, run by the solve job
(every XLA mode, a warm start, the stitched objects) inside a real MLflow run, and named in
the report's words, as tests/test_axis_records.py does for an XLA mode and a precision.

The engine, ``toy``, is error reduction in NumPy: each iteration projects every exit wave
onto its measured amplitudes and averages the patches back into the object with the known
probe (the overlap projection of the difference-map family with the probe held fixed). It
ignores the XLA mode (NumPy has none) and rounds sub-pixel positions.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ptycho.solvers.engines as engines
from ptycho.errors import ConfigError
from ptycho.solvers.engines import Engine, Iteration, IterativeSolver, SolverConfig

ROOT = Path(__file__).resolve().parent.parent


class ToySolver(IterativeSolver):
    """Error reduction with the probe known, in NumPy (see the module's docstring)."""

    def __init__(self, problem, mode: str, cfg: SolverConfig):
        self.problem, self.mode, self.cfg = problem, mode, cfg
        corner, _ = problem.windows
        n = problem.n
        rows = corner[:, 1, None, None] + np.arange(n)[None, :, None]
        cols = corner[:, 0, None, None] + np.arange(n)[None, None, :]
        self._at = (rows, cols)  # (P, n, 1), (P, 1, n): each pattern's patch of the object
        self._amplitude = np.sqrt(np.fft.ifftshift(problem.counts, axes=(-2, -1)))  # DC at [0, 0]
        self._weight = np.zeros(problem.shape)
        np.add.at(self._weight, self._at, np.abs(problem.probe) ** 2)

    def _exit_waves(self, obj: np.ndarray) -> np.ndarray:
        return self.problem.probe * obj[self._at]

    def compile(self) -> float:
        return 0.0  # nothing to compile

    def iterate(self, start=None, iterations=None):
        from ptycho.solvers.misfit import object_misfit
        from ptycho.solvers.problem import flat_start

        obj = np.asarray(flat_start(self.problem) if start is None else start, np.complex128)
        budget = self.cfg.iterations if iterations is None else iterations
        for number in range(1, budget + 1):
            t0 = time.perf_counter()
            misfit = object_misfit(self.problem, obj.astype(np.complex64), rescale=False)
            far = np.fft.fft2(self._exit_waves(obj), norm="ortho")
            waves = np.fft.ifft2(self._amplitude * np.exp(1j * np.angle(far)), norm="ortho")
            numerator = np.zeros(self.problem.shape, np.complex128)
            np.add.at(numerator, self._at, np.conj(self.problem.probe) * waves)
            lit = self._weight > 1e-3 * self._weight.max()
            new = obj.copy()
            new[lit] = numerator[lit] / self._weight[lit]
            relative = float(np.linalg.norm(new - obj) / np.linalg.norm(obj))
            if relative < self.cfg.tolerance:
                return "tolerance"
            obj = new
            yield Iteration(number, misfit, relative, time.perf_counter() - t0, obj=obj.astype(np.complex64))
        return "budget"

    def rescaled(self, obj: np.ndarray) -> np.ndarray:
        # Parseval: the far field's total count is the exit waves' total intensity.
        predicted = float(np.sum(np.abs(self._exit_waves(np.asarray(obj, np.complex128))) ** 2))
        return (obj * np.sqrt(float(np.sum(self.problem.counts, dtype=np.float64)) / predicted)).astype(np.complex64)


#: The one record of the addition.
TOY = Engine("toy", "error reduction with the probe known, in NumPy (a test engine)", ToySolver)


def register(setitem=None) -> None:
    """Add the record to the registry (``setitem``: pytest's ``monkeypatch.setitem``, undone
    after the test; None: for good, in a process of its own)."""
    setitem = setitem or (lambda mapping, key, value: mapping.__setitem__(key, value))
    setitem(engines.ENGINES, TOY.name, TOY)


@pytest.fixture
def added(monkeypatch):
    register(monkeypatch.setitem)


def test_an_engine_added_by_its_record_is_a_config_choice_and_others_are_refused_in_one_line(added):
    import yaml

    from ptycho.study.workflow import resolve, solver_config

    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert solver_config(resolve(base, {})).engine == "apg"  # the default
    assert solver_config(resolve(base, {"solver": {"engine": "toy"}})).engine == "toy"
    for refused in (lambda: SolverConfig(engine="tomo"), lambda: resolve(base, {"solver": {"engine": "tomo"}})):
        with pytest.raises(ConfigError) as err:  # the workflow refuses it while it is parsed, before any job
            refused()
        assert str(err.value) == "config key 'solver.engine': 'tomo' is not a solver engine; choose one of apg, toy"


def test_a_real_snakemake_plans_the_solver_jobs_of_an_engine_added_by_its_record(tmp_path):
    """Snakemake in a process where the record was added before it read the Snakefile (a dry run)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_solver_records; "
        "test_solver_records.register(); from snakemake.cli import main; main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "-n", "-p", "--cores", "2", "all", "--config", f"results={tmp_path}/r",
         "allow_results_outside=true", "preset=smoke", "solver={engine: toy}"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    solves = [line for line in out.stdout.splitlines() if re.search(r"ptycho .* solve --", line)]
    assert len(solves) == 2 and all("--engine toy" in line for line in solves), out.stdout[-3000:]


def test_an_engine_added_by_its_record_solves_in_mlflow_and_is_named_in_the_report(files, tmp_path):
    """The solve command (every mode, a warm start from the flat start's own objects) in a
    child run of a real MLflow store, in a process where the record was added; then the
    report's solver entry reads its records."""
    from mlflow.tracking import MlflowClient

    from ptycho import tracking
    from ptycho.study import solver_view
    from ptycho.study.results import StudyResults

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    parent_id = tracking.start_parent(uri, "toy", "pipeline", params={}, tags={})
    parent = tmp_path / "parent.json"
    parent.write_text(json.dumps({"run_id": parent_id, "tracking_uri": uri}))

    def solve(out: Path, *extra) -> None:
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_solver_records; "
            "test_solver_records.register(); from ptycho.cli import main; sys.exit(main())"
        )
        args = ["--mlflow-parent", parent, "--mlflow-tag", f"rule={out.stem}", "--threads", "1", "solve",
                "--engine", "toy", "--iterations", "25", "--dataset", files["test"], "--modes", "off", "jit",
                "--out", out, *extra]  # fmt: skip
        run = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]

    stitched = tmp_path / "stitched"
    solve(tmp_path / "solve.json", "--stitched-dir", stitched)
    solve(tmp_path / "warm_start.json", "--start", f"itself={stitched / 'solver-off.npz'}")

    record = json.loads((tmp_path / "solve.json").read_text())
    assert record["engine"] == "toy" and {r["mode"] for r in record["runs"]} == {"off", "jit"}
    flat = {r["mode"]: r for r in record["runs"]}
    # It reconstructs: the misfit falls tenfold, the phase comes out of the flat start (the
    # amplitude, nearly flat in this object, starts close), and NumPy gives every mode one iterate.
    assert flat["off"]["misfit"][-1] < 0.1 * flat["off"]["misfit"][0]
    assert flat["off"]["final"]["phase_ssim"] > flat["off"]["curve"][0]["phase_ssim"] + 0.05
    assert flat["off"]["final"] == flat["jit"]["final"]
    assert (stitched / "solver-jit.npz").is_file()
    warm = json.loads((tmp_path / "warm_start.json").read_text())
    assert warm["engine"] == "toy" and {(r["mode"], r["start"]) for r in warm["runs"]} >= {("jit", "itself")}
    assert [row["flat_iterations"] for row in warm["warm_start"] if row["mode"] == "off"] == [10, 25]

    client = MlflowClient(uri)
    children = client.search_runs(
        [client.get_run(parent_id).info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    jobs = {run.info.run_name: run for run in children if run.data.tags.get("solver.engine")}
    assert set(jobs) == {"solve", "warm_start"} and {r.data.tags["solver.engine"] for r in jobs.values()} == {"toy"}
    assert jobs["solve"].data.metrics["off_flat_amp_ssim"] == pytest.approx(flat["off"]["final"]["amp_ssim"])
    job_id, experiment = jobs["solve"].info.run_id, jobs["solve"].info.experiment_id
    nested = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{job_id}'")
    assert {run.data.params["engine"] for run in nested} == {"toy"}
    assert {(r.data.params["arm.xla"], r.data.params["start"]) for r in nested} >= {("off", "flat"), ("jit", "flat")}

    solved = solver_view.entry(StudyResults(solver=(str(tmp_path / "solve.json"), str(tmp_path / "warm_start.json"))))
    assert solved.engine == "toy"
    assert solver_view.headline(solved).startswith("The iterative solver (toy, probe known, flat start) ")
