"""A trained model applies at any dose: `infer` normalises by the data it is given.

The networks read sqrt(counts / mean count); the photons per pattern scale the counts
and their mean alike, so the input, and the reconstruction, do not depend on the dose.
Normalised by the training split's mean instead (as before issue #33), data taken at 100
times fewer photons reads 100 times too dark.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def model_1e6(pair, tmp_path_factory):
    """A PINN trained (briefly: not yet better than a blank, which the check of a
    collapsed training would refuse) on the shared pair's train split, at 1e6 photons."""
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, train

    out = tmp_path_factory.mktemp("model-1e6")
    train(
        pair["train"],
        ModelConfig(kind="pinn", filters=4),
        TrainConfig(epochs=3, batch_size=8, fail_on_collapse=False),
        out,
        progress=False,
    )
    return out


def _patches(model_dir, ds, norm=None):
    from ptycho.nets.infer import Predictor, load_network
    from ptycho.nets.inputs import prepare

    amp, phase = Predictor(load_network(model_dir), 8, "off")(prepare(ds, "pinn", norm=norm).inputs)
    return amp * np.exp(1j * phase)


def test_the_same_patterns_at_a_thousand_times_the_dose_reconstruct_the_same(model_1e6, pair):
    from ptycho.nets.infer import reconstruct

    test = pair["test"]
    brighter = replace(test, diffraction=test.diffraction * 1000)  # the same patterns, 1e3 the photons
    a, b = reconstruct(model_1e6, test), reconstruct(model_1e6, brighter)
    assert b.intensity_norm == pytest.approx(1000 * a.intensity_norm, rel=1e-6)
    np.testing.assert_allclose(b.patches, a.patches, atol=1e-6)


def test_a_model_trained_at_1e6_photons_reads_1e4_photon_data_at_its_own_intensity(model_1e6, pair, small_cfg):
    """The test object taken at 1e4 photons (the same object and scan, another dose): its
    reconstruction stays near the 1e6 one, where the training split's norm would make it
    100 times too dark and the output far off."""
    from ptycho.data.simulate import simulate
    from ptycho.nets.infer import reconstruct
    from ptycho.nets.state import load_meta

    low = simulate(replace(small_cfg, nphotons=1e4))["test"]
    assert np.array_equal(low.objects, pair["test"].objects) and np.array_equal(low.positions, pair["test"].positions)
    rec = reconstruct(model_1e6, low)
    train_norm = load_meta(model_1e6)["physics"]["intensity_norm"]
    own = low.counts.sum(dtype=np.float64) / low.counts.size
    assert rec.intensity_norm == pytest.approx(own, rel=1e-6) and rec.intensity_norm < train_norm / 50
    reference = _patches(model_1e6, pair["test"])
    at_own = np.abs(_patches(model_1e6, low) - reference).mean()
    at_training_norm = np.abs(_patches(model_1e6, low, norm=train_norm) - reference).mean()
    assert at_own < at_training_norm / 3, (at_own, at_training_norm)
