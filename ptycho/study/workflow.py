"""The pipeline's configuration: presets, schema validation, defaults, derived configs.

Used by the Snakefile (``rules/common.smk``) and testable without Snakemake.
Precedence, lowest first: the schema's defaults (the study's), ``config.yaml`` and any
``--configfile`` (its deliberate choices; Snakemake merges them into ``config``), the
selected preset, the command line's ``--config`` (the ``overrides``). The result is validated against the schema shipped with the package
(``ptycho/config.schema.yaml``, :data:`SCHEMA`) and every section is also built into its
frozen dataclass, so the checks that relate two keys run at the edge too.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ptycho.config import SCHEMA_FILE as SCHEMA
from ptycho.errors import ConfigError
from ptycho.nets.models import SUBJECT
from ptycho.study.looks import Plan


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
    solver_config(resolved)  # its keys and its engine, before any job
    look_plan(resolved)  # max_seeds against the seeds an arm already has
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
        return f"per_model.{SUBJECT}.{section}" if section in cfg.get("per_model", {}).get(SUBJECT, {}) else section

    if SUBJECT not in cfg["models"]:
        raise ConfigError(
            f"config key 'models' = {cfg['models']!r} has no pinn, the model whose XLA speed and quality the study "
            "measures; add it (models=[pinn,baseline])"
        )
    modes = arm_lists(cfg, SUBJECT)[0]
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
    if SUBJECT not in bench_models:
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
    from ptycho.solvers.engines import SolverConfig

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


def train_config(cfg: Mapping, xla: str, seed: int, kind: str = SUBJECT, precision: str = "float32"):
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


def look_plan(cfg: Mapping, cap: int | None = None) -> Plan:
    """The plan of looks of a resolved config (:meth:`ptycho.study.looks.Plan.of`); ``cap``:
    what ``max_seeds: auto`` resolved to (:func:`ptycho.study.looks.recorded_cap`)."""
    return Plan.of(cfg, {kind: arm_lists(cfg, kind) for kind in cfg["models"]}, cap)


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
