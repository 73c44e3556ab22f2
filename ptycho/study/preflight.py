"""What the workflow checks while it is parsed, before its first job: the resolved config
(:func:`parse_time_checks`), the results and report folders (inside the work folder,
writable, not another folder's report), the MLflow store and experiment, the disk, the
memory and the address space the jobs will need, and the outputs a rerun must make again
(:func:`holes`). Each problem is one line (:class:`~ptycho.errors.ConfigError` or
:class:`~ptycho.errors.PtychoError`) before anything is written.

Used by the Snakefile (``rules/common.smk``) and testable without Snakemake; the
configuration itself is :mod:`ptycho.study.workflow`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from ptycho.config import spec
from ptycho.errors import ConfigError
from ptycho.study.workflow import arm_lists, arms, model_config, resolve, simulation_config, train_config


def results_folder(cfg: Mapping, workdir: str | os.PathLike | None = None) -> Path:
    """The configured ``results`` folder, absolute; refused if it leaves ``workdir``.

    Outputs stay inside the folder the workflow runs in (``workdir``, default the current
    folder) unless ``allow_results_outside: true``: ``results: ../../etc`` or an absolute
    path elsewhere is one line, not files written there. The check is on the path as
    written (``..`` resolved, symbolic links not followed): a link the user made inside
    the work folder is their explicit choice.
    """
    base = Path(os.path.abspath(workdir or os.getcwd()))
    folder = Path(os.path.normpath(base / os.path.expanduser(str(cfg["results"]))))
    if not cfg.get("allow_results_outside", False) and folder != base and base not in folder.parents:
        raise ConfigError(
            f"config key 'results' = {cfg['results']!r} is outside the work folder {base}; use a folder inside it, "
            "or set allow_results_outside: true to write there on purpose"
        )
    return folder


#: The longest file name most file systems take, in bytes (ext4, XFS, APFS).
NAME_MAX = 255


def report_folder(cfg: Mapping) -> str:
    """Where the validation report of a results folder's preset goes, relative to the work
    folder: ``reports/<preset>`` for the default ``results``, ``reports/<results>/<preset>``
    for any other (its path with ``/`` as ``-``), so that two results folders of one preset
    never overwrite each other's report (e.g. ``results: runs/b`` ->
    ``reports/runs-b/default``); a name longer than :data:`NAME_MAX` bytes is cut and
    ends in a hash of the whole path."""
    results = os.path.normpath(str(cfg["results"]))
    if results == spec("results")["default"]:
        return f"reports/{cfg['preset']}"
    name = results.strip("/").replace("/", "-").lstrip(".-") or "results"
    if len(name.encode()) > NAME_MAX:  # a legal deep or long path flattens past a file name's limit
        import hashlib

        tail = hashlib.sha1(results.encode()).hexdigest()[:12]
        name = name.encode()[: NAME_MAX - 13].decode(errors="ignore") + "-" + tail
    return f"reports/{name}/{cfg['preset']}"


def check_report_folder(cfg: Mapping, workdir: str | os.PathLike | None = None) -> None:
    """Refuse a results folder whose report folder already holds another one's report.

    :func:`report_folder` flattens a results path into one folder name, which is readable
    but not one-to-one (``runs/b``, ``runs-b``, ``-runs-b`` and ``..runs-b`` all give
    ``reports/runs-b/<preset>``): the report of one would silently replace the other's.
    The published ``validation.json`` names the results folder it describes (its
    config's ``results``); another one there is one line before any job, unless it is
    this folder's own staged report (``<results>/<preset>/report``) to the byte: a folder
    copied or moved (``cp -a qa/base qa/f3``) keeps reports naming its old place."""
    import json

    base = Path(os.path.abspath(workdir or os.getcwd()))
    published = base / report_folder(cfg) / "validation.json"
    try:
        other = json.loads(published.read_text())["config"]["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no report yet (or not one of ours: publishing it again is the fix)
    theirs = results_folder({"results": other, "allow_results_outside": True}, workdir)
    if theirs != results_folder(cfg, workdir):
        own = results_folder(cfg, workdir) / cfg["preset"] / "report" / "validation.json"
        with contextlib.suppress(OSError):
            if own.read_bytes() == published.read_bytes():
                return  # this folder's own report, made before it was copied or moved (it names the old place)
        raise ConfigError(
            f"config key 'results' = {cfg['results']!r} reports to {published.parent.relative_to(base)}, which holds "
            f"the report of results folder {other!r}; choose a results name that does not flatten to the same "
            "report folder (--config results=<folder>), or move that report away"
        )


def preflight_results(cfg: Mapping, workdir: str | os.PathLike | None = None) -> None:
    """One line if the results folder cannot be written; leaves nothing behind.

    For the workflow to call while it is parsed: otherwise Snakemake's own ``makedirs``
    of the first job's output fails with a traceback. The deepest existing folder on the
    way to ``results/<preset>`` must take a new file (:func:`ptycho.artifacts.creation_problem`).
    """
    from ptycho.artifacts import creation_problem

    root = results_folder(cfg, workdir)
    target = root / cfg["preset"]
    probe = target
    while not probe.exists():
        probe = probe.parent
    fix = "choose a writable folder with --config results=<folder>"
    if not probe.is_dir():
        raise ConfigError(f"results folder {root} cannot be created ({probe} is a file); {fix}")
    problem = creation_problem(probe)
    if problem:
        raise ConfigError(f"results folder {root} cannot be written ({problem} in {probe}); {fix}")


def parse_time_checks(
    config: Mapping,
    overrides: Mapping | None = None,
    workdir: str | os.PathLike | None = None,
    config_files: Sequence[str | os.PathLike] = (),
    hardware=None,
) -> dict:
    """Everything the workflow checks while it is parsed, before any job: the config
    files Snakemake read (``config_files``: a key given twice, :func:`ptycho.config.check_unique_keys`),
    the resolved config (:func:`resolve`), the user's own data files if it names some
    (:func:`ptycho.study.data_files.check_data`), its results folder (:func:`preflight_results`), its
    jobs' memory against this machine's (:func:`ptycho.study.resources.check_memory`), the
    tracking server named by ``MLFLOW_TRACKING_URI``, the store of a study that has
    run (damaged or lost: the line names the rebuild), the study's experiment
    (:func:`check_study_name`) and a store that cannot be written (:func:`preflight_store_writable`).
    ``precision: auto`` resolves for ``hardware`` (None: this machine's). Raises a one-line :class:`ConfigError` / :class:`~ptycho.errors.PtychoError`."""
    from ptycho.config import check_unique_keys
    from ptycho.runtime import machine_memory_bytes
    from ptycho.study.data_files import check_data
    from ptycho.study.resources import check_memory
    from ptycho.tracking import preflight_environment, preflight_store

    for path in config_files:
        check_unique_keys(path)
    cfg = resolve(config, overrides, hardware=hardware)
    depths = {kind: model_config(cfg, kind).depth for kind in cfg["models"]}
    own_data = check_data(cfg, depths, workdir)  # the user's own files (config data), if any
    preflight_results(cfg, workdir)
    if not own_data:  # the estimate is the simulation's; imported files are bounded as they are read
        check_memory(simulation_config(cfg), job_memory(cfg), machine_memory_bytes(), "this machine")
    check_report_folder(cfg, workdir)
    preflight_environment()
    results = results_folder(cfg, workdir)
    preflight_store(results, cfg["preset"])
    check_study_name(cfg, results)
    preflight_store_writable(results, cfg["preset"])
    return cfg


def check_study_name(cfg: Mapping, results: str | os.PathLike) -> None:
    """Refuse a ``study`` (MLflow experiment) other than the one the results folder's runs are in.

    Refused rather than honoured: a run's experiment is fixed when MLflow creates it
    (no API moves a run), and a results folder has one parent run, created once and
    reused by every later invocation (the ``mlflow_parent`` rule). A new name would
    either leave every run in the old experiment while ``config.json`` says the new one
    (what happened), or need a second parent run in the new experiment with the
    finished jobs' runs still under the first: one study split in two. The parent's
    experiment is in its ``parent.json``; a record without one is not checked.
    """
    import json

    parent_json = Path(results) / cfg["preset"] / "mlflow" / "parent.json"
    try:
        old = json.loads(parent_json.read_text()).get("experiment")
    except (OSError, ValueError, AttributeError):
        return
    if old and old != cfg["study"]:
        raise ConfigError(
            f"config key 'study' = {cfg['study']!r}, but the runs of {parent_json.parent.parent} are in MLflow "
            f"experiment {old!r} (its parent.json); put study back to {old!r}, or give the new experiment a new "
            "results folder (--config results=<folder>)"
        )


def preflight_store_writable(results: str | os.PathLike, preset: str) -> None:
    """One line, before any job, if the study's SQLite store cannot be written.

    Every job writes to the store (its child run), the report job last; without this a
    read-only ``mlflow.db`` (a read-only mount, ``chmod 444`` for a user other than root)
    fails each job with tracebacks. Tried for real, nothing left behind
    (:func:`ptycho.tracking.store.sqlite_write_problem`); a server or another database is
    for the jobs to meet.
    """
    from ptycho.errors import PtychoError
    from ptycho.tracking.store import sqlite_write_problem, study_sqlite

    path = study_sqlite(results, preset)
    problem = sqlite_write_problem(path) if path is not None else ""
    if problem:
        raise PtychoError(
            f"MLflow store {path} cannot be written ({problem}); make it and its folder writable "
            "(remount read-write, chmod u+w) and re-run, or start over in another results folder (--config results=<folder>)"
        )


def holes(stages: Sequence[Mapping[str, Sequence[str]]], gone: Collection[str] = ()) -> list[str]:
    """The study's missing outputs that later results were made from: to make again.

    ``stages`` lists the study's outputs in the order the pipeline makes them, each stage
    as ``{group: paths}`` where a group is an arm's name, a condition's
    (``condition:<name>``, ``rules/rerun.smk``), or ``""`` for the study's own files
    (datasets, bench, checks, solver, figures, report). A missing path is a hole
    when a later stage holds an existing file of its own group or of the study's own (an
    arm's last files, its metrics, are read by the study's checks; for an arm with any
    file made), or, for the study's own files, any existing file. Snakemake itself never rebuilds a missing file whose
    consumers exist (a training killed under ``--forcerun`` loses its outputs, and the
    next run says "Nothing to be done" with the report describing a model that is gone);
    forcing each hole re-runs it and everything after it. An arm new to the matrix is no
    hole (its files are all missing): the changed report inputs already re-run it.
    ``gone`` are paths to count as missing although they exist (damaged outputs a dry run
    leaves in place)."""
    exists = [
        {g: [p for p in paths if os.path.exists(p) and p not in gone] for g, paths in stage.items()} for stage in stages
    ]
    present = {g for st in exists for g, files in st.items() if files and g}  # arms with something made
    found = []
    for k, stage in enumerate(stages):
        later = exists[k + 1 :]
        for group, paths in stage.items():
            # made from it: a later file of its own arm, or of the study's own (made from
            # every arm: for an arm only if it is not new to the matrix), or, for the study's
            # own files, any later file
            made_from = any(
                files and (group == "" or g == group or (g == "" and group in present))
                for st in later
                for g, files in st.items()
            )
            if made_from:
                found += [p for p in paths if p not in exists[k][group]]
    return found


#: What a study writes beside its datasets and reconstructions (models, figures, report,
#: MLflow store and artifacts, logs): about the smoke study's.
OTHER_BYTES = 8 << 20


#: The least free space a run starts with: below it even the jobs' logs, the lock files
#: and a new MLflow store (about 1 MiB) may not be written.
MIN_FREE_BYTES = 4 << 20


def disk_bytes(cfg: Mapping) -> int:
    """About what a study writes in its results folder, in bytes: its datasets (simulated:
    the counts of both splits, once as HDF5 and once as CXI; the user's: their files' size),
    a float32 image per test pattern per arm (the reconstructions), and :data:`OTHER_BYTES`.
    The files are compressed, so a study may write less (the smoke study's datasets and
    reconstructions: about 0.7x this)."""
    from ptycho.study.data_files import data_files
    from ptycho.study.resources import split_of

    files = data_files(cfg)
    if files:
        return sum(os.path.getsize(p) for p in set(files.values()) if os.path.isfile(p)) + OTHER_BYTES
    sim = simulation_config(cfg)
    train, test = split_of(sim, "train"), split_of(sim, "test")
    datasets = 2 * 4 * (train.patterns * train.pattern_pixels + test.patterns * test.pattern_pixels)
    return datasets + len(arms(cfg)) * 4 * test.patterns * test.pattern_pixels + OTHER_BYTES


def disk_lines(folder: str | os.PathLike, need: int) -> tuple[str | None, str | None]:
    """``(error, warning)`` for the device of the results ``folder`` before the first job,
    each one line or None. An error below :data:`MIN_FREE_BYTES` free: on a full disk the
    jobs' own logs cannot be written, so their errors would be lost (a 'Logfile: empty
    file' and a traceback before). A warning when the device holds less than the study
    writes (``need``, :func:`disk_bytes`, less what the folder holds already: a rerun):
    an estimate, so the run goes on, and a job that fills the disk says so in one line."""
    from ptycho.data.untrusted import human

    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return None, None  # not a folder this process can look at: the lock's write says why
    fix = "free space there or choose another results folder, then run again"
    if free < MIN_FREE_BYTES:
        return (
            f"the device of results folder {folder} has {human(free)} free, less than the {human(MIN_FREE_BYTES)} even the jobs' logs and records need; {fix}",
            None,
        )
    held = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                held += os.lstat(os.path.join(root, name)).st_size
    if free >= need - held:
        return None, None
    return None, (
        f"the device of results folder {folder} has {human(free)} free, and this study writes about "
        f"{human(need - held)} more there (datasets, reconstructions, models, figures, MLflow); if a job "
        f"fills it, {fix}"
    )


def address_space_error(cfg: Mapping) -> str | None:
    """Why the study's trainings cannot run under this process's address-space limit
    (``ulimit -v``), which every local job inherits, in one line; or None. Below what
    TensorFlow reserves to start (:func:`ptycho.runtime.address_space_problem`), or below
    a job's resident estimate plus what TensorFlow reserves and never uses (beyond the
    estimate's share, :data:`ptycho.study.resources.TENSORFLOW_BYTES`): either aborts in
    native code (exit 127, 134 or 139). The user's own data: its size is bounded as read."""
    from ptycho.runtime import TF_ADDRESS_SPACE_BYTES, address_space_limit, address_space_problem
    from ptycho.study.data_files import data_files
    from ptycho.study.resources import TENSORFLOW_BYTES, check_memory

    too_little = address_space_problem()
    if too_little:
        return f"{too_little}; no training could start"
    space = address_space_limit()
    if space is None or data_files(cfg):
        return None
    reserved = TF_ADDRESS_SPACE_BYTES - TENSORFLOW_BYTES
    needs = {job: need + (reserved if job != "simulate" else 0) for job, need in job_memory(cfg).items()}
    try:
        check_memory(simulation_config(cfg), needs, space, "address space this process may use (ulimit -v)")
    except ConfigError as err:
        return str(err)
    return None


def job_memory(cfg: Mapping) -> dict[str, int]:
    """Peak memory in bytes of the study's simulate job and of one training and one
    inference job (the largest over its models): :func:`ptycho.study.resources.estimate_bytes`."""
    from ptycho.study.resources import estimate_bytes

    models = []
    for kind in cfg["models"]:
        modes, precisions, seeds = arm_lists(cfg, kind)
        models.append((model_config(cfg, kind), train_config(cfg, modes[0], seeds[0], kind, precisions[0])))
    return estimate_bytes(simulation_config(cfg), models)
