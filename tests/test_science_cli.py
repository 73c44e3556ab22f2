"""train -> infer -> stitch -> evaluate through the CLI on a tiny dataset; bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")


def ptycho(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ptycho", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    r = ptycho("simulate", "--quiet", "--train", d / "train.h5", "--test", d / "test.h5", "--n", 16,
               "--object-size", 40, "--stride-test", 6, "--nphotons", 1e6, "--probe-kind", "defocused")
    assert r.returncode == 0, r.stderr
    return d


def test_train_infer_stitch_evaluate_chain(tiny):
    d = tiny
    r = ptycho("--threads", 1, "train", "--quiet", "--dataset", d / "train.h5", "--out", d / "model", "--kind", "pinn",
               "--filters", 2, "--epochs", 2, "--batch-size", 8, "--xla", "true")
    assert r.returncode == 0, r.stderr
    meta = json.loads((d / "model" / "model.json").read_text())
    assert meta["traces"] == {"train": 1, "eval": 1} and meta["initial_val_loss"] is not None
    r = ptycho("infer", "--model", d / "model", "--dataset", d / "test.h5", "--out", d / "recon.npz")
    assert r.returncode == 0, r.stderr
    with np.load(d / "recon.npz") as z:
        assert z["patches"].shape[1:] == (8, 8) and z["patterns"] > 0
    r = ptycho("stitch", "--reconstruction", d / "recon.npz", "--dataset", d / "test.h5", "--out", d / "st.npz")
    assert r.returncode == 0, r.stderr
    r = ptycho("evaluate", "--stitched", d / "st.npz", "--dataset", d / "test.h5", "--out", d / "metrics.json")
    assert r.returncode == 0, r.stderr
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["n_images"] == 1 and -1 <= metrics["mean"]["amp_ssim"] <= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("infer", "--model", "{d}/nomodel", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz"), "no trained model here"),
        (("stitch", "--reconstruction", "{d}/train.h5", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz"),
         "not a readable .npz artefact"),
        (("evaluate", "--stitched", "{d}/missing.npz", "--dataset", "{d}/test.h5", "--out", "{d}/x.json"), "no such file"),
        (("train", "--dataset", "{d}/test.h5", "--out", "{d}/m", "--kind", "unet"), "config key 'model.kind'"),
        (("train", "--dataset", "{d}/test.h5", "--out", "{d}/m", "--epochs", "0"), "config key 'train.epochs'"),
        (("infer", "--model", "{d}/m", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz", "--xla", "maybe"),
         "expected true or false"),
    ],
)
def test_bad_inputs_are_one_line_errors_and_write_nothing(tiny, args, message):
    r = ptycho(*(a.format(d=tiny) for a in args))
    assert r.returncode != 0
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not (tiny / "x.npz").exists() and not (tiny / "x.json").exists()


def test_infer_refuses_a_dataset_of_another_patch_size(tiny, tmp_path):
    r = ptycho("simulate", "--quiet", "--train", tmp_path / "a.h5", "--test", tmp_path / "b.h5", "--n", 32,
               "--object-size", 48, "--nphotons", 1e6)
    assert r.returncode == 0
    r = ptycho("--threads", 1, "train", "--quiet", "--dataset", tiny / "train.h5", "--out", tmp_path / "m", "--filters", 2,
               "--epochs", 1, "--batch-size", 8, "--xla", "false")
    assert r.returncode == 0, r.stderr
    r = ptycho("infer", "--model", tmp_path / "m", "--dataset", tmp_path / "b.h5", "--out", tmp_path / "x.npz")
    assert r.returncode == 1 and "differs from the model's N=16" in r.stderr
