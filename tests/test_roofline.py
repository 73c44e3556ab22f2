"""The roofline on real TensorFlow: FLOPs counted from a network's layers (checked against
a count by hand), the machine's matmul peak per dtype, and one real bench run with a
reduced-precision arm beside the reference."""

from __future__ import annotations

import math

import pytest

from ptycho.study.bench.roofline import PEAK_DTYPES, TRAIN_FACTOR, forward_flops, peak_gflops, train_step_flops

pytest.importorskip("tensorflow")


def _network(precision="float32"):
    from ptycho.nets.models import build_network

    return build_network(32, 4, 4, filters=4, pooling="avg", seed=0, depth=2, mixing=1, precision=precision)


def test_flops_are_counted_from_the_conv_and_dense_layers():
    # filters 4, depth 2, N 32: encoder convs 4->4, 4->4 at 32 px and 4->8, 8->8 at 16 px, pooled
    # to an 8 x 8 x 8 code; one mixing Dense over its 64 positions, one row per channel; each of
    # the two decoders: 8->8, 8->8 at 8 px, upsampled, then 8->4 and 4->4 (the output) at 16 px.
    conv = 2 * 9 * (32 * 32 * (4 * 4 + 4 * 4) + 16 * 16 * (4 * 8 + 8 * 8))
    conv += 2 * 2 * 9 * (8 * 8 * (8 * 8 + 8 * 8) + 16 * 16 * (8 * 4 + 4 * 4))
    dense = 2 * 8 * 64 * 64
    assert forward_flops(_network()) == {"conv2d": conv, "dense": dense}
    assert forward_flops(_network("mixed_bfloat16")) == forward_flops(_network())  # the arithmetic, not its dtype
    step = train_step_flops(_network(), 8)
    assert step["per_step"] == TRAIN_FACTOR * (conv + dense) * 8 and step["forward_per_sample"] == conv + dense


def test_a_weighted_layer_it_cannot_count_is_refused_not_left_out():
    import keras

    x = keras.Input((8, 8, 2))
    net = keras.Model(x, keras.layers.BatchNormalization()(keras.layers.Conv2D(2, 3)(x)))
    with pytest.raises(ValueError, match=r"roofline: cannot count the FLOPs of layer .* \(BatchNormalization\)"):
        forward_flops(net)


def test_the_peak_is_measured_for_every_dtype():
    peak = peak_gflops(64, repeats=1)
    assert (peak["size"], peak["repeats"]) == (64, 1) and tuple(peak["gflops"]) == PEAK_DTYPES
    assert PEAK_DTYPES == ("float32", "bfloat16", "float16")
    assert all(math.isfinite(v) and v > 0 for v in peak["gflops"].values())


@pytest.mark.slow
def test_a_bench_run_times_every_precision_with_its_roofline():
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig
    from ptycho.study.bench import BenchConfig, arm_runs, format_table, run

    ds = simulate_split(SimulationConfig(n=32, object_size=72, n_objects_train=1, stride_train=8), "train")
    config = BenchConfig(
        warmup=1,
        repeats=2,
        component_repeats=1,
        infer_samples=8,
        naive_samples=2,
        threads=1,
        shared=False,
        peak_size=64,
    )
    model = ModelConfig(kind="pinn", filters=4)
    result = run(ds, [model], TrainConfig(batch_size=4), ["off"], config, ["bf16"])
    assert result["precisions"] == ["float32", "mixed_bfloat16"] and result["modes"] == ["off"]
    assert [(a["mode"], a["precision"]) for a in result["arms"]] == [("off", "float32"), ("off", "mixed_bfloat16")]
    flops = train_step_flops(_network(), 4)["per_step"]
    assert model.depth == 2 and model.mixing == 1  # the network counted by hand above
    for a in result["arms"]:
        assert a["flops"]["per_step"] == flops
        roof = a["roofline"]
        assert roof["gflops"] == pytest.approx(flops / a["step_s"]["median"] / 1e9)
        assert roof["peak_gflops"] == result["peak"]["gflops"][roof["dtype"]]
    assert [a["roofline"]["dtype"] for a in result["arms"]] == ["float32", "bfloat16"]
    assert result["peak"]["threads"] == 1 and tuple(result["peak"]["gflops"]) == PEAK_DTYPES
    assert list(result["ratios"]["pinn"]) == ["off", "off-bf16"]
    assert [r.name for r in arm_runs(result)] == ["bench-pinn-off", "bench-pinn-off-bf16"]
    assert "train_step_alone" in result["ratios"]["pinn"]["off-bf16"]["vs_float32"]  # the precision's own effect
    assert "XLA's own effect" not in format_table(result)  # no XLA mode was timed: nothing credited to XLA
