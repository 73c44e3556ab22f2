"""The records' JSON rules (issue 43): a record is written as its fields and read back by
their types, so a record read and written again gives the same JSON, a record from before
a field existed reads with the field's default, and NaN survives JSON's null."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from ptycho.artifacts import _jsonable
from ptycho.study.json_record import JsonRecord, read_fields, write_fields


@dataclass(frozen=True)
class Inner(JsonRecord):
    ratio: float
    low: float = math.nan


@dataclass(frozen=True)
class Outer(JsonRecord):
    name: str
    inner: Inner
    maybe: Inner | None = None
    seeds: tuple[int, ...] = ()
    by_batch: Mapping[int, Inner] = field(default_factory=dict)
    by_key: Mapping[str, tuple[Inner, ...]] = field(default_factory=dict)
    count: int | None = None
    added_later: str = "the default"


def stored(record: JsonRecord) -> dict:
    """As the file holds it: through write_json's rules (NaN as null) and JSON text."""
    return json.loads(json.dumps(_jsonable(record.to_json())))


def test_a_record_written_and_read_again_gives_the_same_json_with_its_types():
    record = Outer(
        "a",
        Inner(1.5),
        seeds=(3, 1),
        by_batch={8: Inner(2.0, 1.0)},
        by_key={"jit": (Inner(0.9), Inner(1.1, 0.5))},
        count=4,
    )
    first = stored(record)
    assert list(first) == ["name", "inner", "maybe", "seeds", "by_batch", "by_key", "count", "added_later"]
    assert first["inner"] == {"ratio": 1.5, "low": None}  # NaN is null in the file
    back = Outer.from_json(first)
    assert isinstance(back.inner, Inner) and math.isnan(back.inner.low)  # null reads as NaN again
    assert back.seeds == (3, 1) and back.by_batch[8] == Inner(2.0, 1.0)  # int keys from JSON's strings
    assert isinstance(back.by_key["jit"], tuple) and back.by_key["jit"][1] == Inner(1.1, 0.5)
    assert back.maybe is None and back.count == 4
    assert stored(back) == first


def test_an_older_record_reads_with_the_defaults_and_unknown_keys_are_left_aside():
    back = Outer.from_json({"name": "old", "inner": {"ratio": 2}, "no_longer_a_field": 1})
    assert back.added_later == "the default" and back.seeds == () and back.by_batch == {}
    assert back.inner.ratio == 2 and isinstance(back.inner.ratio, int)  # not coerced: written again as it was


def test_a_missing_field_without_a_default_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="inner"):
        Outer.from_json({"name": "x"})


def test_a_record_may_skip_fields_and_add_what_follows_from_them():
    record = Outer("a", Inner(1.0))
    assert "maybe" not in write_fields(record, skip=("maybe",))
    assert read_fields(Outer, {"name": "a", "inner": {"ratio": 1.0}, "count": 3}, skip=("count",)) == {
        "name": "a",
        "inner": Inner(1.0),
    }


def test_the_studys_records_keep_their_files_json():
    """Records whose files the project ships (the smoke study) read and write back the same JSON."""
    from pathlib import Path

    from ptycho.study.report.record import StudyReport

    report = json.loads((Path(__file__).parent / "data" / "smoke-study" / "expected" / "validation.json").read_text())
    report = {k: v for k, v in report.items() if k != "format"}
    typed = StudyReport.from_json(report)
    assert typed.cost.steps["train"].jobs >= 1 and typed.provenance.preset == "smoke"
    assert typed.solver.best.curve[0].iteration >= 1
    assert stored(typed) == report
