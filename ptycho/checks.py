"""The validation checklist (DOMAIN.md section 7): each item measured, thresholded, judged.

Every item returns the same record::

    {"item": name, "status": "PASS" | "FAIL", "value": float, "threshold": float,
     "comparison": "<=" | ">=", "summary": one sentence, "evidence": {...}}

so the report can render them uniformly. Items measure (accuracy, gradients) or
collect the pipeline's own outputs (convergence, quality, speedup); none is typed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ITEMS = ("accuracy", "gradients", "convergence", "quality", "speedup")


def verdict(item: str, value: float, threshold: float, comparison: str, summary: str, evidence: dict) -> dict:
    """Build an item record; a NaN value always FAILs (no evidence is no pass)."""
    ok = math.isfinite(value) and (value <= threshold if comparison == "<=" else value >= threshold)
    return {
        "item": item,
        "status": "PASS" if ok else "FAIL",
        "value": float(value),
        "threshold": float(threshold),
        "comparison": comparison,
        "summary": summary,
        "evidence": evidence,
    }


# ------------------------------------------------------------------ accuracy
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
                cases.append({
                    "dtype": np.dtype(dtype).name, "batch": batch, "shifts": kind,
                    "max_abs": float(err.max()), "mean_abs": float(err.mean()),
                })
    return cases


def forward_model_agreement(seed: int = 0) -> dict:
    """Whole physics head (reassemble, extract, probe, FFT), XLA vs no-XLA arm."""
    import tensorflow as tf

    from ptycho.physics.forward_tf import predicted_amplitude
    from ptycho.physics.probe import make_probe

    rng = np.random.default_rng(seed)
    n, c, b = 64, 4, 16
    obj = (rng.uniform(0.3, 1.0, (b, n, n, c)) * np.exp(1j * rng.uniform(-1.5, 1.5, (b, n, n, c)))).astype(np.complex64)
    offsets = rng.uniform(-3, 3, (b, c, 2)).astype(np.float32)
    probe = make_probe("defocused", n).astype(np.complex64)

    def head(xla):
        fn = tf.function(lambda o, f: predicted_amplitude(o, f, probe, tf.constant(0.0), xla=xla, canvas_pad=n // 4),
                         jit_compile=xla)
        return fn(tf.constant(obj), tf.constant(offsets)).numpy()

    a, r = head(True), head(False)
    scale = float(np.abs(r).max())
    return {"max_abs": float(np.abs(a - r).max() / scale), "mean_abs": float(np.abs(a - r).mean() / scale),
            "note": "relative to the largest amplitude"}


def inference_agreement(model_dirs: Sequence[str], dataset, max_samples: int = 128) -> dict:
    """Trained networks, XLA vs no-XLA predict step, on the study's test patterns.

    Each trained model is run through the same fixed-batch :class:`~ptycho.infer.Predictor`
    compiled with and without XLA; the complex patches ``amp * exp(i phase)`` are
    compared, relative to the largest amplitude.
    """
    from ptycho.infer import Predictor, load_network
    from ptycho.train import load_meta, prepare
    from ptycho.workflow import arm_of

    out = {}
    for model_dir in model_dirs:
        meta = load_meta(model_dir)
        name = arm_of(meta)
        data = prepare(dataset, meta["model"]["kind"], norm=meta["physics"]["intensity_norm"])
        network = load_network(model_dir)
        x = data.inputs[:max_samples]
        patches = {}
        for xla in (True, False):
            amp, phase = Predictor(network, meta["train"]["batch_size"], xla)(x)
            patches[xla] = amp.astype(np.float64) * np.exp(1j * phase.astype(np.float64))
        diff = np.abs(patches[True] - patches[False])
        scale = max(float(np.abs(patches[False]).max()), 1e-30)
        out[name] = {"max_abs": float(diff.max() / scale), "mean_abs": float(diff.mean() / scale),
                     "samples": len(x), "note": "complex patches, relative to the largest amplitude"}
    return out


def accuracy(threshold: float, seed: int = 0, model_dirs: Sequence[str] = (), dataset=None) -> dict:
    """Worst max error of: the translation suite, the forward model, trained-model inference."""
    cases = translation_suite(seed)
    forward = forward_model_agreement(seed)
    inference = inference_agreement(model_dirs, dataset) if model_dirs else {}
    worst = max([c["max_abs"] for c in cases] + [forward["max_abs"]] + [r["max_abs"] for r in inference.values()])
    trained = (f", and {len(inference)} trained model(s) at inference (worst {max(r['max_abs'] for r in inference.values()):.1e})"
               if inference else "")
    return verdict(
        "accuracy", worst, threshold, "<=",
        f"XLA-safe translation vs ImageProjectiveTransformV3 over {len(cases)} cases, the whole forward model"
        f"{trained}, XLA vs no-XLA: worst max |difference| {worst:.2e}",
        {"translation": cases, "forward_model": forward, "trained_inference": inference},
    )


# ----------------------------------------------------------------- gradients
def gradients(threshold: float, seed: int = 0, pinn_loss: str = "poisson") -> dict:
    """Loss gradients w.r.t. weights and inputs, XLA vs no-XLA, per variable; plus FD.

    ``pinn_loss`` is the PINN loss the study trains with. The value is the worst of the
    XLA-vs-no-XLA relative differences and the finite-difference relative error.
    """
    import tensorflow as tf

    from ptycho.config import SimulationConfig
    from ptycho.models import ModelConfig
    from ptycho.simulate import simulate_split
    from ptycho.train import TrainConfig, Trainer, prepare

    ds = simulate_split(SimulationConfig(n=32, object_size=56, n_lines=40, nphotons=1e6, probe_kind="defocused",
                                         seed=seed), "train")
    per_model = {}
    worst = 0.0
    for kind in ("pinn", "baseline"):
        data = prepare(ds, kind)
        idx = np.arange(8)
        x = tf.constant(data.inputs[idx])
        grads = {}
        for xla in (True, False):
            trainer = Trainer(ModelConfig(kind=kind, filters=4, loss=pinn_loss, mixing=1),  # every layer type
                              TrainConfig(batch_size=8, xla=xla, seed=seed),
                              ds.n, data.inputs.shape[-1], ds.probe, data.physics)

            def fn(x, off, tgt, trainer=trainer):
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch(x)
                    loss = tf.reduce_mean(trainer.loss_terms(x, off, tgt, training=False))
                return loss, tape.gradient(loss, trainer.variables), tape.gradient(loss, x)

            loss, gw, gx = tf.function(fn, jit_compile=xla)(x, data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})
            # Both arms build the same network in the same order; Keras numbers the layer
            # names per build, so variables are matched by position, labelled by the first.
            names = [getattr(v, "path", v.name) for v in trainer.variables]
            grads[xla] = {"loss": loss.numpy(), "weights": [g.numpy() for g in gw], "inputs": gx.numpy(),
                          "names": names}
        rel = {}
        for name, g, ref in zip(grads[True]["names"], grads[True]["weights"], grads[False]["weights"], strict=True):
            rel[name] = float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-30))
        rel_inputs = float(np.linalg.norm(grads[True]["inputs"] - grads[False]["inputs"])
                           / max(np.linalg.norm(grads[False]["inputs"]), 1e-30))
        per_model[kind] = {
            "loss_xla": float(grads[True]["loss"]), "loss_noxla": float(grads[False]["loss"]),
            "relative_error_per_variable": rel, "relative_error_inputs": rel_inputs,
        }
        worst = max(worst, rel_inputs, *rel.values())
    fd = finite_difference_check(seed)
    worst = fd["max_rel"] if not fd["max_rel"] <= worst else worst
    return verdict(
        "gradients", worst, threshold, "<=",
        f"loss gradients w.r.t. every weight and the inputs, XLA vs no-XLA: worst relative difference {worst:.2e}; "
        f"finite differences agree to {fd['max_rel']:.1e}",
        {"models": per_model, "finite_differences": fd},
    )


def finite_difference_check(seed: int = 0) -> dict:
    """Analytic vs central finite-difference gradient of the PINN loss (float64 physics)."""
    import tensorflow as tf

    from ptycho.physics.forward_tf import predicted_amplitude

    rng = np.random.default_rng(seed)
    n, c = 16, 4
    obj = tf.Variable(rng.uniform(0.5, 1.0, (1, n, n, c)) * np.exp(1j * rng.uniform(-1, 1, (1, n, n, c))))
    offsets = tf.constant([[[2.0, 2.0], [-2.0, 2.0], [2.0, -2.0], [-2.0, -2.0]]], tf.float64)
    r2 = (np.arange(n) - n // 2)[:, None] ** 2 + (np.arange(n) - n // 2)[None] ** 2
    probe = np.exp(-r2 / 20.0).astype(np.complex128)
    counts = tf.constant(rng.poisson(5.0, (1, n, n, c)).astype(np.float64))

    def loss(o):
        lam = predicted_amplitude(o, offsets, probe, tf.constant(1.0, tf.float64), xla=True, canvas_pad=4) ** 2
        return tf.reduce_mean(lam - counts * tf.math.log(lam + 1e-6))

    with tf.GradientTape() as tape:
        value = loss(obj)
    grad = tape.gradient(value, obj).numpy()
    h, errors = 1e-6, []
    for idx in [(0, 8, 8, 0), (0, 7, 9, 3), (0, 6, 6, 1), (0, 9, 5, 2)]:
        for direction in (1.0, 1j):
            delta = np.zeros(obj.shape, np.complex128)
            delta[idx] = h * direction
            fd = (loss(obj + delta) - loss(obj - delta)).numpy() / (2 * h)
            analytic = grad[idx].real if direction == 1.0 else grad[idx].imag
            errors.append(abs(analytic - fd) / max(abs(fd), 1e-12))
    return {"max_rel": float(max(errors)), "points": len(errors)}


# --------------------------------------------------------------- convergence
def loss_pairs(histories: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict]:
    """Per-epoch losses of the XLA and no-XLA arms of each (model, seed), side by side.

    ``{"pinn-s0": {"train_loss_xla": [...], "train_loss_noxla": [...], "val_loss_xla": [...],
    "val_loss_noxla": [...]}}``: the curves the convergence item and the loss figure show.
    """
    from ptycho.workflow import xla_pairs

    out = {}
    for key, on, off in xla_pairs(histories):
        a, b = histories[on], histories[off]
        out[key] = {
            "train_loss_xla": [h["train_loss"] for h in a], "train_loss_noxla": [h["train_loss"] for h in b],
            "val_loss_xla": [h["val_loss"] for h in a], "val_loss_noxla": [h["val_loss"] for h in b],
        }
    return out


def convergence(histories: Mapping[str, Sequence[Mapping[str, Any]]], threshold: float,
                initial: Mapping[str, float] | None = None) -> dict:
    """Final validation losses of the two arms of each (model, seed); both must decrease.

    ``histories`` maps an arm name (``pinn-xla-s0``) to its per-epoch records and
    ``initial`` to its validation loss before training. "Decreased" means the final
    validation loss is below the initial one (or, without a validation split, the last
    epoch's mean training loss below the first's).
    """
    initial = dict(initial or {})

    def decreased(arm: str, h: Sequence[Mapping[str, Any]]) -> bool:
        start = initial.get(arm)
        if start is not None and math.isfinite(start) and math.isfinite(h[-1]["val_loss"]):
            return h[-1]["val_loss"] < start
        return h[-1]["train_loss"] < h[0]["train_loss"]

    from ptycho.workflow import xla_pairs

    curves = loss_pairs(histories)
    pairs, worst, all_decreased = {}, 0.0, True
    for key, name, other in xla_pairs(histories):
        a, b = histories[name], histories[other]
        fa, fb = a[-1]["val_loss"], b[-1]["val_loss"]
        rel = abs(fa - fb) / max(abs(fb), 1e-12)
        went_down = {arm: decreased(arm, h) for arm, h in ((name, a), (other, b))}
        all_decreased &= all(went_down.values())
        worst = rel if not rel <= worst else worst  # NaN stays NaN, and then FAILs
        pairs[key] = {
            "final_val_loss_xla": fa, "final_val_loss_noxla": fb, "relative_difference": rel,
            "decreased": went_down, "initial_val_loss": {name: initial.get(name), other: initial.get(other)},
            **curves[key],
        }
    value = worst if pairs and all_decreased else float("nan")
    summary = (f"final validation losses of the arms differ by at most {worst:.2%}; every arm's loss decreased"
               if all_decreased else "an arm's training loss did not decrease")
    if not pairs:
        summary = "no pair of XLA / no-XLA arms to compare (both arms must be in the matrix)"
    return verdict("convergence", value, threshold, "<=", summary, {"pairs": pairs})


# ------------------------------------------------------------------- quality
QUALITY_KEYS = ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr", "amp_mae", "phase_mae", "amp_frc50", "phase_frc50")


def quality(metrics: Mapping[str, Mapping[str, Any]], threshold: float) -> dict:
    """SSIM/PSNR/MAE/FRC per arm; the verdict is on the SSIM differences between arms.

    Evidence also holds every metric's XLA - no-XLA difference and, per arm, PINN -
    baseline (the physics-informed model's margin over the supervised one).
    """
    from ptycho.workflow import arm_name, parse_arm, xla_pairs

    def number(v: Any) -> float:
        return float("nan") if v is None else float(v)  # JSON stores NaN as null

    per_arm = {name: {k: number(m["mean"].get(k)) for k in QUALITY_KEYS} for name, m in sorted(metrics.items())}
    diffs, arm_differences, worst = {}, {}, 0.0
    for key, name, other in xla_pairs(per_arm):
        d = {k: abs(per_arm[name][k] - per_arm[other][k]) for k in ("amp_ssim", "phase_ssim")}
        diffs[key] = d
        arm_differences[key] = {k: per_arm[name][k] - per_arm[other][k] for k in QUALITY_KEYS}
        for v in d.values():
            worst = v if not v <= worst else worst  # a NaN SSIM makes the item FAIL
    pinn_vs_baseline = {}
    for name in per_arm:
        model, xla, seed = parse_arm(name)
        base = arm_name("baseline", xla, seed)
        if model == "pinn" and base in per_arm:
            pinn_vs_baseline[f"{'xla' if xla else 'noxla'}-s{seed}"] = {
                k: per_arm[name][k] - per_arm[base][k] for k in QUALITY_KEYS}
    value = worst if diffs else float("nan")
    return verdict(
        "quality", value, threshold, "<=",
        f"SSIM of the XLA and no-XLA reconstructions differ by at most {worst:.4f}" if diffs
        else "no pair of XLA / no-XLA arms to compare",
        {"per_arm": per_arm, "ssim_differences": diffs, "arm_differences": arm_differences,
         "pinn_minus_baseline": pinn_vs_baseline},
    )


# ------------------------------------------------------------------- speedup
def bootstrap_ratio(numerator: Sequence[float], denominator: Sequence[float], *, resamples: int = 2000,
                    level: float = 0.95, seed: int = 0) -> dict:
    """Ratio of medians ``median(numerator) / median(denominator)`` with a bootstrap interval.

    Both samples are resampled with replacement, independently (the arms are timed in
    separate runs); the interval is the percentile interval of the resampled ratios.
    With fewer than 2 samples on either side the interval is NaN.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    ratio = float(np.median(num) / np.median(den)) if num.size and den.size else float("nan")
    if num.size < 2 or den.size < 2:
        return {"ratio": ratio, "low": float("nan"), "high": float("nan"), "level": level, "resamples": 0}
    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(num, (resamples, num.size)), axis=1)
    b = np.median(rng.choice(den, (resamples, den.size)), axis=1)
    low, high = np.percentile(a / b, [50 * (1 - level), 50 * (1 + level)])
    return {"ratio": ratio, "low": float(low), "high": float(high), "level": level, "resamples": resamples}


def speedup_intervals(bench: Mapping[str, Any]) -> dict[str, dict]:
    """Per model: train-step speedup (no-XLA time / XLA time) and inference speedup
    (XLA throughput / no-XLA throughput, from per-batch times), each with its interval."""
    out = {}
    for model in sorted({a["model"] for a in bench["arms"]}, key=lambda m: m != "pinn"):
        on = next((a for a in bench["arms"] if a["model"] == model and a["xla"]), None)
        off = next((a for a in bench["arms"] if a["model"] == model and not a["xla"]), None)
        if on is None or off is None:
            continue
        out[f"{model} train step"] = bootstrap_ratio(off["step_samples_s"], on["step_samples_s"])
        if on.get("infer_batch_samples_s") and off.get("infer_batch_samples_s"):
            out[f"{model} inference"] = bootstrap_ratio(off["infer_batch_samples_s"], on["infer_batch_samples_s"])
    return out


#: Below this many timed steps per arm a percentile bootstrap of the median is not
#: trusted (with 3 equal samples it gives a zero-width interval): the summary says so.
MIN_STEPS_FOR_INTERVAL = 10


def speedup(bench: Mapping[str, Any], threshold: float, train_timings: Mapping[str, Any] | None = None) -> dict:
    """No-XLA / XLA ratio of the median PINN train step, from the benchmark job.

    The value judged is the lower bound of the ratio's 95 % bootstrap interval (with
    fewer than :data:`MIN_STEPS_FOR_INTERVAL` steps per arm, the ratio itself, and the
    summary says so): PASS means faster with confidence. The ratio, every interval
    and the machine are evidence. XLA being slower is a finding, stated as such.
    """
    intervals = speedup_intervals(bench)
    pinn = intervals.get("pinn train step", {"ratio": float("nan"), "low": float("nan"), "high": float("nan")})
    ratio = pinn["ratio"]
    n = min((a["step_s"]["n"] for a in bench["arms"] if a["model"] == "pinn"), default=0)
    reliable = n >= MIN_STEPS_FOR_INTERVAL and math.isfinite(pinn["low"]) and math.isfinite(pinn["high"])
    # Judged on the interval's lower bound: PASS means XLA is faster with 95 % confidence,
    # not that one noisy median came out ahead.
    value = pinn["low"] if reliable else ratio
    if not math.isfinite(ratio):
        summary = "no PINN timings for both arms: the speedup was not measured"
    else:
        effect = f"makes the PINN train step {'faster' if ratio >= 1.0 else 'SLOWER'}"
        if not reliable:
            spread = f"median of {n} steps per arm, too few for a confidence interval: judged on the ratio itself"
        elif pinn["low"] <= 1.0 <= pinn["high"]:
            effect = "does not change the PINN train step time measurably"
            spread = f"95% CI {pinn['low']:.2f}-{pinn['high']:.2f} includes 1, median of {n} steps per arm"
        else:
            spread = f"95% CI {pinn['low']:.2f}-{pinn['high']:.2f}, median of {n} steps per arm"
        summary = f"XLA {effect} on this machine: {ratio:.2f}x the speed of no-XLA ({spread})"
    return verdict("speedup", value, threshold, ">=", summary,
                   {"ratio": ratio, "judged_on": "ci_low" if reliable else "ratio", "bench": bench,
                    "intervals": intervals, "machine": bench.get("machine", {}),
                    "training_jobs": dict(train_timings or {})})
