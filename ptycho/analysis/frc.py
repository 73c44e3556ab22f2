"""Fourier ring correlation and its resolution crossings (docs/physics.md section 6).

:func:`frc` correlates two images ring by ring in Fourier space; :func:`frc_resolution`
reads off where the curve first drops below each threshold of :data:`FRC_THRESHOLDS`.
:func:`window2d` is the Tukey apodisation shared with registration
(:func:`ptycho.analysis.metrics.register`). The criteria are van Heel and Schatz's
(J. Struct. Biol. 151, 250-262, 2005).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["FRC_THRESHOLDS", "frc", "frc_resolution", "window2d"]

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
    size = min(h, w)
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.fftfreq(w)[None, :]
    ring = np.rint(np.sqrt(fx**2 + fy**2) * size).astype(np.int64)
    n_rings = size // 2 + 1
    keep = ring < n_rings
    ring = ring[keep]
    num = np.bincount(ring, weights=np.real(fa * np.conj(fb))[keep], minlength=n_rings)
    pa = np.bincount(ring, weights=(np.abs(fa) ** 2)[keep], minlength=n_rings)
    pb = np.bincount(ring, weights=(np.abs(fb) ** 2)[keep], minlength=n_rings)
    den = np.sqrt(pa * pb)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.arange(n_rings) / size, corr


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
    ok = np.isfinite(corr) & (freq > 0)
    f, c = freq[ok], corr[ok]
    out = []
    for t in thresholds:
        below = np.nonzero(c < t)[0]
        if below.size == 0:
            out.append(float("nan"))
            continue
        i = int(below[0])
        if i == 0:
            out.append(float(f[0]))
            continue
        f0, f1, c0, c1 = f[i - 1], f[i], c[i - 1], c[i]
        out.append(float(f0 + (c0 - t) / (c0 - c1) * (f1 - f0)))
    return tuple(out)
