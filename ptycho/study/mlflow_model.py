"""A trained arm as an MLflow model: ``mlflow.pyfunc.load_model`` reconstructs like ``ptycho infer``.

The train job writes the folder (:func:`save`) beside ``model.keras``; the tracking layer
uploads it as the arm's logged model, so that MLflow's pyfunc loader, given
``models:/<id>`` or the folder's path, gives a model whose ``predict`` takes a batch of diffraction
patterns in photon counts, float32 ``(B, N, N, C)`` (``C`` = gridsize² neighbouring
patterns per group for the PINN, 1 for the baseline; the layout of the dataset's
``groups``), and returns ``{"amplitude", "phase"}``, each float32 ``(B, N/2, N/2, C)``.
It normalises by the intensity of the data it is given, as ``ptycho infer`` does, so a
model applies at any dose: by the mean count per pixel of the batch, or by the param
``intensity_norm`` when it is above 0 (a dataset's own mean, as ``ptycho infer`` records
it in its output: pass it to reconstruct a dataset in several batches). It predicts with
the arm's XLA mode and batch, through the same functions as ``ptycho infer``
(:func:`ptycho.nets.inputs.network_inputs`, :class:`ptycho.nets.infer.Predictor`), so the
two agree to the last bit on the same patterns and norm.

The model is an MLflow *model from code*: its ``python_model.py`` is the three lines of
:data:`CODE` (import :class:`Reconstructor`, hand MLflow an instance), so loading it
unpickles nothing. Loading needs this package importable (the repository installed, as
``make setup`` does).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

#: The MLflow model's folder inside an arm's model folder.
FOLDER = "mlflow-model"
#: The model's code, as MLflow stores it in the model (``python_model.py``).
CODE = """# An arm of the XLA ptychography study: diffraction counts in, amplitude and phase out.
import mlflow.models
from ptycho.study.mlflow_model import Reconstructor

mlflow.models.set_model(Reconstructor())
"""


def _reconstructor_class():
    """:class:`Reconstructor`, built on first use so that importing this module does not import MLflow."""
    import mlflow.pyfunc

    class Reconstructor(mlflow.pyfunc.PythonModel):
        """A trained network behind ``predict``: counts in, amplitude and phase out."""

        def load_context(self, context) -> None:
            from ptycho.nets.infer import Predictor, load_network

            meta = json.loads(Path(context.artifacts["meta"]).read_text())
            network = load_network(Path(context.artifacts["network"]).parent)
            self.predictor = Predictor(network, int(meta["train"]["batch_size"]), meta["train"]["xla"])

        # The np.ndarray hint tells MLflow that the signature (tensors) is the schema.
        def predict(self, context, model_input: np.ndarray, params=None):  # noqa: ARG002 - MLflow's signature
            from ptycho.nets.inputs import mean_count, network_inputs

            counts = checked_counts(model_input)
            norm = float((params or {}).get("intensity_norm") or 0.0)
            if norm <= 0:  # the batch's own
                norm = mean_count(counts)
                if not norm > 0:
                    raise ValueError(
                        "model_input holds no photons (every count is 0), so it has no intensity to normalise by; "
                        "give the dataset's own with params={'intensity_norm': <mean count per pixel>}"
                    )
            amplitude, phase = self.predictor(network_inputs(counts, norm))
            return {"amplitude": amplitude, "phase": phase}

    Reconstructor.__module__, Reconstructor.__qualname__ = __name__, "Reconstructor"
    return Reconstructor


def checked_counts(model_input) -> np.ndarray:
    """``model_input`` as float32 photon counts, refused in one line when a value is not
    finite or negative: one inf pixel moved every other reconstruction of the batch (the
    batch's mean normalises them all) and a NaN made them all NaN, without an error."""
    counts = np.asarray(model_input, np.float32)
    bad = int(np.count_nonzero(~np.isfinite(counts))) if counts.size else 0
    if bad:
        raise ValueError(f"model_input holds {bad} values that are not finite (NaN or inf); give photon counts")
    if counts.size and counts.min() < 0:
        raise ValueError(
            f"model_input holds {int(np.count_nonzero(counts < 0))} negative values (lowest {float(counts.min()):g}); "
            "give photon counts, which are never negative"
        )
    return counts


def __getattr__(name: str):
    # PEP 562: the class exists once asked for (CODE imports it), so that importing this
    # module does not import MLflow.
    if name == "Reconstructor":
        globals()[name] = _reconstructor_class()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def requirements() -> list[str]:
    """The loading environment's pins: this process's TensorFlow, Keras, NumPy and MLflow."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in ("tensorflow", "keras", "numpy", "mlflow"):
        try:
            out.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            out.append(package)
    return out


def _relative_code_path(mlmodel: Path) -> None:
    """Name the model's code by its file in the model folder: MLflow records the absolute
    path it was saved from (here a staging folder that is gone, in the original results
    folder), although its loader reads only the file name beside ``MLmodel``."""
    import yaml

    spec = yaml.safe_load(mlmodel.read_text())
    pyfunc = spec.get("flavors", {}).get("python_function", {})
    if pyfunc.get("model_code_path"):
        pyfunc["model_code_path"] = os.path.basename(pyfunc["model_code_path"])
        mlmodel.write_text(yaml.safe_dump(spec, default_flow_style=False, sort_keys=False))


def save(model_dir: str | os.PathLike, example: np.ndarray) -> Path:
    """Write ``<model_dir>/mlflow-model`` (MLmodel, signature, input example, the network
    and its ``model.json``) atomically, replacing an older one; returns its path.

    ``example``: one batch of the training split's counts in the network's layout (the
    input example and the signature's shapes)."""
    import mlflow.pyfunc
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec, Schema, TensorSpec

    model_dir = Path(model_dir)
    example = np.asarray(example, np.float32)
    n, c = example.shape[1], example.shape[-1]
    out_shape = (-1, n // 2, n // 2, c)
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, n, n, c))]),
        outputs=Schema(
            [
                TensorSpec(np.dtype(np.float32), out_shape, "amplitude"),
                TensorSpec(np.dtype(np.float32), out_shape, "phase"),
            ]
        ),
        # 0: the batch's own mean count per pixel (see the module's docstring)
        params=ParamSchema([ParamSpec("intensity_norm", "double", 0.0)]),
    )
    final = model_dir / FOLDER
    # MLflow's notes on saving (the validated example, warnings, progress bars) are not
    # news in a training's log; quietened for this call only.
    logger, level = logging.getLogger("mlflow"), logging.getLogger("mlflow").level
    logger.setLevel(logging.ERROR)
    bar = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = bar or "false"
    staging = Path(tempfile.mkdtemp(prefix=f".{FOLDER}-", dir=model_dir))
    try:
        target = staging / FOLDER
        code = staging / "python_model.py"
        code.write_text(CODE)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mlflow.pyfunc.save_model(
                target,
                python_model=str(code),
                artifacts={"network": str(model_dir / "model.keras"), "meta": str(model_dir / "model.json")},
                signature=signature,
                input_example=example,
                pip_requirements=requirements(),
            )
        _relative_code_path(target / "MLmodel")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(target, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        logger.setLevel(level)
        if bar is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
    return final
