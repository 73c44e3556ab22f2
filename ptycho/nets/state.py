"""What a training leaves on disk: the model (``model.keras`` + ``model.json``) and the
resumable state (``<out>/checkpoint/train_state.npz``), written atomically, read back
with one-line errors.

Read back as untrusted files (:mod:`ptycho.data.untrusted`, docs/security.md):
``model.json`` and the state's JSON header with bounded size and nesting, the state's
arrays by their ``.npy`` headers before they are loaded, and ``model.keras`` by
:func:`check_model_file` before Keras sees it, so that no layer of a crafted file makes
TensorFlow allocate beyond the stated bound.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.artifacts import FORMAT_KEY, atomic_write, check_format, write_json
from ptycho.config import to_dict
from ptycho.errors import DatasetError, PtychoError
from ptycho.nets.models import MODEL_KINDS, ModelConfig

if TYPE_CHECKING:
    from ptycho.nets.train import TrainConfig
    from ptycho.nets.trainer import Trainer

#: The resumable training state inside a checkpoint folder (see :func:`save_train_state`).
TRAIN_STATE = "train_state.npz"
#: Largest ``model.json`` (or state header) read: the per-step times of a long training fit.
MAX_META_BYTES = 256 * 2**20
#: What a ``model.keras`` written by Keras for ``ptycho train`` holds.
MODEL_MEMBERS = ("metadata.json", "config.json", "model.weights.h5")
#: Largest ``config.json`` in a ``model.keras`` (ptycho's are about 20-100 KB).
MAX_MODEL_CONFIG_BYTES = 16 * 2**20
#: Most layers in a network (ptycho's have a few dozen).
MAX_MODEL_LAYERS = 10_000
#: The Keras layers ptycho's networks are made of (:func:`ptycho.nets.models.build_network`):
#: the two that hold variables, whose shapes the config and the layer's build input give,
#: and those that hold none.
WEIGHTED_LAYERS = ("Conv2D", "Dense")
WEIGHTLESS_LAYERS = (
    "InputLayer",
    "Activation",
    "Add",
    "AveragePooling2D",
    "MaxPooling2D",
    "Permute",
    "Rescaling",
    "Reshape",
    "UpSampling2D",
)


def save_checkpoint(trainer: Trainer, out_dir: Path, meta: dict) -> None:
    """``model.keras`` (the network) and ``model.json`` (configs, physics, history), atomically."""
    atomic_write(out_dir / "model.keras", trainer.network.save, suffix=".keras")
    meta = dict(meta)
    meta["physics"] = dict(meta.get("physics", {}), log_scale=float(trainer.log_scale.numpy()))
    write_json(out_dir / "model.json", meta, producer="train")  # stamped: ptycho.artifacts.FORMATS


def load_meta(model_dir: str | os.PathLike) -> dict:
    """The ``model.json`` written by :func:`ptycho.nets.train.train`."""
    from ptycho.data.untrusted import human, loads_json

    path = Path(model_dir) / "model.json"
    try:
        size = path.stat().st_size
        if size > MAX_META_BYTES:
            raise PtychoError(
                f"{path}: {human(size)}, more than the {human(MAX_META_BYTES)} a model.json may hold; "
                "not a model.json 'ptycho train' wrote, re-run training"
            )
        meta = loads_json(
            path.read_bytes(), str(path), "it", max_bytes=MAX_META_BYTES, error=PtychoError, fix="re-run training"
        )
    except FileNotFoundError:
        raise PtychoError(f"{path}: no trained model here; run 'python -m ptycho train' first") from None
    except UnicodeDecodeError:
        raise PtychoError(f"{path}: not valid JSON (not UTF-8 text); re-run training") from None
    except json.JSONDecodeError as exc:
        raise PtychoError(f"{path}: not valid JSON ({exc.msg}); re-run training") from None
    # A hand-edited or foreign file fails here in one line, not deep inside Keras.
    kind = meta.get("model", {}).get("kind") if isinstance(meta, dict) and isinstance(meta.get("model"), dict) else None
    if kind not in MODEL_KINDS:
        raise PtychoError(
            f"{path}: model kind {kind!r} is not one of {', '.join(MODEL_KINDS)}; restore the file or re-run training"
        )
    check_format(path, meta.pop(FORMAT_KEY, None) if isinstance(meta, dict) else None, "train")
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
    from ptycho.data.untrusted import Budget, loads_json, npz_headers

    if not path.exists():
        return None
    fix = "delete it to start over, or train without --resume"
    try:
        npz_headers(
            str(path), Budget(str(path), PtychoError, fix=fix, memory_fix=fix)
        )  # bounded before np.load allocates
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = loads_json(
            str(arrays.pop("header")), str(path), "its header", max_bytes=MAX_META_BYTES, error=PtychoError, fix=fix
        )
    except PtychoError:
        raise
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


def check_model_file(path: str | os.PathLike) -> None:
    """Refuse a ``model.keras`` that is not what ``ptycho train`` wrote, before Keras reads it.

    Keras builds each layer from ``config.json`` (allocating its variables) before it
    reads the weights, so the config is bounded first: the archive holds
    :data:`MODEL_MEMBERS` only and declares no more than the read budget uncompressed (a
    zip bomb); ``config.json`` is at most :data:`MAX_MODEL_CONFIG_BYTES` and
    :data:`~ptycho.data.untrusted.MAX_JSON_DEPTH` deep; every layer is one of
    :data:`WEIGHTED_LAYERS` or :data:`WEIGHTLESS_LAYERS`; the variables a weighted layer
    will allocate (from its ``kernel_size``, ``filters`` or ``units`` and the channels of
    its ``build_config``) count against the read budget of
    :class:`~ptycho.data.untrusted.Budget` (half of this process's memory) with every
    axis at most :data:`~ptycho.data.untrusted.MAX_LENGTH`. Then ``model.weights.h5``
    (an HDF5 file) is refused if it reads other files (:func:`~ptycho.data.untrusted.check_hdf5`)
    or declares more bytes than those variables. Each refusal is one line.
    """
    import io
    import zipfile

    import h5py

    from ptycho.data.untrusted import Budget, check_hdf5, check_zip, human, loads_json

    where = str(path)
    fix = "not a Keras model 'ptycho train' wrote, train it again"

    def refuse(reason: str) -> PtychoError:
        return PtychoError(f"{where}: not a Keras model 'ptycho train' wrote ({reason}); train it again")

    budget = Budget(where, PtychoError, fix=fix, memory_fix=fix)
    try:
        zf = zipfile.ZipFile(where)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise refuse(f"truncated or foreign file: not a zip archive, {type(exc).__name__}") from None
    with zf:
        names = zf.namelist()
        extra = sorted(set(names) - set(MODEL_MEMBERS))
        if extra:
            raise refuse(f"it holds {extra[0]!r}, and a model of ptycho holds only {', '.join(MODEL_MEMBERS)}")
        missing = [m for m in ("config.json", "model.weights.h5") if m not in names]
        if missing:
            raise refuse(f"no {missing[0]} in it: truncated or foreign file")
        check_zip(zf, budget)
        info = zf.getinfo("config.json")
        if info.file_size > MAX_MODEL_CONFIG_BYTES:
            raise refuse(f"its config.json declares {human(info.file_size)}, more than {human(MAX_MODEL_CONFIG_BYTES)}")
        try:
            config = loads_json(
                zf.read("config.json"),
                where,
                "its config.json",
                max_bytes=MAX_MODEL_CONFIG_BYTES,
                error=PtychoError,
                fix=fix,
            )
            weights = zf.read("model.weights.h5")
        except PtychoError:
            raise
        except Exception as exc:  # noqa: BLE001 - zip (CRC, truncation), UTF-8 and JSON errors alike
            raise refuse(f"truncated or foreign file: {type(exc).__name__}") from None
    implied = _implied_variable_bytes(config, budget, refuse)
    try:
        with h5py.File(io.BytesIO(weights), "r") as f:
            try:
                check_hdf5(f, "model.weights.h5")
            except DatasetError as exc:  # its fix is for data files; a model is trained again
                raise PtychoError(f"{where}: {str(exc).split(';')[0]}; {fix}") from None
            stored: list[int] = []

            def count(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    dtype = obj.dtype
                    if dtype.kind not in "biuf":
                        raise refuse(f"its weight '{name}' has type {dtype}, not numbers")
                    stored.append(int(np.prod(obj.shape or (), dtype=np.float64)) * dtype.itemsize)

            f.visititems(count)
    except PtychoError:
        raise
    except Exception as exc:  # noqa: BLE001 - h5py's answer to a damaged file
        raise refuse(f"its model.weights.h5 is not a readable HDF5 file: {type(exc).__name__}") from None
    if sum(stored) > implied:
        raise refuse(
            f"its model.weights.h5 declares {human(sum(stored))} of weights, more than the {human(implied)} "
            "its layers hold"
        )


def _implied_variable_bytes(config: Any, budget: Any, refuse) -> int:
    """Bytes of the variables Keras will allocate for the layers of ``config`` (a
    ``model.keras``'s config.json), each counted against ``budget`` before any exists."""
    inner = config.get("config") if isinstance(config, dict) else None
    if not isinstance(inner, dict) or config.get("class_name") != "Functional":
        raise refuse("its config.json does not describe a functional Keras model")
    layers = inner.get("layers")
    if not isinstance(layers, list) or not layers or len(layers) > MAX_MODEL_LAYERS:
        raise refuse(f"its config.json lists {len(layers) if isinstance(layers, list) else 'no'} layers")
    total = 0
    for layer in layers:
        if not isinstance(layer, dict) or not isinstance(layer.get("config"), dict):
            raise refuse("a layer of its config.json is not an object")
        cls, cfg = layer.get("class_name"), layer["config"]
        name = str(cfg.get("name", layer.get("name", "?")))[:80]
        if cls in WEIGHTLESS_LAYERS:
            continue
        if cls not in WEIGHTED_LAYERS:
            raise refuse(f"layer '{name}' is a {str(cls)[:80]}, not one of the layers ptycho's networks are made of")

        def whole(value: Any, what: str, name: str = name) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise refuse(f"layer '{name}' has {what} {str(value)[:40]}, not a positive whole number")
            return value

        build = layer.get("build_config")
        shape = build.get("input_shape") if isinstance(build, dict) else None
        if not isinstance(shape, list) or not shape:
            raise refuse(f"layer '{name}' records no input shape (build_config)")
        channels = whole(shape[-1], "input channels")
        policy = cfg.get("dtype")
        policy = policy.get("config", {}).get("name") if isinstance(policy, dict) else policy
        dtype = np.float64 if policy == "float64" else np.float32
        if cls == "Conv2D":
            kernel = cfg.get("kernel_size")
            if not isinstance(kernel, list) or len(kernel) != 2:
                raise refuse(f"layer '{name}' has kernel_size {str(kernel)[:40]}, not two whole numbers")
            groups = whole(cfg.get("groups", 1), "groups")
            out = whole(cfg.get("filters"), "filters")
            shapes = [(*(whole(k, "kernel_size") for k in kernel), max(channels // groups, 1), out)]
        else:  # Dense
            out = whole(cfg.get("units"), "units")
            shapes = [(channels, out)]
        if cfg.get("use_bias", True):
            shapes.append((out,))
        for shape in shapes:
            total += budget.take(f"layer '{name}'", shape, dtype, verb="asks for a variable of shape")
    return total
