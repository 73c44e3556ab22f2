"""Simulated datasets and the HDF5 / NPZ file formats: physics of the stored counts,
reproducibility, round trips, validation of malformed files, atomic writes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ptycho.config import SimulationConfig, from_dict
from ptycho.data.dataset import ARRAYS, SCHEMA_VERSION, Dataset, content_digest, read_dataset, write_dataset
from ptycho.data.npz import export_npz, import_npz
from ptycho.data.simulate import simulate, simulate_split
from ptycho.errors import DatasetError, PtychoError
from ptycho.physics.forward import expected_counts
from ptycho.physics.translate import extract_patches


def _patches_by_hand(ds: Dataset) -> np.ndarray:
    """Object patches sliced directly at the stored positions (no ptycho code)."""
    n = ds.n
    out = []
    for (x, y), m in zip(ds.positions, ds.position_object, strict=True):
        x, y = int(x), int(y)
        assert (x, y) == tuple(ds.positions[len(out)])  # simulated positions are integers
        out.append(ds.objects[m, y - n // 2 : y + n // 2, x - n // 2 : x + n // 2])
    return np.asarray(out).astype(np.complex128)


def _intensity_by_hand(ds: Dataset) -> np.ndarray:
    """``(s |fftshift(fft2(P O))| / N)^2`` with numpy only."""
    n = ds.n
    psi = ds.probe.astype(np.complex128)[None] * _patches_by_hand(ds)
    return (ds.scale * np.abs(np.fft.fftshift(np.fft.fft2(psi), axes=(-2, -1))) / n) ** 2


# ------------------------------------------------------------ physics of files
def test_noise_free_counts_equal_independent_fft_at_stored_positions(files):
    ds = read_dataset(files["train"])
    by_hand = _intensity_by_hand(ds)
    # the library's pipeline, as simulate() runs it: extract_patches then expected_counts
    patches = np.concatenate(
        [extract_patches(ds.objects[m], ds.positions[ds.position_object == m], ds.n) for m in range(len(ds.objects))]
    )
    model = expected_counts(ds.probe.astype(np.complex128), patches.astype(np.complex128), ds.scale)
    np.testing.assert_allclose(model, by_hand, rtol=1e-9, atol=1e-9 * by_hand.max())
    # Parseval per pattern on the stored data: total expected = s^2 sum |P O|^2
    energy = ds.scale**2 * np.sum(np.abs(ds.probe[None] * _patches_by_hand(ds)) ** 2, axis=(1, 2))
    np.testing.assert_allclose(by_hand.sum(axis=(1, 2)), energy, rtol=1e-9)
    # the stored counts were drawn around it: each pattern's total is Poisson(sum lam)
    totals = ds.diffraction.sum(axis=(1, 2), dtype=np.float64)
    lam = by_hand.sum(axis=(1, 2))
    assert np.abs((totals - lam) / np.sqrt(lam)).max() < 5.0


def test_stored_counts_are_poisson_around_the_expected_intensity(files):
    ds = read_dataset(files["train"])
    lam = _intensity_by_hand(ds)
    counts = ds.diffraction.astype(np.float64)
    assert ds.diffraction.dtype == np.uint32
    # per pixel where lam is large: residuals (n - lam)/sqrt(lam) have mean 0 and std 1.
    # A patch taken one pixel off, or with x and y swapped, gives |z| in the hundreds.
    bright = lam > 100
    z = (counts[bright] - lam[bright]) / np.sqrt(lam[bright])
    assert bright.sum() > 1000
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert z.std() == pytest.approx(1.0, abs=0.05)
    # dark pixels hold (almost) no photons
    assert counts[lam < 1e-3].sum() <= 0.01 * (lam < 1e-3).sum()


def test_mean_total_counts_match_nphotons_within_3_sigma(pair, small_cfg):
    train = pair["train"]
    p = train.diffraction.shape[0]
    totals = train.diffraction.sum(axis=(1, 2), dtype=np.float64)
    sigma = np.sqrt(small_cfg.nphotons / p)  # Poisson: var(sum of totals) = P * nphotons
    assert abs(totals.mean() - small_cfg.nphotons) < 3 * sigma
    # the train split's s makes the mean *expected* total exactly nphotons
    lam = expected_counts(train.probe.astype(np.complex128), _patches_by_hand(train), train.scale).sum(axis=(1, 2))
    assert lam.mean() == pytest.approx(small_cfg.nphotons, rel=1e-9)


def test_test_split_reuses_train_scale(pair, small_cfg):
    assert pair["test"].scale == pair["train"].scale
    alone = simulate_split(small_cfg, "test")  # its own s would differ
    assert alone.scale != pair["train"].scale
    assert pair["test"].attrs["split"] == "test" and pair["test"].attrs["stride"] == small_cfg.stride_test


def test_train_and_test_objects_are_independent_draws(pair):
    a, b = pair["train"].objects[0], pair["test"].objects[0]
    assert np.abs(np.abs(a) - np.abs(b)).mean() > 0.05
    assert np.corrcoef(np.abs(a).ravel(), np.abs(b).ravel())[0, 1] < 0.9
    assert np.abs(np.angle(a) - np.angle(b)).mean() > 0.1


def test_simulated_offsets_match_stored_positions(pair):
    ds = pair["train"]
    members = ds.positions[ds.groups]
    np.testing.assert_array_equal(ds.group_offsets, members.mean(axis=1, keepdims=True) - members)
    np.testing.assert_array_equal(
        ds.group_offsets, np.broadcast_to([[2, 2], [-2, 2], [2, -2], [-2, -2]], ds.group_offsets.shape)
    )


def test_same_seed_gives_identical_digest_other_seed_differs(small_cfg, pair, tmp_path):
    again = simulate(small_cfg)
    for split in ("train", "test"):
        d1 = write_dataset(tmp_path / f"a_{split}.h5", pair[split])
        d2 = write_dataset(tmp_path / f"b_{split}.h5", again[split])
        assert d1 == d2
        assert (tmp_path / f"a_{split}.h5").read_bytes() == (tmp_path / f"b_{split}.h5").read_bytes()
    other = simulate_split(replace(small_cfg, seed=2), "train")
    assert write_dataset(tmp_path / "c.h5", other) != write_dataset(tmp_path / "d.h5", pair["train"])


def test_multiple_objects_are_stacked_with_position_object_and_regions(small_cfg):
    ds = simulate_split(replace(small_cfg, n_objects_train=2), "train")
    p = ds.diffraction.shape[0] // 2
    assert ds.objects.shape == (2, 48, 48)
    np.testing.assert_array_equal(ds.position_object, np.repeat([0, 1], p))
    np.testing.assert_array_equal(ds.positions[:p], ds.positions[p:])
    assert np.all(ds.groups[ds.groups.shape[0] // 2 :] >= p)
    assert not np.array_equal(ds.objects[0], ds.objects[1])
    np.testing.assert_array_equal(ds.scan_region[0], ds.scan_region[1])


def test_scan_region_is_the_illuminated_bounding_box_and_ground_truth_crop(pair):
    from ptycho.data.dataset import illuminated_radius

    ds = pair["train"]
    # positions 8..40 at n=16; probe radius 11*16/64 = 2.75 px, so 3 px are lit each side
    assert int(np.ceil(illuminated_radius(ds.probe))) == 3
    np.testing.assert_array_equal(ds.scan_region[0], [5, 5, 44, 44])
    np.testing.assert_array_equal(ds.ground_truth(0), ds.objects[0, 5:44, 5:44])


def test_scan_region_is_clipped_to_the_kept_centre_for_a_wide_probe():
    from ptycho.data.dataset import scan_region

    region = scan_region(np.array([[8.0, 10.0], [40.0, 30.0]]), np.ones((16, 16)))
    # the models keep the central 8 px: position-4 .. position+3
    np.testing.assert_array_equal(region, [4, 6, 44, 34])


# ------------------------------------------------------------------ round trips
def test_write_read_roundtrip_preserves_arrays_attrs_and_digest(pair, small_cfg, tmp_path):
    ds = pair["train"]
    path = tmp_path / "sub" / "train.h5"
    digest = write_dataset(path, ds)
    back = read_dataset(path)
    for name in ARRAYS:
        a, b = getattr(ds, name), getattr(back, name)
        np.testing.assert_array_equal(b, a, err_msg=name)
        assert b.dtype == a.dtype, name
    assert back.scale == ds.scale and back.units == "counts"
    for key, value in ds.attrs.items():
        assert back.attrs[key] == value, key
    assert back.attrs["digest"] == digest == content_digest(back.arrays(), back.scale, back.units)
    assert back.attrs["schema_version"] == SCHEMA_VERSION and back.attrs["format"] == "ptycho-dataset"
    assert back.attrs["n"] == 16 and back.attrs["gridsize"] == 2
    assert from_dict(SimulationConfig, json.loads(back.attrs["config"])) == small_cfg
    assert json.loads(back.attrs["config"])["nphotons"] == small_cfg.nphotons


def test_rewriting_a_read_dataset_keeps_its_digest(files, tmp_path):
    back = read_dataset(files["train"])
    assert write_dataset(tmp_path / "again.h5", back) == back.attrs["digest"]


def test_sqrt_counts_units_roundtrip_and_views(files, pair):
    sq = read_dataset(files["sqrt"])
    counts = pair["train"].diffraction
    assert sq.units == "sqrt_counts" and sq.diffraction.dtype == np.float32
    np.testing.assert_array_equal(sq.amplitude, np.sqrt(counts.astype(np.float32)))
    np.testing.assert_allclose(sq.counts, counts, rtol=1e-6)
    np.testing.assert_array_equal(pair["train"].counts, counts.astype(np.float32))


def test_digest_covers_scale_and_units(pair):
    ds = pair["train"]
    d0 = content_digest(ds.arrays(), ds.scale, ds.units)
    assert content_digest(ds.arrays(), ds.scale * (1 + 1e-12), ds.units) != d0
    assert content_digest(ds.arrays(), ds.scale, "sqrt_counts") != d0


# ------------------------------------------------------------- malformed files
def test_malformed_file_raises_one_line_dataset_error_naming_the_file(corrupted):
    path, fragment = corrupted
    with pytest.raises(DatasetError) as info:
        read_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert fragment in message


def test_missing_file_raises_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        read_dataset(tmp_path / "nope.h5")


def test_digest_check_can_be_skipped_but_other_checks_cannot(files, tmp_path):
    import h5py

    path = tmp_path / "edited.h5"
    write_dataset(path, read_dataset(files["train"]))
    with h5py.File(path, "a") as f:
        f["diffraction"][0, 0, 0] += 1
    assert read_dataset(path, check_digest=False).diffraction[0, 0, 0] >= 1
    with pytest.raises(DatasetError, match="digest mismatch"):
        read_dataset(path)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda ds: replace(ds, objects=ds.objects * 1.5), "amplitude"),
        (lambda ds: replace(ds, positions=ds.positions[:-1]), "positions has shape"),
        (lambda ds: replace(ds, group_offsets=-ds.group_offsets), "centroid - position"),
        (lambda ds: replace(ds, scale=-1.0), "scale"),
        (lambda ds: replace(ds, units="photons"), "units"),
    ],
    ids=["amplitude_above_1", "positions_short", "offset_sign_flipped", "negative_scale", "unknown_units"],
)
def test_write_refuses_invalid_dataset_and_writes_nothing(pair, tmp_path, change, fragment):
    path = tmp_path / "bad.h5"
    with pytest.raises(DatasetError, match=fragment):
        write_dataset(path, change(pair["train"]))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- atomic writes
def _fail_after_first_create_dataset(monkeypatch):
    import h5py

    original = h5py.Group.create_dataset
    calls = []

    def flaky(self, *args, **kwargs):
        calls.append(args[0] if args else kwargs.get("name"))
        if len(calls) > 1:
            raise OSError("simulated disk failure")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "create_dataset", flaky)
    return calls


def test_failed_write_leaves_no_target_and_no_temp_file(pair, tmp_path, monkeypatch):
    calls = _fail_after_first_create_dataset(monkeypatch)
    path = tmp_path / "train.h5"
    with pytest.raises(
        PtychoError, match=r"cannot write .*train.h5 \(simulated disk failure\); choose a writable path"
    ):
        write_dataset(path, pair["train"])
    assert len(calls) == 2
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_the_previous_file_intact(pair, tmp_path, monkeypatch):
    path = tmp_path / "train.h5"
    digest = write_dataset(path, pair["train"])
    _fail_after_first_create_dataset(monkeypatch)
    with pytest.raises(PtychoError, match="cannot write"):  # the OSError, as one line
        write_dataset(path, pair["test"])
    monkeypatch.undo()
    assert read_dataset(path).attrs["digest"] == digest
    assert [p.name for p in tmp_path.iterdir()] == ["train.h5"]


# -------------------------------------------------------------------------- NPZ
def test_npz_export_import_roundtrip(files, tmp_path):
    ds = read_dataset(files["train"])
    npz = tmp_path / "out" / "data.npz"
    export_npz(ds, npz)
    back = import_npz(npz, gridsize=2)
    np.testing.assert_array_equal(back.diffraction, ds.amplitude)
    assert back.units == "sqrt_counts"
    np.testing.assert_array_equal(back.probe, ds.probe)
    np.testing.assert_array_equal(back.objects, ds.objects)
    np.testing.assert_array_equal(back.positions, ds.positions)
    np.testing.assert_array_equal(back.scan_region, ds.scan_region)
    # one nearest-neighbour group per position, containing it, offsets = centroid - position
    assert back.groups.shape == (81, 4)
    assert all(k in g for k, g in enumerate(back.groups))
    members = back.positions[back.groups]
    np.testing.assert_array_equal(back.group_offsets, members.mean(axis=1, keepdims=True) - members)
    # The NPZ carries no photon scale: s is re-estimated by least squares,
    # s_hat^2 = sum(counts) / sum |P O|^2 = s^2 * sum(counts) / sum(expected).
    # With Poisson counts the estimate is off by 0.5 (sum n - sum lam) / sum lam
    # (sigma 0.5 / sqrt(81e6) = 5.6e-5 here), so it is checked against that exact
    # prediction (1e-6: float32 amplitudes) and loosely against s (5 sigma).
    lam = expected_counts(ds.probe.astype(np.complex128), _patches_by_hand(ds), ds.scale)
    total_n = ds.diffraction.sum(dtype=np.float64)
    predicted = ds.scale * np.sqrt(total_n / lam.sum())
    assert back.scale == pytest.approx(predicted, rel=1e-6)
    assert back.scale == pytest.approx(ds.scale, rel=5 * 0.5 / np.sqrt(lam.sum()))
    # and the imported dataset is a valid file
    out = tmp_path / "imported.h5"
    write_dataset(out, back)
    assert read_dataset(out).attrs["object_kind"] == "imported"


def test_npz_import_recovers_scale_from_noise_free_amplitudes(files, tmp_path):
    ds = read_dataset(files["train"])
    lam = expected_counts(ds.probe.astype(np.complex128), _patches_by_hand(ds), ds.scale)
    exact = replace(ds, diffraction=np.sqrt(lam).astype(np.float32), units="sqrt_counts")
    export_npz(exact, tmp_path / "exact.npz")
    back = import_npz(tmp_path / "exact.npz")
    assert back.scale == pytest.approx(ds.scale, rel=1e-6)
    assert back.groups.shape == (81, 1)


def test_npz_import_refuses_pickled_arrays(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(
        path,
        diff3d=np.zeros((1, 16, 16), np.float32),
        probeGuess=np.ones((16, 16), np.complex64),
        objectGuess=np.ones((32, 32), np.complex64),
        xcoords=np.array([16.0]),
        ycoords=np.array([16.0]),
        meta=np.array([{"a": 1}], dtype=object),
    )
    with pytest.raises(DatasetError) as info:
        import_npz(path)
    assert str(info.value) == (
        f"{path}: contains pickled (object) arrays, which are refused; re-save with plain arrays"
    )


@pytest.mark.parametrize(
    "drop, fragment",
    [
        ("diff3d", "no diffraction array"),
        ("probeGuess", "missing array 'probeGuess'"),
        ("ycoords", "missing array 'ycoords'"),
    ],
)
def test_npz_import_missing_key_is_one_line_error(files, tmp_path, drop, fragment):
    export_npz(read_dataset(files["train"]), tmp_path / "full.npz")
    with np.load(tmp_path / "full.npz") as z:
        data = {k: z[k] for k in z.files if k != drop}
    np.savez(tmp_path / "partial.npz", **data)
    with pytest.raises(DatasetError, match=fragment) as info:
        import_npz(tmp_path / "partial.npz")
    assert "\n" not in str(info.value) and str(tmp_path / "partial.npz") in str(info.value)


def test_npz_import_refuses_negative_amplitudes_and_truncated_files(files, tmp_path):
    export_npz(read_dataset(files["train"]), tmp_path / "full.npz")
    with np.load(tmp_path / "full.npz") as z:
        data = {k: z[k] for k in z.files}
    data["diff3d"][0, 0, 0] = -1
    np.savez(tmp_path / "neg.npz", **data)
    with pytest.raises(DatasetError, match="negative"):
        import_npz(tmp_path / "neg.npz")
    raw = (tmp_path / "full.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DatasetError, match="not a readable NPZ"):
        import_npz(tmp_path / "cut.npz")


def test_npz_export_refuses_several_objects(small_cfg, tmp_path):
    ds = simulate_split(replace(small_cfg, n_objects_train=2), "train")
    with pytest.raises(DatasetError, match="holds one object"):
        export_npz(ds, tmp_path / "two.npz")
    assert list(tmp_path.iterdir()) == []


def test_float_group_indices_are_a_one_line_dtype_error(pair, tmp_path):
    import h5py

    path = tmp_path / "bad.h5"
    write_dataset(path, pair["train"])
    with h5py.File(path, "r+") as f:
        groups = f["groups"][()].astype(np.float64)
        del f["groups"]
        f["groups"] = groups
    with pytest.raises(DatasetError, match=r"groups has dtype float64; expected int64"):
        read_dataset(path, check_digest=False)


def test_npz_import_of_an_object_brighter_than_one_keeps_the_forward_model_consistent(pair, tmp_path):
    from ptycho.data.npz import export_npz, import_npz
    from ptycho.physics.forward import diffraction_amplitude
    from ptycho.physics.translate import extract_patches

    ds = pair["train"]
    export_npz(ds, tmp_path / "a.npz")
    with np.load(tmp_path / "a.npz") as z:
        data = dict(z)
    data["objectGuess"] = data["objectGuess"] * 2.0  # amplitude up to 2: gets normalised on import
    np.savez(tmp_path / "b.npz", **data)
    imported = import_npz(tmp_path / "b.npz")
    assert np.abs(imported.objects).max() <= 1.0 + 1e-6
    patches = extract_patches(imported.objects[0].astype(complex), imported.positions, imported.n)
    model = imported.scale * diffraction_amplitude(imported.probe.astype(complex)[None] * patches)
    measured = imported.amplitude.astype(float)
    assert np.sum(model**2) == pytest.approx(np.sum(measured**2), rel=1e-5)
