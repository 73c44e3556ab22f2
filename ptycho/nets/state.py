"""What a training leaves on disk: the model (``model.keras`` + ``model.json``) and the
resumable state (``<out>/checkpoint/train_state.npz``), written atomically, read back
with one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.artifacts import atomic_write, write_json
from ptycho.config import to_dict
from ptycho.errors import PtychoError
from ptycho.nets.models import MODEL_KINDS, ModelConfig

if TYPE_CHECKING:
    from ptycho.nets.train import TrainConfig
    from ptycho.nets.trainer import Trainer

#: The resumable training state inside a checkpoint folder (see :func:`save_train_state`).
TRAIN_STATE = "train_state.npz"


def save_checkpoint(trainer: Trainer, out_dir: Path, meta: dict) -> None:
    """``model.keras`` (the network) and ``model.json`` (configs, physics, history), atomically."""
    atomic_write(out_dir / "model.keras", trainer.network.save, suffix=".keras")
    meta = dict(meta)
    meta["physics"] = dict(meta.get("physics", {}), log_scale=float(trainer.log_scale.numpy()))
    write_json(out_dir / "model.json", meta)


def timing_summary(meta: dict) -> dict:
    """A trained model's timing without its per-step list (what the checks and the report read)."""
    return {k: v for k, v in meta["timing"].items() if k != "step_times_s"}


def load_meta(model_dir: str | os.PathLike) -> dict:
    """The ``model.json`` written by :func:`ptycho.nets.train.train`."""
    path = Path(model_dir) / "model.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise PtychoError(f"{path}: no trained model here; run 'python -m ptycho train' first") from None
    except json.JSONDecodeError as exc:
        raise PtychoError(f"{path}: not valid JSON ({exc.msg}); re-run training") from None
    # A hand-edited or foreign file fails here in one line, not deep inside Keras.
    kind = meta.get("model", {}).get("kind") if isinstance(meta, dict) and isinstance(meta.get("model"), dict) else None
    if kind not in MODEL_KINDS:
        raise PtychoError(
            f"{path}: model kind {kind!r} is not one of {', '.join(MODEL_KINDS)}; restore the file or re-run training"
        )
    missing = [k for k in ("n", "train", "physics") if k not in meta]
    if missing:
        raise PtychoError(f"{path}: no {', '.join(missing)} recorded; not a model.json 'ptycho train' wrote, re-run it")
    return meta


def checkpoint_dir_for(out_dir: str | os.PathLike) -> Path:
    """Default folder of the resumable state: ``<out>/checkpoint/``.

    Not one of the files a workflow declares as the training's outputs (``model.keras``,
    ``model.json``), so a workflow manager that deletes the outputs of a failed or
    killed job (Snakemake does) leaves it in place: the last good state survives a
    NaN, a ``kill -9`` or a Ctrl-C, and ``ptycho train --resume`` continues from it.
    """
    return Path(out_dir) / "checkpoint"


def compat_key(model_cfg: ModelConfig, train_cfg: TrainConfig, digest: str) -> dict:
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


def restore(trainer: Trainer, header: dict, arrays: dict[str, np.ndarray], path: Path) -> None:
    """Put a saved state (:func:`load_train_state`) into ``trainer``; one line if it does not fit."""
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
