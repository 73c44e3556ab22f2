"""The validation checklist: one module per item, listed once, here, in report order.

Each module defines ``ITEM`` (:class:`~ptycho.study.checklist.item.Item`): how the item
is measured or collected and judged. What the report says of it (its text, tables and
figures) is its section's, a module of the same name in :mod:`ptycho.study.report.items`.
The ``check`` command, the looks, the report and the rules read this list; adding an item
is a module here, its section there, a line in :data:`_MODULES`, a rule and a caption (or
:func:`register` here and :func:`ptycho.study.report.items.register` there, from outside
the package). Importing the list imports no TensorFlow: the items that measure import it
when they run.
"""

from __future__ import annotations

from importlib import import_module

from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.result import ItemResult, verdict
from ptycho.study.results import check_producer as producer

__all__ = [
    "Inputs",
    "Item",
    "ItemResult",
    "get",
    "items",
    "names",
    "producer",
    "register",
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
    """Add (or replace) an item from outside the package; it then appears in ``check``
    and the verdict like the package's own, and in the report once its section is
    registered too (:func:`ptycho.study.report.items.register`)."""
    _EXTRA[item.name] = item
    return item


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)
