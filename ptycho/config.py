"""Immutable, validated configuration objects.

One frozen dataclass per concern, validated once when built (``from_dict``), passed
explicitly, and saved beside every artefact (``to_dict`` -> JSON). Nothing reads global
state. Unknown keys and out-of-range values raise :class:`ConfigError` with one line
naming the key, what was given and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from ptycho.errors import ConfigError

T = TypeVar("T")

#: Names the simulation accepts (defined here so that validating a config imports no
#: numerical library; the physics modules use the same tuples).
OBJECT_KINDS = ("lines", "natural", "gaussian")
PHASE_KINDS = ("lines", "amplitude", "zero")
PROBE_KINDS = ("disk", "defocused")


def _check_range(name: str, value: float, lo: float | None = None, hi: float | None = None) -> None:
    if lo is not None and value < lo or hi is not None and value > hi:
        allowed = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ConfigError(f"config key '{name}' = {value!r} is out of range; allowed: {allowed}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"config key '{name}' = {value!r} is not allowed; choose one of {', '.join(choices)}")


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


@dataclass(frozen=True)
class SimulationConfig:
    """How to simulate one train/test pair of datasets (see DOMAIN.md section 3).

    Train and test objects are independent draws from the same generator; the test
    split reuses the train split's photon scale ``s``.
    """

    n: int = 64  #: patch / detector side in pixels
    gridsize: int = 2  #: patterns per group side (1 or 2)
    object_kind: str = "lines"  #: lines | natural | gaussian
    phase_kind: str = "lines"  #: lines (independent image) | amplitude | zero
    phase_range: float = math.pi  #: peak-to-peak object phase, radians
    amplitude_floor: float = 0.0  #: minimum object amplitude (0 = opaque allowed)
    object_size: int = 196  #: object side in pixels (reference: 392)
    n_lines: int = 0  #: random lines of the lines object; 0 = the reference density, 400 * (object_size / 392)^2
    n_objects_train: int = 1
    n_objects_test: int = 1
    probe_kind: str = "disk"  #: disk | defocused
    probe_radius: float = 0.0  #: disk radius in px; 0 means 11 * n / 64
    probe_edge_phase: float = math.pi  #: defocus phase at the rim, radians
    stride_train: int = 4  #: pitch of group centres, train split
    stride_test: int = 10  #: pitch of group centres, test split
    spacing: int = 4  #: pitch of patches inside a group (offsets +-spacing/2)
    nphotons: float = 1e9  #: mean total expected photons per pattern
    seed: int = 0

    def __post_init__(self) -> None:
        _check_range("n", self.n, 8, 1024)
        if self.n % 2:
            raise ConfigError(f"config key 'n' = {self.n} must be even (centre convention); use {self.n + 1}")
        _check_choice("gridsize", str(self.gridsize), ("1", "2"))
        _check_choice("object_kind", self.object_kind, OBJECT_KINDS)
        _check_choice("phase_kind", self.phase_kind, PHASE_KINDS)
        _check_choice("probe_kind", self.probe_kind, PROBE_KINDS)
        _check_range("phase_range", self.phase_range, 0.0, 2 * math.pi)
        _check_range("amplitude_floor", self.amplitude_floor, 0.0, 0.99)
        _check_range("object_size", self.object_size, 32, 8192)
        _check_range("n_lines", self.n_lines, 0, 100_000)
        _check_range("n_objects_train", self.n_objects_train, 1, 1000)
        _check_range("n_objects_test", self.n_objects_test, 1, 1000)
        _check_range("probe_radius", self.probe_radius, 0.0, self.n / 2)
        _check_range("stride_train", self.stride_train, 1, self.object_size)
        _check_range("stride_test", self.stride_test, 1, self.object_size)
        _check_range("spacing", self.spacing, 1, self.n)
        _check_range("nphotons", self.nphotons, 1.0, 2e9)
        _check_range("seed", self.seed, 0, 2**63 - 1)
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
