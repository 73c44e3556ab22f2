"""Wrong geometry is refused, not scored (#24 items 7, 8, 11).

A reconstruction or stitched file records the digest of the dataset it was made from,
and stitch/evaluate refuse another dataset; scan positions must put every patch inside
the object; zero-photon data is not a dataset; measured data without an object is
reconstruct-only; ``inspect`` prints what a file's attributes hold without obeying it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ptycho.data.dataset import Dataset, read_dataset, write_dataset
from ptycho.errors import DatasetError

h5py = pytest.importorskip("h5py")


def ptycho(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ptycho", *map(str, args)], capture_output=True, text=True, timeout=600
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def perfect_reconstruction(ds: Dataset) -> dict[str, np.ndarray]:
    """What 'ptycho infer' writes, with the true object's patches as the reconstruction."""
    from ptycho.physics.translate import centre_crop, extract_patches

    patches = np.concatenate(
        [extract_patches(ds.objects[m], ds.positions[ds.position_object == m], ds.n) for m in range(len(ds.objects))]
    )
    return {
        "patches": centre_crop(patches, ds.n // 2).astype(np.complex64),
        "positions": ds.positions,
        "position_object": ds.position_object,
        "seconds": np.float64(1.0),
        "compile_seconds": np.float64(0.0),
        "patterns": np.int64(len(patches)),
        "dataset_digest": np.array(ds.attrs.get("digest", "")),
    }


@pytest.fixture(scope="module")
def same_size(pair, small_cfg, tmp_path_factory) -> dict[str, Path]:
    """The test split and another one of exactly the same size (another seed)."""
    from ptycho.data.simulate import simulate

    d = tmp_path_factory.mktemp("same_size")
    write_dataset(d / "test.h5", pair["test"])
    write_dataset(d / "other.h5", simulate(replace(small_cfg, seed=2))["test"])
    ours = read_dataset(d / "test.h5")
    np.savez(d / "rec.npz", **perfect_reconstruction(ours))
    return {"test": d / "test.h5", "other": d / "other.h5", "rec": d / "rec.npz", "dir": d}


# ------------------------------------------------------------- item 7: digest guard
def test_stitch_refuses_a_reconstruction_of_another_dataset_of_the_same_size(same_size, tmp_path):
    test, other, rec = same_size["test"], same_size["other"], same_size["rec"]
    assert read_dataset(other).objects.shape == read_dataset(test).objects.shape  # nothing else tells them apart
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", other, "--out", tmp_path / "st.npz")
    line = one_error_line(r)
    assert f"{rec} was made from another dataset than {other}" in line
    assert f"re-run 'ptycho infer' with --dataset {other}" in line
    assert not (tmp_path / "st.npz").exists()
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", test, "--out", tmp_path / "st.npz")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with np.load(tmp_path / "st.npz") as z:
        assert str(z["dataset_digest"]) == read_dataset(test).attrs["digest"]  # recorded with the stitched file


def test_evaluate_refuses_a_stitched_file_of_another_dataset_of_the_same_size(same_size, tmp_path):
    """The issue's case: rc 0 and a plausible SSIM for a reconstruction of another object."""
    test, other = same_size["test"], same_size["other"]
    ds = read_dataset(test)
    st = tmp_path / "st.npz"  # what 'ptycho stitch' writes for the test split (a perfect reconstruction)
    np.savez(st, images=np.stack([ds.ground_truth(0)]), dataset_digest=np.array(ds.attrs["digest"]))
    r = ptycho("evaluate", "--stitched", st, "--dataset", other, "--out", tmp_path / "m.json")
    line = one_error_line(r)
    assert f"{st} was made from another dataset than {other}" in line
    assert "re-run 'ptycho infer' and 'ptycho stitch'" in line
    assert not (tmp_path / "m.json").exists()
    r = ptycho("evaluate", "--stitched", st, "--dataset", test, "--out", tmp_path / "m.json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads((tmp_path / "m.json").read_text())["mean"]["amp_ssim"] > 0.9  # the right one still scores


def test_a_stitched_file_written_before_the_digest_is_scored_with_a_warning(same_size, tmp_path):
    """Files from before the digest cannot be checked: accepted (see
    ptycho.data.provenance.check_made_from for why), but the user is told so."""
    test = same_size["test"]
    ds = read_dataset(test)
    st = tmp_path / "old.npz"
    np.savez(st, images=np.stack([ds.ground_truth(m) for m in range(len(ds.objects))]))
    r = ptycho("evaluate", "--stitched", st, "--dataset", test, "--out", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("ptycho evaluate: warning:"), r.stderr
    assert "records no dataset digest" in warnings[0] and "re-run 'ptycho infer' and 'ptycho stitch'" in warnings[0]


# ------------------------------------------------------- item 7: positions vs object
def _with_positions(ds: Dataset, positions: np.ndarray, path: Path) -> Path:
    """``ds`` with new positions written as a writer that skips validation would: the
    arrays, attributes and a correct digest, so only the geometry is wrong."""
    from ptycho.data.dataset import canonical_arrays, content_digest

    write_dataset(path, ds)
    arrays = canonical_arrays(replace(ds, positions=positions))
    with h5py.File(path, "a") as f:
        f["positions"][...] = arrays["positions"]
        offsets = positions[ds.groups].mean(axis=1, keepdims=True) - positions[ds.groups]
        f["group_offsets"][...] = offsets
        arrays["group_offsets"] = offsets
        f.attrs["digest"] = content_digest(arrays, ds.scale, ds.units)
    return path


def test_a_position_whose_patch_leaves_the_object_is_refused_naming_count_and_range(pair, tmp_path):
    ds = pair["test"]
    h, w = ds.objects.shape[1:]
    positions = ds.positions.copy()
    positions[5] = [w - ds.n // 2 + 1, 20.0]  # one pixel past the right edge
    path = _with_positions(ds, positions, tmp_path / "edge.h5")
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    message = str(err.value)
    assert message.startswith(f"{path}: 1 of {len(positions)} scan positions put a {ds.n}-px patch outside the object")
    assert f"x {w - ds.n // 2 + 1}..{w - ds.n // 2 + 1}" in message and f"x {ds.n // 2}..{w - ds.n // 2}" in message
    assert "\n" not in message
    r = ptycho("inspect", path)
    assert "1 of 64 scan positions" in one_error_line(r)
    with pytest.raises(DatasetError, match="outside the object"):
        write_dataset(
            tmp_path / "again.h5",
            replace(
                ds,
                positions=positions,
                group_offsets=np.asarray(positions[ds.groups].mean(axis=1, keepdims=True) - positions[ds.groups]),
            ),
        )


def test_positions_on_the_edge_of_the_object_are_valid(pair, tmp_path):
    """The forward model's own rule: an integer position may put its patch on the edge."""
    ds = pair["test"]
    h, w = ds.objects.shape[1:]
    positions = ds.positions.copy()
    positions[5] = [w - ds.n + ds.n // 2, ds.n // 2]
    read_dataset(_with_positions(ds, positions, tmp_path / "edge.h5"))


def test_stitching_positions_outside_the_object_is_refused_not_an_image_of_zeros(pair, tmp_path):
    ds = pair["test"]
    path = _with_positions(ds, ds.positions + 1000.0, tmp_path / "far.h5")
    rec = tmp_path / "rec.npz"
    arrays = perfect_reconstruction(ds)
    with h5py.File(path) as f:
        arrays.update(positions=ds.positions + 1000.0, dataset_digest=np.array(f.attrs["digest"]))
    np.savez(rec, **arrays)
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", path, "--out", tmp_path / "st.npz")
    assert f"{len(ds.positions)} of {len(ds.positions)} scan positions" in one_error_line(r)
    assert not (tmp_path / "st.npz").exists()


# ------------------------------------------------------------ item 11: zero photons
def test_zero_photon_data_is_not_a_dataset(pair, tmp_path):
    ds = pair["test"]
    with pytest.raises(DatasetError, match=r"diffraction holds no photons \(all 64 patterns are zero\)") as err:
        write_dataset(tmp_path / "dark.h5", replace(ds, diffraction=np.zeros_like(ds.diffraction)))
    assert "nphotons" in str(err.value) and "\n" not in str(err.value)
    one_dark = ds.diffraction.copy()
    one_dark[3] = 0  # a single empty pattern is a measurement (the beam missed), not an empty dataset
    write_dataset(tmp_path / "one.h5", replace(ds, diffraction=one_dark))


# ------------------------------------------------------ item 11: inspect's printing
def test_inspect_escapes_control_characters_of_attributes(pair, tmp_path):
    ds = pair["test"]
    evil = "disk\x1b[2J\nforged.h5: valid ptycho dataset\u202e"
    path = tmp_path / "evil.h5"
    write_dataset(path, replace(ds, attrs={**ds.attrs, "object_kind": evil}))
    r = ptycho("inspect", path)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "object_kind=disk\\x1b[2J\\nforged.h5: valid ptycho dataset\\u202e" in r.stdout
    assert not any(line.startswith("forged") for line in r.stdout.splitlines())
    data = json.loads(ptycho("inspect", "--json", path).stdout)  # JSON keeps the value, escaped by JSON
    assert data["attributes"]["object_kind"] == evil


def test_inspect_of_a_bad_config_attribute_is_one_line(pair, tmp_path):
    path = tmp_path / "cfg.h5"
    write_dataset(path, pair["test"])
    with h5py.File(path, "a") as f:
        f.attrs["config"] = "{not json"
    line = one_error_line(ptycho("inspect", path))
    assert line.startswith(f"ptycho inspect: error: {path}: attribute 'config' is not valid JSON")


# ------------------------------------------------- item 8: measured data, no object
@pytest.fixture(scope="module")
def measured(files, tmp_path_factory) -> Path:
    """The train split as an experiment records it (CXI without ptycho_1 and image_2), imported."""
    from ptycho.data.cxi import export_cxi

    d = tmp_path_factory.mktemp("measured")
    export_cxi(read_dataset(files["train"]), d / "m.cxi")
    with h5py.File(d / "m.cxi", "a") as f:
        del f["entry_1/ptycho_1"]
        del f["entry_1/image_2"]
    r = ptycho("import-cxi", d / "m.cxi", "--out", d / "m.h5", "--gridsize", 2)
    assert r.returncode == 0, r.stderr
    return d / "m.h5"


def test_inspect_says_measured_data_has_no_ground_truth(measured):
    r = ptycho("inspect", measured)
    assert r.returncode == 0, r.stderr
    assert "no ground truth (measured data): reconstruct-only" in r.stdout
    assert json.loads(ptycho("inspect", "--json", measured).stdout)["ground_truth"] is False


def test_measured_data_stitches_and_evaluates_to_a_misfit_but_baseline_training_refuses(measured, tmp_path):
    """Nothing to score against: evaluate writes the record that says so, with the data
    misfit (how well the reconstruction explains the patterns) and the half-scan FRC
    instead of scores."""
    ds = read_dataset(measured)
    rec = tmp_path / "rec.npz"
    arrays = perfect_reconstruction(ds)
    arrays["patches"] = np.ones_like(arrays["patches"])
    np.savez(rec, **arrays)
    st = tmp_path / "st.npz"
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", measured, "--out", st)
    assert r.returncode == 0, r.stderr
    r = ptycho("evaluate", "--stitched", st, "--dataset", measured, "--out", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "m.json").read_text())
    assert record["ground_truth"] is False and set(record["mean"]) == {
        "data_misfit",
        "amp_half_frc",
        "phase_half_frc",
        "amp_half_frc_mean",
        "phase_half_frc_mean",
    }
    assert record["mean"]["data_misfit"] > 0.5  # a unit object explains the patterns worse than noise does
    r = ptycho("train", "--dataset", measured, "--out", tmp_path / "model", "--kind", "baseline")
    assert "has no ground truth" in one_error_line(r)
    assert not (tmp_path / "model").exists()


@pytest.mark.slow
def test_a_pinn_trains_on_measured_data_and_infer_records_the_dataset(measured, same_size, tmp_path):
    """The whole reconstruct-only chain through the CLI, and infer's digest end to end:
    its reconstruction stitches with its own dataset and is refused with another."""
    pytest.importorskip("tensorflow")
    model = tmp_path / "model"
    r = ptycho(
        "--threads", 1, "train", "--quiet", "--dataset", measured, "--out", model,
        "--kind", "pinn", "--filters", 2, "--epochs", 1, "--batch-size", 16, "--fail-on-collapse", "false",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rec = tmp_path / "rec.npz"
    r = ptycho("infer", "--model", model, "--dataset", measured, "--out", rec)
    assert r.returncode == 0, r.stderr
    with np.load(rec) as z:
        assert str(z["dataset_digest"]) == read_dataset(measured).attrs["digest"]
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", measured, "--out", tmp_path / "st.npz")
    assert r.returncode == 0, r.stderr
    r = ptycho("stitch", "--reconstruction", rec, "--dataset", same_size["other"], "--out", tmp_path / "x.npz")
    assert "was made from another dataset than" in one_error_line(r)
