"""Checklist item *convergence*: every arm's loss decreased, and each XLA mode ends where
``off`` ends, each reduced precision where float32 ends: the final validation loss's
(read through the last readings' noise, :mod:`ptycho.study.loss_curve`) excess over the
loss of a perfect reconstruction (the true object's, through the same physics and loss:
``loss_bounds.floor`` of ``model.json``), relative to the reference's mean excess, across
seeds. The excess, not the loss itself: the Poisson negative
log-likelihood sits at an offset set by the counts (about -2.2 at 1e4 photons), so a
loss relative to itself would call any two trainings equal (docs/physics.md, section 7).

Collected from the trained models' ``model.json`` histories; no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ptycho.study.arms import pairs
from ptycho.study.checklist import seeds
from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.result import FAIL, ItemResult, verdict
from ptycho.study.json_record import JsonRecord
from ptycho.study.stats import ALPHA, LOWER, NON_INFERIORITY, SeedComparison, seed_comparison
from ptycho.study.time_to_quality import common_floors
from ptycho.study.training_record import Epoch
from ptycho.study.ttq_comparison import raw_loss_words

#: What the item compares, in its words.
WHAT = "final validation loss above a perfect reconstruction's"


@dataclass(frozen=True)
class ConvergencePair(JsonRecord):
    """One arm against its reference of the same seed (an XLA mode vs off at the same
    precision, or a precision vs float32 in the same mode): their final validation losses
    and whether each went down."""

    mode: str = ""
    precision: str = ""
    arm: str = ""
    reference: str = ""
    #: read through its last readings; NaN (null) for an arm without a good epoch
    final_val_loss: float = math.nan
    final_val_loss_off: float = math.nan  #: the reference's
    relative_difference: float = math.nan  #: |arm - reference| / |reference|, raw loss
    decreased: Mapping[str, bool] = field(default_factory=dict)  #: arm -> its loss went down
    initial_val_loss: Mapping[str, float | None] = field(default_factory=dict)  #: arm -> before the first step


#: (model, seed) -> mode and precision -> ``train`` and ``val`` losses per epoch
Curves = Mapping[str, Mapping[str, Mapping[str, tuple[float, ...]]]]


@dataclass(frozen=True)
class ConvergenceEvidence(JsonRecord):
    """What the convergence item measured, as its check writes it (``checks/convergence.json``,
    the report's ``items.convergence.evidence``) and the report's section reads it."""

    pairs: Mapping[str, ConvergencePair] = field(default_factory=dict)
    #: comparison group -> the final excesses across seeds, judged
    comparisons: Mapping[str, SeedComparison] = field(default_factory=dict)
    threshold: float = math.nan  #: the relative margin
    curves: Curves = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)  #: arm -> why its training FAILED
    floors: Mapping[str, float] = field(default_factory=dict)  #: arm -> the loss floor its excess is over


def loss_curves(histories: Mapping[str, Sequence[Epoch]]) -> dict[str, dict]:
    """Per-epoch losses of every compared arm of each (model, seed), side by side, keyed by
    mode and precision: ``{"pinn-s0": {"off": {"train": [...], "val": [...]}, "jit": {...},
    "off-bf16": {...}}}`` (only arms of a pair, :func:`ptycho.study.arms.pairs`)."""
    out: dict[str, dict] = {}
    for pair in pairs(histories):
        group = out.setdefault(pair.arm.key("model", "seed"), {})
        for arm in (pair.reference, pair.arm):
            group[arm.key("mode", "precision")] = {
                "train": [e.train_loss for e in histories[arm.name]],
                "val": [e.val_loss for e in histories[arm.name]],
            }
    return out


def convergence(
    histories: Mapping[str, Sequence[Epoch | Mapping[str, Any]]],
    threshold: float,
    initial: Mapping[str, float] | None = None,
    failed: Mapping[str, str] | None = None,
    floors: Mapping[str, float | None] | None = None,
    test: str = NON_INFERIORITY,
    alpha: float = ALPHA,
    final: Mapping[str, float | None] | None = None,
) -> ItemResult:
    """Final validation losses of each mode's arm vs the ``off`` arm of the same model,
    precision and seed, and of each reduced precision's arm vs float32 (same model, mode and
    seed); every arm's loss must decrease.

    ``histories`` maps an arm name (``pinn-jit-s0``) to its per-epoch records and
    ``initial`` to its validation loss before training. "Decreased" means the final
    validation loss is below the initial one (or, without a validation split, the last
    epoch's mean training loss below the first's). ``failed`` maps an arm whose training
    diverged (its ``model.json`` says ``status: FAILED``) to the reason: the item FAILs
    and says so, whatever the other arms did. ``floors`` maps an arm to the loss a perfect
    reconstruction has on its validation split; the arms are compared by their excess
    over it, or all in raw loss when some record none (:func:`common_floors`; the summary
    names them). ``final`` maps an arm to the validation loss it ended at, read through its
    last readings (:attr:`ptycho.study.training_record.TrainingRecord.final_val_loss`: one
    reading is where the last step left the weights, 3 % off the curve on the default);
    an arm without one ends at its last epoch's reading. ``test``: non-inferiority (an
    arm's excess NOT WORSE, i.e. not higher than its reference's by more than
    ``threshold`` of it) or equivalence (two-sided).
    """
    histories = {n: tuple(map(Epoch.of, h)) for n, h in histories.items()}
    initial = dict(initial or {})
    failed = dict(failed or {})
    floors, unfloored = common_floors({n: (floors or {}).get(n) for n in histories})

    # The validation loss each arm ended at (NaN: no good epoch): as given, else its last reading.
    given = dict(final or {})
    end = {
        n: (f if (f := given.get(n)) is not None and math.isfinite(f) else h[-1].val_loss) if h else math.nan
        for n, h in histories.items()
    }

    def decreased(arm: str, h: Sequence[Epoch]) -> bool:
        start = initial.get(arm)
        if start is not None and math.isfinite(start) and math.isfinite(end[arm]):
            return end[arm] < start
        return h[-1].train_loss < h[0].train_loss

    compared, all_decreased = {}, True
    for pair in pairs(histories):
        arm, ref = pair.arm.name, pair.reference.name
        a, b = histories[arm], histories[ref]
        record = ConvergencePair(pair.arm.mode, pair.arm.precision, arm, ref)
        if not a or not b:  # a diverged arm may have no good epoch at all
            compared[pair.key] = dataclasses.replace(
                record,
                final_val_loss=end[arm],
                final_val_loss_off=end[ref],
            )
            continue  # its NaN final loss makes the comparison below FAIL
        fa, fb = end[arm], end[ref]
        went_down = {name: decreased(name, h) for name, h in ((arm, a), (ref, b))}
        all_decreased &= all(went_down.values())
        compared[pair.key] = dataclasses.replace(
            record,
            final_val_loss=fa,
            final_val_loss_off=fb,
            relative_difference=abs(fa - fb) / max(abs(fb), 1e-12),
            decreased=went_down,
            initial_val_loss={arm: initial.get(arm), ref: initial.get(ref)},
        )
    # The verdict, as for quality: each arm's mean final excess over seeds against its
    # reference's, relative to the reference's mean, with its interval from the seed-to-seed spread.
    finals = {n: end[n] - floors.get(n, 0.0) for n in histories}
    comparisons, words = {}, []
    for g in seeds.seed_groups(histories):
        ref = float(np.mean([finals[n] for n in g.seeds_off.values()]))
        scale = abs(ref) if math.isfinite(ref) and ref != 0 else float("nan")
        c = seed_comparison(
            {s: finals[n] / scale for s, n in g.seeds_mode.items()},
            {s: finals[n] / scale for s, n in g.seeds_off.items()},
            threshold,
            test,
            LOWER,
            alpha=alpha,
        )
        comparisons[g.key] = c
        words.append(seeds.comparison_words(g, f"{WHAT} (relative to the reference's mean)", c, percent=True))
    value, status = seeds.judge(comparisons.values())
    summary = "; ".join(words) + "; every arm's loss decreased"
    if unfloored:
        summary += raw_loss_words("compared", ", ".join(sorted(unfloored)))
    if not all_decreased:
        value, status, summary = float("nan"), FAIL, "an arm's training loss did not decrease"
    if not compared:
        summary = "no pair to compare (off and another mode, or float32 and another precision, must be in the matrix)"
    if failed:
        value, status, summary = float("nan"), FAIL, seeds.failed_summary(failed)
    return verdict(
        ITEM.name,
        value,
        threshold,
        "<=",
        summary,
        ConvergenceEvidence(
            pairs=compared,
            comparisons=comparisons,
            threshold=float(threshold),
            curves=loss_curves(histories),
            failed=failed,
            floors=floors,
        ).to_json(),
        status,
    )


def collect(inputs: Inputs, threshold: float) -> ItemResult:
    trained = inputs.results.trainings
    return convergence(
        {arm.name: r.history for arm, r in trained.items()},
        threshold,
        {arm.name: r.initial_val_loss for arm, r in trained.items()},
        inputs.results.failed,
        {arm.name: r.floor for arm, r in trained.items()},
        inputs.test,
        inputs.alpha,
        {arm.name: r.final_val_loss for arm, r in trained.items()},
    )


ITEM = Item(
    name="convergence",
    collect=collect,
    threshold="convergence_max_rel",
)
