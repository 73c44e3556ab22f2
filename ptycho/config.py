"""Immutable, validated configuration objects, and the one source of their settings.

Every setting's default, range and choices live in the schema shipped with the package
(``ptycho/config.schema.yaml``, read once by :func:`schema`); its defaults are the
study's. One frozen dataclass per concern takes its defaults from there
(:func:`defaults`) and checks its values against it when built (:func:`check_settings`);
a dataclass adds only the checks that relate two fields. Configs are validated once when
built (``from_dict``), passed explicitly, and saved beside every artefact (``to_dict`` ->
JSON). Nothing reads global state. Unknown keys and out-of-range values raise
:class:`ConfigError` with one line naming the key, what was given and what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from ptycho.errors import ConfigError

T = TypeVar("T")

#: The packaged schema: every key of the study's configuration, its type, range and default.
SCHEMA_FILE = Path(__file__).with_name("config.schema.yaml")


@functools.cache
def _schema() -> dict:
    import yaml

    with open(SCHEMA_FILE) as fh:
        return yaml.safe_load(fh)


def schema() -> dict:
    """The packaged schema as a dict (a copy: the caller may change it)."""
    import copy

    return copy.deepcopy(_schema())


def spec(path: str) -> dict:
    """The sub-schema of a dotted key path, e.g. ``model.depth`` or ``seeds.items`` (read only)."""
    node = _schema()
    for part in path.split("."):
        node = node["items"] if part == "items" else node["properties"][part]
    return node


def check_unique_keys(path: str | Path) -> None:
    """One line if a config file gives a key twice at the same level; nothing otherwise.

    YAML loaders (Snakemake's, :func:`yaml.safe_load`) keep the last of two equal keys
    and say nothing, so a study written ``epochs: 40`` at the top of ``train:`` and
    ``epochs: 4`` further down runs with 4. The file's node tree is walked instead (no
    values are built, so any YAML or JSON the loaders accept is read the same way):
    the first repeated key is a :class:`ConfigError` naming the key, the file and both
    lines. A file that does not parse is left to the loader that reads it.
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else None
                line = key.start_mark.line + 1
                if name is not None and name != "<<" and name in seen:
                    raise ConfigError(
                        f"config file {path}: key '{prefix}{name}' is given twice (lines {seen[name]} and {line}), "
                        "and only the last would count; keep one"
                    )
                if name is not None:
                    seen[name] = line
                walk(value, f"{prefix}{name}." if name is not None else prefix)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, prefix)

    walk(root, "")


def defaults(section: str) -> dict[str, Any]:
    """The schema's default of every key of ``section`` that has one, typed: a ``number`` is
    a float (lists without a default, such as ``bench.xla``, default to another key's)."""
    return {
        key: float(sub["default"]) if sub.get("type") == "number" else sub["default"]
        for key, sub in spec(section)["properties"].items()
        if "default" in sub
    }


def choices(path: str) -> tuple:
    """The allowed values of a key with an ``enum``, in the schema's order."""
    return tuple(spec(path)["enum"])


def _shown(value: Any, sub: Mapping) -> Any:
    """A limit as the messages show it: a float for a ``number`` key, else as written."""
    return float(value) if sub.get("type") == "number" else value


def _out_of_range(name: str, value: Any, sub: Mapping, lo: Any, hi: Any, left: str = "[", right: str = "]") -> None:
    allowed = (
        f"{left}{_shown(lo, sub) if lo is not None else '-inf'}, {_shown(hi, sub) if hi is not None else 'inf'}{right}"
    )
    raise ConfigError(f"config key '{name}' = {value!r} is out of range; allowed: {allowed}")


def check_value(name: str, value: Any, sub: Mapping) -> None:
    """``value`` against its sub-schema ``sub`` (``enum``, ``pattern``, ``minimum``,
    ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``): a one-line
    ConfigError naming the key ``name`` otherwise. Types are :func:`from_dict`'s to check."""
    if "pattern" in sub and not (isinstance(value, str) and re.search(sub["pattern"], value)):
        raise ConfigError(f"config key '{name}' = {value!r} is not allowed; it must match {sub['pattern']}")
    if "enum" in sub and value not in sub["enum"]:
        raise ConfigError(
            f"config key '{name}' = {value!r} is not allowed; choose one of {', '.join(map(str, sub['enum']))}"
        )
    lo, hi = sub.get("minimum"), sub.get("maximum")
    if lo is not None and value < lo or hi is not None and value > hi:
        _out_of_range(name, value, sub, lo, hi)
    xlo, xhi = sub.get("exclusiveMinimum"), sub.get("exclusiveMaximum")
    if xlo is not None and value <= xlo or xhi is not None and value >= xhi:
        _out_of_range(
            name,
            value,
            sub,
            xlo if xlo is not None else lo,
            xhi if xhi is not None else hi,
            "(" if xlo is not None else "[",
            ")" if xhi is not None else "]",
        )
    step = sub.get("multipleOf")
    if step is not None and value % step:
        what = "even" if step == 2 else f"a multiple of {step}"
        raise ConfigError(f"config key '{name}' = {value!r} must be {what}; use {value - value % step + step}")


def check_settings(cfg: Any, section: str, prefix: str = "", extra: Mapping[str, str] | None = None) -> None:
    """Every field of the settings object ``cfg`` that schema section ``section`` lists,
    checked against it (:func:`check_value`); ``extra`` maps further fields to the
    dotted path of their sub-schema (e.g. a model's ``kind`` to ``models.items``).
    Errors name the key as ``prefix + field``."""
    for key, sub in spec(section)["properties"].items():
        check_value(prefix + key, getattr(cfg, key), sub)
    for key, path in (extra or {}).items():
        check_value(prefix + key, getattr(cfg, key), spec(path))


def check_at_most(name: str, value: Any, hi: Any, path: str) -> None:
    """A limit set by another field (``stride_test <= object_size``): ``value`` must not
    exceed ``hi``; the message gives the key's own lower limit from the schema (``path``)."""
    if value > hi:
        sub = spec(path)
        _out_of_range(name, value, sub, sub.get("minimum"), hi)


def from_dict(cls: type[T], data: dict[str, Any] | None, section: str = "") -> T:
    """Build dataclass ``cls`` from a plain mapping, refusing unknown keys and bad types."""
    data = dict(data or {})
    known = {f.name: f for f in fields(cls)}
    prefix = f"{section}." if section else ""
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown config key '{prefix}{key}'; allowed keys: {', '.join(sorted(known))}")
    kwargs = {}
    for key, value in data.items():
        default = getattr(cls, key, None)
        expected = type(default) if default is not None else None
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is not None and not isinstance(value, expected) or isinstance(value, bool) and expected is not bool:
            raise ConfigError(
                f"config key '{prefix}{key}' = {value!r} has type {type(value).__name__}; expected {expected.__name__}"
            )
        kwargs[key] = value
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain, JSON-serialisable dict of a config dataclass."""
    return dataclasses.asdict(cfg)


def to_json(cfg: Any) -> str:
    """Canonical JSON (sorted keys), stable across runs: safe to hash."""
    return json.dumps(to_dict(cfg), sort_keys=True)


#: Names the simulation accepts (the schema's; the physics modules use the same tuples).
OBJECT_KINDS = choices("simulation.object_kind")
PHASE_KINDS = choices("simulation.phase_kind")
PROBE_KINDS = choices("simulation.probe_kind")

_SIMULATION = defaults("simulation")


@dataclass(frozen=True)
class SimulationConfig:
    """How to simulate one train/test pair of datasets (docs/physics.md section 3).

    Train and test objects are independent draws from the same generator; the test
    split reuses the train split's photon scale ``s``. Each key's meaning, range and
    default: the schema's ``simulation`` section.
    """

    n: int = _SIMULATION["n"]  #: patch / detector side in pixels
    gridsize: int = _SIMULATION["gridsize"]  #: patterns per group side (1 or 2)
    object_kind: str = _SIMULATION["object_kind"]
    phase_kind: str = _SIMULATION["phase_kind"]
    phase_range: float = _SIMULATION["phase_range"]  #: peak-to-peak object phase, radians
    amplitude_floor: float = _SIMULATION["amplitude_floor"]
    object_size: int = _SIMULATION["object_size"]  #: object side in pixels
    n_lines: int = _SIMULATION["n_lines"]  #: 0 = the reference density, 400 * (object_size / 392)^2
    n_objects_train: int = _SIMULATION["n_objects_train"]
    n_objects_test: int = _SIMULATION["n_objects_test"]
    probe_kind: str = _SIMULATION["probe_kind"]
    probe_radius: float = _SIMULATION["probe_radius"]  #: disk radius in px; 0 means 11 * n / 64
    probe_edge_phase: float = _SIMULATION["probe_edge_phase"]  #: defocus phase at the rim, radians
    stride_train: int = _SIMULATION["stride_train"]  #: pitch of group centres, train split
    stride_test: int = _SIMULATION["stride_test"]  #: pitch of group centres, test split
    spacing: int = _SIMULATION["spacing"]  #: pitch of patches inside a group (offsets +-spacing/2)
    nphotons: float = _SIMULATION["nphotons"]  #: mean total expected photons per pattern
    seed: int = _SIMULATION["seed"]

    def __post_init__(self) -> None:
        check_settings(self, "simulation")
        # Limits set by other fields:
        check_at_most("probe_radius", self.probe_radius, self.n / 2, "simulation.probe_radius")
        check_at_most("stride_train", self.stride_train, self.object_size, "simulation.stride_train")
        check_at_most("stride_test", self.stride_test, self.object_size, "simulation.stride_test")
        check_at_most("spacing", self.spacing, self.n, "simulation.spacing")
        needed = self.n + (self.gridsize - 1) * self.spacing
        if self.object_size < needed:
            raise ConfigError(
                f"config key 'object_size' = {self.object_size} is too small for n={self.n}, "
                f"gridsize={self.gridsize}, spacing={self.spacing}; use at least {needed}"
            )

    @property
    def channels(self) -> int:
        return self.gridsize * self.gridsize

    @property
    def effective_n_lines(self) -> int:
        """Lines drawn: the reference's density (400 lines for a 392 px object) unless set."""
        return self.n_lines or max(1, round(400 * (self.object_size / 392) ** 2))

    @property
    def effective_probe_radius(self) -> float:
        return self.probe_radius or 11.0 * self.n / 64.0
