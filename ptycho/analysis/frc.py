"""Fourier ring correlation and its resolution crossings (docs/physics.md section 6).

:func:`frc` correlates two images ring by ring in Fourier space; :func:`frc_resolution`
reads off where the curve first drops below each threshold of :data:`FRC_THRESHOLDS`.
:func:`window2d` is the Tukey apodisation shared with registration
(:func:`ptycho.analysis.metrics.register`). The criteria are van Heel and Schatz's
(J. Struct. Biol. 151, 250-262, 2005).

Without a ground truth (measured data) the resolution of a reconstruction is read from
two independent reconstructions of the same object, each from one half of the data:
:func:`ptycho.analysis.metrics.half_scan` correlates them and reads the crossing of the
1/2-bit curve (:func:`half_bit`), the criterion for two half data sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["FRC_THRESHOLDS", "crossing", "frc", "frc_resolution", "half_bit", "ring_pixels", "window2d"]

#: FRC thresholds: the 0.5 criterion and the 1/7 criterion (van Heel & Schatz 2005).
FRC_THRESHOLDS = (0.5, 1.0 / 7.0)


def _tukey(n: int, alpha: float) -> np.ndarray:
    from scipy.signal.windows import tukey

    return tukey(n, alpha) if alpha > 0 else np.ones(n)


def window2d(shape: tuple[int, ...], alpha: float) -> np.ndarray:
    """Separable 2-D Tukey window: tapers edges so FFTs see no border discontinuity."""
    return _tukey(shape[0], alpha)[:, None] * _tukey(shape[1], alpha)[None, :]


def frc(a: np.ndarray, b: np.ndarray, *, window: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Fourier ring correlation of two images.

    Parameters
    ----------
    a, b : (H, W) arrays, real or complex, same shape
    window : float
        ``alpha`` of a separable Tukey apodisation applied (after subtracting each
        image's mean) to suppress the edge cross of non-periodic images; 0 disables it.

    Returns
    -------
    freq : (R,) float64
        Ring centres in cycles per pixel, ``i / L`` for ``i = 0 .. L // 2`` with
        ``L = min(H, W)``; rings are 1 frequency pixel (``1 / L``) wide and frequencies
        beyond 0.5 (the corners) are ignored.
    corr : (R,) float64
        .. math::

            \\mathrm{FRC}(r_i) = \\frac{\\mathrm{Re}\\sum_{k \\in r_i} F_a(k) F_b^*(k)}
            {\\sqrt{\\sum_{k \\in r_i} |F_a(k)|^2 \\sum_{k \\in r_i} |F_b(k)|^2}}

        NaN for a ring where either image has no power.

    References
    ----------
    .. [1] M. van Heel and M. Schatz, J. Struct. Biol. 151, 250-262 (2005).
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a and b must be 2-D of the same shape, got {a.shape} and {b.shape}")
    h, w = a.shape
    win = window2d(a.shape, window)
    fa = np.fft.fft2((a - a.mean()) * win)
    fb = np.fft.fft2((b - b.mean()) * win)
    ring, n_rings = _rings(a.shape)
    keep = ring < n_rings
    ring = ring[keep]
    num = np.bincount(ring, weights=np.real(fa * np.conj(fb))[keep], minlength=n_rings)
    pa = np.bincount(ring, weights=(np.abs(fa) ** 2)[keep], minlength=n_rings)
    pb = np.bincount(ring, weights=(np.abs(fb) ** 2)[keep], minlength=n_rings)
    den = np.sqrt(pa * pb)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.arange(n_rings) / min(h, w), corr


def _rings(shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Each Fourier pixel's ring (1 frequency pixel, ``1 / min(H, W)``, wide) and the
    number of rings up to Nyquist (pixels beyond it, the corners, have larger indices)."""
    h, w = shape
    size = min(h, w)
    ring = np.rint(np.sqrt(np.fft.fftfreq(w)[None, :] ** 2 + np.fft.fftfreq(h)[:, None] ** 2) * size)
    return ring.astype(np.int64), size // 2 + 1


def frc_resolution(
    freq: np.ndarray, corr: np.ndarray, thresholds: Sequence[float] = FRC_THRESHOLDS
) -> tuple[float, ...]:
    """First frequency where the FRC drops below each threshold (cycles/pixel).

    Scanning rings from the lowest frequency, the crossing between the last ring at or
    above the threshold and the first ring below it is located by linear interpolation.
    The zero-frequency ring (DC alone, one Fourier pixel) carries no resolution
    information and is skipped, as are rings whose FRC is NaN (no power). NaN if the
    curve never drops below the threshold up to 0.5 cycles/pixel (resolution at or
    beyond Nyquist); the first ring's frequency if it starts below it.
    """
    freq = np.asarray(freq, dtype=np.float64)
    corr = np.asarray(corr, dtype=np.float64)
    return tuple(crossing(freq, corr, np.full_like(corr, t), rings=1, never=float("nan")) for t in thresholds)


def ring_pixels(shape: tuple[int, int]) -> np.ndarray:
    """The number of Fourier pixels in each ring of :func:`frc` for images of ``shape``."""
    ring, n_rings = _rings(shape)
    return np.bincount(ring[ring < n_rings], minlength=n_rings)


def half_bit(pixels: np.ndarray) -> np.ndarray:
    """The 1/2-bit threshold curve for rings of ``pixels`` Fourier pixels each (van Heel
    and Schatz 2005, eq. 17, for a data set split into two halves)::

        T(r) = (0.2071 + 1.9102 / sqrt(n_r)) / (1.2071 + 0.9102 / sqrt(n_r))

    It starts near 1 for the few pixels of the innermost rings and falls toward 0.1716,
    where the two halves together carry half a bit of information per Fourier pixel."""
    root = np.sqrt(np.maximum(np.asarray(pixels, dtype=np.float64), 1.0))
    return (0.2071 + 1.9102 / root) / (1.2071 + 0.9102 / root)


#: Rings in a row the FRC must stay below the 1/2-bit curve for a crossing: a dip of one
#: or two rings, which the rings' own noise makes where the curve runs near the threshold,
#: is not where the halves stop agreeing.
CROSSING_RINGS = 3


def crossing(
    freq: np.ndarray, corr: np.ndarray, threshold: np.ndarray, rings: int = CROSSING_RINGS, never: float = 0.5
) -> float:
    """First frequency (above 0; NaN rings skipped) from which ``corr`` stays below
    ``threshold`` (both per ring) for ``rings`` rings in a row (fewer at Nyquist),
    interpolated linearly between the ring before and the first below; ``never`` (0.5,
    Nyquist) when it never does, the first ring's frequency when it starts below.
    :func:`frc_resolution` is this with one ring and constant thresholds."""
    ok = np.isfinite(corr) & (freq > 0)
    f, d = freq[ok], corr[ok] - threshold[ok]
    below = d < 0
    for i in np.nonzero(below)[0]:
        if not below[i : i + rings].all():
            continue
        if i == 0:
            return float(f[0])
        return float(f[i - 1] + d[i - 1] / (d[i - 1] - d[i]) * (f[i] - f[i - 1]))
    return float(never)
