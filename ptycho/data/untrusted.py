"""Files from elsewhere: what is refused, and what is bounded before anything is read.

Every reader of a file a user hands in (a dataset, a CXI or NPZ file, a trained model)
goes through these checks first, so a crafted or damaged file is refused in one line
(:class:`~ptycho.errors.DatasetError`, or the caller's error) instead of reading other
files, filling the memory or ending in a traceback. Documented in docs/security.md.

Refused in any HDF5 file, wherever it sits (:func:`check_hdf5`):

* **external storage** (``dset.external``: the dataset's bytes live in another file,
  ``/etc/passwd`` as well as anything else), **virtual datasets** (``dset.is_virtual``:
  a map of other files' data) and **external links** (``h5py.ExternalLink``): each would
  read another file as if it were this one's data;
* **soft links that never reach an object**: a loop, or a chain longer than HDF5's own
  limit of :data:`MAX_SOFT_HOPS` (resolved here one hop at a time, without recursion);
  a dangling soft link is harmless and left alone;
* more than :data:`MAX_LINKS` links, or groups nested deeper than :data:`MAX_GROUP_DEPTH`
  (the walk over them is iterative and bounded too).

Bounded before reading (:class:`Budget`, :func:`check_shape`):

* the bytes an array declares (its shape times its item size, not its size on disk: a
  gzip-compressed HDF5 dataset or a zip member of a few KB can declare terabytes) count
  against a budget of :data:`READ_FRACTION` of the memory this process may use
  (:func:`ptycho.runtime.machine_memory_bytes`: the physical memory, or the
  cgroup or ``ulimit -v`` limit if smaller), summed over every array one read takes;
* any axis is at most :data:`MAX_LENGTH` long, an image side (detector pattern, probe,
  object) at most :data:`MAX_SIDE` pixels, an array has at most :data:`MAX_NDIM` axes;
* arrays must be numeric (no object, reference or variable-length types: one small
  heap object can stand for every element of such an array);
* attributes: at most :data:`MAX_ATTRS` per object, each at most :data:`MAX_ATTR_BYTES`;
* JSON (attributes, ``model.json``, the config of a model): at most
  :data:`MAX_JSON_DEPTH` levels of nesting, counted before ``json.loads`` sees it, and a
  size bound given by the caller;
* NPZ and ``.keras`` archives: the sum of what the zip members declare uncompressed
  counts against the budget (a zip bomb), and each ``.npy`` header (read with
  :mod:`numpy.lib.format`) is bounded like an HDF5 dataset before ``np.load`` allocates.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import zipfile
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ptycho.errors import DatasetError, PtychoError

#: Share of the memory this process may use that one file's arrays may declare together.
READ_FRACTION = 0.5
#: Longest image side (pixels) ptycho reads: a detector pattern, a probe, an object.
MAX_SIDE = 2**16
#: Longest axis of any array (patterns, positions, groups): 16.8 million.
MAX_LENGTH = 2**24
#: Most axes an array may have.
MAX_NDIM = 8
#: Deepest JSON nesting ptycho reads (its own files nest a handful of levels).
MAX_JSON_DEPTH = 64
#: Largest JSON text held in an attribute or a dataset string (ptycho's are a few KB).
MAX_JSON_BYTES = 2**20
#: Most links walked in one HDF5 file (ptycho's files have about 40).
MAX_LINKS = 100_000
#: Deepest group nesting walked in one HDF5 file (CXI nests 4 levels).
MAX_GROUP_DEPTH = 64
#: Soft links followed in a row before a path is called a loop (HDF5's own limit, H5L_NUM_LINKS).
MAX_SOFT_HOPS = 16
#: Most attributes on one object, and the largest one (bytes).
MAX_ATTRS = 4096
MAX_ATTR_BYTES = 2**20

_FIX = "the file is damaged or crafted: re-create it, or export it again from its source"


def human(nbytes: float) -> str:
    """``nbytes`` in binary units: ``'16.0 GiB'``, ``'256.0 TiB'``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} EiB"  # pragma: no cover - the loop returns


def memory_bytes() -> int:
    """The memory this process may use (see :func:`ptycho.runtime.machine_memory_bytes`)."""
    from ptycho.runtime import machine_memory_bytes

    return int(machine_memory_bytes())


def read_budget() -> int:
    """Bytes one file's arrays may declare together: :data:`READ_FRACTION` of :func:`memory_bytes`."""
    return int(memory_bytes() * READ_FRACTION)


class Budget:
    """What one read may still allocate; :meth:`take` refuses a declared array beyond it.

    ``error`` builds the exception (``DatasetError`` for data, ``PtychoError`` for models).
    """

    def __init__(
        self,
        where: str,
        error: Callable[[str], Exception] = DatasetError,
        total: int | None = None,
        fix: str = _FIX,
        memory_fix: str = "use a machine with more memory, or re-create the file",
    ):
        self.where = where
        self.error = error
        self.total = read_budget() if total is None else int(total)
        self.used = 0
        self.fix = fix
        self.memory_fix = memory_fix

    def take(
        self,
        what: str,
        shape: Iterable[int],
        dtype: Any,
        *,
        image: bool = False,
        numeric: bool = True,
        verb: str = "declares shape",
    ) -> int:
        """Check ``shape`` x ``dtype`` (:func:`check_shape`) and count its bytes; returns them."""
        shape = tuple(int(s) for s in shape)
        check_shape(
            self.where, what, shape, dtype, image=image, numeric=numeric, verb=verb, error=self.error, fix=self.fix
        )
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        self.charge(what, nbytes, f"{verb} {shape} {np.dtype(dtype)}")
        return nbytes

    def charge(self, what: str, nbytes: int, declares: str) -> None:
        """Count ``nbytes`` that ``what`` ``declares``; refuse past the budget."""
        if self.used + nbytes > self.total:
            before = f" on top of {human(self.used)} already read" if self.used else ""
            raise self.error(
                f"{self.where}: {what} {declares} ({human(nbytes)}{before}), more than the {human(self.total)} "
                f"a read may take here ({READ_FRACTION:.0%} of the {human(memory_bytes())} this process may use); "
                "the file is too large for this machine, or damaged or crafted (a compressed array can declare "
                f"far more than it stores): {self.memory_fix}"
            )
        self.used += nbytes


def check_shape(
    where: str,
    what: str,
    shape: tuple[int, ...],
    dtype: Any,
    *,
    image: bool = False,
    numeric: bool = True,
    verb: str = "declares shape",
    error: Callable[[str], Exception] = DatasetError,
    fix: str = "",
) -> None:
    """The caps of the module on one declared array (no memory check: :class:`Budget`).

    ``image``: the last two axes are an image's sides; ``numeric``: numbers only (else
    fixed-size strings too; never objects). ``fix`` ends the message (default: the file
    is damaged or crafted, re-create it)."""
    fix = fix or _FIX
    dtype = np.dtype(dtype)
    if dtype.hasobject or (numeric and dtype.kind not in "biufc"):
        raise error(f"{where}: {what} has type {dtype}, not a numeric array; {fix}")
    declared = f"{what} {verb} {shape} {dtype}"
    if len(shape) > MAX_NDIM or any(s < 0 for s in shape):
        raise error(f"{where}: {declared}; expected at most {MAX_NDIM} axes; {fix}")
    size = f"{declared} ({human(math.prod(shape) * dtype.itemsize)})"
    if any(s > MAX_LENGTH for s in shape):
        raise error(f"{where}: {size}: an axis of {max(shape)}, more than the {MAX_LENGTH} ptycho reads; {fix}")
    if image and len(shape) >= 2 and max(shape[-2:]) > MAX_SIDE:
        raise error(
            f"{where}: {size}: images of {shape[-2]} x {shape[-1]} pixels, more than the {MAX_SIDE} per side "
            f"ptycho reads; {fix}"
        )


# ------------------------------------------------------------------------------ JSON
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str | bytes) -> int:
    """Deepest nesting of ``[``/``{`` in a JSON text, counted without parsing it (strings
    are skipped; unbalanced text gives what it gives: ``json.loads`` refuses it next)."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    raw = _STRING.sub(b"", raw)
    codes = np.frombuffer(raw, dtype=np.uint8)
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(step).max()) if step.size else 0


def loads_json(
    text: str | bytes,
    where: str,
    what: str,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    error: Callable[[str], Exception] = DatasetError,
    fix: str = _FIX,
) -> Any:
    """``json.loads(text)`` after the size and depth bounds; one line if they fail.

    A JSON text that parses but is malformed for its purpose is the caller's to refuse;
    one that does not parse raises ``ValueError`` (``json.JSONDecodeError``) as usual.
    """
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise error(
            f"{where}: {what} holds {human(size)} of JSON, more than the {human(max_bytes)} ptycho reads; {fix}"
        )
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise error(
            f"{where}: {what} nests JSON {depth} levels deep, more than the {MAX_JSON_DEPTH} ptycho reads; {fix}"
        )
    try:
        return json.loads(text)
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise error(f"{where}: {what} nests JSON too deep to read; {fix}") from None


# ------------------------------------------------------------------------------ HDF5
def check_hdf5(f: Any, where: str) -> None:
    """Refuse external storage, virtual datasets, external links and soft-link loops
    anywhere in the open HDF5 file ``f`` (see the module docstring); reads no data.

    The walk is breadth-first over hard links (each group once), looks at every link
    without following it, and resolves each soft link one hop at a time.
    """
    import h5py

    seen: set[Any] = set()
    soft: list[tuple[str, str]] = []  # (link path, the group it is in)
    queue: deque[tuple[Any, str, int]] = deque([(f, "", 0)])
    links = 0
    while queue:
        group, path, depth = queue.popleft()
        key = _object_key(group)
        if key in seen:
            continue
        seen.add(key)
        if depth > MAX_GROUP_DEPTH:
            raise DatasetError(f"{where}: groups nest more than {MAX_GROUP_DEPTH} levels deep (at '{path}'); {_FIX}")
        for name in group:
            links += 1
            if links > MAX_LINKS:
                raise DatasetError(f"{where}: more than {MAX_LINKS} links in one file; {_FIX}")
            full = f"{path}/{name}"
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise DatasetError(
                    f"{where}: '{full}' is an external link to {link.filename}:{link.path}, which ptycho refuses "
                    "(it would read another file as this one's data); copy that data into this file and give it that"
                )
            if isinstance(link, h5py.SoftLink):
                soft.append((full, path or "/"))
                continue
            if not isinstance(link, h5py.HardLink):
                raise DatasetError(
                    f"{where}: '{full}' is a user-defined HDF5 link, which ptycho refuses; store the object in the file"
                )
            obj = group[name]
            if isinstance(obj, h5py.Group):
                queue.append((obj, full, depth + 1))
            elif isinstance(obj, h5py.Dataset):
                _check_storage(obj, full, where)
    for path, parent in soft:
        _resolve_soft(f, path, parent, where)


def _object_key(obj: Any) -> tuple[int, int]:
    import h5py

    info = h5py.h5o.get_info(obj.id)
    return info.fileno, info.addr


def _check_storage(dset: Any, path: str, where: str) -> None:
    if dset.is_virtual:
        try:
            sources = sorted({m.file_name for m in dset.virtual_sources()})
        except Exception:  # noqa: BLE001 - the refusal must not fail in its turn
            sources = []
        mapped = f" (it maps data from {', '.join(sources[:3])})" if sources else ""
        raise DatasetError(
            f"{where}: dataset '{path}' is a virtual dataset{mapped}, which ptycho refuses (it would read other "
            "files as this one's data); copy the data into a plain dataset of this file and give it that"
        )
    external = dset.external
    if external:
        files = ", ".join(sorted({_text(name) for name, _, _ in external})[:3])
        raise DatasetError(
            f"{where}: dataset '{path}' keeps its bytes in another file (HDF5 external storage: {files}), which "
            "ptycho refuses (it would read that file as this one's data); copy the data into a plain dataset of "
            "this file and give it that"
        )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _resolve_soft(f: Any, link_path: str, parent: str, where: str) -> None:
    """Follow the soft link at ``link_path`` one hop at a time to an object, a dangling
    end (harmless: a reader that wants it says it is missing) or a refusal."""
    import h5py

    target = f.get(link_path, getlink=True).path
    path = _join(parent, target)
    hops = 1
    while True:
        parts = [p for p in path.split("/") if p and p != "."]
        node, here = f, ""
        for i, part in enumerate(parts):
            if not isinstance(node, h5py.Group):
                return  # a path through a dataset: dangling
            link = node.get(part, getlink=True)
            if link is None:
                return  # dangling
            if isinstance(link, h5py.SoftLink):
                hops += 1
                if hops > MAX_SOFT_HOPS:
                    raise DatasetError(
                        f"{where}: soft link '{link_path}' never reaches an object (a loop of soft links, or a "
                        f"chain of more than {MAX_SOFT_HOPS}, which HDF5 cannot follow); remove or repoint the link"
                    )
                path = _join(here or "/", link.path) + "".join(f"/{p}" for p in parts[i + 1 :])
                break
            if not isinstance(link, h5py.HardLink):
                return  # external links are refused by the walk
            node = node[part]
            here = f"{here}/{part}"
        else:
            return  # reached an object


def _join(group: str, target: str) -> str:
    return target if target.startswith("/") else f"{group.rstrip('/')}/{target}"


def check_dataset(dset: Any, budget: Budget, what: str, *, image: bool = False) -> None:
    """Refuse an HDF5 dataset beyond the caps and the budget, before reading it (its
    storage was checked by :func:`check_hdf5`), and one compressed with a filter this
    HDF5 lacks (:func:`check_filters`)."""
    budget.take(what, dset.shape or (), _h5_dtype(dset, budget.where, what), image=image)
    check_filters(dset, budget.where, what)


#: Compression filters detectors write that HDF5 itself lacks, by id: their names and the
#: package that registers them (https://github.com/HDFGroup/hdf5_plugins, hdf5plugin).
_PLUGIN_FILTERS = {32001: "Blosc", 32004: "LZ4", 32008: "bitshuffle", 32015: "Zstandard", 32026: "Blosc2"}


def check_filters(dset: Any, where: str, what: str) -> None:
    """One line naming a compression filter of ``dset`` that this HDF5 cannot decode (an
    Eiger detector's bitshuffle/LZ4, id 32008), and how to get it: reading it failed
    later as 'the file may be truncated, copy it again'."""
    import h5py

    try:
        plist = dset.id.get_create_plist()
        filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    except (AttributeError, RuntimeError, ValueError):  # not a chunked dataset, or no filters to list
        return
    missing = [fid for fid in filters if not h5py.h5z.filter_avail(fid)]
    if missing:
        with contextlib.suppress(ImportError):  # registers the plugin filters, where it is installed
            import hdf5plugin  # noqa: F401
    for fid in missing:
        if not h5py.h5z.filter_avail(fid):
            name = _PLUGIN_FILTERS.get(fid, f"HDF5 filter {fid}")
            raise DatasetError(
                f"{where}: {what} is compressed with {name} (filter id {fid}), which this HDF5 cannot decode; "
                "install hdf5plugin (pip install hdf5plugin) in this environment, or decompress the file where it "
                "was written (h5repack -f NONE)"
            )


def _h5_dtype(dset: Any, where: str, what: str) -> np.dtype:
    import h5py

    dtype = dset.dtype
    if h5py.check_vlen_dtype(dtype) is not None or h5py.check_string_dtype(dtype) is not None:
        raise DatasetError(f"{where}: {what} holds strings, not a numeric array; {_FIX}")
    if dtype.names and len(dtype.names) == 2 and all(dtype[k].kind == "f" for k in dtype.names):
        # CXI's complex (r, i) compound, which h5py reads as complex
        return np.dtype(f"c{2 * dtype[dtype.names[0]].itemsize}")
    return dtype


def read_text(dset: Any, where: str, what: str, max_bytes: int = MAX_JSON_BYTES) -> str:
    """A scalar string dataset, bounded: fixed-length by its declared size; variable-length
    ones are one heap object each, stored uncompressed, so no larger than the file."""
    import h5py

    if dset.shape != ():
        raise DatasetError(f"{where}: {what} has shape {dset.shape}; expected one string; {_FIX}")
    info = h5py.check_string_dtype(dset.dtype)
    if info is None:
        raise DatasetError(f"{where}: {what} has type {dset.dtype}; expected a string; {_FIX}")
    if info.length is not None and info.length > max_bytes:
        raise DatasetError(f"{where}: {what} declares a string of {human(info.length)}; {_FIX}")
    value = dset[()]
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    if len(text) > max_bytes:
        raise DatasetError(f"{where}: {what} holds {human(len(text))} of text, more than {human(max_bytes)}; {_FIX}")
    return text


def read_attrs(obj: Any, where: str) -> dict[str, Any]:
    """The attributes of an HDF5 object, each bounded before it is read (count, size;
    a variable-length string only as a scalar)."""
    import h5py

    attrs = obj.attrs
    if len(attrs) > MAX_ATTRS:
        raise DatasetError(f"{where}: {len(attrs)} attributes on one object, more than {MAX_ATTRS}; {_FIX}")
    out: dict[str, Any] = {}
    for name in attrs:
        aid = attrs.get_id(name)
        shape, dtype = tuple(aid.shape or ()), aid.dtype
        count = math.prod(shape)
        if h5py.check_vlen_dtype(dtype) is not None or dtype.hasobject:
            if count > 1:
                raise DatasetError(
                    f"{where}: attribute '{name}' is an array of {count} variable-length values; "
                    f"ptycho writes single values; {_FIX}"
                )
        elif count * dtype.itemsize > MAX_ATTR_BYTES:
            raise DatasetError(
                f"{where}: attribute '{name}' declares shape {shape} {dtype} ({human(count * dtype.itemsize)}), "
                f"more than the {human(MAX_ATTR_BYTES)} ptycho reads in an attribute; {_FIX}"
            )
        out[name] = attrs[name]
    return out


# ------------------------------------------------------------------------------- zip
def check_zip(zf: zipfile.ZipFile, budget: Budget) -> None:
    """Refuse an archive whose members declare more uncompressed bytes than ``budget`` allows
    (a zip bomb); ``zipfile`` never inflates a member past what it declares."""
    infos = zf.infolist()
    total = sum(info.file_size for info in infos)
    if total > budget.total - budget.used:
        stored = sum(info.compress_size for info in infos)
        raise budget.error(
            f"{budget.where}: its {len(infos)} zip members declare {human(total)} uncompressed ({human(stored)} "
            f"stored), more than the {human(budget.total - budget.used)} a read may take here "
            f"({READ_FRACTION:.0%} of the {human(memory_bytes())} this process may use): a zip bomb, or too "
            f"large for this machine; {budget.fix}"
        )


def npz_headers(
    path: str, budget: Budget, images: Iterable[str] = (), fileobj: Any = None
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The shape and dtype of each array of an NPZ, from the ``.npy`` headers, each checked
    against the caps and ``budget`` (summed) and against what its member holds, so
    ``np.load`` allocates no more than the file is known to contain. ``images`` names the
    arrays whose last two axes are image sides; ``fileobj``, when given, is the archive
    (a decompressed one) and ``path`` only names it.

    Pickled (object) arrays are refused; a damaged archive raises what ``zipfile`` or
    ``numpy`` raise (``BadZipFile``, ``ValueError``, ``EOFError``) for the caller to word.
    """
    from numpy.lib import format as npformat

    images = set(images)
    out = {}
    with zipfile.ZipFile(path if fileobj is None else fileobj) as zf:
        check_zip(zf, budget)
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):  # np.load gives such a member as bytes
                budget.charge(f"member '{info.filename}'", info.file_size, "declares")
                continue
            name = info.filename[:-4]
            with zf.open(info) as fh:
                version = npformat.read_magic(fh)
                if version == (1, 0):
                    shape, _, dtype = npformat.read_array_header_1_0(fh)
                else:  # (2, 0) and (3, 0); read_magic refuses anything else
                    shape, _, dtype = npformat.read_array_header_2_0(fh)
                header = fh.tell()
            if dtype.hasobject:
                raise DatasetError(
                    f"{path}: contains pickled (object) arrays, which are refused; re-save with plain arrays"
                )
            nbytes = budget.take(f"array '{name}'", shape, dtype, image=name in images, numeric=False)
            if nbytes > info.file_size - header:
                raise budget.error(
                    f"{path}: array '{name}' declares shape {tuple(shape)} {dtype} ({human(nbytes)}) but its member "
                    f"holds {human(max(info.file_size - header, 0))}; it may be truncated, copy or export it again"
                )
            out[name] = (tuple(shape), dtype)
    return out


def check_npz(path: str, error: Callable[[str], Exception] = PtychoError, fix: str = "re-create it") -> None:
    """:func:`npz_headers` for an artefact, before ``np.load``: any problem, damage included,
    is one ``error`` line ending in ``fix``."""
    try:
        npz_headers(path, Budget(path, error))
    except PtychoError as exc:
        raise error(str(exc)) from None
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except Exception as exc:  # noqa: BLE001 - zipfile, numpy format and OS errors alike
        raise error(f"{path}: not a readable .npz file ({type(exc).__name__}); {fix}") from None
