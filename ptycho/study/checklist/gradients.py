"""Checklist item *gradients*: the loss gradients under every XLA mode agree with ``off``.

Measured with TensorFlow (imported when the item runs): the gradient of each model's
loss with respect to every weight and to the inputs, compiled as each mode compiles
its train step, against ``off``'s; and the physics head's analytic gradient against
central finite differences in float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ptycho.nets.models import MODEL_KINDS
from ptycho.nets.xla import COMPARED, REFERENCE, compared
from ptycho.study.checklist.item import Inputs, Item, verdict
from ptycho.study.tables import Table, fmt


def gradients(threshold: float, seed: int = 0, pinn_loss: str = "poisson", modes: Sequence[str] = COMPARED) -> dict:
    """Loss gradients w.r.t. weights and inputs, each XLA mode vs ``off``, per variable; plus FD.

    ``pinn_loss`` is the PINN loss the study trains with. The gradient function is
    compiled as the mode compiles its train step (:func:`ptycho.nets.xla.compile_step`, with
    the ``physics`` mode's head a nested XLA function). The value is the worst of the
    per-mode relative differences and the finite-difference relative error.
    """
    import tensorflow as tf

    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare
    from ptycho.nets.xla import compile_step

    modes = compared(modes)
    ds = simulate_split(
        SimulationConfig(
            n=32, object_size=56, n_lines=40, nphotons=1e6, probe_kind="defocused", n_objects_train=1, seed=seed
        ),
        "train",
    )
    per_model = {}
    worst = 0.0
    for kind in MODEL_KINDS:
        data = prepare(ds, kind)
        idx = np.arange(8)
        x = tf.constant(data.inputs[idx])
        grads = {}
        for mode in [REFERENCE, *modes]:
            trainer = Trainer(
                ModelConfig(
                    kind=kind, filters=4, depth=3, loss=pinn_loss, mixing=1, baseline_phase="absolute"
                ),  # every layer type
                TrainConfig(batch_size=8, xla=mode, seed=seed),
                ds.n,
                data.inputs.shape[-1],
                ds.probe,
                data.physics,
            )

            def fn(x, off, tgt, trainer=trainer):
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch(x)
                    loss = tf.reduce_mean(trainer.loss_terms(x, off, tgt, training=False))
                return loss, tape.gradient(loss, trainer.variables), tape.gradient(loss, x)

            loss, gw, gx = compile_step(fn, mode)(x, data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})
            # Every mode builds the same network in the same order; Keras numbers the layer
            # names per build, so variables are matched by position, labelled by the first.
            names = [getattr(v, "path", v.name) for v in trainer.variables]
            grads[mode] = {
                "loss": loss.numpy(),
                "weights": [g.numpy() for g in gw],
                "inputs": gx.numpy(),
                "names": names,
            }
        ref = grads[REFERENCE]
        per_mode = {}
        for mode in modes:
            g = grads[mode]
            rel = {
                name: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
                for name, a, b in zip(ref["names"], g["weights"], ref["weights"], strict=True)
            }
            rel_inputs = float(np.linalg.norm(g["inputs"] - ref["inputs"]) / max(np.linalg.norm(ref["inputs"]), 1e-30))
            per_mode[mode] = {
                "loss": float(g["loss"]),
                "relative_error_per_variable": rel,
                "relative_error_inputs": rel_inputs,
            }
            worst = max(worst, rel_inputs, *rel.values())
        per_model[kind] = {"loss_off": float(ref["loss"]), "modes": per_mode}
    fd = finite_difference_check(seed)
    worst = fd["max_rel"] if not fd["max_rel"] <= worst else worst
    return verdict(
        ITEM.name,
        worst,
        threshold,
        "<=",
        f"loss gradients w.r.t. every weight and the inputs, modes {', '.join(modes)} vs off: worst relative "
        f"difference {worst:.2e}; finite differences agree to {fd['max_rel']:.1e}",
        {"models": per_model, "finite_differences": fd, "modes": list(modes)},
    )


def finite_difference_check(seed: int = 0) -> dict:
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
    return {"max_rel": float(max(errors)), "points": len(errors)}


def collect(inputs: Inputs, threshold: float) -> dict:
    return gradients(threshold, pinn_loss=inputs.loss, modes=COMPARED if inputs.modes is None else inputs.modes)


def tables(report: Mapping) -> list[Table]:
    """Per model, mode and layer: the largest relative gradient difference from off of its variables."""
    ev = report["items"]["gradients"]["evidence"]
    rows = []
    for model, m in sorted(ev.get("models", {}).items()):
        for mode, g in m.get("modes", {}).items():
            layers: dict[str, float] = {}
            for path, rel in g["relative_error_per_variable"].items():
                layer = path.rsplit("/", 1)[0] if "/" in path else path
                layers[layer] = max(layers.get(layer, 0.0), rel)
            for layer, rel in layers.items():
                rows.append([model, mode, layer, fmt(rel)])
            rows.append([model, mode, "inputs (diffraction)", fmt(g["relative_error_inputs"])])
            rows.append([model, mode, "loss value (mode / off)", f"{fmt(g['loss'])} / {fmt(m['loss_off'])}"])
    fd = ev.get("finite_differences")
    if fd:
        rows.append(["PINN physics (float64)", "jit", f"finite differences, {fd['points']} points", fmt(fd["max_rel"])])
    return [("", ["model", "mode vs off", "layer", "relative difference"], rows)]


ITEM = Item(
    name="gradients",
    title="Gradients",
    tables=tables,
    collect=collect,
    threshold="gradients_max_rel",
    measures=True,
)
