"""The simulated datasets as CXI 1.6 files, the field's HDF5 convention for ptychography.

CXI (Coherent X-ray Imaging data bank, format 1.6) is what ptychodus reads and writes
and what NeXus ``NXcxi_ptycho`` follows. The simulation works in pixels; CXI wants SI
units with no exception (metres, joules), so :class:`CxiGeometry` (config section
``cxi``) states the physical set-up the simulation stands for. The object-plane pixel of
a far-field geometry is

    dx = wavelength * distance / (N * detector_pixel),   wavelength = h c / energy

(N x N detector pixels), and positions in object pixels become metres by ``* dx``.

Layout written (``entry_1/...``; NeXus classes in the ``NX_class`` attributes). Images
follow ptychodus's CXI reader (checked against ptychodus 1.7): ``image_1`` is the probe
and ``image_2`` the object, so ptychodus opens the file as a diffraction dataset and as
a product (probe, object, positions) with the ground truth as the object.

=============================================  =========================================
``cxi_version`` (root dataset)                 160 (format 1.6 times 100)
``title``, ``program_name``                    what the file is, which ptycho wrote it
``instrument_1/source_1/energy``               photon energy, J (eV x 1.602176634e-19)
``instrument_1/source_1/probe``                soft link to ``image_1/data``: the probe
                                               (NXcxi_ptycho); ``illumination`` likewise
                                               (ptychodus's older name)
``instrument_1/beam_1/incident_energy``        the same energy, J (CXI Beam class)
``instrument_1/beam_1/incident_wavelength``    h c / energy, m (CXI has no wavelength
                                               in Source; Beam holds it)
``instrument_1/detector_1/data``               intensities (P, N, N), photons, zero
                                               frequency at index N // 2: photon counts
                                               (uint32) as they are, or for a
                                               sqrt-count dataset the amplitudes squared
                                               in float64 (exact, so sqrt gives the
                                               float32 amplitudes back bit for bit)
``instrument_1/detector_1/distance``           sample to detector, m
``instrument_1/detector_1/x_pixel_size``       detector pixel, m (also ``y_pixel_size``)
``instrument_1/detector_1/translation``        soft link to the translation (NXcxi_ptycho)
``sample_1/geometry_1/translation``            (P, 3) float64, m: ``[x, y, 0]`` =
                                               ``[column, row, 0]`` of each probe centre
                                               on the object times dx, the axes of the
                                               arrays as stored (x along the last axis,
                                               y along the one before), as ptychodus
                                               reads them
``data_1/data``, ``data_1/translation``        soft links to the detector data and the
                                               translation (NXdata, signal ``data``)
``image_1/data``                               the probe (N, N) complex64
``image_2/data``                               the ground-truth object(s) (M, S, S)
                                               complex64
``image_N/data_type``, ``data_space``          ``amplitude`` (phased, complex), ``real``
``image_N/image_size``                         width, height, depth of one image, m
                                               (depth 0: a thin object)
``ptycho_1/`` (NXnote; not CXI)                this project's extras: positions in
                                               pixels (exact), which object each
                                               position scans, the groups and their
                                               offsets, scan regions, the forward
                                               model's scale, units, the dataset's
                                               attributes, the geometry, and the content
                                               digest of what was exported
=============================================  =========================================

Complex arrays are h5py's compound ``(r, i)`` type, which is CXI's convention.

:func:`import_cxi` reads such a file back into the identical :class:`~ptycho.data.dataset.Dataset`
(same digest, checked against the one stored in ``ptycho_1``). A CXI file from elsewhere
(no ``ptycho_1``) is imported from its CXI fields the way :mod:`ptycho.data.npz` imports an
NPZ: amplitudes = sqrt(intensities), positions = translation / dx, groups by nearest
neighbours, the scale estimated from object and probe.

Measured data has no object: a CXI file with detector data, translation and
illumination but no ``image_2`` is imported as a reconstruct-only dataset (no ground
truth: a PINN trains on it, infer and stitch work, evaluate gives the data misfit), see
:func:`~ptycho.data.npz.dataset_from_arrays`. Such a dataset exports without
``image_2`` (a blank object would read as a ground truth in ptychodus); ``ptycho_1``
then records the canvas shape, ``object_shape``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ptycho import __version__
from ptycho.config import defaults
from ptycho.data.dataset import Dataset
from ptycho.errors import ConfigError, DatasetError

CXI_VERSION = 160
#: h * c / e: wavelength in metres times photon energy in eV.
HC_EV_M = 1.239841984e-6
#: The elementary charge: joules per electronvolt.
EV_J = 1.602176634e-19
EXTRAS = "entry_1/ptycho_1"

# Where a reader finds each quantity, in order: this module's path first, then the other
# names CXI writers use (a minimal CXI file has only data_1; NXcxi_ptycho puts the probe
# at source_1/probe, ptychodus reads image_1/data or source_1/illumination).
DATA_PATHS = ("entry_1/instrument_1/detector_1/data", "entry_1/data_1/data")
TRANSLATION_PATHS = (
    "entry_1/sample_1/geometry_1/translation",
    "entry_1/data_1/translation",
    "entry_1/instrument_1/detector_1/translation",
)
PROBE_PATHS = (
    "entry_1/image_1/data",
    "entry_1/instrument_1/source_1/probe",
    "entry_1/instrument_1/source_1/illumination",
)
OBJECT_PATHS = ("entry_1/image_2/data",)


_CXI = defaults("cxi")  # the schema holds every default (ptycho/config.schema.yaml)


@dataclass(frozen=True)
class CxiGeometry:
    """The physical set-up the simulated pixels stand for (config section ``cxi``).

    energy_ev: photon energy, eV (8 keV: wavelength 0.155 nm); stored in joules.
    detector_distance_m: sample to detector, m.
    detector_pixel_m: side of a (square) detector pixel, m.

    With an N x N detector these give the object pixel ``object_pixel_m(N)``, e.g.
    65 nm for the defaults at N = 64.
    """

    energy_ev: float = _CXI["energy_ev"]
    detector_distance_m: float = _CXI["detector_distance_m"]
    detector_pixel_m: float = _CXI["detector_pixel_m"]

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(
                    f"config key 'cxi.{f.name}' = {value!r} must be a positive finite number (default {f.default})"
                )

    @property
    def energy_j(self) -> float:
        """Photon energy in joules, CXI's unit."""
        return self.energy_ev * EV_J

    @property
    def wavelength_m(self) -> float:
        return HC_EV_M / self.energy_ev

    def object_pixel_m(self, n: int) -> float:
        """The object-plane pixel of a far-field geometry with an ``n`` x ``n`` detector."""
        return self.wavelength_m * self.detector_distance_m / (n * self.detector_pixel_m)


def export_cxi(ds: Dataset, path: str | os.PathLike, geometry: CxiGeometry = CxiGeometry()) -> None:
    """Write ``ds`` as a CXI 1.6 file at ``path`` (the module's layout).

    Atomic: the file is written beside ``path`` under a temporary name and renamed into
    place, so a failure (one-line :class:`~ptycho.errors.PtychoError`) or a kill leaves
    the previous file, or none, never a half-written one.
    """
    import h5py

    from ptycho.artifacts import atomic_write
    from ptycho.data.dataset import canonical_arrays, content_digest

    arrays = canonical_arrays(ds)  # the dtypes of the dataset file, so the digest matches it
    n = arrays["probe"].shape[0]
    dx = geometry.object_pixel_m(n)
    if ds.units == "counts":
        intensities = arrays["diffraction"]
    else:
        intensities = arrays["diffraction"].astype(np.float64) ** 2  # exact: float32 squared fits float64
    translation = np.zeros((len(arrays["positions"]), 3))
    translation[:, :2] = arrays["positions"] * dx
    digest = content_digest(arrays, ds.scale, ds.units)

    def group(parent, name: str, nx_class: str):
        g = parent.create_group(name)
        g.attrs["NX_class"] = nx_class
        return g

    def metres(parent, name: str, value) -> None:
        parent.create_dataset(name, data=value).attrs["units"] = "m"

    def image(entry, name: str, data: np.ndarray) -> None:
        g = group(entry, name, "NXdata")
        g.create_dataset("data", data=data)
        g.create_dataset("data_type", data="amplitude")  # CXI: complex, phased
        g.create_dataset("data_space", data="real")
        metres(g, "image_size", [data.shape[-1] * dx, data.shape[-2] * dx, 0.0])

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("cxi_version", data=CXI_VERSION)
            entry = group(f, "entry_1", "NXentry")
            entry.create_dataset("title", data=f"ptycho simulated dataset ({ds.attrs.get('split', '')})")
            entry.create_dataset("program_name", data=f"ptycho {__version__}")
            image(entry, "image_1", arrays["probe"])
            instrument = group(entry, "instrument_1", "NXinstrument")
            source = group(instrument, "source_1", "NXsource")
            source.create_dataset("name", data="simulation")
            source.create_dataset("energy", data=geometry.energy_j).attrs["units"] = "J"
            source["probe"] = h5py.SoftLink("/entry_1/image_1/data")
            source["illumination"] = h5py.SoftLink("/entry_1/image_1/data")
            beam = group(instrument, "beam_1", "NXbeam")
            beam.create_dataset("incident_energy", data=geometry.energy_j).attrs["units"] = "J"
            metres(beam, "incident_wavelength", geometry.wavelength_m)
            detector = group(instrument, "detector_1", "NXdetector")
            detector.create_dataset("data", data=intensities, compression="gzip", shuffle=True)
            metres(detector, "distance", geometry.detector_distance_m)
            metres(detector, "x_pixel_size", geometry.detector_pixel_m)
            metres(detector, "y_pixel_size", geometry.detector_pixel_m)
            detector["translation"] = h5py.SoftLink("/entry_1/sample_1/geometry_1/translation")
            sample = group(entry, "sample_1", "NXsample")
            metres(group(sample, "geometry_1", "NXgeometry"), "translation", translation)
            data_1 = group(entry, "data_1", "NXdata")
            data_1.attrs["signal"] = "data"
            data_1["data"] = h5py.SoftLink("/entry_1/instrument_1/detector_1/data")
            data_1["translation"] = h5py.SoftLink("/entry_1/sample_1/geometry_1/translation")
            if ds.has_ground_truth:
                image(entry, "image_2", arrays["objects"])
            extras = group(entry, "ptycho_1", "NXnote")
            extras.attrs["description"] = "ptycho's own fields (not CXI): exact positions, grouping, scale, attributes"
            for name in ("positions", "position_object", "groups", "group_offsets", "scan_region"):
                extras.create_dataset(name, data=arrays[name])
            extras.create_dataset("scale", data=float(ds.scale))
            extras.create_dataset("units", data=ds.units)
            extras.create_dataset("diffraction_dtype", data=str(arrays["diffraction"].dtype))
            extras.create_dataset("attrs", data=json.dumps(ds.attrs, sort_keys=True, default=str))
            extras.create_dataset("geometry", data=json.dumps(asdict(geometry)))
            extras.create_dataset("digest", data=digest)
            if not ds.has_ground_truth:
                extras.create_dataset("object_shape", data=np.array(arrays["objects"].shape, np.int64))

    atomic_write(path, write)


#: Negative intensities a float detector's data may hold and be clipped to 0: background
#: subtraction leaves small negatives in the dark pixels, whose sum stays a small fraction of
#: the photons. Beyond it (a sign error), or any negative integer (wrapped int16 counters),
#: the file is refused: clipping would change the data's scale without a word.
NEGATIVE_SHARE_LIMIT = 0.01


def check_cxi_version(dset, where: str) -> int:
    """The file's ``cxi_version`` (100 x the format's version), refused in one line unless
    it is one integer of a CXI 1.x this reader follows (1.0 to 1.6): a version 999 was read
    as if it were 1.6."""
    import h5py

    one_int = isinstance(dset, h5py.Dataset) and dset.size == 1 and len(dset.shape) <= 1 and dset.dtype.kind in "iu"
    value = np.asarray(dset[()]).reshape(-1)[0] if one_int else None
    if value is None or not 100 <= int(value) <= CXI_VERSION:
        shown = "not one integer" if value is None else f"{int(value)}"
        raise DatasetError(
            f"{where}: cxi_version is {shown}; this reader follows CXI 1.0 to 1.6 (100 to {CXI_VERSION}); "
            "export the file as CXI 1.6, or check that it is a CXI file"
        )
    return int(value)


def _checked_intensities(intensities: np.ndarray, where: str) -> np.ndarray:
    """The detector data as float64, its negatives refused unless they are background noise."""
    values = intensities.astype(np.float64)
    negative = values < 0
    if not negative.any():
        return values
    count, lowest = int(negative.sum()), float(values.min())
    if np.issubdtype(intensities.dtype, np.integer):
        raise DatasetError(
            f"{where}: the detector data ({intensities.dtype}) holds {count} negative counts (lowest {lowest:g}); "
            "photon counts are never negative: wrapped counters (store them unsigned) or a sign error, export it again"
        )
    share = -values[negative].sum() / max(values[~negative].sum(), 1e-300)
    if share > NEGATIVE_SHARE_LIMIT:
        raise DatasetError(
            f"{where}: the detector data holds {count} negative values (lowest {lowest:g}) whose sum is "
            f"{100 * share:.1f} % of the positive intensity, more than background subtraction leaves "
            f"({100 * NEGATIVE_SHARE_LIMIT:g} %); a sign error? fix the data and export it again"
        )
    return values


def import_cxi(path: str | os.PathLike, gridsize: int = 1, split: str = "train") -> Dataset:
    """Read a CXI 1.6 file into a :class:`Dataset`.

    A file written by :func:`export_cxi` (it has ``ptycho_1``) gives back the exported
    dataset exactly; its digest is checked. Any other CXI file is imported from its CXI
    fields (``gridsize`` and ``split`` apply to those only). Every problem is a one-line
    :class:`~ptycho.errors.DatasetError`.

    Untrusted input: a file that would read other files (external storage, virtual
    datasets, external links) or holds a soft-link loop is refused, and every array's
    declared shape is bounded before any is read (:mod:`ptycho.data.untrusted`).
    """
    import h5py

    from ptycho.data.untrusted import Budget, check_dataset, check_hdf5

    where = str(path)
    try:
        f = h5py.File(where, "r")
    except FileNotFoundError:
        raise DatasetError(f"{where}: no such file") from None
    except OSError:
        raise DatasetError(f"{where}: not an HDF5 file, so not CXI; pass a CXI 1.6 (HDF5) file") from None
    try:
        with f:
            check_hdf5(f, where)
            if "cxi_version" not in f or "entry_1" not in f:
                raise DatasetError(
                    f"{where}: not a CXI file (no cxi_version or entry_1 at the root); "
                    "pass a CXI 1.6 file, e.g. one written by 'ptycho export-cxi'"
                )
            check_cxi_version(f["cxi_version"], where)
            found = {
                "detector data": _first(f, DATA_PATHS, "detector data", where),
                "scan translation": _first(f, TRANSLATION_PATHS, "scan translation", where),
                "probe": _first(f, PROBE_PATHS, "probe", where),
                "object": _first(f, OBJECT_PATHS, "object", where, required=False),  # measured data has none
            }
            budget = Budget(where)
            for what, dset in found.items():  # every declared shape bounded before any is read
                if dset is not None:
                    check_dataset(dset, budget, f"{what} '{dset.name}'", image=what != "scan translation")
            # The shapes fit each other, from what the file declares: a file whose arrays
            # cannot fit is refused before gigabytes of compressed data are read.
            data_shape, translation_shape = found["detector data"].shape, found["scan translation"].shape
            probe_shape = _probe_shape(found["probe"].shape)
            if (
                len(data_shape) != 3
                or len(probe_shape) != 2
                or data_shape[1:] != probe_shape
                or len(translation_shape) != 2
                or translation_shape[0] != data_shape[0]
                or translation_shape[1] not in (2, 3)
            ):
                raise DatasetError(
                    f"{where}: detector data {data_shape}, probe {probe_shape} and translation "
                    f"{translation_shape} do not fit (P, N, N), (N, N), (P, 3); the file is inconsistent, export it again"
                )
            if found["object"] is not None and len(found["object"].shape) not in (2, 3):
                raise DatasetError(
                    f"{where}: the object image has shape {found['object'].shape}; expected (H, W) or (M, H, W)"
                )
            if EXTRAS not in f:  # the geometry, a few numbers, before the arrays too
                energy_j = _positive(f, "entry_1/instrument_1/source_1/energy", where)
                distance = _positive(f, "entry_1/instrument_1/detector_1/distance", where)
                pixel = np.array([_positive(f, f"entry_1/instrument_1/detector_1/{a}_pixel_size", where) for a in "xy"])
            intensities, translation, probe, objects = (
                None if dset is None else np.asarray(dset[()]) for dset in found.values()
            )
            probe = probe.reshape(probe_shape)
            if EXTRAS in f:
                return _own_dataset(f[EXTRAS], intensities, probe, objects, where, budget)
    except (OSError, RuntimeError, KeyError) as exc:  # h5py's answers to a truncated or damaged file
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DatasetError(
            f"{where}: unreadable HDF5 data ({reason}); the file may be truncated, copy it again"
        ) from None
    from ptycho.data.npz import dataset_from_arrays

    # Object pixel per axis (x: columns, y: rows) from the file's own geometry. Positions
    # within 1e-6 px of an integer are snapped to it: the metres of a file hold pixel
    # positions only to rounding, and an exact integer spares the sub-pixel interpolation
    # (and the extra margin) of extract_patches.
    dx = np.array(
        [
            CxiGeometry(energy_j / EV_J, distance, p).object_pixel_m(n)
            for n, p in zip(probe.shape[::-1], pixel, strict=True)
        ]
    )
    positions = translation[:, :2] / dx
    nearest = np.rint(positions)
    positions = np.where(np.abs(positions - nearest) < 1e-6, nearest, positions)
    amplitude = np.sqrt(np.maximum(_checked_intensities(intensities, where), 0)).astype(np.float32)
    if objects is None:
        return dataset_from_arrays(where, amplitude, probe, None, positions, gridsize, split)
    obj = objects[0] if objects.ndim == 3 else objects
    return dataset_from_arrays(where, amplitude, probe, obj.astype(np.complex64), positions, gridsize, split)


def _probe_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A probe's (N, N), its leading axes of one (a single mode) dropped."""
    return shape[-2:] if len(shape) > 2 and math.prod(shape[:-2]) == 1 else tuple(shape)


def _first(f: Any, paths: tuple[str, ...], what: str, where: str, *, required: bool = True) -> Any:
    """The HDF5 dataset at the first of ``paths`` present in ``f``, unread (None if absent
    and not ``required``)."""
    import h5py

    for p in paths:
        if p in f:
            dset = f[p]
            if not isinstance(dset, h5py.Dataset):
                raise DatasetError(f"{where}: '{p}' is a group, not the {what} array; fix the file")
            return dset
    if not required:
        return None
    raise DatasetError(
        f"{where}: no {what} in this CXI file (looked for {', '.join(paths)}); a ptychography CXI file needs "
        "detector data, translation and probe (illumination) (see 'ptycho export-cxi')"
    )


def _positive(f: Any, path: str, where: str) -> float:
    """A positive, finite scalar of the file's geometry."""
    import h5py

    if path not in f:
        raise DatasetError(f"{where}: no '{path}' in this CXI file; the geometry is needed to convert metres to pixels")
    dset = f[path]
    if not isinstance(dset, h5py.Dataset) or dset.size != 1 or dset.dtype.kind not in "iuf":
        shape = getattr(dset, "shape", "a group")
        raise DatasetError(f"{where}: '{path}' ({shape}) must be one positive finite number; fix the file")
    value = np.asarray(dset[()], dtype=np.float64)
    if value.size != 1 or not (np.isfinite(value).all() and (value > 0).all()):
        raise DatasetError(f"{where}: '{path}' = {value.tolist()!r} must be one positive finite number; fix the file")
    return float(value.ravel()[0])


def _own_dataset(
    extras: Any, intensities: np.ndarray, probe: np.ndarray, objects: np.ndarray | None, where: str, budget: Any
) -> Dataset:
    """The dataset :func:`export_cxi` wrote, from the CXI arrays and ``ptycho_1`` (whose
    ``object_shape`` gives the blank object of a dataset without ground truth). Each
    field is bounded before it is read (``budget``: what the CXI arrays left of it)."""
    import h5py

    from ptycho.data.dataset import UNITS, content_digest
    from ptycho.data.untrusted import check_dataset, loads_json, read_text

    def field(name: str) -> Any:
        if name not in extras:
            raise DatasetError(f"{where}: '{EXTRAS}/{name}' is missing; the file is incomplete, export it again")
        dset = extras[name]
        if not isinstance(dset, h5py.Dataset):
            raise DatasetError(
                f"{where}: '{EXTRAS}/{name}' is a group, not a field; the file is damaged, export it again"
            )
        return dset

    def array(name: str) -> np.ndarray:
        dset = field(name)
        check_dataset(dset, budget, f"'{EXTRAS}/{name}'")
        return dset[()]

    def text(name: str) -> str:
        return read_text(field(name), where, f"'{EXTRAS}/{name}'")

    def choice(name: str, allowed: tuple[str, ...]) -> str:
        value = text(name)
        if value not in allowed:
            raise DatasetError(
                f"{where}: '{EXTRAS}/{name}' = {value[:40]!r} is not one of {', '.join(allowed)}; export the file again"
            )
        return value

    units = choice("units", UNITS)
    diffraction_dtype = choice("diffraction_dtype", ("uint32", "float32"))
    if objects is None:
        objects = _blank_object(array("object_shape"), where, budget)
    scale = array("scale")
    if scale.size != 1:
        raise DatasetError(f"{where}: '{EXTRAS}/scale' has shape {scale.shape}; expected one number, export it again")
    attrs = loads_json(text("attrs"), where, f"'{EXTRAS}/attrs'", fix="export the file again")
    if not isinstance(attrs, dict):
        raise DatasetError(f"{where}: '{EXTRAS}/attrs' is JSON {type(attrs).__name__}, not an object; export it again")
    diffraction = intensities if units == "counts" else np.sqrt(intensities)
    ds = Dataset(
        diffraction=diffraction.astype(np.dtype(diffraction_dtype)),
        probe=probe.astype(np.complex64),
        objects=objects.astype(np.complex64),
        positions=array("positions"),
        position_object=array("position_object"),
        groups=array("groups"),
        group_offsets=array("group_offsets"),
        scan_region=array("scan_region"),
        scale=float(scale.ravel()[0]),
        units=units,
        attrs=attrs,
    )
    if "digest" in extras and content_digest(ds.arrays(), ds.scale, units) != text("digest"):
        raise DatasetError(
            f"{where}: the CXI arrays differ from the dataset that was exported (digest mismatch); export it again, "
            f"or delete {EXTRAS} to import the file as a foreign CXI file"
        )
    return ds


def _blank_object(shape: np.ndarray, where: str, budget: Any) -> np.ndarray:
    """The zero object ``ptycho_1/object_shape`` asks for, after the bounds (three whole
    numbers, sides of an image, bytes within the read's budget)."""
    shape = np.asarray(shape)
    if shape.shape != (3,) or shape.dtype.kind not in "iu" or (shape <= 0).any():
        raise DatasetError(
            f"{where}: '{EXTRAS}/object_shape' = {shape.ravel()[:4].tolist()} is not three positive whole numbers "
            "(M, H, W); the file is damaged, export it again"
        )
    dims = tuple(int(v) for v in shape)
    budget.take(
        f"'{EXTRAS}/object_shape' = {list(dims)}", dims, np.complex64, image=True, verb="asks for an object of shape"
    )
    return np.zeros(dims, np.complex64)
