"""The accuracy and gradients items per precision: each XLA mode vs off at the same
precision, each reduced precision vs float32, each against its own limit.

A float32 comparison is judged against the item's threshold (float32 round-off); a
reduced precision's against a number of its unit round-offs, the item's second key under
``thresholds:`` (docs/physics.md sections 7 and 9). Gradients are compared variable by
variable over the whole gradient's norm, so a variable whose gradient is about zero is
not a failure of rounding noise over rounding noise.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ptycho.config import spec
from ptycho.nets.precision import EPSILON, PRECISIONS
from ptycho.study.bench.machine import CPU_FLAGS_ENV, GPU_ENV
from ptycho.study.checklist import accuracy as accuracy_item
from ptycho.study.checklist import gradients as gradients_item
from ptycho.study.checklist.comparisons import (
    comparisons,
    emulated,
    limits,
    limits_text,
    ordered,
    path_roundings,
    roundoffs,
)
from ptycho.study.checklist.differences import ForwardModel, NetworkDifference, TrainedNetwork, TranslationCase
from ptycho.study.checklist.gradients import variable_differences

BF16, FP16 = "mixed_bfloat16", "mixed_float16"


def _limits(item, aligned: float) -> dict[str, float]:
    """The item's limits at the schema's thresholds, every precision, on this machine."""
    threshold = float(spec(f"thresholds.{item.threshold}")["default"])
    return limits(PRECISIONS, threshold, roundoffs(None, item.precision_threshold), aligned=aligned)


@pytest.mark.parametrize(
    ("flags", "bf16_roundoffs"), [("avx avx2 fma", 46), ("avx2 avx512f avx512_bf16", 32), ("avx2 amx_bf16", 32)]
)
def test_a_precision_the_cpu_emulates_is_held_to_the_aligned_bound(monkeypatch, flags, bf16_roundoffs):
    """Where the CPU only emulates a reduced type its kernels accumulate in it, so the
    roundings of the longest path (R = 23 at depth 2, mixing 1) need not be independent: the
    limit is at least the aligned bound, R u for outputs and 2R u for gradients. fp16 has no
    native kernels on any of these CPUs; bf16 has them with avx512_bf16 or AMX."""
    monkeypatch.setenv(CPU_FLAGS_ENV, flags)
    monkeypatch.setenv(GPU_ENV, "none")
    assert path_roundings() == 23 and path_roundings(depth=3, mixing=0) == 30
    assert emulated(PRECISIONS) == ([BF16, FP16] if bf16_roundoffs == 46 else [FP16])
    got = limits(PRECISIONS, 1e-4, 32, aligned=2 * path_roundings())
    assert got == {"float32": 1e-4, BF16: bf16_roundoffs * EPSILON[BF16], FP16: 46 * EPSILON[FP16]}
    assert limits(PRECISIONS, 1e-5, 16, aligned=23)[FP16] == 23 * EPSILON[FP16]  # outputs: R
    assert limits(PRECISIONS, 1e-5, 64, aligned=23)[FP16] == 64 * EPSILON[FP16]  # a looser setting stands
    text = limits_text(got, 32)
    assert "fp16 0.0225 (46 u, emulated here: aligned bound)" in text
    assert ("bf16 0.125 (32 u)" in text) == (bf16_roundoffs == 32)
    monkeypatch.setenv(GPU_ENV, "8.0")  # an A100: both native, the item's own count
    assert limits(PRECISIONS, 1e-4, 32, aligned=46) == {"float32": 1e-4, BF16: 0.125, FP16: 32 * EPSILON[FP16]}


# ---------------------------------------------------------------- no TensorFlow
def test_each_mode_is_compared_with_off_at_each_precision_and_each_precision_with_float32_in_each_mode():
    got = comparisons(["off", "jit", "physics"], [BF16])
    assert [c.key for c in got] == [
        "jit",
        "physics",
        "jit-bf16",
        "physics-bf16",
        "off-bf16-vs-fp32",
        "jit-bf16-vs-fp32",
        "physics-bf16-vs-fp32",
    ]
    assert [c.label for c in got][2:5] == ["jit vs off, bf16", "physics vs off, bf16", "bf16 vs fp32, off"]
    assert got[4].reference == ("off", "float32") and got[2].reference == ("off", BF16)
    assert ordered([FP16, BF16]) == ["float32", BF16, FP16]  # float32 always, the package's order


def test_a_reduced_precision_is_judged_in_its_own_unit_roundoffs_and_float32_against_the_threshold():
    assert accuracy_item.ITEM.precision_threshold == "accuracy_precision_roundoffs"
    assert gradients_item.ITEM.precision_threshold == "gradients_precision_roundoffs"
    assert roundoffs(None, "accuracy_precision_roundoffs") == 16.0
    assert roundoffs(None, "gradients_precision_roundoffs") == 32.0
    assert roundoffs(4, "gradients_precision_roundoffs") == 4.0  # --precision-threshold wins
    assert limits([BF16, FP16], 1e-5, 16) == {"float32": 1e-5, BF16: 16 * 2.0**-8, FP16: 16 * 2.0**-11}


def test_a_variable_whose_gradient_is_about_zero_is_not_flagged_by_its_rounding_noise():
    """The relative baseline phase loss leaves the phase head's last bias an analytically
    zero gradient: its own norm is noise, so its own relative difference would fail."""
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((3, 3, 4, 4)) * 1e-2
    bias = np.array([1.4e-6])  # the sum of terms that cancel
    reference = [kernel, bias]
    other = [kernel + rng.standard_normal(kernel.shape) * 1e-9, bias + 5e-8]  # rounding noise in both
    old = [np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(other, reference, strict=True)]
    assert max(old) > 1e-4  # the old per-variable metric: 3.6e-2, a spurious FAIL at gradients_max_rel
    assert max(variable_differences(other, reference)) <= 1e-4
    wrong = [kernel * (1 + 1e-3), bias]  # a real 0.1 % error in a variable that carries the gradient
    assert max(variable_differences(wrong, reference)) > 1e-4


def test_the_verdict_is_the_worst_difference_over_its_limit_and_names_every_limit(monkeypatch):
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx2 avx512_bf16")  # bf16 native: the item's own 16 u
    monkeypatch.setenv(GPU_ENV, "none")
    monkeypatch.setattr(accuracy_item, "translation_suite", lambda seed: [_case(2e-6)])
    monkeypatch.setattr(accuracy_item, "forward_model_agreement", lambda seed, modes: ForwardModel(1e-6))
    differences = {
        "jit": _diff("jit vs off, fp32", "float32", False, 5e-6),
        "jit-bf16": _diff("jit vs off, bf16", BF16, False, 0.01),
        "off-bf16-vs-fp32": _diff("bf16 vs fp32, off", BF16, True, 0.03125),  # 8 u of 16: half its limit
    }
    trained = {"pinn-off-s0": TrainedNetwork("pinn", "float32", 4, differences)}
    monkeypatch.setattr(accuracy_item, "inference_agreement", lambda *a, **k: trained)
    record = accuracy_item.accuracy(1e-5, 16, model_dirs=["m"], modes=["jit"], precisions=[BF16])
    assert record.status == "PASS" and record.threshold == 1.0 and record.comparison == "<="
    assert record.value == pytest.approx(0.5)  # the jit-vs-off float32 5e-6 of 1e-5 ties it
    assert record.evidence["limits"] == {"float32": 1e-5, BF16: 0.0625}
    assert "limits fp32 1e-05; bf16 0.0625 (16 u)" in record.summary
    assert "bf16 vs fp32 worst 3.1e-02" in record.summary and "modes vs off at bf16 worst 1.0e-02" in record.summary
    differences["jit-bf16"] = _diff("jit vs off, bf16", BF16, False, 0.07)  # over 16 u
    trained["pinn-off-s0"] = TrainedNetwork("pinn", "float32", 4, differences)
    assert accuracy_item.accuracy(1e-5, 16, model_dirs=["m"], precisions=[BF16]).status == "FAIL"
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx avx2 fma")  # emulated: the aligned R = 23 u
    emulated_here = accuracy_item.accuracy(1e-5, 16, model_dirs=["m"], precisions=[BF16])
    assert (
        emulated_here.status == "PASS" and "bf16 0.0898 (23 u, emulated here: aligned bound)" in emulated_here.summary
    )


def _case(max_abs):
    return TranslationCase("float32", 1, "subpixel", max_abs, max_abs)


def _diff(label, precision, across, max_abs):
    return NetworkDifference(label, precision, across, max_abs, 0.0)


def test_an_unknown_precision_is_a_one_line_error_of_check(tmp_path):
    out = tmp_path / "g.json"
    cmd = [sys.executable, "-m", "ptycho", "check", "gradients", "--threshold", "1e-4", "--precisions", "bogus"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "argument --precisions: unknown precision 'bogus'; use one of float32, mixed_bfloat16" in line
    assert not out.exists()


# ---------------------------------------------------------------- trained networks
@pytest.fixture(scope="module")
def trained(pair, tmp_path_factory):
    """Two tiny PINNs trained one epoch, at float32 and at bfloat16: arms pinn-off-s0 and
    pinn-off-bf16-s0."""
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, train

    root = tmp_path_factory.mktemp("trained")
    dirs = []
    for precision in ("float32", BF16):
        out = root / precision
        cfg = TrainConfig(epochs=1, batch_size=8, xla="off", seed=0, precision=precision, fail_on_collapse=False)
        train(pair["train"], ModelConfig(kind="pinn", filters=2), cfg, out, progress=False)
        dirs.append(str(out))
    return dirs


def test_the_networks_run_are_the_trained_ones_at_their_own_precision(trained, pair):
    """One network per architecture and precision serves every model by its weights: each
    model's own-precision outputs are its saved network's, bit for bit."""
    from ptycho.nets.infer import Predictor, load_network
    from ptycho.nets.inputs import prepare

    runs = list(accuracy_item.network_outputs(trained, pair["test"], modes=[], precisions=PRECISIONS, max_samples=9))
    assert [(r.arm, r.precision) for r in runs] == [("pinn-off-s0", "float32"), ("pinn-off-bf16-s0", BF16)]
    for run, model_dir in zip(runs, trained, strict=True):
        assert set(run.patches) == {("off", p) for p in PRECISIONS}
        x = prepare(pair["test"], "pinn").inputs[:9]
        amp, phase = Predictor(load_network(model_dir), 8, "off")(x)
        np.testing.assert_array_equal(run.patches["off", run.precision], amp * np.exp(1j * phase.astype(np.float64)))


def test_every_mode_at_every_precision_agrees_with_off_and_each_precision_with_float32_at_inference(trained, pair):
    limit = _limits(accuracy_item.ITEM, aligned=path_roundings())
    out = accuracy_item.inference_agreement(
        trained, pair["test"], modes=("jit", "auto", "physics"), precisions=PRECISIONS
    )
    for arm, record in out.items():
        assert set(record.comparisons) == {
            *(f"{m}{p}" for m in ("jit", "auto") for p in ("", "-bf16", "-fp16")),
            *(f"{m}-{p}-vs-fp32" for m in ("off", "jit", "auto") for p in ("bf16", "fp16")),
        }
        for key, diff in record.comparisons.items():
            assert diff.max_abs <= limit[diff.precision], (arm, key, diff)
        # the reduced arithmetic really ran: its difference is beyond float32 round-off
        assert record.comparisons["off-bf16-vs-fp32"].max_abs > limit["float32"]


# ---------------------------------------------------------------- gradients
def test_reduced_precision_loss_gradients_agree_with_float32_within_their_limit():
    """The study's model (relative baseline phase, depth 2, mixing 1) at the item's size,
    same initial weights: each reduced precision's weight gradients, over the whole
    gradient's norm, within its round-offs of float32's (and beyond float32 round-off)."""
    import tensorflow as tf

    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare
    from ptycho.study.checklist.gradients import loss_gradients

    limit = _limits(gradients_item.ITEM, aligned=2 * path_roundings())
    sim = SimulationConfig(n=32, object_size=56, n_lines=40, nphotons=1e6, probe_kind="defocused", n_objects_train=1)
    ds = simulate_split(sim, "train")
    for kind in ("pinn", "baseline"):
        data = prepare(ds, kind)
        batch = (tf.constant(data.inputs[:8]), data.offsets[:8], {k: v[:8] for k, v in data.targets.items()})
        grads = {
            p: loss_gradients(
                Trainer(
                    ModelConfig(kind=kind, filters=4, loss="mae"),
                    TrainConfig(batch_size=8, xla="off", precision=p),
                    ds.n,
                    data.inputs.shape[-1],
                    ds.probe,
                    data.physics,
                ),
                *batch,
            )
            for p in PRECISIONS
        }
        for p in (BF16, FP16):
            worst = max(variable_differences(grads[p]["weights"], grads["float32"]["weights"]))
            # the item's limit on this machine: the aligned bound where p is emulated (bf16 on
            # an AVX2-only CPU measured 33.9 u; docs/physics.md, section 9)
            assert limit["float32"] < worst <= limit[p], (kind, p, worst / EPSILON[p])


@pytest.mark.slow
def test_the_gradients_item_passes_every_mode_at_every_precision_on_the_studys_model():
    """Every mode vs off at each precision and each precision vs float32 in each mode (3
    to 4 minutes on 2 cores: 24 compiled gradient steps)."""
    threshold = float(spec("thresholds.gradients_max_rel")["default"])
    rec = gradients_item.gradients(
        threshold, roundoffs(None, "gradients_precision_roundoffs"), pinn_loss="mae", precisions=PRECISIONS
    )
    assert rec.status == "PASS", rec.summary
    ev = rec.evidence
    assert {"Conv2D", "AveragePooling2D", "Dense", "Add", "UpSampling2D", "Rescaling"} <= set(ev["layers"])
    for model in ("pinn", "baseline"):
        got = ev["models"][model]["comparisons"]
        assert len(got) == 3 * 3 + 2 * 4  # 3 modes at 3 precisions, 2 precisions in 4 modes
        assert all(c["worst"] <= c["limit"] for c in got.values())
        assert got["jit"]["judged"] == "weights and inputs" and got["jit-bf16"]["judged"] == "weights"
