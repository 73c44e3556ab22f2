"""One training loop for both models, under any XLA mode (ptycho.nets.xla), with honest timings.

* Fixed batch shape: training batches drop the remainder (a fresh shuffle every epoch
  means no sample is lost for good), validation pads the last batch and masks it. The
  train step is traced exactly once; a retrace raises (it would silently recompile).
* Timing: the first call of the train step (trace + compile) is reported apart; every
  later step's wall time is recorded (synchronised on the loss value).
* NaN or infinite loss stops training with :class:`TrainingDiverged`; the last good
  checkpoint (written atomically at the end of every epoch) is kept, and so is the
  resumable state in ``<out>/checkpoint/`` (weights, optimiser, batch-order RNG), which
  a workflow manager does not delete with the job's declared outputs (:mod:`ptycho.nets.state`).
* Resume: ``train(..., resume=True)`` continues a saved state exactly.

The model and its compiled steps are :class:`~ptycho.nets.trainer.Trainer`'s, the
network's arrays :func:`~ptycho.nets.inputs.prepare`'s; both are importable from here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptycho.config import check_at_most, check_settings, choices, defaults, from_dict, to_dict
from ptycho.data.dataset import Dataset
from ptycho.errors import PtychoError
from ptycho.nets.bounds import collapsed, evaluate, loss_bounds
from ptycho.nets.inputs import TrainingData, intensity_norm, prepare
from ptycho.nets.models import ModelConfig, method_of
from ptycho.nets.state import (
    TRAIN_STATE,
    checkpoint_dir_for,
    compat_key,
    load_meta,
    load_train_state,
    restore,
    save_checkpoint,
    save_train_state,
)
from ptycho.nets.trainer import Trainer
from ptycho.nets.xla import Retraced

__all__ = [
    "TRAIN_STATE",
    "Retraced",
    "TrainConfig",
    "Trainer",
    "TrainingData",
    "TrainingCollapsed",
    "TrainingDiverged",
    "checkpoint_dir_for",
    "configs_from_meta",
    "evaluate",
    "intensity_norm",
    "load_meta",
    "load_train_state",
    "prepare",
    "save_checkpoint",
    "save_train_state",
    "train",
]

LR_SCHEDULES = choices("train.lr_schedule")
_TRAIN = defaults("train")


class TrainingDiverged(PtychoError):
    """Loss became NaN or infinite."""


class TrainingCollapsed(PtychoError):
    """The loss stayed finite but the final model explains the data no better than a
    featureless object (:func:`collapsed`)."""


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; saved with every checkpoint. Each key's meaning, range and
    default: the schema's ``train`` section (``seed`` is one of its ``seeds``, ``xla`` one
    of its ``xla`` modes, ``precision`` one of its ``precision`` list)."""

    epochs: int = _TRAIN["epochs"]
    batch_size: int = _TRAIN["batch_size"]
    learning_rate: float = _TRAIN["learning_rate"]
    validation_fraction: float = _TRAIN["validation_fraction"]
    seed: int = 0
    xla: str = "jit"  #: XLA mode, one of ptycho.nets.xla.MODES (true/false are read as jit/off)
    max_samples: int = _TRAIN["max_samples"]  #: cap on training samples (groups or patterns); 0 = all
    lr_schedule: str = _TRAIN["lr_schedule"]  #: constant | cosine (decay to lr_floor over the whole training)
    warmup_epochs: float = _TRAIN["warmup_epochs"]  #: linear warm-up from 0 to learning_rate over this many epochs
    lr_floor: float = _TRAIN["lr_floor"]  #: cosine: final learning rate as a fraction of learning_rate
    decay_fraction: float = _TRAIN["decay_fraction"]  #: cosine: decay over only this last fraction of the run
    #: the network's dtype policy, one of the study's ``precision`` list
    #: (ptycho.nets.precision: float32 | mixed_bfloat16 | mixed_float16, loss-scaled);
    #: the physics head and loss stay float32 (ptycho.nets.models.build_network)
    precision: str = "float32"
    fail_on_collapse: bool = _TRAIN["fail_on_collapse"]  #: a collapsed training ends FAILED (:func:`collapsed`)
    #: validation losses per epoch (``model.json`` ``val_curve``), the last at its end: time
    #: to quality interpolates its crossing between them
    val_checks: int = _TRAIN["val_checks"]

    def __post_init__(self) -> None:
        from ptycho.nets.precision import parse_precision
        from ptycho.nets.xla import parse_mode

        object.__setattr__(self, "xla", parse_mode(self.xla, "train.xla"))
        object.__setattr__(self, "precision", parse_precision(self.precision, "train.precision"))
        check_settings(self, "train", "train.", extra={"seed": "seeds.items"})
        check_at_most("train.warmup_epochs", self.warmup_epochs, self.epochs, "train.warmup_epochs")

    def learning_rate_at(self, steps_per_epoch: int):
        """The optimiser's learning rate: a float (constant, no warm-up), else one
        :func:`held_cosine` (a constant rate with a warm-up is one whose floor is 1; the
        whole-run cosine is one held for no step)."""
        total = max(1, self.epochs * steps_per_epoch)
        warmup = int(round(self.warmup_epochs * steps_per_epoch))
        if self.lr_schedule == "constant":
            return self.learning_rate if warmup == 0 else held_cosine(self.learning_rate, warmup, total, 0, 1.0)
        decay = min(int(round(self.decay_fraction * total)), total - warmup)
        return held_cosine(self.learning_rate, warmup, total - decay, decay, self.lr_floor)


def held_cosine(peak: float, warmup_steps: int, hold_until: int, decay_steps: int, floor: float):
    """A learning rate that warms up linearly from 0 over ``warmup_steps``, holds ``peak``
    until step ``hold_until``, then decays by a half cosine to ``floor * peak`` over
    ``decay_steps`` and stays there: Keras's ``CosineDecay`` with a hold between its
    warm-up and its decay (with ``hold_until == warmup_steps`` it is that schedule, which
    a test checks step for step).

    Why a hold: at a constant rate the arms' last-epoch SSIM still jitters by 0.01-0.02
    from epoch to epoch, and decaying over the whole run learns less
    (docs/measurements.md, "Quality against training time"); decaying over the last
    epochs only keeps the constant rate's progress and settles where the run stops."""
    import math

    import keras

    class HeldCosine(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            ops = keras.ops
            step = ops.cast(step, "float32")
            warm = ops.minimum(1.0, step / warmup_steps) if warmup_steps else 1.0
            done = ops.clip((step - hold_until) / max(1, decay_steps), 0.0, 1.0)
            return peak * warm * (floor + (1.0 - floor) * 0.5 * (1.0 + ops.cos(math.pi * done)))

        def get_config(self):
            return {
                "peak": peak,
                "warmup_steps": warmup_steps,
                "hold_until": hold_until,
                "decay_steps": decay_steps,
                "floor": floor,
            }

    return HeldCosine()


def configs_from_meta(meta: dict) -> tuple[ModelConfig, TrainConfig]:
    """The configs saved in a ``model.json`` (a pre-mode ``xla: true/false`` reads as jit/off)."""
    from ptycho.nets.xla import parse_mode

    train = dict(meta["train"], xla=parse_mode(meta["train"].get("xla", "jit"), "train.xla"))
    return from_dict(ModelConfig, meta["model"]), from_dict(TrainConfig, train)


@dataclass(frozen=True)
class _Split:
    """The samples of one training: validation (sorted) and training indices, steps per epoch."""

    val: np.ndarray
    train: np.ndarray
    steps: int


def split_sizes(samples: int, cfg: TrainConfig) -> tuple[int, int, int]:
    """How a training of ``samples`` divides them: (validation samples, training samples,
    steps per epoch). At least one validation sample: a loss to read, even from few."""
    used = min(samples, cfg.max_samples) if cfg.max_samples else samples
    n_val = max(1, int(round(used * cfg.validation_fraction)))
    return n_val, used - n_val, (used - n_val) // cfg.batch_size


def _split(samples: int, cfg: TrainConfig, rng: np.random.Generator) -> _Split:
    order = rng.permutation(samples)
    n_val, n_train, steps = split_sizes(samples, cfg)
    order = order[: n_val + n_train]
    split = _Split(np.sort(order[:n_val]), order[n_val:], steps)
    if split.steps == 0:
        raise PtychoError(
            f"only {len(split.train)} training samples for batch size {cfg.batch_size}; "
            "lower train.batch_size or simulate more data"
        )
    return split


def epoch_batches(split: _Split, rng: np.random.Generator, batch_size: int) -> np.ndarray:
    """One epoch's batches ``(steps, batch_size)`` of training-sample indices: a fresh
    shuffle of the training split, the remainder dropped. The one place the batch order
    is drawn (``scripts/pair_paths.py`` replays it)."""
    order = split.train[rng.permutation(len(split.train))]
    return order[: split.steps * batch_size].reshape(split.steps, batch_size)


@dataclass
class _Clock:
    """The training's timings: the first call of the train step in this process (trace and
    compile) apart, every later step's wall time, and the wall time since the start
    (the epochs of a resumed state included)."""

    step_times: list[float]
    compile_s: float | None
    before_s: float  #: wall time of the epochs done before a resume
    start: float = 0.0
    first_step_pending: bool = True
    at_once: int | None = None  #: trainings its caller ran at once (None: not told)

    @classmethod
    def resume(cls, timing: dict, at_once: int | None = None) -> _Clock:
        before = float(timing.get("train_wall_s", 0.0))
        return cls(
            list(timing.get("step_times_s", [])),
            timing.get("compile_s"),
            before,
            time.perf_counter() - before,
            at_once=at_once if at_once is not None else timing.get("trainings_at_once"),
        )

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def step(self, seconds: float, meta: dict) -> None:
        if not self.first_step_pending:
            self.step_times.append(seconds)
        elif self.compile_s is None:
            self.compile_s = seconds
        else:  # this process compiled again after a resume: kept apart from the steps
            meta["resumed"][-1]["compile_s"] = seconds
        self.first_step_pending = False

    def summary(self) -> dict:
        return {
            "compile_s": self.compile_s,
            "step_times_s": self.step_times,
            "step_median_s": float(np.median(self.step_times)) if self.step_times else None,
            "train_wall_s": self.elapsed(),
            "trainings_at_once": self.at_once,
        }


def _resumable(state_path: Path, compat: dict, epochs: int) -> tuple[dict, dict] | None:
    """The saved state to continue, if it is of this configuration and unfinished."""
    saved = load_train_state(state_path)
    if saved is not None and (saved[0]["compat"] != compat or saved[0]["epoch"] >= epochs):
        # A finished state is not resumed either: a forced re-run (snakemake -R) means train again.
        why = (
            "another configuration or dataset"
            if saved[0]["compat"] != compat
            else f"a finished training ({saved[0]['epoch']} epochs)"
        )
        print(f"ptycho train: note: {state_path} holds the state of {why}; training starts over", flush=True)
        return None
    return saved


def _resume(trainer: Trainer, saved, state_path: Path, rng: np.random.Generator, progress: bool) -> tuple[dict, int]:
    """Weights, optimiser and batch order back from a saved state; its metadata and epoch."""
    header, arrays = saved
    restore(trainer, header, arrays, state_path)
    rng.bit_generator.state = header["rng"]
    meta = header["meta"]
    meta["train"] = to_dict(trainer.train_cfg)  # the epoch count may have grown
    start_epoch = int(header["epoch"])
    meta.setdefault("resumed", []).append({"after_epoch": start_epoch})
    if progress:
        print(f"resuming from {state_path} after epoch {start_epoch}", flush=True)
    return meta, start_epoch


def _new_meta(ds: Dataset, data: TrainingData, trainer: Trainer, split: _Split) -> dict:
    """The metadata of a training that starts now, with the untrained model's validation
    loss: "did training decrease the loss?" is answered against this, not against the
    noisy mean of the first epoch."""
    return {
        "model": to_dict(trainer.model_cfg),
        "train": to_dict(trainer.train_cfg),
        "n": ds.n,
        "gridsize": ds.gridsize,
        "channels": data.inputs.shape[-1],
        "dataset_digest": ds.attrs.get("digest", ""),
        "physics": data.physics,
        "n_train": int(len(split.train)),
        "n_val": int(len(split.val)),
        "history": [],
        "val_curve": [],  #: the validation loss within and at the end of every epoch, by global step
        "initial_val_loss": evaluate(trainer, data, split.val),
        "loss_bounds": loss_bounds(trainer, ds, data, split.val),
    }


def _epoch(trainer, data, split, rng, clock, meta, epoch: int, progress: bool, ckpt: Path) -> list[float]:
    """One epoch's steps over a fresh shuffle; their losses. TrainingDiverged on a NaN."""
    from tqdm import tqdm

    cfg = trainer.train_cfg
    perm = epoch_batches(split, rng, cfg.batch_size)
    checks = check_steps(split.steps, cfg.val_checks)[:-1]  # the epoch's end: train() reads it
    losses = []
    desc = f"{trainer.model_cfg.kind} xla={cfg.xla} epoch {epoch + 1}/{cfg.epochs}"
    bar = tqdm(perm, desc=desc, disable=not progress, leave=False)
    for batch in bar:
        t0 = time.perf_counter()
        loss = float(trainer.train_step(*data.batch(batch)))
        clock.step(time.perf_counter() - t0, meta)
        if not np.isfinite(loss):
            raise TrainingDiverged(
                f"loss became {loss} at epoch {epoch + 1}; the last good checkpoint (after epoch "
                f"{len(meta['history'])}) is kept in {ckpt} (lower train.learning_rate or check the dataset)"
            )
        losses.append(loss)
        bar.set_postfix(loss=f"{loss:.4g}")
        if len(losses) in checks:  # outside the step's timing: a check is no step
            meta["val_curve"].append(
                {"step": epoch * split.steps + len(losses), "val_loss": evaluate(trainer, data, split.val)}
            )
    return losses


def check_steps(steps: int, checks: int) -> list[int]:
    """The steps of an epoch (1-based) after which its validation loss is read: ``checks``
    of them, evenly spaced, the last its end (fewer when the epoch has fewer steps)."""
    return sorted({max(1, round(steps * i / checks)) for i in range(1, checks + 1)})


def _report(record: dict, clock: _Clock, done: int, steps: int, epochs: int) -> None:
    """One line per epoch even without progress bars: `tail -f` on a job's log says where
    the training is and how long it has left."""
    per_epoch = (record["elapsed_s"] - clock.before_s) / max(done, 1)
    recent = clock.step_times[-steps:] if clock.step_times else [float("nan")]
    print(
        f"epoch {record['epoch']}/{epochs}: train loss {record['train_loss']:.5g}, "
        f"val loss {record['val_loss']:.5g}, {float(np.median(recent)):.3f} s/step, "
        f"{per_epoch:.0f} s/epoch, ~{per_epoch * (epochs - record['epoch']) / 60:.1f} min left",
        flush=True,
    )


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
    at_once: int | None = None,
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
    A training that ends collapsed (:func:`collapsed`) is written as it ended, marked the
    same way, and raises :class:`TrainingCollapsed` under ``on_diverge="raise"``.

    ``at_once`` is how many trainings the caller runs at once (the workflow's schedule),
    recorded in the timing beside the step times it shaped (the last attempt's, after a
    resume); it changes nothing in the training.
    """
    if on_diverge not in ("raise", "record"):
        raise ValueError(f"on_diverge must be 'raise' or 'record', not {on_diverge!r}")
    out_dir = Path(out_dir)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else checkpoint_dir_for(out_dir)
    state_path = ckpt / TRAIN_STATE
    if method_of(model_cfg.kind).grouped and ds.gridsize < 1:
        raise PtychoError("dataset has no groups")
    data = prepare(ds, model_cfg.kind)
    rng = np.random.default_rng(train_cfg.seed)
    split = _split(len(data.inputs), train_cfg, rng)

    trainer = Trainer(model_cfg, train_cfg, ds.n, data.inputs.shape[-1], ds.probe, data.physics, split.steps)
    compat = compat_key(model_cfg, train_cfg, ds.attrs.get("digest", ""))
    saved = _resumable(state_path, compat, train_cfg.epochs) if resume else None
    if saved is not None:
        meta, start_epoch = _resume(trainer, saved, state_path, rng, progress)
        if on_resume is not None:
            on_resume(list(meta["history"]))
    else:
        meta, start_epoch = _new_meta(ds, data, trainer, split), 0
        # The state before any step: a loss that diverges in the first epoch still
        # leaves a good (initial) state behind.
        save_train_state(trainer, state_path, meta, 0, rng, compat)
    clock = _Clock.resume(meta.get("timing") or {}, at_once)
    for epoch in range(start_epoch, train_cfg.epochs):
        try:
            losses = _epoch(trainer, data, split, rng, clock, meta, epoch, progress, ckpt)
        except TrainingDiverged as diverged:
            if on_diverge == "raise":
                raise
            return _record_divergence(trainer, state_path, out_dir, train_cfg, str(diverged))
        record = {
            "epoch": epoch + 1,
            "train_loss": float(np.mean(losses)),
            "val_loss": evaluate(trainer, data, split.val),
            "log_scale": float(trainer.log_scale.numpy()),
            "elapsed_s": clock.elapsed(),
        }
        meta["history"].append(record)
        meta["val_curve"].append({"step": (epoch + 1) * split.steps, "val_loss": record["val_loss"]})
        meta["timing"] = clock.summary()
        meta["traces"] = trainer.traces
        save_train_state(trainer, state_path, meta, epoch + 1, rng, compat)
        save_checkpoint(trainer, out_dir, meta)
        if on_epoch is not None:
            on_epoch(epoch, record)
        _report(record, clock, epoch + 1 - start_epoch, split.steps, train_cfg.epochs)
    reason = collapsed(meta) if train_cfg.fail_on_collapse else None
    if reason is not None:
        meta["status"], meta["failure"] = "FAILED", reason
        save_checkpoint(trainer, out_dir, meta)
        if on_diverge == "raise":
            raise TrainingCollapsed(f"{reason}; the model is kept in {out_dir}, marked FAILED")
    return meta


def _record_divergence(trainer: Trainer, state_path: Path, out_dir: Path, train_cfg: TrainConfig, reason: str) -> dict:
    """Write the last good state as the model, marked FAILED with ``reason``; return its metadata.

    The network goes back to the saved state (the diverged weights are NaN), and
    ``model.json`` says ``"status": "FAILED"`` and ``"failure": reason``, with the history
    of the good epochs (possibly none). Readers of ``model.json`` must check ``status``.
    """
    header, arrays = load_train_state(state_path)
    restore(trainer, header, arrays, state_path)
    meta = header["meta"]
    meta["train"] = to_dict(train_cfg)
    meta["status"], meta["failure"] = "FAILED", reason
    meta.setdefault("timing", {"compile_s": None, "step_times_s": [], "step_median_s": None, "train_wall_s": 0.0})
    meta.setdefault("traces", trainer.traces)
    save_checkpoint(trainer, out_dir, meta)
    return meta
