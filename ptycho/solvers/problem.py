"""What a conventional solver solves: one object's reconstruction problem (its patterns,
the probe, the positions, the object's shape and scanned region) and the geometry every
engine shares (the patches' windows, the illumination, the starts, the crop to the
scanned region). NumPy only: an engine (:mod:`ptycho.solvers.engines`) brings its own
arithmetic."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Problem:
    """One object's reconstruction problem.

    ``counts`` (P, N, N) photons, DC-centred; ``probe`` (N, N) already multiplied by the
    dataset's scale ``s``; ``positions`` (P, 2) patch centres ``[x, y]`` in object pixels
    (the patch centre index is ``N // 2``); ``shape`` the object's ``(S, S)``; ``region``
    ``[x0, y0, x1, y1)`` the scanned region a reconstruction is cropped to.
    """

    counts: np.ndarray
    probe: np.ndarray
    positions: np.ndarray
    shape: tuple[int, int]
    region: tuple[int, int, int, int]
    eps: float = 1e-6

    def __post_init__(self) -> None:
        counts, probe, pos = self.counts, self.probe, self.positions
        if probe is None or np.ndim(probe) != 2 or probe.shape[0] != probe.shape[1]:
            raise ValueError("the solver needs the probe as an (N, N) array; this data has none")
        n = probe.shape[0]
        if counts.ndim != 3 or counts.shape[1:] != (n, n):
            raise ValueError(f"diffraction patterns of shape {counts.shape[1:]} do not match the {n}x{n} probe")
        if not np.isfinite(counts).all() or (counts < 0).any():
            raise ValueError("the diffraction counts contain NaN, infinite or negative values")
        if not np.isfinite(probe).all() or not np.abs(probe).max() > 0:
            raise ValueError("the probe is zero or not finite")
        if pos.shape != (len(counts), 2) or not np.isfinite(pos).all():
            raise ValueError(f"positions must be {len(counts)} finite [x, y] pairs, got shape {pos.shape}")
        self.windows  # noqa: B018 - positions inside the object, checked (and kept) once

    @property
    def n(self) -> int:
        return self.probe.shape[0]

    @cached_property
    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`windows` of this problem's positions (computed once)."""
        return windows(self.positions, self.n, self.shape)

    @property
    def subpixel(self) -> bool:
        return bool(np.any(self.positions != np.rint(self.positions)))


def problems(ds) -> list[Problem]:
    """One :class:`Problem` per object of a dataset (ValueError on data a solver cannot use)."""
    probe = (ds.scale * ds.probe).astype(np.complex64)
    counts = ds.counts
    shape = tuple(int(v) for v in ds.objects.shape[1:])
    out = []
    for m in range(ds.objects.shape[0]):
        sel = ds.position_object == m
        region = tuple(int(v) for v in ds.scan_region[m])
        out.append(Problem(counts[sel], probe, ds.positions[sel].astype(np.float64), shape, region))
    return out


def joint_problem(ds) -> Problem:
    """Every object of a dataset as one :class:`Problem` (the objects side by side, each
    scan moved with its object): what refines one probe from all the patterns of a
    dataset, whose objects are seen through the same beam. Its ``region`` is the whole."""
    probs = problems(ds)
    if len(probs) == 1:
        return probs[0]
    h, w = probs[0].shape
    positions = np.concatenate([p.positions + [m * w, 0.0] for m, p in enumerate(probs)])
    counts = np.concatenate([p.counts for p in probs])
    return Problem(counts, probs[0].probe, positions, (h, w * len(probs)), (0, 0, w * len(probs), h))


def windows(positions: np.ndarray, n: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Top-left corners ``[x0, y0]`` of each pattern's ``n x n`` patch (at the rounded
    position) and the sub-pixel remainders ``position - round(position)``.

    ValueError naming the first pattern whose patch leaves the object.
    """
    ipos = np.rint(positions).astype(np.int64)
    corner = ipos - n // 2
    h, w = shape
    bad = (corner[:, 0] < 0) | (corner[:, 1] < 0) | (corner[:, 0] + n > w) | (corner[:, 1] + n > h)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"pattern {k} at position {positions[k].tolist()} reaches outside the {w}x{h} object "
            f"({int(bad.sum())} such patterns); positions are [x, y] patch centres in object pixels"
        )
    return corner, (positions - ipos).astype(np.float32)


def illumination(problem: Problem) -> np.ndarray:
    """``I(r) = sum_k |s P(r - r_k)|^2`` on the object grid (at the rounded positions)."""
    corner, _ = problem.windows
    out = np.zeros(problem.shape, np.float64)
    power = np.abs(problem.probe.astype(np.complex128)) ** 2
    n = problem.n
    for x0, y0 in corner:
        out[y0 : y0 + n, x0 : x0 + n] += power
    return out


def flat_start(problem: Problem) -> np.ndarray:
    """A unit object: no prior at all."""
    return np.ones(problem.shape, np.complex64)


def warm_start(problem: Problem, image: np.ndarray) -> np.ndarray:
    """A start from a reconstruction of the scanned region (e.g. a network's stitched
    object): placed into the region, the rest set to its median amplitude.

    Its global scale is not trusted (networks learn amplitude up to a factor): the
    solver rescales any start so that it predicts the measured total count
    (:meth:`ptycho.solvers.engines.IterativeSolver.rescaled`).
    """
    x0, y0, x1, y1 = problem.region
    if image.shape != (y1 - y0, x1 - x0):
        raise ValueError(
            f"a start of shape {image.shape} does not fit the scanned region {y1 - y0}x{x1 - x0} of this data; "
            "use a reconstruction stitched from the same dataset"
        )
    if not np.isfinite(image).all():
        raise ValueError("the start contains NaN or infinite values")
    out = np.full(problem.shape, np.median(np.abs(image)), np.complex64)
    out[y0:y1, x0:x1] = image
    return out


def crop(problem: Problem, obj: np.ndarray) -> np.ndarray:
    """The scanned region of a full object: what is stitched and scored."""
    x0, y0, x1, y1 = problem.region
    return obj[y0:y1, x0:x1]
