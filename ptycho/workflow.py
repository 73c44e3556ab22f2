"""The pipeline's configuration: presets, schema validation, defaults, derived configs.

Used by the Snakefile (``rules/common.smk``) and testable without Snakemake.
Precedence, lowest first: schema defaults, ``config.yaml``, the selected preset,
command-line overrides (``--config`` / ``--configfile``). The result is validated
against ``schemas/config.schema.yaml`` and every section is also built into its
frozen dataclass, so the package's own checks run at the edge too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ptycho.errors import ConfigError

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


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
    import yaml

    with open(path) as fh:
        return yaml.safe_load(fh)


def _fill_defaults(instance: Any, schema: dict) -> Any:
    """Fill ``default`` values of object properties, recursively (before validation)."""
    if schema.get("type") == "object" and isinstance(instance, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                instance[key] = _fill_defaults(instance[key], sub)
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


def resolve(config: Mapping, overrides: Mapping | None = None, schema_path: str | Path = SCHEMA) -> dict:
    """Apply the preset and the command-line overrides, validate, check the dataclasses."""
    schema = load_schema(schema_path)
    overrides = typed_overrides(dict(overrides or {}))
    first = validate(deep_merge(config, overrides), schema)
    preset = first["preset"]
    presets = first.get("presets", {})
    if preset != "default" and preset not in presets:
        raise ConfigError(f"config key 'preset': {preset!r} has no block under 'presets'; add one or choose default")
    merged = deep_merge(deep_merge(config, presets.get(preset, {})), overrides)
    resolved = validate(merged, schema)
    resolved["xla"] = _modes(resolved["xla"])
    for kind in resolved["models"]:
        model_config(resolved, kind)
    simulation_config(resolved)
    train_config(resolved, resolved["xla"][0], 0)
    return resolved


def _modes(values: list) -> list[str]:
    """The ``xla`` list as mode names (``true``/``false`` read as jit/off), each once."""
    from ptycho.xla import parse_mode

    modes = [parse_mode(v, "xla") for v in values]
    if len(set(modes)) != len(modes):
        raise ConfigError(f"config key 'xla': {values!r} names a mode twice (true is jit, false is off); list each once")
    return modes


def simulation_config(cfg: Mapping):
    from ptycho.config import SimulationConfig, from_dict

    return from_dict(SimulationConfig, cfg["simulation"], "simulation")


def model_config(cfg: Mapping, kind: str):
    from ptycho.config import from_dict
    from ptycho.models import ModelConfig

    return from_dict(ModelConfig, dict(cfg["model"], kind=kind), "model")


def train_config(cfg: Mapping, xla: str, seed: int):
    from ptycho.config import from_dict
    from ptycho.train import TrainConfig

    return from_dict(TrainConfig, dict(cfg["train"], xla=xla, seed=seed), "train")


def arms(cfg: Mapping) -> list[str]:
    """Every (model, mode, seed) job name of the matrix."""
    from ptycho.arms import matrix

    return matrix(cfg["models"], cfg["xla"], cfg["seeds"])
