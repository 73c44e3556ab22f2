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


@pytest.mark.parametrize("item", ["accuracy", "gradients"])
def test_the_measuring_items_evidence_is_its_record_key_for_key(item):
    """The accuracy and gradients checks of the smoke study read as their evidence records
    and write back the same JSON: the records declare every key the checks write, so no
    key is read by hand elsewhere or dropped on the way to the report."""
    from pathlib import Path

    from ptycho.study.checklist.differences import AccuracyEvidence, GradientsEvidence

    check = json.loads((Path(__file__).parent / "data" / "smoke-study" / "checks" / f"{item}.json").read_text())
    record = {"accuracy": AccuracyEvidence, "gradients": GradientsEvidence}[item].from_json(check["evidence"])
    assert stored(record) == check["evidence"]
    if item == "accuracy":
        assert record.translation and record.forward_model.per_mode and record.network_differences()
        assert all(d.limit == record.limits[d.precision] for d in record.network_differences())
    else:
        assert record.differences() and record.finite_differences.points > 0


def test_the_speed_items_evidence_is_its_record_key_for_key():
    """The smoke study's speed check reads as its evidence record (its comparisons, the
    cross-check, what it was judged by) and writes back the same JSON."""
    from pathlib import Path

    from ptycho.study.checklist.speed_evidence import BY_TIME_TO_QUALITY, SpeedEvidence
    from ptycho.study.ttq_comparison import Comparison

    check = json.loads((Path(__file__).parent / "data" / "smoke-study" / "checks" / "speedup.json").read_text())
    record = SpeedEvidence.from_json(check["evidence"])
    assert stored(record) == check["evidence"]
    assert record.judged.by == BY_TIME_TO_QUALITY and record.judged.comparison in record.time_to_quality
    assert all(isinstance(c, Comparison) for c in record.time_to_quality.values())
    assert record.cross_check and all(c.agree for c in record.cross_check.values())
    assert record.per_step_words() == check["evidence"]["per_step"]["alone"]
    assert record.bench_record.arms_of("pinn")  # the benchmark, as its own record


def test_the_convergence_items_evidence_is_its_record_key_for_key():
    from pathlib import Path

    from ptycho.study.checklist.convergence import ConvergenceEvidence

    check = json.loads((Path(__file__).parent / "data" / "smoke-study" / "checks" / "convergence.json").read_text())
    record = ConvergenceEvidence.from_json(check["evidence"])
    assert stored(record) == check["evidence"]
    pair = next(iter(record.pairs.values()))
    assert pair.reference in pair.decreased and all(c.outcome for c in record.comparisons.values())
    assert all(len(arm["val"]) == len(arm["train"]) > 0 for group in record.curves.values() for arm in group.values())


def test_the_quality_items_evidence_is_its_record_key_for_key():
    """The smoke study's quality check (a ground truth) reads as its evidence record and
    writes back the same JSON; the report's quality section reads the record."""
    from pathlib import Path

    from ptycho.study.checklist.quality_evidence import QualityEvidence, evidence_of

    check = json.loads((Path(__file__).parent / "data" / "smoke-study" / "checks" / "quality.json").read_text())
    record = evidence_of(check["evidence"])
    assert isinstance(record, QualityEvidence) and record.ground_truth
    assert stored(record) == check["evidence"]
    assert record.per_arm and record.arm_differences and record.pinn_minus_baseline
    assert all(c.outcome for per in record.comparisons.values() for c in per.values())
    # The arms scored against each other (no ground truth) carry the same scores as against a
    # truth, flat beside the two arms, a null score read as NaN and written as null again.
    from ptycho.study.checklist.agreement import COLUMNS
    from ptycho.study.checklist.quality_evidence import BetweenArms

    flat = {"arm": "pinn-jit-s0", "reference": "pinn-off-s0", **dict.fromkeys(COLUMNS, 0.5), "amp_psnr": None}
    pair = BetweenArms.from_json(flat)
    assert stored(pair) == flat and pair.score("amp_ssim") == 0.5 and math.isnan(pair.score("amp_psnr"))


def test_a_null_where_a_field_cannot_be_null_reads_as_its_default_and_an_empty_record_entry_as_none():
    back = Outer.from_json({"name": "x", "inner": {"ratio": 1.0}, "seeds": None, "by_key": None, "maybe": {}})
    assert back.seeds == () and back.by_key == {} and back.maybe is None
    assert math.isnan(Inner.from_json({"ratio": None}).ratio)  # a number's null is NaN, not its default


def test_the_solvers_records_write_the_scores_of_their_kind_also_when_null():
    """A checkpoint scored against a ground truth keeps a null score (an infinite PSNR) as
    null; one without a ground truth writes its data misfit alone."""
    from ptycho.study.solver_record import CurvePoint, WarmStart

    scored = {"iteration": 5, "amp_ssim": 0.9, "phase_ssim": 0.8, "amp_psnr": None, "phase_psnr": 20.0}
    assert stored(CurvePoint.from_json(scored)) == scored
    misfit = {"iteration": 3, "data_misfit": 0.25, "seconds": 1.5}
    assert stored(CurvePoint.from_json(misfit)) == misfit
    row = {"mode": "off", "start": "pinn", "flat_iterations": 10, "target_amp_ssim": None, "target_phase_ssim": 0.7}
    row |= {"iterations": None, "iterations_saved": None, "seconds_saved": None}
    assert stored(WarmStart.from_json(row)) == row


def test_the_runs_cost_names_its_largest_steps_also_read_back_from_its_sorted_file():
    from ptycho.study.report.record import RunCost

    cost = RunCost.from_json(
        {
            "steps": {
                "a": {"jobs": 1, "wall_s": 5.0},
                "bench": {"jobs": 1, "wall_s": 50.0},
                "z": {"jobs": 2, "wall_s": 20},
            },
            "span_s": 60.0,
        }
    )
    assert [name for name, _ in cost.largest] == ["bench", "z", "a"]
    assert "largest: bench 0.8 min (1 job), z 0.3 min (2 jobs), a 0.1 min (1 job)." in cost.words()
