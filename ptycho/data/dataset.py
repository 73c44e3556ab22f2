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
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ptycho import __version__
from ptycho.artifacts import atomic_write
from ptycho.errors import DatasetError

FORMAT = "ptycho-dataset"
SCHEMA_VERSION = 1
UNITS = ("counts", "sqrt_counts")
ARRAYS = (
    "diffraction",
    "probe",
    "objects",
    "positions",
    "position_object",
    "groups",
    "group_offsets",
    "scan_region",
)
#: Attributes every file must carry, with their Python type.
REQUIRED_ATTRS = {
    "format": str,
    "schema_version": int,
    "package_version": str,
    "n": int,
    "gridsize": int,
    "scale": float,
    "units": str,
    "nphotons": float,
    "split": str,
    "object_kind": str,
    "phase_kind": str,
    "probe_kind": str,
    "seed": int,
    "config": str,
    "digest": str,
}
#: Optional attribute: False for measured data without an object (reconstruct-only).
GROUND_TRUTH = "ground_truth"
#: The arrays whose last two axes are an image's sides (bounded by ptycho.data.untrusted.MAX_SIDE).
IMAGES = ("diffraction", "probe", "objects")


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


def content_digest(arrays: dict[str, np.ndarray], scale: float, units: str) -> str:
    """SHA-256 over every array (name, dtype, shape, little-endian bytes) and ``s``, units.

    Stable across machines and independent of HDF5 layout details, so identical
    simulations have identical digests and MLflow can track a dataset by it.
    """
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    h.update(f"scale|{float(scale)!r}|units|{units}".encode())
    return h.hexdigest()


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
    _validate(str(path), arrays, attrs, check_digest=False)

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
        _check_header(path, attrs)
        missing = [name for name in ARRAYS if name not in f]
        if missing:
            raise DatasetError(f"{path}: missing array '{missing[0]}'; the file is incomplete, re-create it")
        # Every declared shape is bounded before anything is read (ptycho.data.untrusted).
        budget = Budget(path)
        for name in ARRAYS:
            check_dataset(f[name], budget, f"array '{name}'", image=name in IMAGES)
        _check_layout(path, {k: tuple(f[k].shape) for k in ARRAYS}, {k: f[k].dtype for k in ARRAYS}, attrs)
        arrays = {name: f[name][()] for name in ARRAYS}
    _validate(path, arrays, attrs, check_digest=check_digest)
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
    _check_header(path, attrs)
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


def _check_header(path: str, attrs: dict[str, Any]) -> None:
    if attrs.get("format") != FORMAT:
        raise DatasetError(
            f"{path}: not a ptycho dataset (attribute format != {FORMAT!r}); convert it with 'python -m ptycho import-npz'"
        )
    version = attrs.get("schema_version")
    if not isinstance(version, int):
        raise DatasetError(f"{path}: attribute schema_version is missing or not an integer; re-create the file")
    if version > SCHEMA_VERSION:
        raise DatasetError(
            f"{path}: schema version {version} is newer than this ptycho supports ({SCHEMA_VERSION}); upgrade ptycho"
        )
    if version < 1:
        raise DatasetError(f"{path}: schema version {version} is invalid; re-create the file")
    for key, typ in REQUIRED_ATTRS.items():
        if key not in attrs:
            raise DatasetError(f"{path}: missing attribute '{key}'; the file is incomplete, re-create it")
        value = attrs[key]
        if typ is float and isinstance(value, int):
            continue
        if not isinstance(value, typ):
            raise DatasetError(f"{path}: attribute '{key}' should be {typ.__name__}, got {type(value).__name__}")


def _fail(path: str, msg: str) -> None:
    fix = "" if ";" in msg else "; the file is invalid, re-create it ('ptycho simulate' or 'ptycho import-npz')"
    raise DatasetError(f"{path}: {msg}{fix}")


def _check_layout(path: str, shapes: dict[str, tuple], dtypes: dict[str, np.dtype], attrs: dict[str, Any]) -> None:
    """The checks that need no data: every array's shape and dtype, against each other and
    the attributes. Run on the declared shapes before anything is read, so that a file
    whose arrays cannot fit is refused at once, not after decompressing gigabytes."""
    units = attrs["units"]
    if units not in UNITS:
        _fail(path, f"attribute units={units!r} unknown; expected one of {UNITS}")
    d, probe, obj = shapes["diffraction"], shapes["probe"], shapes["objects"]
    if len(probe) != 2 or probe[0] != probe[1] or probe[0] % 2:
        _fail(path, f"probe has shape {probe}; expected (N, N) with N even")
    n = probe[0]
    if attrs["n"] != n:
        _fail(path, f"attribute n={attrs['n']} disagrees with the probe size {n}")
    if len(d) != 3 or d[1:] != (n, n) or d[0] == 0:
        _fail(path, f"diffraction has shape {d}; expected (P, {n}, {n}) with P > 0")
    expected_dtype = np.uint32 if units == "counts" else np.float32
    if dtypes["diffraction"] != expected_dtype:
        _fail(
            path,
            f"diffraction has dtype {dtypes['diffraction']}; expected {np.dtype(expected_dtype)} for units={units}",
        )
    for name, want in (
        ("probe", np.complex64),
        ("objects", np.complex64),
        ("positions", np.float64),
        ("position_object", np.int64),
        ("groups", np.int64),
        ("group_offsets", np.float64),
        ("scan_region", np.int64),
    ):
        if dtypes[name] != want:
            _fail(path, f"{name} has dtype {dtypes[name]}; expected {np.dtype(want)}")
    if len(obj) != 3 or obj[0] == 0:
        _fail(path, f"objects has shape {obj}; expected (M, H, W) with M > 0")
    p, m = d[0], obj[0]
    if shapes["positions"] != (p, 2):
        _fail(path, f"positions has shape {shapes['positions']}; expected ({p}, 2) to match diffraction")
    if shapes["position_object"] != (p,):
        _fail(path, f"position_object has shape {shapes['position_object']}; expected ({p},)")
    groups, gs = shapes["groups"], attrs["gridsize"]
    c = gs * gs
    if len(groups) != 2 or groups[1] != c or groups[0] == 0:
        _fail(path, f"groups has shape {groups}; expected (G, {c}) for gridsize {gs}")
    if shapes["group_offsets"] != groups + (2,):
        _fail(path, f"group_offsets has shape {shapes['group_offsets']}; expected {groups + (2,)}")
    if shapes["scan_region"] != (m, 4):
        _fail(path, f"scan_region has shape {shapes['scan_region']}; expected ({m}, 4)")


def _validate(path: str, a: dict[str, np.ndarray], attrs: dict[str, Any], check_digest: bool) -> None:
    """Shapes, dtypes (:func:`_check_layout`), finiteness, ranges, cross-references, digest."""

    def fail(msg: str) -> None:
        _fail(path, msg)

    _check_layout(path, {k: tuple(v.shape) for k, v in a.items()}, {k: v.dtype for k, v in a.items()}, attrs)
    units = attrs["units"]
    d, probe, obj = a["diffraction"], a["probe"], a["objects"]
    n, p, m = probe.shape[0], d.shape[0], obj.shape[0]
    pos, pobj = a["positions"], a["position_object"]
    if pobj.size and (pobj.min() < 0 or pobj.max() >= m):
        fail(f"position_object refers to object {int(pobj.max())} but the file holds {m}")
    groups, offs = a["groups"], a["group_offsets"]
    if groups.min() < 0 or groups.max() >= p:
        fail(f"groups index position {int(groups.max())} but only {p} positions exist")
    region = a["scan_region"]
    if (
        (region[:, :2] < 0).any()
        or (region[:, 2] > obj.shape[2]).any()
        or (region[:, 3] > obj.shape[1]).any()
        or (region[:, 2:] <= region[:, :2]).any()
    ):
        fail("scan_region lies (partly) outside the object; expected 0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H")
    for name in ("diffraction", "probe", "objects", "positions", "group_offsets"):
        if not np.all(np.isfinite(a[name])):
            fail(f"{name} contains NaN or infinite values")
    if units == "sqrt_counts" and d.min() < 0:
        fail("diffraction contains negative values; sqrt-counts must be >= 0")
    if not d.any():
        # Nothing was measured: every normalisation divides by zero and training would
        # fail later on a NaN loss, blaming the learning rate.
        fail(
            f"diffraction holds no photons (all {p} patterns are zero); the measurement is empty: "
            "simulate with a larger nphotons or import the detector data that was recorded"
        )
    outside = patches_outside(pos, n, obj.shape[1:])
    if outside.any():
        bad = pos[outside]
        lo_x, hi_x, lo_y, hi_y = _centre_range(n, obj.shape[1:])
        fail(
            f"{int(outside.sum())} of {p} scan positions put a {n}-px patch outside the object "
            f"({obj.shape[2]} x {obj.shape[1]} px): x {bad[:, 0].min():.6g}..{bad[:, 0].max():.6g}, "
            f"y {bad[:, 1].min():.6g}..{bad[:, 1].max():.6g}, but patch centres [x, y] must lie within "
            f"x {lo_x}..{hi_x}, y {lo_y}..{hi_y}; fix the positions (object pixels) or re-create the file"
        )
    if GROUND_TRUTH in attrs and not isinstance(attrs[GROUND_TRUTH], bool | np.bool_):
        fail(f"attribute '{GROUND_TRUTH}' should be a boolean, got {type(attrs[GROUND_TRUTH]).__name__}")
    if attrs["config"]:
        from ptycho.data.untrusted import loads_json

        try:
            config = loads_json(attrs["config"], path, "attribute 'config'")
        except ValueError as exc:
            fail(f"attribute 'config' is not valid JSON ({exc}); set it to '{{}}' or re-create the file")
        if not isinstance(config, dict):
            fail(
                f"attribute 'config' is JSON {type(config).__name__}, not an object; set it to '{{}}' or re-create the file"
            )
    if not (np.isfinite(attrs["scale"]) and attrs["scale"] > 0):
        fail(f"attribute scale={attrs['scale']} must be a positive number")
    if np.abs(obj).max() > 1.0 + 1e-5:
        fail(f"objects has amplitude {float(np.abs(obj).max()):.4g} > 1; transmission amplitudes must be <= 1")
    mixed = pobj[groups]
    if np.any(mixed != mixed[:, :1]):
        fail("a group mixes positions from different objects")
    members = pos[groups]
    if not np.allclose(offs, members.mean(axis=1, keepdims=True) - members, atol=1e-6):
        fail("group_offsets disagree with positions (expected centroid - position)")
    if check_digest:
        actual = content_digest(a, attrs["scale"], units)
        if actual != attrs["digest"]:
            fail("content digest mismatch: the arrays were modified or corrupted; re-create the file")


def patches_outside(positions: np.ndarray, n: int, shape: tuple[int, int]) -> np.ndarray:
    """Which positions put their ``n``-px patch (partly) outside an object of ``shape`` (H, W).

    The rule of :func:`ptycho.physics.translate.extract_patches`, the forward model's
    crop: an integer position may touch the edge, a sub-pixel one needs a pixel of
    margin for its interpolation. A patch outside the object was never measured there;
    stitched, it lands outside the scored region and leaves an image of zeros.
    """
    pos = np.asarray(positions, dtype=np.float64).reshape(-1, 2)
    ipos = np.rint(pos)
    margin = np.where(np.any(pos != ipos, axis=1), 1, 0)[:, None]
    lo = ipos - n // 2 - margin
    hi = ipos - n // 2 + n + margin
    limit = np.array([shape[1], shape[0]])
    return np.any((lo < 0) | (hi > limit), axis=1)


def _centre_range(n: int, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """Integer patch centres allowed by :func:`patches_outside`: x0, x1, y0, y1 (inclusive)."""
    return n // 2, shape[1] - n + n // 2, n // 2, shape[0] - n + n // 2


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
