"""Checklist item *accuracy*: XLA-compiled physics and inference agree with ``off``, and a
reduced precision's inference with float32's.

Measured with TensorFlow (imported when the item runs): the XLA-safe translation
against the reference ``ImageProjectiveTransformV3`` over shifts, dtypes and batch
sizes; the whole physics head under every mode; the trained networks at inference, each
mode vs ``off`` at every precision of the study and each reduced precision vs float32 in
every mode (:mod:`ptycho.study.checklist.comparisons`). The physics head computes in
float32 at every precision, so its comparisons are made once, at float32. A float32
comparison's limit is float32 round-off (the item's threshold, docs/physics.md section
7), not a tolerance for a different algorithm; a reduced precision's is a number of its
unit round-offs (section 9). The value is the worst difference over its limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from ptycho.errors import PtychoError
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION
from ptycho.nets.xla import COMPARED, MODES, REFERENCE, compared, mode_of
from ptycho.study.checklist.comparisons import (
    RATIO_LIMIT,
    comparisons,
    limits,
    limits_text,
    ordered,
    path_roundings,
    roundoffs,
    worst_by_group,
)
from ptycho.study.checklist.differences import (
    AccuracyEvidence,
    Difference,
    ForwardModel,
    NetworkDifference,
    TrainedNetwork,
    TranslationCase,
)
from ptycho.study.checklist.item import Inputs, Item
from ptycho.study.checklist.result import ItemResult, verdict


def translation_suite(seed: int = 0) -> list[TranslationCase]:
    """XLA (compiled) vs reference translation over shifts, dtypes and batch sizes.

    Cases: sub-pixel and integer shifts, shifts past the border, real/complex,
    float32/float64, batch sizes 1..100. Errors are measured on interior pixels for
    sub-pixel shifts (the two kernels may treat the outermost ring differently) and
    everywhere otherwise.
    """
    import tensorflow as tf

    from ptycho.physics.translate_tf import translate_reference, translate_xla

    rng = np.random.default_rng(seed)
    compiled = tf.function(translate_xla, jit_compile=True)
    cases = []
    for dtype in (np.float32, np.float64, np.complex64, np.complex128):
        for batch in (1, 7, 16, 100):
            for kind, low, high in (("subpixel", -3.5, 3.5), ("integer", -6, 6), ("past_border", 30, 45)):
                shape = (batch, 32, 32, 1)
                img = rng.standard_normal(shape)
                if np.issubdtype(dtype, np.complexfloating):
                    img = img + 1j * rng.standard_normal(shape)
                img = img.astype(dtype)
                shifts = rng.uniform(low, high, (batch, 2))
                if kind == "integer":
                    shifts = np.round(shifts)
                if kind == "past_border":
                    shifts *= rng.choice([-1, 1], size=(batch, 2))
                a = compiled(tf.constant(img), tf.constant(shifts)).numpy()
                b = translate_reference(tf.constant(img), tf.constant(shifts)).numpy()
                err = np.abs(a - b)
                if kind == "subpixel":
                    err = err[:, 4:-4, 4:-4]
                cases.append(
                    TranslationCase(
                        dtype=np.dtype(dtype).name,
                        batch=batch,
                        shifts=kind,
                        max_abs=float(err.max()),
                        mean_abs=float(err.mean()),
                    )
                )
    return cases


#: Groups of a dataset the forward model is compared on (:func:`forward_model_agreement`).
DATA_GROUPS = 16


def forward_model_agreement(seed: int = 0, modes: Sequence[str] = COMPARED, dataset=None) -> ForwardModel:
    """Whole physics head (reassemble, extract, probe, FFT), each XLA mode vs ``off``.

    The head is compiled as each mode compiles it: ``jit`` and ``physics`` as one XLA
    function (in ``physics`` that function is exactly the head), ``auto`` as an
    auto-clustered graph. Errors are relative to the largest amplitude.

    Without ``dataset``: random objects, shifts of +-3 px and a defocused probe. With a
    simulated ``dataset`` (a condition's test split): its own geometry and scale, which are
    what differs between modes at another overlap or dose: the true object's patches of its
    first :data:`DATA_GROUPS` groups at their own offsets, its probe, and the intensity scale
    and canvas :func:`ptycho.nets.inputs.head_constants` gives it (normalised by the split's
    own mean count). Needs a ground truth (a simulated split: conditions are). Errors are
    relative to the largest amplitude, so a dose alone changes them only through round-off;
    a sparser scan changes the translations and the canvas.
    """
    import tensorflow as tf

    from ptycho.nets.xla import compile_head, xla_translation
    from ptycho.physics.forward_tf import predicted_amplitude
    from ptycho.physics.probe import make_probe

    if dataset is None:
        rng = np.random.default_rng(seed)
        n, c, b = 64, 4, 16
        obj = (rng.uniform(0.3, 1.0, (b, n, n, c)) * np.exp(1j * rng.uniform(-1.5, 1.5, (b, n, n, c)))).astype(
            np.complex64
        )
        offsets = rng.uniform(-3, 3, (b, c, 2)).astype(np.float32)
        probe = make_probe("defocused", n).astype(np.complex64)
        log_scale, pad = 0.0, n // 4
    else:
        from ptycho.nets.inputs import head_constants, true_outputs
        from ptycho.nets.models import SUBJECT

        amp, phase = (a[:DATA_GROUPS] for a in true_outputs(dataset, SUBJECT))
        obj = (amp * np.exp(1j * phase)).astype(np.complex64)
        offsets = dataset.group_offsets[:DATA_GROUPS].astype(np.float32)
        probe = np.asarray(dataset.probe, dtype=np.complex64)
        constants = head_constants(dataset)
        log_scale, pad = constants["log_scale"], constants["canvas_pad"]

    def head(mode):
        fn = compile_head(
            lambda o, f: predicted_amplitude(
                o, f, probe, tf.constant(log_scale, tf.float32), xla=xla_translation(mode), canvas_pad=pad
            ),
            mode,
        )
        return fn(tf.constant(obj), tf.constant(offsets)).numpy()

    ref = head(REFERENCE)
    scale = float(np.abs(ref).max())
    per_mode = {}
    for mode in modes:
        d = np.abs(head(mode) - ref)
        per_mode[mode] = Difference(max_abs=float(d.max() / scale), mean_abs=float(d.mean() / scale))
    return ForwardModel.of(per_mode)


class NetworkOutputs(NamedTuple):
    """One trained network's complex patches under each (mode, precision) it was run at."""

    arm: str
    model: str
    precision: str  #: the one it was trained at
    patches: dict[tuple[str, str], np.ndarray]


def network_outputs(
    model_dirs: Sequence[str],
    dataset,
    modes: Sequence[str],
    precisions: Sequence[str],
    max_samples: int = 128,
) -> Iterator[NetworkOutputs]:
    """Each trained network, with its trained weights, at float32, at its own precision
    (``train.precision`` of its ``model.json``; float32 when absent) and at each of
    ``precisions``, through the fixed-batch :class:`~ptycho.nets.infer.Predictor` of
    ``off`` and of each of ``modes``, on the first ``max_samples`` test inputs: the
    complex patches ``amp * exp(i phase)``.

    One network and its predictors are built per architecture and precision, and reused
    across the models by setting their weights (compiled steps read the variables, so
    nothing is traced again): a study's arms share a handful of architectures.
    """
    from ptycho.nets.infer import Predictor, load_network
    from ptycho.nets.models import build_network
    from ptycho.nets.train import configs_from_meta, load_meta, prepare
    from ptycho.study.arms import Arm

    built: dict[tuple, tuple] = {}  # (architecture, batch size, precision) -> (network, {mode: predictor})
    for model_dir in model_dirs:
        meta = load_meta(model_dir)
        model_cfg, train_cfg = configs_from_meta(meta)
        x = prepare(dataset, model_cfg.kind).inputs[:max_samples]  # the data's own norm, as `ptycho infer`
        weights = load_network(model_dir).get_weights()
        shape = (meta["n"], x.shape[-1], model_cfg.filters, model_cfg.pooling, model_cfg.depth, model_cfg.mixing)
        patches = {}
        for precision in ordered([*precisions, train_cfg.precision]):
            key = (shape, train_cfg.batch_size, precision)
            if key not in built:
                n, channels, filters, pooling, depth, mixing = shape
                net = build_network(
                    n, channels, channels, filters, pooling, 0, depth=depth, mixing=mixing, precision=precision
                )
                built[key] = net, {m: Predictor(net, train_cfg.batch_size, m) for m in [REFERENCE, *modes]}
            net, predictors = built[key]
            net.set_weights(weights)
            for mode, predict in predictors.items():
                amp, phase = predict(x)
                patches[mode, precision] = amp.astype(np.float64) * np.exp(1j * phase.astype(np.float64))
        yield NetworkOutputs(Arm.of_meta(meta).name, model_cfg.kind, train_cfg.precision, patches)


def inference_agreement(
    model_dirs: Sequence[str],
    dataset,
    max_samples: int = 128,
    modes: Sequence[str] | None = None,
    precisions: Sequence[str] = (REFERENCE_PRECISION,),
) -> dict[str, TrainedNetwork]:
    """Trained networks at inference: each XLA mode vs ``off`` at each precision they were
    run at, and each reduced precision vs float32 in each mode (:func:`network_outputs`).

    A mode whose step XLA does not compile (``physics``: inference has no physics head) predicts
    as ``off`` and is left out (:attr:`~ptycho.nets.xla.Mode.xla_step`); ``modes`` None: every
    mode whose step XLA compiles (``jit``, ``auto``). A
    reduced precision vs float32 is the same weights through the lower arithmetic: the
    error that arithmetic makes, whatever precision the network was trained at. Patches
    are compared relative to the largest float32 ``off`` amplitude; evidence per model,
    keyed by its arm (the comparisons' limits are the item's: :func:`accuracy` sets them).
    """
    modes = [m for m in (MODES if modes is None else modes) if mode_of(m).xla_step]
    out = {}
    for run in network_outputs(model_dirs, dataset, modes, precisions, max_samples):
        if run.arm in out:
            raise PtychoError(f"check accuracy: two models of arm {run.arm}; pass each arm's model.json once")
        scale = max(float(np.abs(run.patches[REFERENCE, REFERENCE_PRECISION]).max()), 1e-30)
        differences = {}
        for c in comparisons(modes, ordered(p for _, p in run.patches)):
            d = np.abs(run.patches[c.arm] - run.patches[c.reference]) / scale
            differences[c.key] = NetworkDifference(
                compared=c.label,
                precision=c.precision,
                across_precisions=c.across_precisions,
                max_abs=float(d.max()),
                mean_abs=float(d.mean()),
            )
        samples = len(next(iter(run.patches.values())))
        out[run.arm] = TrainedNetwork(
            model=run.model, precision=run.precision, samples=samples, comparisons=differences
        )
    return out


def accuracy(
    threshold: float,
    roundoff_count: float,
    seed: int = 0,
    model_dirs: Sequence[str] = (),
    dataset=None,
    modes: Sequence[str] = COMPARED,
    precisions: Sequence[str] = (REFERENCE_PRECISION,),
    physics: bool = True,
) -> ItemResult:
    """The translation suite and the forward model under every XLA mode of ``modes`` vs
    ``off`` (float32: the limit is ``threshold``), and the trained networks at inference
    at each precision (:func:`inference_agreement`; a reduced precision's limit is
    ``roundoff_count`` of its unit round-offs). The value is the worst difference over its
    limit, judged against 1. ``physics`` False (a condition's check,
    :mod:`ptycho.study.conditions`, which needs ``dataset``): no translation suite, which
    does not depend on the data, and the forward model on ``dataset``'s own geometry and
    scale (:func:`forward_model_agreement`), beside the trained networks."""
    if not physics and dataset is None:
        raise PtychoError("check accuracy at a condition: the forward model runs on its dataset; pass --dataset")
    modes = compared(modes)
    limit_of = limits(PRECISIONS, threshold, roundoff_count, aligned=path_roundings())
    cases = translation_suite(seed) if physics else []
    forward = forward_model_agreement(seed, modes) if physics else forward_model_agreement(seed, modes, dataset=dataset)
    measured = inference_agreement(model_dirs, dataset, modes=modes, precisions=precisions) if model_dirs else {}
    inference = {arm: network.judged_by(limit_of) for arm, network in measured.items()}
    used = ordered([*precisions, *(r.precision for r in inference.values())])
    evidence = AccuracyEvidence(
        translation=tuple(cases),
        forward_model=forward,
        trained_inference=inference,
        modes=tuple(modes),
        precisions=tuple(used),
        limits={p: limit_of[p] for p in used},
        precision_roundoffs=roundoff_count,
    )
    physics_worst = max([c.max_abs for c in cases] + [forward.max_abs])
    value = max([physics_worst / threshold] + [d.max_abs / d.limit for d in evidence.network_differences()])
    return verdict(
        ITEM.name,
        value,
        RATIO_LIMIT,
        "<=",
        (
            f"XLA-safe translation vs ImageProjectiveTransformV3 over {len(cases)} cases and the whole forward model "
            f"(float32 at every precision), modes {', '.join(modes)} vs off: worst max |difference| {physics_worst:.2e}"
            if physics
            else f"the forward model on this data's geometry and scale, modes {', '.join(modes)} vs off: "
            f"worst max |difference| {physics_worst:.2e}"
        )
        + f"{_trained_summary(evidence)}; limits {limits_text(evidence.limits, roundoff_count)}; "
        f"value: the worst difference over its limit, {value:.2g}",
        evidence.to_json(),
    )


def _trained_summary(evidence: AccuracyEvidence) -> str:
    """``"; 8 trained network(s) at inference: modes vs off at fp32 worst 9.4e-07, ..."``."""
    if not evidence.trained_inference:
        return ""
    worst = worst_by_group(evidence.network_differences(), "max_abs")
    return f"; {len(evidence.trained_inference)} trained network(s) at inference: {worst}"


def collect(inputs: Inputs, threshold: float) -> ItemResult:
    ds, results = None, inputs.results
    if results.models:
        from ptycho.data.dataset import read_dataset

        if not results.dataset:
            raise PtychoError("check accuracy: --models needs --dataset (the test split to run them on)")
        ds = read_dataset(results.dataset)
    modes = COMPARED if inputs.modes is None else inputs.modes
    return accuracy(
        threshold,
        roundoffs(inputs.precision_threshold, ITEM.precision_threshold),
        model_dirs=results.model_dirs,
        dataset=ds,
        modes=modes,
        precisions=inputs.precisions,
    )


ITEM = Item(
    name="accuracy",
    collect=collect,
    threshold="accuracy_max_abs",
    measures=True,
    precision_threshold="accuracy_precision_roundoffs",
)
