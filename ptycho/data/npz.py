"""Interoperability with PtychoPINN-style NPZ files.

Those files hold far-field *amplitudes* (``diff3d`` or ``diffraction``, shape (P, N, N)),
``probeGuess`` (N, N), ``objectGuess`` (H, W) and scan centres ``xcoords``, ``ycoords``.
They carry no photon scale, so on import ``s`` is estimated by least squares from the
object and probe (``sum A^2 = s^2 sum |P O|^2`` summed over all patterns), which keeps the
forward model recomputable from the file alone. Pickled arrays are refused, and every
array's header is bounded before it is loaded (:func:`ptycho.data.untrusted.npz_headers`).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from ptycho.data.dataset import GROUND_TRUTH, Dataset, scan_region
from ptycho.errors import DatasetError
from ptycho.physics.scan import group_offsets, nearest_neighbour_groups
from ptycho.physics.translate import extract_patches

DIFFRACTION_KEYS = ("diff3d", "diffraction")


def import_npz(path: str | os.PathLike, gridsize: int = 1, split: str = "train") -> Dataset:
    """Read a PtychoPINN-style NPZ into a :class:`Dataset` (units ``sqrt_counts``)."""
    from ptycho.data.untrusted import Budget, npz_headers

    path = str(path)
    try:
        # The .npy headers first: np.load allocates what a header declares before reading.
        npz_headers(path, Budget(path), images=(*DIFFRACTION_KEYS, "probeGuess", "objectGuess"))
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise DatasetError(
                f"{path}: contains pickled (object) arrays, which are refused; re-save with plain arrays"
            ) from None
        raise DatasetError(f"{path}: not a readable NPZ file ({str(exc).splitlines()[0]})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DatasetError(
            f"{path}: not a readable NPZ file ({type(exc).__name__}); it may be truncated, copy or export it again"
        ) from None
    key = next((k for k in DIFFRACTION_KEYS if k in data), None)
    if key is None:
        raise DatasetError(f"{path}: no diffraction array; expected one of {', '.join(DIFFRACTION_KEYS)}")
    for needed in ("probeGuess", "objectGuess", "xcoords", "ycoords"):
        if needed not in data:
            raise DatasetError(f"{path}: missing array '{needed}'; PtychoPINN NPZ files need it")
    pos = np.stack([np.asarray(data["xcoords"], float).ravel(), np.asarray(data["ycoords"], float).ravel()], axis=1)
    return dataset_from_arrays(
        path,
        np.asarray(data[key], dtype=np.float32),
        np.asarray(data["probeGuess"]),
        np.asarray(data["objectGuess"]),
        pos,
        gridsize,
        split,
    )


def dataset_from_arrays(
    path: str,
    amp: np.ndarray,
    probe: np.ndarray,
    obj: np.ndarray | None,
    pos: np.ndarray,
    gridsize: int = 1,
    split: str = "train",
) -> Dataset:
    """A :class:`Dataset` (units ``sqrt_counts``) from another format's arrays, validated:
    far-field amplitudes (P, N, N), probe (N, N), one object, positions [x, y] in object
    pixels. The photon scale is estimated as the module says. Used by NPZ and CXI import.

    ``obj=None`` is measured data with no ground truth (an experimental CXI file): the
    dataset is reconstruct-only (attribute ``ground_truth`` false). Its object is a blank
    (zero) canvas just large enough for every patch, the positions are moved by a whole
    number of pixels onto it (the shift is recorded in the ``config`` attribute as
    ``position_origin_px``), and ``s`` is estimated with a unit-amplitude object,
    ``sum A^2 = s^2 P sum |P|^2``: exact for a pure phase object, and only the starting
    value of the PINN's trainable scale.
    """
    amp = np.asarray(amp, dtype=np.float32)
    probe = np.asarray(probe, dtype=np.complex64)
    measured_only = obj is None
    origin = np.zeros(2)
    if measured_only:
        pos = np.asarray(pos, dtype=np.float64)
        if probe.ndim == 2 and len(pos) and np.all(np.isfinite(pos)):
            obj, origin = _blank_canvas(path, pos, probe.shape[0])
            pos = pos - origin
        else:
            obj = np.zeros((1, 1), np.complex64)  # the checks below say what is wrong
    obj = np.asarray(obj, dtype=np.complex64)
    amax = float(np.abs(obj).max()) if obj.size else 0.0
    if amax > 1:
        # Transmission amplitudes are <= 1; the scale s below absorbs the factor, so the
        # forward model recomputed from the stored object still matches the amplitudes.
        obj = obj / np.float32(amax)
    if amp.ndim != 3 or amp.shape[1:] != probe.shape:
        raise DatasetError(
            f"{path}: the diffraction data has shape {amp.shape}; expected (P, N, N) with N = probe size {probe.shape}"
        )
    if len(pos) != len(amp):
        raise DatasetError(
            f"{path}: {len(pos)} scan positions for {len(amp)} diffraction patterns; "
            "there must be one position per pattern"
        )
    if not (np.all(np.isfinite(amp)) and np.all(np.isfinite(pos))):
        raise DatasetError(
            f"{path}: the diffraction data or positions contain NaN or infinite values; remove or repair those patterns"
        )
    if amp.min() < 0:
        raise DatasetError(
            f"{path}: the diffraction data has negative values; it must hold amplitudes (sqrt of intensity)"
        )
    n = probe.shape[0]
    try:
        patches = extract_patches(obj.astype(np.complex128), pos, n)
    except ValueError:
        raise DatasetError(
            f"{path}: a scan position lies too close to the edge of the object for {n}-px patches"
        ) from None
    if measured_only:
        patches = np.ones_like(patches)
    model = np.sum(np.abs(probe[None].astype(np.complex128) * patches) ** 2)
    scale = float(np.sqrt(np.sum(amp.astype(np.float64) ** 2) / model)) if model > 0 else 1.0
    groups = nearest_neighbour_groups(pos, gridsize)
    return Dataset(
        diffraction=amp,
        probe=probe,
        objects=obj[None],
        positions=pos,
        position_object=np.zeros(len(pos), dtype=np.int64),
        groups=groups,
        group_offsets=group_offsets(pos, groups),
        scan_region=scan_region(pos, probe)[None],
        scale=scale,
        units="sqrt_counts",
        attrs={
            "nphotons": float(np.mean(np.sum(amp.astype(np.float64) ** 2, axis=(1, 2)))),
            "split": split,
            "object_kind": "imported",
            "phase_kind": "imported",
            "probe_kind": "imported",
            "seed": 0,
            "config": json.dumps(
                {"imported_from": Path(path).name, "gridsize": gridsize, "scale": "estimated"}
                | ({"ground_truth": False, "position_origin_px": origin.tolist()} if measured_only else {})
            ),
            **({GROUND_TRUTH: False} if measured_only else {}),
        },
    )


#: How much wider than its patterns' own area a measured scan may spread (object pixels
#: over P n^2) before it is refused, before any canvas is allocated: overlapping patterns
#: cover less than P n^2; 4 leaves room for sparse scans and a margin.
SCAN_SPREAD_LIMIT = 4.0


def _blank_canvas(path: str, pos: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A zero object that holds every ``n``-px patch at ``pos``, and the whole-pixel
    origin ``[x, y]`` to subtract from the positions to put them on it (one pixel of
    margin for sub-pixel positions, as :func:`~ptycho.data.dataset.patches_outside`)."""
    from ptycho.data.untrusted import MAX_SIDE, Budget, human

    origin = np.floor(pos.min(axis=0)) - n // 2 - 1
    hi = np.ceil(pos.max(axis=0) - origin) - n // 2 + n + 1
    if not (hi <= MAX_SIDE).all():
        raise DatasetError(
            f"{path}: the scan spans {hi[0]:.6g} x {hi[1]:.6g} object pixels, more than the {MAX_SIDE} per side "
            f"ptycho reads (a blank object of {human(8 * float(hi[0]) * float(hi[1]))}); check the positions' "
            "units (CXI: metres) and the geometry (energy, detector distance, pixel size) that convert them to pixels"
        )
    area, covered = float(hi[0]) * float(hi[1]), len(pos) * n * n
    if area > SCAN_SPREAD_LIMIT * covered + (n + 2) ** 2:
        # P patterns of n x n px cover at most P n^2 object pixels, and ptychography needs
        # them to overlap: a scan spread far wider cannot be one (a unit error, a glitch)
        raise DatasetError(
            f"{path}: the scan spans {hi[0]:.6g} x {hi[1]:.6g} object pixels, {area / covered:.3g} times the area its "
            f"{len(pos)} patterns of {n} px can cover, so they cannot overlap; check for a position far from the others "
            "and the positions' units (CXI: metres) and the geometry (energy, detector distance, pixel size)"
        )
    width, height = (int(v) for v in hi)
    Budget(path).take("the scan's blank object", (height, width), np.complex64, verb="needs shape")
    return np.zeros((height, width), np.complex64), origin


def export_npz(ds: Dataset, path: str | os.PathLike) -> None:
    """Write ``ds`` (object 0) as a PtychoPINN-style NPZ, atomically."""
    from ptycho.artifacts import atomic_write

    if ds.objects.shape[0] != 1:
        raise DatasetError(f"{path}: PtychoPINN NPZ holds one object; this dataset has {ds.objects.shape[0]}")

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(
                fh,
                diff3d=ds.amplitude,
                probeGuess=ds.probe,
                objectGuess=ds.objects[0],
                xcoords=ds.positions[:, 0],
                ycoords=ds.positions[:, 1],
                scale=np.float64(ds.scale),
            )

    atomic_write(path, write)
