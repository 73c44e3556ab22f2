"""CXI 1.6 export and import: the layout, its units and axes, exact round trips, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ptycho.data.cxi import EV_J, HC_EV_M, CxiGeometry, export_cxi, import_cxi
from ptycho.data.dataset import read_dataset, write_dataset
from ptycho.errors import ConfigError, DatasetError, PtychoError

h5py = pytest.importorskip("h5py")  # imported here, not at module level (the project's import rule)
GEOMETRY = CxiGeometry(energy_ev=6200.0, detector_distance_m=3.0, detector_pixel_m=172e-6)


@pytest.mark.parametrize("kind", ["train", "sqrt"])  # photon counts, and sqrt-counts (float amplitudes)
def test_export_then_import_gives_the_same_dataset_bit_for_bit(files, tmp_path, kind):
    ds = read_dataset(files[kind])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    back = import_cxi(tmp_path / "d.cxi")
    assert write_dataset(tmp_path / "back.h5", back) == ds.attrs["digest"]  # the content digest covers every array
    assert back.diffraction.dtype == ds.diffraction.dtype and np.array_equal(back.diffraction, ds.diffraction)
    assert back.units == ds.units and back.scale == ds.scale and back.attrs == ds.attrs


def test_the_layout_is_cxi_1_6_in_metres_and_joules(files, tmp_path):
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    n = ds.probe.shape[0]
    wavelength = HC_EV_M / 6200.0  # 0.2 nm
    dx = wavelength * 3.0 / (n * 172e-6)
    assert GEOMETRY.object_pixel_m(n) == pytest.approx(dx, rel=1e-15)
    with h5py.File(tmp_path / "d.cxi") as f:
        assert f["cxi_version"][()] == 160 and f["cxi_version"].dtype.kind == "i"
        assert f["entry_1"].attrs["NX_class"] == "NXentry"
        det = f["entry_1/instrument_1/detector_1"]
        assert det["data"].dtype == np.uint32 and np.array_equal(det["data"][()], ds.diffraction)  # counts = intensity
        assert det["distance"][()] == 3.0 and det["x_pixel_size"][()] == det["y_pixel_size"][()] == 172e-6
        assert {det[k].attrs["units"] for k in ("distance", "x_pixel_size", "y_pixel_size")} == {"m"}
        source = f["entry_1/instrument_1/source_1"]
        assert source["energy"][()] == pytest.approx(6200.0 * 1.602176634e-19, rel=1e-15)
        assert source["energy"].attrs["units"] == "J"
        beam = f["entry_1/instrument_1/beam_1"]
        assert beam["incident_energy"][()] == source["energy"][()]
        assert beam["incident_wavelength"][()] == pytest.approx(2.0e-10, rel=1e-6)  # 6.2 keV: 0.2 nm
        assert beam["incident_wavelength"].attrs["units"] == "m"
        for link in ("probe", "illumination"):  # NXcxi_ptycho's name and ptychodus's
            assert f.get(f"entry_1/instrument_1/source_1/{link}", getlink=True).path == "/entry_1/image_1/data"
        probe = f["entry_1/image_1"]
        assert probe["data"].dtype == np.complex64 and np.array_equal(probe["data"][()], ds.probe)
        assert probe["data_type"][()] == b"amplitude" and probe["data_space"][()] == b"real"  # datasets, as CXI says
        np.testing.assert_allclose(probe["image_size"][()], [n * dx, n * dx, 0.0], rtol=1e-15)
        image = f["entry_1/image_2"]  # the ground truth (ptychodus: the object)
        assert np.array_equal(image["data"][()], ds.objects) and image["data_type"][()] == b"amplitude"
        np.testing.assert_allclose(image["image_size"][()], [ds.objects.shape[-1] * dx] * 2 + [0.0], rtol=1e-15)
        translation = f["entry_1/sample_1/geometry_1/translation"]
        assert translation.shape == (len(ds.positions), 3) and translation.attrs["units"] == "m"
        assert not translation[:, 2].any()
        # x is the column, y the row, of each probe centre on the object (docs/physics.md section 2), times dx.
        np.testing.assert_allclose(translation[:, 0], ds.positions[:, 0] * dx, rtol=1e-15)
        np.testing.assert_allclose(translation[:, 1], ds.positions[:, 1] * dx, rtol=1e-15)
        for name, target in (
            ("entry_1/data_1/data", "/entry_1/instrument_1/detector_1/data"),
            ("entry_1/data_1/translation", "/entry_1/sample_1/geometry_1/translation"),
            ("entry_1/instrument_1/detector_1/translation", "/entry_1/sample_1/geometry_1/translation"),
        ):
            assert f.get(name, getlink=True).path == target and f[name].shape == f[target].shape  # resolves
        assert f["entry_1/data_1"].attrs["signal"] == "data"
        assert f["entry_1/ptycho_1"].attrs["NX_class"] == "NXnote"  # the project's extras, marked as not CXI


def test_translation_x_is_the_column_and_y_the_row_of_the_object(files, tmp_path):
    """From the CXI fields alone: cropping the object at column x/dx, row y/dx and
    propagating reproduces each measured pattern; the transposed reading does not."""
    ds = read_dataset(files["train"])
    assert np.any(ds.positions[:, 0] != ds.positions[:, 1])  # otherwise the test could not tell
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi") as f:
        measured = f["entry_1/data_1/data"][()].astype(np.float64)
        probe = f["entry_1/image_1/data"][()]
        obj = f["entry_1/image_2/data"][0]
        pixels = f["entry_1/sample_1/geometry_1/translation"][:, :2] / GEOMETRY.object_pixel_m(probe.shape[0])
    n = probe.shape[0]

    def misfit(columns: np.ndarray, rows: np.ndarray) -> tuple[float, float]:
        patches = np.stack(
            [obj[r - n // 2 : r + n // 2, c - n // 2 : c + n // 2] for c, r in zip(columns, rows, strict=True)]
        )
        model = np.fft.fftshift(np.abs(np.fft.fft2(probe * patches, norm="ortho")) ** 2, axes=(-2, -1))
        scale = np.sum(model * measured) / np.sum(model**2)  # s^2 of the forward model
        return float(np.linalg.norm(measured - scale * model) / np.linalg.norm(measured)), float(scale)

    x, y = np.rint(pixels).astype(int).T
    right, scale = misfit(x, y)
    transposed, _ = misfit(y, x)
    assert right < 0.02 < 0.2 < transposed  # Poisson noise only, vs the wrong patches
    assert scale == pytest.approx(ds.scale**2, rel=0.01)


def test_a_sqrt_count_dataset_is_stored_as_intensities(files, tmp_path):
    ds = read_dataset(files["sqrt"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi") as f:
        stored = f["entry_1/instrument_1/detector_1/data"][()]
    assert stored.dtype == np.float64
    np.testing.assert_array_equal(stored, ds.diffraction.astype(np.float64) ** 2)
    np.testing.assert_array_equal(np.sqrt(stored).astype(np.float32), ds.diffraction)  # exactly invertible


def test_a_cxi_file_from_elsewhere_imports_from_its_cxi_fields_alone(files, tmp_path):
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "ours.cxi", GEOMETRY)
    foreign = tmp_path / "foreign.cxi"
    shutil.copy(tmp_path / "ours.cxi", foreign)
    with h5py.File(foreign, "a") as f:
        del f["entry_1/ptycho_1"]  # only what any CXI writer would put there
    got = import_cxi(foreign, gridsize=2, split="test")
    np.testing.assert_allclose(got.positions, ds.positions, atol=1e-9)  # translation / dx, in pixels again
    np.testing.assert_array_equal(got.amplitude, ds.amplitude)
    assert got.units == "sqrt_counts" and got.attrs["split"] == "test" and got.groups.shape[1] == 4
    assert got.scale == pytest.approx(ds.scale, rel=0.01)  # estimated from object and probe
    write_dataset(tmp_path / "foreign.h5", got)
    read_dataset(tmp_path / "foreign.h5")  # a valid dataset: every check of the format passes


def test_a_minimal_foreign_layout_with_rectangular_pixels_imports(files, tmp_path):
    """data_1 only (no detector_1/data), the probe at source_1/probe with ptychodus's
    leading mode axes, and different x and y pixel sizes: each axis gets its own dx."""
    ds = read_dataset(files["train"])
    n = ds.probe.shape[0]
    wavelength = HC_EV_M / 8000.0
    dx, dy = wavelength * 2.0 / (n * 50e-6), wavelength * 2.0 / (n * 100e-6)
    translation = np.stack([ds.positions[:, 0] * dx, ds.positions[:, 1] * dy, np.zeros(len(ds.positions))], axis=1)
    with h5py.File(tmp_path / "min.cxi", "w") as f:
        f["cxi_version"] = 150
        f["entry_1/data_1/data"] = ds.diffraction.astype(np.float32)
        f["entry_1/data_1/translation"] = translation
        f["entry_1/instrument_1/source_1/probe"] = ds.probe[None, None]
        f["entry_1/instrument_1/source_1/energy"] = 8000.0 * EV_J
        f["entry_1/instrument_1/detector_1/distance"] = 2.0
        f["entry_1/instrument_1/detector_1/x_pixel_size"] = 50e-6
        f["entry_1/instrument_1/detector_1/y_pixel_size"] = 100e-6
        f["entry_1/image_2/data"] = ds.objects[0]
    got = import_cxi(tmp_path / "min.cxi")
    np.testing.assert_allclose(got.positions, ds.positions, atol=1e-9)
    np.testing.assert_array_equal(got.probe, ds.probe)


def test_geometry_values_are_checked_with_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^config key 'cxi.detector_pixel_m' = 0 must be a positive finite number"):
        CxiGeometry(detector_pixel_m=0)
    for bad in (float("nan"), float("inf"), -8000.0, True, "8000"):
        with pytest.raises(ConfigError, match=r"cxi\.energy_ev.*must be a positive finite number") as err:
            CxiGeometry(energy_ev=bad)
        assert "\n" not in str(err.value)
    g = CxiGeometry()
    assert g.energy_j == 8000.0 * EV_J and g.wavelength_m * g.energy_j == pytest.approx(HC_EV_M * EV_J)
    assert g.object_pixel_m(64) == pytest.approx(64.6e-9, rel=1e-3)  # what config.yaml's comment says


def test_files_that_are_not_cxi_are_refused_with_one_line(files, tmp_path):
    def refused(path, match):
        with pytest.raises(DatasetError, match=match) as err:
            import_cxi(path)
        assert "\n" not in str(err.value)

    refused(files["train"], "not a CXI file")  # our own HDF5 dataset format, not CXI
    text = tmp_path / "t.cxi"
    text.write_text("hello")
    refused(text, "not an HDF5 file")
    refused(tmp_path / "absent.cxi", "no such file")
    export_cxi(read_dataset(files["train"]), tmp_path / "d.cxi", GEOMETRY)
    shutil.copy(tmp_path / "d.cxi", tmp_path / "e.cxi")
    with h5py.File(tmp_path / "d.cxi", "a") as f:
        for name in ("sample_1/geometry_1/translation", "data_1/translation", "instrument_1/detector_1/translation"):
            del f[f"entry_1/{name}"]
    refused(tmp_path / "d.cxi", r"no scan translation in this CXI file \(looked for entry_1/sample_1/geometry_1/")
    with h5py.File(tmp_path / "e.cxi", "a") as f:  # a translation of the wrong shape
        data = f["entry_1/sample_1/geometry_1/translation"][:-1]
        del f["entry_1/sample_1/geometry_1/translation"]
        f["entry_1/sample_1/geometry_1/translation"] = data
    refused(tmp_path / "e.cxi", r"translation \(\d+, 3\) do not fit \(P, N, N\), \(N, N\), \(P, 3\)")


def test_a_cxi_file_whose_arrays_were_changed_after_export_is_refused(files, tmp_path):
    export_cxi(read_dataset(files["train"]), tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi", "a") as f:
        f["entry_1/instrument_1/detector_1/data"][0, 0, 0] += 1
    with pytest.raises(DatasetError, match="differ from the dataset that was exported"):
        import_cxi(tmp_path / "d.cxi")
    with h5py.File(tmp_path / "d.cxi", "a") as f:
        del f["entry_1/ptycho_1"]
    import_cxi(tmp_path / "d.cxi")  # as the message says: without the extras it is a foreign CXI file


def test_foreign_geometry_values_are_checked(files, tmp_path):
    export_cxi(read_dataset(files["train"]), tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi", "a") as f:
        del f["entry_1/ptycho_1"]
        f["entry_1/instrument_1/detector_1/distance"][()] = 0.0
    with pytest.raises(DatasetError, match="'entry_1/instrument_1/detector_1/distance' = 0.0 must be one positive"):
        import_cxi(tmp_path / "d.cxi")


def test_a_failed_export_leaves_no_file_and_keeps_an_earlier_one(files, tmp_path, monkeypatch):
    ds = read_dataset(files["train"])
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(PtychoError, match="cannot write"):
        export_cxi(ds, blocker / "d.cxi", GEOMETRY)
    # A failure half-way through writing (here: the probe image) leaves neither the file nor its temporary.
    real = h5py.Group.create_dataset

    def fail_on_image(self, name, *args, **kwargs):
        if self.name == "/entry_1/image_1":
            raise OSError(28, "No space left on device")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", fail_on_image)
    with pytest.raises(PtychoError, match="no space left") as err:
        export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder"]
    # An earlier, complete export survives a failed one unchanged.
    monkeypatch.setattr(h5py.Group, "create_dataset", real)
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    before = (tmp_path / "d.cxi").read_bytes()
    monkeypatch.setattr(h5py.Group, "create_dataset", fail_on_image)
    with pytest.raises(PtychoError, match="no space left"):
        export_cxi(ds, tmp_path / "d.cxi", CxiGeometry())
    assert (tmp_path / "d.cxi").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.cxi", "not-a-folder"]


#: Run inside a scratch venv with ptychodus: its own CXI readers on our file, results as NPZ.
PTYCHODUS_READ = """
import sys
from pathlib import Path
import numpy as np
from ptychodus.plugins.cxi_file import CXIDiffractionFileReader, CXIProductFileIO
path = Path(sys.argv[1])
ds = CXIDiffractionFileReader().read(path)
m = ds.get_metadata()
product = CXIProductFileIO().read(path)
np.savez(sys.argv[2], patterns=np.concatenate([a.get_patterns() for a in ds]),
         distance=m.detector_distance_m, pixel=[m.detector_pixel_geometry.width_m, m.detector_pixel_geometry.height_m],
         energy_ev=m.photon_energy_eV, positions=[[p.x_m, p.y_m] for p in product.probe_positions],
         probe=product.probes.get_array(), probe_pixel=product.probes.get_pixel_geometry().width_m,
         object=product.object_.get_array(), object_pixel=product.object_.get_pixel_geometry().width_m)
"""


@pytest.mark.slow
def test_ptychodus_reads_an_exported_file_as_we_mean_it(files, tmp_path):
    """ptychodus (installed from PyPI into a scratch venv, not the project's lock) opens the
    file as a diffraction dataset and as a product: same patterns, geometry, energy,
    positions in metres, probe, and the ground truth as its object."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "ptychodus==1.7.0"], capture_output=True, text=True, timeout=900
    )
    assert install.returncode == 0, install.stderr[-3000:]
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    read = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PTYCHODUS_READ, str(tmp_path / "d.cxi"), str(tmp_path / "seen.npz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert read.returncode == 0, read.stderr[-3000:]
    seen = np.load(tmp_path / "seen.npz")
    dx = GEOMETRY.object_pixel_m(ds.probe.shape[0])
    np.testing.assert_array_equal(seen["patterns"], ds.diffraction)
    assert float(seen["distance"]) == 3.0 and list(seen["pixel"]) == [172e-6, 172e-6]
    assert float(seen["energy_ev"]) == pytest.approx(6200.0, rel=1e-12)
    np.testing.assert_allclose(seen["positions"], ds.positions * dx, rtol=1e-15)
    np.testing.assert_array_equal(seen["probe"].reshape(ds.probe.shape), ds.probe)
    assert float(seen["probe_pixel"]) == pytest.approx(dx) and float(seen["object_pixel"]) == pytest.approx(dx)
    np.testing.assert_array_equal(seen["object"], ds.objects)


def _measured(files, tmp_path, shift_m: float = 0.0):
    """The train split exported, then stripped to what an experiment records: no
    ptycho_1, no object (image_2); translations optionally moved by ``shift_m``."""
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "ours.cxi", GEOMETRY)
    path = tmp_path / "measured.cxi"
    shutil.copy(tmp_path / "ours.cxi", path)
    with h5py.File(path, "a") as f:
        del f["entry_1/ptycho_1"]
        del f["entry_1/image_2"]
        f["entry_1/sample_1/geometry_1/translation"][:, :2] -= shift_m
    return ds, path


def test_measured_data_without_an_object_imports_as_reconstruct_only(files, tmp_path):
    """README: 'any CXI with data, translation, illumination'. No object is no ground
    truth: the dataset is valid, says so, and refuses to give one to score against."""
    ds, path = _measured(files, tmp_path)
    got = import_cxi(path, gridsize=2)
    assert not got.has_ground_truth and got.attrs["ground_truth"] is False
    np.testing.assert_array_equal(got.amplitude, ds.amplitude)
    assert not got.objects.any()  # a blank canvas, not a made-up object
    origin = np.array(json.loads(got.attrs["config"])["position_origin_px"])
    np.testing.assert_allclose(got.positions + origin, ds.positions, atol=1e-9)  # whole-pixel shift onto it
    assert np.isfinite(got.scale) and got.scale > 0
    write_dataset(tmp_path / "m.h5", got)
    back = read_dataset(tmp_path / "m.h5")  # every check of the format passes, positions inside the canvas
    assert not back.has_ground_truth
    with pytest.raises(DatasetError, match="no ground truth"):
        back.ground_truth(0)
    # Exported again it has no image_2 (a blank object would read as a ground truth) and comes back identical.
    export_cxi(back, tmp_path / "again.cxi", GEOMETRY)
    with h5py.File(tmp_path / "again.cxi") as f:
        assert "entry_1/image_2" not in f
    assert write_dataset(tmp_path / "again.h5", import_cxi(tmp_path / "again.cxi")) == back.attrs["digest"]


def test_measured_translations_centred_on_zero_land_on_the_canvas(files, tmp_path):
    """Experiments put the origin of the translation anywhere, often the scan's centre:
    negative pixel positions are moved onto the canvas, not refused."""
    _, path = _measured(files, tmp_path, shift_m=1e-3)  # thousands of pixels below zero
    got = import_cxi(path)
    write_dataset(tmp_path / "m.h5", got)
    assert read_dataset(tmp_path / "m.h5").positions.min() >= got.n // 2


@pytest.mark.parametrize(
    ("dtype", "how", "refused"),
    [
        ("int16", "wrapped", "holds 1 negative counts (lowest -3); photon counts are never negative: wrapped counters"),
        ("float32", "sign", "negative values (lowest -"),
        ("float32", "background", None),  # a dark pixel just below zero after background subtraction: clipped
    ],
)
def test_negative_detector_values_are_refused_unless_background_noise(files, tmp_path, dtype, how, refused):
    """Negative counts were clipped to 0 without a word (a sign error or wrapped int16
    counters imported with exit 0 and a changed scale); the .h5 and NPZ readers refuse them."""
    ds, path = _measured(files, tmp_path)
    with h5py.File(path, "a") as f:
        name = "entry_1/instrument_1/detector_1/data"
        data = f[name][()].astype(np.float64)
        if how == "wrapped":
            data = np.minimum(data, 1000)  # within int16
            data[0, 0, 0] = -3
        elif how == "sign":
            data[: len(data) // 2] *= -1
        else:
            data[0, 0, 0] = -0.5
        attrs = dict(f[name].attrs)
        del f[name]
        f[name] = data.astype(dtype)
        f[name].attrs.update(attrs)
        del f["entry_1/data_1/data"]
        f["entry_1/data_1/data"] = h5py.SoftLink("/" + name)
    if refused is None:
        got = import_cxi(path, gridsize=2)
        assert got.amplitude[0, 0, 0] == 0 and got.amplitude.min() >= 0
        return
    with pytest.raises(DatasetError) as err:
        import_cxi(path, gridsize=2)
    assert refused in str(err.value) and "\n" not in str(err.value)


def test_detector_data_compressed_with_a_filter_hdf5_lacks_is_named_at_parse_time(files, tmp_path):
    """Eiger detectors write bitshuffle/LZ4 (filter 32008); without the plugin the read failed
    as 'the file may be truncated, copy it again'. The filter and its package are named, from
    the headers alone (sources.describe: the workflow's parse-time check)."""
    from ptycho.data.sources import describe

    _, path = _measured(files, tmp_path)
    with h5py.File(path, "a") as f:
        name = "entry_1/instrument_1/detector_1/data"
        data, attrs = f[name][()], dict(f[name].attrs)
        del f[name]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((1, *data.shape[1:]))
        dcpl.set_filter(32008, h5py.h5z.FLAG_OPTIONAL, (0, 2))  # as an Eiger writes it, without the plugin here
        space = h5py.h5s.create_simple(data.shape)
        dset = h5py.Dataset(h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=dcpl))
        dset[...] = data
        dset.attrs.update(attrs)
    if h5py.h5z.filter_avail(32008):
        pytest.skip("this HDF5 has the bitshuffle filter (hdf5plugin)")
    for read in (describe, lambda p: import_cxi(p, gridsize=2)):
        with pytest.raises(DatasetError) as err:
            read(path)
        assert (
            "is compressed with bitshuffle (filter id 32008), which this HDF5 cannot decode; install hdf5plugin"
            in str(err.value)
        )


@pytest.mark.parametrize("how", ["unit", "glitch"])
def test_a_scan_spread_wider_than_its_patterns_can_cover_is_refused_before_allocating(files, tmp_path, how):
    """Positions in the wrong unit (x1000) or one glitched position far away passed the memory
    budget and made a 9.7 GiB blank canvas, or a 15504^2 object written with exit 0."""
    _, path = _measured(files, tmp_path)
    with h5py.File(path, "a") as f:
        translation = f["entry_1/sample_1/geometry_1/translation"]
        if how == "unit":
            translation[:, :2] *= 40
        else:
            row = translation[0]
            row[0] += 2e-3  # one position 2 mm from the rest
            translation[0] = row
    with pytest.raises(DatasetError) as err:
        import_cxi(path, gridsize=2)
    assert "times the area its 81 patterns of 16 px can cover, so they cannot overlap" in str(err.value)


@pytest.mark.parametrize(("version", "shown"), [(999, "999"), (42, "42"), ("1.6", "not one integer")])
def test_a_cxi_version_this_reader_does_not_follow_is_one_line(files, tmp_path, version, shown):
    """cxi_version was never checked: 999 was accepted as CXI 1.6."""
    from ptycho.data.sources import describe

    _, path = _measured(files, tmp_path)
    with h5py.File(path, "a") as f:
        del f["cxi_version"]
        f["cxi_version"] = version
    for read in (describe, lambda p: import_cxi(p, gridsize=2)):
        with pytest.raises(DatasetError) as err:
            read(path)
        assert f"cxi_version is {shown}; this reader follows CXI 1.0 to 1.6 (100 to 160)" in str(err.value)


def test_a_pipe_named_as_the_data_file_is_one_line_not_a_hang(tmp_path):
    """A FIFO named as the data file hung the parse silently (opening it waits for a writer)."""
    import os

    from ptycho.data.sources import describe

    fifo = tmp_path / "scan.cxi"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="is not a regular file \\(a pipe or a device\\)"):
        describe(fifo)
