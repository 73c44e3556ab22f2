"""Networks and losses: the PINN (physics-informed) and the PtychoNN-style baseline.

Both use the same encoder-decoder (:func:`build_network`): an encoder of ``depth``
Conv-Conv-Pool blocks (filters f, 2f, 4f, ...; the reference has three, the study's
default config two, see docs/architecture.md) and two decoder arms, amplitude
(``sigmoid``) and phase (``pi * tanh``), each filling the central ``N/2 x N/2`` region of
every patch. They differ only in what they see and how they learn:

* PINN: sees a group of ``C = gridsize^2`` diffraction amplitudes as channels and is
  trained through the physics head (``ptycho.physics.forward_tf``) with a Poisson
  negative log-likelihood on the measured counts (or MAE on amplitudes). It never sees
  the ground truth.
* baseline: sees one pattern and is trained with MAE against ground-truth patches.

Pooling is configurable because XLA:CPU spends minutes constant-folding the
``MaxPool`` gradient (``reduce-window``) of a U-Net train step; average pooling or
strided convolutions avoid that (see docs/architecture.md, "compile time").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ptycho.config import _check_choice, _check_range

MODEL_KINDS = ("pinn", "baseline")
POOLINGS = ("max", "avg", "strided")
LOSSES = ("poisson", "mae")
BASELINE_PHASES = ("absolute", "relative")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture and loss; saved with every checkpoint."""

    kind: str = "pinn"  #: pinn | baseline
    filters: int = 16  #: encoder filters of the first block (reference: 64)
    pooling: str = "avg"  #: max | avg | strided
    depth: int = 3  #: pooling levels of the encoder (the code is N / 2**depth wide)
    mixing: int = 0  #: global mixing layers on the code (each code pixel sees the whole pattern)
    loss: str = "poisson"  #: PINN loss: poisson (NLL on counts) | mae (on amplitudes)
    poisson_eps: float = 1e-6  #: the eps in lambda - n log(lambda + eps), normalised units
    trainable_scale: bool = True  #: learn the log intensity scale (initialised from the file)
    #: baseline phase target: absolute (the true patch phase) | relative (up to a constant
    #: per patch, which one diffraction pattern cannot show; stitching aligns the patches)
    baseline_phase: str = "absolute"

    def __post_init__(self) -> None:
        _check_choice("model.kind", self.kind, MODEL_KINDS)
        _check_choice("model.pooling", self.pooling, POOLINGS)
        _check_choice("model.loss", self.loss, LOSSES)
        _check_choice("model.baseline_phase", self.baseline_phase, BASELINE_PHASES)
        _check_range("model.filters", self.filters, 1, 512)
        _check_range("model.depth", self.depth, 1, 4)
        _check_range("model.mixing", self.mixing, 0, 4)
        _check_range("model.poisson_eps", self.poisson_eps, 0.0, 1.0)


def build_network(
    n: int, in_channels: int, out_channels: int, filters: int, pooling: str, seed: int, depth: int = 3, mixing: int = 0
):
    """Keras model ``x (B, N, N, Cin) -> (amplitude, phase)``, each ``(B, N/2, N/2, Cout)``.

    ``depth`` Conv-Conv-Pool blocks (filters f, 2f, 4f, ...) take the N-wide input to an
    N / 2**depth code; each decoder climbs back to N/2 with ``depth - 1`` upsampling
    blocks. The code is the bottleneck for fine detail: depth 3 at f = 16 keeps
    (N/8)^2 * 64 numbers for (N/2)^2 * C complex pixels.

    ``mixing`` residual layers then mix the code across space: a dense map over the
    (N / 2**depth)^2 code positions, shared by all channels (the token mixing of
    MLP-Mixer). Why: the network inverts a Fourier transform, so every object pixel
    depends on the whole diffraction pattern, but a shallow convolutional encoder sees
    only a window of it (about 18 px of 64 at depth 2). One such layer costs
    (N / 2**depth)^4 weights, 65k at depth 2, N = 64 (see docs/architecture.md).
    """
    import keras
    from keras import layers

    init = lambda k: keras.initializers.GlorotUniform(seed=seed + k)  # noqa: E731
    counter = iter(range(10_000))

    def conv(x, f, **kw):
        return layers.Conv2D(f, 3, padding="same", activation="relu", kernel_initializer=init(next(counter)), **kw)(x)

    def down(x, f):
        if pooling == "max":
            return layers.MaxPooling2D(2)(x)
        if pooling == "avg":
            return layers.AveragePooling2D(2)(x)
        return conv(x, f, strides=2)

    if n % 2**depth:
        raise ValueError(f"N = {n} must be a multiple of {2**depth} for {depth} pooling levels")
    widths = [filters * 2**k for k in range(depth)]
    x_in = keras.Input((n, n, in_channels), name="diffraction")
    x = x_in
    for f in widths:
        x = conv(conv(x, f), f)
        x = down(x, f)
    for _ in range(mixing):
        side, channels = x.shape[1], x.shape[3]
        t = layers.Permute((2, 1))(layers.Reshape((side * side, channels))(x))  # (B, C, positions)
        t = layers.Dense(side * side, activation="relu", kernel_initializer=init(next(counter)))(t)
        t = layers.Reshape((side, side, channels))(layers.Permute((2, 1))(t))
        x = layers.Add()([x, t])
    code = x  # N / 2**depth

    def decoder(activation, name):
        y = code
        for f in reversed(widths[1:]):  # N / 2**depth -> N/2
            y = conv(conv(y, f), f)
            y = layers.UpSampling2D(2, interpolation="bilinear")(y)
        y = conv(y, filters)
        y = layers.Conv2D(out_channels, 3, padding="same", kernel_initializer=init(next(counter)))(y)
        return layers.Activation(activation, name=name)(y)

    amp = decoder("sigmoid", "amplitude")
    # pi * tanh from standard layers, so a saved model loads without custom code.
    phase = layers.Rescaling(math.pi, name="phase")(decoder("tanh", "phase_tanh"))
    return keras.Model(x_in, [amp, phase], name="encoder_decoder")


def to_complex(amp, phase):
    """``amp * exp(i phase)`` as complex64 (TensorFlow)."""
    import tensorflow as tf

    return tf.complex(amp * tf.cos(phase), amp * tf.sin(phase))
