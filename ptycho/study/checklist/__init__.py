"""The validation checklist: one module per item, listed once, here, in report order.

Each module defines ``ITEM`` (:class:`~ptycho.study.checklist.item.Item`): how the item
is measured or collected, judged, tabled and drawn. The ``check`` command, the report,
the figures job and the rules read this list; adding an item is a module, a line in
:data:`_MODULES`, a rule and a caption (or :func:`register` from outside the package).
Importing the list imports no TensorFlow: the items that measure import it when they run.
"""

from __future__ import annotations

from importlib import import_module

from ptycho.study.checklist.item import Figure, Inputs, Item, Section
from ptycho.study.checklist.result import ItemResult, verdict
from ptycho.study.results import check_producer as producer

__all__ = [
    "Figure",
    "Inputs",
    "Item",
    "ItemResult",
    "Section",
    "get",
    "items",
    "names",
    "producer",
    "register",
    "sections",
    "verdict",
]

_MODULES = ("accuracy", "gradients", "convergence", "quality", "speedup")
_EXTRA: dict[str, Item] = {}  # items registered from outside the package, in registration order


def items() -> list[Item]:
    """Every item, in report order (the package's, then any registered)."""
    out = {m: import_module(f"{__name__}.{m}").ITEM for m in _MODULES}
    out.update(_EXTRA)
    return list(out.values())


def names() -> list[str]:
    return [it.name for it in items()]


def get(name: str) -> Item:
    for it in items():
        if it.name == name:
            return it
    raise KeyError(name)


def register(item: Item) -> Item:
    """Add (or replace) an item from outside the package; it then appears in ``check``,
    the report and the verdict like the package's own."""
    _EXTRA[item.name] = item
    return item


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)


def sections() -> list[Section]:
    """The report's sections after the checklist: the items, the looks, the solver, the conditions."""
    from ptycho.study import conditions_view, looks_view, solver_view

    return [*items(), looks_view.SECTION, solver_view.SECTION, conditions_view.SECTION]


def figures() -> list[tuple[str, Figure]]:
    """(section name, figure) of every figure of the report, in reading order."""
    return [(section.name, figure) for section in sections() for figure in section.figures]
