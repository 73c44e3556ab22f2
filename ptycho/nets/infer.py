"""Inference at any number of samples without recompiling.

The predict step is compiled for one batch shape. Inputs are cut into batches of that
size and the last one is padded (by repeating a real sample, so no unusual values reach
the network) and its padding stripped: batch sizes 1, 7, 16, 100 and non-multiples all
use the same compiled program. This is the fix for the dynamic-batch bug in the seed
notes, by construction rather than by catching errors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptycho.data.dataset import Dataset
from ptycho.errors import PtychoError
from ptycho.nets.models import method_of


class Predictor:
    """Fixed-batch predict step for a network ``x -> (amp, phase)`` under an XLA mode.

    The step is compiled as the mode compiles a step (:func:`~ptycho.nets.xla.compile_step`):
    ``jit`` compiles it, ``auto`` auto-clusters it; inference has no physics head, so
    ``physics`` (whose step is a plain graph) predicts exactly as ``off``.
    The step is traced once: a retrace raises :class:`~ptycho.nets.xla.Retraced`.
    """

    def __init__(self, network, batch_size: int, mode: str):
        from ptycho.nets.xla import compile_step, parse_mode

        self.network = network
        self.batch_size = batch_size
        self.mode = parse_mode(mode)
        self._step = compile_step(self._predict, self.mode, name="predict step")

    @property
    def traces(self) -> int:
        """Times the predict step was traced (1 once it has run)."""
        return self._step.experimental_get_tracing_count()

    def _predict(self, x):
        return self.network(x, training=False)

    def __call__(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(K, N, N, C)`` inputs -> amplitude, phase, each ``(K, N/2, N/2, C)``."""
        k = len(inputs)
        if k == 0:
            raise PtychoError("nothing to reconstruct: the dataset holds no samples")
        bs = self.batch_size
        amps, phases = [], []
        for start in range(0, k, bs):
            chunk = inputs[start : start + bs]
            real = len(chunk)
            if real < bs:
                chunk = np.concatenate([chunk, np.repeat(chunk[:1], bs - real, axis=0)])
            amp, phase = self._step(chunk)
            amps.append(amp.numpy()[:real])
            phases.append(phase.numpy()[:real])
        return np.concatenate(amps), np.concatenate(phases)


@dataclass
class Reconstruction:
    """Per-patch reconstructions ready to stitch.

    ``patches`` (K, N/2, N/2) complex64 and their scan ``positions`` (K, 2) ``[x, y]``
    and ``position_object`` (K,), one entry per reconstructed patch (a PINN gives C per
    group, each at its own position; the baseline one per scan position).
    """

    patches: np.ndarray
    positions: np.ndarray
    position_object: np.ndarray
    seconds: float
    compile_seconds: float
    patterns: int
    #: The per-pixel mean count the inputs were divided by: the given data's own
    #: (:func:`ptycho.nets.inputs.intensity_norm`), whatever the training's dose was.
    intensity_norm: float = float("nan")

    @property
    def patterns_per_second(self) -> float:
        return self.patterns / self.seconds if self.seconds > 0 else float("nan")


def load_network(model_dir: str | Path):
    import keras

    path = Path(model_dir) / "model.keras"
    if not path.exists():
        raise PtychoError(f"{path}: no trained model here; run 'python -m ptycho train' first")
    from ptycho.nets.state import check_model_file

    check_model_file(path)  # bounded before Keras allocates a layer (docs/security.md)
    try:
        return keras.models.load_model(path, safe_mode=True, compile=False)  # no Lambda layers: nothing to unpickle
    except Exception as exc:  # noqa: BLE001 - Keras says a truncated or foreign file is "File not found", etc.
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise PtychoError(
            f"{path}: not a Keras model 'ptycho train' wrote (truncated or foreign file: {reason}); train it again"
        ) from None


def reconstruct(
    model_dir: str | Path, ds: Dataset, *, xla: str | None = None, batch_size: int | None = None
) -> Reconstruction:
    """Reconstruct every sample of ``ds`` with the model in ``model_dir``.

    ``xla`` (a mode of :mod:`ptycho.nets.xla`) and ``batch_size`` default to the training arm's. Timing excludes the first
    (compiling) batch, which is reported as ``compile_seconds``.

    The inputs are normalised by the intensity of ``ds`` itself, not the training split's:
    the networks read ``sqrt(counts / mean count)``, which does not depend on the dose (the
    photons per pattern scale the counts and their mean alike), so a model trained at 1e9
    photons applies to data taken at 1e4 (docs/physics.md, section 4).
    """
    from ptycho.nets.inputs import prepare
    from ptycho.nets.state import load_meta

    meta = load_meta(model_dir)
    kind = meta["model"]["kind"]
    if ds.n != meta["n"]:
        raise PtychoError(
            f"dataset patch size N={ds.n} differs from the model's N={meta['n']}; simulate with --n {meta['n']}"
        )
    if method_of(kind).grouped and ds.gridsize != meta["gridsize"]:
        raise PtychoError(f"dataset gridsize {ds.gridsize} differs from the model's {meta['gridsize']}")
    from ptycho.nets.xla import parse_mode

    xla = parse_mode(meta["train"]["xla"] if xla is None else xla)
    batch_size = batch_size or meta["train"]["batch_size"]
    data = prepare(ds, kind)  # the given data's own intensity (see above)
    predictor = Predictor(load_network(model_dir), batch_size, xla)

    t0 = time.perf_counter()
    predictor(data.inputs[:1])
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    amp, phase = predictor(data.inputs)
    seconds = time.perf_counter() - t0

    c = amp.shape[-1]
    patches = (np.moveaxis(amp, -1, 1) * np.exp(1j * np.moveaxis(phase, -1, 1))).reshape(-1, *amp.shape[1:3])
    if method_of(kind).grouped:
        index = ds.groups.reshape(-1)  # flat k = g*C + c
    else:
        index = np.arange(len(ds.positions))
    return Reconstruction(
        patches=patches.astype(np.complex64),
        positions=ds.positions[index],
        position_object=ds.position_object[index],
        seconds=seconds,
        compile_seconds=compile_s,
        patterns=len(data.inputs) * c,
        intensity_norm=float(data.physics["intensity_norm"]),
    )
