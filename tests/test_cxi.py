"""CXI 1.6 export and import: the layout, its units and axes, exact round trips, bad input."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ptycho.cxi import EV_J, HC_EV_M, CxiGeometry, export_cxi, import_cxi
from ptycho.data import read_dataset, write_dataset
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


def test_the_layout_is_cxi_1_6_in_metres_and_joules(files, tmp_path):
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    n = ds.probe.shape[0]
    wavelength = HC_EV_M / 6200.0  # 0.2 nm
    dx = wavelength * 3.0 / (n * 172e-6)
    assert GEOMETRY.object_pixel_m(n) == pytest.approx(dx)
    with h5py.File(tmp_path / "d.cxi") as f:
        assert f["cxi_version"][()] == 160
        assert f["entry_1"].attrs["NX_class"] == "NXentry"
        det = f["entry_1/instrument_1/detector_1"]
        assert np.array_equal(det["data"][()], ds.diffraction)  # counts are intensities already
        assert det["distance"][()] == 3.0 and det["x_pixel_size"][()] == det["y_pixel_size"][()] == 172e-6
        assert f["entry_1/instrument_1/source_1/energy"][()] == pytest.approx(6200.0 * 1.602176634e-19)
        assert f["entry_1/instrument_1/source_1/energy"].attrs["units"] == "J"
        assert np.array_equal(f["entry_1/instrument_1/source_1/illumination"][()], ds.probe)  # -> image_1
        assert np.array_equal(f["entry_1/image_1/data"][()], ds.probe)
        np.testing.assert_allclose(f["entry_1/image_1/image_size"][()], [n * dx, n * dx])
        translation = f["entry_1/sample_1/geometry_1/translation"][()]
        assert translation.shape == (len(ds.positions), 3) and not translation[:, 2].any()
        # x is the column, y the row, of each probe position on the object (DOMAIN.md), in metres.
        np.testing.assert_allclose(translation[:, 0], ds.positions[:, 0] * dx, rtol=1e-15)
        np.testing.assert_allclose(translation[:, 1], ds.positions[:, 1] * dx, rtol=1e-15)
        assert f["entry_1/data_1/data"].shape == det["data"].shape  # the soft links resolve
        assert f.get("entry_1/data_1/data", getlink=True).path == "/entry_1/instrument_1/detector_1/data"
        assert f.get("entry_1/data_1/translation", getlink=True).path == "/entry_1/sample_1/geometry_1/translation"
        image = f["entry_1/image_2/data"]  # the ground truth (ptychodus: the object)
        assert np.array_equal(image[()], ds.objects) and image.attrs["data_space"] == "real"
        np.testing.assert_allclose(f["entry_1/image_2/image_size"][()], [ds.objects.shape[-1] * dx] * 2)


def test_a_sqrt_count_dataset_is_stored_as_intensities(files, tmp_path):
    ds = read_dataset(files["sqrt"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi") as f:
        np.testing.assert_array_equal(f["entry_1/instrument_1/detector_1/data"][()], ds.diffraction.astype(np.float64) ** 2)


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
    write_dataset(tmp_path / "foreign.h5", got)
    read_dataset(tmp_path / "foreign.h5")  # a valid dataset: every check of the format passes


def test_geometry_values_are_checked_with_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^config key 'cxi.detector_pixel_m' = 0 must be a positive finite number"):
        CxiGeometry(detector_pixel_m=0)
    with pytest.raises(ConfigError, match="cxi.energy_ev"):
        CxiGeometry(energy_ev=float("nan"))
    assert CxiGeometry().wavelength_m * CxiGeometry().energy_ev * EV_J == pytest.approx(HC_EV_M * EV_J)


def test_files_that_are_not_cxi_are_refused_with_one_line(files, tmp_path):
    with pytest.raises(DatasetError, match="not a CXI file") as err:
        import_cxi(files["train"])  # our own HDF5 dataset format, not CXI
    assert "\n" not in str(err.value)
    text = tmp_path / "t.cxi"
    text.write_text("hello")
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        import_cxi(text)
    export_cxi(read_dataset(files["train"]), tmp_path / "d.cxi", GEOMETRY)
    with h5py.File(tmp_path / "d.cxi", "a") as f:
        del f["entry_1/sample_1/geometry_1/translation"]
    with pytest.raises(DatasetError, match="no 'entry_1/sample_1/geometry_1/translation'"):
        import_cxi(tmp_path / "d.cxi")


def test_a_failed_export_leaves_no_file(files, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(PtychoError, match="cannot write"):
        export_cxi(read_dataset(files["train"]), blocker / "d.cxi", GEOMETRY)
    # A failure half-way through writing (here: the ground truth) leaves neither the file nor its temporary.
    real = h5py.Group.create_dataset

    def fail_on_image(self, name, *args, **kwargs):
        if self.name == "/entry_1/image_1":
            raise OSError(28, "No space left on device")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", fail_on_image)
    with pytest.raises(PtychoError, match="no space left"):
        export_cxi(read_dataset(files["train"]), tmp_path / "d.cxi", GEOMETRY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder"]


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
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "ptychodus==1.7.0"], capture_output=True,
                             text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    ds = read_dataset(files["train"])
    export_cxi(ds, tmp_path / "d.cxi", GEOMETRY)
    read = subprocess.run([str(venv / "bin" / "python"), "-c", PTYCHODUS_READ, str(tmp_path / "d.cxi"),
                           str(tmp_path / "seen.npz")], capture_output=True, text=True, timeout=300)
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
