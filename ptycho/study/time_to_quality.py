"""Time to quality: what an arm's answer costs, not what one of its steps costs.

A mode that is faster per step but needs more steps to reach the same quality is slower
where users pay. Following MLPerf Training's rule (docs/architecture.md, "Time to
quality"), each training is timed to a quality target on held-out data:

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
* **steps to the target**: the first epoch whose excess is at or below it, in train
  steps (the curves are evaluated once per epoch, so this is the epoch's end);
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
* **the ratio**: the reference's mean time over the arm's (above 1 = the arm reaches the
  quality sooner), with a 95 % bootstrap interval over seeds (paired by seed when both
  arms ran the same seeds, as their initial weights and batch order then match) and
  over each seed's step times. With 5 or more seeds the mean drops the fastest and the
  slowest run (MLPerf's trimming).

Pure NumPy; no TensorFlow. :func:`runs_of` reads the trainings' ``model.json`` records.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

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

    @property
    def step_s(self) -> float:
        return float(np.median(self.step_times_s)) if self.step_times_s else math.nan

    def epochs_to(self, target: float) -> int | None:
        """The first epoch (1-based) whose validation loss is at most ``target`` above the
        floor (as :func:`compare` settles it for the runs it compares)."""
        for epoch, loss in enumerate(self.val_loss, start=1):
            if math.isfinite(loss) and loss - self.floor <= target:
                return epoch
        return None

    def reach(self, target: float) -> dict:
        """Steps and seconds to ``target`` (the whole training when it is never reached, the
        whole planned training for a failed one)."""
        epochs = None if self.failed else self.epochs_to(target)
        reached = epochs is not None
        whole = max(len(self.val_loss), self.planned_epochs) if self.failed else len(self.val_loss)
        epochs = epochs if reached else whole
        steps = epochs * self.steps_per_epoch
        seconds = steps * self.step_s
        return {
            "seed": self.seed,
            "reached": reached,
            "epochs": epochs,
            "steps": steps,
            "step_s": self.step_s,
            "seconds": seconds,
            "seconds_with_compile": seconds + self.compile_s,
            "compile_s": self.compile_s,
        }


def loss_floor(meta: Mapping) -> float | None:
    """A training record's loss floor (``loss_bounds.floor``: a perfect reconstruction's
    loss on its validation split), None when it records none (trained before floors were
    recorded, or without a validation split)."""
    floor = (meta.get("loss_bounds") or {}).get("floor")
    return float(floor) if floor is not None else None


def common_floors(floors: Mapping[K, float | None]) -> tuple[dict[K, float], list[K]]:
    """The floors that trainings compared with each other are measured above, and those
    that record none. Only all or none: a training measured above its floor against one
    in raw loss would compare the loss's offset (about -2.2 for the Poisson likelihood),
    not the trainings. So when some record none (a results folder whose older trainings
    predate the floor), every one is measured in raw loss (floor 0, the floor of an MAE
    without noise), and the second value names the ones without (:func:`raw_loss_words`).
    A floor that is not finite (no validation split) is none."""
    missing = [k for k, f in floors.items() if f is None or not math.isfinite(f)]
    if not missing:
        return {k: float(f) for k, f in floors.items()}, []
    mixed = len(missing) < len(floors)  # none recorded at all: an older folder, consistent as it is
    return dict.fromkeys(floors, 0.0), missing if mixed else []


def raw_loss_words(verb: str, which: str) -> str:
    """The clause a verdict adds when :func:`common_floors` fell back to raw loss: ``verb``
    ("measured", "compared"), ``which`` the trainings without a floor."""
    return (
        f"; {verb} in raw loss, since {which} record no loss floor (trained before it was recorded: "
        "re-run those trainings to measure every one above its floor)"
    )


def runs_of(metas: Sequence[Mapping]) -> list[Run]:
    """:class:`Run` records of trainings' ``model.json``. A FAILED one is kept (a seed that
    never reached the target, :func:`compare`); a finished one without a curve or step
    times is left out: it has no time to quality."""
    out = []
    for m in metas:
        timing = m.get("timing") or {}
        history = m.get("history") or []
        failed = m.get("status") == "FAILED"
        if not failed and (not history or not timing.get("step_times_s")):
            continue
        train = m["train"]
        steps = max(1, int(m["n_train"]) // int(train["batch_size"]))  # as training splits its epochs
        initial = m.get("initial_val_loss")
        out.append(
            Run(
                seed=int(train["seed"]),
                val_loss=tuple(float(h["val_loss"]) for h in history),
                initial_val_loss=float(
                    initial if initial is not None else history[0]["train_loss"] if history else "nan"
                ),
                steps_per_epoch=steps,
                step_times_s=tuple(float(t) for t in timing.get("step_times_s") or ()),
                compile_s=float(timing.get("compile_s") or 0.0),
                floor=loss_floor(m),
                failed=failed,
                planned_epochs=int(train.get("epochs") or 0),
            )
        )
    return out


def target(reference: Sequence[Run], margin: float) -> float:
    """The quality target, an excess over the floor: the reference runs' mean final excess
    plus ``margin`` times their mean loss drop (initial minus final); valid for any loss."""
    finals = np.array([r.val_loss[-1] - r.floor for r in reference], dtype=np.float64)
    drops = np.array([r.initial_val_loss - r.val_loss[-1] for r in reference], dtype=np.float64)
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
) -> dict:
    """Time to quality of ``arm`` against ``reference`` (both lists of seeds' :class:`Run`).

    Returns ``{"target", "ratio", "low", "high", "ratio_with_compile", "per_step",
    "steps_ratio", "paired", "arm": [...reach per seed], "reference": [...], "missed":
    {"arm": [seeds], "reference": [seeds]}, "failed": {...}, "no_floor": {...},
    "inconclusive": bool}``; the ratio is the reference's mean seconds over the arm's
    (above 1 = sooner). NaN when the reference has no finished run or the arm none timed.
    Losses are measured above every run's floor, or all in raw loss when some record none
    (:func:`common_floors`; ``no_floor`` names those seeds). A failed run is missed (its
    whole planned training, ``failed`` names it), timed at its arm's steps if it timed
    none, and has no say in the target or the floors.
    """
    nan = float("nan")
    sides = {"arm": arm, "reference": reference}
    timed = {side: tuple(t for r in runs for t in r.step_times_s) for side, runs in sides.items()}
    if not timed["arm"] or not any(not r.failed for r in reference):
        return {"ratio": nan, "low": nan, "high": nan, "inconclusive": True, "arm": [], "reference": [], "missed": {}}
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
    reach_a = [r.reach(goal) for r in arm]
    reach_r = [r.reach(goal) for r in reference]

    def col(reaches, key):
        return np.array([x[key] for x in reaches], dtype=np.float64)

    secs_a, secs_r = col(reach_a, "seconds"), col(reach_r, "seconds")
    ratio = float(_centre(secs_r) / _centre(secs_a))
    with_compile = float(_centre(col(reach_r, "seconds_with_compile")) / _centre(col(reach_a, "seconds_with_compile")))
    per_step = float(_centre(col(reach_r, "step_s")) / _centre(col(reach_a, "step_s")))
    steps_ratio = float(_centre(col(reach_r, "steps")) / _centre(col(reach_a, "steps")))

    # Bootstrap: seeds resampled (jointly when paired), each picked seed's median step
    # time from a resample of its own steps.
    rng = np.random.default_rng(seed)
    paired = [r.seed for r in arm] == [r.seed for r in reference]
    steps_a, steps_r = col(reach_a, "steps"), col(reach_r, "steps")
    med_a = np.stack([_boot_medians(r, resamples, rng) for r in arm], axis=1)  # (B, seeds)
    med_r = np.stack([_boot_medians(r, resamples, rng) for r in reference], axis=1)
    idx_a = rng.integers(0, len(arm), (resamples, len(arm)))
    idx_r = idx_a if paired else rng.integers(0, len(reference), (resamples, len(reference)))
    rows = np.arange(resamples)[:, None]
    boot_a = _centre(steps_a[idx_a] * med_a[rows, idx_a])
    boot_r = _centre(steps_r[idx_r] * med_r[rows, idx_r])
    low, high = np.percentile(boot_r / boot_a, [50 * (1 - level), 50 * (1 + level)])

    missed = {
        "arm": [x["seed"] for x in reach_a if not x["reached"]],
        "reference": [x["seed"] for x in reach_r if not x["reached"]],
    }
    return {
        "target": goal,
        "margin": float(margin),
        "ratio": ratio,
        "low": float(low),
        "high": float(high),
        "level": level,
        "resamples": resamples,
        "ratio_with_compile": with_compile,
        "per_step": per_step,
        "steps_ratio": steps_ratio,
        "paired": paired,
        "arm": reach_a,
        "reference": reach_r,
        "missed": missed,
        "failed": {side: [r.seed for r in runs if r.failed] for side, runs in (("arm", arm), ("reference", reference))},
        #: seeds without a recorded floor, when others have one: all were measured in raw loss
        "no_floor": {side: sorted(s for k, s in unfloored if k == side) for side in sides},
        "inconclusive": max(len(missed["arm"]), len(missed["reference"])) >= MISSES_INCONCLUSIVE,
        #: no seed of the arm reached the target (one seed: the smoke preset): its times are
        #: lower bounds, so the ratio is an upper bound, which can show slower, never faster
        "upper_bound": len(missed["arm"]) == len(arm),
    }
