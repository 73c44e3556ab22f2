"""The arms of the study: one record per (model, XLA mode, precision, seed) job, and how they pair.

:class:`Arm` is the one identity of a job of the matrix. Its folder name, its words in
figures and tables, its MLflow tags and params, and every key the evidence groups arms
by are derived here and nowhere else; nothing reads a label back. The Snakemake layer,
the checklist, the figures and the report all use it. Adding a mode or a precision is
its one record (:data:`ptycho.nets.xla.MODES`, :data:`ptycho.nets.precision.PRECISIONS`):
:data:`PATTERN`, the names, the order and the pairs read the registries when used, and
the words come from :mod:`ptycho.study.presentation`. Adding an axis is a field here
(with its default, so that names already in stores keep reading the same) and a part of
:func:`pattern`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ptycho.nets.models import MODEL_KINDS as MODELS
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION, SHORT, parse_precision
from ptycho.nets.xla import MODES, REFERENCE, parse_mode
from ptycho.study.presentation import (  # noqa: F401 (MODE_WORDS re-exported: how arms read)
    MODE_WORDS,
    MODEL_WORDS,
    PRECISION_WORDS,
)

#: The MLflow tags (and ``arm.*`` params) naming a job's arm, in name order.
ARM_TAGS = ("model", "xla", "precision", "seed")


def _reduced() -> list[str]:
    return [SHORT[p] for p in PRECISIONS if p != REFERENCE_PRECISION]


def pattern() -> str:
    """What an arm name looks like (also the Snakemake wildcard constraint, :data:`PATTERN`):
    the precision's short word only when it is not float32, so that float32 names read as
    before the axis. From the registries as they are now."""
    return rf"({'|'.join(MODELS)})-({'|'.join(MODES)})(-({'|'.join(_reduced())}))?-s\d+"


def __getattr__(name: str):
    # PATTERN is read from the registries when asked, so a mode or precision registered
    # later is in it too.
    if name == "PATTERN":
        return pattern()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The job whose MLflow run carries its arm's answer, and is named as the arm: the
#: training (its curves and times; the report adds the arm's quality and time to quality).
ANSWER_RULE = "train"
#: The quality the report writes on each arm's run: the evaluate job's means over the
#: test objects (besides its inference rate and time to quality).
ANSWER_METRICS = ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr", "amp_frc50", "phase_frc50")


class Arm(NamedTuple):
    """One job of the matrix. Names read model, mode, precision (unless float32), seed."""

    model: str
    mode: str
    seed: int
    precision: str = REFERENCE_PRECISION

    @property
    def name(self) -> str:
        """Folder and file name, e.g. ``pinn-jit-s0`` / ``baseline-off-bf16-s1``."""
        return self.key("model", "mode", "precision", "seed")

    def key(self, *fields: str) -> str:
        """The arm's fields joined by ``-``: the keys evidence groups arms by, e.g.
        ``key("model", "seed", "mode")`` = ``pinn-s0-jit``. The seed reads ``s<seed>``,
        the precision its short word, and float32 (the reference) is left out."""

        def word(field: str) -> str:
            if field == "seed":
                return f"s{self.seed}"
            if field == "precision":
                return "" if self.precision == REFERENCE_PRECISION else SHORT[self.precision]
            return str(getattr(self, field))

        return "-".join(w for w in map(word, fields) if w)

    @property
    def reference(self) -> Arm:
        """The arm a mode is compared with: ``off``, same model, precision and seed."""
        return self._replace(mode=REFERENCE)

    @property
    def is_reference(self) -> bool:
        return self.mode == REFERENCE

    @property
    def tags(self) -> dict[str, str]:
        """MLflow tags naming the arm (:data:`ARM_TAGS`); the seed as text, as MLflow stores tags."""
        return {"model": self.model, "xla": self.mode, "precision": self.precision, "seed": str(self.seed)}

    def label(self, with_seed: bool = True) -> str:
        """``"PINN, XLA jit"`` (``", bfloat16"`` added below float32), with ``", seed 1"`` when asked."""
        parts = [MODEL_WORDS.get(self.model, self.model), MODE_WORDS.get(self.mode, self.mode)]
        if self.precision != REFERENCE_PRECISION:
            parts.append(PRECISION_WORDS[self.precision])
        if with_seed:
            parts.append(f"seed {self.seed}")
        return ", ".join(parts)

    @property
    def order(self) -> tuple[int, int, int, int]:
        """Sort key: model, seed, precision, then mode, in the package's declared orders."""
        return (
            MODELS.index(self.model),
            self.seed,
            list(PRECISIONS).index(self.precision),
            list(MODES).index(self.mode),
        )

    @classmethod
    def parse(cls, name: str) -> Arm:
        """The arm of a name; ValueError if it is not one."""
        if not re.fullmatch(pattern(), name):
            raise ValueError(
                f"{name!r} is not an arm name (<model>-<mode>[-<precision>]-s<seed>, modes: {', '.join(MODES)}, "
                f"precisions: {', '.join(_reduced())}; float32 is written without one)"
            )
        model, mode, *precision, seed = name.split("-")
        return cls(model, mode, int(seed[1:]), parse_precision(precision[0]) if precision else REFERENCE_PRECISION)

    @classmethod
    def of_tags(cls, tags: Mapping[str, str]) -> Arm | None:
        """The arm its MLflow tags (:attr:`tags`) name, or None (a job of no arm)."""
        if not all(tags.get(k) for k in ("model", "xla", "seed")):
            return None
        precision = parse_precision(tags.get("precision") or REFERENCE_PRECISION)
        return cls(tags["model"], parse_mode(tags["xla"]), int(tags["seed"]), precision)

    def run_name(self, rule: str) -> str:
        """The MLflow run of one of the arm's jobs: the arm's own name for its training (the
        run that carries its answer, as its files and logged model are named),
        ``<arm>-<rule>`` for the others (``pinn-jit-s0-evaluate``)."""
        return self.name if rule == ANSWER_RULE else f"{self.name}-{rule}"

    def describe(self, rule: str, what: str) -> str:
        """The run's description (MLflow's note): what the job did for which arm, how to read it."""
        head = f"{self.label()}: {what}."
        if rule != ANSWER_RULE:
            return f"{head} The arm's answer (quality, time to quality, step time) is on its run {self.name}."
        return (
            f"{head} The arm's run: its loss curves per epoch (train_loss, val_loss), step_median_s and "
            "compile_s, the network as an MLflow model (Models tab: mlflow.pyfunc.load_model reconstructs like "
            "'ptycho infer') and, once the report has run, the arm's quality on the test split "
            f"({', '.join(ANSWER_METRICS)}) and its time to the study's quality target (quality_time_s). Compare arms: filter tags.rule = 'train' and tags.model = 'pinn', "
            "select the runs, press Compare."
        )

    @classmethod
    def of_meta(cls, meta: Mapping) -> Arm:
        """The arm of a trained model, from its ``model.json`` (pre-mode files say xla
        true/false; pre-precision files have no precision: float32)."""
        train = meta["train"]
        precision = parse_precision(train.get("precision", REFERENCE_PRECISION))
        return cls(meta["model"]["kind"], parse_mode(train["xla"]), int(train["seed"]), precision)


class Pair(NamedTuple):
    """Two arms that differ in one axis: an XLA mode's arm and ``off`` (same model,
    precision and seed), or a reduced precision's arm and float32 (same model, mode and
    seed). ``arm`` is judged against ``reference``."""

    arm: Arm
    reference: Arm

    @property
    def axis(self) -> str:
        """``"mode"`` or ``"precision"``: the field the two arms differ in."""
        return "mode" if self.arm.mode != self.reference.mode else "precision"

    def _key(self, *fields: str) -> str:
        key = self.arm.key(*fields)
        return key if self.axis == "mode" else f"{key}-vs-{SHORT[self.reference.precision]}"

    @property
    def key(self) -> str:
        """The evidence's key of a pair: ``pinn-s0-jit`` (jit vs off, float32),
        ``pinn-s0-jit-bf16`` (jit vs off, both bfloat16), ``pinn-s0-off-bf16-vs-fp32``
        (bfloat16 vs float32, both off)."""
        return self._key("model", "seed", "mode", "precision")

    @property
    def group(self) -> str:
        """:attr:`key` without the seed: the key of the comparison across seeds."""
        return self._key("model", "mode", "precision")

    def words(self) -> str:
        """The comparison in words: ``"PINN jit - off"``, ``"PINN jit - off (bfloat16)"``,
        ``"PINN bfloat16 - float32 (off)"``."""
        model = MODEL_WORDS.get(self.arm.model, self.arm.model)
        if self.axis == "mode":
            at = "" if self.arm.precision == REFERENCE_PRECISION else f" ({PRECISION_WORDS[self.arm.precision]})"
            return f"{model} {self.arm.mode} - {self.reference.mode}{at}"
        return (
            f"{model} {PRECISION_WORDS[self.arm.precision]} - {PRECISION_WORDS[self.reference.precision]} "
            f"({self.arm.mode})"
        )


def arm_name(model: str, mode: str, seed: int, precision: str = REFERENCE_PRECISION) -> str:
    """Folder name of one job of the matrix, e.g. ``pinn-jit-s0`` / ``baseline-off-bf16-s1``."""
    return Arm(model, parse_mode(mode), int(seed), parse_precision(precision)).name


def parse_arm(name: str) -> Arm:
    """``Arm(model, mode, seed, precision)`` of an arm name; ValueError if it is not one."""
    return Arm.parse(name)


def _arms(names: Iterable[str | Arm]) -> list[Arm]:
    return sorted({a if isinstance(a, Arm) else Arm.parse(a) for a in names}, key=lambda a: a.order)


def mode_pairs(names: Iterable[str | Arm]) -> list[Pair]:
    """Every (mode, ``off``) pair of the same model, precision and seed among ``names``,
    in model, seed, precision, mode order."""
    arms = _arms(names)
    return [Pair(a, a.reference) for a in arms if not a.is_reference and a.reference in arms]


def precision_pairs(names: Iterable[str | Arm]) -> list[Pair]:
    """Every (reduced precision, float32) pair of the same model, mode and seed among ``names``."""
    arms = _arms(names)
    out = []
    for a in arms:
        ref = a._replace(precision=REFERENCE_PRECISION)
        if a != ref and ref in arms:
            out.append(Pair(a, ref))
    return out


def pairs(names: Iterable[str | Arm]) -> list[Pair]:
    """Every pair the checks and figures compare by: the modes' (:func:`mode_pairs`), then
    the precisions' (:func:`precision_pairs`)."""
    names = list(names)
    return mode_pairs(names) + precision_pairs(names)


def matrix(
    models: Iterable[str], modes: Iterable, seeds: Iterable[int], precisions: Iterable[str] = (REFERENCE_PRECISION,)
) -> list[str]:
    """Every (model, mode, precision, seed) arm name of a study."""
    return [arm_name(m, x, s, p) for m in models for p in precisions for x in modes for s in seeds]
