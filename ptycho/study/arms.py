"""The arms of the study: one record per (model, XLA mode, seed) job, and how they pair.

:class:`Arm` is the one identity of a job of the matrix. Its folder name, its words in
figures and tables, its MLflow tags and params, and every key the evidence groups arms
by are derived here and nowhere else; nothing reads a label back. The Snakemake layer,
the checklist, the figures and the report all use it. Adding a mode is a line in
:data:`ptycho.nets.xla.MODES`; adding an axis is a field here (with its default, so
that names already in stores keep reading the same) and a part of :data:`PATTERN`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.xla import MODES, REFERENCE, parse_mode

#: The MLflow tags (and ``arm.*`` params) naming a job's arm, in name order.
ARM_TAGS = ("model", "xla", "seed")
#: What an arm name looks like (also the Snakemake wildcard constraint).
PATTERN = rf"({'|'.join(MODELS)})-({'|'.join(MODES)})-s\d+"
#: How figures and tables call a model and a mode.
MODEL_WORDS = {"pinn": "PINN", "baseline": "Baseline"}
MODE_WORDS = {"off": "no XLA (off)", "jit": "XLA jit", "auto": "XLA auto", "physics": "XLA physics"}


class Arm(NamedTuple):
    """One job of the matrix. Field order is name order."""

    model: str
    mode: str
    seed: int

    @property
    def name(self) -> str:
        """Folder and file name, e.g. ``pinn-jit-s0`` / ``baseline-off-s1``."""
        return self.key("model", "mode", "seed")

    def key(self, *fields: str) -> str:
        """The arm's fields joined by ``-`` (the seed as ``s<seed>``): the keys evidence
        groups arms by, e.g. ``key("model", "seed", "mode")`` = ``pinn-s0-jit``."""
        return "-".join(f"s{self.seed}" if f == "seed" else str(getattr(self, f)) for f in fields)

    @property
    def reference(self) -> Arm:
        """The arm this one is compared with: ``off``, same model and seed."""
        return self._replace(mode=REFERENCE)

    @property
    def is_reference(self) -> bool:
        return self.mode == REFERENCE

    @property
    def tags(self) -> dict[str, str]:
        """MLflow tags naming the arm (:data:`ARM_TAGS`); the seed as text, as MLflow stores tags."""
        return {"model": self.model, "xla": self.mode, "seed": str(self.seed)}

    def label(self, with_seed: bool = True) -> str:
        """``"PINN, XLA jit"``, with ``", seed 1"`` appended when asked."""
        text = f"{MODEL_WORDS.get(self.model, self.model)}, {MODE_WORDS.get(self.mode, self.mode)}"
        return f"{text}, seed {self.seed}" if with_seed else text

    @property
    def order(self) -> tuple[int, int, int]:
        """Sort key: model, then seed, then mode, in the package's declared orders."""
        return (MODELS.index(self.model), self.seed, list(MODES).index(self.mode))

    @classmethod
    def parse(cls, name: str) -> Arm:
        """The arm of a name; ValueError if it is not one."""
        if not re.fullmatch(PATTERN, name):
            raise ValueError(f"{name!r} is not an arm name (<model>-<mode>-s<seed>, modes: {', '.join(MODES)})")
        model, mode, seed = name.split("-")
        return cls(model, mode, int(seed[1:]))

    @classmethod
    def of_meta(cls, meta: Mapping) -> Arm:
        """The arm of a trained model, from its ``model.json`` (pre-mode files say xla true/false)."""
        return cls(meta["model"]["kind"], parse_mode(meta["train"]["xla"]), int(meta["train"]["seed"]))


class Pair(NamedTuple):
    """A mode's arm and the ``off`` arm of the same model and seed."""

    arm: Arm
    reference: Arm

    @property
    def key(self) -> str:
        """``<model>-s<seed>-<mode>``, e.g. ``pinn-s0-jit``: the evidence's key of a pair."""
        return self.arm.key("model", "seed", "mode")


def arm_name(model: str, mode: str, seed: int) -> str:
    """Folder name of one job of the matrix, e.g. ``pinn-jit-s0`` / ``baseline-off-s1``."""
    return Arm(model, parse_mode(mode), int(seed)).name


def parse_arm(name: str) -> Arm:
    """``Arm(model, mode, seed)`` of an arm name; ValueError if it is not one."""
    return Arm.parse(name)


def arm_of(meta: Mapping) -> str:
    """Arm name of a trained model, from its ``model.json``."""
    return Arm.of_meta(meta).name


def mode_pairs(names: Iterable[str | Arm]) -> list[Pair]:
    """Every (mode, ``off``) pair of the same model and seed among ``names``: the one
    pairing the checks and figures compare by, in model, seed, mode order."""
    arms = {a if isinstance(a, Arm) else Arm.parse(a) for a in names}
    return [
        Pair(a, a.reference) for a in sorted(arms, key=lambda a: a.order) if not a.is_reference and a.reference in arms
    ]


def matrix(models: Iterable[str], modes: Iterable, seeds: Iterable[int]) -> list[str]:
    """Every (model, mode, seed) arm name of a study."""
    return [arm_name(m, x, s) for m in models for x in modes for s in seeds]
