"""The validation checklist (DOMAIN.md section 7): each item measured, thresholded, judged.

Every item returns the same record::

    {"item": name, "status": "PASS" | "FAIL", "value": float, "threshold": float,
     "comparison": "<=" | ">=", "summary": one sentence, "evidence": {...}}

so the report can render them uniformly. Items measure (accuracy, gradients) or
collect the pipeline's own outputs (convergence, quality, speedup); none is typed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ptycho.nets.models import MODEL_KINDS
from ptycho.nets.xla import COMPARED

#: The checklist, in report order: the one list the CLI, the rules and the report use.
ITEMS = ("accuracy", "gradients", "convergence", "quality", "speedup")
#: The items measured with TensorFlow (the others collect the pipeline's outputs).
MEASURED = ("accuracy", "gradients")


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

    ref = head("off")
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
    from ptycho.study.arms import arm_of

    modes = [m for m in modes if m not in ("off", "physics")]

    out = {}
    for model_dir in model_dirs:
        meta = load_meta(model_dir)
        name = arm_of(meta)
        data = prepare(dataset, meta["model"]["kind"], norm=meta["physics"]["intensity_norm"])
        network = load_network(model_dir)
        x = data.inputs[:max_samples]
        patches = {}
        for mode in ["off", *modes]:
            amp, phase = Predictor(network, meta["train"]["batch_size"], mode)(x)
            patches[mode] = amp.astype(np.float64) * np.exp(1j * phase.astype(np.float64))
        scale = max(float(np.abs(patches["off"]).max()), 1e-30)
        per_mode = {m: np.abs(patches[m] - patches["off"]) for m in modes}
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
    modes = [m for m in modes if m != "off"] or ["jit"]
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
        "accuracy",
        worst,
        threshold,
        "<=",
        f"XLA-safe translation vs ImageProjectiveTransformV3 over {len(cases)} cases, the whole forward model"
        f"{trained}, modes {', '.join(modes)} vs off: worst max |difference| {worst:.2e}",
        {"translation": cases, "forward_model": forward, "trained_inference": inference, "modes": list(modes)},
    )


# ----------------------------------------------------------------- gradients
def gradients(threshold: float, seed: int = 0, pinn_loss: str = "poisson", modes: Sequence[str] = COMPARED) -> dict:
    """Loss gradients w.r.t. weights and inputs, each XLA mode vs ``off``, per variable; plus FD.

    ``pinn_loss`` is the PINN loss the study trains with. The gradient function is
    compiled as the mode compiles its train step (:func:`ptycho.nets.xla.compile_step`, with
    the ``physics`` mode's head a nested XLA function). The value is the worst of the
    per-mode relative differences and the finite-difference relative error.
    """
    import tensorflow as tf

    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare
    from ptycho.nets.xla import compile_step

    modes = [m for m in modes if m != "off"] or ["jit"]
    ds = simulate_split(
        SimulationConfig(n=32, object_size=56, n_lines=40, nphotons=1e6, probe_kind="defocused", seed=seed), "train"
    )
    per_model = {}
    worst = 0.0
    for kind in MODEL_KINDS:
        data = prepare(ds, kind)
        idx = np.arange(8)
        x = tf.constant(data.inputs[idx])
        grads = {}
        for mode in ["off", *modes]:
            trainer = Trainer(
                ModelConfig(kind=kind, filters=4, loss=pinn_loss, mixing=1),  # every layer type
                TrainConfig(batch_size=8, xla=mode, seed=seed),
                ds.n,
                data.inputs.shape[-1],
                ds.probe,
                data.physics,
            )

            def fn(x, off, tgt, trainer=trainer):
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch(x)
                    loss = tf.reduce_mean(trainer.loss_terms(x, off, tgt, training=False))
                return loss, tape.gradient(loss, trainer.variables), tape.gradient(loss, x)

            loss, gw, gx = compile_step(fn, mode)(x, data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})
            # Every mode builds the same network in the same order; Keras numbers the layer
            # names per build, so variables are matched by position, labelled by the first.
            names = [getattr(v, "path", v.name) for v in trainer.variables]
            grads[mode] = {
                "loss": loss.numpy(),
                "weights": [g.numpy() for g in gw],
                "inputs": gx.numpy(),
                "names": names,
            }
        ref = grads["off"]
        per_mode = {}
        for mode in modes:
            g = grads[mode]
            rel = {
                name: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
                for name, a, b in zip(ref["names"], g["weights"], ref["weights"], strict=True)
            }
            rel_inputs = float(np.linalg.norm(g["inputs"] - ref["inputs"]) / max(np.linalg.norm(ref["inputs"]), 1e-30))
            per_mode[mode] = {
                "loss": float(g["loss"]),
                "relative_error_per_variable": rel,
                "relative_error_inputs": rel_inputs,
            }
            worst = max(worst, rel_inputs, *rel.values())
        per_model[kind] = {"loss_off": float(ref["loss"]), "modes": per_mode}
    fd = finite_difference_check(seed)
    worst = fd["max_rel"] if not fd["max_rel"] <= worst else worst
    return verdict(
        "gradients",
        worst,
        threshold,
        "<=",
        f"loss gradients w.r.t. every weight and the inputs, modes {', '.join(modes)} vs off: worst relative "
        f"difference {worst:.2e}; finite differences agree to {fd['max_rel']:.1e}",
        {"models": per_model, "finite_differences": fd, "modes": list(modes)},
    )


def finite_difference_check(seed: int = 0) -> dict:
    """Analytic vs central finite-difference gradient of the PINN loss (float64 physics)."""
    import tensorflow as tf

    from ptycho.nets.models import ModelConfig
    from ptycho.physics.forward_tf import poisson_nll, predicted_amplitude

    rng = np.random.default_rng(seed)
    n, c = 16, 4
    obj = tf.Variable(rng.uniform(0.5, 1.0, (1, n, n, c)) * np.exp(1j * rng.uniform(-1, 1, (1, n, n, c))))
    offsets = tf.constant([[[2.0, 2.0], [-2.0, 2.0], [2.0, -2.0], [-2.0, -2.0]]], tf.float64)
    r2 = (np.arange(n) - n // 2)[:, None] ** 2 + (np.arange(n) - n // 2)[None] ** 2
    probe = np.exp(-r2 / 20.0).astype(np.complex128)
    counts = tf.constant(rng.poisson(5.0, (1, n, n, c)).astype(np.float64))

    def loss(o):
        amp = predicted_amplitude(o, offsets, probe, tf.constant(1.0, tf.float64), xla=True, canvas_pad=4)
        return tf.reduce_mean(poisson_nll(amp, counts, ModelConfig().poisson_eps))

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
def loss_curves(histories: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict]:
    """Per-epoch losses of every mode of each (model, seed), side by side:
    ``{"pinn-s0": {"off": {"train": [...], "val": [...]}, "jit": {...}}}``, the curves the
    convergence item and the loss figure show (only models and seeds with an ``off`` arm)."""
    from ptycho.study.arms import mode_pairs, parse_arm

    out: dict[str, dict] = {}
    for pair in mode_pairs(histories):
        group = out.setdefault(f"{pair.model}-s{pair.seed}", {})
        for name in (pair.reference, pair.arm):
            group[parse_arm(name).mode] = {
                "train": [h["train_loss"] for h in histories[name]],
                "val": [h["val_loss"] for h in histories[name]],
            }
    return out


def _failed_summary(failed: Mapping[str, str]) -> str:
    return "; ".join(f"arm {arm} FAILED in training: {reason}" for arm, reason in sorted(failed.items()))


def convergence(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    threshold: float,
    initial: Mapping[str, float] | None = None,
    failed: Mapping[str, str] | None = None,
) -> dict:
    """Final validation losses of each mode's arm vs the ``off`` arm of the same model and
    seed; every arm's loss must decrease.

    ``histories`` maps an arm name (``pinn-jit-s0``) to its per-epoch records and
    ``initial`` to its validation loss before training. "Decreased" means the final
    validation loss is below the initial one (or, without a validation split, the last
    epoch's mean training loss below the first's). ``failed`` maps an arm whose training
    diverged (its ``model.json`` says ``status: FAILED``) to the reason: the item FAILs
    and says so, whatever the other arms did.
    """
    from ptycho.study.arms import mode_pairs

    initial = dict(initial or {})
    failed = dict(failed or {})

    def decreased(arm: str, h: Sequence[Mapping[str, Any]]) -> bool:
        start = initial.get(arm)
        if start is not None and math.isfinite(start) and math.isfinite(h[-1]["val_loss"]):
            return h[-1]["val_loss"] < start
        return h[-1]["train_loss"] < h[0]["train_loss"]

    pairs, all_decreased = {}, True
    for pair in mode_pairs(histories):
        a, b = histories[pair.arm], histories[pair.reference]
        if not a or not b:  # a diverged arm may have no good epoch at all
            pairs[pair.key] = {
                "mode": pair.mode,
                "arm": pair.arm,
                "reference": pair.reference,
                "final_val_loss": a[-1]["val_loss"] if a else None,
                "final_val_loss_off": b[-1]["val_loss"] if b else None,
                "relative_difference": float("nan"),
                "decreased": {},
                "initial_val_loss": {},
            }
            continue  # its NaN final loss makes the comparison below FAIL
        fa, fb = a[-1]["val_loss"], b[-1]["val_loss"]
        rel = abs(fa - fb) / max(abs(fb), 1e-12)
        went_down = {arm: decreased(arm, h) for arm, h in ((pair.arm, a), (pair.reference, b))}
        all_decreased &= all(went_down.values())
        pairs[pair.key] = {
            "mode": pair.mode,
            "arm": pair.arm,
            "reference": pair.reference,
            "final_val_loss": fa,
            "final_val_loss_off": fb,
            "relative_difference": rel,
            "decreased": went_down,
            "initial_val_loss": {pair.arm: initial.get(pair.arm), pair.reference: initial.get(pair.reference)},
        }
    # The verdict, as for quality: each mode's mean final validation loss over seeds
    # against off's, relative to off's mean, judged against the seed-to-seed spread.
    finals = {n: h[-1]["val_loss"] if h else float("nan") for n, h in histories.items()}
    comparisons, words = {}, []
    for (model, mode), (seeds_mode, seeds_off) in _seed_groups(histories).items():
        ref = float(np.mean([finals[n] for n in seeds_off.values()]))
        scale = abs(ref) if math.isfinite(ref) and ref != 0 else float("nan")
        c = seed_comparison(
            {s: finals[n] / scale for s, n in seeds_mode.items()},
            {s: finals[n] / scale for s, n in seeds_off.items()},
            threshold,
        )
        comparisons[f"{model}-{mode}"] = c
        words.append(_comparison_words(model, mode, "final validation loss (relative to off's mean)", c, percent=True))
    worst_c = _worst(comparisons.values())
    margin = worst_c["margin"] if worst_c is not None else threshold
    value = abs(worst_c["difference"]) if worst_c is not None and all_decreased else float("nan")
    summary = (
        ("; ".join(words) + "; every arm's loss decreased")
        if all_decreased
        else "an arm's training loss did not decrease"
    )
    if not pairs:
        summary = "no pair of an XLA mode and off to compare (off and another mode must be in the matrix)"
    if failed:
        value, summary = float("nan"), _failed_summary(failed)
    return verdict(
        "convergence",
        value,
        margin,
        "<=",
        summary,
        {
            "pairs": pairs,
            "comparisons": comparisons,
            "threshold": float(threshold),
            "curves": loss_curves(histories),
            "failed": failed,
        },
    )


# ------------------------------------------------------------------- quality
QUALITY_KEYS = ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr", "amp_mae", "phase_mae", "amp_frc50", "phase_frc50")


SSIM_KEYS = {"amp_ssim": "amplitude SSIM", "phase_ssim": "phase SSIM"}  #: the verdict's metrics, in words


def seed_comparison(mode_values: Mapping[int, float], off_values: Mapping[int, float], threshold: float) -> dict:
    """One metric of one mode against ``off`` across seeds, judged against the seed-to-seed spread.

    Two trainings of the same arm with different seeds already differ (initial weights,
    batch order); with one seed per arm, float rounding alone can move an SSIM by a few
    hundredths. So the mode - off difference of the means over seeds is compared with
    how far seeds of the same arm fall apart:

    * ``difference``: mean(mode) - mean(off) over the seeds of each; ``low``/``high``: its
      95 % t interval from the pooled seed-to-seed standard deviation ``sd`` (both arms,
      ``n_mode - 1 + n_off - 1`` degrees of freedom);
    * ``spread``: the largest difference between two seeds of the same arm (either arm);
    * ``margin`` = max(``threshold``, ``spread``): a difference within it is one that
      changing the seed also produces (or one below the threshold that matters);
    * ``within``: |difference| <= margin (the verdict); ``equivalent``: the two one-sided
      tests at 5 % (the 90 % interval lies inside +-margin), which more seeds make
      possible and one seed cannot.

    With one seed per arm there is no spread: the margin is the threshold.
    """
    from scipy import stats

    a = np.array([mode_values[s] for s in sorted(mode_values)], float)
    b = np.array([off_values[s] for s in sorted(off_values)], float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")
    dof = len(a) - 1 + len(b) - 1
    spread = max((float(np.ptp(v)) for v in (a, b) if len(v) > 1), default=float("nan"))
    out = {
        "seeds_mode": sorted(mode_values),
        "seeds_off": sorted(off_values),
        "mean_mode": float(a.mean()),
        "mean_off": float(b.mean()),
        "difference": diff,
        "sd": float("nan"),
        "low": float("nan"),
        "high": float("nan"),
        "spread": spread,
        "margin": float(threshold),
        "within": False,
        "equivalent": False,
    }
    if dof > 0:
        sd = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof)
        se = sd * math.sqrt(1 / len(a) + 1 / len(b))
        t95, t90 = stats.t.ppf(0.975, dof), stats.t.ppf(0.95, dof)
        out.update(
            sd=sd,
            low=diff - t95 * se,
            high=diff + t95 * se,
            margin=max(float(threshold), spread if math.isfinite(spread) else 0.0),
        )
        out["equivalent"] = bool(abs(diff) + t90 * se <= out["margin"])
    out["within"] = bool(abs(diff) <= out["margin"])  # NaN compares False: no evidence, no pass
    return out


def _comparison_words(model: str, mode: str, label: str, c: Mapping[str, Any], percent: bool = False) -> str:
    """One clause: the mode - off difference, its interval, the seed spread and the verdict, in words."""

    def f(v: float, signed: bool = False) -> str:
        return (f"{v:+.1%}" if signed else f"{v:.1%}") if percent else (f"{v:+.4f}" if signed else f"{v:.4f}")

    n_a, n_b = len(c["seeds_mode"]), len(c["seeds_off"])
    head = f"{'PINN' if model == 'pinn' else model} {mode} - off {label}: {f(c['difference'], True)}"
    if not math.isfinite(c["sd"]):
        return (
            f"{head} (one seed per arm, so no seed-to-seed spread to judge it by); "
            f"{'within' if c['within'] else 'beyond'} the {f(c['margin'])} threshold"
        )
    spread = (
        f"seeds of the same arm differ by up to {f(c['spread'])}"
        if math.isfinite(c["spread"])
        else "one arm has one seed"
    )
    if c["within"]:
        which = "the seed-to-seed spread" if c["margin"] == c["spread"] else "the threshold (above the seed spread)"
        judged = f"the difference is within {which}, {f(c['margin'])}"
        judged += (
            "; its 90 % interval lies inside that too: equivalent at 5 %"
            if c["equivalent"]
            else "; more seeds would be needed to show equivalence (the 90 % interval reaches past it)"
        )
    else:
        judged = f"the difference EXCEEDS both the seed-to-seed spread and the threshold ({f(c['margin'])})"
    return (
        f"{head} (95 % interval {f(c['low'], True)} to {f(c['high'], True)}, {n_a} vs {n_b} seeds); {spread}; {judged}"
    )


def _seed_groups(names: Iterable[str]) -> dict[tuple[str, str], tuple[dict[int, str], dict[int, str]]]:
    """(model, mode) -> (seed -> arm of the mode, seed -> arm of off) for every mode paired with off."""
    from ptycho.study.arms import mode_pairs, parse_arm

    names = list(names)
    arms = [parse_arm(n) for n in names]
    out = {}
    for pair in mode_pairs(names):
        key = (pair.model, pair.mode)
        if key not in out:
            out[key] = (
                {a.seed: a.name for a in arms if (a.model, a.mode) == key},
                {a.seed: a.name for a in arms if (a.model, a.mode) == (pair.model, "off")},
            )
    return out


def _worst(comparisons: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The comparison with the largest |difference| / margin (a NaN one wins: it FAILs)."""
    worst, ratio_w = None, 0.0
    for c in comparisons:
        ratio = abs(c["difference"]) / c["margin"] if c["margin"] > 0 else float("inf")
        if worst is None or not math.isnan(ratio_w) and not ratio <= ratio_w:
            worst, ratio_w = c, ratio
    return worst


def quality(
    metrics: Mapping[str, Mapping[str, Any]], threshold: float, failed: Mapping[str, str] | None = None
) -> dict:
    """SSIM/PSNR/MAE/FRC per arm; the verdict compares each mode with ``off`` across seeds.

    For each model, mode and SSIM (amplitude, phase), :func:`seed_comparison` sets the
    mode - off difference of the means over seeds, with its interval, against the
    seed-to-seed spread of the same arm (or ``threshold`` if larger): the item PASSes
    when no difference exceeds it. The value is the difference closest to (or furthest
    past) its margin, and the threshold that margin. Evidence also holds every metric's
    per-seed mode - off difference and, per mode and seed, PINN - baseline (the
    physics-informed model's margin over the supervised one). An arm in ``failed``
    (diverged in training; its reconstruction is from its last good state) makes the
    item FAIL with the reason.
    """
    from ptycho.study.arms import arm_name, mode_pairs, parse_arm

    def number(v: Any) -> float:
        return float("nan") if v is None else float(v)  # JSON stores NaN as null

    per_arm = {name: {k: number(m["mean"].get(k)) for k in QUALITY_KEYS} for name, m in sorted(metrics.items())}
    diffs, arm_differences = {}, {}
    for pair in mode_pairs(per_arm):
        diffs[pair.key] = {k: abs(per_arm[pair.arm][k] - per_arm[pair.reference][k]) for k in SSIM_KEYS}
        arm_differences[pair.key] = {k: per_arm[pair.arm][k] - per_arm[pair.reference][k] for k in QUALITY_KEYS}
    comparisons, words = {}, []
    for (model, mode), (seeds_mode, seeds_off) in _seed_groups(per_arm).items():
        comparisons[f"{model}-{mode}"] = {}
        for key in SSIM_KEYS:
            c = seed_comparison(
                {s: per_arm[n][key] for s, n in seeds_mode.items()},
                {s: per_arm[n][key] for s, n in seeds_off.items()},
                threshold,
            )
            comparisons[f"{model}-{mode}"][key] = c
            words.append(_comparison_words(model, mode, SSIM_KEYS[key], c))
    worst = _worst(c for per in comparisons.values() for c in per.values())
    if worst is None:
        value, margin = float("nan"), threshold
        summary = "no pair of an XLA mode and off to compare"
    else:  # the largest |difference| / margin decides: PASS iff every difference is within its margin
        value, margin = abs(worst["difference"]), worst["margin"]
        summary = "; ".join(words)
    pinn_vs_baseline = {}
    for name in per_arm:
        arm = parse_arm(name)
        base = arm_name("baseline", arm.mode, arm.seed)
        if arm.model == "pinn" and base in per_arm:
            pinn_vs_baseline[f"{arm.mode}-s{arm.seed}"] = {k: per_arm[name][k] - per_arm[base][k] for k in QUALITY_KEYS}
    if failed:
        value = float("nan")
        summary = f"{_failed_summary(failed)} (its reconstruction is from its last good state); {summary}"
    return verdict(
        "quality",
        value,
        margin,
        "<=",
        summary,
        {
            "per_arm": per_arm,
            "comparisons": comparisons,
            "threshold": float(threshold),
            "ssim_differences": diffs,
            "arm_differences": arm_differences,
            "pinn_minus_baseline": pinn_vs_baseline,
            "failed": dict(failed or {}),
        },
    )


# ------------------------------------------------------------------- speedup
#: Below this many timed steps per arm a percentile bootstrap of the median is not
#: trusted (with 3 equal samples it gives a zero-width interval): the summary says so.
MIN_STEPS_FOR_INTERVAL = 10
CONTEXT_WORDS = {"alone": "alone on the machine", "shared": "with the cores shared by every arm's training"}


def speedup_intervals(bench: Mapping[str, Any]) -> dict[str, dict]:
    """``"PINN jit, train step alone" -> {ratio, low, high}`` for every model, mode and
    measurement of the benchmark (speed relative to ``off``: above 1 = faster)."""
    out = {}
    names = {"train_step_alone": "train step alone", "train_step_shared": "train step shared", "inference": "inference"}
    for model, per in bench.get("ratios", {}).items():
        label = "PINN" if model == "pinn" else model.capitalize()
        for mode, r in per.items():
            for key, word in names.items():
                if key in r:
                    out[f"{label} {mode}, {word}"] = r[key]
    return out


def _steps(bench: Mapping[str, Any], model: str, context: str) -> int:
    counts = [
        (a["step_s"] if context == "alone" else a.get("shared", {}).get("step_s", {})).get("n", 0)
        for a in bench["arms"]
        if a["model"] == model
    ]
    return min(counts, default=0)


def speedup(
    bench: Mapping[str, Any], threshold: float, train_timings: Mapping[str, Any] | None = None, context: str = "alone"
) -> dict:
    """The fastest XLA mode's PINN train step vs ``off``, in ``context`` (alone | shared).

    The value judged is the lower bound of that ratio's 95 % bootstrap interval (with
    fewer than :data:`MIN_STEPS_FOR_INTERVAL` steps per arm, the ratio itself, and the
    summary says so): PASS means some XLA mode is faster with confidence in that
    context. Both contexts, every mode, every interval and the machine are evidence; a
    slower XLA is a finding, stated as such.
    """
    from ptycho.study.bench import fastest

    words = {}
    verdict_value, verdict_text = float("nan"), ""
    for ctx in bench.get("contexts", {}):
        best = fastest(bench, "pinn", ctx)
        if best is None:
            continue
        mode, r = best
        n = _steps(bench, "pinn", ctx)
        reliable = n >= MIN_STEPS_FOR_INTERVAL and math.isfinite(r["low"]) and math.isfinite(r["high"])
        if r["ratio"] >= 1.0 and reliable and r["low"] > 1.0:
            effect = f"the fastest XLA mode, {mode}, makes the PINN train step faster: {r['ratio']:.2f}x off"
        elif r["ratio"] >= 1.0 and reliable:
            effect = (
                f"no XLA mode makes the PINN train step measurably faster (best: {mode}, {r['ratio']:.2f}x off, "
                "interval includes 1)"
            )
        elif r["ratio"] >= 1.0:
            effect = f"the fastest XLA mode is {mode}: {r['ratio']:.2f}x off"
        else:
            effect = f"every XLA mode makes the PINN train step SLOWER (best: {mode}, {r['ratio']:.2f}x off)"
        spread = (
            f"95% CI {r['low']:.2f}-{r['high']:.2f}, median of {n} steps per arm"
            if reliable
            else f"median of {n} steps per arm, too few for a confidence interval: judged on the ratio itself"
        )
        judged = " (the verdict's context)" if ctx == context else ""
        foreign = bench["contexts"][ctx].get("foreign_load") or {}
        if foreign.get("contaminated"):
            spread += (
                f"; CONTAMINATED: other processes kept {foreign['foreign_cores']:.2f} of "
                f"{foreign['of_cores']} cores busy during it"
            )
        words[ctx] = {
            "mode": mode,
            "ratio": r["ratio"],
            "low": r["low"],
            "high": r["high"],
            "reliable": reliable,
            "contaminated": bool(foreign.get("contaminated")),
            "text": f"{CONTEXT_WORDS.get(ctx, ctx).capitalize()}{judged}: {effect} ({spread})",
        }
        if ctx == context:
            verdict_value = r["low"] if reliable else r["ratio"]
            verdict_text = words[ctx]["text"]
    if not words:
        summary = "no PINN timings for off and an XLA mode: the speedup was not measured"
    else:
        others = [w["text"][0].lower() + w["text"][1:] for c, w in words.items() if c != context]
        summary = "; ".join(([verdict_text] if verdict_text else [f"No {context} measurement to judge"]) + others)
    return verdict(
        "speedup",
        verdict_value,
        threshold,
        ">=",
        summary,
        {
            "context": context,
            "per_context": words,
            "bench": bench,
            "intervals": speedup_intervals(bench),
            "machine": bench.get("machine", {}),
            "training_jobs": dict(train_timings or {}),
        },
    )
