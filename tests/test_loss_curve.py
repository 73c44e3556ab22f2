"""Reading a validation curve through its readings' noise: the crossing of a target and the
loss a training ended at, as time to quality and convergence take them
(ptycho.study.loss_curve)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptycho.study import time_to_quality as ttq
from ptycho.study.checklist.convergence import convergence
from ptycho.study.loss_curve import read_through
from ptycho.study.training_record import TrainingRecord

FLOOR = 0.01
STEPS = [61 * k for k in range(1, 81)]  # the default's 80 readings: 4 an epoch, 20 epochs of 245 steps


def _law(step: float, b: float = 0.2) -> float:
    """A validation loss whose excess over FLOOR falls as steps^-b (the default's b near its target)."""
    return FLOOR + 0.1 * step**-b


def test_a_curve_straight_in_log_step_is_read_as_it_is_and_the_first_reading_is_kept():
    points = [(0.0, 1.0)] + [(float(s), 0.5 - 0.03 * math.log(s)) for s in STEPS]
    np.testing.assert_allclose(read_through(points), points, rtol=1e-12)
    assert read_through(points)[0] == (0.0, 1.0)


def test_a_power_law_is_read_to_a_tenth_of_a_percent_of_its_excess_at_every_reading_even_the_last():
    points = [(float(s), _law(s)) for s in STEPS]
    for (s, read), (_, true) in zip(read_through(points), points, strict=True):
        assert abs(read - true) <= 1e-3 * (true - FLOOR), s


def test_a_reading_with_fewer_than_three_in_its_window_is_kept_as_read():
    points = [(0.0, 2.0), (10.0, 1.0), (20.0, 0.9), (40.0, 0.3)]  # each step twice the last: alone in 1.25
    assert read_through(points) == points


def test_one_readings_dip_at_the_end_moves_the_read_end_a_fraction_of_it():
    points = [(float(s), _law(s)) for s in STEPS]
    dipped = points[:-1] + [(points[-1][0], FLOOR + 0.95 * (points[-1][1] - FLOOR))]  # the last 5 % low
    moved = (read_through(dipped)[-1][1] - FLOOR) / (points[-1][1] - FLOOR) - 1
    assert -0.02 < moved < 0  # within 2 %, not 5 %: the readings before it hold the curve


def _noisy(rng: np.random.Generator, sd: float = 0.03) -> list[tuple[float, float]]:
    """The power law with the scatter measured on the default (sd 3 % of the excess, no memory)."""
    return [(0.0, 0.2)] + [(float(s), FLOOR + (_law(s) - FLOOR) * math.exp(sd * rng.standard_normal())) for s in STEPS]


def _first_crossing(points: list[tuple[float, float]], level: float) -> float:
    for (s0, v0), (s1, v1) in zip(points, points[1:], strict=False):
        if v1 <= level:
            return s0 + (v0 - level) / (v0 - v1) * (s1 - s0)
    return math.nan


def test_the_crossing_read_on_the_curve_scatters_less_than_the_first_reading_under_the_target():
    """The reason for reading through the noise: where the curve is flat (b = 0.2), the
    steps at which one of 300 noisy trainings of one curve first has a reading under the
    target scatter by their 3 % dips; the read curve's crossing scatters at most half as much
    and lies around the true one."""
    rng = np.random.default_rng(7)
    level = _law(3000)
    raw, read = [], []
    for _ in range(300):
        points = _noisy(rng)
        raw.append(math.log(_first_crossing(points, level) / 3000))
        read.append(math.log(_first_crossing(read_through(points), level) / 3000))
    assert np.std(read) < 0.5 * np.std(raw)
    assert abs(np.mean(read)) < 0.03 < abs(np.mean(raw))  # the first dip comes early: raw is biased too


def _meta(mode: str, seed: int, points: list[tuple[float, float]], step_s: float = 0.05) -> dict:
    """A training record with a within-epoch curve (4 readings an epoch) and its epochs' ends."""
    ends = [(s, v) for s, v in points[1:] if s % 245 == 0 or s == points[-1][0]]
    return {
        "model": {"kind": "pinn"},
        "loss_bounds": {"floor": FLOOR},
        "train": {"xla": mode, "seed": seed, "precision": "float32", "batch_size": 8, "epochs": 20},
        "n_train": 1960,
        "initial_val_loss": points[0][1],
        "history": [{"epoch": i + 1, "train_loss": v, "val_loss": v} for i, (_, v) in enumerate(ends)],
        "val_curve": [{"step": int(s), "val_loss": v} for s, v in points[1:]],
        "timing": {"compile_s": 1.0, "step_times_s": [step_s] * 100, "step_median_s": step_s},
    }


def test_time_to_quality_reads_the_target_and_the_crossing_on_the_read_curve():
    rng = np.random.default_rng(3)
    off, jit = ([_meta(mode, s, _noisy(rng)) for s in range(3)] for mode in ("off", "jit"))
    runs = ttq.runs_of(off)
    goal = ttq.target(runs, 0.05)
    finals = [
        read_through([(0.0, m["initial_val_loss"])] + [(p["step"], p["val_loss"]) for p in m["val_curve"]])[-1][1]
        for m in off
    ]
    drop = np.mean([m["initial_val_loss"] for m in off]) - np.mean(finals)
    assert goal == pytest.approx(np.mean(finals) - FLOOR + 0.05 * drop)
    assert runs[0].final_loss == pytest.approx(finals[0]) != off[0]["val_curve"][-1]["val_loss"]
    assert runs[0].steps_to(goal) == pytest.approx(_first_crossing(list(runs[0].read), goal + FLOOR))
    c = ttq.compare(ttq.runs_of(jit), runs, 0.05)
    assert c.per_step == pytest.approx(1.0) and 0.8 < c.steps_ratio < 1.25  # one curve, its noise alone


def test_convergence_compares_the_ends_read_through_the_last_readings():
    """Two arms on one curve but for the last reading, 5 % lower in one: as read, the ends
    differ by under 2 %, so the arm is not judged better by where its last step left it."""
    seeds = range(3)
    base = [(0.0, 0.2)] + [(float(s), _law(s)) for s in STEPS]
    dipped = base[:-1] + [(base[-1][0], FLOOR + 0.95 * (base[-1][1] - FLOOR))]
    metas = {f"pinn-off-s{s}": _meta("off", s, base) for s in seeds} | {
        f"pinn-jit-s{s}": _meta("jit", s, dipped) for s in seeds
    }
    records = {name: TrainingRecord.of(m) for name, m in metas.items()}
    args = ({n: r.history for n, r in records.items()}, 0.05, {n: r.initial_val_loss for n, r in records.items()})
    floors = {n: r.floor for n, r in records.items()}
    raw = convergence(*args, floors=floors)
    read = convergence(*args, floors=floors, final={n: r.final_val_loss for n, r in records.items()})
    diff = {name: res.evidence["comparisons"]["pinn-jit"]["difference"] for name, res in (("raw", raw), ("read", read))}
    assert diff["raw"] == pytest.approx(-0.05, abs=1e-9)
    assert -0.02 < diff["read"] < 0


def test_a_record_without_a_curve_ends_at_its_last_epochs_reading():
    meta = _meta("off", 0, [(0.0, 0.2)] + [(float(s), _law(s)) for s in STEPS])
    meta["val_curve"] = []
    rec = TrainingRecord.of(meta)
    assert rec.final_val_loss == rec.history[-1].val_loss
    assert TrainingRecord.of(dict(meta, history=[])).final_val_loss is None


def test_the_line_through_points_is_exact_and_has_no_slope_without_spread_in_x():
    from ptycho.study.stats import line

    assert line([1.0, 2.0, 3.0], [5.0, 7.0, 9.0]) == (3.0, 2.0)
    at, slope = line([2.0, 2.0], [1.0, 3.0])
    assert at == 2.0 and math.isnan(slope)
