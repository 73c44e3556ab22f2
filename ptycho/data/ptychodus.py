"""Reconstructions handed to ptychodus: its HDF5 product file (docs/ptychodus.md).

ptychodus (Argonne's ptychography GUI and workflow tool) opens a reconstruction as a
*product*: one HDF5 file holding the object, the probe, the scan positions, the losses
and the metadata, with the keys of its ``ptychodus.api.io`` (``ProductFileKeys``, version
1.7.0)::

    attrs   name, comments, detector_object_distance_m, photon_energy_eV (and the older
            probe_energy_eV), probe_photon_count, exposure_time_s, mass_attenuation_m2_per_kg
    probe_position_indexes (K,) int, probe_position_x_m (K,), probe_position_y_m (K,)
    probe   (1, 1, N, N) complex64, attrs pixel_width_m, pixel_height_m
    object  (1, H, W) complex64, attrs center_x_m, center_y_m, pixel_width_m, pixel_height_m
    object_layer_spacing_m (0,), loss_epochs (E,), loss_values (E,)

**Coordinates.** Positions are metres in one frame with the object: the object pixel
``(x, y)`` of this package (column, row of the whole object) is at ``(x d, y d)``, ``d``
the object pixel. ptychodus places the object's pixel ``(W - 1) / 2`` at ``center_x_m``
(and rows likewise), so the stitched region ``[x0, x1) x [y0, y1)`` has its centre at
``((x0 + (W - 1) / 2) d, (y0 + (H - 1) / 2) d)`` and a scan position ``x`` (a patch
centre, object pixels) lands on the image's column ``x - x0``, where it was stitched.
This package works in pixels: ``d`` comes from a far-field geometry (energy, distance,
detector pixel: the config's ``cxi`` section, as the CXI export uses), which the product's
comments say whether the data carried or the study assumed.

**The probe** is the one this package's forward model uses (:mod:`ptycho.physics.forward`):
the dataset's probe times its scale, so that ``|FFT2(P O)|^2 / N^2`` (an orthonormal
FFT) predicts the counts.

:func:`write_product` writes it atomically; :func:`read_product` reads the keys back (the
tests also read it with ptychodus's own reader, ``ptychodus.api.io.load_product``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["write_product", "read_product", "PRODUCT_KEYS"]

#: The keys a product holds (ptychodus 1.7.0 ``ProductFileKeys``): root attributes, datasets.
PRODUCT_KEYS = {
    "attrs": (
        "name",
        "comments",
        "detector_object_distance_m",
        "photon_energy_eV",
        "probe_energy_eV",
        "probe_photon_count",
        "exposure_time_s",
        "mass_attenuation_m2_per_kg",
    ),
    "datasets": (
        "probe_position_indexes",
        "probe_position_x_m",
        "probe_position_y_m",
        "probe",
        "object",
        "object_layer_spacing_m",
        "loss_epochs",
        "loss_values",
    ),
}


def write_product(
    path: str | os.PathLike,
    *,
    name: str,
    comments: str,
    obj: np.ndarray,
    region: Sequence[int],
    probe: np.ndarray,
    positions: np.ndarray,
    pixel_m: float,
    energy_ev: float,
    distance_m: float,
    losses: Sequence[tuple[int, float]] = (),
) -> None:
    """Write one object's reconstruction as a ptychodus product at ``path`` (atomically).

    ``obj`` is the stitched object of the scanned ``region`` ``[x0, y0, x1, y1)``,
    ``probe`` the forward model's (scale included), ``positions`` the scan's patch centres
    ``[x, y]`` in object pixels of the whole object, ``pixel_m`` the object pixel, and
    ``losses`` (epoch or iteration, value) pairs. ValueError on arrays that do not fit.
    """
    import h5py

    from ptycho.artifacts import atomic_write

    obj, probe, positions = np.asarray(obj), np.asarray(probe), np.asarray(positions, np.float64)
    x0, y0, x1, y1 = (int(v) for v in region)
    if obj.ndim != 2 or obj.shape != (y1 - y0, x1 - x0):
        raise ValueError(f"the object {obj.shape} is not the region {[x0, y0, x1, y1]}'s ({y1 - y0}, {x1 - x0})")
    if probe.ndim != 2 or positions.ndim != 2 or positions.shape[1] != 2:
        raise ValueError(f"expected an (N, N) probe and (K, 2) positions, got {probe.shape} and {positions.shape}")
    if not (np.isfinite(pixel_m) and pixel_m > 0):
        raise ValueError(f"the object pixel must be a positive length in metres, got {pixel_m}")
    h, w = obj.shape
    epochs = np.array([int(e) for e, _ in losses], dtype=np.int64)
    values = np.array([float(v) for _, v in losses], dtype=np.float64)

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as f:
            f.attrs.update(
                {
                    "name": name,
                    "comments": comments,
                    "detector_object_distance_m": float(distance_m),
                    "photon_energy_eV": float(energy_ev),
                    "probe_energy_eV": float(energy_ev),  # the name ptychodus read before 1.7
                    "probe_photon_count": 0.0,
                    "exposure_time_s": 0.0,
                    "mass_attenuation_m2_per_kg": 0.0,
                }
            )
            f["probe_position_indexes"] = np.arange(len(positions), dtype=np.int64)
            f["probe_position_x_m"] = positions[:, 0] * pixel_m
            f["probe_position_y_m"] = positions[:, 1] * pixel_m
            p = f.create_dataset("probe", data=probe.astype(np.complex64)[None, None])
            p.attrs.update({"pixel_width_m": pixel_m, "pixel_height_m": pixel_m})
            o = f.create_dataset("object", data=obj.astype(np.complex64)[None])
            o.attrs.update(
                {
                    "center_x_m": (x0 + (w - 1) / 2) * pixel_m,
                    "center_y_m": (y0 + (h - 1) / 2) * pixel_m,
                    "pixel_width_m": pixel_m,
                    "pixel_height_m": pixel_m,
                }
            )
            f["object_layer_spacing_m"] = np.zeros(0, dtype=np.float64)
            f["loss_epochs"] = epochs
            f["loss_values"] = values

    atomic_write(path, write, suffix=".h5")


def read_product(path: str | os.PathLike) -> dict[str, Any]:
    """A product's root attributes and datasets by their keys (:data:`PRODUCT_KEYS`), with
    the probe's and the object's attributes as ``probe_attrs`` and ``object_attrs``."""
    import h5py

    with h5py.File(path, "r") as f:
        out: dict[str, Any] = {"attrs": {k: f.attrs[k] for k in f.attrs}}
        for key in PRODUCT_KEYS["datasets"]:
            out[key] = f[key][()]
        out["probe_attrs"] = dict(f["probe"].attrs)
        out["object_attrs"] = dict(f["object"].attrs)
    return out
