"""TensorFlow core: translation arms, physics head, gradients, fixed-shape steps."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import ptycho.nets.xla  # noqa: E402
from ptycho.errors import ConfigError  # noqa: E402
from ptycho.physics import forward as np_forward  # noqa: E402
from ptycho.physics import forward_tf  # noqa: E402
from ptycho.physics.translate import translate as np_translate  # noqa: E402
from ptycho.physics.translate_tf import translate_reference, translate_xla  # noqa: E402

IMPLS = {"xla": translate_xla, "reference": translate_reference}


def _nhwc_np_translate(img: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    moved = np.stack([np_translate(np.moveaxis(img[i], -1, 0), shifts[i]) for i in range(len(img))])
    return np.moveaxis(moved, 1, -1)


@pytest.mark.parametrize("impl", IMPLS)
def test_translate_moves_a_bright_pixel_two_right_one_down(impl):
    img = np.zeros((1, 9, 9, 1), np.float32)
    img[0, 4, 4, 0] = 1.0
    out = IMPLS[impl](tf.constant(img), tf.constant([[2.0, 1.0]])).numpy()
    assert out[0, 5, 6, 0] == pytest.approx(1.0)
    assert out.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("batch", [1, 7, 16, 100])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_xla_and_reference_translation_agree_for_subpixel_shifts(batch, dtype):
    rng = np.random.default_rng(batch)
    shape = (batch, 24, 20, 2)
    img = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        img = img + 1j * rng.standard_normal(shape)
    img = img.astype(dtype)
    shifts = rng.uniform(-4.5, 4.5, (batch, 2))
    xla = tf.function(translate_xla, jit_compile=True)(tf.constant(img), tf.constant(shifts)).numpy()
    ref = translate_reference(tf.constant(img), tf.constant(shifts)).numpy()
    interior = (slice(None), slice(5, -5), slice(5, -5))
    assert xla.dtype == img.dtype and ref.dtype == img.dtype
    assert np.abs(xla - ref)[interior].max() <= 1e-5
    # and both agree with the NumPy definition everywhere, borders included
    expected = _nhwc_np_translate(img, shifts)
    assert np.abs(xla - expected).max() <= 1e-5


@pytest.mark.parametrize("impl", IMPLS)
def test_translation_past_the_border_fills_zeros(impl):
    img = np.ones((2, 8, 8, 1), np.float32)
    out = IMPLS[impl](tf.constant(img), tf.constant([[20.0, 0.0], [0.0, -9.0]])).numpy()
    assert np.all(out == 0.0)


def test_xla_translation_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    img = tf.constant(rng.standard_normal((2, 10, 10, 1)))
    shifts = tf.Variable([[0.3, -1.2], [1.7, 0.4]], dtype=tf.float64)
    weights = tf.constant(rng.standard_normal((2, 10, 10, 1)))

    def loss(s):
        return tf.reduce_sum(translate_xla(img, s) * weights)

    with tf.GradientTape() as tape:
        value = loss(shifts)
    grad = tape.gradient(value, shifts).numpy()
    h = 1e-6
    fd = np.zeros_like(grad)
    for idx in np.ndindex(*grad.shape):
        delta = np.zeros(grad.shape)
        delta[idx] = h
        fd[idx] = (loss(shifts + delta) - loss(shifts - delta)).numpy() / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_tf_forward_model_matches_numpy_for_a_group():
    from ptycho.physics.objects import make_object
    from ptycho.physics.probe import make_probe
    from ptycho.physics.scan import grid_scan
    from ptycho.physics.translate import extract_patches

    obj = make_object("lines", 48, np.random.default_rng(1), n_lines=40).astype(np.complex64)
    probe = make_probe("defocused", 32).astype(np.complex64)
    scan = grid_scan(48, 32, 4, 2, 4)
    members = scan.positions[scan.groups[:3]].reshape(-1, 2)
    patches = extract_patches(obj, members, 32).reshape(3, 4, 32, 32)
    expected = np_forward.diffraction_amplitude(probe[None, None] * patches)
    for xla in (True, False):
        amp = forward_tf.predicted_amplitude(
            tf.constant(np.moveaxis(patches, 1, -1)),
            tf.constant(scan.offsets[:3]),
            probe,
            tf.constant(0.0),
            xla=xla,
            canvas_pad=8,
        ).numpy()
        assert np.abs(np.moveaxis(amp, -1, 1) - expected).max() <= 1e-5 * expected.max()


def test_channel_and_flat_layouts_round_trip_with_k_equal_b_times_c_plus_c():
    x = tf.reshape(tf.range(2 * 3 * 3 * 4, dtype=tf.float32), [2, 3, 3, 4])
    flat = forward_tf.channels_to_flat(x)
    assert flat.shape == (8, 3, 3, 1)
    np.testing.assert_array_equal(flat[1 * 4 + 2, :, :, 0], x[1, :, :, 2])  # k = b*C + c
    np.testing.assert_array_equal(forward_tf.flat_to_channels(flat, 4), x)


# ----------------------------------------------------------------- small models
def _tiny_dataset(gridsize=2):
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split

    cfg = SimulationConfig(
        n=16,
        gridsize=gridsize,
        object_size=40,
        n_lines=40,
        n_objects_train=1,
        stride_train=4,
        nphotons=1e6,
        probe_kind="defocused",
    )
    return simulate_split(cfg, "train")


def _trainer(kind="pinn", xla=True, ds=None, **model):
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare

    ds = ds or _tiny_dataset()
    data = prepare(ds, kind)
    trainer = Trainer(
        ModelConfig(kind=kind, filters=2, **model),
        TrainConfig(batch_size=4, xla=xla, seed=3),
        ds.n,
        data.inputs.shape[-1],
        ds.probe,
        data.physics,
    )
    return trainer, data


def _batch(data, n=4):
    idx = np.arange(n)
    return data.inputs[idx], data.offsets[idx], {k: v[idx] for k, v in data.targets.items()}


MODES = list(ptycho.nets.xla.MODES)  # every registered mode, off (the reference) first


@pytest.mark.parametrize(
    "kind, model",
    [
        ("pinn", {}),  # the study's: MAE on amplitudes
        ("pinn", {"loss": "poisson"}),
        ("baseline", {}),  # the study's: relative phase
        ("baseline", {"baseline_phase": "absolute"}),
    ],
)
def test_every_xla_mode_gives_the_loss_gradients_of_off(kind, model):
    from ptycho.nets.xla import compile_step

    ds = _tiny_dataset()
    grads = {}
    for mode in MODES:
        trainer, data = _trainer(kind, mode, ds, **model)
        x, off, tgt = _batch(data)

        def loss_and_grads(x, off, tgt, trainer=trainer):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(trainer.loss_terms(x, off, tgt, training=False))
            return loss, tape.gradient(loss, trainer.variables)

        loss, g = compile_step(loss_and_grads, mode)(x, off, tgt)
        grads[mode] = [loss.numpy()] + [v.numpy() for v in g]
    # Relative to its own norm, except a gradient at the rounding-noise floor (under
    # 1e-3 of the largest: the relative phase loss barely sees the phase head's last
    # bias, 1e-8), whose own norm is noise too: it must agree to 1e-5 of the largest.
    largest = max(np.linalg.norm(b) for b in grads["off"][1:])
    for mode in MODES[1:]:
        for a, b in zip(grads[mode], grads["off"], strict=True):
            own = np.linalg.norm(b)
            rel = np.linalg.norm(a - b) / (own if own >= 1e-3 * largest else 0.1 * largest)
            assert rel <= 1e-4, mode


def test_learning_rate_warms_up_linearly_then_stays_constant_or_decays_to_its_floor():
    from ptycho.nets.train import TrainConfig

    def rates(schedule):
        lr = TrainConfig(
            epochs=4, learning_rate=1e-3, lr_schedule=schedule, warmup_epochs=1, lr_floor=0.1
        ).learning_rate_at(10)
        return [float(lr(step)) for step in (0, 5, 10, 25, 40)]

    np.testing.assert_allclose(rates("constant"), [0.0, 5e-4, 1e-3, 1e-3, 1e-3], rtol=1e-6)
    cosine = rates("cosine")
    np.testing.assert_allclose(cosine[:3] + cosine[4:], [0.0, 5e-4, 1e-3, 1e-4], rtol=1e-6)
    assert 1e-4 < cosine[3] < 1e-3
    assert TrainConfig(learning_rate=2e-3).learning_rate_at(10) == 2e-3  # no schedule: a plain float


def test_a_held_cosine_keeps_the_rate_until_its_last_epochs_then_decays_to_its_floor():
    from ptycho.nets.train import TrainConfig

    steps = (0, 5, 10, 25, 30, 35, 40, 50)
    held = TrainConfig(
        epochs=4, learning_rate=1e-3, lr_schedule="cosine", warmup_epochs=1, lr_floor=0.1, decay_fraction=0.25
    ).learning_rate_at(10)
    got = [float(held(step)) for step in steps]
    # warm-up over epoch 0, held over epochs 1-2, a half cosine over epoch 3, then the floor
    np.testing.assert_allclose(got, [0.0, 5e-4, 1e-3, 1e-3, 1e-3, 5.5e-4, 1e-4, 1e-4], rtol=1e-6)
    # held for no step (what decay_fraction 1 gives), it is Keras's own CosineDecay, step for step
    import keras

    keras_own = keras.optimizers.schedules.CosineDecay(0.0, 30, alpha=0.1, warmup_target=1e-3, warmup_steps=10)
    ours = TrainConfig(
        epochs=4, learning_rate=1e-3, lr_schedule="cosine", warmup_epochs=1, lr_floor=0.1
    ).learning_rate_at(10)
    np.testing.assert_allclose(
        [float(ours(s)) for s in range(45)], [float(keras_own(s)) for s in range(45)], rtol=1e-5, atol=1e-9
    )


def test_an_empty_decay_is_one_line_naming_the_key_and_a_constant_rate_ignores_the_fraction():
    from ptycho.errors import ConfigError
    from ptycho.nets.train import TrainConfig

    with pytest.raises(ConfigError) as err:
        TrainConfig(epochs=4, lr_schedule="cosine", decay_fraction=0)
    assert str(err.value).startswith("config key 'train.decay_fraction' = 0 is out of range")
    assert "\n" not in str(err.value)
    # like lr_floor, the fraction shapes a decay only: a constant schedule stays a plain float
    assert TrainConfig(learning_rate=2e-3, decay_fraction=0.2).learning_rate_at(10) == 2e-3


def test_relative_baseline_phase_loss_ignores_a_constant_phase_of_the_target_patch():
    # One diffraction pattern cannot show a patch's constant phase; with
    # baseline_phase: relative the loss does not ask for it (any offset, even across +-pi).
    trainer, data = _trainer("baseline", "off", baseline_phase="relative")
    absolute, _ = _trainer("baseline", "off", baseline_phase="absolute")
    x, off, tgt = _batch(data)
    base = trainer.loss_terms(x, off, tgt, training=False).numpy()
    shifted = dict(tgt, phase=tgt["phase"] + np.array([2.5, -1.0, 0.3, 3.0], np.float32)[:, None, None, None])
    np.testing.assert_allclose(trainer.loss_terms(x, off, shifted, training=False).numpy(), base, atol=1e-5)
    moved = absolute.loss_terms(x, off, shifted, training=False).numpy()
    assert np.all(np.abs(moved - absolute.loss_terms(x, off, tgt, training=False).numpy()) > 0.2)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_traces_its_train_step_once_and_gives_offs_loss(mode):
    ds = _tiny_dataset()
    losses = {}
    for m in ("off", mode):
        trainer, data = _trainer("pinn", m, ds)
        losses[m] = [float(trainer.train_step(*_batch(data))) for _ in range(3)]
        assert trainer.traces["train"] == 1
        assert trainer.traces["physics"] == (1 if m == "physics" else 0)  # its own XLA function, traced once
    np.testing.assert_allclose(losses[mode], losses["off"], rtol=1e-4)


def test_a_compiled_step_traced_past_its_limit_raises_retraced():
    """One guard for every compiled function (ptycho.nets.xla.compile_step): the call that
    traces it once too often raises, also for a head compiled inside another step."""
    from ptycho.nets.xla import Retraced, compile_physics, compile_step

    step = compile_step(lambda x: x * 2.0, "jit", name="doubling step")
    step(tf.ones(3))
    step(tf.ones(3))
    assert step.experimental_get_tracing_count() == 1
    with pytest.raises(Retraced, match=r"the doubling step was traced 2 times \(at most 1\)"):
        step(tf.ones(4))
    free = compile_step(lambda x: x + 1.0, "off", max_traces=None)
    for k in (1, 2, 3):
        free(tf.ones(k))
    assert free.experimental_get_tracing_count() == 3
    head = compile_physics(lambda x: x * 3.0, "physics", name="head")
    outer = compile_step(lambda x: head(x), "off", max_traces=None)
    outer(tf.ones(2))
    with pytest.raises(Retraced, match="the head was traced 2 times"):
        outer(tf.ones(5))  # raised by the outer call, not wrapped by TensorFlow's tracing
    outer(tf.ones(2))  # nothing pending afterwards


def test_a_train_step_fed_another_batch_shape_raises_retraced():
    from ptycho.nets.xla import Retraced

    trainer, data = _trainer("pinn", "off")
    trainer.train_step(*_batch(data, 4))
    with pytest.raises(Retraced, match="the train step was traced 2 times"):
        trainer.train_step(*_batch(data, 3))


_CLUSTER_SCRIPT = """
import sys
import numpy as np
from ptycho.config import SimulationConfig
from ptycho.nets.models import ModelConfig
from ptycho.data.simulate import simulate_split
from ptycho.nets.train import TrainConfig, Trainer, prepare
ds = simulate_split(SimulationConfig(n=16, object_size=40, n_lines=40, nphotons=1e6), "train")
data = prepare(ds, "pinn")
t = Trainer(ModelConfig(filters=2), TrainConfig(batch_size=4, xla=sys.argv[1]), ds.n, 4, ds.probe, data.physics)
t.train_step(data.inputs[:4], data.offsets[:4], {"counts": data.targets["counts"][:4]})
"""


@pytest.mark.parametrize(("mode", "clustered"), [("auto", True), ("off", False), ("physics", False)])
def test_auto_mode_really_auto_clusters_and_the_others_do_not(mode, clustered, tmp_path):
    """TensorFlow's own dump of the graphs its MarkForCompilation pass annotated: the
    auto mode's step is cut into XLA clusters, the off and physics steps are not
    (physics compiles its head through jit_compile, which is not clustering)."""
    import os
    import subprocess
    import sys

    from ptycho.nets.xla import count_clusters, xla_flags_environment

    env = dict(os.environ, TF_DUMP_GRAPH_PREFIX=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2")
    env["TF_XLA_FLAGS"] = xla_flags_environment({})["TF_XLA_FLAGS"] + " --tf_xla_clustering_debug"
    done = subprocess.run(
        [sys.executable, "-c", _CLUSTER_SCRIPT, mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (count_clusters(str(tmp_path)) > 0) is clustered


def test_pinn_loss_gradient_matches_finite_differences_on_a_tiny_case():
    """d(Poisson NLL)/d(object) through reassembly, extraction, probe and FFT, float64:
    the gradients item's own finite-difference check, at two seeds."""
    from ptycho.study.checklist.gradients import finite_difference_check

    for seed in (0, 5):
        result = finite_difference_check(seed)
        assert result.points == 8 and result.max_rel < 1e-5, result


@pytest.mark.parametrize("mode", MODES)
def test_inference_never_recompiles_across_sample_counts(mode):
    from ptycho.nets.infer import Predictor

    trainer, data = _trainer("pinn", mode)
    predictor = Predictor(trainer.network, batch_size=16, mode=mode)
    rng = np.random.default_rng(0)
    direct = {}
    for count in (1, 7, 16, 100, 37):
        x = rng.standard_normal((count,) + data.inputs.shape[1:]).astype(np.float32)
        amp, phase = predictor(x)
        assert amp.shape == (count, 8, 8, 4) and phase.shape == amp.shape
        ref_amp, _ = trainer.network(x, training=False)
        direct[count] = np.abs(amp - ref_amp.numpy()).max()
    assert predictor.traces == 1
    assert max(direct.values()) <= 1e-5


def test_every_modes_predictions_agree_with_off():
    from ptycho.nets.infer import Predictor

    trainer, data = _trainer("pinn", "jit")
    x = data.inputs[:9]
    ref = Predictor(trainer.network, 4, "off")(x)
    for mode in MODES[1:]:
        for u, v in zip(Predictor(trainer.network, 4, mode)(x), ref, strict=True):
            assert np.abs(u - v).max() <= 1e-5, mode


@pytest.mark.parametrize("kind", ["pinn", "baseline"])
def test_training_traces_the_step_once_and_writes_checkpoint_and_history(kind, tmp_path):
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, train

    ds = _tiny_dataset()
    meta = train(
        ds,
        ModelConfig(kind=kind, filters=2),
        TrainConfig(epochs=2, batch_size=8, xla=True, fail_on_collapse=False),
        tmp_path,
        progress=False,
    )
    assert meta["traces"]["train"] == 1
    assert len(meta["history"]) == 2
    saved = json.loads((tmp_path / "model.json").read_text())
    assert saved["model"]["kind"] == kind and saved["train"]["xla"] == "jit"
    assert (tmp_path / "model.keras").exists()
    assert saved["timing"]["compile_s"] > 0 and len(saved["timing"]["step_times_s"]) > 0
    # the validation loss read train.val_checks times per epoch (time to quality reads the
    # crossing between them), the epoch's end being its history's; no reading is a timed step
    steps = saved["n_train"] // 8
    from ptycho.nets.train import check_steps

    per_epoch = check_steps(steps, saved["train"]["val_checks"])
    assert [p["step"] for p in saved["val_curve"]] == [e * steps + k for e in range(2) for k in per_epoch]
    ends = [p["val_loss"] for p in saved["val_curve"] if p["step"] % steps == 0]
    assert ends == [h["val_loss"] for h in saved["history"]]
    assert len(saved["timing"]["step_times_s"]) == 2 * steps - 1  # the compiling step apart


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, TrainingDiverged, train

    ds = _tiny_dataset()
    cfg = (ModelConfig(filters=2), TrainConfig(epochs=1, batch_size=8, xla=False, fail_on_collapse=False))
    train(ds, *cfg, tmp_path, progress=False)
    before = (tmp_path / "model.keras").read_bytes()
    original = Trainer.loss_terms

    def poisoned(self, *args, **kwargs):
        return original(self, *args, **kwargs) * float("nan")

    monkeypatch.setattr(Trainer, "loss_terms", poisoned)
    with pytest.raises(TrainingDiverged, match="last good checkpoint"):
        train(ds, *cfg, tmp_path, progress=False)
    assert (tmp_path / "model.keras").read_bytes() == before


def test_group_canvas_without_padding_is_exact_for_offsets_below_a_quarter_patch():
    """Objects fill only the central N/2, so small offsets need no canvas padding."""
    from ptycho.physics.forward_tf import canvas_pad_for

    rng = np.random.default_rng(2)
    n, c = 32, 4
    centre = np.zeros((3, n, n, c), np.complex64)
    centre[:, 8:24, 8:24, :] = rng.uniform(0.3, 1, (3, 16, 16, c)) * np.exp(1j * rng.uniform(-1, 1, (3, 16, 16, c)))
    offsets = rng.uniform(-3.0, 3.0, (3, c, 2)).astype(np.float32)
    probe = np.ones((n, n), np.complex64) / n
    assert canvas_pad_for(offsets, n) == 0
    assert canvas_pad_for(np.array([[[9.5, 0.0]]]), n) == 3
    for xla in (True, False):
        padded = forward_tf.predicted_amplitude(centre, offsets, probe, tf.constant(0.0), xla=xla, canvas_pad=n // 4)
        tight = forward_tf.predicted_amplitude(centre, offsets, probe, tf.constant(0.0), xla=xla, canvas_pad=0)
        assert np.abs(padded.numpy() - tight.numpy()).max() <= 1e-6 * np.abs(padded.numpy()).max()


@pytest.mark.parametrize("pinn_loss", ["mae", "poisson"])
def test_gradients_checklist_item_runs_for_either_pinn_loss(pinn_loss):
    from ptycho.study.checklist.gradients import gradients

    record = gradients(1e-4, 32, pinn_loss=pinn_loss)
    assert record.status == "PASS" and record.value <= 1.0  # the worst difference over its limit
    assert record.evidence["finite_differences"]["max_rel"] <= 1e-4
    assert set(record.evidence["models"]) == {"pinn", "baseline"}
    for model in record.evidence["models"].values():
        assert set(model["comparisons"]) == {"jit", "auto", "physics"}  # float32 only: modes vs off
        assert all(c["worst"] <= 1e-4 and c["judged"] == "weights and inputs" for c in model["comparisons"].values())


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_network_depth_sets_the_code_width_and_keeps_the_output_shape(depth):
    from ptycho.nets.models import ModelConfig, build_network

    net = build_network(32, 4, 4, filters=2, pooling="avg", seed=0, depth=depth, mixing=0)
    amp, phase = net(np.zeros((1, 32, 32, 4), np.float32))
    assert amp.shape == phase.shape == (1, 16, 16, 4)
    pools = [layer for layer in net.layers if "pooling" in layer.name]
    assert len(pools) == depth and pools[-1].output.shape[1] == 32 // 2**depth
    with pytest.raises(ValueError, match="multiple of 16"):
        build_network(40, 1, 1, filters=2, pooling="avg", seed=0, depth=4, mixing=0)
    with pytest.raises(ConfigError, match="model.depth"):
        ModelConfig(depth=5)


@pytest.mark.parametrize("mixing", [0, 1])
def test_code_mixing_lets_every_output_pixel_see_the_whole_pattern(mixing, tmp_path):
    """The network inverts a Fourier transform: without mixing, the centre of the output
    cannot depend on the corner of the diffraction pattern (finite receptive field);
    with one mixing layer it does. The layer is plain Keras (the model reloads)."""
    import keras

    from ptycho.nets.models import ModelConfig, build_network

    net = build_network(64, 1, 1, filters=2, pooling="avg", seed=0, depth=2, mixing=mixing)
    x = tf.Variable(np.random.default_rng(0).random((1, 64, 64, 1), np.float32))
    with tf.GradientTape() as tape:
        amp, phase = net(x)
        centre = amp[0, 16, 16, 0] + phase[0, 16, 16, 0]
    grad = tape.gradient(centre, x).numpy()[0, :, :, 0]
    assert np.abs(grad[32, 32]) > 0  # the matching input pixel always matters
    corner = np.abs(grad[:4, :4]).max()
    assert (corner > 0) == bool(mixing)
    net.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")  # safe mode: no custom code needed
    np.testing.assert_array_equal(again(x)[0].numpy(), amp.numpy())
    with pytest.raises(ConfigError, match="model.mixing"):
        ModelConfig(mixing=5)


def test_a_training_holds_out_at_least_one_sample_for_its_validation_loss():
    """Few samples and a small fraction rounded the validation split to nothing: every epoch
    logged 'val loss nan' and the convergence item died on it."""
    from ptycho.nets.train import TrainConfig, _split

    split = _split(12, TrainConfig(validation_fraction=0.01, batch_size=4), np.random.default_rng(0))
    assert len(split.val) == 1 and len(split.train) == 11 and split.steps == 2
    assert len(_split(100, TrainConfig(validation_fraction=0.1), np.random.default_rng(0)).val) == 10
    with pytest.raises(ConfigError, match="validation_fraction"):
        TrainConfig(validation_fraction=0.0)
