"""What a checklist item is, as judged: one record type (:class:`Item`) the ``check`` job,
the rules and the looks read, so that an item's measurement or collection and its verdict
are one module; what the report says of it (text, tables, figures) is its section's, in
:mod:`ptycho.study.report.items`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ptycho.config import defaults
from ptycho.study.checklist.result import ItemResult
from ptycho.study.results import StudyResults


@dataclass(frozen=True)
class Inputs:
    """Everything a ``ptycho check`` job may be given; each item reads what it needs."""

    #: the pipeline's outputs the item judges: trainings, scores, stitched objects (quality
    #: on measured data: the arms compared with each other), the test dataset, the bench
    results: StudyResults = field(default_factory=StudyResults)
    modes: Sequence[str] | None = None
    #: the precisions of the study (accuracy, gradients: each XLA mode vs off at each of
    #: them, each reduced precision vs float32 against ``precision_threshold``)
    precisions: Sequence[str] = ("float32",)
    #: the limit of the reduced-precision comparisons, in unit round-offs of the precision
    #: (None: the schema's default of the item's :attr:`Item.precision_threshold` key)
    precision_threshold: float | None = None
    #: the PINN loss and the dose the gradients are checked at: the study's own (the
    #: schema's defaults here; the workflow passes its config's)
    loss: str = defaults("model")["loss"]
    nphotons: float = defaults("simulation")["nphotons"]
    context: str = "alone"
    #: the convergence margin (thresholds.convergence_max_rel): widens the time-to-quality
    #: target by this fraction of the reference's loss drop (speedup); on measured data the
    #: relative margin of an arm's data misfit and half-scan resolution (quality)
    margin: float = defaults("thresholds")["convergence_max_rel"]
    #: convergence and quality as equivalence (two-sided) instead of non-inferiority
    #: (:data:`ptycho.study.stats.NON_INFERIORITY`; thresholds.two_sided)
    two_sided: bool = False
    #: the error rate of each verdict (thresholds.alpha, :data:`ptycho.study.stats.ALPHA`):
    #: quality and convergence read the 1 - 2 alpha and 1 - alpha intervals, speed the 1 - alpha one
    alpha: float = defaults("thresholds")["alpha"]

    @property
    def test(self) -> str:
        """The seed comparisons' test (:func:`ptycho.study.stats.seed_comparison`)."""
        from ptycho.study.stats import EQUIVALENCE, NON_INFERIORITY

        return EQUIVALENCE if self.two_sided else NON_INFERIORITY


@dataclass(frozen=True)
class Item:
    """A checklist item, as judged: ``collect(inputs, threshold)`` returns its
    :class:`ItemResult`. ``measures``: it runs TensorFlow itself (the others judge the
    pipeline's outputs and import no TensorFlow). ``threshold``: its key under
    ``thresholds:`` in the config; ``precision_threshold``: its second key there, the limit
    of its reduced-precision comparisons (``check --precision-threshold``), for the items
    that make them. Its words, tables and figures are its report section's
    (:mod:`ptycho.study.report.items`), apart from the judging."""

    name: str
    collect: Callable[[Inputs, float], ItemResult]
    threshold: str
    measures: bool = False
    precision_threshold: str = ""
