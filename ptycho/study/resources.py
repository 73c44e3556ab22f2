"""Memory the study's jobs will need, estimated from the configuration before any job runs.

A configuration such as ``simulation: {n_objects_train: 1000, object_size: 2048,
stride_train: 1}`` is valid key by key, yet its simulate job would hold about 4 million
patterns per object: it would run for hours and then be killed for memory. The
workflow refuses it while it is parsed instead (:func:`check_memory`, one line naming the
job, the estimate, the memory there is and the keys to lower).

The estimates (:func:`estimate_bytes`) follow what the code allocates, array by array:

``simulate`` (:func:`ptycho.data.simulate.simulate_split`, one split after the other, the
train split kept while the test split is made, both kept while they are written)
  * the objects: each is drawn as complex128 (16 B/px) after a lines image whose canvas
    is twice the side (float64, up to 5 such canvases alive while it is blurred); the
    list of complex128 objects and its ``np.stack`` are alive together (32 B/px), the
    split keeps them as complex64 (8 B/px);
  * the forward model, per pattern pixel (``K = objects x positions`` patterns of
    ``n x n``): the complex64 patches (8 B), their complex128 copy (16 B), the exit
    waves (16 B), the two passes of ``np.fft.fft2`` (16 B each), then ``|.|`` and its
    ``fftshift`` (8 B each): 72 B/px at the peak; the split keeps the uint32 counts
    (4 B/px); writing a split copies its counts once more for the digest (4 B/px).

``train`` (:func:`ptycho.nets.inputs.prepare` on the train split, then the steps)
  * TensorFlow, Keras and MLflow loaded (:data:`TENSORFLOW_BYTES`);
  * the file's arrays; its counts copied once for the digest when it is read (4 B/px);
  * the normalised counts and the amplitudes (float32, 4 B/px each; a float32 copy of
    the counts is made and dropped on the way, 4 B/px);
  * PINN: inputs and count targets in groups, ``(G, n, n, C)`` float32 each, so every
    pattern once per group it belongs to (C = gridsize**2: at stride 4 and spacing 4
    about four copies of each pattern); baseline: the true object patches (complex64,
    8 B/px, twice while they are put in scan order), then the amplitude and phase
    targets (float32, n/2 x n/2);
  * then the steps, beside the network's arrays (the others are dropped): the model,
    its optimiser and compiled step (:data:`STEP_BYTES`) and a batch's activations
    (:data:`ACTIVATION_BYTES` per pixel, per first-layer filter, per sample).

``infer`` (:func:`ptycho.nets.infer.reconstruct` on the test split): the arrays of a
training on that split, then the predicted amplitude and phase and the complex patches
made from them (about 10 B per predicted n x n pattern pixel).

Calibration: peak resident memory ("Maximum resident set size" of ``/usr/bin/time -v``)
against the estimate, on the study's 2-core, 24 GiB machine (NumPy 2.4, TensorFlow 2.21
CPU, Python 3.11), in MiB. Simulations: ``/usr/bin/time -v python -m ptycho simulate
--quiet --train t.h5 --test e.h5 FLAGS`` (the schema's defaults otherwise: n 64,
gridsize 2, object_size 196, 2 + 1 objects, stride 4 / 10). Trainings: ``/usr/bin/time
-v python -m ptycho --threads 1 train --quiet --dataset D --out M --epochs 1
--max-samples 64 FLAGS`` (32 filters, depth 2, batch 8 unless given), on A = the
defaults' train split (2312 patterns) or C = that of ``--object-size 392`` (13778
patterns); the inference: ``python -m ptycho --threads 1 infer`` of the C model on C.

===========================================================================  ========  ========  =====
job, flags                                                                   estimate  measured  ratio
===========================================================================  ========  ========  =====
simulate (the defaults)                                                           801       717   1.12
simulate ``--n-objects-train 6``                                                 2103      2017   1.04
simulate ``--stride-train 2``                                                    2677      2593   1.03
simulate ``--object-size 392``                                                   4029      3951   1.02
simulate ``--object-size 1024 --n-objects-train 20 --stride-train/test 64``      5373      5295   1.01
simulate ``--object-size 1024 --n-objects-train 20 --stride-train/test 500``      790       744   1.06
simulate ``--n 128 --gridsize 1 --object-size 392 --stride-train 6``             2429      2351   1.03
  ``--n-objects-train 1``
train A ``--kind pinn --xla off --precision mixed_bfloat16``                     1589      1060   1.50
train A ``--kind pinn --xla jit``                                                1589      1390   1.14
train A ``--kind pinn --xla jit --filters 64 --depth 3 --batch-size 16``         2165      1900   1.14
train C ``--kind pinn --xla jit``                                                3180      2984   1.07
train C ``--kind baseline --xla off``                                            2279      2165   1.05
infer C (PINN, jit, 53792 patterns as groups)                                    5281      4376   1.21
===========================================================================  ========  ========  =====

Every estimate is above its measurement; the largest ratios are the small trainings,
where the constants (TensorFlow, the compiled step; XLA's ``jit`` takes about 330 MiB
more than ``off``) dominate. A whole process's other costs (an MLflow child run and its
system-metrics thread: about 45 MiB) are within the margins. The presets' estimates:
smoke 0.2 / 1.1 / 1.1 GiB (simulate / train / infer), default 0.8 / 1.6 / 1.3 GiB,
paper 3.9 / 3.7 / 2.5 GiB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptycho.errors import ConfigError
from ptycho.nets.models import method_of
from ptycho.runtime import machine_memory_bytes

GIB = 2**30

#: Resident memory of ``python -m ptycho simulate`` before it allocates any array
#: (interpreter, NumPy, SciPy, h5py; measured 78 MB for a 72 px object), with margin.
PYTHON_BYTES = 150 * 2**20
#: Resident memory of a training or inference process once TensorFlow, Keras and MLflow
#: are loaded, before it reads its dataset (measured 697 MiB), with margin.
TENSORFLOW_BYTES = 768 * 2**20
#: What the training step adds: the model, its optimiser state and the compiled step
#: (about 260 MiB under XLA at 32 filters, less without XLA), with margin ...
STEP_BYTES = 320 * 2**20
#: ... and per input pixel, per first-layer filter and per sample of a batch (the
#: activations kept for the gradients, XLA's buffers): 169 B from 32 filters / batch 8
#: to 64 filters, depth 3 / batch 16 (both under XLA), with margin.
ACTIVATION_BYTES = 192


@dataclass(frozen=True)
class Scan:
    """How many patterns one object of a split gives (as :func:`ptycho.physics.scan.grid_scan`
    lays them out, counted without building it)."""

    positions: int  #: unique scan positions per object (P)
    groups: int  #: groups per object (G)
    channels: int  #: patterns per group (C = gridsize**2)


def scan_size(object_size: int, n: int, stride: int, gridsize: int, spacing: int) -> Scan:
    """The numbers :func:`~ptycho.physics.scan.grid_scan` gives, from one axis: the scan
    is the product of the same positions along x and along y."""
    import numpy as np

    sub = (np.arange(gridsize) - (gridsize - 1) / 2.0) * spacing
    half_extent = sub.max() if gridsize > 1 else 0.0
    lo = n // 2 + half_extent
    hi = object_size - (n - n // 2) - half_extent
    if hi < lo:
        return Scan(0, 0, gridsize * gridsize)
    centres = lo + stride * np.arange(int(np.floor((hi - lo) / stride)) + 1)
    along = len(np.unique((centres[:, None] + sub[None, :]).ravel()))
    return Scan(along * along, len(centres) ** 2, gridsize * gridsize)


@dataclass(frozen=True)
class Split:
    """The arrays of one simulated split that the memory depends on."""

    objects: int  #: M
    object_pixels: int  #: S * S
    patterns: int  #: K = M * P
    group_patterns: int  #: M * G * C: the patterns as the PINN reads them, once per group
    pattern_pixels: int  #: n * n

    @property
    def held(self) -> int:
        """Bytes a :class:`~ptycho.data.dataset.Dataset` of the split holds: counts
        (uint32), objects (complex64), positions and groups (float64 / int64)."""
        return 4 * self.patterns * self.pattern_pixels + 8 * self.objects * self.object_pixels + self.small

    @property
    def small(self) -> int:
        """Per-pattern and per-group bookkeeping: positions, their object, groups, offsets."""
        return 24 * self.patterns + 24 * self.group_patterns


def split_of(sim, split: str) -> Split:
    """The :class:`Split` of ``sim`` (a :class:`~ptycho.config.SimulationConfig`), ``train`` or ``test``."""
    objects = sim.n_objects_train if split == "train" else sim.n_objects_test
    stride = sim.stride_train if split == "train" else sim.stride_test
    scan = scan_size(sim.object_size, sim.n, stride, sim.gridsize, sim.spacing)
    return Split(
        objects=objects,
        object_pixels=sim.object_size**2,
        patterns=objects * scan.positions,
        group_patterns=objects * scan.groups * scan.channels,
        pattern_pixels=sim.n**2,
    )


def _drawing(s: Split) -> int:
    """Peak while the objects are drawn and stacked (:func:`ptycho.physics.objects.make_object`)."""
    canvas = 4 * s.object_pixels * 8  # the lines image is drawn on a canvas of twice the side, float64
    one = 5 * canvas + 3 * 8 * s.object_pixels  # five canvases while it is blurred, amplitude and phase
    return max(16 * (s.objects - 1) * s.object_pixels + one, 32 * s.objects * s.object_pixels)


def _forward(s: Split) -> int:
    """Peak while the patterns are computed and their counts drawn (the objects kept)."""
    return 72 * s.patterns * s.pattern_pixels + 8 * s.objects * s.object_pixels + s.small


def _simulating(s: Split) -> int:
    """Peak of one split's simulation (objects drawn, patterns computed, counts drawn)."""
    return max(_drawing(s), _forward(s))


def simulate_bytes(sim) -> int:
    """Peak resident memory of the ``simulate`` job for ``sim`` (a SimulationConfig)."""
    train, test = split_of(sim, "train"), split_of(sim, "test")
    written = max(train.patterns * train.pattern_pixels, test.patterns * test.pattern_pixels)
    return PYTHON_BYTES + max(
        _simulating(train),
        train.held + _simulating(test),
        train.held + test.held + 5 * written,  # the digest's copy of the counts, the finiteness check
    )


def _prepared(s: Split, kind: str) -> tuple[int, int]:
    """Bytes of the split's arrays at the peak of reading and :func:`ptycho.nets.inputs.prepare`,
    and after it (what the steps run beside)."""
    px = s.patterns * s.pattern_pixels
    read = s.held + 5 * px  # the digest's copy of the counts and the finiteness check, on read
    if method_of(kind).grouped:
        # counts and amplitudes (float32), then both taken once per group: (G, n, n, C) each
        grouped = 8 * s.group_patterns * s.pattern_pixels
        return max(read, s.held + 12 * px, s.held + 8 * px + grouped), s.held + grouped
    # counts and amplitudes, the true patches (complex64) twice while put in scan order;
    # then the amplitudes and the amplitude and phase targets (float32, n/2 x n/2)
    return max(read, s.held + 24 * px), s.held + 6 * px


def _step(model, train_cfg, n: int) -> int:
    """A training step's memory: model, optimiser, compiled step, a batch's activations."""
    return STEP_BYTES + ACTIVATION_BYTES * train_cfg.batch_size * n * n * model.filters


def train_bytes(sim, model, train_cfg) -> int:
    """Peak resident memory of one training of ``model`` (a ModelConfig) with ``train_cfg``
    (a TrainConfig) on the train split of ``sim``."""
    peak, after = _prepared(split_of(sim, "train"), model.kind)
    return TENSORFLOW_BYTES + max(peak, after + _step(model, train_cfg, sim.n))


def infer_bytes(sim, model, train_cfg) -> int:
    """Peak resident memory of one inference of ``model`` on the test split of ``sim``:
    the arrays of a training on it, and the predicted amplitude and phase, their complex
    patches (complex64) and the copies made on the way."""
    s = split_of(sim, "test")
    peak, after = _prepared(s, model.kind)
    samples = s.group_patterns if method_of(model.kind).grouped else s.patterns
    outputs = 10 * samples * s.pattern_pixels  # n/2 x n/2 per pattern: 1 B/px per float32 array
    return TENSORFLOW_BYTES + max(peak, after + outputs + _step(model, train_cfg, sim.n))


def estimate_bytes(sim, models: Sequence[tuple[Any, Any]]) -> dict[str, int]:
    """Peak resident memory, in bytes, of the study's ``simulate`` job, of one ``train``
    job and of one ``infer`` job (the largest over ``models``, each a ``(ModelConfig,
    TrainConfig)``), for the simulation ``sim``. From a resolved config:
    :func:`ptycho.study.preflight.job_memory`."""
    out = {"simulate": simulate_bytes(sim), "train": 0, "infer": 0}
    for model, train_cfg in models:
        out["train"] = max(out["train"], train_bytes(sim, model, train_cfg))
        out["infer"] = max(out["infer"], infer_bytes(sim, model, train_cfg))
    return out


def _gib(value: int) -> str:
    gib = value / GIB
    return f"{gib:.1f} GiB" if gib < 100 else f"{gib:,.0f} GiB"


def _split_of_job(sim, job: str) -> str:
    """The split whose size sets a job's memory: the simulate job's larger one."""
    if job == "simulate":
        train, test = split_of(sim, "train"), split_of(sim, "test")
        return "train" if _simulating(train) >= _simulating(test) else "test"
    return "train" if job == "train" else "test"


def _fix(sim, job: str, split: str) -> tuple[str, str]:
    """What the job's size comes from, and the keys that make it smaller."""
    s = split_of(sim, split)
    what = (
        f"{split} split: {s.objects} objects of {sim.object_size}x{sim.object_size} px, "
        f"{s.patterns:,} patterns of {sim.n}x{sim.n} px"
    )
    keys = f"simulation.n_objects_{split} or simulation.object_size"
    if job == "simulate" and _drawing(s) > _forward(s):
        return (
            what,
            f"lower {keys} (the objects take n_objects_{split} x object_size^2 x 32 bytes while they are drawn)",
        )
    return what, (
        f"lower {keys}, or raise simulation.stride_{split} "
        f"(the patterns grow with n_objects_{split} x (object_size / stride_{split})^2)"
    )


def check_memory(sim, estimates: Mapping[str, int], available_bytes: int, where: str) -> None:
    """Refuse a study whose simulate, training or inference job would need more memory
    than ``available_bytes`` (:func:`machine_memory_bytes`), ``where`` naming that memory
    (e.g. ``"this machine"``). One-line :class:`ConfigError` naming the job, the
    estimate, the memory there is and the keys to change; nothing otherwise.

    The estimates err on the high side (the calibration in this module's docstring), so
    the limit is the memory itself: a study estimated just below it runs."""
    over = {job: need for job, need in estimates.items() if need > available_bytes}
    if not over:
        return
    job = max(over, key=over.get)
    what, fix = _fix(sim, job, _split_of_job(sim, job))
    others = "".join(f"; the {other} job about {_gib(need)}" for other, need in over.items() if other != job)
    raise ConfigError(
        f"the {job} job would need about {_gib(over[job])} of memory ({what}{others}), more than the "
        f"{_gib(available_bytes)} of {where}; {fix}, or run it where there is more memory"
    )


__all__ = [
    "GIB",
    "check_memory",
    "estimate_bytes",
    "infer_bytes",
    "machine_memory_bytes",
    "scan_size",
    "simulate_bytes",
    "split_of",
    "train_bytes",
]
