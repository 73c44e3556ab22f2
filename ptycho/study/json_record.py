"""A record's JSON is its fields: how the study's records are written and read, once.

A frozen dataclass that inherits :class:`JsonRecord` is written as its fields in their
order (a nested record by its own ``to_json``, tuples as lists, mappings as dicts) and
read back by its type hints: a nested record by its ``from_json``, tuples and mappings of
records element by element (``int`` keys from JSON's strings), a ``float`` stored as
JSON's null as NaN (how :func:`ptycho.artifacts.write_json` writes NaN and the
infinities), and a key the JSON lacks as the field's default, which is how a record
written before a field existed reads. JSON's null where a field cannot be ``None`` (a
mapping, a tuple, a string) reads as the field's default too, and an empty entry where
a field is an optional record as ``None``. Values are not coerced otherwise, so a record
read and written again gives the same JSON; a value that may be missing inside a mapping
says so in its type (``Mapping[str, float | None]``) and stays ``None``.

A record whose keys are not all its field names (an older name, a value derived on
writing) overrides :meth:`~JsonRecord.to_json` or :meth:`~JsonRecord.from_json` and
uses :func:`write_fields` and :func:`read_fields` for the rest.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Self


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read(tp: Any, value: Any) -> Any:
    """``value`` from JSON as the type ``tp`` says."""
    if value is None:
        return math.nan if tp is float else None
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        inner = _optional(tp)
        if inner is None:
            return value  # a union of several types: as stored
        if isinstance(inner, type) and hasattr(inner, "from_json") and not value:
            return None  # an empty entry: none
        return _read(inner, value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and hasattr(tp, "from_json"):
        return tp.from_json(value)
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], v) for v in value)
        return tuple(_read(a, v) for a, v in zip(args, value, strict=True))
    if origin in (Mapping, dict) and len(args) == 2:
        key = int if args[0] is int else (lambda k: k)
        return {key(k): _read(args[1], v) for k, v in value.items()}
    return value


def _optional(tp: Any) -> Any:
    """The type ``T`` of ``T | None``; None for any other type."""
    if typing.get_origin(tp) not in (types.UnionType, typing.Union) or type(None) not in typing.get_args(tp):
        return None
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    return inner[0] if len(inner) == 1 else None


def _write(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a record, or a named tuple that writes itself
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_write(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _write(v) for k, v in value.items()}
    return value


def write_fields(record: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``record``'s fields but ``skip`` as JSON, in their order."""
    return {f.name: _write(getattr(record, f.name)) for f in dataclasses.fields(record) if f.name not in skip}


def read_fields(cls: type, d: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries of ``d`` that are ``cls``'s fields (but ``skip``), read by their types:
    the keyword arguments of ``cls`` for what ``d`` holds (a null where the field cannot
    be ``None`` and has a default: left to the default)."""
    hints = _hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name not in d or f.name in skip:
            continue
        tp, value = hints[f.name], d[f.name]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if value is None and tp is not float and _optional(tp) is None and has_default:
            continue
        out[f.name] = _read(tp, value)
    return out


class JsonRecord:
    """A frozen dataclass whose JSON keys are its field names (the module's rules)."""

    def to_json(self) -> dict[str, Any]:
        return write_fields(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        """The record of :meth:`to_json`; a key missing with no default is a ``TypeError``
        that names it, which the file's reader turns into its one-line error."""
        return cls(**read_fields(cls, d))
