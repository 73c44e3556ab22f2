"""The conventional solver: it descends the likelihood, recovers the object, agrees
across XLA modes, stops at once at the solution, and refuses data it cannot use."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from ptycho.analysis.metrics import probe_error, score_all  # noqa: E402
from ptycho.config import SimulationConfig  # noqa: E402
from ptycho.data.dataset import read_dataset  # noqa: E402
from ptycho.data.simulate import simulate_split  # noqa: E402
from ptycho.nets.xla import MODES  # noqa: E402
from ptycho.physics.forward import expected_counts  # noqa: E402
from ptycho.physics.translate import extract_patches  # noqa: E402
from ptycho.solvers.engines import SolverConfig  # noqa: E402
from ptycho.solvers.gradient import PROBE_START, Solver  # noqa: E402
from ptycho.solvers.misfit import object_misfit  # noqa: E402
from ptycho.solvers.problem import Problem, crop, joint_problem, problems, warm_start  # noqa: E402

#: The accuracy item's threshold (config.yaml thresholds.accuracy_max_abs).
ACCURACY = 1e-5
#: A small, well-posed scan: a defocused probe and a stride of a quarter patch.
SCAN = SimulationConfig(
    n=16, gridsize=1, object_size=40, n_lines=40, probe_kind="defocused", stride_test=4, nphotons=1e6, seed=3
)


@pytest.fixture(scope="module")
def scan():
    return simulate_split(SCAN, "test")


def noise_free(ds, shift=(0.0, 0.0)) -> Problem:
    """The first object of ``ds`` measured without noise, positions moved by ``shift``
    (those whose interpolation window would leave the object are dropped)."""
    obj = ds.objects[0]
    positions = ds.positions[ds.position_object == 0] + np.asarray(shift)
    if np.any(shift):
        reach = ds.n // 2 + 1
        inside = np.all((positions - reach >= 0) & (positions + reach < obj.shape[0]), axis=1)
        positions = positions[inside]
    patches = extract_patches(obj.astype(np.complex128), positions, ds.n)
    counts = expected_counts(ds.probe.astype(np.complex128), patches, ds.scale).astype(np.float32)
    region = tuple(int(v) for v in ds.scan_region[0])
    return Problem(counts, (ds.scale * ds.probe).astype(np.complex64), positions, obj.shape, region)


def test_the_solver_decreases_the_poisson_negative_log_likelihood(scan):
    problem = problems(scan)[0]
    result = Solver(problem, "off", SolverConfig(iterations=15)).solve()
    misfits = [it.misfit for it in result.iterations]
    assert len(misfits) == 15
    assert misfits[-1] < 0.05 * misfits[0]
    # Momentum may overshoot, but a restart follows at once: never two rises in a row.
    rises = np.diff(misfits) > 0
    assert not np.any(rises[1:] & rises[:-1])


def test_the_solver_recovers_a_small_noise_free_object(scan):
    ds = scan
    problem = noise_free(ds)
    result = Solver(problem, "jit", SolverConfig(iterations=150)).solve()
    mean = score_all([crop(problem, result.obj)], [ds.ground_truth(0)])["mean"]
    assert mean["amp_ssim"] >= 0.99
    assert mean["phase_ssim"] >= 0.98


def test_a_warm_start_from_the_truth_converges_in_zero_iterations(scan):
    ds = scan
    problem = noise_free(ds)
    solver = Solver(problem, "off", SolverConfig(iterations=50, tolerance=1e-4))
    result = solver.solve(start=ds.objects[0])
    assert result.stopped == "tolerance"
    assert result.iterations == []
    np.testing.assert_array_equal(result.obj, ds.objects[0])
    assert solver.misfit(ds.objects[0]) == pytest.approx(0.0, abs=1e-3)


@pytest.mark.parametrize("mode", [m for m in MODES if m != "off"])
def test_every_xla_mode_gives_the_iterate_of_off_with_subpixel_positions(scan, mode):
    # Sub-pixel positions: off translates with ImageProjectiveTransformV3, the XLA modes
    # with the gather warp, so the two arms run genuinely different code. One update:
    # later ones compound the arms' rounding through the nonlinear likelihood.
    problem = noise_free(scan, shift=(0.3, -0.4))
    assert problem.subpixel
    cfg = SolverConfig(iterations=1)
    ref = Solver(problem, "off", cfg).solve()
    solver = Solver(problem, mode, cfg)
    got = solver.solve()
    assert len(got.iterations) == len(ref.iterations) == 1
    assert np.max(np.abs(got.obj - ref.obj)) <= ACCURACY
    assert solver.trace_count() == 1  # compiled once, never retraced by the iterations


def test_warm_start_rescales_a_start_to_the_measured_counts(scan):
    ds = scan
    problem = noise_free(ds)
    x0, y0, x1, y1 = problem.region
    solver = Solver(problem, "off", SolverConfig(iterations=1))
    start = warm_start(problem, 0.5 * ds.objects[0][y0:y1, x0:x1])
    scaled = solver.rescaled(start)
    np.testing.assert_allclose(scaled[y0:y1, x0:x1], ds.objects[0][y0:y1, x0:x1], rtol=2e-2, atol=2e-2)


#: A scan for probe refinement: a raster scan lets the probe and the object trade a pattern
#: of the scan's period (the raster grid pathology), so its positions are jittered.
REFINE_SCAN = SimulationConfig(
    n=32, gridsize=1, object_size=80, n_lines=40, probe_kind="defocused", stride_test=4, nphotons=1e6, seed=3
)
#: What the refinement is held to (relative L2 over the illuminated pixels, up to a complex
#: factor and a phase plane: :func:`ptycho.analysis.metrics.probe_error`). From a start
#: 0.44 away it reaches about 0.10 at 100 iterations and drifts to 0.11-0.13 at 200-300
#: while the misfit still falls, along what the data constrain least (the dim rim).
PROBE_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def jittered():
    """The first object of REFINE_SCAN measured without noise at raster positions moved by
    whole pixels (up to 1 either way), and its true probe (scale included)."""
    ds = simulate_split(REFINE_SCAN, "test")
    obj = ds.objects[0]
    rng = np.random.default_rng(0)
    positions = ds.positions[ds.position_object == 0] + rng.integers(-1, 2, (int(np.sum(ds.position_object == 0)), 2))
    reach = ds.n // 2 + 1
    positions = positions[np.all((positions - reach >= 0) & (positions + reach < obj.shape[0]), axis=1)]
    patches = extract_patches(obj.astype(np.complex128), positions, ds.n)
    counts = expected_counts(ds.probe.astype(np.complex128), patches, ds.scale).astype(np.float32)
    truth = (ds.scale * ds.probe).astype(np.complex64)
    region = tuple(int(v) for v in ds.scan_region[0])
    return ds, Problem(counts, truth, positions.astype(np.float64), obj.shape, region)


def test_probe_refinement_recovers_the_true_probe_from_a_wrong_start(jittered):
    ds, problem = jittered
    truth = problem.probe
    # The start: the true beam with half its defocus, at the same power.
    start = (np.abs(truth) * np.exp(0.5j * np.angle(truth))).astype(np.complex64)
    wrong = Problem(problem.counts, start, problem.positions, problem.shape, problem.region)
    assert probe_error(start, truth) > 0.4
    cfg = SolverConfig(iterations=150, tolerance=0.0)
    its = list(Solver(wrong, "off", cfg).refine())
    assert len(its) == 150
    refined = its[-1].probe.numpy()
    assert probe_error(refined, truth) < PROBE_TOLERANCE
    # The probe did not move before PROBE_START, and the gauge kept its power.
    np.testing.assert_array_equal(its[PROBE_START - 1].probe.numpy(), start)
    assert np.sum(np.abs(refined) ** 2) == pytest.approx(np.sum(np.abs(start) ** 2), rel=1e-4)
    # Noise-free counts are explained (misfit ~0), and the object is recovered; with the
    # wrong probe held fixed neither is.
    assert its[-1].misfit < 0.1
    fixed = Solver(wrong, "off", cfg).solve()
    assert fixed.iterations[-1].misfit > 10.0
    known = Solver(problem, "off", cfg).solve()  # the true probe given: the ceiling at this budget
    refined_scores, fixed_scores, known_scores = (
        score_all([crop(wrong, obj)], [ds.ground_truth(0)])["mean"]
        for obj in (its[-1].obj.numpy(), fixed.obj, known.obj)
    )
    # The refinement from the wrong probe reaches what the true probe gives, within 0.01.
    for key in ("amp_ssim", "phase_ssim"):
        assert refined_scores[key] >= known_scores[key] - 0.01 and known_scores[key] >= 0.98
    assert fixed_scores["amp_ssim"] < 0.5 and fixed_scores["phase_ssim"] < 0.5


def test_the_true_object_and_probe_are_a_fixed_point_of_the_refinement(jittered):
    ds, problem = jittered
    its = list(Solver(problem, "off", SolverConfig(iterations=30, tolerance=0.0)).refine(start=ds.objects[0]))
    assert probe_error(its[-1].probe.numpy(), problem.probe) < 1e-3
    assert its[-1].misfit < 1e-3


@pytest.mark.parametrize("mode", [m for m in MODES if m != "off"])
def test_every_xla_mode_refines_the_probe_as_off_does_with_subpixel_positions(scan, mode):
    problem = noise_free(scan, shift=(0.3, -0.4))
    cfg = SolverConfig(iterations=2)
    ref = list(Solver(problem, "off", cfg).refine(probe_start=0))
    got = list(Solver(problem, mode, cfg).refine(probe_start=0))
    assert len(got) == len(ref) == 2
    for a, b in zip(ref, got, strict=True):
        assert not np.array_equal(a.probe.numpy(), problem.probe)  # the probe moved
        np.testing.assert_allclose(b.probe.numpy(), a.probe.numpy(), rtol=0, atol=ACCURACY * np.abs(a.probe).max())
        np.testing.assert_allclose(b.obj.numpy(), a.obj.numpy(), rtol=0, atol=ACCURACY)


def test_the_joint_problem_of_several_objects_is_their_scans_side_by_side():
    ds = simulate_split(dataclasses.replace(SCAN, n_objects_test=2), "test")
    probs, joint = problems(ds), joint_problem(ds)
    assert joint.shape == (probs[0].shape[0], 2 * probs[0].shape[1])
    assert len(joint.counts) == sum(len(p.counts) for p in probs)
    objects = [ds.objects[m] for m in range(2)]
    # Its misfit (unscaled) is the objects' pattern-weighted mean.
    each = [object_misfit(p, o, rescale=False) for p, o in zip(probs, objects, strict=True)]
    weights = [len(p.counts) for p in probs]
    assert object_misfit(joint, np.concatenate(objects, axis=1), rescale=False) == pytest.approx(
        np.average(each, weights=weights), rel=1e-6
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: dict(probe=None), "needs the probe"),
        (lambda p: dict(probe=np.ones((8, 8), np.complex64)), "do not match the 8x8 probe"),
        (
            lambda p: dict(counts=np.where(np.arange(p.counts.size).reshape(p.counts.shape) == 5, np.nan, p.counts)),
            "NaN",
        ),
        (lambda p: dict(positions=p.positions + 100.0), "reaches outside the 40x40 object"),
    ],
    ids=["no-probe", "mismatched-n", "nan-counts", "outside"],
)
def test_bad_inputs_are_one_line_errors(scan, change, message):
    p = noise_free(scan)
    fields = dict(counts=p.counts, probe=p.probe, positions=p.positions, shape=p.shape, region=p.region)
    with pytest.raises(ValueError, match=message) as err:
        Problem(**{**fields, **change(p)})
    assert "\n" not in str(err.value)


def _ptycho(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptycho", *map(str, args)], capture_output=True, text=True)


def test_solve_cli_writes_what_evaluate_scores_the_same_and_warm_starts(files, tmp_path):
    # (Its bad arguments are rows of the bad-input catalogue, tests/test_bad_inputs.py.)
    out, stitched = tmp_path / "solve.json", tmp_path / "stitched"
    base = ("--threads", 1, "solve", "--dataset", files["test"], "--iterations", 12)
    run = _ptycho(*base, "--modes", "off", "jit", "--out", out, "--stitched-dir", stitched)
    assert run.returncode == 0, run.stderr
    record = json.loads(out.read_text())
    assert {(r["mode"], r["start"]) for r in record["runs"]} == {("off", "flat"), ("jit", "flat")}
    assert set(record["ratios"]) == {"jit"}
    flat = record["runs"][0]
    assert [p["iteration"] for p in flat["curve"]] == [1, 2, 3, 5, 7, 10, 12]
    scored = tmp_path / "metrics.json"
    ev = _ptycho("evaluate", "--stitched", stitched / "solver-off.npz", "--dataset", files["test"], "--out", scored)
    assert ev.returncode == 0, ev.stderr
    assert "digest" not in ev.stderr  # the solver's output names its dataset, as stitch's does
    assert json.loads(scored.read_text())["dataset_digest"] == read_dataset(files["test"]).attrs["digest"]
    wrong = _ptycho("evaluate", "--stitched", stitched / "solver-off.npz", "--dataset", files["train"], "--out", scored)
    assert wrong.returncode != 0 and "made from another dataset" in wrong.stderr, wrong.stderr
    mean = json.loads(scored.read_text())["mean"]
    assert mean["amp_ssim"] == pytest.approx(flat["final"]["amp_ssim"], abs=1e-9)
    assert mean["phase_ssim"] == pytest.approx(flat["final"]["phase_ssim"], abs=1e-9)

    warm = tmp_path / "warm.json"
    run = _ptycho(*base, "--modes", "off", "--start", f"net={stitched / 'solver-off.npz'}", "--out", warm)
    assert run.returncode == 0, run.stderr
    rows = json.loads(warm.read_text())["warm_start"]
    # Started from the flat start's own result, it has the flat start's quality at once
    # (at 10 iterations), and its final quality (at 12, for the targets beyond its
    # budget) within one iteration (the start is rescaled to the measured counts first).
    assert [r["flat_iterations"] for r in rows] == [10, 12]
    assert (rows[0]["iterations"], rows[0]["iterations_saved"]) == (0, 10)
    assert rows[1]["iterations"] <= 1 and rows[1]["iterations_saved"] >= 11


def test_refine_probe_cli_writes_the_splits_again_with_the_refined_probe(files, tmp_path):
    out = {split: tmp_path / f"{split}.h5" for split in ("train", "test")}
    record_path = tmp_path / "probe.json"
    writes = [a for split in out for a in ("--write", f"{files[split]}={out[split]}")]
    run = _ptycho(
        "--threads", 1, "refine-probe", "--dataset", files["train"], *writes, "--out", record_path, "--iterations", 15
    )
    assert run.returncode == 0, run.stderr
    record = json.loads(record_path.read_text())
    assert record["iterations"] == 15 and record["probe_start"] == PROBE_START and len(record["misfit"]) == 15
    assert record["probe_change"] > 0 and record["misfit_refined_probe"] < record["misfit_given_probe"]
    before = {split: read_dataset(files[split]) for split in out}
    after = {split: read_dataset(path) for split, path in out.items()}
    assert set(record["outputs"].values()) == {ds.attrs["digest"] for ds in after.values()}
    # One probe for both splits, stored as the source stores it (before its scale); nothing else changed.
    np.testing.assert_array_equal(after["train"].probe, after["test"].probe)
    train = before["train"]
    assert probe_error(after["train"].probe, train.probe) == pytest.approx(record["probe_change"], rel=1e-4)
    for split in out:
        np.testing.assert_array_equal(after[split].diffraction, before[split].diffraction)
        np.testing.assert_array_equal(after[split].positions, before[split].positions)
        assert after[split].scale == before[split].scale
        provenance = json.loads(after[split].attrs["config"])["probe_refined"]
        assert provenance["source_digest"] == train.attrs["digest"] and provenance["iterations"] == 15
