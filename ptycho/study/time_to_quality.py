"""Time to quality: what an arm's answer costs, not what one of its steps costs.

A mode that is faster per step but needs more steps to reach the same quality is slower
where users pay. Following MLPerf Training's rule (docs/study.md, "Why speed is judged
as time to quality"; the target: docs/report.md), each training is timed to a quality target on held-out data:

* **quality**: a training's validation loss above its floor, the loss a perfect
  reconstruction gets on the same validation split through the same physics
  (``loss_bounds.floor`` of ``model.json``; the convergence item's measure). The Poisson
  likelihood sits at an offset of its own for each split, and each seed draws its own
  (seeds differ by 0.19 at 1e4 photons, sixteen times the margin's share of the drop):
  a loss value compared across seeds would measure the split, not the training;
* **target**: the reference arm's (``off`` at the same precision, same model) mean final
  excess over the floor, widened by the convergence margin taken as a fraction of the
  reference's mean loss DROP (initial minus final). Neither depends on an offset of the
  loss, so the target means the same for the MAE and the Poisson likelihood;
* **steps to the target**: where the validation curve (read ``train.val_checks`` times
  per epoch, ``model.json`` ``val_curve``; once per epoch in older records, and before
  the first step) first crosses it, interpolated linearly between the two readings
  around the crossing: a fraction of an epoch, not the whole epoch in which it fell
  (which made one seed's 0.2 % flip a whole epoch and the whole ratio). The curve is read
  through its readings' noise (:mod:`ptycho.study.loss_curve`), the target's final
  excesses too: a single reading's 3 % dip where the curve is flat is 15 % in steps;
* **time to the target**: those steps times the training's own median step time, which
  was measured in the pipeline's own schedule (the trainings that ran beside it);
  compilation (the first step) is reported apart and added in a second figure;
* **a seed that never reaches the target** is counted as its whole training (a lower
  bound of its true time, so the slowest of its arm) and named; two such seeds make the
  arm's comparison INCONCLUSIVE (MLPerf: one non-converging run is the slowest, two
  invalidate the result); when no seed of an arm reached it (one seed), the ratio is an
  upper bound: it can show the arm slower, never faster. A FAILED training (diverged,
  or collapsed) is such a seed: counted as its whole planned training (``train.epochs``)
  at its own median step, or its arm's when it timed none, and named as failed; it
  never sets the target;
* **the ratio** (above 1 = the arm reaches the quality sooner): with paired seeds (both
  arms ran the same two or more seeds, so their initial weights and batch order match),
  the geometric mean of the per-seed ratios of the reference's time to the arm's, with a
  t interval on their logarithms (valid at 2-5 seeds, where a bootstrap over seeds has a
  handful of distinct resamples); otherwise the reference's mean time over the arm's,
  with a 95 % bootstrap interval over seeds and each seed's step times, the mean
  dropping the fastest and the slowest run from 5 seeds on (MLPerf's trimming). With one
  seed per arm that interval holds the step times' noise only;
* **the answer**: one of four, by where the interval lies
  (:attr:`ptycho.study.ttq_comparison.Comparison.answer`, the comparison's record):
  faster, SLOWER, no measurable effect (inside
  :data:`ptycho.study.ttq_comparison.NO_EFFECT_BAND`) or not resolved.

Pure NumPy; no TensorFlow. :func:`runs_of` reads the trainings' ``model.json`` records.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ptycho.study.loss_curve import read_through
from ptycho.study.scaling import slope
from ptycho.study.training_record import TrainingRecord
from ptycho.study.ttq_comparison import BOOTSTRAP, T_LOG_RATIOS, Comparison, Reach, Sides, t_log_ratios

#: Below this many runs per arm the mean is not trimmed.
TRIM_FROM = 5
#: A comparison with this many runs that never reached the target in one arm is INCONCLUSIVE.
MISSES_INCONCLUSIVE = 2
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Run:
    """One training (one seed of an arm) as time to quality needs it."""

    seed: int
    val_loss: tuple[float, ...]  #: per epoch, in order
    initial_val_loss: float  #: before the first step
    steps_per_epoch: int
    step_times_s: tuple[float, ...]  #: every timed step (the first, compiling one, excluded)
    compile_s: float
    #: the loss of a perfect reconstruction on its validation split, None if not recorded
    #: (:func:`compare` measures all its runs above theirs, or all in raw loss)
    floor: float | None = None
    #: a FAILED training (diverged or collapsed): never reaches the target
    failed: bool = False
    #: the epochs it was to train (``train.epochs``): a failed one's whole training
    planned_epochs: int = 0
    #: (global step, validation loss) readings within epochs too (``val_curve``), in order;
    #: empty: the epochs' ends alone
    curve: tuple[tuple[int, float], ...] = ()

    @property
    def step_s(self) -> float:
        return float(np.median(self.step_times_s)) if self.step_times_s else math.nan

    def points(self) -> list[tuple[float, float]]:
        """The validation curve as (step, loss): before the first step, then every reading."""
        read = self.curve or tuple((e * self.steps_per_epoch, v) for e, v in enumerate(self.val_loss, start=1))
        start = [(0.0, self.initial_val_loss)] if math.isfinite(self.initial_val_loss) else []
        return start + [(float(t), float(v)) for t, v in read if math.isfinite(v)]

    @functools.cached_property
    def read(self) -> tuple[tuple[float, float], ...]:
        """The validation curve read through its readings' noise
        (:func:`ptycho.study.loss_curve.read_through`): what the target and the crossing
        are read on, read once per run. An older record's epochs' ends alone are kept as
        read: a few readings an epoch apart would average the curve's bend, not its noise."""
        return tuple(read_through(self.points()) if self.curve else self.points())

    @property
    def final_loss(self) -> float:
        """The validation loss the training ended at, read through its last readings."""
        return self.read[-1][1] if self.read else math.nan

    def steps_to(self, target: float) -> float | None:
        """The step at which the validation curve, read through its readings' noise
        (:attr:`read`), first comes to ``target`` above the floor (as :func:`compare`
        settles it for the runs it compares), interpolated linearly between the readings
        around the crossing; at least one step."""
        previous = None
        for step, loss in self.read:
            excess = loss - self.floor
            if excess <= target:
                if previous is None:  # at or below it before the first step
                    return max(step, 1.0)
                s0, e0 = previous  # e0 > target >= excess: the crossing lies between them
                return max(s0 + (e0 - target) / (e0 - excess) * (step - s0), 1.0)
            previous = (step, excess)
        return None

    def excesses(self, low: float, high: float = math.inf) -> dict[float, float]:
        """Step -> the validation loss's excess over the floor, for the readings from step
        ``low`` to ``high`` (after the first step) that lie above the floor: what a log of
        the excess can be taken of."""
        return {t: v - self.floor for t, v in self.points() if low <= t <= high and t > 0 and v > self.floor}

    def exponent_near(self, target: float) -> float:
        """How steeply the validation loss falls near ``target``: ``b`` in excess ~ steps^-b,
        a least-squares line through log excess against log step over the readings from half
        the steps to the target to the training's end. Near a flat part of the curve a small
        difference in loss is a large one in steps (1 % less loss takes 1/b % more steps),
        which is why XLA's rounding, moving each pair's loss by a percent or two, moves its
        steps to the target by several (docs/report.md, the speedup item). NaN when it never
        reaches the target or fewer than three readings there lie above the floor."""
        steps = None if self.failed else self.steps_to(target)
        if steps is None:
            return math.nan
        near = self.excesses(steps / 2)
        if len(near) < 3:
            return math.nan
        return -slope(list(near), list(near.values()))

    def reach(self, target: float) -> Reach:
        """Steps and seconds to ``target`` (the whole training when it is never reached, the
        whole planned training for a failed one)."""
        steps = None if self.failed else self.steps_to(target)
        reached = steps is not None
        if reached:
            epochs = max(1, math.ceil(steps / self.steps_per_epoch - 1e-9))
        else:
            epochs = max(len(self.val_loss), self.planned_epochs) if self.failed else len(self.val_loss)
            steps = float(epochs * self.steps_per_epoch)
        return Reach(self.seed, reached, epochs, steps, self.step_s, steps * self.step_s, self.compile_s)


def common_floors(floors: Mapping[K, float | None]) -> tuple[dict[K, float], list[K]]:
    """The floors that trainings compared with each other are measured above, and those
    that record none. Only all or none: a training measured above its floor against one
    in raw loss would compare the loss's offset (about -2.2 for the Poisson likelihood),
    not the trainings. So when some record none (a results folder whose older trainings
    predate the floor), every one is measured in raw loss (floor 0, the floor of an MAE
    without noise), and the second value names the ones without (:func:`ptycho.study.ttq_comparison.raw_loss_words`).
    A floor that is not finite (no validation split) is none."""
    missing = [k for k, f in floors.items() if f is None or not math.isfinite(f)]
    if not missing:
        return {k: float(f) for k, f in floors.items()}, []
    mixed = len(missing) < len(floors)  # none recorded at all: an older folder, consistent as it is
    return dict.fromkeys(floors, 0.0), missing if mixed else []


def runs_of(records: Sequence[TrainingRecord | Mapping]) -> list[Run]:
    """:class:`Run` records of trainings (their ``model.json``, or
    :class:`~ptycho.study.training_record.TrainingRecord`). A FAILED one is kept (a seed
    that never reached the target, :func:`compare`); a finished one without a curve or
    step times is left out: it has no time to quality."""
    out = []
    for r in map(TrainingRecord.of, records):
        if not r.failed and (not r.history or not r.step_times_s):
            continue
        initial = r.initial_val_loss
        out.append(
            Run(
                seed=r.seed,
                val_loss=tuple(e.val_loss for e in r.history),
                initial_val_loss=initial if initial is not None else r.history[0].train_loss if r.history else math.nan,
                steps_per_epoch=r.steps_per_epoch,
                step_times_s=r.step_times_s,
                compile_s=r.compile_s or 0.0,
                floor=r.floor,
                failed=r.failed,
                planned_epochs=r.planned_epochs,
                curve=r.val_curve,
            )
        )
    return out


def target(reference: Sequence[Run], margin: float) -> float:
    """The quality target, an excess over the floor: the reference runs' mean final excess
    (each read through its last readings, :attr:`Run.final_loss`) plus ``margin`` times
    their mean loss drop (initial minus final); valid for any loss."""
    finals = np.array([r.final_loss - r.floor for r in reference], dtype=np.float64)
    drops = np.array([r.initial_val_loss - r.final_loss for r in reference], dtype=np.float64)
    return float(finals.mean() + margin * max(float(drops.mean()), 0.0))


def _centre(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean over runs; with :data:`TRIM_FROM` or more, without the fastest and the slowest."""
    if values.shape[axis] >= TRIM_FROM:
        values = np.sort(values, axis=axis)
        values = np.take(values, range(1, values.shape[axis] - 1), axis=axis)
    return values.mean(axis=axis)


def _boot_medians(run: Run, resamples: int, rng: np.random.Generator) -> np.ndarray:
    times = np.asarray(run.step_times_s, dtype=np.float64)
    if times.size < 2:
        return np.full(resamples, run.step_s)
    return np.median(rng.choice(times, (resamples, times.size)), axis=1)


def compare(
    arm: Sequence[Run],
    reference: Sequence[Run],
    margin: float,
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Comparison:
    """Time to quality of ``arm`` against ``reference`` (both lists of seeds' :class:`Run`):
    the :class:`Comparison` (its ratio, above 1 = sooner, as the module says; its
    companions per step, in steps and with compilation made the same way); NaN when the
    reference has no finished run or the arm none timed.
    Losses are measured above every run's floor, or all in raw loss when some record none
    (:func:`common_floors`; ``no_floor`` names those seeds). A failed run is missed (its
    whole planned training, ``failed`` names it), timed at its arm's steps if it timed
    none, and has no say in the target or the floors.
    """
    sides = {"arm": arm, "reference": reference}
    timed = {side: tuple(t for r in runs for t in r.step_times_s) for side, runs in sides.items()}
    if not timed["arm"] or not any(not r.failed for r in reference):
        return Comparison(math.nan, margin=float(margin), level=level)
    longest = max(max(len(r.val_loss), r.planned_epochs) for runs in sides.values() for r in runs)
    finished = {(side, r.seed): r.floor for side, runs in sides.items() for r in runs if not r.failed}
    floors, unfloored = common_floors(finished)
    arm, reference = (
        sorted(
            (
                dataclasses.replace(
                    r,
                    floor=floors.get((side, r.seed), 0.0),
                    step_times_s=r.step_times_s or timed[side],
                    planned_epochs=r.planned_epochs or longest,
                )
                for r in sides[side]
            ),
            key=lambda r: r.seed,
        )
        for side in sides
    )
    goal = target([r for r in reference if not r.failed], margin)
    reach_a = tuple(r.reach(goal) for r in arm)
    reach_r = tuple(r.reach(goal) for r in reference)

    def col(reaches, key):
        return np.array([getattr(x, key) for x in reaches], dtype=np.float64)

    paired = [r.seed for r in arm] == [r.seed for r in reference]
    by_seed = paired and len(arm) >= 2

    def ratio_of(key):
        """The reference's over the arm's: per seed, their geometric mean (paired seeds, as
        the headline ratio); else the ratio of the (trimmed) means."""
        if by_seed:
            return float(np.exp(np.mean(np.log(col(reach_r, key) / col(reach_a, key)))))
        return float(_centre(col(reach_r, key)) / _centre(col(reach_a, key)))

    if by_seed:
        ratio, low, high = t_log_ratios(col(reach_r, "seconds") / col(reach_a, "seconds"), level)
        interval = T_LOG_RATIOS
    else:
        ratio, (low, high) = (
            ratio_of("seconds"),
            _bootstrap(arm, reach_a, reference, reach_r, paired, level, resamples, seed),
        )
        interval = BOOTSTRAP
    missed = Sides(*(tuple(x.seed for x in reaches if not x.reached) for reaches in (reach_a, reach_r)))
    exponents = [b for r in (*arm, *reference) if math.isfinite(b := r.exponent_near(goal))]
    return Comparison(
        ratio=ratio,
        low=float(low),
        high=float(high),
        target=goal,
        margin=float(margin),
        level=level,
        resamples=resamples if interval == BOOTSTRAP else 0,
        ratio_with_compile=ratio_of("seconds_with_compile"),
        per_step=ratio_of("step_s"),
        steps_ratio=ratio_of("steps"),
        paired=paired,
        interval=interval,
        arm=reach_a,
        reference=reach_r,
        missed=missed,
        failed=Sides(*(tuple(r.seed for r in runs if r.failed) for runs in (arm, reference))),
        no_floor=Sides(*(tuple(sorted(s for k, s in unfloored if k == side)) for side in sides)),
        inconclusive=max(len(missed.arm), len(missed.reference)) >= MISSES_INCONCLUSIVE,
        upper_bound=len(missed.arm) == len(arm),
        exponent=float(np.median(exponents)) if exponents else math.nan,
        loss_spread=_loss_spread(arm, reference, goal) if by_seed else math.nan,
    )


def _loss_spread(arm: Sequence[Run], reference: Sequence[Run], goal: float) -> float:
    """How far XLA's rounding moves a pair's loss near the target: per paired seed, the mean
    over the readings from half to twice the reference's steps to ``goal`` of the log of
    the arm's excess over the reference's at the same reading, and their standard deviation
    over the pairs. Near the target, not at the end: where a training crosses early, its
    pair's final losses have drifted further apart than they were at the crossing. NaN
    below two pairs with such readings (a failed run, or a reference that never reached
    the target, has none)."""
    by_seed = {r.seed: r for r in reference if not r.failed}
    logs = []
    for a in arm:
        r = by_seed.get(a.seed)
        steps = None if a.failed or r is None else r.steps_to(goal)
        if steps is None:
            continue
        mine, theirs = a.excesses(steps / 2, 2 * steps), r.excesses(steps / 2, 2 * steps)
        common = sorted(set(mine) & set(theirs))
        if common:
            logs.append(float(np.mean([math.log(mine[t] / theirs[t]) for t in common])))
    return float(np.std(logs, ddof=1)) if len(logs) >= 2 else math.nan


def _bootstrap(
    arm, reach_a, reference, reach_r, paired: bool, level: float, resamples: int, seed: int
) -> tuple[float, float]:
    """The ratio's percentile bootstrap interval: seeds resampled (jointly when ``paired``),
    each picked seed's median step time from a resample of its own steps. With one seed
    per arm it holds the step times' noise only."""
    rng = np.random.default_rng(seed)
    steps_a = np.array([x.steps for x in reach_a], dtype=np.float64)
    steps_r = np.array([x.steps for x in reach_r], dtype=np.float64)
    med_a = np.stack([_boot_medians(r, resamples, rng) for r in arm], axis=1)  # (B, seeds)
    med_r = np.stack([_boot_medians(r, resamples, rng) for r in reference], axis=1)
    idx_a = rng.integers(0, len(arm), (resamples, len(arm)))
    idx_r = idx_a if paired else rng.integers(0, len(reference), (resamples, len(reference)))
    rows = np.arange(resamples)[:, None]
    boot_a = _centre(steps_a[idx_a] * med_a[rows, idx_a])
    boot_r = _centre(steps_r[idx_r] * med_r[rows, idx_r])
    low, high = np.percentile(boot_r / boot_a, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)
