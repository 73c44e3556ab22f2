"""The arms of the study: one (model, XLA mode, seed) job each, and how they pair.

The one definition of an arm's name, of how a name is read back, and of the pairs the
checklist compares (every mode against ``off``, per model and seed). The Snakemake
layer, the checks, the figures and the report all use these; adding a mode is a line
in :data:`ptycho.nets.xla.MODES`.
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


class Arm(NamedTuple):
    model: str
    mode: str
    seed: int

    @property
    def name(self) -> str:
        return arm_name(self.model, self.mode, self.seed)


class Pair(NamedTuple):
    """A mode's arm and the ``off`` arm of the same model and seed."""

    key: str  #: ``<model>-s<seed>-<mode>``, e.g. ``pinn-s0-jit``
    model: str
    seed: int
    mode: str
    arm: str  #: the mode's arm name
    reference: str  #: the ``off`` arm name


def arm_name(model: str, mode: str, seed: int) -> str:
    """Folder name of one job of the matrix, e.g. ``pinn-jit-s0`` / ``baseline-off-s1``."""
    return f"{model}-{parse_mode(mode)}-s{seed}"


def parse_arm(name: str) -> Arm:
    """``Arm(model, mode, seed)`` of an arm name; ValueError if it is not one."""
    if not re.fullmatch(PATTERN, name):
        raise ValueError(f"{name!r} is not an arm name (<model>-<mode>-s<seed>, modes: {', '.join(MODES)})")
    model, mode, seed = name.split("-")
    return Arm(model, mode, int(seed[1:]))


def arm_of(meta: Mapping) -> str:
    """Arm name of a trained model, from its ``model.json`` (pre-mode files say xla true/false)."""
    return arm_name(meta["model"]["kind"], parse_mode(meta["train"]["xla"]), meta["train"]["seed"])


def mode_pairs(names: Iterable[str]) -> list[Pair]:
    """Every (mode, ``off``) pair of the same model and seed among ``names``: the one
    pairing the checks and figures compare by, in model, seed, mode order."""
    arms = {parse_arm(n) for n in names}
    out = []
    for arm in sorted(arms, key=lambda a: (MODELS.index(a.model), a.seed, list(MODES).index(a.mode))):
        ref = Arm(arm.model, REFERENCE, arm.seed)
        if arm.mode != REFERENCE and ref in arms:
            out.append(Pair(f"{arm.model}-s{arm.seed}-{arm.mode}", arm.model, arm.seed, arm.mode, arm.name, ref.name))
    return out


def matrix(models: Iterable[str], modes: Iterable, seeds: Iterable[int]) -> list[str]:
    """Every (model, mode, seed) arm name of a study."""
    return [arm_name(m, x, s) for m in models for x in modes for s in seeds]
