"""A training's record (``model.json``, written by ``ptycho train``) as types.

:class:`TrainingRecord` is the one reader of that file's keys on the study's side:
:class:`~ptycho.study.results.StudyResults` hands trainings on as these records, and the
checklist (convergence, time to quality, the bench's cross-check), the figures, the
report and the bench's ``--like`` read their fields. The defaults for older records are
decided here, once:

* no precision means float32 and pre-mode files' ``xla: true/false`` a mode
  (:meth:`~ptycho.study.arms.Arm.of_meta`);
* no ``status`` means FINISHED;
* no ``loss_bounds.floor`` (trained before floors were recorded, or without a validation
  split) means ``floor`` None;
* no ``initial_val_loss`` means None (the convergence item then reads the first epoch's
  training loss);
* no ``val_curve`` (trained before the validation loss was read within epochs) means an
  empty one (time to quality then reads the epochs' ends, :class:`~ptycho.study.time_to_quality.Run`).

The file itself stays what ``ptycho train`` writes; :attr:`TrainingRecord.meta` keeps it
whole for what needs all of it (the network's configs, :func:`ptycho.nets.train.configs_from_meta`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptycho.artifacts import stored_number as _number
from ptycho.study.arms import Arm
from ptycho.study.loss_curve import read_through

#: A training's status when it diverged or collapsed (``ptycho train`` writes it), and its
#: reason when the record names none.
FAILED, DIVERGED = "FAILED", "diverged"


@dataclass(frozen=True)
class Epoch:
    """One epoch's line of a training's history: its mean training loss and the
    validation loss at its end; ``raw`` is the line as stored (the report keeps the last
    one as the arm's ``final``)."""

    epoch: int
    train_loss: float
    val_loss: float
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, line: Epoch | Mapping[str, Any]) -> Epoch:
        if isinstance(line, Epoch):
            return line
        return cls(int(line.get("epoch", 0)), _number(line["train_loss"]), _number(line["val_loss"]), line)


@dataclass(frozen=True)
class TrainingRecord:
    """A trained arm as recorded: its epochs, validation curve, step times and status."""

    arm: Arm
    history: tuple[Epoch, ...]
    #: (global step, validation loss) wherever it was read: within epochs and at their ends
    val_curve: tuple[tuple[int, float], ...]
    step_times_s: tuple[float, ...]
    step_median_s: float | None
    compile_s: float | None
    #: the training's wall time (its epochs, validation included; a resumed one's before too)
    wall_s: float
    #: times the train step was traced (1 unless a shape changed; 0 in older records)
    train_traces: int
    #: the timing without the per-step list, as the report keeps it
    timing: Mapping[str, Any]
    seed: int
    batch_size: int
    planned_epochs: int
    n_train: int
    initial_val_loss: float | None
    #: a perfect reconstruction's loss on the validation split (``loss_bounds.floor``)
    floor: float | None
    status: str
    failure: str | None
    meta: Mapping[str, Any]

    @classmethod
    def of(cls, meta: TrainingRecord | Mapping[str, Any]) -> TrainingRecord:
        """The record of ``meta`` (a ``model.json``'s content); a record is returned as it is."""
        if isinstance(meta, TrainingRecord):
            return meta
        train = meta["train"]
        timing = meta.get("timing") or {}
        history = tuple(Epoch.of(h) for h in meta.get("history") or ())
        floor = (meta.get("loss_bounds") or {}).get("floor")
        initial = meta.get("initial_val_loss")
        median, compile_s = timing.get("step_median_s"), timing.get("compile_s")
        return cls(
            arm=Arm.of_meta(meta),
            history=history,
            val_curve=tuple((int(p["step"]), _number(p.get("val_loss"))) for p in meta.get("val_curve") or ()),
            step_times_s=tuple(float(t) for t in timing.get("step_times_s") or ()),
            step_median_s=float(median) if median else None,
            compile_s=float(compile_s) if compile_s is not None else None,
            wall_s=float(timing.get("train_wall_s") or 0.0),
            train_traces=int((meta.get("traces") or {}).get("train", 0)),
            timing={k: v for k, v in timing.items() if k != "step_times_s"},
            seed=int(train["seed"]),
            batch_size=int(train.get("batch_size", 1)),
            planned_epochs=int(train.get("epochs") or 0),
            n_train=int(meta.get("n_train", 0)),
            initial_val_loss=float(initial) if initial is not None else None,
            floor=float(floor) if floor is not None else None,
            status=str(meta.get("status", "FINISHED")),
            failure=meta.get("failure"),
            meta=meta,
        )

    @property
    def failed(self) -> bool:
        """The training diverged or collapsed (``status: FAILED``)."""
        return self.status == FAILED

    @property
    def failure_words(self) -> str:
        """Why it failed (``diverged`` when its record says nothing)."""
        return self.failure or DIVERGED

    @property
    def steps_per_epoch(self) -> int:
        """Steps per epoch, as the training split its epochs."""
        return max(1, self.n_train // self.batch_size)

    @property
    def final_val_loss(self) -> float | None:
        """The validation loss the training ended at, read through its last readings
        (:func:`ptycho.study.loss_curve.read_through` of ``val_curve``; the last epoch's as
        read when the record has no curve); None before the first epoch ended."""
        if not self.history:
            return None
        curve = [(float(t), v) for t, v in self.val_curve if math.isfinite(v)]
        return read_through(curve)[-1][1] if curve else self.history[-1].val_loss

    @property
    def final(self) -> Mapping[str, Any] | None:
        """The last epoch's line as stored, None before the first epoch ended."""
        return self.history[-1].raw if self.history else None
