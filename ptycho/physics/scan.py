"""Scan geometry: grid scan positions and their grouping (gridsize 1 or 2).

A *group* is the set of ``C = gridsize**2`` patterns one network sample sees. Group
centres lie on a grid of pitch ``stride``; within a group, patches sit on a
``gridsize x gridsize`` sub-grid of pitch ``spacing`` around the centre, so at
gridsize 2 the relative offsets are ``+-spacing/2`` (``+-2`` px for ``spacing = 4``).

Channel order inside a group is row-major: ``c = row * gridsize + col``.
The *relative offset* of a patch is ``group centroid - patch position`` (``[x, y]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scan:
    """Unique scan positions and how they are grouped.

    Attributes
    ----------
    positions : (P, 2) float64
        Patch centres ``[x, y]`` in object pixels, unique.
    groups : (G, C) int64
        Indices into ``positions``; ``groups[g, c]`` is channel ``c`` of group ``g``.
    offsets : (G, C, 2) float64
        ``centroid(g) - positions[groups[g, c]]``.
    """

    positions: np.ndarray
    groups: np.ndarray
    offsets: np.ndarray


def group_offsets(positions: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Relative offsets ``centroid - position`` for each patch of each group."""
    members = positions[groups]  # (G, C, 2)
    return members.mean(axis=1, keepdims=True) - members


def grid_scan(object_size: int, n: int, stride: int, gridsize: int = 1, spacing: int = 4) -> Scan:
    """Regular raster scan of an object of side ``object_size`` with patches of side ``n``.

    Every patch lies entirely inside the object. Positions shared by several groups
    (when ``stride <= spacing``) are stored once.
    """
    if gridsize < 1:
        raise ValueError("gridsize must be >= 1")
    # Sub-grid offsets relative to the group centre, in units of pixels.
    sub = (np.arange(gridsize) - (gridsize - 1) / 2.0) * spacing  # e.g. [-2, 2]
    half_extent = sub.max() if gridsize > 1 else 0.0
    lo = n // 2 + half_extent
    hi = object_size - (n - n // 2) - half_extent
    if hi < lo:
        raise ValueError(f"object_size {object_size} is too small for patches of {n} px at gridsize {gridsize}")
    centres_1d = lo + stride * np.arange(int(np.floor((hi - lo) / stride)) + 1)
    cy, cx = np.meshgrid(centres_1d, centres_1d, indexing="ij")
    centres = np.stack([cx.ravel(), cy.ravel()], axis=1)  # [x, y], row-major groups
    dy, dx = np.meshgrid(sub, sub, indexing="ij")
    rel = np.stack([dx.ravel(), dy.ravel()], axis=1)  # channel c = row * gridsize + col
    members = centres[:, None, :] + rel[None, :, :]  # (G, C, 2)
    positions, inverse = np.unique(members.reshape(-1, 2), axis=0, return_inverse=True)
    groups = inverse.reshape(members.shape[:2]).astype(np.int64)
    return Scan(positions=positions, groups=groups, offsets=group_offsets(positions, groups))


def nearest_neighbour_groups(positions: np.ndarray, gridsize: int) -> np.ndarray:
    """Group every position with its ``gridsize**2 - 1`` nearest neighbours.

    Used for scans that are not regular grids (imported data). Channels are ordered
    row-major by their place relative to the group centroid, as in :func:`grid_scan`.
    """
    from scipy.spatial import cKDTree

    c = gridsize * gridsize
    if c == 1:
        return np.arange(len(positions), dtype=np.int64)[:, None]
    if len(positions) < c:
        raise ValueError(f"need at least {c} positions to form groups of gridsize {gridsize}")
    _, idx = cKDTree(positions).query(positions, k=c)
    groups = np.asarray(idx, dtype=np.int64)
    # Order channels row-major: the ``gridsize`` members with the smallest y form row 0,
    # the next ``gridsize`` row 1, ...; each row is then ordered by x. (A plain sort by
    # (y, x) is wrong for jittered scans: a top-right member with a slightly smaller y
    # than the top-left one would become channel 0.)
    by_y = np.argsort(positions[groups][..., 1], axis=1, kind="stable")
    groups = np.take_along_axis(groups, by_y, axis=1).reshape(-1, gridsize, gridsize)
    by_x = np.argsort(positions[groups][..., 0], axis=2, kind="stable")
    return np.take_along_axis(groups, by_x, axis=2).reshape(-1, c)
