"""The losses that bound a training: the physics head reproduces the data from the true
object, the convergence item compares excesses over that floor (valid for the Poisson
loss), and a training that ends no better than a featureless object is a failure."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ptycho.study.checklist.convergence import convergence

pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def bright(small_cfg):
    """The shared small pair's train split at 1e9 photons: noise is 0.003 % of a count."""
    from ptycho.data.simulate import simulate

    return simulate(replace(small_cfg, nphotons=1e9))["train"]


def _trainer(ds, kind="pinn", **model):
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare

    data = prepare(ds, kind)
    cfg = TrainConfig(epochs=1, batch_size=8, xla="off")
    return Trainer(
        ModelConfig(kind=kind, filters=2, **model), cfg, ds.n, data.inputs.shape[-1], ds.probe, data.physics
    ), data


def test_the_true_object_through_the_physics_head_reproduces_the_simulated_amplitudes(bright):
    """Pins the group average over the patches' own support: counting the zero padding
    around the network's central N/2 dimmed the object near each rim, 17 % off."""
    from ptycho.nets.inputs import true_outputs

    trainer, data = _trainer(bright)
    amp, phase = true_outputs(bright, "pinn")
    b = np.arange(16)
    pred = trainer.head_amplitude(amp[b], phase[b], data.offsets[b]).numpy()
    measured = np.sqrt(data.targets["counts"][b])
    assert np.abs(pred - measured).sum() / measured.sum() < 0.01
    assert (pred**2).sum() / (measured**2).sum() == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("loss", ["mae", "poisson"])
def test_the_floor_is_a_perfect_reconstruction_and_lies_below_a_featureless_object(bright, pair, loss):
    from ptycho.nets.bounds import loss_bounds

    trainer, data = _trainer(pair["train"], loss=loss)
    idx = np.arange(len(data.inputs))[:40]
    b = loss_bounds(trainer, pair["train"], data, idx)
    assert b["floor_kind"] == "true object" and b["floor"] < b["flat"]
    # Without a ground truth (measured data), the saturated model: lower still.
    blind = replace(pair["train"], attrs={**pair["train"].attrs, "ground_truth": False})
    assert not blind.has_ground_truth
    s = loss_bounds(trainer, blind, data, idx)
    assert s["floor_kind"] == "saturated" and s["floor"] <= b["floor"] + 1e-6 and s["flat"] == pytest.approx(b["flat"])
    if loss == "poisson":  # the likelihood's offset: no zero to compare against
        assert b["floor"] < 0
    else:  # at 1e9 photons a perfect reconstruction fits the MAE to noise
        bt, bd = _trainer(bright, loss=loss)
        assert loss_bounds(bt, bright, bd, idx)["floor"] < 0.01 * b["flat"]


def test_the_baselines_floor_is_zero():
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate
    from ptycho.nets.bounds import loss_bounds

    ds = simulate(SimulationConfig(n=16, gridsize=1, object_size=40, n_lines=40, stride_train=4, nphotons=1e6))["train"]
    trainer, data = _trainer(ds, kind="baseline")
    b = loss_bounds(trainer, ds, data, np.arange(20))
    assert b["floor"] == pytest.approx(0.0, abs=1e-6) and b["flat"] > 0.1


def _history(final):
    return [{"epoch": 1, "train_loss": -2.0, "val_loss": -2.0}, {"epoch": 2, "train_loss": final, "val_loss": final}]


def test_convergence_on_the_poisson_loss_compares_excesses_over_the_floor():
    """Losses near -2.23, a perfect reconstruction's -2.30: an arm 0.02 higher on every
    seed is 29 % worse in excess (0.9 % of the loss itself: EQUIVALENT by the former rule)."""
    off = {0: -2.230, 1: -2.232, 2: -2.228}
    floors = dict.fromkeys([f"pinn-{m}-s{s}" for m in ("off", "jit") for s in off], -2.30)
    initial = dict.fromkeys(floors, -1.0)

    def run(shift):
        hist = {f"pinn-off-s{s}": _history(v) for s, v in off.items()}
        hist |= {f"pinn-jit-s{s}": _history(v + shift + 0.0005 * (s - 1)) for s, v in off.items()}
        return convergence(hist, 0.05, initial, floors=floors)

    equal, shifted = run(0.0), run(0.02)
    assert equal.status == "PASS" and "NOT WORSE" in equal.summary
    assert shifted.status == "FAIL" and "WORSE by more than" in shifted.summary
    assert shifted.evidence["comparisons"]["pinn-jit"]["difference"] == pytest.approx(0.02 / 0.07, rel=0.02)
    # The former rule (no floor: the loss relative to itself) called the shift equal.
    former = convergence(
        {
            **{f"pinn-off-s{s}": _history(v) for s, v in off.items()},
            **{f"pinn-jit-s{s}": _history(v + 0.02) for s, v in off.items()},
        },
        0.05,
        initial,
    )
    assert former.status == "PASS"


def test_a_collapsed_training_is_reported_as_failed_not_finished(pair, tmp_path):
    """A learning rate of 1 saturates the network's sigmoid: it ends no better than a
    blank. Recorded: model.json says FAILED with both losses; raised: one line."""
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, TrainingCollapsed, train

    cfg = ModelConfig(kind="pinn", filters=2), TrainConfig(epochs=2, batch_size=8, learning_rate=1.0, xla="off")
    meta = train(pair["train"], *cfg, tmp_path / "rec", progress=False, on_diverge="record")
    assert meta["status"] == "FAILED" and meta["failure"].startswith("collapsed: the final validation loss ")
    saved = json.loads((tmp_path / "rec" / "model.json").read_text())
    assert saved["status"] == "FAILED" and saved["history"][-1]["val_loss"] >= saved["loss_bounds"]["flat"]
    with pytest.raises(TrainingCollapsed, match=r"^collapsed: .* not below a featureless object's .*marked FAILED$"):
        train(pair["train"], *cfg, tmp_path / "raised", progress=False)
    # Where trainings are plumbing (the smoke preset), the check is off.
    quiet = train(pair["train"], cfg[0], replace(cfg[1], fail_on_collapse=False), tmp_path / "off", progress=False)
    assert "status" not in quiet
