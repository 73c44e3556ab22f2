"""Metrics: registration, phase-plane and amplitude corrections, SSIM/PSNR with explicit
data range, FRC, and scoring of every image."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.ndimage import fourier_shift, gaussian_filter

from ptycho.analysis.frc import frc, frc_resolution
from ptycho.analysis.metrics import (
    amplitude_scale,
    probe_error,
    register,
    remove_phase_plane,
    score,
    score_all,
)
from ptycho.physics.translate import translate


def _textured(size: int = 128, seed: int = 0) -> np.ndarray:
    """A complex test object: amplitude in [0.2, 0.9], phase in about [-1, 1] rad."""
    rng = np.random.default_rng(seed)
    amp = gaussian_filter(rng.random((size, size)), 1.5)
    amp = 0.2 + 0.7 * (amp - amp.min()) / (amp.max() - amp.min())
    ph = gaussian_filter(rng.random((size, size)), 2.0)
    ph = 2.0 * (ph - ph.min()) / (ph.max() - ph.min()) - 1.0
    return amp * np.exp(1j * ph)


def _camera(size: int = 160) -> np.ndarray:
    from skimage import data as skdata  # skimage is imported lazily everywhere (ruff TID253)

    return skdata.camera()[100 : 100 + size, 150 : 150 + size].astype(np.float64) / 255.0


# --------------------------------------------------------------------------- registration


def test_registration_recovers_a_known_subpixel_shift():
    img = _camera()
    shift_yx = np.array([0.3, -1.7])
    moved = np.fft.ifft2(fourier_shift(np.fft.fft2(img), shift_yx)).real
    aligned, found = register(moved, img)
    np.testing.assert_allclose(found, -shift_yx, atol=0.1)  # shift applied to undo the move
    interior = (slice(8, -8), slice(8, -8))
    assert np.abs(aligned - img)[interior].mean() < 0.01 * np.abs(img).mean()


def test_registration_shift_is_in_row_column_order_and_undoes_a_package_translation():
    truth = _textured(96)
    moved = translate(truth, [3.0, -2.0])  # +3 columns (x), -2 rows (y)
    _, found = register(moved, truth)
    np.testing.assert_allclose(found, [2.0, -3.0], atol=0.05)  # [dy, dx]


def test_score_records_and_corrects_the_shift():
    truth = _textured(128, seed=1)
    moved = translate(truth, [-2.0, 1.0])
    s = score(moved, truth)
    assert s["shift_x"] == pytest.approx(2.0, abs=0.05)
    assert s["shift_y"] == pytest.approx(-1.0, abs=0.05)
    assert s["amp_ssim"] > 0.999 and s["phase_ssim"] > 0.999
    # Within the 4 px shift allowance the crop is the fixed frame (allowance + border)...
    assert s["crop"] == [8, 120, 8, 120]
    # ...and without an allowance it removes exactly what the shift exposed:
    # shift -1 in y exposes the bottom row, shift +2 in x the two left columns.
    assert score(moved, truth, max_shift=0)["crop"] == [4, 128 - 1 - 4, 2 + 4, 128 - 4]


# --------------------------------------------------------------------------- corrections


def test_phase_plane_removal_recovers_a_known_wrapping_ramp():
    truth = _textured(96, seed=2)
    h, w = truth.shape
    y, x = np.mgrid[0:h, 0:w]
    a, b, c = 2.5, 0.21, -0.13  # ramps wrap several times over the image
    recon = 0.8 * truth * np.exp(1j * (a + b * x + c * y))
    phase, coeffs = remove_phase_plane(recon, np.angle(truth))
    assert np.angle(np.exp(1j * (coeffs[0] - a))) == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(coeffs[1:], [b, c], atol=1e-9)
    np.testing.assert_allclose(phase, np.angle(truth), atol=1e-9)


def test_phase_plane_fit_uses_only_the_mask():
    truth = _textured(64, seed=3)
    y, x = np.mgrid[0:64, 0:64]
    recon = truth * np.exp(1j * (0.4 + 0.02 * x))
    recon[:, :10] *= np.exp(1j * 1.5)  # corrupted strip, excluded by the mask
    mask = np.ones(recon.shape, bool)
    mask[:, :10] = False
    _, coeffs = remove_phase_plane(recon, np.angle(truth), mask=mask)
    np.testing.assert_allclose(coeffs, [0.4, 0.02, 0.0], atol=1e-9)


def test_amplitude_scale_recovers_a_known_factor():
    t = np.abs(_textured(64, seed=4))
    assert amplitude_scale(t / 2.5, t) == pytest.approx(2.5, rel=1e-12)
    rng = np.random.default_rng(0)
    r = rng.random((32, 32))
    k = amplitude_scale(r, t[:32, :32])
    ks = np.linspace(k - 0.1, k + 0.1, 201)
    losses = [np.sum((kk * r - t[:32, :32]) ** 2) for kk in ks]
    assert ks[int(np.argmin(losses))] == pytest.approx(k, abs=1e-3)  # least-squares optimum
    assert amplitude_scale(np.zeros((4, 4)), np.ones((4, 4))) == 1.0


# --------------------------------------------------------------------------- FRC


def test_frc_of_an_image_with_itself_is_one_everywhere():
    img = _camera(128)
    freq, corr = frc(img, img)
    assert freq[0] == 0.0 and freq[-1] == pytest.approx(0.5)
    np.testing.assert_allclose(corr, 1.0, atol=1e-12)
    assert all(np.isnan(v) for v in frc_resolution(freq, corr))


def test_frc_of_independent_noise_is_near_zero():
    rng = np.random.default_rng(5)
    freq, corr = frc(rng.normal(size=(128, 128)), rng.normal(size=(128, 128)))
    high = corr[freq >= 10 / 128]
    assert abs(high.mean()) < 0.03
    assert np.abs(high).max() < 0.25
    f50, f17 = frc_resolution(freq, corr)
    assert f50 <= 2 / 128 and f17 <= 4 / 128


def test_frc_resolution_interpolates_the_first_crossing_and_skips_dc():
    freq = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    corr = np.array([0.0, 0.9, 0.7, 0.3, 0.6, 0.1])  # DC ignored; later recovery ignored
    f50, f17 = frc_resolution(freq, corr)
    assert f50 == pytest.approx(0.25)
    assert f17 == pytest.approx(0.4 + 0.1 * (0.6 - 1 / 7) / (0.6 - 0.1))


def test_frc_resolution_tracks_blur():
    img = _camera(128)
    sharp = frc_resolution(
        *frc(gaussian_filter(img, 0.7) + 0.01 * np.random.default_rng(0).normal(size=img.shape), img)
    )
    blurred = frc_resolution(*frc(gaussian_filter(img, 2.0), img))
    assert blurred[0] < sharp[0]


# --------------------------------------------------------------------------- score


def test_score_of_truth_against_itself_is_perfect_and_json_serialisable():
    truth = _textured(96, seed=6)
    s = score(truth, truth)
    assert s["amp_ssim"] == pytest.approx(1.0) and s["phase_ssim"] == pytest.approx(1.0)
    assert s["amp_mae"] == 0.0 and s["phase_mae"] == 0.0
    assert s["amp_psnr"] == np.inf and s["phase_psnr"] == np.inf
    assert s["shift_x"] == 0.0 and s["shift_y"] == 0.0 and s["amp_scale"] == 1.0
    np.testing.assert_allclose(s["phase_plane"], 0.0, atol=1e-12)
    for key, value in s.items():
        assert type(value) in (float, list), key
    json.loads(json.dumps(s))


def test_score_removes_global_scale_phase_offset_and_ramp():
    truth = _textured(96, seed=7)
    y, x = np.mgrid[0:96, 0:96]
    recon = 0.5 * truth * np.exp(1j * (1.0 + 0.05 * x - 0.08 * y))
    s = score(recon, truth)
    assert s["amp_scale"] == pytest.approx(2.0)
    assert s["amp_ssim"] == pytest.approx(1.0) and s["phase_ssim"] == pytest.approx(1.0)
    assert s["amp_mae"] < 1e-12 and s["phase_mae"] < 1e-12
    # The plane is expressed in the coordinates of the scored crop (origin at its corner).
    r0, _, c0, _ = s["crop"]
    np.testing.assert_allclose(s["phase_plane"], [1.0 + 0.05 * c0 - 0.08 * r0, 0.05, -0.08], atol=1e-9)


def _noisy_pair(seed: int = 8):
    truth = _textured(96, seed=seed)
    rng = np.random.default_rng(seed)
    recon = (np.abs(truth) + 0.03 * rng.normal(size=truth.shape)) * np.exp(
        1j * (np.angle(truth) + 0.05 * rng.normal(size=truth.shape))
    )
    return recon, truth


def test_metrics_equal_direct_skimage_calls_with_the_truth_data_range():
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    recon, truth = _noisy_pair()
    border = 4
    s = score(recon, truth, register_images=False, border=border, max_shift=0)
    crop = (slice(border, -border), slice(border, -border))
    r, t = recon[crop], truth[crop]
    k = amplitude_scale(np.abs(r), np.abs(t))
    ra, ta = k * np.abs(r), np.abs(t)
    amp_range = ta.max() - ta.min()
    assert s["amp_data_range"] == pytest.approx(amp_range)
    assert s["amp_ssim"] == pytest.approx(structural_similarity(ta, ra, data_range=amp_range), abs=1e-12)
    assert s["amp_psnr"] == pytest.approx(peak_signal_noise_ratio(ta, ra, data_range=amp_range), abs=1e-9)
    assert s["amp_mae"] == pytest.approx(np.mean(np.abs(ra - ta)), abs=1e-15)

    tp = np.angle(t)
    rp, _ = remove_phase_plane(r, tp)
    ph_range = tp.max() - tp.min()
    lo = tp.min()  # documented: phase SSIM is computed on both images offset by the truth minimum
    assert s["phase_ssim"] == pytest.approx(structural_similarity(tp - lo, rp - lo, data_range=ph_range), abs=1e-12)
    assert s["phase_psnr"] == pytest.approx(peak_signal_noise_ratio(tp, rp, data_range=ph_range), abs=1e-9)
    assert s["phase_mae"] == pytest.approx(np.mean(np.abs(rp - tp)), abs=1e-15)
    assert s["amp_frc50"] == pytest.approx(frc_resolution(*frc(ra, ta))[0])


def test_psnr_uses_the_truth_range_not_one_or_255():
    rng = np.random.default_rng(9)
    amp = 0.3 + 0.5 * gaussian_filter(rng.random((80, 80)), 2.0)
    amp = 0.3 + 0.5 * (amp - amp.min()) / (amp.max() - amp.min())  # exact range 0.5 ...
    amp[40, 40], amp[41, 41] = 0.3, 0.8  # ... attained inside the scored window
    truth = amp.astype(np.complex128)
    recon = (amp + 0.02 * rng.normal(size=amp.shape)).astype(np.complex128)
    s = score(recon, truth, register_images=False)
    assert s["amp_data_range"] == pytest.approx(0.5)
    r0, r1, c0, c1 = s["crop"]
    ra, ta = np.abs(recon[r0:r1, c0:c1]), amp[r0:r1, c0:c1]
    mse = np.mean((amplitude_scale(ra, ta) * ra - ta) ** 2)
    assert s["amp_psnr"] == pytest.approx(10 * np.log10(0.5**2 / mse), abs=1e-9)
    # With data_range 1 the value would be 6.02 dB higher.
    assert s["amp_psnr"] == pytest.approx(10 * np.log10(1.0 / mse) - 20 * np.log10(2.0), abs=1e-9)


def test_constant_truth_has_undefined_ssim_and_psnr_not_a_fake_value():
    truth = np.abs(_textured(64, seed=10)).astype(np.complex128)  # zero phase everywhere
    recon = truth * np.exp(0.01j)
    s = score(recon, truth, register_images=False)
    assert s["phase_data_range"] == 0.0
    assert np.isnan(s["phase_ssim"]) and np.isnan(s["phase_psnr"])
    assert s["amp_ssim"] == pytest.approx(1.0)


def test_score_all_scores_every_image_and_averages():
    good, truth_a = _noisy_pair(seed=11)
    truth_b = _textured(96, seed=12)
    rng = np.random.default_rng(12)
    bad = truth_b * (1 + 0.3 * rng.normal(size=truth_b.shape))
    result = score_all([good, bad], [truth_a, truth_b], register_images=False)
    assert result["n_images"] == 2 and len(result["per_image"]) == 2
    first, second = result["per_image"]
    assert first == score(good, truth_a, register_images=False)
    assert second == score(bad, truth_b, register_images=False)
    assert second["amp_ssim"] < first["amp_ssim"]
    for key in ("amp_ssim", "phase_ssim", "amp_psnr", "amp_mae", "phase_mae", "amp_scale"):
        assert result["mean"][key] == pytest.approx((first[key] + second[key]) / 2)
    assert "phase_plane" not in result["mean"]
    json.loads(json.dumps(result))


def test_score_all_mean_skips_nan_entries():
    truth = _camera(96).astype(np.complex128)
    result = score_all([truth, gaussian_filter(truth.real, 2.0).astype(complex)], [truth, truth], register_images=False)
    f = [d["amp_frc50"] for d in result["per_image"]]
    assert np.isnan(f[0]) and np.isfinite(f[1])
    assert result["mean"]["amp_frc50"] == pytest.approx(f[1])


def test_score_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="same shape"):
        score(np.ones((32, 32), complex), np.ones((32, 30), complex))
    with pytest.raises(ValueError, match="reconstructions"):
        score_all([np.ones((32, 32))], [])


def test_reconstructions_with_different_small_shifts_are_scored_on_the_same_window():
    from ptycho.analysis.metrics import fourier_shift, score

    rng = np.random.default_rng(7)
    from scipy.ndimage import gaussian_filter

    amp = 0.5 + 0.5 * gaussian_filter(rng.random((64, 64)), 2) / 0.6
    truth = np.clip(amp, 0, 1) * np.exp(1j * gaussian_filter(rng.random((64, 64)), 2))
    a = score(fourier_shift(truth, (0.3, -0.4)), truth)
    b = score(fourier_shift(truth, (-1.6, 2.2)), truth)
    assert a["crop"] == b["crop"] == [8, 56, 8, 56]


def test_compare_gives_the_images_score_measured_and_the_frc_curves_behind_the_crossings():
    from ptycho.analysis.metrics import compare

    truth = _textured(96, seed=4)
    recon = 1.7 * np.exp(1j * 0.4) * translate(truth, (0.6, -0.3))
    c = compare(recon, truth)
    s = score(recon, truth)
    r0, r1, c0, c1 = s["crop"]
    assert c["amp"].shape == c["truth_amp"].shape == (r1 - r0, c1 - c0)
    np.testing.assert_allclose(c["truth_amp"], np.abs(truth[r0:r1, c0:c1]))
    np.testing.assert_allclose(c["amp"], c["truth_amp"], atol=0.05)  # scale and shift undone
    freq, curve = frc(c["amp"], c["truth_amp"])
    assert s["frc_freq"] == pytest.approx(list(freq))
    assert s["amp_frc_curve"] == pytest.approx(list(curve))
    assert s["amp_frc50"] == pytest.approx(frc_resolution(freq, curve)[0], nan_ok=True)
    assert "amp_frc_curve" not in score_all([recon], [truth])["mean"]  # curves are per image only


# ------------------------------------------------------------------------ half-scan FRC
def test_the_half_bit_curve_is_van_heel_and_schatz():
    """T(1 pixel) = 1 (a single Fourier pixel always correlates perfectly with itself) and
    it falls to 0.2071 / 1.2071 = 0.1716 for large rings; the rings count every Fourier pixel
    up to Nyquist once."""
    from ptycho.analysis.frc import half_bit, ring_pixels

    assert half_bit(np.array([1.0]))[0] == pytest.approx(1.0, abs=1e-4)
    assert half_bit(np.array([1e12]))[0] == pytest.approx(0.2071 / 1.2071, rel=1e-4)
    assert half_bit(np.array([4.0]))[0] == pytest.approx((0.2071 + 1.9102 / 2) / (1.2071 + 0.9102 / 2))
    pixels = ring_pixels((64, 48))
    assert len(pixels) == 25 and pixels[0] == 1
    freq = np.hypot(np.fft.fftfreq(64)[:, None], np.fft.fftfreq(48)[None, :])
    assert pixels.sum() == np.count_nonzero(np.rint(freq * 48) < 25)


def _halves(noise: float, seed: int = 0):
    """One smooth complex object seen twice, each time with its own white noise."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    base = gaussian_filter(rng.standard_normal((96, 96)), 1.5)
    obj = (1 + base) * np.exp(1j * 3 * base)

    def noisy():
        return obj + noise * (rng.standard_normal(obj.shape) + 1j * rng.standard_normal(obj.shape))

    return noisy(), noisy()


def test_half_scan_resolution_falls_as_the_halves_noise_grows_and_ignores_a_global_phase_and_ramp():
    from ptycho.analysis.metrics import half_scan

    a, b = _halves(0.0)
    same = dict.fromkeys(("amp_half_frc", "phase_half_frc"), 0.5) | dict.fromkeys(
        ("amp_half_frc_mean", "phase_half_frc_mean"), pytest.approx(1.0)
    )
    assert half_scan(a, b * np.exp(2.5j)) == same  # they agree up to Nyquist
    ramp = np.exp(1j * (0.3 * np.arange(96)[None, :] - 0.1 * np.arange(96)[:, None]))  # no reconstruction knows it
    assert half_scan(a, b * ramp) == same
    res = [half_scan(*_halves(noise), border=8) for noise in (0.01, 0.05, 0.2)]
    for key in ("amp_half_frc", "phase_half_frc", "amp_half_frc_mean", "phase_half_frc_mean"):
        values = [r[key] for r in res]
        assert values[0] > values[1] > values[2] > 0, (key, values)
    unrelated = half_scan(_halves(0.0, seed=1)[0], _halves(0.0, seed=2)[0])
    assert unrelated["amp_half_frc"] < 0.05  # no agreement beyond the first rings
    with pytest.raises(ValueError, match="same shape"):
        half_scan(a, b[:-1])
    with pytest.raises(ValueError, match="too small"):
        half_scan(a[:10, :10], b[:10, :10], border=4)


def test_the_scans_halves_interleave_within_each_object():
    from ptycho.analysis.stitch import scan_halves

    even, odd = scan_halves(np.array([0, 0, 0, 1, 1, 0, 1]))
    assert even.tolist() == [True, False, True, True, False, False, True]
    assert (even ^ odd).all()


def test_a_dip_of_two_rings_below_the_half_bit_curve_is_no_crossing():
    """Where the FRC runs near the threshold, the rings' noise dips it below for a ring
    or two; the resolution is where it stays below (three rings in a row)."""
    from ptycho.analysis.frc import crossing

    freq = np.arange(10) / 20
    threshold = np.full(10, 0.3)
    dip = np.array([1, 0.9, 0.8, 0.2, 0.2, 0.8, 0.7, 0.1, 0.1, 0.1])
    assert crossing(freq, dip, threshold) == pytest.approx(0.3 + (0.4 / 0.6) * 0.05)
    assert crossing(freq, np.ones(10), threshold) == 0.5
    assert crossing(freq, np.array([1, 0.1, 0.1, 0.1, 1, 1, 1, 1, 1, 1]), threshold) == pytest.approx(0.05)


def test_probe_error_is_zero_up_to_what_the_data_cannot_fix_and_large_for_another_probe():
    y, x = np.mgrid[-16:16, -16:16]
    r2 = (x**2 + y**2) / 8.0**2
    probe = np.exp(-r2) * np.exp(1j * 2.0 * r2)  # a defocused Gaussian
    assert probe_error(probe, probe) == pytest.approx(0.0, abs=1e-9)
    # A complex factor and a linear phase: the object takes them up, so they are no error.
    assert probe_error(0.3j * probe * np.exp(1j * (0.2 * x - 0.1 * y)), probe) == pytest.approx(0.0, abs=1e-6)
    # The same beam without its curvature, and an unrelated beam, are far.
    assert probe_error(np.exp(-r2) + 0j, probe) > 0.4
    other = np.exp(-((x - 6) ** 2 + y**2) / 4.0**2) * np.exp(-3j * r2)
    assert probe_error(other, probe) > 0.9
    with pytest.raises(ValueError, match="cannot be compared"):
        probe_error(probe[:8], probe)
