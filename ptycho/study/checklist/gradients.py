"""Checklist item *gradients*: the loss gradients under every XLA mode agree with ``off``,
and a reduced precision's with float32's.

Measured with TensorFlow (imported when the item runs) on the study's own model settings
(the schema's ``model`` defaults: relative baseline phase, its depth and mixing, every
layer type of the study's network) at a small width: the gradient of each model's loss
with respect to every weight and to the inputs, compiled as each mode compiles its train
step, each mode vs ``off`` at every precision and each reduced precision vs float32 in
every mode (:mod:`ptycho.study.checklist.comparisons`); and the physics head's analytic
gradient against central finite differences in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ptycho.config import defaults
from ptycho.nets.models import MODEL_KINDS
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION
from ptycho.nets.xla import COMPARED, REFERENCE, compared
from ptycho.study.checklist.comparisons import (
    RATIO_LIMIT,
    comparisons,
    limits,
    limits_text,
    ordered,
    path_roundings,
    roundoffs,
    worst_by_group,
)
from ptycho.study.checklist.differences import (
    JUDGED_WITH_INPUTS,
    FiniteDifferences,
    GradientDifference,
    GradientsEvidence,
    ModelGradients,
)
from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.result import ItemResult, verdict


def variable_differences(weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> list[float]:
    """Each variable's ``|g_v - ref_v|`` over the whole reference gradient's norm ``|ref|``.

    Not over the variable's own norm: rounding noise in a gradient entry scales with the
    terms summed into it, which are the size of the whole gradient's, not with their sum.
    A variable whose gradient is analytically about zero (the phase head's last bias under
    the relative baseline phase loss: a constant phase offset leaves that loss unchanged)
    is a sum of terms that cancel, so its own norm is noise and its own relative
    difference is noise over noise. Over the whole norm, every variable's share of the
    difference is on one scale, and their squares add up to the whole's relative difference.
    """
    whole = np.sqrt(sum(float(np.sum(np.square(r, dtype=np.float64))) for r in reference))
    return [
        float(np.linalg.norm((np.asarray(w, np.float64) - r).ravel()) / max(whole, 1e-30))
        for w, r in zip(weights, reference, strict=True)
    ]


def loss_gradients(trainer, x, offsets, targets) -> dict:
    """Loss and its gradients w.r.t. the trainer's variables and ``x``, compiled as the
    trainer's mode compiles its train step, of the loss as training differentiates it
    (float16: scaled by the optimiser's loss scale, then unscaled here, so small gradients
    do not underflow, as in training)."""
    import tensorflow as tf

    from ptycho.nets.xla import compile_step

    def fn(x, offsets, targets):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            loss = tf.reduce_mean(trainer.loss_terms(x, offsets, targets, training=False))
            scaled = trainer.optimizer.scale_loss(loss)
        return loss, tape.gradient(scaled, trainer.variables), tape.gradient(scaled, x)

    loss, gw, gx = compile_step(fn, trainer.mode)(x, offsets, targets)
    scale = float(trainer.optimizer.scale_loss(tf.constant(1.0)))
    # Every build makes the same network in the same order; Keras numbers the layer names
    # per build, so variables are matched by position and labelled by the reference's.
    return {
        "loss": float(loss),
        "weights": [g.numpy().astype(np.float64) / scale for g in gw],
        "inputs": gx.numpy().astype(np.float64) / scale,
        "names": [getattr(v, "path", v.name) for v in trainer.variables],
        "layers": sorted({type(layer).__name__ for layer in trainer.network.layers}),
    }


def gradients(
    threshold: float,
    roundoff_count: float,
    seed: int = 0,
    pinn_loss: str = defaults("model")["loss"],
    modes: Sequence[str] = COMPARED,
    precisions: Sequence[str] = (REFERENCE_PRECISION,),
    n: int = 32,
    nphotons: float = defaults("simulation")["nphotons"],
    finite_differences: bool = True,
) -> ItemResult:
    """Loss gradients w.r.t. weights and inputs, per model: each XLA mode vs ``off`` at each
    precision, each reduced precision vs float32 in each mode; plus finite differences.

    ``pinn_loss`` is the PINN loss the study trains with; the rest of the model is the
    schema's (the study's) at 4 filters, on a batch of 8 simulated ``n``-pixel patterns.
    Weights are judged by :func:`variable_differences` (each variable over the whole
    gradient's norm), inputs by their own relative difference. At float32 the limit is
    ``threshold`` for both; a comparison at a reduced precision judges the weights only,
    against ``roundoff_count`` unit round-offs: the input gradient is not trained, and
    each of its entries follows the ReLU pattern at one pixel rather than averaging over a
    batch and every position as a weight's does, so a rounding that flips one activation
    moves it by a finite step (docs/physics.md section 9); it is recorded. The value is
    the worst difference over its limit, finite differences against ``threshold``.
    ``nphotons``: the batch's dose (a condition's, :mod:`ptycho.study.conditions`);
    ``finite_differences`` False leaves out that check, which does not depend on it.
    """
    import tensorflow as tf

    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare

    modes = compared(modes)
    used = ordered(precisions)
    limit_of = limits(PRECISIONS, threshold, roundoff_count, aligned=2 * path_roundings())
    ds = simulate_split(
        SimulationConfig(
            n=n, object_size=n + 24, n_lines=40, nphotons=nphotons, probe_kind="defocused", n_objects_train=1, seed=seed
        ),
        "train",
    )
    per_model = {}
    ratios = []
    layers: set[str] = set()
    for kind in MODEL_KINDS:
        data = prepare(ds, kind)
        idx = np.arange(8)
        batch = (tf.constant(data.inputs[idx]), data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})
        grads = {}
        for precision in used:
            for mode in [REFERENCE, *modes]:
                trainer = Trainer(
                    ModelConfig(kind=kind, filters=4, loss=pinn_loss),
                    TrainConfig(batch_size=8, xla=mode, seed=seed, precision=precision),
                    ds.n,
                    data.inputs.shape[-1],
                    ds.probe,
                    data.physics,
                )
                grads[mode, precision] = loss_gradients(trainer, *batch)
        reference = grads[REFERENCE, REFERENCE_PRECISION]
        layers.update(reference["layers"])
        per_comparison = {}
        for c in comparisons(modes, used):
            g, ref = grads[c.arm], grads[c.reference]
            weights = dict(zip(reference["names"], variable_differences(g["weights"], ref["weights"]), strict=True))
            inputs = float(np.linalg.norm(g["inputs"] - ref["inputs"]) / max(np.linalg.norm(ref["inputs"]), 1e-30))
            judged = c.precision == REFERENCE_PRECISION
            limit = limit_of[c.precision]
            worst = max([*weights.values(), inputs] if judged else weights.values())
            ratios.append(worst / limit)
            per_comparison[c.key] = GradientDifference(
                compared=c.label,
                precision=c.precision,
                across_precisions=c.across_precisions,
                limit=limit,
                judged=JUDGED_WITH_INPUTS if judged else "weights",
                worst=worst,
                whole_weights=float(np.sqrt(sum(v * v for v in weights.values()))),
                per_variable=weights,
                inputs=inputs,
                loss=g["loss"],
                loss_reference=ref["loss"],
            )
        # Each variable's share of the float32 off gradient's norm: its own relative
        # difference is its entry in a comparison over its share.
        whole = np.sqrt(sum(float(np.sum(r * r)) for r in reference["weights"]))
        shares = {
            name: float(np.linalg.norm(r) / whole)
            for name, r in zip(reference["names"], reference["weights"], strict=True)
        }
        per_model[kind] = ModelGradients(loss_off=reference["loss"], shares=shares, comparisons=per_comparison)
    fd = finite_difference_check(seed) if finite_differences else None
    if fd is not None:
        ratios.append(fd.max_rel / threshold)
    value = max(ratios)
    evidence = GradientsEvidence(
        models=per_model,
        finite_differences=fd,
        modes=tuple(modes),
        precisions=tuple(used),
        limits={p: limit_of[p] for p in used},
        precision_roundoffs=roundoff_count,
        layers=tuple(sorted(layers)),
    )
    summary = worst_by_group(evidence.differences(), "worst")
    return verdict(
        ITEM.name,
        value,
        RATIO_LIMIT,
        "<=",
        f"loss gradients w.r.t. every weight (over the whole gradient's norm) and the inputs (judged at float32), "
        f"modes {', '.join(modes)} vs off at {', '.join(used)}"
        f"{', each reduced precision vs float32 in every mode' if len(used) > 1 else ''}: {summary}; "
        + (f"finite differences agree to {fd.max_rel:.1e}; " if fd is not None else "")
        + f"limits {limits_text(evidence.limits, roundoff_count)}; "
        f"value: the worst difference over its limit, {value:.2g}",
        evidence.to_json(),
    )


def finite_difference_check(seed: int = 0) -> FiniteDifferences:
    """Analytic vs central finite-difference gradient of the PINN loss (float64 physics)."""
    import tensorflow as tf

    from ptycho.nets.models import ModelConfig
    from ptycho.physics.forward_tf import poisson_nll, predicted_amplitude

    rng = np.random.default_rng(seed)
    n, c = 16, 4
    obj = tf.Variable(rng.uniform(0.5, 1.0, (1, n, n, c)) * np.exp(1j * rng.uniform(-1, 1, (1, n, n, c))))
    offsets = tf.constant([[[2.0, 2.0], [-2.0, 2.0], [2.0, -2.0], [-2.0, -2.0]]], tf.float64)
    r2 = (np.arange(n) - n // 2)[:, None] ** 2 + (np.arange(n) - n // 2)[None] ** 2
    probe = np.exp(-r2 / 20.0).astype(np.complex128)
    counts = tf.constant(rng.poisson(5.0, (1, n, n, c)).astype(np.float64))

    def loss(o):
        amp = predicted_amplitude(o, offsets, probe, tf.constant(1.0, tf.float64), xla=True, canvas_pad=4)
        return tf.reduce_mean(poisson_nll(amp, counts, ModelConfig().poisson_eps))

    with tf.GradientTape() as tape:
        value = loss(obj)
    grad = tape.gradient(value, obj).numpy()
    h, errors = 1e-6, []
    for idx in [(0, 8, 8, 0), (0, 7, 9, 3), (0, 6, 6, 1), (0, 9, 5, 2)]:
        for direction in (1.0, 1j):
            delta = np.zeros(obj.shape, np.complex128)
            delta[idx] = h * direction
            fd = (loss(obj + delta) - loss(obj - delta)).numpy() / (2 * h)
            analytic = grad[idx].real if direction == 1.0 else grad[idx].imag
            errors.append(abs(analytic - fd) / max(abs(fd), 1e-12))
    return FiniteDifferences(max_rel=float(max(errors)), points=len(errors))


def collect(inputs: Inputs, threshold: float) -> ItemResult:
    return gradients(
        threshold,
        roundoffs(inputs.precision_threshold, ITEM.precision_threshold),
        pinn_loss=inputs.loss,
        modes=COMPARED if inputs.modes is None else inputs.modes,
        precisions=inputs.precisions,
        nphotons=inputs.nphotons,
    )


ITEM = Item(
    name="gradients",
    collect=collect,
    threshold="gradients_max_rel",
    measures=True,
    precision_threshold="gradients_precision_roundoffs",
)
