"""Time to quality and the speedup item built on it: XLA is judged by how soon an arm
reaches the reference's quality, against off at the same precision, never per step alone
and never with a precision's gain counted as XLA's."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from ptycho.study import time_to_quality as ttq
from ptycho.study import ttq_comparison as ttc
from ptycho.study.checklist.result import ItemResult
from ptycho.study.checklist.speedup import speedup
from ptycho.study.report import speed_sentence

EPOCHS = 12
STEPS = 10  # n_train 80 / batch 8


def _curve(reach_epoch: int, final: float = 0.10, start: float = 1.0) -> list[float]:
    """A validation curve that falls linearly to just above ``final`` and first reaches it
    at ``reach_epoch`` (then stays there); ``reach_epoch`` beyond the run: never reaches it."""
    out = []
    for e in range(1, EPOCHS + 1):
        if e >= reach_epoch:
            out.append(final)
        else:
            out.append(final + (start - final) * (reach_epoch - e) / reach_epoch + 0.05)
    return out


def _meta(
    mode: str,
    seed: int,
    curve: list[float],
    step_s: float,
    precision: str = "float32",
    offset: float = 0.0,
    floor: bool = False,
):
    """``offset``: added to every loss; ``floor``: recorded as the loss floor (a perfect
    reconstruction's loss on the run's own validation split) too."""
    steps = [step_s * (1 + 0.002 * ((k % 7) - 3)) for k in range(len(curve) * STEPS - 1)]
    return {
        "model": {"kind": "pinn"},
        **({"loss_bounds": {"floor": offset}} if floor else {}),
        "train": {"xla": mode, "seed": seed, "precision": precision, "batch_size": 8},
        "n_train": 80,
        "initial_val_loss": 1.2 + offset,
        "history": [{"epoch": i + 1, "train_loss": v + offset, "val_loss": v + offset} for i, v in enumerate(curve)],
        "timing": {"compile_s": 2.0, "step_times_s": steps, "step_median_s": step_s},
    }


def _runs(metas):
    return ttq.runs_of(metas)


def _crossing(reach_epoch: int, margin: float = 0.05) -> float:
    """Where :func:`_curve` crosses the target of a reference like it (final 0.10, drop from
    1.2): between the last two epochs' readings, interpolated, in steps."""
    target = 0.10 + margin * (1.2 - 0.10)
    before, at = _curve(reach_epoch)[reach_epoch - 2], _curve(reach_epoch)[reach_epoch - 1]
    return STEPS * (reach_epoch - 1 + (before - target) / (before - at))


def test_an_arm_faster_per_step_that_needs_twice_the_steps_is_slower_to_quality_and_fails():
    seeds = (0, 1, 2)
    off = [_meta("off", s, _curve(5), 0.100) for s in seeds]
    fast = [_meta("physics", s, _curve(10), 0.100 / 1.5) for s in seeds]  # 1.5x per step, 2x the steps
    c = ttq.compare(_runs(fast), _runs(off), 0.05)
    assert c.per_step == pytest.approx(1.5, rel=1e-3)
    assert c.steps_ratio == pytest.approx(_crossing(5) / _crossing(10))  # about 0.5: 47.6 vs 96.1 steps
    assert c.ratio == pytest.approx(1.5 * _crossing(5) / _crossing(10), rel=1e-3)  # about 0.75
    assert c.high < 1.0 and c.paired and not c.inconclusive
    rec = speedup({}, 1.0, metas=off + fast, margin=0.05)
    assert rec.status == "FAIL" and rec.value == pytest.approx(c.low)
    assert rec.evidence["judged"] == {"by": "time_to_quality", "comparison": "pinn-physics"}
    assert "per step 1.50x (95% CI 1.50-1.50), 2.02x the steps (2.02-2.02)" in rec.summary and "SLOWER" in rec.summary


def test_the_ratios_two_factors_say_whether_the_step_or_the_path_leaves_it_unresolved():
    """A mode 1.06x faster in every pair's step, whose steps to the target XLA's rounding
    moves by a different amount in each pair (up to -20 % and +25 %): the time to quality
    is not resolved, the step is; the factors' logs add up to the ratio's, seed by seed."""
    seeds = (0, 1, 2, 3, 4)
    off = [_meta("off", s, _curve(8), 0.100) for s in seeds]
    reach = {0: 6, 1: 10, 2: 8, 3: 7, 4: 9}  # the mode's path: fewer or more steps than off's 8 epochs
    fast = [_meta("physics", s, _curve(reach[s]), 0.100 / 1.06) for s in seeds]
    c = ttq.compare(_runs(fast), _runs(off), 0.05)
    assert c.paired and c.interval == ttc.T_LOG_RATIOS and c.answer == ttc.NOT_RESOLVED
    step, steps = c.factors()
    assert step.ratio == pytest.approx(1.06, rel=1e-3) and 1.0 < step.low <= step.high < 1.1  # resolved: faster
    assert steps.low < 1.0 < steps.high  # the path: the arm's steps over off's
    assert math.log(c.ratio) == pytest.approx(math.log(step.ratio) - math.log(steps.ratio))
    assert step.ratio == pytest.approx(c.per_step) and steps.ratio == pytest.approx(1 / c.steps_ratio)
    words = f"per step {ttc.ratio_words(step.ratio, step.low, step.high)}, {steps.ratio:.2f}x the steps"
    assert words in c.sentence() and words in c.headline()
    logged = c.metrics()  # the parent run's xla_ttq_<stat>
    assert (logged["per_step_low"], logged["per_step_high"]) == (step.low, step.high)
    assert (logged["steps"], logged["steps_low"], logged["steps_high"]) == steps
    one = dataclasses.replace(c, arm=c.arm[:1], reference=c.reference[:1], interval=ttc.BOOTSTRAP)
    assert one.factors() is None and f"{one.per_step:.2f}x per step" in one.headline()


def test_an_unresolved_path_is_explained_by_the_curves_slope_and_the_pairs_loss_spread():
    """On a flat learning curve a small difference in loss is a large one in steps: curves
    whose excess falls as steps^-0.3, each XLA arm's loss off its pair's by a few percent,
    reach the target 1/0.3 times as many percent of the steps apart. The comparison
    measures the slope and the pairs' loss spread, says how large a gain its seeds can
    show, and the speed section says why the path is not resolved."""
    b, shifts = 0.3, {0: 0.97, 1: 1.03, 2: 0.99, 3: 1.04, 4: 0.96}  # XLA moves each pair's loss

    def power(scale: float) -> list[float]:
        return [scale * 0.5 * (e * STEPS) ** -b for e in range(1, EPOCHS + 1)]

    off = [_meta("off", s, power(1.0), 0.100) for s in shifts]
    xla = [_meta("physics", s, power(k), 0.100 / 1.06) for s, k in shifts.items()]
    c = ttq.compare(_runs(xla), _runs(off), 0.05, level=0.9)
    assert c.exponent == pytest.approx(b, rel=1e-6)
    logs = [math.log(k) for k in shifts.values()]
    assert c.loss_spread == pytest.approx(statistics.stdev(logs), rel=1e-9)
    steps = [math.log(a.steps / r.steps) for a, r in zip(c.arm, c.reference, strict=True)]
    assert statistics.stdev(steps) == pytest.approx(
        c.loss_spread / b, rel=0.1
    )  # 1/b as many steps, read between readings
    # The smallest gain these seeds show faster is the interval's half width: at it, its lower end is 1.
    assert c.answer == ttc.NOT_RESOLVED and c.low * c.resolvable_gain() == pytest.approx(c.ratio)
    named = dataclasses.replace(c, title="PINN physics - off", model="pinn", mode="physics", reference_mode="off")
    words = named.path_words()
    assert words.startswith("near the target the validation loss's excess over its floor falls as steps^-0.30")
    assert "an excess 1 % smaller takes about 3.3 % more steps" in words
    assert f"excesses near the target differ by {100 * c.loss_spread:.1f} %" in words
    assert f"shows a gain only from {c.resolvable_gain():.2f}x up; per step physics runs at 1.06x off's speed" in words
    logged = c.metrics()  # the parent run's xla_ttq_<stat>
    assert (logged["resolvable_gain"], logged["exponent"], logged["loss_spread"]) == (
        c.resolvable_gain(),
        c.exponent,
        c.loss_spread,
    )
    one = ttq.compare(_runs(xla[:1]), _runs(off[:1]), 0.05)  # one seed: no pairs, no words
    assert one.path_words() == "" and math.isnan(one.resolvable_gain()) and math.isnan(one.loss_spread)
    # The speed section reads the record back from the report's JSON and says why.
    from ptycho.study.report.items.speedup import text
    from ptycho.study.report.record import StudyReport

    def section(record):
        return text(StudyReport.of({"items": {"speedup": {"evidence": {"time_to_quality": {"x": record.to_json()}}}}}))

    assert f"Why the time to quality is not resolved (PINN physics - off): {words}" in section(named)
    # Not resolved because two seeds missed the target: the misses, not the curve, are why.
    assert "Why the time to quality" not in section(dataclasses.replace(named, inconclusive=True))


def test_a_mode_faster_only_because_of_its_precision_is_not_credited_to_xla():
    seeds = (0, 1, 2)
    metas = [_meta("off", s, _curve(5), 0.100) for s in seeds]
    metas += [_meta("off", s, _curve(5), 0.060, "mixed_bfloat16") for s in seeds]  # bfloat16's own gain
    metas += [_meta("physics", s, _curve(5), 0.060, "mixed_bfloat16") for s in seeds]  # XLA adds nothing
    rec = speedup({}, 1.0, metas=metas, margin=0.05)
    records = rec.evidence["time_to_quality"]
    assert records["pinn-physics-bf16"]["ratio"] == pytest.approx(1.0, abs=0.01)  # vs off at bf16
    assert records["pinn-off-bf16-vs-fp32"]["ratio"] == pytest.approx(100 / 60, rel=0.01)  # the precision's
    assert rec.status == "FAIL" and rec.value <= 1.0 <= rec.evidence["time_to_quality"]["pinn-physics-bf16"]["high"]
    assert "no measurable effect" in rec.summary
    assert "1.67" not in rec.summary  # bfloat16's gain is not in XLA's sentence
    assert "in time to quality, bf16 (off)" in rec.evidence["precision"]


def test_a_seed_that_never_reaches_the_target_counts_as_its_whole_training_and_two_make_it_inconclusive():
    seeds = (0, 1, 2)
    off = [_meta("off", s, _curve(5), 0.100) for s in seeds]
    one = [_meta("jit", 0, _curve(EPOCHS + 5), 0.080)] + [_meta("jit", s, _curve(5), 0.080) for s in (1, 2)]
    c = ttq.compare(_runs(one), _runs(off), 0.05)
    assert c.missed == ttc.Sides((0,), ()) and not c.inconclusive
    assert c.arm[0].steps == EPOCHS * STEPS and not c.arm[0].reached  # the whole training
    rec = speedup({}, 1.0, metas=off + one, margin=0.05)
    assert "never reached the target: jit at fp32 seed 0 (counted as the whole training)" in rec.summary
    two = [_meta("jit", s, _curve(EPOCHS + 5), 0.080) for s in (0, 1)] + [_meta("jit", 2, _curve(5), 0.080)]
    rec = speedup({}, 1.0, metas=off + two, margin=0.05)
    assert rec.status == "INCONCLUSIVE" and "INCONCLUSIVE (two seeds of one arm never reached" in rec.summary


def test_the_target_is_the_same_for_any_offset_of_the_loss():
    """The Poisson likelihood sits at an arbitrary offset: a fraction of the loss drop, not
    of the loss value, gives the same steps to the target whatever the offset."""
    seeds = (0, 1)
    for offset in (0.0, -2.23, 50.0):
        off = [_meta("off", s, _curve(5), 0.1, offset=offset) for s in seeds]
        jit = [_meta("jit", s, _curve(7), 0.1, offset=offset) for s in seeds]
        c = ttq.compare(_runs(jit), _runs(off), 0.05)
        assert c.target == pytest.approx(0.10 + offset + 0.05 * 1.1)
        assert [x.epochs for x in c.arm] == [7, 7] and [x.epochs for x in c.reference] == [5, 5]


def test_quality_is_the_loss_above_each_trainings_own_floor():
    """The Poisson likelihood's offset is the validation split's, and each seed draws its
    own split: measured above each training's floor, seeds whose offsets differ by more
    than the margin reach the target when their trainings do; in raw loss, the seed with
    the highest offset never does, in either arm."""
    offsets = {0: -2.23, 1: -2.05, 2: -2.14}  # 0.18 apart, as at 1e4 photons
    for floors in (True, False):
        off = [_meta("off", s, _curve(5), 0.1, offset=o, floor=floors) for s, o in offsets.items()]
        jit = [_meta("jit", s, _curve(7), 0.1, offset=o, floor=floors) for s, o in offsets.items()]
        c = ttq.compare(_runs(jit), _runs(off), 0.05)
        epochs = [x.epochs for x in c.arm], [x.epochs for x in c.reference]
        if floors:
            assert c.target == pytest.approx(0.10 + 0.05 * 1.1)  # an excess over the floor
            assert epochs == ([7, 7, 7], [5, 5, 5]) and not c.inconclusive
        else:  # what the raw loss said: a verdict about the splits
            assert c.missed == ttc.Sides((1,), (1,))


def test_trainings_without_a_floor_beside_ones_with_it_are_all_measured_in_raw_loss_and_named():
    """A results folder whose older trainings predate the floor, given a new arm: the new
    ones record a floor, the old ones do not. Measuring one side above its floor and the
    other in raw loss would compare the Poisson loss's offset: identical trainings came out
    3x faster (the side without a floor "reached" the target in its first epoch) or never
    reached it. All are measured in raw loss instead, and the words name the old seeds."""
    seeds, offset = (0, 1, 2), -2.2
    for old, new in (("physics", "off"), ("off", "physics")):
        metas = [_meta(m, s, _curve(5), 0.1, offset=offset, floor=m == new) for m in (old, new) for s in seeds]
        by_mode = {m: _runs([x for x in metas if x["train"]["xla"] == m]) for m in ("off", "physics")}
        c = ttq.compare(by_mode["physics"], by_mode["off"], 0.05)
        assert c.ratio == pytest.approx(1.0, rel=1e-2) and not c.missed.arm and not c.inconclusive
        assert c.no_floor.to_json() == {
            "arm" if old == "physics" else "reference": [0, 1, 2],
            "arm" if old == "off" else "reference": [],
        }
        words = speedup({}, 1.0, metas=metas, margin=0.05).summary
        assert f"measured in raw loss, since {old} at fp32 seeds 0, 1, 2 record no loss floor" in words
        assert "re-run those trainings" in words
    # every training with its floor, or none with one: nothing to say
    for floors in (True, False):
        metas = [_meta(m, s, _curve(5), 0.1, offset=offset, floor=floors) for m in ("off", "physics") for s in seeds]
        assert "raw loss" not in speedup({}, 1.0, metas=metas, margin=0.05).summary


def test_compile_time_is_reported_apart_and_in_a_second_figure():
    off = [_meta("off", 0, _curve(5), 0.1)]
    jit = [
        dict(_meta("jit", 0, _curve(5), 0.05), timing=dict(_meta("jit", 0, _curve(5), 0.05)["timing"], compile_s=20))
    ]
    c = ttq.compare(_runs(jit), _runs(off), 0.05)
    assert c.ratio == pytest.approx(2.0, rel=1e-2)  # the same steps at 100 ms vs at 50 ms
    steps = _crossing(5)
    assert c.ratio_with_compile == pytest.approx((steps * 0.1 + 2) / (steps * 0.05 + 20), rel=1e-2)


def test_records_without_step_times_have_no_time_to_quality():
    good = _meta("off", 0, _curve(5), 0.1)
    assert len(ttq.runs_of([good, dict(good, history=[]), dict(good, timing={})])) == 1
    assert ttq.compare([], _runs([good]), 0.05).inconclusive


def _failed(meta: dict, epochs_done: int) -> dict:
    """``meta`` as a training that diverged after ``epochs_done`` good epochs records it:
    FAILED, the good epochs' history and step times, ``train.epochs`` as planned."""
    return dict(
        meta,
        status="FAILED",
        failure="loss is NaN",
        train=dict(meta["train"], epochs=EPOCHS),
        history=meta["history"][:epochs_done],
        timing=dict(meta["timing"], step_times_s=meta["timing"]["step_times_s"][: epochs_done * STEPS]),
    )


def test_a_failed_seed_is_a_miss_counted_as_its_whole_planned_training_and_named():
    # Before: a diverged seed was dropped, and the arm was timed on its other seeds as if
    # it had not run (MLPerf counts a run that never reaches the target as the slowest).
    seeds = (0, 1, 2)
    off = [_meta("off", s, _curve(5), 0.100) for s in seeds]
    jit = [_meta("jit", s, _curve(5), 0.050) for s in seeds]
    jit[0] = _failed(jit[0], epochs_done=2)  # diverged in epoch 3 of 12
    c = ttq.compare(_runs(jit), _runs(off), 0.05)
    assert c.missed == ttc.Sides((0,), ()) and c.failed == ttc.Sides((0,), ())
    assert c.arm[0].steps == EPOCHS * STEPS and not c.arm[0].reached  # all 12 planned epochs
    # per seed, 50 steps at 100 ms vs 120, 50, 50 steps at 50 ms: 5.0 s / 6.0, 2.5, 2.5 s (paired
    # seeds: the geometric mean of the per-seed ratios), not 5.0 / 2.5 for all three
    assert c.ratio == pytest.approx((5.0 / 6.0 * 2.0 * 2.0) ** (1 / 3), rel=2e-2) and c.interval == ttc.T_LOG_RATIOS
    rec = speedup({}, 1.0, metas=off + jit, margin=0.05)
    assert "FAILED (diverged or collapsed): jit at fp32 seed 0 (counted as the whole planned training)" in rec.summary
    assert "never reached the target" not in rec.summary
    # Diverged before its first timed step: timed at its arm's steps. Two failed: INCONCLUSIVE.
    jit[1] = _failed(jit[1], epochs_done=0)
    c = ttq.compare(_runs(jit), _runs(off), 0.05)
    assert c.arm[1].step_s == pytest.approx(0.05, rel=1e-2) and c.inconclusive
    # A failed reference seed sets no target; with none finished there is no time to quality.
    off_failed = [_failed(m, epochs_done=1) for m in off]
    assert math.isnan(ttq.compare(_runs(jit), _runs(off_failed), 0.05).ratio)
    one_failed = [_failed(off[0], epochs_done=1), *off[1:]]
    c = ttq.compare(_runs([_meta("jit", s, _curve(5), 0.05) for s in seeds]), _runs(one_failed), 0.05)
    assert c.target == pytest.approx(ttq.compare(_runs(jit[2:]), _runs(off[1:]), 0.05).target)
    assert c.missed.reference == (0,)


def test_an_arm_whose_only_seed_never_reached_the_target_can_fail_but_never_pass():
    # Review of 3c28b75: with one seed (the smoke preset), a FAILED jit training, 2x
    # faster per step, came out "PASS 1.33x faster": one miss was below two. Its time is
    # a lower bound, so the ratio is an upper bound: it can fail a threshold, not pass it.
    off = [_meta("off", 0, _curve(8), 0.100)]
    for jit in (_failed(_meta("jit", 0, _curve(5), 0.050), epochs_done=2), _meta("jit", 0, _curve(EPOCHS + 5), 0.05)):
        c = ttq.compare(_runs([jit]), _runs(off), 0.05)
        assert c.missed.arm == (0,) and c.upper_bound and not c.inconclusive
        assert c.ratio == pytest.approx(_crossing(8) * 0.1 / (120 * 0.05), rel=2e-2)  # 1.28: at most
        rec = speedup({}, 1.0, metas=[*off, jit], margin=0.05)
        assert rec.status == "INCONCLUSIVE" and "not shown faster (no seed of the arm reached" in rec.summary
        said = speed_sentence({"items": {"speedup": rec.to_json()}})  # the report's first lines
        assert "not shown faster" in said and ": faster" not in said
        assert speedup({}, 2.0, metas=[*off, jit], margin=0.05).status == "FAIL"
    # A failed run that records no planned epochs counts as the longest training compared, not 0 s.
    bare = _failed(_meta("jit", 1, _curve(5), 0.050), epochs_done=0)
    bare["train"] = {k: v for k, v in bare["train"].items() if k != "epochs"}
    c = ttq.compare(_runs([_meta("jit", 0, _curve(5), 0.05), bare]), _runs(off), 0.05)
    assert c.arm[1].steps == EPOCHS * STEPS


def test_a_comparison_is_one_record_stored_read_judged_and_logged_the_same_way():
    # Issue 43: the report, the speedup item and the MLflow view once read the report's
    # dict each in their own way, and the parent run logged an upper bound's ratio as a
    # measured one. Now one record: stored and read back equal (NaN as JSON's null too),
    # judged once, and its MLflow metrics carry its flags.
    import json

    from ptycho.artifacts import _jsonable
    from ptycho.study.report.answers import answers

    off = [_meta("off", 0, _curve(8), 0.100)]
    jit = [_meta("jit", 0, _curve(EPOCHS + 5), 0.05)]  # never reaches the target: an upper bound
    rec = ItemResult.from_json(
        json.loads(json.dumps(_jsonable(speedup({}, 1.0, metas=off + jit, margin=0.05).to_json())))
    )
    stored = rec.evidence["time_to_quality"]["pinn-jit"]
    c = ttc.Comparison.from_json(stored)
    assert _jsonable(c.to_json()) == stored and c.title == "PINN jit - off" and c.axis == "mode"
    assert c.upper_bound and c.passes(1.0) is None and c.passes(2.0) is False
    assert c.outcome.startswith("not shown faster") and c.sentence() in rec.summary
    # the smoke study's report with this speedup item in it
    report = json.loads((Path(__file__).parent / "data" / "smoke-validation.json").read_text())
    report["items"]["speedup"] = rec.to_json()
    logged = answers(report)
    parent = logged[""].metrics
    assert parent["xla_ttq_ratio.jit"] == pytest.approx(c.ratio) and parent["xla_ttq_upper_bound.jit"] == 1.0
    assert parent["xla_ttq_inconclusive.jit"] == 0.0
    assert logged["pinn-jit-s0"].metrics["quality_reached"] == 0.0
    assert logged["pinn-off-s0"].metrics["quality_steps"] == c.reference[0].steps
    # without a finished reference: no ratio, nothing logged as one, and its words say why
    none = ttq.compare(_runs(jit), [], 0.05)
    assert not none.measured and "no time to quality" in none.sentence()
    assert none.metrics() == {"upper_bound": 0.0, "inconclusive": 1.0}
    assert ttc.Comparison.from_json(json.loads(json.dumps(_jsonable(none.to_json())))) == none


def _scaled(mode: str, seed: int, reach_epoch: int, step_s: float):
    return _meta(mode, seed, _curve(reach_epoch), step_s)


def test_speed_has_four_answers_and_only_an_unresolved_one_is_inconclusive():
    # Issue 45: "faster", "no measurable effect", "slower" and "not resolved" are four
    # answers; an interval from much faster to much slower is a measurement that did not
    # resolve, not XLA failing.
    seeds = (0, 1, 2)
    off = [_scaled("off", s, 5, 0.100) for s in seeds]
    cases = {
        # identical arms: decided, no measurable effect (the item fails: XLA is not faster)
        "same": ([_scaled("jit", s, 5, 0.100) for s in seeds], ttc.NO_EFFECT, "FAIL"),
        # a true 2x slowdown: decided SLOWER
        "slower": ([_scaled("jit", s, 5, 0.200) for s in seeds], ttc.SLOWER, "FAIL"),
        # a steady 1.5x gain: decided faster
        "faster": ([_scaled("jit", s, 5, 0.100 / 1.5) for s in seeds], ttc.FASTER, "PASS"),
        # seeds that disagree (0.6x, 1.7x, 1.0x): not resolved
        "noisy": (
            [_scaled("jit", 0, 5, 0.100 / 0.6), _scaled("jit", 1, 5, 0.100 / 1.7), _scaled("jit", 2, 5, 0.100)],
            ttc.NOT_RESOLVED,
            "INCONCLUSIVE",
        ),
    }
    for name, (jit, answer, status) in cases.items():
        c = ttq.compare(_runs(jit), _runs(off), 0.05)
        assert c.interval == ttc.T_LOG_RATIOS and c.paired, name
        assert c.answer == answer, (name, c.ratio, c.low, c.high)
        rec = speedup({}, 1.0, metas=off + jit, margin=0.05)
        assert rec.status == status, (name, rec.summary)
    noisy = ttq.compare(_runs(cases["noisy"][0]), _runs(off), 0.05)
    assert noisy.low < ttc.NO_EFFECT_BAND[0] and noisy.high > ttc.NO_EFFECT_BAND[1]
    assert noisy.outcome.startswith("not resolved") and "seeds per arm would settle it" in noisy.sentence()


def test_an_unresolved_speed_says_how_many_paired_seeds_would_resolve_it():
    """Issue 45: the seeds that would settle a "not resolved" speed, from the paired log
    ratios' mean and spread; seeds of that mean and spread resolve it at that number and
    not at one fewer."""
    import numpy as np

    def reach(seed, seconds):
        return ttc.Reach(seed, True, 2, 100.0, seconds / 100, seconds, 1.0)

    def study(logs):
        ref = tuple(reach(s, 100.0) for s in range(len(logs)))
        arm = tuple(reach(s, 100.0 / math.exp(x)) for s, x in enumerate(logs))
        ratio, low, high = ttc.t_log_ratios(np.exp(np.array(logs)), 0.95)
        return ttc.Comparison(
            ratio, low, high, paired=True, interval=ttc.T_LOG_RATIOS, arm=arm, reference=ref, inconclusive=False
        )

    logs = [-0.09, 0.04, -0.01]  # 0.98x (0.83-1.16): the default study's on Intel AMX
    c = study(logs)
    assert c.answer == ttc.NOT_RESOLVED and c.paired_log_ratios() == pytest.approx(dict(enumerate(logs)))
    n = c.seeds_needed()
    assert 15 <= n <= 30, n  # the interval must narrow to the band's lower side: 20 seeds here
    mean, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))

    def alike(k):
        """``k`` log ratios with the observed mean and standard deviation."""
        z = np.linspace(-1.0, 1.0, k)
        return list(mean + sd * (z - z.mean()) / z.std(ddof=1))

    assert study(alike(int(n))).answer == ttc.NO_EFFECT
    assert study(alike(int(n) - 1)).answer == ttc.NOT_RESOLVED
    assert c.outcome.endswith(f"the paired seeds' spread says {n:.0f} seeds per arm would settle it)")
    # A steady gain needs few; a bootstrap interval (unpaired seeds) gives no number.
    assert study([0.30, 0.32, 0.31]).seeds_needed() == 2
    unpaired = dataclasses.replace(c, interval=ttc.BOOTSTRAP, paired=False)
    assert math.isnan(unpaired.seeds_needed()) and unpaired.outcome.endswith("more seeds would settle it)")
    # A seed whose time is not finite on one side gives no number (nor an error).
    lost = dataclasses.replace(c, arm=(*c.arm[:2], dataclasses.replace(c.arm[2], seconds=math.inf)))
    assert math.isnan(lost.seeds_needed()) and lost.outcome.endswith("more seeds would settle it)")


def test_the_t_interval_on_paired_log_ratios_keeps_its_level_at_three_seeds():
    # Many synthetic studies of 3 paired seeds whose true ratio is 1 (per-seed log ratios
    # drawn with a 20 % spread): the 95 % interval misses 1 in about 5 % of them. A
    # bootstrap over 3 seeds (10 distinct resamples) misses it far more often.
    import numpy as np

    rng = np.random.default_rng(7)
    studies = 4000
    misses = 0
    for _ in range(studies):
        _, low, high = ttc.t_log_ratios(np.exp(rng.normal(0.0, 0.2, 3)), 0.95)
        misses += not (low <= 1.0 <= high)
    assert misses / studies == pytest.approx(0.05, abs=0.012)


def test_the_crossing_is_read_between_validation_readings_not_at_the_epochs_end():
    # Issue 45: with one reading per epoch a seed that met the target by 0.2 % counted a
    # whole epoch less than its pair that missed it by 0.05 %. With readings within the
    # epoch (val_curve) and the crossing interpolated, the two are a fraction apart.
    def run(mid: float, end: float):
        meta = _meta("off", 0, [0.50, end], 0.1)  # two epochs of 10 steps, initial 1.2
        meta["val_curve"] = [
            {"step": 5, "val_loss": 0.80},
            {"step": 10, "val_loss": 0.50},
            {"step": 15, "val_loss": mid},
            {"step": 20, "val_loss": end},
        ]
        return dataclasses.replace(ttq.runs_of([meta])[0], floor=0.0)  # compare() sets the floors

    target = 0.2998
    just = run(0.40, 0.2997).steps_to(target)  # meets it by a hair at the epoch's end
    miss = run(0.40, 0.3001).steps_to(target)  # misses it by a hair: never, within two epochs
    assert just == pytest.approx(15 + 5 * (0.40 - target) / (0.40 - 0.2997))
    assert miss is None
    early = run(0.25, 0.20).steps_to(target)  # crossed between step 10 (0.50) and 15 (0.25)
    assert early == pytest.approx(10 + 5 * (0.50 - target) / (0.50 - 0.25))
    assert run(0.25, 0.20).reach(target).epochs == 2 and run(0.25, 0.20).reach(target).reached
    # a record without readings within epochs (before val_checks) interpolates between its epochs' ends
    old = dataclasses.replace(ttq.runs_of([_meta("off", 0, [0.50, 0.20], 0.1)])[0], floor=0.0)
    assert old.steps_to(target) == pytest.approx(10 + 10 * (0.50 - target) / (0.50 - 0.20))


def test_the_spread_of_the_steps_to_the_target_is_split_between_the_seed_and_the_arms():
    """Issue 45, item 2: the arm and its reference share each seed's initial weights and
    batch order; when their steps to the target move together seed by seed, the seed is
    nearly all of one arm's spread and the paired ratio sees through it (a table says so)."""

    def reach(seed, steps, reached=True):
        return ttc.Reach(seed, reached, 2, steps, 0.1, steps * 0.1, 1.0)

    steps = {0: 400.0, 1: 620.0, 2: 510.0}  # the seeds' luck: 400 to 620 steps
    arm = tuple(reach(s, n * 1.01) for s, n in steps.items())  # XLA: 1 % more, every seed
    ref = tuple(reach(s, n) for s, n in steps.items())
    c = ttc.Comparison(ratio=0.99, paired=True, arm=arm, reference=ref)
    seed_sd, paired_sd, share = c.steps_split()
    assert seed_sd == pytest.approx(0.216, abs=0.005) and paired_sd == pytest.approx(0.0, abs=1e-9)
    assert share == 1.0
    # The arm's own numerics scatter its steps as much as a new seed would: no share.
    scattered = tuple(reach(s, n) for s, n in zip(steps, (620.0, 400.0, 510.0), strict=True))
    assert dataclasses.replace(c, arm=scattered).steps_split()[2] < 0.2
    # A seed that never reached the target is left out; with one seed left, or unpaired, no split.
    missed = (reach(0, 400.0), reach(1, 1000.0, reached=False), reach(2, 520.0))
    from ptycho.study.stats import variance_split

    both = ({0: math.log(400), 2: math.log(520)}, {0: math.log(400), 2: math.log(510)})
    assert dataclasses.replace(c, arm=missed).steps_split() == pytest.approx(variance_split(*both))
    assert math.isnan(dataclasses.replace(c, arm=arm[:1]).steps_split()[2])
    assert math.isnan(dataclasses.replace(c, paired=False).steps_split()[2])
    # The speed section's table reads the record back from the report's JSON.
    from ptycho.study.report.items.speedup import steps_source_table
    from ptycho.study.report.record import StudyReport
    from ptycho.study.tables import fmt

    def speed(found):
        return StudyReport.of({"items": {"speedup": {"evidence": {"time_to_quality": found}}}})

    record = dataclasses.replace(c, title="PINN jit - off").to_json()
    title, header, rows = steps_source_table(speed({"pinn-jit": record}))
    assert title.startswith("Where the spread of the steps") and rows == [
        ["PINN jit - off", "log steps to the target", "3", fmt(seed_sd), fmt(paired_sd), "100%", "0%"]
    ]
    unpaired = dataclasses.replace(c, paired=False).to_json()
    assert steps_source_table(speed({"x": unpaired})) is None
