"""The user's own data files: what one is, from its headers, and the dataset it gives.

The study runs on files instead of a simulation when the config names them (key
``data: {train, test}``). A file is either a CXI 1.6 file (:mod:`ptycho.data.cxi`: the
field's format; measured data comes without an object), a tike scan (``.npz`` or
``.npz.bz2``, :mod:`ptycho.data.tike`: measured intensities, a probe estimate, positions)
or a dataset written by ptycho (``.h5``, :mod:`ptycho.data.dataset`). :func:`describe` answers, in milliseconds and
before any job, what the workflow must know while it is parsed: the kind, whether the
file holds a ground truth (an object to score against) and the pattern side.
:func:`read_source` reads the whole file into a :class:`~ptycho.data.dataset.Dataset`
(the ``import_data`` job). Both read the file as untrusted data
(:mod:`ptycho.data.untrusted`), and every problem is one line naming the file and the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ptycho.errors import DatasetError

#: The kinds of file the study reads, in words for messages.
KINDS = {"cxi": "CXI 1.6 file", "dataset": "ptycho dataset", "tike": "tike scan (NPZ)"}
_GIVE = "give a CXI 1.6 file (measured data), a tike scan (.npz, .npz.bz2) or a dataset written by ptycho (.h5)"


@dataclass(frozen=True)
class Source:
    """What a data file is: ``kind`` (``cxi`` or ``dataset``), whether it holds a ground
    truth, its ``patterns`` of ``n x n`` pixels."""

    path: str
    kind: str
    ground_truth: bool
    n: int
    patterns: int

    @property
    def words(self) -> str:
        truth = "with a ground truth" if self.ground_truth else "no ground truth (measured data)"
        return f"{KINDS[self.kind]}, {self.patterns} patterns of {self.n}x{self.n} px, {truth}"


def describe(path: str | os.PathLike) -> Source:
    """Which kind of file ``path`` is, read from its headers only (no array is read).

    A CXI file has a ground truth when it holds an object (``entry_1/image_2``); a ptycho
    dataset unless its ``ground_truth`` attribute is false. Raises a one-line
    :class:`DatasetError` for a missing file, a folder, a file that is not HDF5, an HDF5
    file of another kind, and what the untrusted-file checks refuse.
    """
    import h5py

    from ptycho.data.dataset import GROUND_TRUTH, read_attributes

    where = str(path)
    if not os.path.exists(where):
        raise DatasetError(f"{where}: no such file; {_GIVE}")
    if os.path.isdir(where):
        raise DatasetError(f"{where}: is a folder; {_GIVE}")
    if not os.path.isfile(where):  # a pipe or a device: opening it would wait for a writer
        raise DatasetError(f"{where}: is not a regular file (a pipe or a device); {_GIVE}")
    from ptycho.data import tike

    if tike.is_npz(where):
        patterns, n = tike.describe(where)
        return Source(where, "tike", False, n, patterns)
    try:
        f = h5py.File(where, "r")
    except OSError:
        raise DatasetError(f"{where}: not an HDF5 file, so neither CXI nor a ptycho dataset; {_GIVE}") from None
    try:
        with f:
            found = _header(f, where)
    except (OSError, RuntimeError, KeyError) as exc:  # h5py's answers to a truncated or damaged file
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DatasetError(
            f"{where}: unreadable HDF5 data ({reason}); the file may be truncated, copy it again"
        ) from None
    if isinstance(found, Source):
        return found
    attrs = read_attributes(where)  # the dataset header's own checks (version, required attributes)
    return Source(where, "dataset", bool(attrs.get(GROUND_TRUTH, True)), int(attrs["n"]), found)


def _header(f, where: str) -> Source | int:
    """A CXI file's :class:`Source`, or a ptycho dataset's number of patterns (its
    attributes are then checked by :func:`~ptycho.data.dataset.read_attributes`)."""
    import h5py

    from ptycho.data.cxi import DATA_PATHS, OBJECT_PATHS, PROBE_PATHS, TRANSLATION_PATHS
    from ptycho.data.dataset import FORMAT
    from ptycho.data.untrusted import check_filters, check_hdf5, read_attrs

    check_hdf5(f, where)
    if "cxi_version" in f and "entry_1" in f:
        from ptycho.data.cxi import check_cxi_version

        check_cxi_version(f["cxi_version"], where)
        fields = {"detector data": DATA_PATHS, "scan translation": TRANSLATION_PATHS, "probe": PROBE_PATHS}
        found = {what: next((f[p] for p in paths if p in f), None) for what, paths in fields.items()}
        missing = [what for what, dset in found.items() if not isinstance(dset, h5py.Dataset)]
        if missing:
            raise DatasetError(
                f"{where}: a CXI file without {' or '.join(missing)}; a ptychography CXI file needs detector "
                "data, translation and probe (illumination)"
            )
        shape = found["detector data"].shape
        check_filters(found["detector data"], where, "its detector data")
        if len(shape) != 3 or shape[1] != shape[2]:
            raise DatasetError(f"{where}: CXI detector data of shape {shape}; expected (patterns, N, N)")
        return Source(where, "cxi", any(p in f for p in OBJECT_PATHS), int(shape[-1]), int(shape[0]))
    if read_attrs(f, where).get("format") not in (FORMAT, FORMAT.encode()):
        raise DatasetError(
            f"{where}: an HDF5 file that is neither CXI (no cxi_version and entry_1) nor a ptycho dataset "
            f"(no format attribute {FORMAT!r}); {_GIVE}"
        )
    return int(f["diffraction"].shape[0]) if isinstance(f.get("diffraction"), h5py.Dataset) else 0


def read_source(
    path: str | os.PathLike,
    *,
    gridsize: int,
    split: str,
    n: int = 0,
    reduce: str = "crop",
    source: Source | None = None,
):
    """The :class:`~ptycho.data.dataset.Dataset` of a data file, read in full and
    validated: a CXI file imported (:func:`ptycho.data.cxi.import_cxi`; ``gridsize`` and
    ``split`` apply to a CXI file from elsewhere), a tike scan imported at pattern side
    ``n`` (0: its own) made by ``reduce`` (:func:`ptycho.data.tike.import_tike`), a ptycho
    dataset read as it is. ``source``: :func:`describe`'s answer when the caller has it
    (a tike scan's headers cost a bz2 decompression)."""
    from ptycho.data.cxi import import_cxi
    from ptycho.data.dataset import read_dataset

    source = source or describe(path)
    if n and n != source.n and source.kind != "tike":
        raise DatasetError(f"{path}: data.n applies to tike scans only; a {KINDS[source.kind]} is read at its own side")
    if source.kind == "cxi":
        return import_cxi(path, gridsize=gridsize, split=split)
    if source.kind == "tike":
        from ptycho.data.tike import import_tike

        return import_tike(path, gridsize=gridsize, split=split, n=n or None, reduce=reduce)
    return read_dataset(path)
