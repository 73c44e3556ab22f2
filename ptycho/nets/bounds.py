"""The losses that judge a training: the validation loss (:func:`evaluate`), the losses
that bound it (:func:`loss_bounds`: a perfect reconstruction's floor and a featureless
object's) and whether a finished training collapsed (:func:`collapsed`). Recorded in
``model.json`` by :func:`ptycho.nets.train.train`, read by the convergence item and the
time to quality."""

from __future__ import annotations

import numpy as np

from ptycho.data.dataset import Dataset
from ptycho.errors import PtychoError
from ptycho.nets.inputs import TrainingData, true_outputs
from ptycho.nets.models import method_of
from ptycho.nets.trainer import Trainer


def evaluate(trainer: Trainer, data: TrainingData, idx: np.ndarray) -> float:
    """Mean loss over ``idx`` with fixed-shape batches (last one padded and masked)."""
    bs = trainer.train_cfg.batch_size
    if len(idx) == 0:
        return float("nan")
    total, count = 0.0, 0.0
    for start in range(0, len(idx), bs):
        chunk = idx[start : start + bs]
        mask = np.zeros(bs, np.float32)
        mask[: len(chunk)] = 1.0
        padded = np.concatenate([chunk, np.repeat(chunk[:1], bs - len(chunk))])
        s, c = trainer.eval_step(*data.batch(padded), mask)
        total += float(s)
        count += float(c)
    return total / count


def loss_bounds(trainer: Trainer, ds: Dataset, data: TrainingData, idx: np.ndarray) -> dict:
    """The losses that bound a training's on the samples ``idx`` (the validation split),
    through its own physics head and loss, before any step (the head's scale is the data's):

    * ``floor``: the loss of a perfect reconstruction: the true object's
      (``floor_kind: "true object"``) when ``ds`` has a ground truth; else, for the PINN,
      the saturated model's, every predicted amplitude the square root of its count
      (``"saturated"``). The Poisson negative log-likelihood has no zero (it sits at an
      offset set by the counts), so a final loss means something only as an excess over
      this floor: the convergence item compares excesses (docs/physics.md, section 7).
    * ``flat``: the loss of a featureless object, phase 0 and one amplitude ``a``
      everywhere (the PINN's: the ``a`` whose diffraction holds the measured photons; the
      baseline's: the true amplitude's mean). A training whose final validation loss is not
      below it has learnt nothing about the object: it collapsed (:func:`collapsed`).

    NaN for both when ``idx`` is empty (no validation split).
    """
    import tensorflow as tf

    kind, bs = trainer.model_cfg.kind, trainer.train_cfg.batch_size
    if len(idx) == 0:
        return {"floor": float("nan"), "floor_kind": None, "flat": float("nan"), "flat_amplitude": float("nan")}
    if not method_of(kind).physics and not ds.has_ground_truth:
        raise PtychoError(
            f"the {kind} learns from the true object's patches: it needs a ground truth; train it on a simulated dataset"
        )
    batches = [idx[i : i + bs] for i in range(0, len(idx), bs)]
    shape = (trainer.n // 2, trainer.n // 2, data.inputs.shape[-1])  # one sample's network output

    def mean(per_batch) -> float:
        return sum(float(tf.reduce_sum(per_batch(b))) for b in batches) / len(idx)

    # The head and loss uncompiled: the compiled ones are traced for the training's batch
    # only (a second shape would retrace, ptycho.nets.xla.Retraced), and this runs once.
    def loss(outputs):  # the per-sample loss of outputs(b) -> (amp, phase)
        return lambda b: trainer._physics_loss(*outputs(b), data.offsets[b], data.batch(b)[2])

    def flat(b, value: float):
        return np.full((len(b), *shape), value, np.float32)

    if ds.has_ground_truth:
        amp, phase = true_outputs(ds, kind)
        floor, floor_kind = mean(loss(lambda b: (amp[b], phase[b]))), "true object"
    else:
        counts = data.targets["counts"]
        floor, floor_kind = mean(lambda b: trainer.data_loss(np.sqrt(counts[b]), counts[b])), "saturated"
    if method_of(kind).physics:
        # The head's output scales with the object's amplitude: a^2 = the measured photons
        # over those of the unit flat object.
        unit = mean(lambda b: tf.square(trainer.head_amplitude(flat(b, 1.0), flat(b, 0.0), data.offsets[b])))
        a = float(np.sqrt(data.targets["counts"][idx].sum(dtype=np.float64) / len(idx) / unit))
    else:
        a = float(amp[idx].mean())
    flat_loss = mean(loss(lambda b: (flat(b, a), flat(b, 0.0))))
    return {"floor": floor, "floor_kind": floor_kind, "flat": flat_loss, "flat_amplitude": a}


def collapsed(meta: dict) -> str | None:
    """Why a finished training counts as failed though its loss stayed finite, or None:
    its final validation loss is not below the featureless object's (:func:`loss_bounds`),
    so its reconstruction explains the data no better than a blank, however finite its
    loss (a network whose sigmoid saturated, or an MAE that gave up at low dose)."""
    flat = (meta.get("loss_bounds") or {}).get("flat")
    final = meta["history"][-1]["val_loss"] if meta.get("history") else None
    if flat is None or final is None or not (np.isfinite(flat) and np.isfinite(final)) or final < flat:
        return None
    return (
        f"collapsed: the final validation loss {final:.6g} is not below a featureless object's {flat:.6g} "
        "(at low dose use model.loss: poisson; else lower train.learning_rate or train longer)"
    )
