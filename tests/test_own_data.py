"""The study on the user's own data (issue 34, item 3): measured data from a CXI file to a report.

A CXI file without an object (as measured data comes) is named by the config key
``data``; the import_data rule reads it instead of simulating, evaluate writes the data
misfit and half-scan resolution instead of scores, the solver reconstructs it with no
scores, and the quality item judges each arm's misfit, resolution and reconstruction
against its reference arm's, so XLA's question is answered without a ground truth. The config key's bad inputs
are rows of ``test_bad_inputs.py`` (docs/bad-inputs.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ptycho.data.cxi import export_cxi
from ptycho.data.dataset import read_attributes, read_dataset, write_dataset
from ptycho.data.sources import describe, read_source


def measured_cxi(ds, path: Path) -> Path:
    """``ds`` as an experiment records it: CXI without the object (image_2) and without
    ptycho's own extras (ptycho_1)."""
    import h5py

    export_cxi(ds, path)
    with h5py.File(path, "a") as f:
        del f["entry_1/ptycho_1"]
        del f["entry_1/image_2"]
    return path


@pytest.fixture(scope="module")
def measured(files, tmp_path_factory) -> dict[str, Path]:
    """The small pair as measured CXI files, and the test split imported from its file."""
    d = tmp_path_factory.mktemp("own")
    out = {split: measured_cxi(read_dataset(files[split]), d / f"{split}.cxi") for split in ("train", "test")}
    out["test.h5"] = d / "test.h5"
    write_dataset(out["test.h5"], read_source(out["test"], gridsize=2, split="test"))
    return out


# ------------------------------------------------------------------------ the files
def test_a_data_file_is_described_from_its_headers(files, measured, tmp_path):
    n = read_dataset(files["test"]).probe.shape[0]
    patterns = read_dataset(files["test"]).diffraction.shape[0]
    got = describe(measured["test"])
    assert (got.kind, got.ground_truth, got.n, got.patterns) == ("cxi", False, n, patterns)
    assert got.words == f"CXI 1.6 file, {patterns} patterns of {n}x{n} px, no ground truth (measured data)"
    export_cxi(read_dataset(files["test"]), tmp_path / "full.cxi")  # with the object: a ground truth
    assert describe(tmp_path / "full.cxi").ground_truth is True
    simulated = describe(files["test"])
    assert (simulated.kind, simulated.ground_truth, simulated.patterns) == ("dataset", True, patterns)
    assert describe(measured["test.h5"]).ground_truth is False
    # A ptycho dataset is read as it is: the same content, the same digest.
    assert (
        read_source(files["test"], gridsize=2, split="test").attrs["digest"] == read_attributes(files["test"])["digest"]
    )


def test_the_misfit_evaluate_gives_networks_is_the_solvers(measured):
    """One number for networks and solver: ptycho.solvers.misfit (NumPy) equals the
    solver's own misfit (TensorFlow) of the same object."""
    pytest.importorskip("tensorflow")
    from ptycho.solvers.gradient import Solver
    from ptycho.solvers.misfit import object_misfit
    from ptycho.solvers.problem import problems

    problem = problems(read_dataset(measured["test.h5"]))[0]
    rng = np.random.default_rng(0)
    obj = (0.5 + 0.5 * rng.random(problem.shape)) * np.exp(1j * rng.random(problem.shape))
    solver = Solver(problem, "off")
    assert object_misfit(problem, obj, rescale=False) == pytest.approx(solver.misfit(obj), rel=1e-5)


# ------------------------------------------------------------------------ measures without a truth
def _reconstruction(files, measured, tmp_path: Path, noise: float) -> str:
    """An 'infer' record of the measured test split: each pattern's patch of the true
    object (from the simulated file the measured one was made from) with its own noise."""
    from ptycho.artifacts import write_arrays
    from ptycho.physics.translate import extract_patches

    truth = read_dataset(files["test"])
    ds = read_dataset(measured["test.h5"])
    positions, owner = ds.positions, ds.position_object
    patches = np.concatenate(
        [extract_patches(truth.objects[m], positions[owner == m], ds.n) for m in range(len(ds.objects))]
    )
    rng = np.random.default_rng(0)
    patches = patches + noise * (rng.standard_normal(patches.shape) + 1j * rng.standard_normal(patches.shape))
    path = tmp_path / f"recon-{noise}.npz"
    write_arrays(path, producer="infer", patches=patches, positions=positions, position_object=owner)
    return str(path)


def test_evaluate_judges_measured_data_by_misfit_and_half_scan_resolution(files, measured, tmp_path):
    """Issue 44, item 3: on data without a ground truth, stitch also writes the objects
    from each interleaved half of the scan, and evaluate reads their agreement as the
    resolution (1/2-bit FRC): noisier patches, coarser resolution. Simulated data keeps
    its files as they were; a measured-data stitched file without halves is one line."""
    from ptycho.artifacts import read_arrays, read_json
    from ptycho.errors import PtychoError
    from ptycho.study import jobs

    got = {}
    for noise in (0.02, 0.3):
        stitched, metrics = tmp_path / f"stitched-{noise}.npz", tmp_path / f"metrics-{noise}.json"
        # The truth's patches need no phase synchronisation, and this small scan's halves
        # overlap too little for it (each half's rows would take their own constant phase).
        recon = _reconstruction(files, measured, tmp_path, noise)
        jobs.stitch(str(measured["test.h5"]), recon, str(stitched), phase_sync=False)
        arrays = read_arrays(stitched, ("images", "halves"), producer="stitch")
        assert arrays["halves"].shape == (2, *arrays["images"].shape)
        record = jobs.evaluate(str(measured["test.h5"]), str(stitched), str(metrics))
        got[noise] = read_json(metrics, producer="evaluate")["mean"]
        assert set(got[noise]) == {
            "data_misfit",
            "amp_half_frc",
            "phase_half_frc",
            "amp_half_frc_mean",
            "phase_half_frc_mean",
        }
        assert record.metrics["amp_half_frc"] == got[noise]["amp_half_frc"]
    for key in ("amp_half_frc", "phase_half_frc"):
        assert 0 < got[0.3][key] < got[0.02][key] <= 0.5, (key, got)
        assert got[0.3][f"{key}_mean"] < got[0.02][f"{key}_mean"] <= 1, (key, got)
    assert got[0.02]["data_misfit"] < got[0.3]["data_misfit"]
    simulated = tmp_path / "simulated.npz"
    jobs.stitch(str(files["test"]), _reconstruction(files, measured, tmp_path, 0.0), str(simulated))
    assert "halves" not in read_arrays(simulated, ("images",), producer="stitch")
    with pytest.raises(PtychoError) as err:
        jobs.evaluate(str(measured["test.h5"]), str(simulated), str(tmp_path / "no.json"))
    assert str(err.value) == (
        f"{simulated}: no objects stitched from each half of the scan, which measured data is judged by; re-run "
        "stitch (it writes them for data without a ground truth)"
    )
    assert not (tmp_path / "no.json").exists()


def test_evaluate_hands_each_object_to_ptychodus_as_a_product(files, measured, tmp_path):
    """Issue 44, item 5: the reconstruction as a ptychodus product, read back with
    ptychodus's own reader (``ptychodus.api.io.load_product``, 1.7.0, installed by `make
    setup`) when it imports, and by its documented keys always: the object is the stitched
    image, each scan position lands where it was stitched, the probe is the forward
    model's, the losses are the training's, the comments name the MLflow run."""
    import json as _json

    from ptycho.artifacts import read_arrays
    from ptycho.data.cxi import CxiGeometry
    from ptycho.data.ptychodus import PRODUCT_KEYS, read_product
    from ptycho.study import jobs, products

    stitched = tmp_path / "stitched.npz"
    jobs.stitch(str(measured["test.h5"]), _reconstruction(files, measured, tmp_path, 0.02), str(stitched))
    parent = tmp_path / "parent.json"
    parent.write_text(_json.dumps({"run_id": "abc123", "tracking_uri": "sqlite:///mlflow.db"}))
    geometry = CxiGeometry()
    product = products.Products(
        folder=str(tmp_path / "products" / "pinn-off-s0"),
        name="pinn-off-s0",
        comments=products.comments("reconstruction pinn-off-s0", str(parent), geometry, products.ASSUMED),
        geometry=geometry,
        losses=[(1, 0.5), (2, 0.25)],
    )
    jobs.evaluate(str(measured["test.h5"]), str(stitched), str(tmp_path / "m.json"), products=product)
    ds = read_dataset(measured["test.h5"])
    image = read_arrays(stitched, ("images",), producer="stitch")["images"][0]
    path = tmp_path / "products" / "pinn-off-s0" / "object-0.h5"
    got = read_product(path)
    assert set(PRODUCT_KEYS["attrs"]) <= set(got["attrs"])
    assert "MLflow parent run abc123 at sqlite:///mlflow.db" in got["attrs"]["comments"]
    assert "geometry assumed (config cxi)" in got["attrs"]["comments"]
    np.testing.assert_array_equal(got["object"][0], image)
    np.testing.assert_allclose(got["probe"][0, 0], ds.scale * ds.probe, rtol=1e-6)
    assert got["loss_epochs"].tolist() == [1, 2] and got["loss_values"].tolist() == [0.5, 0.25]
    d = geometry.object_pixel_m(ds.n)
    x0, y0, _, _ = ds.scan_region[0]
    assert got["object_attrs"]["pixel_width_m"] == d
    columns = (got["probe_position_x_m"] - got["object_attrs"]["center_x_m"]) / d + (image.shape[1] - 1) / 2
    rows = (got["probe_position_y_m"] - got["object_attrs"]["center_y_m"]) / d + (image.shape[0] - 1) / 2
    np.testing.assert_allclose(columns, ds.positions[:, 0] - x0, atol=1e-9)
    np.testing.assert_allclose(rows, ds.positions[:, 1] - y0, atol=1e-9)

    io = pytest.importorskip("ptychodus.api.io")  # ptychodus's own reader
    loaded = io.load_product(path)
    np.testing.assert_array_equal(loaded.object_.get_array()[0], image)
    geometry_ = loaded.object_.get_geometry()
    mapped = [geometry_.map_coordinates_probe_to_object(p) for p in loaded.probe_positions]
    np.testing.assert_allclose([m.x_px for m in mapped], ds.positions[:, 0] - x0, atol=1e-6)
    np.testing.assert_allclose([m.y_px for m in mapped], ds.positions[:, 1] - y0, atol=1e-6)
    assert [loss.value for loss in loaded.losses] == [0.5, 0.25]
    assert loaded.metadata.photon_energy_eV == geometry.energy_ev


# ------------------------------------------------------------------------ the quality item
def _stitched(tmp_path: Path, name: str, images: np.ndarray) -> str:
    from ptycho.artifacts import write_arrays

    path = tmp_path / f"{name}.npz"
    write_arrays(path, producer="stitch", images=images.astype(np.complex64))
    return str(path)


def _metrics(tmp_path: Path, name: str, misfit: float, half: float = 0.2) -> str:
    from ptycho.artifacts import write_json

    path = tmp_path / f"{name}.json"
    mean = {"data_misfit": misfit, "amp_half_frc": half, "phase_half_frc": half}
    mean |= {"amp_half_frc_mean": 2 * half, "phase_half_frc_mean": 2 * half}
    record = {"ground_truth": False, "n_images": 1, "mean": mean, "per_image": [mean]}
    write_json(path, record, producer="evaluate")
    return str(path)


def _object(rng, shape=(48, 48)) -> np.ndarray:
    """A smooth random object: amplitude in (0.5, 1), phase in (-1, 1) rad."""
    from scipy.ndimage import gaussian_filter

    amp = gaussian_filter(rng.random(shape), 2)
    phase = gaussian_filter(rng.random(shape), 2)
    amp = 0.5 + 0.5 * (amp - amp.min()) / np.ptp(amp)
    phase = 2 * (phase - phase.min()) / np.ptp(phase) - 1
    return amp * np.exp(1j * phase)


def _collect(
    tmp_path: Path, objects: dict[str, np.ndarray], threshold: float = 0.02, misfits: dict[str, float] | None = None
):
    from ptycho.study.checklist import Inputs
    from ptycho.study.checklist.quality import collect
    from ptycho.study.results import StudyResults

    misfits = misfits or {name: 1.0 + i for i, name in enumerate(objects)}
    metrics = [_metrics(tmp_path, name, misfits[name]) for name in objects]
    stitched = [_stitched(tmp_path, name, image[None]) for name, image in objects.items()]
    return collect(Inputs(results=StudyResults(metrics=metrics, stitched=stitched)), threshold)


def _seeds(rng, arms: dict[str, str]) -> dict[str, np.ndarray]:
    """Three seeds of off, each a small variation of one object (the yardstick: two seeds
    agree well), and per other mode its reconstruction: ``"same"`` as off's of its seed,
    ``"other"`` an unrelated object."""
    base = _object(rng)
    objects = {}
    for seed in range(3):
        off = objects[f"pinn-off-s{seed}"] = base * (1 + 0.05 * _object(rng).real)
        for mode, kind in arms.items():
            objects[f"pinn-{mode}-s{seed}"] = off.copy() if kind == "same" else _object(rng)
    return objects


def test_the_measured_quality_evidence_is_its_record_key_for_key(tmp_path):
    """On measured data the quality item's evidence reads as its record (the arms against
    each other, the seed-to-seed yardstick) and writes back the same JSON; the report's
    tables and the answers on measured data read the record."""
    from ptycho.artifacts import _jsonable
    from ptycho.study.checklist.quality_evidence import AgreementEvidence, evidence_of
    from ptycho.study.report.items.quality import tables
    from ptycho.study.report.record import StudyReport

    objects = _seeds(np.random.default_rng(1), {"jit": "same"})
    evidence = json.loads(json.dumps(_jsonable(_collect(tmp_path, objects).evidence)))
    record = evidence_of(evidence)
    assert isinstance(record, AgreementEvidence) and not record.ground_truth
    assert json.loads(json.dumps(_jsonable(record.to_json()))) == evidence
    between = record.between_arms["pinn-s1-jit"]
    assert (between.arm, between.reference, between.score("amp_ssim")) == ("pinn-jit-s1", "pinn-off-s1", 1.0)
    yard = record.seed_to_seed["pinn-off"]
    assert yard.pairs == 3 and set(yard.per_pair["amp_ssim"]) == {"0-1", "0-2", "1-2"}
    found = tables(StudyReport.of({"items": {"quality": {"evidence": evidence}}}))
    between_table = next(rows for title, _, rows in found if title.startswith("Each arm's reconstruction against"))
    assert between_table[1][:3] == ["pinn-s1-jit", "pinn-jit-s1", "pinn-off-s1"] and between_table[1][3] == "1"
    yard_table = next(rows for title, _, rows in found if title.startswith("Yardstick"))
    assert yard_table == [["pinn-off", *yard_table[0][1:3], "3"]]


def test_without_ground_truth_an_arm_as_good_as_off_passes(tmp_path):
    """Issue 44, item 3: jit reconstructs what off does and explains the data as well
    (misfits equal per seed, seeds of off differing by 2 %): every comparison NOT WORSE,
    the item PASSes. The agreement is judged against off's own seeds, not against 1."""
    objects = _seeds(np.random.default_rng(1), {"jit": "same"})
    misfits = {name: 1.0 + 0.01 * int(name[-1]) for name in objects}
    record = _collect(tmp_path, objects, misfits=misfits)
    ev = record.evidence
    assert record.status == "PASS" and record.item == "quality", record.summary
    assert record.threshold == 1.0 and 0 <= record.value <= 1  # the worst reach over its own margin
    assert ev["ground_truth"] is False and ev["threshold"] == 0.02 and ev["margin"] == 0.05
    assert set(ev["between_arms"]) == {f"pinn-s{s}-jit" for s in range(3)}
    assert (ev["between_arms"]["pinn-s1-jit"]["arm"], ev["between_arms"]["pinn-s1-jit"]["reference"]) == (
        "pinn-jit-s1",
        "pinn-off-s1",
    )
    assert ev["between_arms"]["pinn-s1-jit"]["amp_ssim"] == 1.0
    outcomes = {k: c["outcome"] for k, c in ev["comparisons"]["pinn-jit"].items()}
    assert outcomes == dict.fromkeys(
        ("data_misfit", "amp_half_frc_mean", "phase_half_frc_mean", "amp_ssim", "phase_ssim"), "NOT WORSE"
    )
    misfit = ev["comparisons"]["pinn-jit"]["data_misfit"]
    assert misfit["design"] == "paired" and misfit["difference"] == 0.0 and misfit["better"] == "lower"
    ssim = ev["comparisons"]["pinn-jit"]["amp_ssim"]
    yard = ev["seed_to_seed"]["pinn-off"]
    assert (
        ssim["design"] == "unpaired"
        and ssim["mean_mode"] == 1.0
        and ssim["mean_off"] == pytest.approx(yard["amp_ssim"])
    )
    assert yard["pairs"] == 3 and sorted(yard["per_pair"]["amp_ssim"]) == ["0-1", "0-2", "1-2"]
    assert ev["per_arm"]["pinn-off-s2"] == {
        "data_misfit": 1.02,
        "amp_half_frc_mean": 0.4,
        "phase_half_frc_mean": 0.4,
        "amp_half_frc": 0.2,
        "phase_half_frc": 0.2,
    }
    assert record.summary.startswith(
        "no ground truth (measured data): each arm against its reference arm of the same seed; PINN jit - off data "
        "misfit, (arm - reference) / reference: +0.0% (90 % interval +0.0% to +0.0%"
    )
    assert (
        f"PINN jit - off: amplitude SSIM between their reconstructions 1.0000, between two seeds of the reference arm "
        f"{yard['amp_ssim']:.4f}: {1 - yard['amp_ssim']:+.4f} (90 % interval" in record.summary
    )
    assert "3 seeds vs 3 pairs of seeds" in record.summary


def test_without_ground_truth_a_worse_misfit_or_a_reconstruction_unlike_offs_fails(tmp_path):
    """physics reconstructs what off does but explains the data 30 % worse: its misfit is
    WORSE. auto reconstructs another object: further from off's than off's seeds are from
    each other, WORSE. The item FAILs, naming both."""
    objects = _seeds(np.random.default_rng(3), {"physics": "same", "auto": "other"})
    misfits = {name: (1.3 if "physics" in name else 1.0) + 0.01 * int(name[-1]) for name in objects}
    record = _collect(tmp_path, objects, misfits=misfits)
    comparisons = record.evidence["comparisons"]
    assert record.status == "FAIL"
    assert comparisons["pinn-physics"]["data_misfit"]["outcome"] == "WORSE"
    assert comparisons["pinn-physics"]["data_misfit"]["difference"] == pytest.approx(0.3 / 1.01, rel=0.02)
    assert comparisons["pinn-physics"]["amp_ssim"]["outcome"] == "NOT WORSE"
    assert comparisons["pinn-auto"]["data_misfit"]["outcome"] == "NOT WORSE"
    assert comparisons["pinn-auto"]["amp_ssim"]["outcome"] == "WORSE"
    assert "WORSE by more than the 5.0% margin" in record.summary


def test_one_seed_without_ground_truth_is_inconclusive_and_every_view_reads_it(tmp_path):
    """The smoke study's shape: one seed, jit vs off. The item, its tables, the report's
    quality sentence and each arm's MLflow answer all work on the record (read back from JSON).
    With one seed there is no yardstick: the agreement is shown, not judged."""
    from ptycho.artifacts import read_json, write_json
    from ptycho.study import report as views
    from ptycho.study.report.answers import _measured_answers
    from ptycho.study.report.items.quality import tables
    from ptycho.study.report.record import StudyReport

    rng = np.random.default_rng(2)
    off = _object(rng)
    jit = off * (1 + 0.01 * rng.standard_normal(off.shape))  # nearly the same reconstruction
    record = _collect(tmp_path, {"pinn-off-s0": off, "pinn-jit-s0": jit})
    write_json(tmp_path / "quality.json", record.to_json())
    record = read_json(tmp_path / "quality.json")  # NaN as null, as the report reads it
    assert record["status"] == "INCONCLUSIVE" and record["value"] is None  # NaN: no interval to reach
    ev = record["evidence"]
    assert set(ev["comparisons"]["pinn-jit"]) == {"data_misfit", "amp_half_frc_mean", "phase_half_frc_mean"}
    c = ev["comparisons"]["pinn-jit"]["data_misfit"]
    assert c["outcome"] == "INCONCLUSIVE" and c["seeds_mode"] == [0] and c["difference"] == pytest.approx(1.0)
    ssim = ev["between_arms"]["pinn-s0-jit"]["amp_ssim"]
    assert 0.9 < ssim < 1 and ev["seed_to_seed"] == {}
    assert (
        f"PINN jit - off: amplitude SSIM between their reconstructions {ssim:.4f}; one seed of the reference arm: no "
        "seed-to-seed yardstick to judge it by" in record["summary"]
    )
    report = {
        "items": {"quality": record},
        "arms": {
            "pinn-off-s0": {"metrics": {"data_misfit": 1.0, "amp_half_frc": 0.2}},
            "pinn-jit-s0": {"metrics": {"data_misfit": 2.0, "amp_half_frc": 0.2}},
        },
        "config": {"data": {"train": "scan.cxi", "test": "scan.cxi"}},
    }
    phase = ev["between_arms"]["pinn-s0-jit"]["phase_ssim"]
    assert views.quality_sentence(report) == (
        "Quality, no ground truth (measured data): each XLA mode against off of the same seed and precision (PINN; "
        "margins 5% relative and 0.02 similarity): jit vs off: data misfit +100.0%: INCONCLUSIVE, half-scan FRC "
        "mean amplitude +0.000: INCONCLUSIVE, phase +0.000: INCONCLUSIVE."
    )
    assert views.data_sentence(report) == (
        "Data: your own files, train scan.cxi, test scan.cxi (no ground truth: measured data, nothing scored "
        "against a truth)."
    )
    refined = {"patterns": 516, "iterations": 200, "probe_change": 0.663, "misfit_given_probe": 20.68}
    report["probe"] = {**refined, "misfit_refined_probe": 1.913, "mode": "physics"}
    assert views.data_sentence(report).endswith(
        "against a truth). Probe: the file's estimate refined by the solver on the training split (516 patterns, "
        "200 iterations): it moved 66% (relative, up to phase and scale), and the solver's data misfit fell from "
        "20.7 with the given probe to 1.91; every arm trained, and every reconstruction was scored, with it."
    )
    del report["probe"]
    titles = [title for title, _, _ in tables(StudyReport.of({"items": {"quality": record}}))]
    assert titles[0].startswith("Per arm: no ground truth (measured data), so no scores; the data misfit")
    assert len(titles) == 3  # misfits and resolutions, each arm against its reference, the comparisons
    assert _measured_answers(StudyReport.of(report), {}) == {
        "pinn-off-s0": {"data_misfit": 1.0, "amp_half_frc": 0.2},
        "pinn-jit-s0": {
            "data_misfit": 2.0,
            "amp_half_frc": 0.2,
            "amp_ssim_vs_reference": ssim,
            "phase_ssim_vs_reference": phase,
        },
    }


def test_the_quality_item_on_measured_data_needs_the_arms_stitched_objects(tmp_path):
    from ptycho.errors import PtychoError
    from ptycho.study.checklist import Inputs
    from ptycho.study.checklist.quality import collect
    from ptycho.study.results import StudyResults

    metrics = [_metrics(tmp_path, name, 1.0) for name in ("pinn-off-s0", "pinn-jit-s0")]
    with pytest.raises(PtychoError) as err:
        collect(Inputs(results=StudyResults(metrics=metrics)), 0.02)
    assert str(err.value) == (
        "no stitched objects for arm(s) pinn-jit-s0, pinn-off-s0: on measured data the quality item compares the "
        "arms' reconstructions; pass every arm's stitched file (check quality --stitched)"
    )


# ------------------------------------------------------------------------ the solver
def test_solve_reconstructs_measured_data_with_its_misfit_and_no_scores(measured, tmp_path):
    """No refusal: every mode and a warm start run, quality is the data misfit at the
    checkpoints (falling), the record and the report's solver section say no ground truth."""
    pytest.importorskip("tensorflow")
    from ptycho.artifacts import read_arrays, read_json, write_arrays
    from ptycho.data.cxi import CxiGeometry
    from ptycho.data.ptychodus import read_product
    from ptycho.solvers.engines import SolverConfig
    from ptycho.solvers.problem import problems
    from ptycho.study import solver_view
    from ptycho.study.products import Products
    from ptycho.study.report.record import StudyReport
    from ptycho.study.solve import solve
    from ptycho.study.solver_record import SolveRecord

    ds = read_dataset(measured["test.h5"])
    x0, y0, x1, y1 = problems(ds)[0].region
    start = tmp_path / "start.npz"  # a network's reconstruction as the warm start: a unit object
    write_arrays(start, producer="stitch", images=np.ones((1, y1 - y0, x1 - x0), np.complex64))
    out = tmp_path / "solve.json"
    solve(
        str(measured["test.h5"]),
        str(out),
        modes=("off", "jit"),
        cfg=SolverConfig(iterations=12),
        starts={"pinn": str(start)},
        stitched_dir=str(tmp_path / "stitched"),
        checkpoints=(0, 1, 5, 10),
        products=Products(folder=str(tmp_path / "products"), name="test", comments="c", geometry=CxiGeometry()),
    )
    record = read_json(out, producer=("solve", "warm_start"))
    # Each mode's flat-start object as a ptychodus product, its misfit per iteration the losses.
    for mode in ("off", "jit"):
        product = read_product(tmp_path / "products" / f"solver-{mode}" / "object-0.h5")
        flat = next(r for r in record["runs"] if (r["mode"], r["start"]) == (mode, "flat"))
        assert product["loss_epochs"].tolist() == list(range(1, 13))
        np.testing.assert_allclose(product["loss_values"], flat["misfit"])
        assert product["attrs"]["name"] == f"test solver {mode} object 0"
    assert record["ground_truth"] is False
    # The solver's resolution: off again from each half of the scan, the halves compared.
    half = record["half_scan"]
    assert half["mode"] == "off" and all(0 < half[k] <= 0.5 for k in ("amp_half_frc", "phase_half_frc"))
    off = read_arrays(tmp_path / "stitched" / "solver-off.npz", ("images", "halves"), producer="solve")
    assert off["halves"].shape == (2, *off["images"].shape)
    assert "halves" not in read_arrays(tmp_path / "stitched" / "solver-jit.npz", ("images",), producer="solve")
    for run in record["runs"]:
        assert set(run["final"]) == {"data_misfit"} and run["iterations"] == 12
        curve = [p["data_misfit"] for p in run["curve"]]
        assert [p["iteration"] for p in run["curve"]] == ([0] if run["start"] == "pinn" else []) + [1, 5, 10, 12]
        assert curve[-1] == run["final"]["data_misfit"] and curve[-1] < curve[0]
    assert {(w["start"], w["flat_iterations"]) for w in record["warm_start"]} == {("pinn", 10), ("pinn", 12)}
    assert all("target_data_misfit" in w and "target_amp_ssim" not in w for w in record["warm_start"])
    view = solver_view.summarise(
        SolveRecord.from_json(record), None, {"pinn-off-s0": {"metrics": {"data_misfit": 1e12}}}
    )
    assert view.ground_truth is False and view.networks[0].quality["data_misfit"] == 1e12
    assert view.match["pinn-off-s0"].iterations == 1  # the first checkpoint already explains the data better
    assert "reconstructs the measured data (no ground truth, so no scores) to a data misfit of" in solver_view.headline(
        view
    )
    assert "from each half of the scan alone to reconstructions that agree to" in solver_view.headline(view)
    methods = solver_view.tables(StudyReport(verdict="", items={}, solver=view))[0]
    assert methods[1][:9] == [
        "method",
        "amp SSIM",
        "phase SSIM",
        "phase PSNR dB",
        "data misfit",
        "amp half-scan FRC mean",
        "phase half-scan FRC mean",
        "amp half-scan 1/px",
        "phase half-scan 1/px",
    ]
    assert methods[2][0][1:4] == [solver_view.NO_TRUTH] * 3
    solver_off = next(row for row in methods[2] if row[0] == "solver off")
    assert solver_off[5:8] == [f"{half[k]:.4f}" for k in ("amp_half_frc_mean", "phase_half_frc_mean", "amp_half_frc")]
    assert next(row for row in methods[2] if row[0] == "solver jit")[5] == "n/a"


# ------------------------------------------------------------------------ the whole study
@pytest.mark.slow
@pytest.mark.long
def test_measured_data_from_cxi_to_a_report_with_the_arms_compared(tmp_path):
    """README, "Your own data": the smoke preset's simulated data exported to CXI without
    the object, then `snakemake all --config preset=smoke models=[pinn] data={...}`."""
    import yaml
    from mlflow.tracking import MlflowClient
    from test_pipeline import ROOT, _workdir, snakemake

    from ptycho.data.simulate import simulate
    from ptycho.study import workflow

    work = _workdir(tmp_path)
    smoke = workflow.resolve(yaml.safe_load((ROOT / "config.yaml").read_text()), {"preset": "smoke"})
    pair = simulate(workflow.simulation_config(smoke), progress=False)
    (work / "scans").mkdir()
    for split, ds in pair.items():
        measured_cxi(ds, work / "scans" / f"{split}.cxi")
    run = snakemake(
        work,
        "all",
        "--config",
        "preset=smoke",
        "models=[pinn]",
        "data={train: scans/train.cxi, test: scans/test.cxi}",
    )
    assert run.returncode == 0, run.stderr[-3000:]

    r = work / "results" / "smoke"
    assert not (r / "logs" / "simulate.log").exists()  # imported, not simulated
    assert sorted(p.name for p in (r / "logs" / "import_data").iterdir()) == ["test.log", "train.log"]
    assert sorted(p.name for p in (r / "data").iterdir() if p.is_file()) == ["test.h5", "train.h5"]
    assert read_attributes(r / "data" / "test.h5")["ground_truth"] is False
    # The probe refined by the solver first (data.probe: refine), both splits written with it.
    refined = json.loads((r / "solver" / "probe.json").read_text())
    assert refined["misfit_refined_probe"] <= refined["misfit_given_probe"] and refined["iterations"] == 30
    for split in ("train", "test"):
        provenance = json.loads(read_attributes(r / "data" / f"{split}.h5")["config"])["probe_refined"]
        assert provenance["source_digest"] == read_attributes(r / "data" / "imported" / "train.h5")["digest"]
    for arm in ("pinn-off-s0", "pinn-jit-s0"):
        scored = json.loads((r / "metrics" / f"{arm}.json").read_text())
        assert scored["ground_truth"] is False and {"data_misfit", "phase_half_frc_mean"} <= set(scored["mean"])

    report = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    quality = report["items"]["quality"]
    ev = quality["evidence"]
    pair_scores = ev["between_arms"]["pinn-s0-jit"]
    assert ev["ground_truth"] is False and set(ev["between_arms"]) == {"pinn-s0-jit"}
    assert (pair_scores["arm"], pair_scores["reference"]) == ("pinn-jit-s0", "pinn-off-s0")
    amp, phase = pair_scores["amp_ssim"], pair_scores["phase_ssim"]
    assert -1 <= amp <= 1 and -1 <= phase <= 1
    # One seed: the exact outcome is INCONCLUSIVE, in these words.
    assert quality["status"] == "INCONCLUSIVE"
    assert {m: c["outcome"] for m, c in ev["comparisons"]["pinn-jit"].items()} == dict.fromkeys(
        ("data_misfit", "amp_half_frc_mean", "phase_half_frc_mean"), "INCONCLUSIVE"
    )  # and the agreement shown, not judged: no second seed of off to set it against
    assert quality["summary"].startswith(
        "no ground truth (measured data): each arm against its reference arm of the same seed; PINN jit - off data "
        "misfit, (arm - reference) / reference: "
    )
    for label, value in (("amplitude", amp), ("phase", phase)):
        assert (
            f"PINN jit - off: {label} SSIM between their reconstructions {value:.4f}; one seed of the reference arm: no "
            "seed-to-seed yardstick to judge it by" in quality["summary"]
        )
    misfit = ev["comparisons"]["pinn-jit"]["data_misfit"]["difference"]
    sentence = (
        "Quality, no ground truth (measured data): each XLA mode against off of the same seed and precision (PINN; "
        f"margins 5% relative and 0.02 similarity): jit vs off: data misfit {misfit:+.1%}: INCONCLUSIVE, half-scan "
        "FRC mean amplitude "
    )
    assert sentence in run.stdout  # the run's last lines
    # The solver ran on the measured data, and its section says so where scores would be.
    solver = report["solver"]
    assert solver["ground_truth"] is False and set(solver["modes"]) == {"off", "jit"}
    assert all(set(m["final"]) == {"data_misfit"} for m in solver["modes"].values())
    assert {n["arm"] for n in solver["networks"]} == {"pinn-off-s0", "pinn-jit-s0"}
    md = (work / "reports" / "smoke" / "validation.md").read_text()
    assert "| solver off | no ground truth | no ground truth | no ground truth |" in md
    assert "Data: your own files, train scans/train.cxi, test scans/test.cxi (no ground truth" in md
    # Each arm's MLflow run carries its answer: the agreement with its reference and its misfit.
    client = MlflowClient(f"sqlite:///{work / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xla-ptycho")
    runs = client.search_runs([experiment.experiment_id], "tags.rule = 'train'", max_results=100)
    jit = next(x for x in runs if x.info.run_name == "pinn-jit-s0").data.metrics
    assert jit["amp_ssim_vs_reference"] == pytest.approx(amp) and jit["data_misfit"] > 0
    imports = client.search_runs([experiment.experiment_id], "tags.rule = 'import_data'", max_results=10)
    assert sorted(x.data.tags["split"] for x in imports) == ["test", "train"]
    (refine,) = client.search_runs([experiment.experiment_id], "tags.rule = 'refine_probe'", max_results=10)
    assert refine.data.metrics["probe_change"] == pytest.approx(refined["probe_change"])


@pytest.mark.slow
def test_the_real_siemens_star_runs_the_study_to_a_report(tmp_path):
    """Issue 44: measured X-ray data nobody here made (tike's Siemens star, in the
    repository) through the whole smoke study at 64 px (central detector pixels), with
    real MLflow: imported as a tike scan, trained on, the arms compared without a truth
    (3 min 21 s on 2 cores, 2026-11-28). And issue 45's looks through the real checkpoint
    (``max_seeds=2``): one seed leaves every seeded item INCONCLUSIVE, so the first look
    adds a second seed, the second stops at the cap, and the checks and the report judge
    both seeds at the second look's level with the looks' section (a look at one seed:
    the union bound of the spending, 0.05 (1/2)^3 at the first, the rest at the second)."""
    import shutil

    from mlflow.tracking import MlflowClient
    from test_pipeline import ROOT, _workdir, snakemake

    work = _workdir(tmp_path)
    star = "data/siemens-star/siemens-star-small.npz.bz2"
    (work / "data" / "siemens-star").mkdir(parents=True)
    shutil.copyfile(ROOT / star, work / star)
    run = snakemake(
        work, "all", "--config", "preset=smoke", "models=[pinn]", f"data={{train: {star}, test: {star}, n: 64}}",
        "max_seeds=2", "seeds_per_look=1",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    r = work / "results" / "smoke"
    attrs = read_attributes(r / "data" / "train.h5")
    provenance = json.loads(attrs["config"])
    assert attrs["ground_truth"] is False and provenance["format"] == "tike"
    # The star's probe estimate refined first: the counts explained better with the solver's probe.
    refined = json.loads((r / "solver" / "probe.json").read_text())
    assert provenance["probe_refined"]["probe_change"] == pytest.approx(refined["probe_change"])
    assert refined["misfit_refined_probe"] < refined["misfit_given_probe"]
    assert provenance["reduced"]["by"] == "crop" and (provenance["reduced"]["from"], provenance["reduced"]["to"]) == (
        128,
        64,
    )
    report = json.loads((work / "reports" / "smoke" / "validation.json").read_text())
    ev = report["items"]["quality"]["evidence"]
    assert ev["ground_truth"] is False and set(ev["between_arms"]) == {"pinn-s0-jit", "pinn-s1-jit"}
    arms = ("pinn-off-s0", "pinn-jit-s0", "pinn-off-s1", "pinn-jit-s1")
    assert all(0 < ev["per_arm"][a]["data_misfit"] for a in arms)
    # The looks: the second seed added by the first, both seeds judged at the second look's level.
    from ptycho.study.looks import MORE, Look

    first, second = (Look.from_json(json.loads((r / "looks" / f"{k}.json").read_text())) for k in (0, 1))
    assert first.seeds == {"pinn": (0,)} and first.why == MORE and first.next_seeds == {"pinn": (0, 1)}
    assert second.seeds == {"pinn": (0, 1)} and second.stop and not (r / "looks" / "2.json").exists()
    assert [look["index"] for look in report["looks"]] == [0, 1]
    from ptycho.study.results import StudyResults

    assert StudyResults.folder(r).look_records == (first, second)  # a notebook's reader of the folder sees them
    assert (
        json.loads((r / "checks" / "convergence.json").read_text())["evidence"]["comparisons"]["pinn-jit"]["alpha"]
        == pytest.approx(0.05 - 0.05 / 8)
        == second.plan.level(1)
    )
    page = (work / "reports" / "smoke" / "validation.md").read_text()
    assert "Seeds added until it decides" in page and "2 of 2 planned looks taken" in page
    assert report["solver"]["ground_truth"] is False
    assert "Data: your own files, train " + star in (work / "reports" / "smoke" / "validation.md").read_text()
    # Every reconstruction handed to ptychodus, the geometry said to be assumed (a tike scan has none).
    from ptycho.data.ptychodus import read_product

    for name in (*arms, "solver-off", "solver-jit"):
        product = read_product(r / "products" / name / "object-0.h5")
        assert (
            "geometry assumed" in product["attrs"]["comments"] and "MLflow parent run" in product["attrs"]["comments"]
        )
    assert all(ev["per_arm"][a]["phase_half_frc_mean"] > 0 for a in arms)
    client = MlflowClient(f"sqlite:///{work / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xla-ptycho")
    imports = client.search_runs([experiment.experiment_id], "tags.rule = 'import_data'", max_results=10)
    assert {x.data.params["data.kind"] for x in imports} == {"tike"}
    assert {x.data.params["data.n"] for x in imports} == {"64"}


def test_a_scan_of_fewer_patterns_than_one_group_is_one_line_at_parse_time(measured, tmp_path):
    """A one-pattern CXI file passed the parse-time checks and failed in the import job with
    a 20-line traceback ('need at least 4 positions to form groups of gridsize 2')."""
    import shutil

    import h5py
    import yaml

    from ptycho.errors import ConfigError
    from ptycho.study.data_files import check_data
    from ptycho.study.workflow import resolve

    one = tmp_path / "one.cxi"
    shutil.copy(measured["train"], one)
    with h5py.File(one, "a") as f:
        patterns = len(f["entry_1/data_1/data"])
        for name in ("entry_1/instrument_1/detector_1/data", "entry_1/sample_1/geometry_1/translation"):
            kept = f[name][:1]
            attrs = dict(f[name].attrs)
            del f[name]
            f[name] = kept
            f[name].attrs.update(attrs)
        del f["entry_1/data_1/data"]  # CXI's link to the detector's data, made again
        f["entry_1/data_1/data"] = h5py.SoftLink("/entry_1/instrument_1/detector_1/data")
    assert patterns >= 4
    base = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    cfg = resolve(base, {"models": ["pinn"], "data": {"train": str(one), "test": str(measured["test"])}})
    with pytest.raises(ConfigError) as err:
        check_data(cfg, {"pinn": 2}, tmp_path)
    assert str(err.value) == (
        f"config key 'data.train': {one} holds 1 pattern, fewer than the 4 of one group of simulation.gridsize 2; "
        "give a scan of at least 4 positions (or simulation.gridsize: 1)"
    )


def test_the_siemens_preset_plans_the_study_on_the_measured_star(tmp_path):
    """`--config preset=siemens` (issue 44, item 4): the star in the repository is both
    splits at 64 px (crop), the PINN alone (the baseline needs a true object), no
    simulated conditions; a dry run plans the import and every PINN arm."""
    import re
    import shutil

    from test_pipeline import ROOT, _workdir, snakemake

    work = _workdir(tmp_path)
    shutil.copytree(ROOT / "data" / "siemens-star", work / "data" / "siemens-star")
    plan = snakemake(work, "-n", "all", "--config", "preset=siemens")
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout + plan.stderr, re.M))
    assert jobs["import_data"] == "2" and "simulate" not in jobs and "condition" not in " ".join(jobs)
    assert jobs["refine_probe"] == "1"  # the star's probe estimate refined by the solver first
    assert "results/siemens/models/baseline" not in plan.stdout
    # the precision's suffix is the machine's: -bf16 where auto is bfloat16, none at float32 (AVX2)
    assert re.search(r"results/siemens/models/pinn-physics(-\w+)?-s2/model.json", plan.stdout), plan.stdout[-2000:]
