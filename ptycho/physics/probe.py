"""Illumination functions (probes), complex N x N, normalised to unit energy.

Normalisation: ``sum |P|^2 = 1``. This makes the probe's scale independent of N, so
the photon budget is set by the forward model's scale ``s`` alone.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

from ptycho.config import PROBE_KINDS  # noqa: E402,F401  (re-exported)


def _radius_grid(n: int) -> np.ndarray:
    """Distance (pixels) of each pixel from the array centre ``n // 2``."""
    idx = np.arange(n) - n // 2
    return np.hypot(idx[None, :], idx[:, None])


def disk_probe(n: int, radius: float | None = None, blur: float = 0.5) -> np.ndarray:
    """ "Ideal disk": a thresholded Gaussian window (a flat disk), lightly blurred.

    ``radius`` defaults to ``11 * n / 64`` px (the reference's 11 px at N = 64).
    Returns complex128 with zero phase, ``sum |P|^2 = 1``.
    """
    if radius is None:
        radius = 11.0 * n / 64.0
    r = _radius_grid(n)
    window = np.exp(-0.5 * (r / radius) ** 2)
    disk = (window >= np.exp(-0.5)).astype(np.float64)  # threshold at r = radius
    amp = gaussian_filter(disk, blur) if blur > 0 else disk
    return normalise(amp.astype(np.complex128))


def defocused_probe(n: int, radius: float | None = None, edge_phase: float = np.pi, blur: float = 0.5) -> np.ndarray:
    """Disk probe with a quadratic (defocus) phase, ``edge_phase`` radians at the rim.

    A curved wavefront spreads the diffraction over more detector pixels and breaks
    the flat-probe ambiguities, a harder and more realistic test than a flat disk.
    """
    if radius is None:
        radius = 11.0 * n / 64.0
    amp = np.abs(disk_probe(n, radius, blur))
    phase = edge_phase * (_radius_grid(n) / radius) ** 2
    return normalise(amp * np.exp(1j * phase))


def make_probe(kind: str, n: int, radius: float | None = None, edge_phase: float = np.pi) -> np.ndarray:
    """Probe by name (see :data:`PROBE_KINDS`)."""
    if kind == "disk":
        return disk_probe(n, radius)
    if kind == "defocused":
        return defocused_probe(n, radius, edge_phase)
    raise ValueError(f"unknown probe kind {kind!r}; expected one of {PROBE_KINDS}")


def normalise(probe: np.ndarray) -> np.ndarray:
    """Scale ``probe`` to unit energy, ``sum |P|^2 = 1``."""
    return probe / np.sqrt(np.sum(np.abs(probe) ** 2))
