"""What a checklist item is: one record type the job, the rules, the report and the
figures read, so that an item is one module (its measurement or collection, its
verdict, its tables and its figures) and nothing else names it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptycho.config import defaults
from ptycho.study.checklist.result import ItemResult
from ptycho.study.results import StudyResults
from ptycho.study.tables import Table

if TYPE_CHECKING:
    from ptycho.study.report.record import StudyReport


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
class Figure:
    """One figure of the report: ``draw`` takes the figures job's
    :class:`~ptycho.study.results.StudyResults` and returns a Matplotlib figure;
    the caption is the package's ``captions/<stem>.rst``."""

    stem: str
    alt: str
    draw: Callable[[Any], Any]


@dataclass(frozen=True)
class Section:
    """A part of the report: its text and tables from the report record, its figures.
    A checklist item is a section with a verdict; other sections (the solver) have none."""

    name: str
    title: str
    tables: Callable[[StudyReport], list[Table]]
    figures: tuple[Figure, ...] = ()
    #: the section's text from the report record; an item's default is its verdict's summary
    text: Callable[[StudyReport], str] | None = None

    def describe(self, report: StudyReport) -> str:
        return self.text(report) if self.text else report.items[self.name].summary


@dataclass(frozen=True)
class Item(Section):
    """A checklist item: ``collect(inputs, threshold)`` returns its :class:`ItemResult`.
    ``measures``: it runs TensorFlow itself (the others judge the pipeline's outputs and
    import no TensorFlow). ``threshold``: its key under ``thresholds:`` in the config;
    ``precision_threshold``: its second key there, the limit of its reduced-precision
    comparisons (``check --precision-threshold``), for the items that make them."""

    collect: Callable[[Inputs, float], ItemResult] | None = None  #: required; a default only for field order
    threshold: str = ""
    measures: bool = False
    precision_threshold: str = ""

    def __post_init__(self) -> None:
        if self.collect is None:
            raise TypeError(f"checklist item {self.name!r} has no collect function")
