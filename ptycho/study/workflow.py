"""The pipeline's configuration: presets, schema validation, defaults, derived configs.

Used by the Snakefile (``rules/common.smk``) and testable without Snakemake.
Precedence, lowest first: the schema's defaults (the study's), ``config.yaml`` and any
``--configfile`` (its deliberate choices; Snakemake merges them into ``config``), the
selected preset, the command line's ``--config`` (the ``overrides``). The result is validated against the schema shipped with the package
(``ptycho/config.schema.yaml``, :data:`SCHEMA`) and every section is also built into its
frozen dataclass, so the checks that relate two keys run at the edge too.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ptycho.config import SCHEMA_FILE as SCHEMA
from ptycho.config import spec
from ptycho.errors import ConfigError


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """``override`` merged into a copy of ``base``; nested mappings merge key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def typed_overrides(value: Any) -> Any:
    """Re-type command-line values: Snakemake parses nested ``--config`` values with YAML's
    BaseLoader, which leaves every scalar a string (``{epochs: 3}`` -> ``{"epochs": "3"}``).
    Strings that YAML reads as numbers, booleans or null become those; others stay strings
    (so a typo such as ``ten`` is still reported against the schema)."""
    import yaml

    if isinstance(value, Mapping):
        return {k: typed_overrides(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed_overrides(v) for v in value]
    if isinstance(value, str):
        for number in (int, float):  # before YAML: YAML 1.1 reads "2e-3" as a string
            try:
                return number(value)
            except ValueError:
                pass
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if parsed is None or isinstance(parsed, bool):
            return parsed
    return value


def load_schema(path: str | Path = SCHEMA) -> dict:
    """The packaged schema (read once, :func:`ptycho.config.schema`), or the one at ``path``,
    its XLA modes and precisions those of their registries (:func:`registry_choices`)."""
    if Path(path) == SCHEMA:
        from ptycho.config import schema

        return registry_choices(schema())
    import yaml

    with open(path) as fh:
        return registry_choices(yaml.safe_load(fh))


def registry_choices(schema: dict) -> dict:
    """``schema`` with every choice of an XLA mode, a precision and a condition (the
    ``enum`` the schema gives ``xla``, ``precision`` and ``conditions``, wherever it is
    used: a model's own lists, the bench's) replaced by the registry's names
    (:data:`ptycho.nets.xla.MODES`, :data:`ptycho.nets.precision.PRECISIONS`,
    :data:`ptycho.study.conditions.CONDITIONS`): the YAML lists them for its readers (a
    test keeps it equal), and one added by its record is a choice of the config."""
    from ptycho.nets.precision import AUTO, PRECISIONS
    from ptycho.nets.xla import MODES
    from ptycho.study.conditions import CONDITIONS

    props = schema.get("properties", {})
    try:
        listed = {
            tuple(props["xla"]["items"]["anyOf"][0]["enum"]): list(MODES),
            tuple(props["precision"]["items"]["enum"]): [*PRECISIONS, AUTO],
            tuple(props["conditions"]["items"]["enum"]): list(CONDITIONS),
        }
    except (KeyError, IndexError, TypeError):
        return schema  # not the study's schema

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("enum"), list) and tuple(node["enum"]) in listed:
                node["enum"] = list(listed[tuple(node["enum"])])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _fill_defaults(instance: Any, schema: dict) -> Any:
    """Fill ``default`` values of object properties, recursively (before validation), and
    put the keys in the schema's order (the rules' flags follow it, whichever layer
    gave a key: schema, config.yaml, preset or command line)."""
    if schema.get("type") == "object" and isinstance(instance, dict):
        properties = schema.get("properties", {})
        for key, sub in properties.items():
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                instance[key] = _fill_defaults(instance[key], sub)
        ordered = {key: instance[key] for key in properties if key in instance}
        instance = ordered | {key: value for key, value in instance.items() if key not in ordered}
    return instance


def _one_line(error) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    where = f"config key '{path}'" if path else "config"
    message = " ".join(str(error.message).split())
    if error.validator == "enum":
        message = f"{error.instance!r} is not allowed; choose one of {', '.join(map(str, error.validator_value))}"
    elif error.validator == "anyOf":
        choices = [str(v) for sub in error.validator_value for v in sub.get("enum", [])]
        types = [sub["type"] for sub in error.validator_value if "enum" not in sub and "type" in sub]
        message = f"{error.instance!r} is not allowed; choose one of {', '.join(choices + types)}"
    elif error.validator == "pattern":
        allowed = str(error.validator_value)
        if allowed.startswith("^[A-Za-z0-9") and allowed.endswith("]+$"):  # a character class: name its punctuation
            allowed = "letters, digits and " + allowed[len("^[A-Za-z0-9") : -len("]+$")]
        message = f"{error.instance!r} has characters that are not allowed (shell syntax, spaces); use only {allowed}"
    elif error.validator == "minItems":
        message = f"{error.instance!r} is empty; list at least {error.validator_value} value(s)"
    elif error.validator == "type":
        message = f"{message}; give a value of type {error.validator_value}"
    elif error.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bounds = [
            f"{word} {error.schema[key]}"
            for key, word in (
                ("minimum", "at least"),
                ("exclusiveMinimum", "more than"),
                ("maximum", "at most"),
                ("exclusiveMaximum", "less than"),
            )
            if key in error.schema
        ]
        message = f"{message}; give a value {' and '.join(bounds)}"
    elif error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        message = f"{message}; allowed keys: {allowed}"
    return f"{where}: {message}"


def validate(config: dict, schema: dict) -> dict:
    """Defaults filled in, then validated; the first error is one line naming the key."""
    import jsonschema

    config = _fill_defaults(copy.deepcopy(config), schema)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        raise ConfigError(_one_line(errors[0]))
    return config


def resolve(config: Mapping, overrides: Mapping | None = None, schema_path: str | Path = SCHEMA, hardware=None) -> dict:
    """Apply the preset and the command-line overrides, validate, resolve ``precision:
    auto`` for ``hardware`` (:func:`resolve_precisions`; None: this machine's, or the one
    the environment names, :func:`ptycho.study.bench.machine.hardware`), check the
    dataclasses."""
    schema = load_schema(schema_path)
    overrides = typed_overrides(dict(overrides or {}))
    first = validate(deep_merge(config, overrides), schema)
    preset = first["preset"]
    presets = first.get("presets", {})
    if preset != "default" and preset not in presets:
        raise ConfigError(
            f"config key 'preset': {preset!r} has no block under 'presets'; add one to config.yaml or choose one of "
            f"{', '.join(['default', *presets])}"
        )
    merged = deep_merge(deep_merge(config, presets.get(preset, {})), overrides)
    resolved = validate(merged, schema)
    # one spelling per folder: ./qa/base, qa//base and qa/base/ are qa/base (Snakemake
    # warned hundreds of times about the others and the report was published again)
    resolved["results"] = os.path.normpath(str(resolved["results"]))
    resolved["xla"] = _modes(resolved["xla"])
    for kind, own in resolved.get("per_model", {}).items():
        if "xla" in own:
            own["xla"] = _modes(own["xla"], f"per_model.{kind}.xla")
    if "xla" in resolved["bench"]:
        resolved["bench"]["xla"] = _modes(resolved["bench"]["xla"], "bench.xla")
    check_answerable(resolved)
    check_shell_safe(resolved)
    resolve_precisions(resolved, hardware)
    sim = simulation_config(resolved)
    for kind in resolved["models"]:
        _check_pooling(sim.n, model_config(resolved, kind), _key_prefix(resolved, "model", kind))
        modes, precisions, seeds = arm_lists(resolved, kind)
        for precision in precisions:
            train_config(resolved, modes[0], seeds[0], kind, precision)
    return resolved


def resolve_precisions(cfg: dict, hardware=None) -> None:
    """Replace ``auto`` in every precision list of ``cfg`` (the study's, each model's, the
    bench's) by the fastest precision ``hardware`` computes natively
    (:func:`ptycho.nets.precision.native_precision`), in place, and record it with its
    reason under ``auto_precision`` (``config.json``, the parent run's params, the report's
    first line). An emulated precision is trained or timed only where it is named.

    The record is added only when some list said ``auto``: a config that names its
    precisions keeps the hash it had."""
    from ptycho.nets.precision import AUTO, native_precision, resolve_auto

    lists = [cfg, *cfg.get("per_model", {}).values(), cfg["bench"]]
    if not any(AUTO in own.get("precision", []) for own in lists):
        return
    if hardware is None:
        from ptycho.study.bench.machine import hardware as detect

        hardware = detect()
    native, why = native_precision(hardware)
    for own in lists:
        if "precision" in own:
            own["precision"] = resolve_auto(own["precision"], native)
    cfg["auto_precision"] = {"precision": native, "reason": why}


def auto_precision_line(cfg: Mapping) -> str:
    """The run's first line when its config said ``precision: auto``: what it resolved to
    on this machine, and why; '' otherwise."""
    auto = cfg.get("auto_precision")
    if not auto:
        return ""
    from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION

    reduced = next(p for p in PRECISIONS if p != REFERENCE_PRECISION)  # the first reduced one: bfloat16
    other = reduced if auto["precision"] == REFERENCE_PRECISION else REFERENCE_PRECISION
    return f"precision auto = {auto['precision']}: {auto['reason']} (to override: --config 'precision=[{other}]')"


def check_answerable(cfg: Mapping) -> None:
    """Refuse a matrix that cannot answer the study's question, before any job.

    The question is whether an XLA mode makes the PINN faster without making it worse,
    each mode against ``off`` at the same precision. Without the PINN, without ``off``, or
    with ``off`` alone, the checklist's items would have no pair to compare, and "not
    measured" must not read as "XLA made it worse" (a FAIL): such a config is one line
    naming the key and the fix. The baseline's own lists are free (it is a comparison
    arm, not the subject)."""
    from ptycho.nets.xla import REFERENCE

    def key(section: str) -> str:
        return f"per_model.pinn.{section}" if section in cfg.get("per_model", {}).get("pinn", {}) else section

    if "pinn" not in cfg["models"]:
        raise ConfigError(
            f"config key 'models' = {cfg['models']!r} has no pinn, the model whose XLA speed and quality the study "
            "measures; add it (models=[pinn,baseline])"
        )
    modes = arm_lists(cfg, "pinn")[0]
    example = f"[{REFERENCE},{','.join(m for m in modes if m != REFERENCE) or 'physics'}]"
    if REFERENCE not in modes:
        raise ConfigError(
            f"config key '{key('xla')}' = {modes!r} has no {REFERENCE}, the reference every XLA mode is compared with "
            f"at the same precision; add it (xla={example})"
        )
    if modes == [REFERENCE]:
        raise ConfigError(
            f"config key '{key('xla')}' = {modes!r} trains no XLA mode, so there is no pair to compare; add one "
            f"(xla={example})"
        )
    stray = [m for m in cfg["bench"].get("models", []) if m not in cfg["models"]]
    if stray:
        raise ConfigError(
            f"config key 'bench.models': {', '.join(stray)} is not one of the study's models "
            f"({', '.join(cfg['models'])}); the bench times trained models' architectures, so list only those"
        )
    bench_models, bench_modes, _ = bench_lists(cfg)
    if "pinn" not in bench_models:
        raise ConfigError(
            f"config key 'bench.models' = {bench_models!r} does not time the PINN, whose XLA speedup the study "
            "measures; add pinn"
        )
    if all(m == REFERENCE for m in bench_modes):
        raise ConfigError(
            f"config key 'bench.xla' = {bench_modes!r} times no XLA mode, so the speedup has nothing to measure; "
            f"add one (bench={{xla: {example}}}) or leave bench.xla out to time the study's modes"
        )


def _check_pooling(n: int, model, where: str) -> None:
    """The networks halve the patch ``depth`` times: ``n`` must be a multiple of ``2**depth``."""
    factor = 2**model.depth
    if n % factor:
        raise ConfigError(
            f"config key 'simulation.n' = {n} is not a multiple of {factor}, which the {model.kind} needs "
            f"({where}.depth = {model.depth} pooling levels); use {n - n % factor + factor} or a smaller depth"
        )


def _modes(values: list, key: str = "xla") -> list[str]:
    """An ``xla`` list as mode names (``true``/``false`` read as jit/off), each once."""
    from ptycho.nets.xla import parse_mode

    modes = [parse_mode(v, key) for v in values]
    if len(set(modes)) != len(modes):
        raise ConfigError(
            f"config key '{key}': {values!r} names a mode twice (true is jit, false is off); list each once"
        )
    return modes


#: Characters a POSIX shell never interprets (the set ``shlex.quote`` leaves bare).
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def check_shell_safe(cfg: Mapping, prefix: str = "") -> None:
    """Refuse any string of the resolved config (presets aside) that a shell would interpret.

    The rules paste config values into ``shell:`` commands (``flags``, paths under
    ``results``); a space, ``;``, ``$(...)`` or a backtick there would split or run
    commands. Values are refused here, at validation, and :func:`cli_flags` quotes them
    as well.
    """
    for key, value in cfg.items():
        if key == "presets" and not prefix:
            continue  # merged into the config above; only the selected one is in force
        if key == "data" and not prefix:
            continue  # the user's file names, which the import_data rule quotes
        name = f"{prefix}{key}"
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, Mapping):
                check_shell_safe(v, f"{name}.")
            elif isinstance(v, str) and not _SHELL_SAFE.fullmatch(v):
                raise ConfigError(
                    f"config key '{name}' = {v!r} has characters a shell would interpret (spaces, ; $ ` ( ) | & < > "
                    "quotes); use only letters, digits and _@%+=:,./-"
                )


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
    way to ``results/<preset>`` must take a new file (tried with a temporary file that is
    removed at once: permission bits say nothing for root, read-only mounts or /proc).
    """
    import tempfile

    root = results_folder(cfg, workdir)
    target = root / cfg["preset"]
    probe = target
    while not probe.exists():
        probe = probe.parent
    fix = "choose a writable folder with --config results=<folder>"
    if not probe.is_dir():
        raise ConfigError(f"results folder {root} cannot be created ({probe} is a file); {fix}")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ConfigError(
            f"results folder {root} cannot be written ({exc.strerror or type(exc).__name__} in {probe}); {fix}"
        ) from None


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


def precision_warnings(cfg: Mapping, hardware=None) -> list[str]:
    """One line per precision the study names that this machine (``hardware``, default
    the detected one) only emulates: the study runs, but that arm trains slower than
    float32 here. ``precision: auto`` never picks one."""
    from ptycho.nets.precision import PRECISIONS, is_native
    from ptycho.study.bench.machine import hardware as detect

    hardware = detect() if hardware is None else hardware
    lines = []
    named = [p for kind in cfg["models"] for p in arm_lists(cfg, kind)[1]] + bench_lists(cfg)[2]
    for p in dict.fromkeys(named):
        if is_native(p, hardware):
            continue
        record = PRECISIONS[p]
        lacks = (
            f"{hardware.words()} has no {record.compute_dtype} tensor cores"
            if hardware.gpu_capability is not None
            else f"this CPU has none of {', '.join(record.native_flags)}"
        )
        lines.append(
            f"precision {p}: {lacks}, so it emulates the type and its arms train slower than float32 here; use "
            "--config 'precision=[auto]' (the fastest native precision) for speed on this machine"
        )
    return lines


def cli_flags(section: Mapping[str, Any]) -> str:
    """``--key value`` for every key of a config section (the CLI's own option names),
    each value quoted for the shell (booleans as ``true``/``false``)."""
    import json
    import shlex

    return " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(json.dumps(v) if isinstance(v, bool) else str(v))}"
        for k, v in section.items()
    )


def simulation_config(cfg: Mapping):
    from ptycho.config import SimulationConfig, from_dict

    return from_dict(SimulationConfig, cfg["simulation"], "simulation")


def _own(cfg: Mapping, section: str, kind: str) -> dict:
    """Model ``kind``'s own keys of ``section`` (``per_model.<kind>.<section>``), maybe none."""
    return cfg.get("per_model", {}).get(kind, {}).get(section) or {}


def section_for(cfg: Mapping, section: str, kind: str) -> dict:
    """Config section ``model`` or ``train`` as model ``kind`` sees it: the shared keys,
    then that model's own under ``per_model.<kind>.<section>``."""
    return deep_merge(cfg[section], _own(cfg, section, kind))


def _key_prefix(cfg: Mapping, section: str, kind: str) -> str:
    """Where an error in the merged section points: the model's own keys when it has some."""
    return f"per_model.{kind}.{section}" if _own(cfg, section, kind) else section


def solver_config(cfg: Mapping):
    from ptycho.config import from_dict
    from ptycho.solvers.gradient import SolverConfig

    return from_dict(SolverConfig, cfg["solver"], "solver")


def solver_mode(cfg: Mapping) -> str:
    """The XLA mode the solver's single-mode jobs use (warm starts, scaling): the study's
    first mode compared with the reference, else the reference itself."""
    from ptycho.nets.xla import REFERENCE

    return next((m for m in cfg["xla"] if m != REFERENCE), REFERENCE)


def model_config(cfg: Mapping, kind: str):
    from ptycho.config import from_dict
    from ptycho.nets.models import ModelConfig

    return from_dict(ModelConfig, dict(section_for(cfg, "model", kind), kind=kind), _key_prefix(cfg, "model", kind))


def train_config(cfg: Mapping, xla: str, seed: int, kind: str = "pinn", precision: str = "float32"):
    from ptycho.config import from_dict
    from ptycho.nets.train import TrainConfig

    values = dict(section_for(cfg, "train", kind), xla=xla, seed=seed, precision=precision)
    return from_dict(TrainConfig, values, _key_prefix(cfg, "train", kind))


def arm_lists(cfg: Mapping, kind: str) -> tuple[list[str], list[str], list[int]]:
    """The XLA modes, precisions and seeds model ``kind`` trains: its own lists under
    ``per_model.<kind>``, else the study's. A study may so spend its training time where
    the question is (e.g. the PINN in every mode, the baseline only in ``off``), while the
    bench and the accuracy and gradients items still cover the study's lists."""
    own = cfg.get("per_model", {}).get(kind, {})
    return (own.get("xla", cfg["xla"]), own.get("precision", cfg["precision"]), own.get("seeds", cfg["seeds"]))


def bench_lists(cfg: Mapping) -> tuple[list[str], list[str], list[str]]:
    """The models, XLA modes and precisions the bench times: ``bench.models|xla|precision``,
    each else the study's list."""
    own = cfg["bench"]
    return (own.get("models", cfg["models"]), own.get("xla", cfg["xla"]), own.get("precision", cfg["precision"]))


def checked_lists(cfg: Mapping) -> tuple[list[str], list[str]]:
    """The XLA modes and precisions the accuracy and gradients items check: the study's and
    the bench's, each once. Every arm the report times is also shown to compute the same
    thing (a check costs seconds per mode, not a training)."""
    _, modes, precisions = bench_lists(cfg)
    return list(dict.fromkeys([*cfg["xla"], *modes])), list(dict.fromkeys([*cfg["precision"], *precisions]))


def arms(cfg: Mapping) -> list[str]:
    """Every (model, mode, precision, seed) job name the study trains, model by model."""
    from ptycho.study.arms import matrix

    names = []
    for kind in cfg["models"]:
        modes, precisions, seeds = arm_lists(cfg, kind)
        names += matrix([kind], modes, seeds, precisions)
    return names


def warm_arms(cfg: Mapping) -> dict[str, str]:
    """Per model, the arm whose stitched object warm-starts the iterative solver: its
    ``off`` arm of its first seed, at float32 when it trains float32, else at its first
    precision; a model without an ``off`` arm has none."""
    from ptycho.nets.precision import REFERENCE_PRECISION
    from ptycho.nets.xla import REFERENCE
    from ptycho.study.arms import arm_name

    out = {}
    for kind in cfg["models"]:
        modes, precisions, seeds = arm_lists(cfg, kind)
        if REFERENCE in modes:
            precision = REFERENCE_PRECISION if REFERENCE_PRECISION in precisions else precisions[0]
            out[kind] = arm_name(kind, REFERENCE, seeds[0], precision)
    return out


def holes(stages: Sequence[Mapping[str, Sequence[str]]], gone: Collection[str] = ()) -> list[str]:
    """The study's missing outputs that later results were made from: to make again.

    ``stages`` lists the study's outputs in the order the pipeline makes them, each stage
    as ``{group: paths}`` where a group is an arm's name, or ``""`` for the study's own
    files (datasets, bench, checks, solver, figures, report). A missing path is a hole
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


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask: a cgroup, ``taskset`` or a SLURM
    allocation can give fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def declared_threads(threads: int, cores: int, machine: int) -> int:
    """Threads a local job declares to Snakemake so that jobs never share a CPU.

    Snakemake runs jobs while the sum of their declared threads fits ``--cores``; it
    does not know the machine. ``snakemake --cores 8`` on 2 CPUs would run four
    2-thread trainings at once, eight threads on two cores, where oneDNN's threads
    spin-wait on each other (1 s per step instead of 0.1 s, measured). Scaling each
    job's figure by ``cores / usable`` (usable = min(cores, machine)) makes Snakemake's
    sum track the real CPUs: on 2 CPUs one 2-thread job runs at a time for any
    ``--cores``, on 8 CPUs with ``--cores 8`` four of them. :func:`job_threads` is the
    inverse, the threads the job then really uses.
    """
    usable = max(1, min(cores, machine))
    threads = max(1, min(threads, usable))
    return min(cores, -(-threads * cores // usable))


def concurrent_jobs(threads: int, cores: int, machine: int) -> int:
    """How many jobs of ``threads`` threads each a local run executes at once: the
    pipeline's schedule of its trainings (on 2 CPUs with train_threads 1: two), which the
    benchmark's shared context reproduces."""
    usable = max(1, min(cores, machine))
    return max(1, usable // max(1, min(threads, usable)))


#: How many trainings the workflow runs at once (:func:`concurrent_jobs`), set by the
#: Snakefile for its jobs: through the environment, not params, so that a rerun with
#: another ``--cores`` does not train again, and each training records the schedule it
#: really ran in (the report's training table says it, not the latest run's).
AT_ONCE_ENV = "PTYCHO_TRAININGS_AT_ONCE"


def scheduled_at_once() -> int | None:
    """The trainings the workflow running this job runs at once, or None outside one."""
    value = os.environ.get(AT_ONCE_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def job_threads(declared: int, cores: int, machine: int) -> int:
    """The threads a job declared by :func:`declared_threads` uses (its inverse)."""
    usable = max(1, min(cores, machine))
    return max(1, min(usable, declared * usable // cores))
