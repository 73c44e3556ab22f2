"""tike-style NPZ scans (measured data as tike ships it): conventions pinned by a round
trip through a simulated scan written the way tike writes one, the two reductions of the
pattern side, the repository's real Siemens star, and bad input (one line each)."""

from __future__ import annotations

import bz2
import io
import json
from pathlib import Path

import numpy as np
import pytest

from ptycho.data.tike import BIN_PROBE_LIMIT, import_tike
from ptycho.errors import DatasetError

ROOT = Path(__file__).resolve().parents[1]
STAR = ROOT / "data" / "siemens-star" / "siemens-star-small.npz.bz2"


def _tike_arrays(ds) -> dict[str, np.ndarray]:
    """A simulated dataset as tike stores a scan: intensities with the zero frequency at the
    corner, under tike's extra leading axes; the probe under its shared and mode axes; the
    positions the window's corner, [row, column]."""
    n = ds.probe.shape[0]
    counts = np.fft.ifftshift(ds.amplitude.astype(np.float64) ** 2, axes=(-2, -1))
    corner = ds.positions[:, ::-1] - n / 2
    return {
        "data": counts[None].astype(np.float32),
        "probe": ds.probe[None, None, None, None].astype(np.complex64),
        "scan": corner[None].astype(np.float32),
    }


def _write(path: Path, arrays: dict, compress: bool = False, **extra) -> Path:
    buf = io.BytesIO()
    np.savez(buf, **arrays, **extra)
    path.write_bytes(bz2.compress(buf.getvalue()) if compress else buf.getvalue())
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_a_scan_written_as_tike_writes_it_reads_back_as_the_same_patterns_probe_and_positions(pair, tmp_path, compress):
    ds = pair["test"]
    path = _write(tmp_path / ("s.npz.bz2" if compress else "s.npz"), _tike_arrays(ds), compress)
    back = import_tike(path)
    origin = np.array(json.loads(back.attrs["config"])["position_origin_px"])
    # the patterns, fftshifted back to the centre; the positions, centres [x, y], on the
    # blank canvas's origin; the probe as given (its scale goes to s)
    assert np.allclose(back.diffraction, ds.amplitude, rtol=1e-5, atol=1e-4)
    assert np.allclose(back.positions + origin, ds.positions, atol=1e-4)
    assert np.allclose(back.probe, ds.probe, atol=1e-6)
    assert not back.has_ground_truth and json.loads(back.attrs["config"])["format"] == "tike"
    # swapped axes or a corner taken as the centre would not match
    assert not np.allclose(back.positions + origin, ds.positions[:, ::-1], atol=0.5)


def test_a_smaller_side_by_crop_is_the_band_limited_scan_and_by_bin_the_summed_pixels(pair, tmp_path):
    ds = pair["test"]
    n = ds.probe.shape[0]
    half = n // 2
    path = _write(tmp_path / "s.npz", _tike_arrays(ds))
    intensity = ds.amplitude.astype(np.float64) ** 2
    lo = (n - half) // 2
    crop = import_tike(path, n=half, reduce="crop")
    assert crop.diffraction.shape[1:] == (half, half)
    assert np.allclose(crop.diffraction**2, intensity[:, lo : lo + half, lo : lo + half], rtol=1e-4, atol=1e-3)
    spread = np.ptp(ds.positions, axis=0)
    assert np.allclose(np.ptp(crop.positions, axis=0), spread / 2, atol=1e-3)  # pixels twice as large
    note = json.loads(crop.attrs["config"])["reduced"]
    assert note["by"] == "crop" and (note["from"], note["to"]) == (n, half) and "lower resolution" in note["means"]
    # the probe band-limited: its spectrum is the central part of the original's
    spectrum = np.fft.fftshift(np.fft.fft2(ds.probe.astype(np.complex128), norm="ortho"))[
        lo : lo + half, lo : lo + half
    ]
    assert np.allclose(np.fft.fftshift(np.fft.fft2(crop.probe, norm="ortho")), spectrum, atol=1e-5)

    # the small simulation's probe lies inside its central half: binning keeps all of it
    power = np.abs(ds.probe) ** 2
    assert power[lo : lo + half, lo : lo + half].sum() / power.sum() > 1 - BIN_PROBE_LIMIT
    binned = import_tike(path, n=half, reduce="bin")
    summed = intensity.reshape(len(intensity), half, 2, half, 2).sum(axis=(2, 4))
    assert np.allclose(binned.diffraction**2, summed, rtol=1e-4, atol=1e-3)
    assert np.allclose(np.ptp(binned.positions, axis=0), spread, atol=1e-3)  # the same pixels
    # a flat probe filling the window has 75 % of its power outside the central half: refused
    wide = _tike_arrays(ds)
    wide["probe"] = np.ones_like(wide["probe"])
    with pytest.raises(DatasetError, match="75% of its power lies outside") as err:
        import_tike(_write(tmp_path / "wide.npz", wide), n=half, reduce="bin")
    assert "\n" not in str(err.value) and "reduce by crop" in str(err.value)


def test_the_repositorys_siemens_star_reads_as_measured_data():
    full = import_tike(STAR)
    assert full.diffraction.shape == (516, 128, 128) and not full.has_ground_truth
    # the zero frequency at the centre after import: the brightest pixel of the mean pattern
    mean = full.diffraction.astype(np.float64).mean(axis=0)
    peak = np.unravel_index(mean.argmax(), mean.shape)
    assert all(abs(int(p) - 64) <= 16 for p in peak), peak
    small = import_tike(STAR, n=64, reduce="bin")
    assert small.diffraction.shape == (516, 64, 64)
    assert json.loads(small.attrs["config"])["reduced"]["probe_power_outside"] == pytest.approx(0.029, abs=0.002)
    # nearest neighbours about 9 px apart, as the file's README says
    from scipy.spatial import cKDTree

    d, _ = cKDTree(small.positions).query(small.positions, k=2)
    assert 7 < float(np.median(d[:, 1])) < 11


def _bad(tmp_path: Path, pair, case: str) -> Path:
    arrays = _tike_arrays(pair["test"])
    if case == "nan":
        arrays["data"][0, 3, 0, 0] = np.nan
    elif case == "negative":
        arrays["data"][0, 3, 0, 0] = -7
    elif case == "probe size":
        arrays["probe"] = arrays["probe"][..., :-2, :-2]
    elif case == "scan count":
        arrays["scan"] = arrays["scan"][:, :-1]
    elif case == "missing":
        del arrays["scan"]
    elif case == "pickled":
        return _write(tmp_path / "p.npz", arrays, extra=np.array([{"a": 1}], dtype=object))
    elif case == "truncated bz2":
        path = _write(tmp_path / "t.npz.bz2", arrays, compress=True)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        return path
    elif case == "far position":
        arrays["scan"][0, 0] = [5e6, 5e6]  # a glitch (or metres read as pixels)
    return _write(tmp_path / "b.npz", arrays)


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("nan", "NaN or infinite counts"),
        ("negative", "negative values"),
        ("probe size", "'probe' has shape"),
        ("scan count", "'scan' has shape"),
        ("missing", "without 'scan'"),
        ("pickled", "pickled"),
        ("truncated bz2", "truncated, copy it again"),
        ("far position", "the scan spans"),
    ],
)
def test_bad_tike_scans_are_one_line_naming_the_problem(pair, tmp_path, case, fragment):
    path = _bad(tmp_path, pair, case)
    with pytest.raises(DatasetError) as err:
        import_tike(path)
    assert fragment in str(err.value) and "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_bz2_that_expands_past_the_read_budget_stops_there(tmp_path, monkeypatch):
    import ptycho.data.untrusted as untrusted

    monkeypatch.setattr(untrusted, "read_budget", lambda: 8 << 20)  # 8 MiB
    bomb = tmp_path / "bomb.npz.bz2"
    bomb.write_bytes(bz2.compress(b"\0" * (64 << 20)))  # 64 MiB of zeros, 50 bytes compressed
    with pytest.raises(DatasetError, match="decompresses to more than") as err:
        import_tike(bomb)
    assert "\n" not in str(err.value)


def test_a_tike_scan_is_a_data_source_of_the_study(pair, tmp_path):
    from ptycho.data.sources import describe, read_source

    path = _write(tmp_path / "s.npz.bz2", _tike_arrays(pair["test"]), compress=True)
    found = describe(path)
    assert (found.kind, found.ground_truth, found.n) == ("tike", False, pair["test"].probe.shape[0])
    ds = read_source(path, gridsize=2, split="test", n=found.n // 2)
    assert ds.diffraction.shape[1] == found.n // 2 and ds.attrs["split"] == "test"


def test_a_bz2_of_several_streams_reads_whole(pair, tmp_path):
    # pbzip2 and `cat a.bz2 b.bz2` write one bz2 stream after another: all of them are the file
    buf = io.BytesIO()
    np.savez(buf, **_tike_arrays(pair["test"]))
    raw = buf.getvalue()
    path = tmp_path / "s.npz.bz2"
    path.write_bytes(b"".join(bz2.compress(raw[k : k + 4000]) for k in range(0, len(raw), 4000)))
    whole = _write(tmp_path / "one.npz.bz2", _tike_arrays(pair["test"]), compress=True)
    assert np.array_equal(import_tike(path).diffraction, import_tike(whole).diffraction)
