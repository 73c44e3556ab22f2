"""What the report says of each checklist item: one module per item, its
:class:`~ptycho.study.section.Section` (``SECTION``: title, text, tables, figures), read
from the report record; the judging is the item's module in :mod:`ptycho.study.checklist`,
which says nothing of how it is shown. The report's sections are these, in the checklist's
order, then the looks', the solver's and the conditions' (:func:`sections`).

An item registered from outside the package (:func:`ptycho.study.checklist.register`)
registers its section here too (:func:`register`). Importing this list imports no
TensorFlow and none of the sections: each is imported when the report asks for it.
"""

from __future__ import annotations

from importlib import import_module

from ptycho.study import checklist
from ptycho.study.section import Figure, Section

_EXTRA: dict[str, Section] = {}  # sections of items registered from outside the package


def register(section: Section) -> Section:
    """Add (or replace) the section of an item registered from outside the package."""
    _EXTRA[section.name] = section
    return section


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)


def section(name: str) -> Section:
    """The section of checklist item ``name``: the package's module of that name, or one
    registered; KeyError naming the fix if there is none."""
    if name in _EXTRA:
        return _EXTRA[name]
    missing = KeyError(f"checklist item {name!r} has no report section; register one (report.items.register)")
    try:
        found = getattr(import_module(f"{__name__}.{name}"), "SECTION", None)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise  # the section's module exists and something it imports does not
        raise missing from None
    if not isinstance(found, Section):
        raise missing
    return found


def sections() -> list[Section]:
    """The report's sections after the checklist table: the items', the looks', the solver's, the conditions'."""
    from ptycho.study import conditions_view, looks_view, solver_view

    return [
        *(section(name) for name in checklist.names()),
        looks_view.SECTION,
        solver_view.SECTION,
        conditions_view.SECTION,
    ]


def figures() -> list[tuple[str, Figure]]:
    """(section name, figure) of every figure of the report, in reading order."""
    return [(s.name, figure) for s in sections() for figure in s.figures]
