"""Values the command line reads: booleans, XLA modes, KEY=VALUE pairs, JSON, YAML files.

Each bad value is a one-line error: :class:`argparse.ArgumentTypeError` for a flag's
value (argparse names the flag), :class:`~ptycho.errors.ConfigError` otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ptycho.errors import ConfigError


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def positive_int(text: str) -> int:
    """A whole number of at least 1 (a count, a batch size)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """A whole number of at least 0 (an index)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return value


def positive(text: str) -> float:
    """A finite number above 0 (a dose)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A number from 0 to 1 (a margin, a share)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def error_rate(text: str) -> float:
    """A verdict's error rate (``thresholds.alpha``): above 0, at most 0.25."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an error rate above 0 and at most 0.25, got {text!r}") from None
    if not 0.0 < value <= 0.25:
        raise argparse.ArgumentTypeError(f"expected an error rate above 0 and at most 0.25, got {text!r}")
    return value


def mode(text: str) -> str:
    """An XLA mode (:func:`ptycho.nets.xla.parse_mode`)."""
    from ptycho.nets.xla import parse_mode

    try:
        return parse_mode(text, key=None)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def precision(text: str) -> str:
    """A network precision, full or short name (:func:`ptycho.nets.precision.parse_precision`)."""
    from ptycho.nets.precision import parse_precision

    try:
        return parse_precision(text, key=None)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def pairs(items: list[str] | None, what: str = "tag") -> dict[str, str]:
    """``KEY=VALUE`` items as a mapping."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def json_object(text: str, what: str, fix: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or a one-line :class:`ConfigError` naming ``what`` and the ``fix``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{what} is not valid JSON ({err.msg} at character {err.pos}); {fix}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object, not {type(value).__name__}; {fix}")
    return value


def load_yaml(path: str) -> dict[str, Any]:
    """A YAML (or, by its ``.json`` suffix, JSON) config file's top-level mapping, or a
    one-line :class:`ConfigError`. JSON is read as JSON: YAML 1.1 reads ``1e-06`` (no
    dot) as a string, and the workflow's resolved ``config.json`` writes numbers so."""
    import yaml

    try:
        with open(path) as fh:
            doc = (json.load(fh) if str(path).endswith(".json") else yaml.safe_load(fh)) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    from ptycho.config import check_unique_keys

    check_unique_keys(path)  # the loader above keeps the last of two equal keys silently
    return doc


def load_yaml_section(path: str | None, section: str) -> dict[str, Any]:
    """Section ``section`` of a YAML file (the whole file if it has no such key); {} without a file."""
    if not path:
        return {}
    doc = load_yaml(path)
    data = doc.get(section, doc)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: section '{section}' must be a mapping")
    return data


def study_config(path: str, preset: str) -> dict[str, Any]:
    """The study's config file resolved for ``preset`` (schema defaults, preset, checks),
    as the workflow resolves it (:func:`ptycho.study.workflow.resolve`)."""
    from ptycho.study import workflow

    return workflow.resolve(load_yaml(path), {"preset": preset})
