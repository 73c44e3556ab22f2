"""The dataset file's layout (schema version 1, docs/dataset-format.md): its names, its
content digest, and the checks of a file against it: the header, the arrays' shapes and
dtypes against each other and the attributes (before anything is read), and the values
once read (finiteness, ranges, cross-references, the digest). Each problem is one
:class:`~ptycho.errors.DatasetError` line that names the file and the fix.
:mod:`ptycho.data.dataset` reads and writes the file and runs them on every read and write."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

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


def centre_range(n: int, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """Integer patch centres allowed by :func:`patches_outside`: x0, x1, y0, y1 (inclusive)."""
    return n // 2, shape[1] - n + n // 2, n // 2, shape[0] - n + n // 2


def check_header(path: str, attrs: dict[str, Any]) -> None:
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


def fail_file(path: str, msg: str) -> None:
    fix = "" if ";" in msg else "; the file is invalid, re-create it ('ptycho simulate' or 'ptycho import-npz')"
    raise DatasetError(f"{path}: {msg}{fix}")


def check_layout(path: str, shapes: dict[str, tuple], dtypes: dict[str, np.dtype], attrs: dict[str, Any]) -> None:
    """The checks that need no data: every array's shape and dtype, against each other and
    the attributes. Run on the declared shapes before anything is read, so that a file
    whose arrays cannot fit is refused at once, not after decompressing gigabytes."""
    units = attrs["units"]
    if units not in UNITS:
        fail_file(path, f"attribute units={units!r} unknown; expected one of {UNITS}")
    d, probe, obj = shapes["diffraction"], shapes["probe"], shapes["objects"]
    if len(probe) != 2 or probe[0] != probe[1] or probe[0] % 2:
        fail_file(path, f"probe has shape {probe}; expected (N, N) with N even")
    n = probe[0]
    if attrs["n"] != n:
        fail_file(path, f"attribute n={attrs['n']} disagrees with the probe size {n}")
    if len(d) != 3 or d[1:] != (n, n) or d[0] == 0:
        fail_file(path, f"diffraction has shape {d}; expected (P, {n}, {n}) with P > 0")
    expected_dtype = np.uint32 if units == "counts" else np.float32
    if dtypes["diffraction"] != expected_dtype:
        fail_file(
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
            fail_file(path, f"{name} has dtype {dtypes[name]}; expected {np.dtype(want)}")
    if len(obj) != 3 or obj[0] == 0:
        fail_file(path, f"objects has shape {obj}; expected (M, H, W) with M > 0")
    p, m = d[0], obj[0]
    if shapes["positions"] != (p, 2):
        fail_file(path, f"positions has shape {shapes['positions']}; expected ({p}, 2) to match diffraction")
    if shapes["position_object"] != (p,):
        fail_file(path, f"position_object has shape {shapes['position_object']}; expected ({p},)")
    groups, gs = shapes["groups"], attrs["gridsize"]
    c = gs * gs
    if len(groups) != 2 or groups[1] != c or groups[0] == 0:
        fail_file(path, f"groups has shape {groups}; expected (G, {c}) for gridsize {gs}")
    if shapes["group_offsets"] != groups + (2,):
        fail_file(path, f"group_offsets has shape {shapes['group_offsets']}; expected {groups + (2,)}")
    if shapes["scan_region"] != (m, 4):
        fail_file(path, f"scan_region has shape {shapes['scan_region']}; expected ({m}, 4)")


def validate(path: str, a: dict[str, np.ndarray], attrs: dict[str, Any], check_digest: bool) -> None:
    """Shapes, dtypes (:func:`check_layout`), finiteness, ranges, cross-references, digest."""

    def fail(msg: str) -> None:
        fail_file(path, msg)

    check_layout(path, {k: tuple(v.shape) for k, v in a.items()}, {k: v.dtype for k, v in a.items()}, attrs)
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
        lo_x, hi_x, lo_y, hi_y = centre_range(n, obj.shape[1:])
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
