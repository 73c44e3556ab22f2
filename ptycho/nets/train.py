"""One training loop for both models, under any XLA mode (ptycho.nets.xla), with honest timings.

* Fixed batch shape: training batches drop the remainder (a fresh shuffle every epoch
  means no sample is lost for good), validation pads the last batch and masks it. The
  train step is traced exactly once; a retrace raises (it would silently recompile).
* Timing: the first call of the train step (trace + compile) is reported apart; every
  later step's wall time is recorded (synchronised on the loss value).
* NaN or infinite loss stops training with :class:`TrainingDiverged`; the last good
  checkpoint (written atomically at the end of every epoch) is kept, and so is the
  resumable state in ``<out>/checkpoint/`` (weights, optimiser, batch-order RNG), which
  a workflow manager does not delete with the job's declared outputs.
* Resume: ``train(..., resume=True)`` continues a saved state exactly.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.artifacts import atomic_write, write_json
from ptycho.config import _check_choice, _check_range, from_dict, to_dict
from ptycho.data.dataset import Dataset
from ptycho.errors import PtychoError
from ptycho.nets.models import ModelConfig

LR_SCHEDULES = ("constant", "cosine")


class TrainingDiverged(PtychoError):
    """Loss became NaN or infinite."""


class Retraced(PtychoError):
    """A compiled step was traced more than once (it would recompile)."""


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; saved with every checkpoint."""

    epochs: int = 20
    batch_size: int = 16
    learning_rate: float = 1e-3
    validation_fraction: float = 0.1
    seed: int = 0
    xla: str = "jit"  #: XLA mode, one of ptycho.nets.xla.MODES (true/false are read as jit/off)
    max_samples: int = 0  #: cap on training samples (groups or patterns); 0 = all
    lr_schedule: str = "constant"  #: constant | cosine (decay to lr_floor over the whole training)
    warmup_epochs: float = 0.0  #: linear warm-up from 0 to learning_rate over this many epochs
    lr_floor: float = 0.0  #: cosine: final learning rate as a fraction of learning_rate

    def __post_init__(self) -> None:
        from ptycho.nets.xla import parse_mode

        object.__setattr__(self, "xla", parse_mode(self.xla, "train.xla"))
        _check_range("train.epochs", self.epochs, 1, 100_000)
        _check_range("train.batch_size", self.batch_size, 1, 4096)
        _check_range("train.learning_rate", self.learning_rate, 1e-8, 1.0)
        _check_range("train.validation_fraction", self.validation_fraction, 0.0, 0.5)
        _check_range("train.max_samples", self.max_samples, 0, 10**9)
        _check_choice("train.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _check_range("train.warmup_epochs", self.warmup_epochs, 0.0, self.epochs)
        _check_range("train.lr_floor", self.lr_floor, 0.0, 1.0)
        _check_range("train.seed", self.seed, 0, 2**63 - 1)

    def learning_rate_at(self, steps_per_epoch: int):
        """The optimiser's learning rate: a float (constant, no warm-up) or Keras's
        ``CosineDecay``, whose linear warm-up also serves the constant schedule (a decay
        with ``alpha = 1`` stays at its peak)."""
        import keras

        total = max(1, self.epochs * steps_per_epoch)
        warmup = int(round(self.warmup_epochs * steps_per_epoch))
        if self.lr_schedule == "constant" and warmup == 0:
            return self.learning_rate
        return keras.optimizers.schedules.CosineDecay(
            0.0 if warmup else self.learning_rate,
            max(1, total - warmup),
            alpha=1.0 if self.lr_schedule == "constant" else self.lr_floor,
            warmup_target=self.learning_rate if warmup else None,
            warmup_steps=warmup,
        )


@dataclass
class TrainingData:
    """Network-ready arrays for one model kind (see :func:`prepare`)."""

    inputs: np.ndarray  #: (S, N, N, Cin) float32 normalised amplitudes
    offsets: np.ndarray  #: (S, C, 2) float32 (zeros for the baseline)
    targets: dict[str, np.ndarray]  #: counts (PINN) or amp/phase patches (baseline)
    physics: dict[str, Any] = field(default_factory=dict)


def intensity_norm(ds: Dataset) -> float:
    """Per-pixel mean count of the dataset: the unit of the normalised intensities."""
    n = ds.n
    return float(ds.counts.sum(axis=(1, 2), dtype=np.float64).mean() / (n * n))


def prepare(ds: Dataset, kind: str, norm: float | None = None) -> TrainingData:
    """Arrays for ``kind`` from a dataset; ``norm`` defaults to this dataset's own.

    Inference passes the training set's ``norm`` so both splits share one unit.
    """
    from ptycho.physics.translate import centre_crop, extract_patches

    norm = intensity_norm(ds) if norm is None else norm
    y = (ds.counts / np.float32(norm)).astype(np.float32)  # (P, N, N)
    x = np.sqrt(y)
    n = ds.n
    from ptycho.physics.forward_tf import canvas_pad_for

    physics = {
        "intensity_norm": norm,
        "log_scale": float(np.log(ds.scale / np.sqrt(norm))),
        "canvas_pad": canvas_pad_for(ds.group_offsets, n),
    }
    if kind == "pinn":
        g = ds.groups
        inputs = np.moveaxis(x[g], 1, -1)  # (G, N, N, C)
        counts = np.moveaxis(y[g], 1, -1)
        return TrainingData(inputs, ds.group_offsets.astype(np.float32), {"counts": counts}, physics)
    patches = np.concatenate(
        [extract_patches(ds.objects[m], ds.positions[ds.position_object == m], n) for m in range(ds.objects.shape[0])]
    )
    order = np.concatenate([np.flatnonzero(ds.position_object == m) for m in range(ds.objects.shape[0])])
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    patches = centre_crop(patches[inv], n // 2)  # back in position order
    return TrainingData(
        x[..., None],
        np.zeros((len(x), 1, 2), np.float32),
        {
            "amp": np.abs(patches)[..., None].astype(np.float32),
            "phase": np.angle(patches)[..., None].astype(np.float32),
        },
        physics,
    )


class Trainer:
    """Builds the model and its compiled steps for one (model, XLA mode) pair.

    The step is split the way the modes need it (:mod:`ptycho.nets.xla`): the network's
    forward pass, then :meth:`physics_loss` (physics head and loss) on its output. The
    ``physics`` mode compiles only the latter; ``jit`` and ``auto`` the whole step.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        n: int,
        channels: int,
        probe: np.ndarray,
        physics: dict,
        steps_per_epoch: int = 0,
    ):
        import keras
        import tensorflow as tf

        from ptycho.nets.models import build_network
        from ptycho.nets.xla import compile_physics, compile_step

        keras.utils.set_random_seed(train_cfg.seed)
        self.model_cfg, self.train_cfg = model_cfg, train_cfg
        self.n, self.channels = n, channels
        self.network = build_network(
            n,
            channels,
            channels,
            model_cfg.filters,
            model_cfg.pooling,
            train_cfg.seed,
            model_cfg.depth,
            model_cfg.mixing,
        )
        self.probe = tf.constant(probe.astype(np.complex64))
        self.canvas_pad = int(physics.get("canvas_pad", n // 4))
        self.log_scale = tf.Variable(
            physics.get("log_scale", 0.0),
            dtype=tf.float32,
            name="log_scale",
            trainable=model_cfg.kind == "pinn" and model_cfg.trainable_scale,
        )
        # The schedule (warm-up, decay) reads the optimiser's own step count, so a resumed
        # training continues it where it stopped.
        rate = train_cfg.learning_rate_at(steps_per_epoch) if steps_per_epoch else train_cfg.learning_rate
        self.optimizer = keras.optimizers.Adam(rate)
        # Create the optimizer's slots now: variables created inside the first trace
        # make tf.function trace a second time.
        self.optimizer.build(self.variables)
        self.mode = train_cfg.xla
        self.traces = {"train": 0, "eval": 0, "physics": 0}
        self.physics_loss = compile_physics(self._physics_loss, self.mode)
        self.train_step = compile_step(self._train_step, self.mode)
        self.eval_step = compile_step(self._eval_step, self.mode)

    @property
    def variables(self):
        v = list(self.network.trainable_variables)
        return v + [self.log_scale] if self.log_scale.trainable else v

    def loss_terms(self, x, offsets, targets, training: bool):
        """Per-sample loss ``(B,)`` for the configured model: network, then physics and loss."""
        amp, phase = self.network(x, training=training)
        return self.physics_loss(amp, phase, offsets, targets)

    def _physics_loss(self, amp, phase, offsets, targets):
        """Per-sample loss ``(B,)`` from the network's output: the PINN's physics head
        (object canvas, translation, probe, FFT, amplitude) and its loss, or the
        baseline's MAE against the true patches. Its own XLA function in ``physics`` mode."""
        import tensorflow as tf

        from ptycho.nets.models import to_complex
        from ptycho.nets.xla import xla_translation
        from ptycho.physics.forward_tf import pad_centre, poisson_nll, predicted_amplitude

        if self.mode == "physics":
            self.traces["physics"] += 1  # runs only while tracing its own XLA function
        if self.model_cfg.kind == "baseline":
            d = phase - targets["phase"]
            if self.model_cfg.baseline_phase == "relative":
                # A constant phase of the patch leaves its diffraction unchanged: do not ask
                # the network for it. Remove the amplitude-weighted circular mean of the
                # error, then wrap (the offset may take the error across +-pi).
                w = targets["amp"]
                c = tf.math.atan2(
                    tf.reduce_sum(w * tf.sin(d), axis=[1, 2, 3], keepdims=True),
                    tf.reduce_sum(w * tf.cos(d), axis=[1, 2, 3], keepdims=True),
                )
                d = tf.math.atan2(tf.sin(d - c), tf.cos(d - c))
            return tf.reduce_mean(tf.abs(amp - targets["amp"]) + tf.abs(d), axis=[1, 2, 3])
        obj = pad_centre(to_complex(amp, phase), self.n)
        pred = predicted_amplitude(
            obj, offsets, self.probe, self.log_scale, xla=xla_translation(self.mode), canvas_pad=self.canvas_pad
        )
        if self.model_cfg.loss == "mae":
            return tf.reduce_mean(tf.abs(pred - tf.sqrt(targets["counts"])), axis=[1, 2, 3])
        nll = poisson_nll(pred, targets["counts"], self.model_cfg.poisson_eps)
        return tf.reduce_mean(nll, axis=[1, 2, 3])

    def _train_step(self, x, offsets, targets):
        import tensorflow as tf

        self.traces["train"] += 1  # Python side effect: runs only while tracing
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.loss_terms(x, offsets, targets, training=True))
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply(grads, self.variables)
        return loss

    def _eval_step(self, x, offsets, targets, mask):
        import tensorflow as tf

        self.traces["eval"] += 1
        per = self.loss_terms(x, offsets, targets, training=False)
        return tf.reduce_sum(per * mask), tf.reduce_sum(mask)


def _batches(data: TrainingData, idx: np.ndarray):
    return (
        data.inputs[idx],
        data.offsets[idx],
        {k: v[idx] for k, v in data.targets.items()},
    )


def evaluate(trainer: Trainer, data: TrainingData, idx: np.ndarray) -> float:
    """Mean loss over ``idx`` with fixed-shape batches (last one padded and masked)."""
    bs = trainer.train_cfg.batch_size
    if len(idx) == 0:
        return float("nan")
    total, count = 0.0, 0.0
    for start in range(0, len(idx), bs):
        chunk = idx[start : start + bs]
        mask = np.zeros(bs, np.float32)
        mask[: len(chunk)] = 1.0
        padded = np.concatenate([chunk, np.repeat(chunk[:1], bs - len(chunk))])
        s, c = trainer.eval_step(*_batches(data, padded), mask)
        total += float(s)
        count += float(c)
    return total / count


def save_checkpoint(trainer: Trainer, out_dir: Path, meta: dict) -> None:
    """``model.keras`` (the network) and ``model.json`` (configs, physics, history), atomically."""
    atomic_write(out_dir / "model.keras", trainer.network.save, suffix=".keras")
    meta = dict(meta)
    meta["physics"] = dict(meta.get("physics", {}), log_scale=float(trainer.log_scale.numpy()))
    write_json(out_dir / "model.json", meta)


#: The resumable training state inside a checkpoint folder (see :func:`save_train_state`).
TRAIN_STATE = "train_state.npz"


def checkpoint_dir_for(out_dir: str | os.PathLike) -> Path:
    """Default folder of the resumable state: ``<out>/checkpoint/``.

    Not one of the files a workflow declares as the training's outputs (``model.keras``,
    ``model.json``), so a workflow manager that deletes the outputs of a failed or
    killed job (Snakemake does) leaves it in place: the last good state survives a
    NaN, a ``kill -9`` or a Ctrl-C, and ``ptycho train --resume`` continues from it.
    """
    return Path(out_dir) / "checkpoint"


def _compat_key(model_cfg: ModelConfig, train_cfg: TrainConfig, digest: str) -> dict:
    """What must match for a saved state to be continued: everything but the epoch count."""
    train = to_dict(train_cfg)
    if train_cfg.lr_schedule == "constant":  # a decay's shape depends on the epoch count
        train.pop("epochs", None)
    return json.loads(json.dumps({"model": to_dict(model_cfg), "train": train, "dataset_digest": digest}))


def save_train_state(
    trainer: Trainer, path: Path, meta: dict, epoch: int, rng: np.random.Generator, compat: dict
) -> None:
    """Everything needed to continue training exactly, in one atomically written ``.npz``.

    The network's weights, the optimiser's variables (Adam's step count and moments),
    the log-scale, the batch-order RNG's state, the metadata so far (history, timings)
    and the epoch it was taken after. One file, so a kill between two writes cannot pair
    weights with another epoch's optimiser state; no pickles (the JSON is a string array).
    """
    arrays: dict[str, np.ndarray] = {}
    weights = trainer.network.get_weights()
    for i, w in enumerate(weights):
        arrays[f"weight_{i}"] = np.asarray(w)
    for i, v in enumerate(trainer.optimizer.variables):
        arrays[f"optimizer_{i}"] = np.asarray(v.numpy())
    arrays["log_scale"] = np.float32(trainer.log_scale.numpy())
    header = {
        "epoch": epoch,
        "rng": rng.bit_generator.state,
        "meta": meta,
        "compat": compat,
        "n_weights": len(weights),
        "n_optimizer": len(trainer.optimizer.variables),
    }
    arrays["header"] = np.array(json.dumps(header, default=_json_default, allow_nan=True))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write, suffix=".npz")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def load_train_state(path: Path) -> tuple[dict, dict[str, np.ndarray]] | None:
    """``(header, arrays)`` of a state written by :func:`save_train_state`, or None if absent.

    A state that cannot be read (truncated by a full disk, written by another version)
    is a one-line error naming the file and the fix.
    """
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(str(arrays.pop("header")))
    except Exception as exc:  # zip, format and JSON errors alike
        raise PtychoError(
            f"{path}: not a readable training state ({type(exc).__name__}); delete it to start "
            "over, or train without --resume"
        ) from None
    return header, arrays


def _restore(trainer: Trainer, header: dict, arrays: dict[str, np.ndarray], path: Path) -> None:
    weights = [arrays[f"weight_{i}"] for i in range(header["n_weights"])]
    variables = trainer.optimizer.variables
    if header["n_optimizer"] != len(variables) or len(weights) != len(trainer.network.get_weights()):
        raise PtychoError(f"{path}: the saved state does not fit this network; delete it to start over")
    try:
        trainer.network.set_weights(weights)
        for i, v in enumerate(variables):
            v.assign(arrays[f"optimizer_{i}"])
    except ValueError as exc:
        raise PtychoError(
            f"{path}: the saved state does not fit this network ({exc}); delete it to start over"
        ) from None
    trainer.log_scale.assign(float(arrays["log_scale"]))


def train(
    ds: Dataset,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out_dir: str | os.PathLike,
    *,
    progress: bool = True,
    on_epoch=None,
    resume: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    on_resume=None,
    on_diverge: str = "raise",
) -> dict:
    """Train one model on ``ds`` and write ``out_dir/model.keras`` + ``model.json``.

    ``on_epoch(epoch, record)`` is called after each epoch (used for MLflow logging).
    After every epoch (and once before the first) the resumable state is saved to
    ``checkpoint_dir`` (default ``<out_dir>/checkpoint/``, see :func:`checkpoint_dir_for`).
    With ``resume``, an unfinished saved state of the same configuration (all but the
    epoch count) and dataset is continued from its last completed epoch: the history is continued
    (epochs numbered on), and weights, optimiser and batch order are restored, so the
    run continues as if uninterrupted. ``on_resume(history)`` then receives the epochs
    already done. A state of another configuration is ignored (training starts over,
    and says so). Returns the metadata written to ``model.json``.

    A NaN or infinite loss raises :class:`TrainingDiverged` (``on_diverge="raise"``);
    with ``on_diverge="record"`` the last good state is written as the model instead,
    its ``model.json`` marked ``"status": "FAILED"`` with the reason in ``"failure"``,
    so that a pipeline can report the failed arm rather than stop (see :func:`_record_divergence`).
    """
    if on_diverge not in ("raise", "record"):
        raise ValueError(f"on_diverge must be 'raise' or 'record', not {on_diverge!r}")
    from tqdm import tqdm

    out_dir = Path(out_dir)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else checkpoint_dir_for(out_dir)
    state_path = ckpt / TRAIN_STATE
    if model_cfg.kind == "pinn" and ds.gridsize < 1:
        raise PtychoError("dataset has no groups")
    data = prepare(ds, model_cfg.kind)
    rng = np.random.default_rng(train_cfg.seed)
    order = rng.permutation(len(data.inputs))
    if train_cfg.max_samples:
        order = order[: train_cfg.max_samples]
    n_val = int(round(len(order) * train_cfg.validation_fraction))
    val_idx, train_idx = np.sort(order[:n_val]), order[n_val:]
    bs = train_cfg.batch_size
    steps = len(train_idx) // bs
    if steps == 0:
        raise PtychoError(
            f"only {len(train_idx)} training samples for batch size {bs}; lower train.batch_size or simulate more data"
        )

    trainer = Trainer(model_cfg, train_cfg, ds.n, data.inputs.shape[-1], ds.probe, data.physics, steps)
    compat = _compat_key(model_cfg, train_cfg, ds.attrs.get("digest", ""))
    saved = load_train_state(state_path) if resume else None
    if saved is not None and (saved[0]["compat"] != compat or saved[0]["epoch"] >= train_cfg.epochs):
        # A finished state is not resumed either: a forced re-run (snakemake -R) means train again.
        why = (
            "another configuration or dataset"
            if saved[0]["compat"] != compat
            else f"a finished training ({saved[0]['epoch']} epochs)"
        )
        print(f"ptycho train: note: {state_path} holds the state of {why}; training starts over", flush=True)
        saved = None
    if saved is not None:
        header, arrays = saved
        _restore(trainer, header, arrays, state_path)
        rng.bit_generator.state = header["rng"]
        meta = header["meta"]
        meta["train"] = to_dict(train_cfg)  # the epoch count may have grown
        start_epoch = int(header["epoch"])
        meta.setdefault("resumed", []).append({"after_epoch": start_epoch})
        if progress:
            print(f"resuming from {state_path} after epoch {start_epoch}", flush=True)
        if on_resume is not None:
            on_resume(list(meta["history"]))
    else:
        start_epoch = 0
        meta = {
            "model": to_dict(model_cfg),
            "train": to_dict(train_cfg),
            "n": ds.n,
            "gridsize": ds.gridsize,
            "channels": data.inputs.shape[-1],
            "dataset_digest": ds.attrs.get("digest", ""),
            "physics": data.physics,
            "n_train": int(len(train_idx)),
            "n_val": int(n_val),
            "history": [],
        }
        # Validation loss of the untrained model: "did training decrease the loss?" is
        # answered against this, not against the noisy mean of the first epoch.
        meta["initial_val_loss"] = evaluate(trainer, data, val_idx)
        # The state before any step: a loss that diverges in the first epoch still
        # leaves a good (initial) state behind.
        save_train_state(trainer, state_path, meta, 0, rng, compat)
    timing = meta.get("timing") or {}
    step_times: list[float] = list(timing.get("step_times_s", []))
    compile_time = timing.get("compile_s")
    first_step_pending = True
    t_start = time.perf_counter() - float(timing.get("train_wall_s", 0.0))
    for epoch in range(start_epoch, train_cfg.epochs):
        perm = train_idx[rng.permutation(len(train_idx))][: steps * bs].reshape(steps, bs)
        losses = []
        bar = tqdm(
            perm,
            desc=f"{model_cfg.kind} xla={train_cfg.xla} epoch {epoch + 1}/{train_cfg.epochs}",
            disable=not progress,
            leave=False,
        )
        for batch in bar:
            t0 = time.perf_counter()
            loss = float(trainer.train_step(*_batches(data, batch)))
            dt = time.perf_counter() - t0
            if first_step_pending:
                first_step_pending = False
                if compile_time is None:
                    compile_time = dt
                else:  # this process compiled again after a resume: kept apart from the steps
                    meta["resumed"][-1]["compile_s"] = dt
            else:
                step_times.append(dt)
            if not np.isfinite(loss):
                done = len(meta["history"])
                diverged = TrainingDiverged(
                    f"loss became {loss} at epoch {epoch + 1}; the last good checkpoint (after epoch {done}) is kept "
                    f"in {ckpt} (lower train.learning_rate or check the dataset)"
                )
                if on_diverge == "raise":
                    raise diverged
                return _record_divergence(trainer, state_path, out_dir, train_cfg, str(diverged))
            losses.append(loss)
            bar.set_postfix(loss=f"{loss:.4g}")
        for step, count in trainer.traces.items():
            if count > 1:  # eval may be 0 (no validation split); physics is 0 unless compiled apart
                raise Retraced(f"{step} step was traced {count} times; batch shapes must be fixed")
        record = {
            "epoch": epoch + 1,
            "train_loss": float(np.mean(losses)),
            "val_loss": evaluate(trainer, data, val_idx),
            "log_scale": float(trainer.log_scale.numpy()),
            "elapsed_s": time.perf_counter() - t_start,
        }
        meta["history"].append(record)
        meta["timing"] = {
            "compile_s": compile_time,
            "step_times_s": step_times,
            "step_median_s": float(np.median(step_times)) if step_times else None,
            "train_wall_s": time.perf_counter() - t_start,
        }
        meta["traces"] = dict(trainer.traces)
        save_train_state(trainer, state_path, meta, epoch + 1, rng, compat)
        save_checkpoint(trainer, out_dir, meta)
        if on_epoch is not None:
            on_epoch(epoch, record)
        # One line per epoch even without progress bars: `tail -f` on a job's log says
        # where the training is and how long it has left.
        done = epoch + 1 - start_epoch
        per_epoch = (record["elapsed_s"] - float(timing.get("train_wall_s", 0.0))) / max(done, 1)
        recent = step_times[-steps:] if step_times else [float("nan")]
        print(
            f"epoch {epoch + 1}/{train_cfg.epochs}: train loss {record['train_loss']:.5g}, "
            f"val loss {record['val_loss']:.5g}, {float(np.median(recent)):.3f} s/step, "
            f"{per_epoch:.0f} s/epoch, ~{per_epoch * (train_cfg.epochs - epoch - 1) / 60:.1f} min left",
            flush=True,
        )
    return meta


def _record_divergence(trainer: Trainer, state_path: Path, out_dir: Path, train_cfg: TrainConfig, reason: str) -> dict:
    """Write the last good state as the model, marked FAILED with ``reason``; return its metadata.

    The network goes back to the saved state (the diverged weights are NaN), and
    ``model.json`` says ``"status": "FAILED"`` and ``"failure": reason``, with the history
    of the good epochs (possibly none). Readers of ``model.json`` must check ``status``.
    """
    header, arrays = load_train_state(state_path)
    _restore(trainer, header, arrays, state_path)
    meta = header["meta"]
    meta["train"] = to_dict(train_cfg)
    meta["status"], meta["failure"] = "FAILED", reason
    meta.setdefault("timing", {"compile_s": None, "step_times_s": [], "step_median_s": None, "train_wall_s": 0.0})
    meta.setdefault("traces", dict(trainer.traces))
    save_checkpoint(trainer, out_dir, meta)
    return meta


def load_meta(model_dir: str | os.PathLike) -> dict:
    """The ``model.json`` written by :func:`train`."""
    path = Path(model_dir) / "model.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PtychoError(f"{path}: no trained model here; run 'python -m ptycho train' first") from None
    except json.JSONDecodeError as exc:
        raise PtychoError(f"{path}: not valid JSON ({exc.msg}); re-run training") from None


def configs_from_meta(meta: dict) -> tuple[ModelConfig, TrainConfig]:
    """The configs saved in a ``model.json`` (a pre-mode ``xla: true/false`` reads as jit/off)."""
    from ptycho.nets.xla import parse_mode

    train = dict(meta["train"], xla=parse_mode(meta["train"].get("xla", "jit"), "train.xla"))
    return from_dict(ModelConfig, meta["model"]), from_dict(TrainConfig, train)
