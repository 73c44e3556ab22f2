"""Network-ready arrays from a dataset: the inputs, offsets and targets of each model kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ptycho.data.dataset import Dataset
from ptycho.nets.models import method_of


@dataclass
class TrainingData:
    """Network-ready arrays for one model kind (see :func:`prepare`)."""

    inputs: np.ndarray  #: (S, N, N, Cin) float32 normalised amplitudes
    offsets: np.ndarray  #: (S, C, 2) float32 (zeros for the baseline)
    targets: dict[str, np.ndarray]  #: counts (PINN) or amp/phase patches (baseline)
    physics: dict[str, Any] = field(default_factory=dict)

    def batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(inputs, offsets, targets)`` of the samples ``idx``: a step's arguments."""
        return self.inputs[idx], self.offsets[idx], {k: v[idx] for k, v in self.targets.items()}


def intensity_norm(ds: Dataset) -> float:
    """Per-pixel mean count of the dataset: the unit of the normalised intensities."""
    return mean_count(ds.counts)


def mean_count(counts: np.ndarray) -> float:
    """Per-pixel mean of ``counts`` in any layout (a dataset's ``(P, N, N)``, a batch of
    groups): what the networks' inputs are divided by."""
    return float(np.asarray(counts).sum(dtype=np.float64) / np.size(counts))


def normalised(counts: np.ndarray, norm: float) -> np.ndarray:
    """Counts in the networks' unit, ``counts / norm``, float32, element by element (any
    layout); ``norm`` is the training split's :func:`intensity_norm`."""
    return (counts / np.float32(norm)).astype(np.float32)


def network_inputs(counts: np.ndarray, norm: float) -> np.ndarray:
    """What the networks read: the normalised amplitude ``sqrt(counts / norm)``."""
    return np.sqrt(normalised(counts, norm))


def layout(ds: Dataset, kind: str, per_pattern: np.ndarray) -> np.ndarray:
    """Per-pattern arrays ``(P, N, N)`` in a network's input layout: the PINN's groups of
    neighbouring patterns ``(G, N, N, C)`` (the dataset's ``groups``), one pattern per
    sample ``(P, N, N, 1)`` for the baseline."""
    if method_of(kind).grouped:
        return np.moveaxis(per_pattern[ds.groups], 1, -1)
    return per_pattern[..., None]


def head_constants(ds: Dataset, norm: float | None = None) -> dict[str, Any]:
    """What the PINN's physics head needs of a dataset beside its object patches: the
    intensity unit ``norm`` (default: the dataset's own :func:`intensity_norm`), the initial
    ``log_scale`` (the file's s in that unit) and the ``canvas_pad`` its group offsets need."""
    from ptycho.physics.forward_tf import canvas_pad_for

    norm = intensity_norm(ds) if norm is None else norm
    return {
        "intensity_norm": norm,
        "log_scale": float(np.log(ds.scale / np.sqrt(norm))),
        "canvas_pad": canvas_pad_for(ds.group_offsets, ds.n),
    }


def prepare(ds: Dataset, kind: str, norm: float | None = None) -> TrainingData:
    """Arrays for ``kind`` from a dataset; ``norm`` defaults to this dataset's own.

    Inference passes the training set's ``norm`` so both splits share one unit.
    """
    physics = head_constants(ds, norm)
    y = normalised(ds.counts, physics["intensity_norm"])  # (P, N, N)
    x = np.sqrt(y)  # network_inputs
    if method_of(kind).physics:
        inputs, counts = layout(ds, kind, x), layout(ds, kind, y)
        return TrainingData(inputs, ds.group_offsets.astype(np.float32), {"counts": counts}, physics)
    amp, phase = true_outputs(ds, kind)
    return TrainingData(
        layout(ds, kind, x), np.zeros((len(x), 1, 2), np.float32), {"amp": amp, "phase": phase}, physics
    )


def true_outputs(ds: Dataset, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """What a perfect network would output for every sample of ``ds``: the true object's
    amplitude and phase on the central N/2 x N/2 of each pattern's patch, float32, in the
    network's output layout (the PINN's ``(G, N/2, N/2, C)``, the baseline's
    ``(P, N/2, N/2, 1)``). The baseline's targets; the PINN's loss floor
    (:func:`ptycho.nets.bounds.loss_bounds`). Needs a ground truth (a simulated dataset)."""
    from ptycho.physics.translate import centre_crop, extract_patches

    m_all = range(ds.objects.shape[0])
    patches = np.concatenate(
        [extract_patches(ds.objects[m], ds.positions[ds.position_object == m], ds.n) for m in m_all]
    )
    order = np.concatenate([np.flatnonzero(ds.position_object == m) for m in m_all])
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    patches = centre_crop(patches[inv], ds.n // 2)  # back in position order
    return (
        layout(ds, kind, np.abs(patches)).astype(np.float32),
        layout(ds, kind, np.angle(patches)).astype(np.float32),
    )
