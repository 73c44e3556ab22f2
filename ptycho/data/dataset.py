"""The dataset file: one HDF5 layout, versioned, validated on every read.

Layout (schema version 1), documented in docs/dataset-format.md:

=====================  ====================  ==========================================
array                  shape, dtype          meaning
=====================  ====================  ==========================================
diffraction            (P, N, N) uint32      photon counts (units="counts"), or
                       or float32            sqrt-counts (units="sqrt_counts")
probe                  (N, N) complex64      illumination, sum |P|^2 = 1 for simulations
objects                (M, S, S) complex64   ground-truth objects
positions              (P, 2) float64        patch centres [x, y] in object pixels
position_object        (P,) int64            which object each position scans
groups                 (G, C) int64          indices into positions, C = gridsize^2
group_offsets          (G, C, 2) float64     group centroid - patch position
scan_region            (M, 4) int64          [x0, y0, x1, y1): the scanned region
=====================  ====================  ==========================================

Root attributes: ``format``, ``schema_version``, ``package_version``, ``n``,
``gridsize``, ``scale`` (the s of the forward model), ``units``, ``nphotons``,
``split``, ``object_kind``, ``phase_kind``, ``probe_kind``, ``seed``, ``config``
(resolved simulation config, JSON), ``digest`` (SHA-256, see :func:`content_digest`).

Optional root attribute ``ground_truth`` (bool, absent means true): false for measured
data imported without an object (``ptycho import-cxi`` of an experimental file). Such a
dataset is reconstruct-only: ``objects`` then holds zeros, a blank canvas whose extent
is the region the scan covers (positions are validated against it like any object), and
nothing can be scored against it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ptycho import __version__
from ptycho.artifacts import atomic_write
from ptycho.data.layout import (
    ARRAYS,
    FORMAT,
    GROUND_TRUTH,
    IMAGES,
    REQUIRED_ATTRS,
    SCHEMA_VERSION,
    UNITS,
    check_header,
    check_layout,
    content_digest,
    patches_outside,
    validate,
)
from ptycho.errors import DatasetError

__all__ = [
    "ARRAYS",
    "FORMAT",
    "GROUND_TRUTH",
    "IMAGES",
    "REQUIRED_ATTRS",
    "SCHEMA_VERSION",
    "UNITS",
    "Dataset",
    "canonical_arrays",
    "content_digest",
    "patches_outside",
    "read_attributes",
    "read_dataset",
    "scan_region",
    "summary",
    "write_dataset",
]


@dataclass(frozen=True)
class Dataset:
    """An in-memory dataset; arrays as in the module docstring.

    ``attrs`` holds the descriptive attributes (``split``, ``object_kind``, ``seed``,
    ``nphotons``, ``config`` ...). ``digest`` is recomputed on write and checked on read.
    """

    diffraction: np.ndarray
    probe: np.ndarray
    objects: np.ndarray
    positions: np.ndarray
    position_object: np.ndarray
    groups: np.ndarray
    group_offsets: np.ndarray
    scan_region: np.ndarray
    scale: float
    units: str = "counts"
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.probe.shape[0])

    @property
    def gridsize(self) -> int:
        return int(round(np.sqrt(self.groups.shape[1])))

    @property
    def amplitude(self) -> np.ndarray:
        """Measured far-field amplitude sqrt(counts), float32 ``(P, N, N)``."""
        if self.units == "counts":
            return np.sqrt(self.diffraction.astype(np.float32))
        return self.diffraction.astype(np.float32, copy=False)

    @property
    def counts(self) -> np.ndarray:
        """Measured intensity in photons, float32 ``(P, N, N)``."""
        if self.units == "counts":
            return self.diffraction.astype(np.float32)
        return np.square(self.diffraction.astype(np.float32))

    @property
    def has_ground_truth(self) -> bool:
        """Whether ``objects`` is a ground truth (False: measured data, reconstruct-only)."""
        return bool(self.attrs.get(GROUND_TRUTH, True))

    def ground_truth(self, m: int) -> np.ndarray:
        """Object ``m`` cropped to its scanned region (what reconstructions are scored on)."""
        if not self.has_ground_truth:
            raise DatasetError(
                "this dataset has no ground truth (measured data imported without an object); "
                "it can be reconstructed but not scored"
            )
        x0, y0, x1, y1 = (int(v) for v in self.scan_region[m])
        return self.objects[m, y0:y1, x0:x1]

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in ARRAYS}


def illuminated_radius(probe: np.ndarray, level: float = 0.1) -> float:
    """Largest distance (px) from the centre ``N//2`` where ``|P|^2 >= level * max|P|^2``."""
    intensity = np.abs(probe) ** 2
    n = probe.shape[0]
    idx = np.arange(n) - n // 2
    r = np.hypot(idx[None, :], idx[:, None])
    return float(r[intensity >= level * intensity.max()].max())


def scan_region(positions: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """Bounding box ``[x0, y0, x1, y1)`` of the illuminated region of a scan.

    The union of probe footprints is what the measurements constrain; its bounding box
    (scan positions +- the probe's :func:`illuminated_radius`) is the region a stitched
    reconstruction covers and the crop of the ground truth it is scored against. It is
    clipped to the central ``N/2`` that the models reconstruct.
    """
    n = probe.shape[0]
    radius = int(np.ceil(illuminated_radius(probe)))
    # The kept central n//2 spans p - n//4 .. p + (n//2 - n//4) - 1.
    lo = np.floor(positions.min(axis=0)).astype(np.int64) - min(radius, n // 4)
    hi = np.ceil(positions.max(axis=0)).astype(np.int64) + min(radius + 1, n // 2 - n // 4)
    return np.array([lo[0], lo[1], hi[0], hi[1]], dtype=np.int64)


def canonical_arrays(ds: Dataset) -> dict[str, np.ndarray]:
    """Arrays cast to the on-disk dtypes."""
    diff_dtype = np.uint32 if ds.units == "counts" else np.float32
    return {
        "diffraction": np.asarray(ds.diffraction, dtype=diff_dtype),
        "probe": np.asarray(ds.probe, dtype=np.complex64),
        "objects": np.asarray(ds.objects, dtype=np.complex64),
        "positions": np.asarray(ds.positions, dtype=np.float64),
        "position_object": np.asarray(ds.position_object, dtype=np.int64),
        "groups": np.asarray(ds.groups, dtype=np.int64),
        "group_offsets": np.asarray(ds.group_offsets, dtype=np.float64),
        "scan_region": np.asarray(ds.scan_region, dtype=np.int64),
    }


def write_dataset(path: str | os.PathLike, ds: Dataset) -> str:
    """Validate ``ds`` and write it atomically to ``path``; returns the digest.

    The file is written to a temporary name in the same folder and renamed into place,
    so an interrupted write never leaves a file that looks valid.
    """
    import h5py

    path = Path(path)
    arrays = canonical_arrays(ds)
    if ds.units not in UNITS:
        raise DatasetError(f"{path}: units {ds.units!r} unknown; use one of {UNITS}")
    digest = content_digest(arrays, ds.scale, ds.units)
    attrs = {k: v for k, v in ds.attrs.items() if k not in REQUIRED_ATTRS}
    attrs.update(
        {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "package_version": __version__,
            "n": ds.n,
            "gridsize": ds.gridsize,
            "scale": float(ds.scale),
            "units": ds.units,
            "digest": digest,
        }
    )
    for key, typ in REQUIRED_ATTRS.items():
        if key not in attrs:
            attrs[key] = ds.attrs.get(key, typ())
        attrs[key] = typ(attrs[key])
    validate(str(path), arrays, attrs, check_digest=False)

    def write(tmp: str) -> None:
        # No object timestamps anywhere (root group included), so identical content gives
        # byte-identical files.
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
        fcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
        with h5py.File(h5py.h5f.create(tmp.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)) as f:
            for name, arr in arrays.items():
                f.create_dataset(name, data=arr, track_times=False)
            for key, value in attrs.items():
                f.attrs[key] = value

    atomic_write(path, write)
    return digest


def read_dataset(path: str | os.PathLike, *, check_digest: bool = True) -> Dataset:
    """Read and fully validate a dataset; any problem is one-line :class:`DatasetError`."""

    from ptycho.data.untrusted import Budget, check_dataset

    path = str(path)
    with _opened(path) as f:
        attrs = _root_attributes(f, path)
        check_header(path, attrs)
        missing = [name for name in ARRAYS if name not in f]
        if missing:
            raise DatasetError(f"{path}: missing array '{missing[0]}'; the file is incomplete, re-create it")
        # Every declared shape is bounded before anything is read (ptycho.data.untrusted).
        budget = Budget(path)
        for name in ARRAYS:
            check_dataset(f[name], budget, f"array '{name}'", image=name in IMAGES)
        check_layout(path, {k: tuple(f[k].shape) for k in ARRAYS}, {k: f[k].dtype for k in ARRAYS}, attrs)
        arrays = {name: f[name][()] for name in ARRAYS}
    validate(path, arrays, attrs, check_digest=check_digest)
    return Dataset(
        **arrays,
        scale=float(attrs.pop("scale")),
        units=str(attrs.pop("units")),
        attrs=attrs,
    )


def read_attributes(path: str | os.PathLike) -> dict[str, Any]:
    """The root attributes of a dataset file, header-checked, without reading its arrays.

    For the cheap questions asked before a job reads the whole file (which dataset is
    it, by :func:`content_digest`; has it a ground truth); the job's own
    :func:`read_dataset` still validates everything. Problems are one-line
    :class:`DatasetError`, as for :func:`read_dataset`.
    """

    path = str(path)
    with _opened(path) as f:
        attrs = _root_attributes(f, path)
    check_header(path, attrs)
    return attrs


def _root_attributes(f: Any, path: str) -> dict[str, Any]:
    """The root attributes, each bounded before it is read (ptycho.data.untrusted)."""
    from ptycho.data.untrusted import read_attrs

    return {k: _py(v) for k, v in read_attrs(f, path).items()}


@contextlib.contextmanager
def _opened(path: str):
    """The dataset file open for reading; a missing or unreadable file (and any HDF5
    error while reading inside the block) is one-line :class:`DatasetError`. A file
    that would read other files (external storage, virtual datasets, external links)
    or holds a soft-link loop is refused before the block runs
    (:func:`ptycho.data.untrusted.check_hdf5`)."""
    import h5py

    from ptycho.data.untrusted import check_hdf5

    if not os.path.exists(path):
        raise DatasetError(f"{path}: no such file; create it with 'python -m ptycho simulate'")
    try:
        with h5py.File(path, "r") as f:
            check_hdf5(f, path)
            yield f
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetError(f"{path}: not a readable HDF5 file ({reason}); it may be truncated, re-create it") from None


def _py(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def summary(ds: Dataset) -> dict[str, Any]:
    """Human-oriented summary used by ``ptycho inspect``."""
    totals = ds.counts.sum(axis=(1, 2), dtype=np.float64)
    return {
        "shapes": {k: list(v.shape) for k, v in ds.arrays().items()},
        "attributes": {k: v for k, v in ds.attrs.items() if k != "config"},
        "scale": ds.scale,
        "units": ds.units,
        "counts_per_pattern": {
            "mean": float(totals.mean()),
            "std": float(totals.std()),
            "min": float(totals.min()),
            "max": float(totals.max()),
        },
        "max_pixel_count": float(ds.counts.max()),
        "ground_truth": ds.has_ground_truth,
        "config": json.loads(ds.attrs["config"]) if ds.attrs.get("config") else {},
    }
