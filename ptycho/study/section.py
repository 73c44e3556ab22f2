"""What the report is made of: sections (:class:`Section`), each with its text and tables
from the report record and its figures (:class:`Figure`) from the study's results. The
checklist items' sections are :mod:`ptycho.study.report.items`'; the looks', the solver's
and the conditions' are their views' (``looks_view``, ``solver_view``, ``conditions_view``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ptycho.study.tables import Table

if TYPE_CHECKING:
    from ptycho.study.report.record import StudyReport


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
    A checklist item's section (:mod:`ptycho.study.report.items`) has its name and its
    verdict's summary as the default text; other sections (the solver) have no verdict."""

    name: str
    title: str
    tables: Callable[[StudyReport], list[Table]]
    figures: tuple[Figure, ...] = ()
    #: the section's text from the report record; an item's default is its verdict's summary
    text: Callable[[StudyReport], str] | None = None

    def describe(self, report: StudyReport) -> str:
        return self.text(report) if self.text else report.items[self.name].summary
