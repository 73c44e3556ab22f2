"""The roofline: a train step's arithmetic against what this machine's cores can do.

Why: a speed-up says which arm is faster, not how far any arm is from the limit. Each
arm's achieved rate (its FLOPs per train step over its median step alone) set beside
the machine's measured peak for the dtype the arm computes in says how much a better
compiler could still gain, and which dtype the hardware accelerates.

FLOPs are counted from the network's layers (:func:`train_step_flops`), per sample
forward, one multiply-add = 2 FLOPs:

* ``Conv2D``: ``2 * H_out * W_out * k_h * k_w * C_in * C_out`` (the kernel's size times the
  output positions; strides and padding are in ``H_out, W_out``);
* ``Dense``: ``2 * in * out`` per row it is applied to (every position but the last axis);
* nothing else: pooling, upsampling, additions, activations and biases are a few FLOPs
  per element, under 1 % of the convolutions' hundreds per output element, and have no
  weights; a weighted layer of any other kind is refused rather than left out.

A train step is ``3 x`` the forward FLOPs times the batch: the backward pass computes
the gradient with respect to the weights and with respect to each layer's input, each
as many FLOPs as the forward pass. (The first layer's input gradient is not needed; the
convention counts it anyway: under 1 % of the step at the study's default.) The physics
head (FFT, translation) and the optimiser are not counted: the head's FFTs are about
``5 N^2 log2 N^2`` FLOPs a pattern, well under 1 % of the network's at N = 64.

The peak (:func:`peak_gflops`) is the best of a few ``tf.linalg.matmul`` of square
matrices per dtype, in the worker's own thread pool: what TensorFlow's best kernel does
with the cores (oneDNN on x86; Eigen for float16 on a CPU without ``avx512_fp16``), the
compute roof. There is no bandwidth roof here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from ptycho.nets.precision import PRECISIONS


def compute_dtype(precision: str) -> str:
    """The dtype a precision's network computes in (its record's): ``mixed_bfloat16`` -> ``bfloat16``."""
    return PRECISIONS[precision].compute_dtype


#: The dtypes whose peak the bench measures: each precision's compute type.
PEAK_DTYPES = tuple(dict.fromkeys(map(compute_dtype, PRECISIONS)))
#: FLOPs of a train step per forward FLOP: forward, then the weight and the input gradients.
TRAIN_FACTOR = 3
PEAK_SIZE = 2048  #: side of the square matrices of the peak's matmul (17 GFLOP a product)
PEAK_REPEATS = 4  #: timed products per dtype; the best counts


def forward_flops(network) -> dict[str, float]:
    """Forward FLOPs per sample of a Keras network, by layer kind (``conv2d``, ``dense``)."""
    import keras

    out = {"conv2d": 0.0, "dense": 0.0}
    for layer in network.layers:
        if isinstance(layer, keras.layers.Conv2D):
            _, h, w, _ = layer.output.shape
            out["conv2d"] += 2.0 * h * w * math.prod(layer.kernel.shape)
        elif isinstance(layer, keras.layers.Dense):
            rows = math.prod(layer.input.shape[1:-1])
            out["dense"] += 2.0 * rows * math.prod(layer.kernel.shape)
        elif layer.weights:
            raise ValueError(
                f"roofline: cannot count the FLOPs of layer {layer.name} ({type(layer).__name__}); "
                "add its kind to ptycho.study.bench.roofline.forward_flops"
            )
    return out


def train_step_flops(network, batch_size: int) -> dict:
    """FLOPs of one train step of ``network`` at ``batch_size`` (the module's convention),
    with the per-sample forward FLOPs by layer kind they come from."""
    by_kind = forward_flops(network)
    per_sample = sum(by_kind.values())
    return {
        "forward_per_sample": per_sample,
        "forward_by_kind": by_kind,
        "train_factor": TRAIN_FACTOR,
        "per_step": TRAIN_FACTOR * per_sample * batch_size,
    }


def peak_gflops(size: int, repeats: int = PEAK_REPEATS) -> dict:
    """GFLOP/s of the best of ``repeats`` products of two ``size x size`` matrices, per
    dtype of :data:`PEAK_DTYPES`, in this process's TensorFlow (its thread pool: call it in
    an arm's worker). The dtypes' products are interleaved, in alternating order, so that
    other work on the machine lowers every dtype's peak alike and their ratios hold."""
    import tensorflow as tf

    product = tf.function(tf.linalg.matmul)
    operands = {d: [tf.cast(tf.random.stateless_uniform((size, size), (k, 0)), d) for k in (1, 2)] for d in PEAK_DTYPES}
    for a, b in operands.values():
        product(a, b).numpy()  # trace and warm up
    best = dict.fromkeys(PEAK_DTYPES, math.inf)
    for r in range(repeats):
        for dtype in PEAK_DTYPES if r % 2 == 0 else PEAK_DTYPES[::-1]:
            t0 = time.perf_counter()
            product(*operands[dtype]).numpy()
            best[dtype] = min(best[dtype], time.perf_counter() - t0)
    return {"size": size, "repeats": repeats, "gflops": {d: 2.0 * size**3 / t / 1e9 for d, t in best.items()}}


def achieved(flops: Mapping, step_median_s: float, precision: str, peak: Mapping | None) -> dict:
    """An arm's achieved GFLOP/s and its fraction of the peak of the dtype it computes in."""
    gflops = flops["per_step"] / step_median_s / 1e9
    dtype = compute_dtype(precision)
    roof = (peak or {}).get("gflops", {}).get(dtype, math.nan)
    return {"gflops": gflops, "dtype": dtype, "peak_gflops": roof, "of_peak": gflops / roof}
