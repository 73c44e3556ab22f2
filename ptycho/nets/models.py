"""Networks and losses: the PINN (physics-informed) and the PtychoNN-style baseline.

Both use the same encoder-decoder (:func:`build_network`): an encoder of ``depth``
Conv-Conv-Pool blocks (filters f, 2f, 4f, ...; the reference has three, the study's
default config two, see docs/measurements.md) and two decoder arms, amplitude
(``sigmoid``) and phase (``pi * tanh``), each filling the central ``N/2 x N/2`` region of
every patch. They differ only in what they see and how they learn:

* PINN: sees a group of ``C = gridsize^2`` diffraction amplitudes as channels and is
  trained through the physics head (``ptycho.physics.forward_tf``) with MAE on the
  amplitudes (the study's loss) or a Poisson negative log-likelihood on the measured
  counts. It never sees the ground truth.
* baseline: sees one pattern and is trained with MAE against ground-truth patches.

Pooling is configurable because XLA:CPU spends minutes constant-folding the
``MaxPool`` gradient (``reduce-window``) of a U-Net train step; average pooling or
strided convolutions avoid that (see docs/architecture.md, "compile time").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ptycho.config import check_settings, choices, defaults

MODEL_KINDS = choices("models.items")


@dataclass(frozen=True)
class Method:
    """A network kind: what it reads and what it learns from. Code that treats the kinds
    differently reads these fields, never the name (the schema's ``models`` enum lists the
    names; a test keeps it equal to :data:`METHODS`)."""

    name: str
    description: str
    #: reads a group of neighbouring patterns per sample (gridsize**2 channels, the dataset's
    #: ``groups``); else one pattern per sample
    grouped: bool
    #: learns from the patterns alone through the physics head (its loss: ``model.loss``);
    #: else from the true object's patches, so it needs a ground truth
    physics: bool
    #: a training step's cost relative to the PINN's, measured with two 1-thread trainings
    #: at once (it only orders the workflow's trainings: ``rules/common.smk``)
    cost: float = 1.0
    #: the study's subject: the kind whose XLA arms answer the study's question (its time
    #: to quality, quality and convergence are judged; the headline and the recommended
    #: settings are its); the other kinds are quality references. Exactly one is.
    subject: bool = False


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "pinn",
            "physics-informed: a group of patterns in, the object out; learns through the physics head",
            True,
            True,
            subject=True,
        ),
        Method(
            "baseline",
            "supervised, PtychoNN-style: one pattern in, its object patch out; learns from the true patches",
            False,
            False,
            0.65,
        ),
    )
}


#: The name of the study's subject kind (:attr:`Method.subject`): the one place the study
#: learns which network its question is about.
(SUBJECT,) = (m.name for m in METHODS.values() if m.subject)


def method_of(kind: str) -> Method:
    """The :class:`Method` record of network ``kind``."""
    try:
        return METHODS[kind]
    except KeyError:
        raise ValueError(f"unknown model kind {kind!r}; choose one of {', '.join(METHODS)}") from None


POOLINGS = choices("model.pooling")
LOSSES = choices("model.loss")
BASELINE_PHASES = choices("model.baseline_phase")

_MODEL = defaults("model")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture and loss; saved with every checkpoint. Each key's meaning, range and
    default: the schema's ``model`` section (``kind`` is one of its ``models``)."""

    kind: str = MODEL_KINDS[0]  #: pinn | baseline
    filters: int = _MODEL["filters"]  #: encoder filters of the first block (reference: 64)
    pooling: str = _MODEL["pooling"]  #: max | avg | strided
    depth: int = _MODEL["depth"]  #: pooling levels of the encoder (the code is N / 2**depth wide)
    mixing: int = _MODEL["mixing"]  #: global mixing layers on the code (each code pixel sees the whole pattern)
    loss: str = _MODEL["loss"]  #: PINN loss: poisson (NLL on counts) | mae (on amplitudes)
    poisson_eps: float = _MODEL["poisson_eps"]  #: the eps in lambda - n log(lambda + eps), normalised units
    trainable_scale: bool = _MODEL["trainable_scale"]  #: learn the log intensity scale (initialised from the file)
    #: baseline phase target: absolute (the true patch phase) | relative (up to a constant
    #: per patch, which one diffraction pattern cannot show; stitching aligns the patches)
    baseline_phase: str = _MODEL["baseline_phase"]

    def __post_init__(self) -> None:
        check_settings(self, "model", "model.", extra={"kind": "models.items"})


def build_network(
    n: int,
    in_channels: int,
    out_channels: int,
    filters: int,
    pooling: str,
    seed: int,
    *,
    depth: int,
    mixing: int,
    precision: str = "float32",
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
    (N / 2**depth)^4 weights, 65k at depth 2, N = 64 (see docs/measurements.md).

    ``precision`` (a name of :data:`ptycho.nets.precision.PRECISIONS`) gives every layer
    its record's Keras dtype policy (``mixed_bfloat16``: compute in bfloat16 over float32
    variables) except the output activations, which are float32
    (the outputs feed the physics head, whose ``tf.complex`` and FFT take no bfloat16,
    so the network hands over float32 whatever it computes in), and the bilinear
    upsampling, whose TensorFlow kernel answers bfloat16 with float32.
    """
    import keras
    from keras import layers

    from ptycho.nets.precision import PRECISIONS, parse_precision

    init = lambda k: keras.initializers.GlorotUniform(seed=seed + k)  # noqa: E731
    counter = iter(range(10_000))
    p = {"dtype": PRECISIONS[parse_precision(precision)].policy}

    def conv(x, f, **kw):
        return layers.Conv2D(
            f, 3, padding="same", activation="relu", kernel_initializer=init(next(counter)), **p, **kw
        )(x)

    def down(x, f):
        if pooling == "max":
            return layers.MaxPooling2D(2, **p)(x)
        if pooling == "avg":
            return layers.AveragePooling2D(2, **p)(x)
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
        t = layers.Permute((2, 1), **p)(layers.Reshape((side * side, channels), **p)(x))  # (B, C, positions)
        t = layers.Dense(side * side, activation="relu", kernel_initializer=init(next(counter)), **p)(t)
        t = layers.Reshape((side, side, channels), **p)(layers.Permute((2, 1), **p)(t))
        x = layers.Add(**p)([x, t])
    code = x  # N / 2**depth

    def decoder(activation, name):
        y = code
        for f in reversed(widths[1:]):  # N / 2**depth -> N/2
            y = conv(conv(y, f), f)
            # float32 at every precision: TensorFlow's bilinear resize returns float32 for
            # bfloat16 input, and XLA refuses the mixed-type gradient that leaves (jit mode).
            y = layers.UpSampling2D(2, interpolation="bilinear", dtype="float32")(y)
        y = conv(y, filters)
        y = layers.Conv2D(out_channels, 3, padding="same", kernel_initializer=init(next(counter)), **p)(y)
        return layers.Activation(activation, name=name, dtype="float32")(y)  # float32 out, always

    amp = decoder("sigmoid", "amplitude")
    # pi * tanh from standard layers, so a saved model loads without custom code.
    phase = layers.Rescaling(math.pi, name="phase", dtype="float32")(decoder("tanh", "phase_tanh"))
    return keras.Model(x_in, [amp, phase], name="encoder_decoder")


def to_complex(amp, phase):
    """``amp * exp(i phase)`` as complex64 (TensorFlow)."""
    import tensorflow as tf

    return tf.complex(amp * tf.cos(phase), amp * tf.sin(phase))
