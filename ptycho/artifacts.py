"""Small, atomic artefact files shared by the CLI commands.

Reconstructions and stitched images are ``.npz`` files (no pickles); metrics and
timings are JSON. Every write goes to a temporary file in the target folder and is
renamed into place, so a killed job never leaves a half-written artefact that a later
rule would mistake for a result.

What a job writes for another job to read carries its producer's format version
(:data:`FORMATS`, :func:`check_format`): a record of another version is refused in one
line naming the command that makes it again, and the workflow re-runs a producer whose
version changed (:func:`rerun_params`).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError, causes

#: The format version of what each producer writes, by producer: the workflow's rules,
#: named as the ``ptycho`` commands they run (``check <item>`` is ``check_<item>``, ``solve
#: --start`` is ``warm_start``). When what a producer writes changes in a way its readers
#: depend on (a key renamed, moved or given a new meaning), add one to its number here, in
#: the commit that changes it: the workflow then re-runs that producer and what depends on
#: it, nothing else (:func:`rerun_params`), and every reader refuses its files of any other
#: version in one line (:func:`check_format`). A producer not listed (a checklist item
#: registered from outside the package) is at version 1.
#:
#: Stamped (:data:`FORMAT_KEY`): the JSON and NPZ records jobs read from each other
#: (``model.json``, reconstructions, stitched objects, metrics, checks, bench, solver).
#: The other outputs have a format of their own, whose number this one only re-runs: the
#: datasets (``schema_version``, :mod:`ptycho.data.dataset`), CXI, Keras archives, figures,
#: the report (its ``schema_version`` is this number), the resolved config and the MLflow
#: parent's record.
FORMATS: dict[str, int] = {
    "resolved_config": 1,
    "mlflow_parent": 1,
    "simulate": 1,
    "import_data": 1,
    "refine_probe": 1,
    "export_cxi": 1,
    "train": 1,
    "infer": 1,
    "stitch": 1,
    "evaluate": 1,
    "check_accuracy": 1,
    "check_gradients": 1,
    "check_convergence": 1,
    "check_quality": 1,
    "check_speedup": 3,
    "look": 1,
    "condition": 1,
    "simulate_condition": 1,
    "solve_condition": 1,  # writes solve's records (ptycho solve): bumped with "solve"
    "bench": 1,
    "solve": 1,
    "warm_start": 1,
    "figures": 1,
    "report": 2,  # the report's own schema_version (2: XLA modes replace the boolean arms)
    "publish_report": 1,
}

#: Producers of one format, whose readers take either (a change of it bumps both lines):
#: stitched objects, the networks' (stitch) and the solver's; the records of ``ptycho
#: solve``, from flat starts (solve) and with ``--start`` (warm_start, which may hold both).
STITCHED = ("stitch", "solve")
SOLVER = ("solve", "warm_start")

#: Where a record carries its stamp ``{"producer": <name>, "version": <n>}``: a JSON
#: record's key, an NPZ file's array (the stamp as JSON text). No stamp reads as version 1
#: (files written before the stamps existed).
FORMAT_KEY = "format"


def format_version(producer: str) -> int:
    """The version of what ``producer`` writes (:data:`FORMATS`; 1 if it is not listed)."""
    return FORMATS.get(producer, 1)


def format_stamp(producer: str) -> dict[str, Any]:
    """The stamp ``producer`` writes into its records: its name and its format version."""
    return {"producer": producer, "version": format_version(producer)}


def rerun_params(producer: str) -> dict[str, str]:
    """Params for ``producer``'s rule that make Snakemake re-run it, and what depends on it,
    when its format version changes: none at version 1 (every rule's params as they were
    before the versions existed, so an existing results folder re-runs nothing), then one
    param naming the producer and its version.

    Snakemake compares a job's params with those recorded for its outputs as a set of
    values, without their names (``.snakemake/metadata``): any new param re-runs the job,
    an empty one too, and a value another param already has would not; hence the
    producer's name in the value.
    """
    version = format_version(producer)
    return {} if version == 1 else {"format_version": f"ptycho format of {producer}: {version}"}


def check_format(path: str | os.PathLike, stamp: Any, producer: str | Sequence[str]) -> None:
    """Refuse a file whose format stamp (``None``: none, version 1) is not the current
    version of ``producer`` (or of one of several producers whose records a reader takes):
    one line naming the file, both versions and the command that makes it again."""
    producers = (producer,) if isinstance(producer, str) else tuple(producer)
    if stamp is None:  # written before the stamps: version 1 of whichever producer wrote it
        made_by, found = next((p for p in producers if format_version(p) != 1), producers[0]), 1
    elif (
        isinstance(stamp, dict)
        and isinstance(stamp.get("producer"), str)
        and isinstance(stamp.get("version"), int)
        and not isinstance(stamp.get("version"), bool)
    ):
        made_by, found = stamp["producer"], stamp["version"]
    else:
        raise PtychoError(
            f"{path}: its format stamp ({FORMAT_KEY!r}) is not a producer and a version; not a file ptycho "
            f"wrote, re-create it with the ptycho command that writes it"
        )
    if made_by not in producers:
        raise PtychoError(
            f"{path} is an output of {made_by}, not of {' or '.join(producers)}; pass an output of {producers[0]}"
        )
    expected = format_version(made_by)
    if found == expected:
        return
    remake = (
        f"snakemake all --cores all --forcerun {made_by} (with the --config that made this folder; what "
        "depends on it runs again too), or re-run the ptycho command that wrote it"
    )
    if found > expected:
        raise PtychoError(
            f"{path} is in format {found} of {made_by}'s output, newer than the format {expected} this ptycho "
            f"reads; use the ptycho that wrote it, or make it again with this one: {remake}"
        )
    raise PtychoError(
        f"{path} is in format {found} of {made_by}'s output, but this ptycho reads format {expected}; "
        f"make it again: {remake}"
    )


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
        raise write_error(path, exc) from None
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
        if isinstance(exc, Exception) and no_space(exc):  # h5py and Keras wrap the OSError
            raise _disk_full(path) from None
        if isinstance(exc, OSError):
            raise _cannot_write(path, exc) from None
        raise


def writable_problem(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or a ``folder``) could not be written, ``strerror``-like, or
    None; creates nothing. The CLI asks it of every output before a command does any
    work, the tracking preflight of the store's folder. The deepest existing ancestor must
    be a folder in which a file can be created (:func:`creation_problem`).
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
    return creation_problem(probe)


def creation_problem(folder: str | os.PathLike) -> str | None:
    """Why no file can be created in the existing ``folder``, ``strerror``-like, or None:
    tried for real with a temporary file, removed at once (permission bits do not tell
    the whole story for root, read-only mounts or /proc). The package's one writability
    probe (:func:`writable_problem`, the workflow's results-folder preflight)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def damage(path: str | os.PathLike) -> str | None:
    """What is wrong with an existing output that is not whole, in a few words, or None.

    Every output is written atomically, so a damaged one was damaged after its job (a
    copy cut short, a full disk under ``cp``, a hand edit): a zip container (``.keras``,
    ``.npz``) without its end record, an HDF5 file (``.h5``, ``.cxi``) that does not open
    (HDF5 checks its recorded end against the file's size), a JSON file that does not
    parse. Cheap: a zip's last bytes, an HDF5 superblock, a JSON file of up to
    :data:`DAMAGE_JSON_BYTES`; the files' contents are their readers' to check. None too
    for a missing file, another kind, one this process may not read, an HDF5 file another
    process holds open (its lock is not asked for), a JSON file too large or too deep to
    parse here: their readers say what is wrong, if anything.
    """
    import zipfile

    path = Path(path)
    if not path.is_file() or not os.access(path, os.R_OK):
        return None
    kind = path.suffix.lower()
    try:
        if kind in (".keras", ".npz"):
            return None if zipfile.is_zipfile(path) else "not a whole zip archive (cut short?)"
        if kind in (".h5", ".cxi"):
            import h5py

            with h5py.File(path, "r", locking=False):
                return None
        if kind == ".json" and path.stat().st_size <= DAMAGE_JSON_BYTES:
            with open(path, "rb") as fh:
                json.load(fh)
    except RecursionError:
        return None
    except OSError as exc:  # h5py's errors are OSErrors; one with an errno is the OS's, not the file's
        if exc.errno is not None:
            return None
        reason = " ".join(str(exc).split())
        if (
            "locking" in reason.lower() or "lock file" in reason.lower() or "already open" in reason.lower()
        ):  # held, not damaged
            return None
        return "not a readable HDF5 file" + (" (truncated)" if "truncated" in reason else "")
    except ValueError:  # json's JSONDecodeError, a UnicodeDecodeError
        return "not valid JSON (cut short?)"
    return None


#: The largest JSON output :func:`damage` parses (the study's records are kilobytes).
DAMAGE_JSON_BYTES = 64 << 20


def _cannot_write(path: Path, exc: OSError) -> PtychoError:
    """One line for a write the filesystem refused (permissions, read-only, full disk)."""
    # h5py puts a multi-line report in strerror; the errno says it in a few words.
    reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())[:200] or type(exc).__name__
    return PtychoError(f"cannot write {path} ({reason}); choose a writable path or free space, then re-run")


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause: h5py, Keras and MLflow's SQL store wrap the OSError) is a
    full disk or quota: the OS's ENOSPC or EDQUOT, or SQLite's "database or disk is full"."""
    import errno

    for err in causes(exc):
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err).lower()
        if any(
            words in text
            for words in ("no space left on device", "disk quota exceeded", "errno = 28", "database or disk is full")
        ):
            return True
    return False


def aside(path: str | os.PathLike, suffix: str) -> str:
    """A free name beside ``path`` for a file set aside: ``<path><suffix>``, else with
    ``-2``, ``-3``, ... appended, so that an earlier one is never overwritten."""
    name, k = f"{path}{suffix}", 1
    while os.path.lexists(name):
        k += 1
        name = f"{path}{suffix}-{k}"
    return name


def write_error(path: str | os.PathLike, exc: OSError, atomic: bool = True) -> PtychoError:
    """The one line for a write of ``path`` the filesystem refused: a full disk or quota
    (:func:`no_space`), or another reason (permissions, a read-only mount). ``atomic``: the
    write was :func:`atomic_write`'s, so the line says that nothing was written."""
    return _disk_full(Path(path), atomic) if no_space(exc) else _cannot_write(Path(path), exc)


def full_disk_error(exc: BaseException) -> PtychoError:
    """The one line for a full disk or quota (:func:`no_space`) met outside the package's
    own writes (a library's: SQLite's, MLflow's), naming the file the OS named, if any."""
    named = next((e.filename for e in causes(exc) if isinstance(e, OSError) and e.filename), None)
    where = (
        f"the device of {Path(named).parent} while writing {Path(named).name}"
        if named
        else "the device of a file this command writes (its outputs, or its MLflow store)"
    )
    return PtychoError(f"no space left on {where}: free space there or choose another results folder, then re-run")


def _disk_full(path: Path, atomic: bool = True) -> PtychoError:
    kept = "; nothing was written (an earlier version of the file, if any, is unchanged)" if atomic else ""
    return PtychoError(
        f"no space left on the device of {path.parent} while writing {path.name}{kept}: free space there or "
        "choose another results folder, then re-run"
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


def stored_number(value: Any) -> float:
    """A number as a record stores it: JSON's null (how :func:`write_json` writes NaN and
    the infinities, the files being strict JSON) is NaN again."""
    return math.nan if value is None else float(value)


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


def write_json(path: str | os.PathLike, payload: dict, producer: str | None = None) -> None:
    """``payload`` as strict JSON; with ``producer``, stamped with its format version."""
    if producer is not None:
        payload = {**payload, FORMAT_KEY: format_stamp(producer)}

    def write(tmp: str) -> None:
        with open(tmp, "w") as fh:
            json.dump(_jsonable(payload), fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")

    atomic_write(path, write)


def read_json(path: str | os.PathLike, producer: str | Sequence[str] | Callable[[dict], str] | None = None) -> dict:
    """The record at ``path``; with ``producer`` (or a function of the record naming it),
    refused unless it is in that producer's current format (:func:`check_format`), and
    returned without its stamp."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        raise PtychoError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PtychoError(f"{path}: a folder, not a JSON file; name the .json file in it") from None
    except json.JSONDecodeError as exc:
        raise PtychoError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); re-create it") from None
    except UnicodeDecodeError:
        raise PtychoError(f"{path}: not valid JSON (not UTF-8 text); name the JSON file meant") from None
    if producer is not None:
        if not isinstance(record, dict):
            raise PtychoError(
                f"{path}: not a record (a JSON object); re-create it with the ptycho command that writes it"
            )
        record = dict(record)
        stamp = record.pop(FORMAT_KEY, None)
        check_format(path, stamp, producer(record) if callable(producer) else producer)
    return record


def write_arrays(path: str | os.PathLike, *, producer: str | None = None, **arrays: np.ndarray) -> None:
    """``arrays`` as an ``.npz`` file (no pickles); with ``producer``, stamped with its format version."""
    if producer is not None:
        arrays[FORMAT_KEY] = np.array(json.dumps(format_stamp(producer)))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write)


def read_arrays(
    path: str | os.PathLike, required: tuple[str, ...], producer: str | Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """The arrays of ``path``, each of ``required`` present; with ``producer``, refused
    unless in that producer's current format (:func:`check_format`), without the stamp."""
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise PtychoError(f"{path}: no such file") from None
    except Exception as exc:  # zipfile, pickle and format errors alike
        raise PtychoError(f"{path}: not a readable .npz artefact ({type(exc).__name__}); re-create it") from None
    if producer is not None:
        stamp = data.pop(FORMAT_KEY, None)
        if stamp is not None:
            try:
                stamp = json.loads(str(stamp))
            except ValueError:
                stamp = str(stamp)  # check_format refuses it
        check_format(path, stamp, producer)
    missing = [k for k in required if k not in data]
    if missing:
        raise PtychoError(f"{path}: missing array '{missing[0]}'; re-create it with the ptycho command that writes it")
    return data
