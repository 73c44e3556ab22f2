"""train -> infer -> stitch -> evaluate through the CLI on a tiny dataset; bad inputs."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")


def ptycho(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ptycho", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    r = ptycho(
        "simulate",
        "--quiet",
        "--train",
        d / "train.h5",
        "--test",
        d / "test.h5",
        "--n",
        16,
        "--object-size",
        40,
        "--stride-test",
        6,
        "--nphotons",
        1e6,
        "--probe-kind",
        "defocused",
    )
    assert r.returncode == 0, r.stderr
    return d


def test_train_infer_stitch_evaluate_chain(tiny):
    d = tiny
    r = ptycho(
        "--threads",
        1,
        "train",
        "--quiet",
        "--dataset",
        d / "train.h5",
        "--out",
        d / "model",
        "--kind",
        "pinn",
        "--filters",
        2,
        "--epochs",
        2,
        "--batch-size",
        8,
        "--xla",
        "true",
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((d / "model" / "model.json").read_text())
    assert meta["traces"] == {"train": 1, "eval": 1, "physics": 0} and meta["initial_val_loss"] is not None
    # --quiet drops the progress bars, not the news: one line per epoch (where the run
    # is, how fast, how long is left), then the summary.
    epochs = [line for line in r.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"], r.stdout
    assert all("val loss" in line and "s/step" in line and "min left" in line for line in epochs)
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
    # --model takes the folder 'train' wrote, as infer's does, or its model.json: the same losses
    from ptycho.data.ptychodus import read_product

    losses = [e["train_loss"] for e in meta["history"]]
    for given, products in ((d / "model", d / "p1"), (d / "model" / "model.json", d / "p2")):
        args = ("--stitched", d / "st.npz", "--dataset", d / "test.h5", "--out", d / "m2.json")
        r = ptycho("evaluate", *args, "--product-dir", products, "--model", given)
        assert r.returncode == 0, r.stderr
        product = read_product(products / "object-0.h5")
        assert list(product["loss_epochs"]) == [1, 2] and list(product["loss_values"]) == pytest.approx(losses)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("infer", "--model", "{d}/nomodel", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz"),
            "no trained model here",
        ),
        (
            ("stitch", "--reconstruction", "{d}/train.h5", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz"),
            "not a readable .npz artefact",
        ),
        (
            ("evaluate", "--stitched", "{d}/missing.npz", "--dataset", "{d}/test.h5", "--out", "{d}/x.json"),
            "no such file",
        ),
        (("train", "--dataset", "{d}/test.h5", "--out", "{d}/m", "--kind", "unet"), "config key 'model.kind'"),
        (("train", "--dataset", "{d}/test.h5", "--out", "{d}/m", "--epochs", "0"), "config key 'train.epochs'"),
        (
            ("infer", "--model", "{d}/m", "--dataset", "{d}/test.h5", "--out", "{d}/x.npz", "--xla", "maybe"),
            "'maybe' is not an XLA mode; choose one of off, jit, auto, physics",
        ),
        (
            ("train", "--dataset", "{d}/test.h5", "--out", "{d}/m", "--xla", "fast"),
            "config key 'train.xla': 'fast' is not an XLA mode",
        ),
        (("bench", "--modes", "off", "fast"), "'fast' is not an XLA mode"),
    ],
)
def test_bad_inputs_are_one_line_errors_and_write_nothing(tiny, args, message):
    r = ptycho(*(a.format(d=tiny) for a in args))
    assert r.returncode != 0
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not (tiny / "x.npz").exists() and not (tiny / "x.json").exists()


def test_infer_refuses_a_dataset_of_another_patch_size(tiny, tmp_path):
    r = ptycho(
        "simulate",
        "--quiet",
        "--train",
        tmp_path / "a.h5",
        "--test",
        tmp_path / "b.h5",
        "--n",
        32,
        "--object-size",
        48,
        "--nphotons",
        1e6,
    )
    assert r.returncode == 0
    r = ptycho(
        "--threads",
        1,
        "train",
        "--quiet",
        "--dataset",
        tiny / "train.h5",
        "--out",
        tmp_path / "m",
        "--filters",
        2,
        "--epochs",
        1,
        "--batch-size",
        8,
        "--xla",
        "false",
    )
    assert r.returncode == 0, r.stderr
    r = ptycho("infer", "--model", tmp_path / "m", "--dataset", tmp_path / "b.h5", "--out", tmp_path / "x.npz")
    assert r.returncode == 1 and "differs from the model's N=16" in r.stderr


def test_checks_figures_and_report_from_the_cli_outputs_of_two_arms(tiny, tmp_path):
    """The report's jobs, outside Snakemake: two modes of a tiny PINN, every item, figures, report."""
    d, t = tiny, tmp_path
    for arm in ("true", "off"):  # a legacy boolean still means jit
        name = f"pinn-{'jit' if arm == 'true' else 'off'}-s0"
        r = ptycho(
            "--threads",
            1,
            "train",
            "--quiet",
            "--dataset",
            d / "train.h5",
            "--out",
            t / name,
            "--kind",
            "pinn",
            "--filters",
            2,
            "--epochs",
            2,
            "--batch-size",
            8,
            "--xla",
            arm,
        )
        assert r.returncode == 0, r.stderr
        for args in (
            ("infer", "--model", t / name, "--dataset", d / "test.h5", "--out", t / "reconstructions" / f"{name}.npz"),
            (
                "stitch",
                "--reconstruction",
                t / "reconstructions" / f"{name}.npz",
                "--dataset",
                d / "test.h5",
                "--out",
                t / "stitched" / f"{name}.npz",
            ),
            (
                "evaluate",
                "--stitched",
                t / "stitched" / f"{name}.npz",
                "--dataset",
                d / "test.h5",
                "--out",
                t / "metrics" / f"{name}.json",
            ),
        ):
            r = ptycho(*args)
            assert r.returncode == 0, r.stderr
    models = [t / n / "model.json" for n in ("pinn-jit-s0", "pinn-off-s0")]
    metrics = sorted((t / "metrics").glob("*.json"))
    r = ptycho(
        "bench",
        "--dataset",
        d / "train.h5",
        "--models",
        "pinn",
        "--like",
        *models,
        "--modes",
        "jit",
        "--precisions",
        "float32",
        "--warmup",
        1,
        "--repeats",
        4,
        "--component-repeats",
        2,
        "--train-batches",
        4,
        "--infer-batches",
        2,
        "--batch-repeats",
        3,
        "--sweep-precisions",
        "float32",
        "--shared-jobs",
        2,
        "--out",
        t / "bench.json",
    )
    assert r.returncode == 0, r.stderr
    bench = json.loads((t / "bench.json").read_text())
    timed = bench["arms"]
    assert [(a["model"], a["mode"]) for a in timed] == [("pinn", "off"), ("pinn", "jit")]  # off: the reference
    for a in timed:  # every arm: both contexts, the three components, memory, inference, traced once
        assert a["step_s"]["n"] == 4 and a["shared"]["step_s"]["n"] >= 4 and a["compile_s"] > 0
        assert set(a["components"]) == {"network", "physics", "optimizer"}
        assert a["peak_rss_mb"] >= a["baseline_rss_mb"] > 0 and a["traces"]["train"] == 1
        assert a["infer_patterns_per_s"] > 0 and a["naive_patterns_per_s"] > 0
        assert a["batches"]["train"]["4"]["n"] == 3 and a["batches"]["infer"]["2"]["n"] == 3  # the batch sweep
    assert bench["contexts"]["shared"]["jobs"] == 2  # the pipeline's schedule: two trainings at once
    assert set(bench["ratios"]["pinn"]["jit"]["xla_batches"]) == {"train", "infer"}
    assert set(bench["ratios"]["pinn"]) == {"off", "jit"} and set(bench["contexts"]) == {"alone", "shared"}
    assert "XLA's own effect on the PINN train step, alone" in r.stdout and "break-even" in r.stdout
    trained = json.loads(models[0].read_text())
    assert all(a["model_config"] == trained["model"] and a["batch_size"] == 8 for a in timed)  # what was trained
    for item, extra in (
        ("accuracy", ("--models", *models, "--dataset", d / "test.h5")),
        ("gradients", ("--loss", "mae", "--modes", "jit")),  # the arms' mode (every mode: tests/test_tf_core.py)
        ("convergence", ("--models", *models)),
        ("quality", ("--metrics", *metrics)),
        ("speedup", ("--bench", t / "bench.json", "--models", *models)),
    ):
        r = ptycho("check", item, "--threshold", 1.0, *extra, "--out", t / "checks" / f"{item}.json")
        assert r.returncode == 0, r.stderr
    accuracy = json.loads((t / "checks" / "accuracy.json").read_text())
    inference = accuracy["evidence"]["trained_inference"]
    assert set(inference) == {"pinn-jit-s0", "pinn-off-s0"}
    for r in inference.values():  # float32 networks, every mode vs off (physics predicts as off)
        assert set(r["comparisons"]) == {"jit", "auto"} and r["samples"] > 0
        assert all(0 <= c["max_abs"] < 1e-4 for c in r["comparisons"].values())
    speed = json.loads((t / "checks" / "speedup.json").read_text())["evidence"]["intervals"]
    assert set(speed) == {
        f"PINN jit vs off at fp32, {w}" for w in ("train step alone", "train step, pipeline's schedule", "inference")
    }

    # The conventional solver beside them: both modes from a flat start, and warm-started
    # from the off arm's stitched object.
    r = ptycho(
        "--threads",
        1,
        "solve",
        "--dataset",
        d / "test.h5",
        "--modes",
        "off",
        "jit",
        "--iterations",
        6,
        "--start",
        f"pinn={t / 'stitched' / 'pinn-off-s0.npz'}",
        "--out",
        t / "solve.json",
    )
    assert r.returncode == 0, r.stderr
    recs = sorted((t / "reconstructions").glob("*.npz"))
    r = ptycho(
        "figures",
        "--dataset",
        d / "test.h5",
        "--stitched",
        *sorted((t / "stitched").glob("*.npz")),
        "--metrics",
        *metrics,
        "--models",
        *models,
        "--bench",
        t / "bench.json",
        "--reconstructions",
        *recs,
        "--solver",
        t / "solve.json",
        "--out-dir",
        t / "figures",
    )
    assert r.returncode == 0, r.stderr
    pngs = sorted((t / "figures").glob("*.png"))
    from ptycho.study.report import figures

    assert [p.stem for p in pngs] == sorted(name for name, _, _ in figures())
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)

    (t / "config.json").write_text(json.dumps({"preset": "tiny"}))
    r = ptycho(
        "report",
        "--checks",
        *sorted((t / "checks").glob("*.json")),
        "--metrics",
        *metrics,
        "--models",
        *models,
        "--figures",
        *pngs,
        "--config-json",
        t / "config.json",
        "--reconstructions",
        *recs,
        "--solver",
        t / "solve.json",
        "--out-dir",
        t / "reports",
    )
    assert r.returncode == 0, r.stderr
    html = (t / "reports" / "validation.html").read_text()
    assert html.count("data:image/png;base64,") == len(pngs)
    record = json.loads((t / "reports" / "validation.json").read_text())
    assert record["figures"] == [p.stem for p in pngs]
    # The solver's section: both modes, the networks beside it with their inference time,
    # its sentence under the verdict, and the warm start's table.
    solver = record["solver"]
    assert set(solver["modes"]) == {"off", "jit"} and set(solver["ratios"]) == {"jit"}
    assert {n["arm"] for n in solver["networks"]} == {"pinn-off-s0", "pinn-jit-s0"}
    assert all(n["seconds_per_object"] > 0 for n in solver["networks"])
    assert {(w["mode"], w["start"]) for w in solver["warm_start"]} == {("off", "pinn"), ("jit", "pinn")}
    assert '<section id="solver"><h2>Conventional solver</h2>' in html
    assert html.count("The iterative solver (apg") == 2  # the first lines and its section

    # Bad inputs: one line, non-zero, nothing written.
    r = ptycho(
        "figures",
        "--dataset",
        d / "test.h5",
        "--stitched",
        *sorted((t / "stitched").glob("*.npz")),
        "--metrics",
        *metrics,
        "--models",
        *models,
        "--bench",
        t / "checks" / "accuracy.json",
        "--out-dir",
        t / "nofigures",
    )
    said = r.stderr.strip().splitlines()[-1]  # the record's stamp names its job
    assert r.returncode != 0 and said.endswith(
        "accuracy.json is an output of check_accuracy, not of bench; pass an output of bench"
    )
    assert not (t / "nofigures").exists()
    (t / "mystery.png").write_bytes(b"not a png")
    for bad, message in ((t / "mystery.png", "not a figure of the report"), (t / "figures" / "frc.txt", "cannot read")):
        r = ptycho(
            "report",
            "--checks",
            *sorted((t / "checks").glob("*.json")),
            "--metrics",
            *metrics,
            "--models",
            *models,
            "--figures",
            bad,
            "--config-json",
            t / "config.json",
            "--out-dir",
            t / "r2",
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1 and message in lines[0], r.stderr
        assert not (t / "r2").exists()


def test_accuracy_with_trained_models_needs_the_dataset(tiny, tmp_path):
    r = ptycho("check", "accuracy", "--threshold", 1e-5, "--models", tiny / "model.json", "--out", tmp_path / "a.json")
    assert r.returncode != 0 and "--models needs --dataset" in r.stderr
    assert not (tmp_path / "a.json").exists()


def test_scaling_times_each_step_at_each_size_and_fits_the_growth_exponent(tmp_path):
    # The smoke preset, sizes 1 and 2: the work (patterns, steps, patches) doubles, and
    # the record carries a time per size and the exponent the docs quote.
    from ptycho.cli import main
    from ptycho.study import scaling

    out = tmp_path / "scaling.json"
    assert main(["scaling", "--preset", "smoke", "--sizes", "1", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    for step, r in result["steps"].items():
        assert len(r["seconds"]) == 2 and all(t > 0 for t in r["seconds"]), step
        assert r["work"][1] >= 2 * r["work"][0] - 1, step  # twice the objects, twice the work
        assert math.isfinite(r["slope"])
    assert scaling.slope([1, 2, 4], [3.0, 6.0, 12.0]) == pytest.approx(1.0)
    assert scaling.slope([1, 2, 4], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
