"""Image-quality metrics for complex reconstructions (docs/physics.md section 6).

Scoring pipeline of :func:`score`, applied to every test image (:func:`score_all`):

1. **Registration.** The shift that best aligns the reconstruction's amplitude with the
   truth's amplitude is found by sub-pixel cross-correlation
   (``skimage.registration.phase_cross_correlation``, upsampled DFT, on mean-subtracted,
   Tukey-apodised amplitudes) and applied to the complex reconstruction by a Fourier
   shift (after mirror padding, so that no content wraps).
   Shifts are reported in **[row, column] = [dy, dx]** order, like skimage, as the
   shift *applied to the reconstruction* to bring it onto the truth; :func:`score`
   records them as ``shift_y`` and ``shift_x``.
2. **Crop.** Both images lose ``max_shift + border`` pixels (default 4 + 4) on every
   side: the shift allowance covers whatever a registration shift of up to
   ``max_shift`` px exposes, and the border is where shift interpolation is least
   reliable. The crop is therefore the same for every reconstruction of one truth whose
   shift is within the allowance, so all arms are scored on the same window;
   a larger shift additionally removes the ``ceil(|shift|)`` it exposes.
3. **Amplitude** is multiplied by the least-squares factor :func:`amplitude_scale`.
4. **Phase**: the best-fit plane ``a + b x + c y`` of the wrapped phase difference is
   removed (:func:`remove_phase_plane`); global phase and phase ramps are not
   recoverable in ptychography.
5. SSIM, PSNR (both with an explicit ``data_range`` = the truth's range on the scored
   region; phase SSIM on both phases offset by the truth's minimum), MAE and the FRC
   0.5 and 1/7 crossings (:mod:`ptycho.analysis.frc`), for amplitude and for phase.

References
----------
.. [1] Z. Wang, A. C. Bovik, H. R. Sheikh and E. P. Simoncelli, "Image quality
   assessment: from error visibility to structural similarity", IEEE Trans. Image
   Process. 13(4), 600-612 (2004).
.. [2] M. van Heel and M. Schatz, "Fourier shell correlation threshold criteria",
   J. Struct. Biol. 151(3), 250-262 (2005).
.. [3] M. Guizar-Sicairos, S. T. Thurman and J. R. Fienup, "Efficient subpixel image
   registration algorithms", Opt. Lett. 33(2), 156-158 (2008).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ptycho.analysis.frc import FRC_THRESHOLDS, crossing, frc, frc_resolution, half_bit, ring_pixels, window2d

__all__ = [
    "FRC_THRESHOLDS",
    "amplitude_scale",
    "compare",
    "frc",
    "frc_resolution",
    "fourier_shift",
    "half_scan",
    "half_scan_border",
    "register",
    "remove_phase_plane",
    "score",
    "score_all",
]

# --------------------------------------------------------------------------- registration


def fourier_shift(img: np.ndarray, shift_yx: Sequence[float], pad: int | None = None) -> np.ndarray:
    """Shift ``img`` by ``shift_yx = [dy, dx]`` (content moves by +shift) in Fourier space.

    The image is mirror-padded by ``pad`` pixels (default ``ceil(max|shift|) + 8``) before
    the transform and cropped afterwards, so content does not wrap around and the edge
    discontinuity of a non-periodic image does not ring into the result. Real input
    gives real output.
    """
    from scipy.ndimage import fourier_shift as _fshift

    img = np.asarray(img)
    shift = np.asarray(shift_yx, dtype=np.float64).reshape(2)
    if not np.any(shift):
        return img.copy()
    if pad is None:
        pad = int(math.ceil(np.abs(shift).max())) + 8
    h, w = img.shape
    padded = np.pad(img, pad, mode="symmetric")
    out = np.fft.ifft2(_fshift(np.fft.fft2(padded), shift))[pad : pad + h, pad : pad + w]
    if not np.iscomplexobj(img):
        out = out.real
    return out.astype(np.result_type(img.dtype, np.float32), copy=False)


def register(
    recon: np.ndarray, truth: np.ndarray, upsample: int = 20, *, window: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Align ``recon`` to ``truth`` by sub-pixel cross-correlation of amplitudes.

    Parameters
    ----------
    recon, truth : (H, W) arrays, real or complex
        Registration uses ``|recon|`` and ``|truth|``, each minus its mean and apodised
        by a separable Tukey window of parameter ``window`` (0 disables it).
    upsample : int
        Upsampling factor of the correlation peak; precision ``1 / upsample`` px.
    window : float
        Tukey ``alpha``. The edges of a non-periodic image do not move with the content;
        without apodisation they pull the estimate towards zero shift.

    Returns
    -------
    aligned : (H, W) array
        ``recon`` shifted by ``shift_yx`` (see :func:`fourier_shift`), same kind
        (real/complex) as ``recon``.
    shift_yx : (2,) float64
        ``[dy, dx]`` (row, column order, as skimage): the shift applied to ``recon``.
        If ``recon`` is ``truth`` translated by ``+t = [tx, ty]`` (package convention),
        ``shift_yx ≈ [-ty, -tx]``.

    Notes
    -----
    ``skimage.registration.phase_cross_correlation`` with ``normalization=None``: the
    cross-power spectrum :math:`F_t F_r^*` is inverted and its peak located, then refined
    by a matrix-multiply DFT on an ``upsample``-times finer grid around it [3]_. Plain
    (unwhitened) cross-correlation of apodised images was measured to be more accurate
    than phase correlation (``normalization="phase"``) on smooth objects with
    zero-filled or non-periodic borders (errors <= 0.05 px vs up to 1 px).
    """
    from skimage.registration import phase_cross_correlation

    recon = np.asarray(recon)
    truth = np.asarray(truth)
    if recon.shape != truth.shape or recon.ndim != 2:
        raise ValueError(f"recon and truth must be 2-D of the same shape, got {recon.shape} and {truth.shape}")
    win = window2d(truth.shape, window)

    def prep(img: np.ndarray) -> np.ndarray:
        amp = np.abs(img).astype(np.float64)
        return (amp - amp.mean()) * win

    shift, _, _ = phase_cross_correlation(prep(truth), prep(recon), upsample_factor=upsample, normalization=None)
    shift = np.asarray(shift, dtype=np.float64)
    return fourier_shift(recon, shift), shift


def _valid_slices(shape: tuple[int, int], shift_yx: np.ndarray, border: int, max_shift: int = 0) -> tuple[slice, slice]:
    """Rows/columns scored after a shift: a fixed ``max_shift + border`` frame removed, or
    more where the shift exposes more (so within the allowance the crop is shift-independent)."""
    out = []
    for size, d in zip(shape, shift_yx, strict=True):
        lo = max(max_shift, int(math.ceil(d)) if d > 0 else 0)
        hi = size - max(max_shift, int(math.ceil(-d)) if d < 0 else 0)
        lo, hi = lo + border, hi - border
        if hi - lo < 8:
            raise ValueError(
                f"after a shift of {d:.2f} px and a border of {border} px only {max(hi - lo, 0)} px remain "
                f"of {size}; the registration failed or the image is too small"
            )
        out.append(slice(lo, hi))
    return out[0], out[1]


# --------------------------------------------------------------------------- corrections


def _plane_design(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Column (``x``) and row (``y``) index grids, float64."""
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    return x.astype(np.float64), y.astype(np.float64)


def remove_phase_plane(
    recon: np.ndarray, truth_phase: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Remove the best-fit plane of the phase difference between ``recon`` and the truth.

    Parameters
    ----------
    recon : (H, W) complex array
        Reconstruction (its phase is used; amplitude is ignored).
    truth_phase : (H, W) real array
        Phase of the ground truth, radians.
    mask : (H, W) bool array, optional
        Pixels used for the fit (default all).

    Returns
    -------
    phase : (H, W) float64
        Corrected phase of ``recon``, :math:`\\phi_t + \\mathrm{wrap}(\\Delta - P)`: equal to
        :math:`\\arg(\\mathrm{recon}) - P` modulo :math:`2\\pi`, on the branch nearest the
        truth, so a perfect reconstruction returns ``truth_phase`` exactly and no
        :math:`2\\pi` jump enters the metrics.
    coeffs : (3,) float64
        ``[a, b, c]`` of the plane :math:`P(x, y) = a + b x + c y`, ``x`` the column and
        ``y`` the row index (radians, radians per pixel).

    Notes
    -----
    The difference :math:`\\Delta = \\arg(\\mathrm{recon} \\cdot e^{-i\\phi_t})` is wrapped,
    so a plain least-squares fit fails once a ramp wraps. The slopes are first
    estimated from the mean wrapped phase step between neighbouring pixels (valid for
    ramps below :math:`\\pi` per pixel), the offset from the circular mean, and then the
    plane is refined by ordinary least squares,
    :math:`\\min_{a,b,c} \\sum (\\mathrm{wrap}(\\Delta - P_0) - (a + b x + c y))^2`, on the
    residual, which no longer wraps.
    """
    recon = np.asarray(recon)
    truth_phase = np.asarray(truth_phase, dtype=np.float64)
    if recon.shape != truth_phase.shape or recon.ndim != 2:
        raise ValueError(
            f"recon and truth_phase must be 2-D of the same shape, got {recon.shape} and {truth_phase.shape}"
        )
    m = np.ones(recon.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if m.shape != recon.shape or m.sum() < 3:
        raise ValueError("mask must have the image's shape and select at least 3 pixels")
    z = np.exp(1j * (np.angle(recon.astype(np.complex128)) - truth_phase))
    x, y = _plane_design(recon.shape)

    # Coarse slopes from wrapped neighbour differences (within the mask), then offset.
    mx = m[:, 1:] & m[:, :-1]
    my = m[1:, :] & m[:-1, :]
    b0 = float(np.angle(np.sum((z[:, 1:] * np.conj(z[:, :-1]))[mx]))) if mx.any() else 0.0
    c0 = float(np.angle(np.sum((z[1:, :] * np.conj(z[:-1, :]))[my]))) if my.any() else 0.0
    ramp = b0 * x + c0 * y
    a0 = float(np.angle(np.sum((z * np.exp(-1j * ramp))[m])))
    # Refine by least squares on the (now unwrapped) residual.
    resid = np.angle(z * np.exp(-1j * (a0 + ramp)))
    design = np.stack([np.ones(m.sum()), x[m], y[m]], axis=1)
    delta, *_ = np.linalg.lstsq(design, resid[m], rcond=None)
    coeffs = np.array([a0, b0, c0]) + delta
    plane = coeffs[0] + coeffs[1] * x + coeffs[2] * y
    phase = truth_phase + np.angle(z * np.exp(-1j * plane))
    return phase, coeffs


def probe_error(estimate: np.ndarray, truth: np.ndarray, level: float = 0.1) -> float:
    """How far a probe ``estimate`` is from the ``truth``, up to what ptychographic data
    cannot fix: the relative L2 distance ``|c e^{-iP} estimate - truth| / |truth|`` over
    the illuminated pixels (``|truth|`` at least ``level`` of its peak), after the best
    complex factor ``c`` and the best phase plane ``P`` (:func:`remove_phase_plane`; a
    linear phase on the probe is undone by the opposite one on the object). 0 for the
    truth; a probe of the right power but no resemblance gives about 1.4."""
    estimate = np.asarray(estimate, np.complex128)
    truth = np.asarray(truth, np.complex128)
    if estimate.shape != truth.shape or truth.ndim != 2:
        raise ValueError(f"probes of shapes {estimate.shape} and {truth.shape} cannot be compared")
    lit = np.abs(truth) >= level * np.abs(truth).max()
    _, (a, b, c) = remove_phase_plane(estimate, np.angle(truth), lit)
    x, y = _plane_design(truth.shape)
    flat = (estimate * np.exp(-1j * (a + b * x + c * y)))[lit]
    factor = np.vdot(flat, truth[lit]) / max(np.vdot(flat, flat).real, 1e-300)
    return float(np.linalg.norm(factor * flat - truth[lit]) / np.linalg.norm(truth[lit]))


def amplitude_scale(recon_amp: np.ndarray, truth_amp: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Least-squares factor :math:`k = \\arg\\min_k \\|k r - t\\|^2 = \\langle r, t\\rangle / \\langle r, r\\rangle`.

    Returns 1.0 if ``recon_amp`` is identically zero (every factor fits equally badly).
    """
    r = np.asarray(recon_amp, dtype=np.float64)
    t = np.asarray(truth_amp, dtype=np.float64)
    if r.shape != t.shape:
        raise ValueError(f"shapes differ: {r.shape} and {t.shape}")
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        r, t = r[mask], t[mask]
    rr = float(np.sum(r * r))
    return float(np.sum(r * t) / rr) if rr > 0 else 1.0


# --------------------------------------------------------------------------- scoring


def _image_metrics(test: np.ndarray, ref: np.ndarray, prefix: str, *, offset: bool) -> dict[str, float]:
    """SSIM, PSNR (explicit data range = range of ``ref``), MAE, FRC crossings.

    ``offset``: compute SSIM on both images minus ``ref.min()`` (used for phase).
    """
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    data_range = float(ref.max() - ref.min())
    if data_range > 0:
        lo = float(ref.min()) if offset else 0.0
        ssim = float(structural_similarity(ref - lo, test - lo, data_range=data_range))
        with np.errstate(divide="ignore"):
            psnr = float(peak_signal_noise_ratio(ref, test, data_range=data_range))
    else:  # a constant truth has no contrast to compare against
        ssim = psnr = float("nan")
    freq, curve = frc(test, ref)
    f50, f17 = frc_resolution(freq, curve)
    return {
        f"{prefix}_ssim": ssim,
        f"{prefix}_psnr": psnr,
        f"{prefix}_mae": float(np.mean(np.abs(test - ref))),
        f"{prefix}_frc50": f50,
        f"{prefix}_frc17": f17,
        f"{prefix}_data_range": data_range,
        f"{prefix}_frc_curve": [float(v) for v in curve],
        "frc_freq": [float(v) for v in freq],
    }


def score(
    recon: np.ndarray,
    truth: np.ndarray,
    *,
    upsample: int = 20,
    border: int = 4,
    max_shift: int = 4,
    register_images: bool = True,
) -> dict[str, Any]:
    """Score a complex reconstruction against its ground truth (module docstring, 1-5).

    Parameters
    ----------
    recon, truth : (H, W) complex arrays
        Stitched reconstruction and ground truth over the same region.
    upsample : int
        Registration precision ``1 / upsample`` px.
    border : int
        Pixels dropped on every side after removing the region the shift exposed.
    max_shift : int
        Shift allowance (px) removed on every side whatever the shift, so that all
        reconstructions with ``|shift| <= max_shift`` are scored on one window.
    register_images : bool
        If False, no shift is estimated or applied (``shift_x = shift_y = 0``).

    Returns
    -------
    dict
        Plain Python floats (``phase_plane`` a list of 3 floats):

        * ``amp_ssim``, ``amp_psnr`` (dB), ``amp_mae``, ``amp_frc50``, ``amp_frc17``
          (cycles/pixel), ``amp_data_range`` for ``k |recon|`` vs ``|truth|``;
        * the same with prefix ``phase_`` for the plane-corrected phase vs the truth
          phase (radians);
        * ``shift_x``, ``shift_y``: shift applied to ``recon`` (px);
        * ``amp_scale``: the factor ``k``; ``phase_plane``: ``[a, b, c]`` of
          ``a + b x + c y`` removed from the phase, with ``x, y`` the column and row
          index inside the scored window (origin at its top-left corner ``crop``);
        * ``crop``: ``[row0, row1, col0, col1]`` of the scored window (half-open);
        * ``frc_freq``, ``amp_frc_curve``, ``phase_frc_curve``: the FRC curves the
          crossings were read from (cycles/pixel; NaN where a ring has no power).

        SSIM is :math:`\\frac{(2\\mu_x\\mu_y + C_1)(2\\sigma_{xy} + C_2)}
        {(\\mu_x^2 + \\mu_y^2 + C_1)(\\sigma_x^2 + \\sigma_y^2 + C_2)}` averaged over 7x7
        windows, :math:`C_1 = (0.01 L)^2`, :math:`C_2 = (0.03 L)^2`, ``L`` the explicit
        data range (the truth's max - min on the scored window) [1]_. Amplitudes are
        compared as they are; the two phase images are first offset by the truth
        phase's minimum, so that they lie on ``[0, L]`` like an intensity image: the
        luminance term is not offset invariant and is unstable for local means near 0
        (phases centred on 0 would give negative local SSIM for tiny errors). PSNR is :math:`10 \\log_{10}(L^2 / \\mathrm{MSE})` with the same ``L``
        (``inf`` for identical images). SSIM and PSNR are NaN when ``L = 0``. FRC
        crossings are NaN when the curve stays above the threshold up to Nyquist.

    References
    ----------
    .. [1] Z. Wang et al., IEEE Trans. Image Process. 13, 600-612 (2004).
    .. [2] M. van Heel and M. Schatz, J. Struct. Biol. 151, 250-262 (2005).
    """
    c = compare(recon, truth, upsample=upsample, border=border, max_shift=max_shift, register_images=register_images)
    out: dict[str, Any] = {}
    out.update(_image_metrics(c["amp"], c["truth_amp"], "amp", offset=False))
    out.update(_image_metrics(c["phase"], c["truth_phase"], "phase", offset=True))
    out.update({k: c[k] for k in ("shift_x", "shift_y", "amp_scale", "phase_plane", "crop")})
    return out


def compare(
    recon: np.ndarray,
    truth: np.ndarray,
    *,
    upsample: int = 20,
    border: int = 4,
    max_shift: int = 4,
    register_images: bool = True,
) -> dict[str, Any]:
    """Steps 1-4 of the scoring pipeline: the images that are scored, and how they were made.

    One definition for :func:`score` and for the report's figures, so that what a
    reader sees is exactly what was measured. Arguments as for :func:`score`.

    Returns
    -------
    dict
        ``amp`` (scaled amplitude), ``phase`` (plane-corrected phase), ``truth_amp``,
        ``truth_phase``: 2-D float64 arrays over the scored window; ``shift_x``,
        ``shift_y``, ``amp_scale``, ``phase_plane``, ``crop`` as documented in :func:`score`.
    """
    recon = np.asarray(recon)
    truth = np.asarray(truth)
    if recon.shape != truth.shape or recon.ndim != 2:
        raise ValueError(f"recon and truth must be 2-D of the same shape, got {recon.shape} and {truth.shape}")
    recon = recon.astype(np.complex128)
    truth = truth.astype(np.complex128)
    if register_images:
        aligned, shift = register(recon, truth, upsample=upsample)
    else:
        aligned, shift = recon, np.zeros(2)
    rows, cols = _valid_slices(recon.shape, shift, border, max_shift)
    r, t = aligned[rows, cols], truth[rows, cols]

    r_amp, t_amp = np.abs(r), np.abs(t)
    k = amplitude_scale(r_amp, t_amp)
    t_phase = np.angle(t)
    r_phase, coeffs = remove_phase_plane(r, t_phase)
    return {
        "amp": k * r_amp,
        "phase": r_phase,
        "truth_amp": t_amp,
        "truth_phase": t_phase,
        "shift_x": float(shift[1]),
        "shift_y": float(shift[0]),
        "amp_scale": float(k),
        "phase_plane": [float(v) for v in coeffs],
        "crop": [int(rows.start), int(rows.stop), int(cols.start), int(cols.stop)],
    }


def score_all(recons: Sequence[np.ndarray], truths: Sequence[np.ndarray], **kwargs: Any) -> dict[str, Any]:
    """Score every reconstruction against its truth; never only the first.

    Parameters
    ----------
    recons, truths : sequences of (H_i, W_i) complex arrays, same length
    **kwargs
        Passed to :func:`score`.

    Returns
    -------
    dict
        ``{"n_images": n, "per_image": [score(...) for each pair], "mean": {...}}``.
        ``mean`` averages every scalar key over the images, skipping NaN entries (a key
        NaN for every image stays NaN); list-valued keys (``phase_plane``, ``crop``) are
        per image only.
    """
    recons = list(recons)
    truths = list(truths)
    if len(recons) != len(truths):
        raise ValueError(f"{len(recons)} reconstructions but {len(truths)} ground truths")
    if not recons:
        raise ValueError("nothing to score")
    per_image = [score(r, t, **kwargs) for r, t in zip(recons, truths, strict=True)]
    mean: dict[str, float] = {}
    for key, value in per_image[0].items():
        if isinstance(value, list):
            continue
        vals = np.array([d[key] for d in per_image], dtype=np.float64)
        finite_or_inf = vals[~np.isnan(vals)]
        mean[key] = float(finite_or_inf.mean()) if finite_or_inf.size else float("nan")
    return {"n_images": len(per_image), "per_image": per_image, "mean": mean}


def half_scan_border(n: int) -> int:
    """The border :func:`half_scan` drops for patterns of side ``n``: ``n // 4``, half the
    kept patch's side (the scanned region's edge, lit by fewer positions)."""
    return n // 4


def half_scan(a: np.ndarray, b: np.ndarray, border: int = 0) -> dict[str, float]:
    """The resolution of two reconstructions of one object from the two halves of its scan.

    ``a`` and ``b`` are complex images of the same region, in the same frame (no
    registration: the positions are the scan's own). A ``border`` of pixels is dropped on
    every side, where the scan's edge leaves each half thinly covered. Two curves are read
    where they cross the 1/2-bit curve (cycles per pixel; 0.5 when a curve stays above it
    up to Nyquist, the halves agreeing at every resolution the pixels carry; higher is
    finer):

    * ``amp_half_frc``: the FRC of the amplitudes;
    * ``phase_half_frc``: the same of the phases, as unit phasors ``e^{i phi}`` (a phase
      image that crosses +-pi wraps where the object does not change, a phasor does not),
      after removing from ``b`` the best-fit plane of its phase difference from ``a``
      (a global phase and a phase ramp, which no reconstruction determines; the scoring
      against a truth removes the same, :func:`ptycho.analysis.metrics.remove_phase_plane`).
      The amplitudes are left out so that a few bright pixels where the scan's edge is
      barely lit do not stand for the phase;
    * ``amp_half_frc_mean`` and ``phase_half_frc_mean``: each curve's mean over the rings
      from the first to Nyquist, how far the halves agree over all frequencies. Where a
      curve runs near the threshold over a wide band (an object of weak contrast in that
      part, or a network whose halves share its own smoothness) its crossing moves by tens
      of rings with the rings' noise, while its mean hardly moves: the study judges the
      means and reports the crossings.

    ValueError on images of different shapes or too small for a ring beyond DC.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"the two halves' images must be 2-D of the same shape, got {a.shape} and {b.shape}")
    if border:
        a, b = a[border:-border, border:-border], b[border:-border, border:-border]
    if min(a.shape) < 4:
        raise ValueError(f"the halves' images ({a.shape} after a {border}-pixel border) are too small for an FRC")
    threshold = half_bit(ring_pixels(a.shape))
    phase_b, _ = remove_phase_plane(b, np.angle(a))
    out = {}
    for key, (x, y) in (
        ("amp_half_frc", (np.abs(a), np.abs(b))),
        ("phase_half_frc", (np.exp(1j * np.angle(a)), np.exp(1j * phase_b))),
    ):
        freq, corr = frc(x, y)
        out[key] = crossing(freq, corr, threshold)
        out[f"{key}_mean"] = float(np.nanmean(corr[1:]))
    return out
