"""tike-style NPZ scans: measured data as tike writes it and ships it (``.npz``, ``.npz.bz2``).

Three arrays, in tike's conventions (``tike.ptycho``; its test data
``siemens-star-small.npz.bz2`` is this repository's ``data/siemens-star/``):

* ``data`` (..., P, N, N) float: diffraction **intensities** (photon counts) with the zero
  frequency at the array's corner: tike's far field is an unshifted FFT with
  ``norm="ortho"``, ``|fft2(P O, norm="ortho")|^2``;
* ``probe`` (..., N, N) complex: a probe estimate, in tike's amplitude units (the leading
  axes are tike's shared and mode axes: the first probe mode is used);
* ``scan`` (..., P, 2) float: each pattern's position in object pixels, of the probe
  window's **corner**, vertical first ``[row, column]``.

On import (:func:`import_tike`) the intensities become amplitudes (their square root),
fftshifted (the zero frequency at the centre: this project's convention, docs/physics.md),
and the positions the window's centre ``[x, y] = [column + N/2, row + N/2]`` (a patch
centred at ``q`` covers ``q - N/2 .. q + N/2 - 1``). The photon scale ``s`` is estimated as
for every file without an object (:func:`ptycho.data.npz.dataset_from_arrays`): with the
probe in tike's units it absorbs their ratio to the counts (about 94 for the Siemens star).

A smaller pattern side for CPU cost (``n`` below the file's ``N``, config ``data.n``) is a
choice between two physics, recorded in the dataset's provenance:

* ``crop``: the central ``n x n`` detector pixels. The real-space pixel grows by ``N/n``:
  a **lower resolution**, the same field of view. The probe is band-limited the same way
  (its spectrum cropped), the positions divided by ``N/n``; the intensities are exactly
  those of the band-limited exit wave.
* ``bin``: ``N/n x N/n`` detector pixels summed. The real-space pixel stays; the window's
  **field of view shrinks** by ``N/n``, so the probe is cut to its central ``n x n``
  pixels (the positions stay: the window keeps its centre). The summed intensities are
  not exactly those of the cut probe's exit wave: the probe's power outside the window
  is recorded, and a probe with more than :data:`BIN_PROBE_LIMIT` outside is refused. Each
  bin starts at the zero frequency's pixel, so the binned zero frequency lies ``(k-1)/2k``
  of a binned pixel off the centre (a phase ramp across the window, which the object's
  phase absorbs and the scoring's plane removal takes out; recorded).

The file is untrusted (:mod:`ptycho.data.untrusted`): a bz2 stream is decompressed in
chunks against the read budget (a small file can expand without bound), the ``.npy``
headers are checked before any array is read, pickled arrays are refused, and every
problem is one line naming the file and the fix.
"""

from __future__ import annotations

import bz2
import io
import json
import os
import zipfile

import numpy as np

from ptycho.errors import DatasetError

#: The arrays of a tike scan.
KEYS = ("data", "probe", "scan")
#: How a pattern side smaller than the file's is made (module docstring).
REDUCTIONS = ("crop", "bin")
#: ``bin``: the most of the probe's power its central ``n x n`` may leave outside.
BIN_PROBE_LIMIT = 0.10
_BZ2_MAGIC = b"BZh"
_ZIP_MAGIC = b"PK\x03\x04"
_CHUNK = 1 << 20


def is_npz(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts as a zip archive (an NPZ) or a bz2 stream (``.npz.bz2``)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    return head.startswith(_BZ2_MAGIC) or head == _ZIP_MAGIC


def _archive(path: str, budget) -> io.BytesIO | str:
    """The NPZ itself: the path of a plain one, or a bz2 one decompressed in memory in
    chunks, never past ``budget`` (a bz2 bomb stops at the budget, not at the machine's end)."""
    with open(path, "rb") as fh:
        if fh.read(3) != _BZ2_MAGIC:
            return path
        fh.seek(0)
        out, decompressor, pending = io.BytesIO(), bz2.BZ2Decompressor(), b""
        try:
            while True:
                chunk = b""
                if decompressor.needs_input:
                    chunk, pending = pending or fh.read(_CHUNK), b""
                    if not chunk:
                        raise EOFError("the bz2 stream ends early")
                data = decompressor.decompress(chunk, max_length=_CHUNK)
                budget.charge("its bz2 stream", len(data), "decompresses to more than")
                out.write(data)
                if decompressor.eof:  # one stream ends; pbzip2 and cat write several
                    pending = decompressor.unused_data or fh.read(_CHUNK)
                    if not pending:
                        break
                    decompressor = bz2.BZ2Decompressor()
        except (OSError, EOFError, ValueError) as exc:
            raise DatasetError(
                f"{path}: an unreadable bz2 stream ({type(exc).__name__}: {str(exc)[:80]}); the file may be "
                "truncated, copy it again"
            ) from None
    out.seek(0)
    return out


def read_headers(path: str | os.PathLike) -> tuple[dict, object]:
    """The ``.npy`` headers of a tike scan (name -> (shape, dtype)) and the archive to read
    it from, every check of :func:`ptycho.data.untrusted.npz_headers` passed; one-line
    :class:`DatasetError` otherwise, also for a file that is not a tike scan."""
    from ptycho.data.untrusted import Budget, npz_headers

    where = str(path)
    budget = Budget(where)
    archive = _archive(where, budget)
    try:
        headers = npz_headers(where, budget, images=("data", "probe"), fileobj=archive)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise DatasetError(
            f"{where}: not a readable NPZ archive ({type(exc).__name__}); it may be truncated, copy it again"
        ) from None
    missing = [k for k in KEYS if k not in headers]
    if missing:
        raise DatasetError(
            f"{where}: an NPZ without {', '.join(repr(k) for k in missing)}; a tike scan holds 'data' "
            "(intensities), 'probe' and 'scan' (positions)"
        )
    return headers, archive


def describe(path: str | os.PathLike) -> tuple[int, int]:
    """(patterns, pattern side) of a tike scan, from its headers and shape checks."""
    headers, _ = read_headers(path)
    return _shapes(str(path), headers)


def _shapes(where: str, headers: dict) -> tuple[int, int]:
    """Check that data, probe and scan agree; (patterns, side)."""
    data, probe, scan = (headers[k][0] for k in KEYS)
    if len(data) < 3 or data[-1] != data[-2] or any(s != 1 for s in data[:-3]):
        raise DatasetError(f"{where}: 'data' has shape {data}; expected (P, N, N) patterns (leading axes of size 1)")
    patterns, n = data[-3], data[-1]
    if len(probe) < 2 or probe[-2:] != (n, n):
        raise DatasetError(
            f"{where}: 'probe' has shape {probe}, its last two axes not the patterns' {n} x {n}; give the probe "
            "estimate the data was reconstructed with, at the detector's size"
        )
    if len(scan) < 2 or scan[-1] != 2 or scan[-2] != patterns or any(s != 1 for s in scan[:-2]):
        raise DatasetError(f"{where}: 'scan' has shape {scan}; expected ({patterns}, 2), one [row, column] per pattern")
    for key, what in (("data", "intensities"), ("scan", "positions")):
        if headers[key][1].kind not in "biuf":
            raise DatasetError(f"{where}: '{key}' is {headers[key][1]}, not real numbers; give the {what} as numbers")
    if not np.issubdtype(headers["probe"][1], np.complexfloating):
        raise DatasetError(f"{where}: 'probe' is {headers['probe'][1]}, not complex; give the complex probe estimate")
    return int(patterns), int(n)


def side_problem(side: int, n: int) -> str:
    """Why ``n``-px patterns cannot be made from ``side``-px ones ('' when they can): ``n``
    must be an even divisor of ``side`` (whole detector pixels per reduced one)."""
    if n < 2 or n > side or side % n or n % 2:
        return f"cannot make {n}-px patterns from {side}-px ones; data.n must be an even divisor of {side} (e.g. {side // 2})"
    return ""


def import_tike(
    path: str | os.PathLike,
    *,
    gridsize: int = 1,
    split: str = "train",
    n: int | None = None,
    reduce: str = "crop",
):
    """A tike scan as a reconstruct-only :class:`~ptycho.data.dataset.Dataset` (no ground
    truth), at its own pattern side or at ``n`` made by ``reduce`` (module docstring)."""
    from ptycho.data.npz import dataset_from_arrays

    where = str(path)
    headers, archive = read_headers(where)
    patterns, side = _shapes(where, headers)
    n = side if not n else int(n)
    if reduce not in REDUCTIONS:
        raise DatasetError(f"{where}: unknown reduction {reduce!r}; choose one of {', '.join(REDUCTIONS)}")
    problem = side_problem(side, n)
    if problem:
        raise DatasetError(f"{where}: {problem}")
    if isinstance(archive, io.BytesIO):
        archive.seek(0)
    with np.load(archive, allow_pickle=False) as z:
        counts = np.asarray(z["data"], dtype=np.float64).reshape(patterns, side, side)
        probe = np.asarray(z["probe"]).reshape(-1, side, side)[0].astype(np.complex128)
        scan = np.asarray(z["scan"], dtype=np.float64).reshape(patterns, 2)
    if not np.all(np.isfinite(counts)):
        bad = int(np.count_nonzero(~np.isfinite(counts).all(axis=(1, 2))))
        raise DatasetError(f"{where}: {bad} pattern(s) hold NaN or infinite counts; remove or repair those patterns")
    if counts.min() < 0:
        raise DatasetError(
            f"{where}: the intensities have negative values (min {counts.min():.4g}); tike's 'data' holds photon "
            "counts: subtract no background below zero, and check the sign and the integer type of the counters"
        )
    if not (np.all(np.isfinite(scan)) and np.all(np.isfinite(probe))):
        raise DatasetError(f"{where}: the scan positions or the probe hold NaN or infinite values; repair the file")
    intensity = np.fft.fftshift(counts, axes=(-2, -1))  # the zero frequency to the centre
    pos = scan[:, ::-1] + side / 2  # [row, column] of the corner -> [x, y] of the centre
    provenance = {"format": "tike", "pattern_side": side}
    if n < side:
        intensity, probe, pos, note = _reduce(where, intensity, probe, pos, side, n, reduce)
        provenance["reduced"] = note
    ds = dataset_from_arrays(where, np.sqrt(intensity).astype(np.float32), probe, None, pos, gridsize, split)
    config = json.loads(ds.attrs["config"]) | provenance
    ds.attrs["config"] = json.dumps(config)
    return ds


def _reduce(where, intensity, probe, pos, side: int, n: int, reduce: str):
    """The patterns, probe and positions at side ``n`` by ``reduce``, and its record."""
    k = side // n
    lo = (side - n) // 2
    if reduce == "crop":
        spectrum = np.fft.fftshift(np.fft.fft2(probe, norm="ortho"))[lo : lo + n, lo : lo + n]
        small = np.fft.ifft2(np.fft.ifftshift(spectrum), norm="ortho")
        note = {
            "by": "crop",
            "from": side,
            "to": n,
            "pixel_factor": k,
            "means": f"the central {n} x {n} detector pixels: real-space pixels {k}x larger (lower resolution), "
            "the same field of view",
        }
        return intensity[:, lo : lo + n, lo : lo + n], small, (pos - side / 2) / k + n / 2, note
    power = np.abs(probe) ** 2
    outside = 1.0 - float(power[lo : lo + n, lo : lo + n].sum() / power.sum())
    if outside > BIN_PROBE_LIMIT:
        raise DatasetError(
            f"{where}: binning to {n} px keeps the central {n} x {n} of the probe, and {outside:.0%} of its power lies "
            f"outside (at most {BIN_PROBE_LIMIT:.0%}); reduce by crop (data.reduce: crop) or keep {side} px"
        )
    binned = intensity.reshape(len(intensity), n, k, n, k).sum(axis=(2, 4))
    note = {
        "by": "bin",
        "from": side,
        "to": n,
        "pixel_factor": k,
        "probe_power_outside": outside,
        #: each bin starts at the zero frequency's pixel, so the binned zero frequency lies
        #: this far (in binned pixels) from the centre pixel: a phase ramp the object absorbs
        "zero_frequency_offset_px": (k - 1) / (2 * k),
        "means": f"{k} x {k} detector pixels summed: the same real-space pixel, a field of view {k}x smaller; "
        f"{outside:.1%} of the probe's power lay outside it",
    }
    return binned, probe[lo : lo + n, lo : lo + n], pos, note
