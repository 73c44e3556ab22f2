"""Checklist item *accuracy*: XLA-compiled physics and inference agree with ``off``.

Measured with TensorFlow (imported when the item runs): the XLA-safe translation
against the reference ``ImageProjectiveTransformV3`` over shifts, dtypes and batch
sizes; the whole physics head under every mode; the trained networks at inference.
The value is the worst max |difference|; the threshold (docs/physics.md section 7) is
float32 round-off, not a tolerance for a different algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ptycho.errors import PtychoError
from ptycho.nets.xla import COMPARED, REFERENCE, compared
from ptycho.study.checklist.item import Inputs, Item, verdict
from ptycho.study.tables import Table, fmt


def translation_suite(seed: int = 0) -> list[dict]:
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
                    {
                        "dtype": np.dtype(dtype).name,
                        "batch": batch,
                        "shifts": kind,
                        "max_abs": float(err.max()),
                        "mean_abs": float(err.mean()),
                    }
                )
    return cases


def forward_model_agreement(seed: int = 0, modes: Sequence[str] = COMPARED) -> dict:
    """Whole physics head (reassemble, extract, probe, FFT), each XLA mode vs ``off``.

    The head is compiled as each mode compiles it: ``jit`` and ``physics`` as one XLA
    function (in ``physics`` that function is exactly the head), ``auto`` as an
    auto-clustered graph. Errors are relative to the largest amplitude.
    """
    import tensorflow as tf

    from ptycho.nets.xla import compile_step, xla_translation
    from ptycho.physics.forward_tf import predicted_amplitude
    from ptycho.physics.probe import make_probe

    rng = np.random.default_rng(seed)
    n, c, b = 64, 4, 16
    obj = (rng.uniform(0.3, 1.0, (b, n, n, c)) * np.exp(1j * rng.uniform(-1.5, 1.5, (b, n, n, c)))).astype(np.complex64)
    offsets = rng.uniform(-3, 3, (b, c, 2)).astype(np.float32)
    probe = make_probe("defocused", n).astype(np.complex64)

    def head(mode):
        fn = compile_step(
            lambda o, f: predicted_amplitude(
                o, f, probe, tf.constant(0.0), xla=xla_translation(mode), canvas_pad=n // 4
            ),
            "jit" if mode == "physics" else mode,
        )
        return fn(tf.constant(obj), tf.constant(offsets)).numpy()

    ref = head(REFERENCE)
    scale = float(np.abs(ref).max())
    per_mode = {}
    for mode in modes:
        d = np.abs(head(mode) - ref)
        per_mode[mode] = {"max_abs": float(d.max() / scale), "mean_abs": float(d.mean() / scale)}
    return {
        "max_abs": max((m["max_abs"] for m in per_mode.values()), default=0.0),
        "mean_abs": max((m["mean_abs"] for m in per_mode.values()), default=0.0),
        "modes": per_mode,
        "note": "relative to the largest amplitude; worst mode",
    }


def inference_agreement(
    model_dirs: Sequence[str], dataset, max_samples: int = 128, modes: Sequence[str] = ("jit", "auto")
) -> dict:
    """Trained networks, each XLA mode's predict step vs ``off``, on the study's test patterns.

    Each trained model is run through the same fixed-batch :class:`~ptycho.nets.infer.Predictor`
    under every mode (``physics`` predicts as ``off``: inference has no physics head);
    the complex patches ``amp * exp(i phase)`` are compared, relative to the largest
    amplitude; the worst mode is reported.
    """
    from ptycho.nets.infer import Predictor, load_network
    from ptycho.nets.train import load_meta, prepare
    from ptycho.study.arms import Arm

    modes = [m for m in modes if m not in (REFERENCE, "physics")]

    out = {}
    for model_dir in model_dirs:
        meta = load_meta(model_dir)
        name = Arm.of_meta(meta).name
        data = prepare(dataset, meta["model"]["kind"], norm=meta["physics"]["intensity_norm"])
        network = load_network(model_dir)
        x = data.inputs[:max_samples]
        patches = {}
        for mode in [REFERENCE, *modes]:
            amp, phase = Predictor(network, meta["train"]["batch_size"], mode)(x)
            patches[mode] = amp.astype(np.float64) * np.exp(1j * phase.astype(np.float64))
        scale = max(float(np.abs(patches[REFERENCE]).max()), 1e-30)
        per_mode = {m: np.abs(patches[m] - patches[REFERENCE]) for m in modes}
        out[name] = {
            "max_abs": max((float(d.max() / scale) for d in per_mode.values()), default=0.0),
            "mean_abs": max((float(d.mean() / scale) for d in per_mode.values()), default=0.0),
            "modes": {m: float(d.max() / scale) for m, d in per_mode.items()},
            "samples": len(x),
            "note": "complex patches, relative to the largest amplitude; worst mode",
        }
    return out


def accuracy(
    threshold: float,
    seed: int = 0,
    model_dirs: Sequence[str] = (),
    dataset=None,
    modes: Sequence[str] = COMPARED,
) -> dict:
    """Worst max error of: the translation suite, the forward model and trained-model
    inference under every XLA mode of ``modes``, each against ``off``."""
    modes = compared(modes)
    cases = translation_suite(seed)
    forward = forward_model_agreement(seed, modes)
    inference = inference_agreement(model_dirs, dataset, modes=modes) if model_dirs else {}
    worst = max([c["max_abs"] for c in cases] + [forward["max_abs"]] + [r["max_abs"] for r in inference.values()])
    trained = (
        f", and {len(inference)} trained model(s) at inference (worst {max(r['max_abs'] for r in inference.values()):.1e})"
        if inference
        else ""
    )
    return verdict(
        ITEM.name,
        worst,
        threshold,
        "<=",
        f"XLA-safe translation vs ImageProjectiveTransformV3 over {len(cases)} cases, the whole forward model"
        f"{trained}, modes {', '.join(modes)} vs off: worst max |difference| {worst:.2e}",
        {"translation": cases, "forward_model": forward, "trained_inference": inference, "modes": list(modes)},
    )


def collect(inputs: Inputs, threshold: float) -> dict:
    ds = None
    if inputs.model_jsons:
        from ptycho.data.dataset import read_dataset

        if not inputs.dataset:
            raise PtychoError("check accuracy: --models needs --dataset (the test split to run them on)")
        ds = read_dataset(inputs.dataset)
    from pathlib import Path

    modes = COMPARED if inputs.modes is None else inputs.modes
    return accuracy(threshold, model_dirs=[str(Path(m).parent) for m in inputs.model_jsons], dataset=ds, modes=modes)


def tables(report: Mapping) -> list[Table]:
    ev = report["items"]["accuracy"]["evidence"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in ev.get("translation", []):
        groups.setdefault((case["dtype"], case["shifts"]), []).append(case)
    rows = [
        [
            f"translation, {dtype}, {shifts} shifts",
            "XLA-safe vs reference",
            ", ".join(str(c["batch"]) for c in cases),
            fmt(max(c["max_abs"] for c in cases)),
            fmt(max(c["mean_abs"] for c in cases)),
        ]
        for (dtype, shifts), cases in sorted(groups.items())
    ]
    fm = ev.get("forward_model")
    if fm:
        for mode, r in fm.get("modes", {"jit": fm}).items():
            rows.append(
                ["whole forward model (relative)", f"{mode} vs off", "16", fmt(r["max_abs"]), fmt(r["mean_abs"])]
            )
    for arm, r in sorted(ev.get("trained_inference", {}).items()):
        modes = ", ".join(r.get("modes", {})) or "jit"
        rows.append(
            [
                f"trained {arm} at inference (relative)",
                f"{modes} vs off (worst)",
                f"{r['samples']} patterns",
                fmt(r["max_abs"]),
                fmt(r["mean_abs"]),
            ]
        )
    return [("", ["what", "compared", "batch sizes", "max abs difference", "mean abs difference"], rows)]


ITEM = Item(
    name="accuracy",
    title="Accuracy",
    tables=tables,
    collect=collect,
    threshold="accuracy_max_abs",
    measures=True,
)
