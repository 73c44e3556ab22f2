"""Small, atomic artefact files shared by the CLI commands.

Reconstructions and stitched images are ``.npz`` files (no pickles); metrics and
timings are JSON. Every write goes to a temporary file in the target folder and is
renamed into place, so a killed job never leaves a half-written artefact that a later
rule would mistake for a result.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError


def atomic_write(path: str | os.PathLike, write, suffix: str = ".tmp") -> None:
    """Run ``write(tmp)`` on a temporary file beside ``path``, fsync it, rename it into place.

    The one way every artefact of the package is written: a killed job leaves either the
    old file or the new one, never a half-written file that looks valid. ``suffix`` is
    for writers that insist on an extension (Keras wants ``.keras``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    except OSError as exc:
        raise (_disk_full(path) if _no_space(exc) else _cannot_write(path, exc)) from None
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        # mkstemp makes the file 0600; give it the mode a plain open() would (0666 & ~umask),
        # so results stay readable by the group, an MLflow server or a web server.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, Exception) and _no_space(exc):  # h5py and Keras wrap the OSError
            raise _disk_full(path) from None
        if isinstance(exc, OSError):
            raise _cannot_write(path, exc) from None
        raise


def writable_problem(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or a ``folder``) could not be written, ``strerror``-like, or
    None; creates nothing. The package's one writability probe: the CLI asks it of every
    output before a command does any work, the tracking preflight of the store's folder.

    The deepest existing ancestor must be a folder in which a file can be created (tried
    for real with a temporary file, removed at once: permission bits do not tell the
    whole story for root, read-only mounts or /proc).
    """
    path = Path(path)
    if path.exists():
        if folder and not path.is_dir():
            return "it is a file, not a folder"
        if not folder and path.is_dir():
            return "Is a directory"
    probe = path if folder and path.is_dir() else path.parent
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: the target's folder decides, let the write say it
            return None
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _cannot_write(path: Path, exc: OSError) -> PtychoError:
    """One line for a write the filesystem refused (permissions, read-only, full disk)."""
    # h5py puts a multi-line report in strerror; the errno says it in a few words.
    reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())[:200] or type(exc).__name__
    return PtychoError(f"cannot write {path} ({reason}); choose a writable path or free space, then re-run")


def _no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause: h5py and Keras wrap the OSError) is a full disk or quota."""
    import errno

    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err).lower()
        if "no space left on device" in text or "disk quota exceeded" in text or "errno = 28" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full(path: Path) -> PtychoError:
    return PtychoError(
        f"no space left on the device of {path.parent} while writing {path.name}; nothing was written "
        "(an earlier version of the file, if any, is unchanged): free space there or choose another "
        "results folder, then re-run"
    )


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (os.umask can only
    be read by setting it, which would race with other threads creating files)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _jsonable(value: Any) -> Any:
    """NaN and infinities become None: the files stay strict JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, payload: dict) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as fh:
            json.dump(_jsonable(payload), fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")

    atomic_write(path, write)


def read_json(path: str | os.PathLike) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise PtychoError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise PtychoError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); re-create it") from None


def write_arrays(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write)


def read_arrays(path: str | os.PathLike, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise PtychoError(f"{path}: no such file") from None
    except Exception as exc:  # zipfile, pickle and format errors alike
        raise PtychoError(f"{path}: not a readable .npz artefact ({type(exc).__name__}); re-create it") from None
    missing = [k for k in required if k not in data]
    if missing:
        raise PtychoError(f"{path}: missing array '{missing[0]}'; re-create it with the ptycho command that writes it")
    return data
