"""What the figures job reads: the pipeline's outputs, loaded once and only when a
figure asks, keyed by :class:`~ptycho.study.arms.Arm`.

:class:`FigureInputs` holds the paths the job is given; each property reads what one
kind of figure needs and caches it, raising :class:`~ptycho.errors.PtychoError` (one
line, saying which job to re-run) when an output is not what it should be. The small
readers :func:`floats` and :func:`number` turn JSON numbers (``null`` = NaN) into what
the drawing modules plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.study.arms import Arm, pairs


def floats(values: Any, what: str) -> np.ndarray:
    """1-D float array (JSON ``null`` -> NaN); ``None`` -> empty; ValueError naming ``what``."""
    if values is None:
        return np.zeros(0)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a sequence of numbers, got {type(values).__name__}") from None
    if arr.ndim > 1:
        raise ValueError(f"{what}: expected a 1-D sequence, got shape {arr.shape}")
    return arr.reshape(-1)


def number(value: Any, what: str) -> float:
    """A float (JSON ``null`` -> NaN); ValueError naming ``what``."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {value!r}") from None


def _arm_of_file(path: str) -> Arm:
    """The arm a per-arm output belongs to: its file name's stem is the arm's name."""
    try:
        return Arm.parse(Path(path).stem)
    except ValueError as err:
        raise PtychoError(f"{path}: the file is not named after an arm ({err})") from None


class FigureInputs:
    """The figures job's inputs: the test dataset, each arm's stitched reconstruction
    (``stitched/<arm>.npz``) and metrics (``metrics/<arm>.json``), the trained models'
    ``model.json``, the benchmark record (``bench``), and optionally the solver's records
    and the arms' ``ptycho infer`` outputs (their inference rates). Nothing is read
    until a property asks for it."""

    def __init__(
        self,
        dataset: str,
        stitched: Sequence[str],
        metrics: Sequence[str],
        model_jsons: Sequence[str],
        bench: str,
        *,
        solver: Sequence[str] = (),
        reconstructions: Sequence[str] = (),
    ) -> None:
        self.dataset = str(dataset)
        self.stitched = tuple(map(str, stitched))
        self.metrics = tuple(map(str, metrics))
        self.model_jsons = tuple(map(str, model_jsons))
        self.bench_json = str(bench)
        self.solver = tuple(map(str, solver))
        self.reconstructions = tuple(map(str, reconstructions))

    @cached_property
    def truth(self) -> np.ndarray:
        """The test dataset's first object (complex), the one the figures show."""
        from ptycho.data.dataset import read_dataset

        return read_dataset(self.dataset).ground_truth(0)

    @cached_property
    def compared(self) -> dict[Arm, dict[str, Any]]:
        """Arm -> :func:`ptycho.analysis.metrics.compare` of its first stitched object with
        the truth: what the metrics scored, as they scored it."""
        from ptycho.analysis.metrics import compare
        from ptycho.artifacts import STITCHED, read_arrays

        out = {}
        for path in self.stitched:
            images = read_arrays(path, ("images",), producer=STITCHED)["images"]
            if len(images) == 0 or images[0].shape != self.truth.shape:
                raise PtychoError(f"{path}: stitched images do not match the objects of {self.dataset}; re-run stitch")
            out[_arm_of_file(path)] = compare(images[0], self.truth)
        return out

    @cached_property
    def _scored(self) -> dict[str, dict]:
        """Metrics file -> its record."""
        from ptycho.artifacts import read_json

        return {path: read_json(path, producer="evaluate") for path in self.metrics}

    @cached_property
    def frc(self) -> dict[Arm, dict[str, Any]]:
        """Arm -> ``{"freq", "amp", "phase"}``: its first object's FRC curves with the truth."""
        out = {}
        for path, scored in self._scored.items():
            first = scored.get("per_image", [{}])[0]
            if "frc_freq" not in first:
                raise PtychoError(
                    f"{path}: no FRC curves in these metrics (written by an older version); re-run 'ptycho evaluate'"
                )
            out[_arm_of_file(path)] = {
                "freq": first["frc_freq"],
                "amp": first["amp_frc_curve"],
                "phase": first["phase_frc_curve"],
            }
        return out

    @cached_property
    def histories(self) -> dict[Arm, list[dict]]:
        """Arm -> its per-epoch training records (``model.json``'s ``history``)."""
        from ptycho.artifacts import read_json

        return {Arm.of_meta(m): m["history"] for m in (read_json(p, producer="train") for p in self.model_jsons)}

    @cached_property
    def loss_curves(self) -> dict[Arm, dict[str, list]]:
        """Arm -> ``{"train": [...], "val": [...]}`` per epoch, for every arm of a pair
        (:func:`ptycho.study.arms.pairs`: a mode and ``off``, or a reduced precision and
        float32): the compared arm and its reference."""
        histories = self.histories
        out: dict[Arm, dict[str, list]] = {}
        for pair in pairs(histories):
            for arm in (pair.reference, pair.arm):
                out[arm] = {
                    "train": [h["train_loss"] for h in histories[arm]],
                    "val": [h["val_loss"] for h in histories[arm]],
                }
        return out

    @cached_property
    def bench(self) -> dict[str, Any]:
        """The benchmark record (``ptycho bench --out``)."""
        from ptycho.artifacts import read_json

        timed = read_json(self.bench_json, producer="bench")
        if "arms" not in timed:
            raise PtychoError(
                f"{self.bench_json}: not a benchmark result; pass the JSON written by 'ptycho bench --out'"
            )
        return timed

    @cached_property
    def solved(self) -> dict[str, Any] | None:
        """The report's solver entry (:func:`ptycho.study.solver_view.load`) with the
        networks' metrics and inference rates beside it (keyed by arm name); None without a
        solver record."""
        from ptycho.study import solver_view

        if not self.solver:
            return None
        networks = {Path(path).stem: {"metrics": scored.get("mean", {})} for path, scored in self._scored.items()}
        for arm, rate in inference_rates(self.reconstructions).items():
            networks.setdefault(arm, {})["infer_patterns_per_s"] = rate
        return solver_view.load(self.solver, networks)


def inference_rates(reconstructions: Sequence[str]) -> dict[str, float]:
    """Arm (file stem) -> patterns per second of its ``ptycho infer`` output."""
    from ptycho.artifacts import read_arrays

    rates = {}
    for path in reconstructions:
        rec = read_arrays(path, ("seconds", "patterns"), producer="infer")
        rates[Path(path).stem] = float(rec["patterns"] / rec["seconds"])
    return rates
