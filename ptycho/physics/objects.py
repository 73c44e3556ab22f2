"""Synthetic test objects: complex transmission functions with amplitude in (0, 1].

Each generator returns a complex128 array ``amplitude * exp(1j * phase)``. The phase is
never left at zero by default: a zero phase makes every phase metric meaningless (the
reference method's ``grid_lines`` object had that defect).
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter, zoom

from ptycho.config import OBJECT_KINDS, PHASE_KINDS  # noqa: E402,F401  (re-exported)


def lines_image(size: int, rng: np.random.Generator, n_lines: int = 400) -> np.ndarray:
    """Blurred random-lines image of side ``size``, normalised to max 1 (float64).

    Draws ``n_lines`` one-pixel lines with uniformly random end points on a canvas of
    side ``2 * size``, blurs with ``gf(1) + 2 gf(5) + 5 gf(10)`` (multi-scale structure)
    and keeps the central ``size`` x ``size`` crop, so that lines cross the border the
    way they would in a larger sample.
    """
    from skimage.draw import line

    big = 2 * size
    canvas = np.zeros((big, big), dtype=np.float64)
    ends = rng.integers(0, big, size=(n_lines, 4))
    for r0, c0, r1, c1 in ends:
        rr, cc = line(int(r0), int(c0), int(r1), int(c1))
        canvas[rr, cc] = 1.0
    blurred = gaussian_filter(canvas, 1.0) + 2.0 * gaussian_filter(canvas, 5.0) + 5.0 * gaussian_filter(canvas, 10.0)
    start = (big - size) // 2
    crop = blurred[start : start + size, start : start + size]
    return crop / crop.max()


def gaussian_field(size: int, rng: np.random.Generator, correlation_px: float = 6.0) -> np.ndarray:
    """Smooth Gaussian random field of side ``size`` rescaled to [0, 1] (float64)."""
    noise = rng.standard_normal((size, size))
    field = gaussian_filter(noise, correlation_px, mode="wrap")
    return _rescale(field)


def natural_image(size: int, which: str = "camera") -> np.ndarray:
    """A grey-scale image shipped inside scikit-image, resized to ``size``, in [0, 1]."""
    from skimage import data

    loaders = {"camera": data.camera, "moon": data.moon, "coins": data.coins}
    img = np.asarray(loaders[which](), dtype=np.float64)
    side = min(img.shape)
    img = img[:side, :side]
    img = zoom(img, size / side, order=1)[:size, :size]
    return _rescale(img)


def _rescale(img: np.ndarray) -> np.ndarray:
    lo, hi = float(img.min()), float(img.max())
    if hi <= lo:
        return np.zeros_like(img)
    return (img - lo) / (hi - lo)


def phase_from(image01: np.ndarray, phase_range: float) -> np.ndarray:
    """Map an image in [0, 1] linearly onto ``[-phase_range/2, +phase_range/2]`` radians."""
    return (image01 - 0.5) * phase_range


def make_object(
    kind: str,
    size: int,
    rng: np.random.Generator,
    *,
    phase_kind: str = "lines",
    phase_range: float = np.pi,
    amplitude_floor: float = 0.0,
    n_lines: int = 400,
) -> np.ndarray:
    """Complex object of side ``size``.

    Parameters
    ----------
    kind : {"lines", "natural", "gaussian"}
        Amplitude pattern.
    phase_kind : {"lines", "amplitude", "zero"}
        ``"lines"``: an independent image of the same kind (lines -> a second lines
        image, natural -> a different photograph, gaussian -> an independent field);
        ``"amplitude"``: a smooth function of the amplitude; ``"zero"``: flat phase
        (only for comparison with the reference, phase metrics are then meaningless).
    phase_range : float
        Peak-to-peak phase in radians (default pi, i.e. [-pi/2, pi/2]).
    amplitude_floor : float
        Amplitude is mapped to ``floor + (1 - floor) * a`` so that no region is opaque
        (where the amplitude is zero the phase is undefined and unrecoverable).
    """
    if kind == "lines":
        amp = lines_image(size, rng, n_lines)
        second = lambda: lines_image(size, rng, n_lines)  # noqa: E731
    elif kind == "natural":
        amp = natural_image(size, "camera")
        second = lambda: natural_image(size, "moon")  # noqa: E731
    elif kind == "gaussian":
        amp = gaussian_field(size, rng)
        second = lambda: gaussian_field(size, rng)  # noqa: E731
    else:
        raise ValueError(f"unknown object kind {kind!r}; expected one of {OBJECT_KINDS}")

    if phase_kind == "lines":
        phase = phase_from(_rescale(second()), phase_range)
    elif phase_kind == "amplitude":
        phase = phase_from(_rescale(gaussian_filter(amp, 2.0)), phase_range)
    elif phase_kind == "zero":
        phase = np.zeros_like(amp)
    else:
        raise ValueError(f"unknown phase kind {phase_kind!r}; expected one of {PHASE_KINDS}")

    amp = amplitude_floor + (1.0 - amplitude_floor) * amp
    return amp * np.exp(1j * phase)
