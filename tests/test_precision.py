"""Mixed precision in the network: every XLA mode trains at every precision, traces once,
and hands the float32 physics head float32; reduced precision stays near float32.

The seed notes' first rule under XLA is dtype consistency: a bfloat16 network feeding a
complex64 physics head is where it breaks. These pin the boundary (the network's two
outputs are float32 layers) and the loss scaling float16 needs.
"""

from __future__ import annotations

import numpy as np
import pytest

import ptycho.nets.xla
from ptycho.config import choices
from ptycho.errors import ConfigError
from ptycho.nets.precision import PRECISIONS as DEFINED

PRECISIONS = tuple(DEFINED)
MODES = list(ptycho.nets.xla.MODES)  # every registered mode


@pytest.fixture(scope="module")
def tiny():
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split

    cfg = SimulationConfig(
        n=16, object_size=40, n_lines=40, n_objects_train=1, stride_train=4, nphotons=1e6, probe_kind="defocused"
    )
    return simulate_split(cfg, "train")


def _trainer(ds, kind, mode, precision, **model):
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare

    data = prepare(ds, kind)
    trainer = Trainer(
        ModelConfig(kind=kind, filters=2, mixing=1, **model),
        TrainConfig(batch_size=4, xla=mode, seed=3, precision=precision),
        ds.n,
        data.inputs.shape[-1],
        ds.probe,
        data.physics,
    )
    idx = np.arange(4)
    return trainer, (data.inputs[idx], data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})


def test_the_precisions_are_float32_first_then_mixed_bfloat16_and_float16():
    assert PRECISIONS == ("float32", "mixed_bfloat16", "mixed_float16")
    # the config's list offers exactly these, and auto (the machine's fastest native one)
    assert choices("precision.items") == (*PRECISIONS, "auto")
    from ptycho.nets.train import TrainConfig

    assert TrainConfig().precision == "float32"
    with pytest.raises(ConfigError, match="train.precision"):
        TrainConfig(precision="bfloat16")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_network_computes_in_its_precision_and_hands_over_float32(precision):
    import tensorflow as tf

    from ptycho.nets.models import build_network

    net = build_network(16, 4, 4, filters=2, pooling="avg", seed=0, depth=2, mixing=1, precision=precision)
    boundary = ("diffraction", "amplitude", "phase_tanh", "phase")  # the input and the output activations
    inner = [la for la in net.layers if la.name not in boundary and not la.name.startswith("up_sampling")]
    compute = {layer.compute_dtype for layer in inner}
    assert compute == {"float32" if precision == "float32" else precision.removeprefix("mixed_")}
    assert {v.dtype for v in net.trainable_variables} == {"float32"}  # variables stay float32
    amp, phase = net(tf.zeros((2, 16, 16, 4)))
    assert amp.dtype == tf.float32 and phase.dtype == tf.float32


@pytest.mark.parametrize("precision", PRECISIONS[1:])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_trains_at_every_precision_and_traces_once(tiny, mode, precision):
    trainer, batch = _trainer(tiny, "pinn", mode, precision)
    losses = [float(trainer.train_step(*batch)) for _ in range(3)]
    assert all(np.isfinite(losses))
    assert trainer.traces["train"] == 1 and trainer.traces["physics"] == (1 if mode == "physics" else 0)


@pytest.mark.parametrize("kind", ["pinn", "baseline"])
def test_bfloat16_loss_and_gradients_stay_near_float32(tiny, kind):
    """Same weights, same batch: bfloat16's 8-bit mantissa (epsilon 2^-7 = 0.008) moves the
    loss by well under 5 %, and the gradient keeps its direction (cosine > 0.9)."""
    import tensorflow as tf

    out = {}
    for precision in ("float32", "mixed_bfloat16"):
        trainer, (x, off, tgt) = _trainer(tiny, kind, "off", precision)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(trainer.loss_terms(x, off, tgt, training=False))
        grads = tape.gradient(loss, trainer.variables)
        out[precision] = float(loss), np.concatenate([g.numpy().ravel() for g in grads])
    (l32, g32), (l16, g16) = out["float32"], out["mixed_bfloat16"]
    assert abs(l16 - l32) <= 0.05 * abs(l32)
    assert g32 @ g16 / (np.linalg.norm(g32) * np.linalg.norm(g16)) > 0.9


def test_float16_trains_through_a_loss_scale_optimizer(tiny):
    import keras

    trainer, batch = _trainer(tiny, "pinn", "jit", "mixed_float16")
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    before = [v.numpy().copy() for v in trainer.variables]
    trainer.train_step(*batch)
    assert any(not np.array_equal(a, v.numpy()) for a, v in zip(before, trainer.variables, strict=True))


def test_a_mixed_precision_model_saves_loads_and_predicts_in_float32(tiny, tmp_path):
    import keras
    import tensorflow as tf

    trainer, (x, _, _) = _trainer(tiny, "pinn", "jit", "mixed_bfloat16")
    trainer.network.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    amp, phase = loaded(tf.constant(x))
    assert amp.dtype == tf.float32 and phase.dtype == tf.float32
    assert loaded.layers[1].dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_allclose(amp.numpy(), trainer.network(tf.constant(x))[0].numpy(), rtol=0, atol=0)
