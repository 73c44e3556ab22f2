"""The measuring items' evidence as records: what *accuracy* and *gradients* measured,
comparison by comparison, written by their checks (``checks/<item>.json``, the report's
``items.<item>.evidence``) and read by their report sections, so that each key is named
once, here (:mod:`ptycho.study.json_record` writes and reads them).

A comparison is one of :func:`ptycho.study.checklist.comparisons.comparisons`: an XLA mode
against ``off`` at the same precision, or a reduced precision against float32 in the same
mode; each entry carries its ``precision``, whether it is ``across_precisions`` and its
``limit``, so summaries group it (:func:`~ptycho.study.checklist.comparisons.group`) and
tables state its limit without recomputing either. Imports nothing of TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ptycho.study.json_record import JsonRecord


@dataclass(frozen=True)
class Difference(JsonRecord):
    """The largest and the mean absolute difference of two results (relative where the
    record holding it says so)."""

    max_abs: float
    mean_abs: float


@dataclass(frozen=True)
class TranslationCase(JsonRecord):
    """The XLA-safe translation against ``ImageProjectiveTransformV3`` on one case."""

    dtype: str
    batch: int
    shifts: str  #: subpixel, integer or past_border
    max_abs: float
    mean_abs: float


#: How the forward model's differences are scaled (its ``note``).
FORWARD_NOTE = "relative to the largest amplitude; worst mode"


@dataclass(frozen=True)
class ForwardModel(JsonRecord):
    """The whole physics head under each XLA mode against ``off``: per mode, and the worst."""

    max_abs: float = 0.0
    mean_abs: float = 0.0
    modes: Mapping[str, Difference] = field(default_factory=dict)
    note: str = FORWARD_NOTE

    @classmethod
    def of(cls, per_mode: Mapping[str, Difference]) -> ForwardModel:
        """The record of the modes' differences, with the worst of each (0 without modes)."""
        return cls(
            max_abs=max((m.max_abs for m in per_mode.values()), default=0.0),
            mean_abs=max((m.mean_abs for m in per_mode.values()), default=0.0),
            modes=dict(per_mode),
        )

    @property
    def per_mode(self) -> Mapping[str, Difference]:
        """The modes' differences; a record written before they were kept per mode held
        one figure, ``jit``'s."""
        return self.modes or {"jit": Difference(max_abs=self.max_abs, mean_abs=self.mean_abs)}


@dataclass(frozen=True)
class NetworkDifference(JsonRecord):
    """One trained network's outputs under one comparison, relative to the largest float32
    ``off`` amplitude, with the comparison's limit."""

    compared: str  #: the comparison's label: "jit vs off, fp32", "bf16 vs fp32, off"
    precision: str
    across_precisions: bool
    max_abs: float
    mean_abs: float
    limit: float = math.nan


#: How a trained network's differences are scaled (its ``note``).
INFERENCE_NOTE = "complex patches, relative to the largest float32 off amplitude"


@dataclass(frozen=True)
class TrainedNetwork(JsonRecord):
    """One trained network at inference: its model, the precision it was trained at, the
    test patterns it ran on and each comparison's difference, by the comparison's key."""

    model: str
    precision: str
    samples: int
    comparisons: Mapping[str, NetworkDifference] = field(default_factory=dict)
    note: str = INFERENCE_NOTE

    def judged_by(self, limit_of: Mapping[str, float]) -> TrainedNetwork:
        """The record with each comparison's limit, its precision's in ``limit_of``."""
        return replace(
            self, comparisons={k: replace(d, limit=limit_of[d.precision]) for k, d in self.comparisons.items()}
        )


@dataclass(frozen=True)
class AccuracyEvidence(JsonRecord):
    """The accuracy item's evidence: the translation suite's cases, the forward model, the
    trained networks by arm, and the limit each precision was judged against."""

    translation: tuple[TranslationCase, ...] = ()
    forward_model: ForwardModel | None = None
    trained_inference: Mapping[str, TrainedNetwork] = field(default_factory=dict)
    modes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    limits: Mapping[str, float] = field(default_factory=dict)
    precision_roundoffs: float = math.nan

    def network_differences(self) -> list[NetworkDifference]:
        """Every trained network's comparisons, network by network."""
        return [d for network in self.trained_inference.values() for d in network.comparisons.values()]


@dataclass(frozen=True)
class GradientDifference(JsonRecord):
    """One model's loss gradients under one comparison: each variable's difference over the
    whole reference gradient's norm, the whole weight gradient's and the inputs' relative
    differences, what was judged against ``limit`` and the worst of it."""

    compared: str
    precision: str
    across_precisions: bool
    limit: float
    judged: str  #: "weights and inputs" at float32, "weights" at a reduced precision
    worst: float
    whole_weights: float
    per_variable: Mapping[str, float]
    inputs: float
    loss: float
    loss_reference: float

    @property
    def inputs_judged(self) -> bool:
        return self.judged == JUDGED_WITH_INPUTS


#: :attr:`GradientDifference.judged` of a comparison whose input gradient is judged too.
JUDGED_WITH_INPUTS = "weights and inputs"


@dataclass(frozen=True)
class ModelGradients(JsonRecord):
    """One model's gradients: the float32 ``off`` loss, each variable's share of that
    gradient's norm, and each comparison by its key."""

    loss_off: float
    shares: Mapping[str, float] = field(default_factory=dict)
    comparisons: Mapping[str, GradientDifference] = field(default_factory=dict)


@dataclass(frozen=True)
class FiniteDifferences(JsonRecord):
    """The physics head's analytic gradient against central finite differences (float64)."""

    max_rel: float
    points: int


@dataclass(frozen=True)
class GradientsEvidence(JsonRecord):
    """The gradients item's evidence: per model its comparisons, the finite-difference
    check, the limit each precision was judged against, and the layer types the model had."""

    models: Mapping[str, ModelGradients] = field(default_factory=dict)
    finite_differences: FiniteDifferences | None = None
    modes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    limits: Mapping[str, float] = field(default_factory=dict)
    precision_roundoffs: float = math.nan
    layers: tuple[str, ...] = ()

    def differences(self) -> list[GradientDifference]:
        """Every model's comparisons, model by model."""
        return [d for m in self.models.values() for d in m.comparisons.values()]
