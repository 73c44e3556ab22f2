"""The simulated datasets as CXI 1.6 files, the field's HDF5 convention for ptychography.

CXI (Coherent X-ray Imaging data bank, format 1.6) is what ptychodus reads and writes
and what NeXus ``NXcxi_ptycho`` follows. The simulation works in pixels; CXI wants
metres and joules, so :class:`CxiGeometry` (config section ``cxi``) states the physical
set-up the simulation stands for. The object-plane pixel of a far-field geometry is

    dx = wavelength * distance / (N * detector_pixel)

(N x N detector pixels), and positions in object pixels become metres by ``* dx``.

Layout written (``entry_1/...``; NeXus classes in the ``NX_class`` attributes). Images
follow ptychodus's CXI reader (checked against ptychodus 1.7): ``image_1`` is the probe
and ``image_2`` the object, so ptychodus opens the file as a diffraction dataset and as
a product (probe, object, positions) with the ground truth as the object.

==========================================  ============================================
``cxi_version``                             160 (format 1.6), at the root
``instrument_1/source_1/energy``            photon energy, J (CXI's unit)
``instrument_1/source_1/illumination``      soft link to ``image_1/data``, the probe
``instrument_1/detector_1/data``            intensities (P, N, N): photon counts
                                            (uint32) or, for sqrt-count datasets, the
                                            amplitudes squared in float64 (exactly
                                            invertible); DC at the centre
``instrument_1/detector_1/distance``        sample-detector distance, m
``instrument_1/detector_1/x_pixel_size``    detector pixel, m (also ``y_pixel_size``)
``sample_1/geometry_1/translation``         (P, 3) m: [x, y, 0] = [column, row, 0] of
                                            each probe position on the object times dx,
                                            as ptychodus reads them
``data_1/data``, ``data_1/translation``     soft links to the two above
``image_1/data``, ``image_1/image_size``    the probe (N, N) complex64; its extent, m
``image_2/data``, ``image_2/image_size``    the ground-truth object(s) (M, S, S)
                                            complex64; the extent of one, m
``ptycho_1/``                               this project's extras, not CXI: positions
                                            in pixels (exact), which object each
                                            position scans, the groups and their
                                            offsets, scan regions, the forward model's
                                            scale, units and the dataset's attributes
==========================================  ============================================

:func:`import_cxi` reads such a file back into the identical :class:`~ptycho.data.Dataset`
(same digest), and a CXI file from elsewhere (no ``ptycho_1``) from its CXI fields the
way :mod:`ptycho.npz` imports an NPZ: amplitudes = sqrt(intensities), positions =
translation / dx, the scale estimated from object and probe.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ptycho.data import Dataset
from ptycho.errors import ConfigError, DatasetError

CXI_VERSION = 160
#: h * c / e: wavelength in metres times photon energy in eV.
HC_EV_M = 1.239841984e-6
#: The elementary charge: joules per electronvolt.
EV_J = 1.602176634e-19
EXTRAS = "entry_1/ptycho_1"


@dataclass(frozen=True)
class CxiGeometry:
    """The physical set-up the simulated pixels stand for (config section ``cxi``).

    energy_ev: photon energy, eV (8 keV: wavelength 0.155 nm).
    detector_distance_m: sample to detector, m.
    detector_pixel_m: side of a (square) detector pixel, m.
    """

    energy_ev: float = 8000.0
    detector_distance_m: float = 2.0
    detector_pixel_m: float = 75e-6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"config key 'cxi.{f.name}' = {value!r} must be a positive finite number "
                                  f"(default {f.default})")

    @property
    def wavelength_m(self) -> float:
        return HC_EV_M / self.energy_ev

    def object_pixel_m(self, n: int) -> float:
        """The object-plane pixel of a far-field geometry with an ``n`` x ``n`` detector."""
        return self.wavelength_m * self.detector_distance_m / (n * self.detector_pixel_m)


def export_cxi(ds: Dataset, path: str | os.PathLike, geometry: CxiGeometry = CxiGeometry()) -> None:
    """Write ``ds`` as a CXI 1.6 file at ``path``, atomically (see the module's layout)."""
    import h5py

    from ptycho.artifacts import atomic_write

    n = ds.probe.shape[0]
    dx = geometry.object_pixel_m(n)
    if ds.units == "counts":
        intensities = ds.diffraction
    else:
        intensities = ds.diffraction.astype(np.float64) ** 2  # exact: float32 squared fits float64
    translation = np.zeros((len(ds.positions), 3))
    translation[:, :2] = ds.positions * dx

    def group(parent, name: str, nx_class: str):
        g = parent.create_group(name)
        g.attrs["NX_class"] = nx_class
        return g

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("cxi_version", data=CXI_VERSION)
            entry = group(f, "entry_1", "NXentry")
            entry.create_dataset("title", data=f"ptycho simulated dataset ({ds.attrs.get('split', '')})")
            instrument = group(entry, "instrument_1", "NXinstrument")
            source = group(instrument, "source_1", "NXsource")
            source.create_dataset("energy", data=geometry.energy_ev * EV_J).attrs["units"] = "J"
            # The probe is image_1 (ptychodus's product layout), linked as the source's illumination.
            probe = group(entry, "image_1", "NXdata")
            probe.create_dataset("data", data=ds.probe.astype(np.complex64)).attrs.update(
                data_space="real", data_type="probe")
            probe.create_dataset("image_size", data=[n * dx, n * dx]).attrs["units"] = "m"
            source["illumination"] = h5py.SoftLink("/entry_1/image_1/data")
            detector = group(instrument, "detector_1", "NXdetector")
            detector.create_dataset("data", data=intensities, compression="gzip", shuffle=True)
            for name, value in (("distance", geometry.detector_distance_m), ("x_pixel_size", geometry.detector_pixel_m),
                                ("y_pixel_size", geometry.detector_pixel_m)):
                detector.create_dataset(name, data=value).attrs["units"] = "m"
            sample = group(entry, "sample_1", "NXsample")
            geometry_1 = group(sample, "geometry_1", "NXgeometry")
            geometry_1.create_dataset("translation", data=translation).attrs["units"] = "m"
            data_1 = group(entry, "data_1", "NXdata")
            data_1["data"] = h5py.SoftLink("/entry_1/instrument_1/detector_1/data")
            data_1["translation"] = h5py.SoftLink("/entry_1/sample_1/geometry_1/translation")
            image = group(entry, "image_2", "NXdata")
            image.create_dataset("data", data=ds.objects.astype(np.complex64)).attrs.update(
                data_space="real", data_type="transmission function")
            side = ds.objects.shape[-1] * dx
            image.create_dataset("image_size", data=[side, side]).attrs["units"] = "m"
            extras = group(entry, "ptycho_1", "NXnote")
            extras.attrs["description"] = "ptycho's own fields (not CXI): exact positions, grouping, scale, attributes"
            for name in ("positions", "position_object", "groups", "group_offsets", "scan_region"):
                extras.create_dataset(name, data=getattr(ds, name))
            extras.create_dataset("scale", data=ds.scale)
            extras.create_dataset("units", data=ds.units)
            extras.create_dataset("diffraction_dtype", data=str(ds.diffraction.dtype))
            extras.create_dataset("attrs", data=json.dumps(ds.attrs, sort_keys=True, default=str))
            extras.create_dataset("geometry", data=json.dumps(asdict(geometry)))

    atomic_write(path, write)  # a failure leaves the old file or none, with a one-line PtychoError


def _read(f, path: str, where: str) -> np.ndarray:
    if path not in f:
        raise DatasetError(f"{where}: no '{path}' in this CXI file; it needs detector data, translation and "
                           "illumination (CXI 1.6 layout, see 'ptycho export-cxi')")
    return f[path][()]


def import_cxi(path: str | os.PathLike, gridsize: int = 1, split: str = "train") -> Dataset:
    """Read a CXI 1.6 file into a :class:`Dataset` (exactly the exported one when it has ``ptycho_1``)."""
    import h5py

    where = str(path)
    try:
        f = h5py.File(where, "r")
    except FileNotFoundError:
        raise DatasetError(f"{where}: no such file") from None
    except OSError:
        raise DatasetError(f"{where}: not an HDF5 file, so not CXI; export it again") from None
    with f:
        if "cxi_version" not in f or "entry_1" not in f:
            raise DatasetError(f"{where}: not a CXI file (no cxi_version or entry_1 at the root); "
                               "pass a CXI 1.6 file, e.g. one written by 'ptycho export-cxi'")
        intensities = _read(f, "entry_1/instrument_1/detector_1/data", where)
        translation = _read(f, "entry_1/sample_1/geometry_1/translation", where)
        probe = _read(f, "entry_1/instrument_1/source_1/illumination", where).astype(np.complex64)
        if intensities.ndim != 3 or intensities.shape[1:] != probe.shape or translation.shape != (len(intensities), 3):
            raise DatasetError(f"{where}: detector data {intensities.shape}, illumination {probe.shape} and translation "
                               f"{translation.shape} do not fit (P, N, N), (N, N), (P, 3); the file is inconsistent")
        if EXTRAS in f:
            return _own_dataset(f[EXTRAS], intensities, probe, f["entry_1/image_2/data"][()])
        geometry = CxiGeometry(
            energy_ev=float(_read(f, "entry_1/instrument_1/source_1/energy", where)) / EV_J,
            detector_distance_m=float(_read(f, "entry_1/instrument_1/detector_1/distance", where)),
            detector_pixel_m=float(_read(f, "entry_1/instrument_1/detector_1/x_pixel_size", where)),
        )
        obj = _read(f, "entry_1/image_2/data", where)
    from ptycho.npz import dataset_from_arrays

    positions = translation[:, :2] / geometry.object_pixel_m(probe.shape[0])
    amplitude = np.sqrt(np.maximum(intensities.astype(np.float64), 0)).astype(np.float32)
    obj = obj[0] if obj.ndim == 3 else obj
    return dataset_from_arrays(where, amplitude, probe, obj.astype(np.complex64), positions, gridsize, split)


def _own_dataset(extras: Any, intensities: np.ndarray, probe: np.ndarray, objects: np.ndarray) -> Dataset:
    units = extras["units"][()].decode()
    dtype = np.dtype(extras["diffraction_dtype"][()].decode())
    diffraction = intensities if units == "counts" else np.sqrt(intensities)
    return Dataset(
        diffraction=diffraction.astype(dtype),
        probe=probe,
        objects=objects.astype(np.complex64),
        positions=extras["positions"][()],
        position_object=extras["position_object"][()],
        groups=extras["groups"][()],
        group_offsets=extras["group_offsets"][()],
        scan_region=extras["scan_region"][()],
        scale=float(extras["scale"][()]),
        units=units,
        attrs=json.loads(extras["attrs"][()]),
    )
