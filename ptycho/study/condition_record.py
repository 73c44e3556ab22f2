"""The ``condition`` job's record (``<condition>/check.json``, :func:`ptycho.study.conditions.check`):
its keys known here alone, for the job that writes it and the results reader that reads it
back. Imports nothing of the checklist but its result record (whose package imports the
results reader, which therefore imports this module where it reads a condition, not at
its top), so that the judging code stays out of the reader's imports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.study.checklist.result import ItemResult
from ptycho.study.json_record import read_fields, write_fields

#: The checks a condition repeats, as the checklist names them.
CHECKS = ("accuracy", "gradients")


@dataclass(frozen=True)
class ConditionCheck:
    """The ``condition`` job's record (``<condition>/check.json``): the cheap checks at one
    condition, each judged as its checklist item is, and the trained networks' scores on
    the condition's test split; its keys are its fields (:mod:`ptycho.study.json_record`)."""

    condition: str
    nphotons: float
    stride_test: int
    loss: str
    dataset_digest: str = ""
    patterns: int = 0
    checks: Mapping[str, ItemResult] = field(kw_only=True)  #: by :data:`CHECKS`
    #: arm -> mean scores over the test objects
    models: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """PASS when every check passed, else FAIL."""
        return "PASS" if all(r.status == "PASS" for r in self.checks.values()) else "FAIL"

    def metrics(self) -> dict[str, float]:
        """The job's MLflow metrics: each check's value and pass, each arm's SSIMs."""
        out = {f"{c}_value": r.value for c, r in self.checks.items()}
        out.update({f"{c}_pass": float(r.status == "PASS") for c, r in self.checks.items()})
        for arm, scores in self.models.items():
            out.update({f"{arm}.amp_ssim": scores["amp_ssim"], f"{arm}.phase_ssim": scores["phase_ssim"]})
        return out

    def words(self) -> str:
        """``dense-1e4-poisson: accuracy PASS, gradients PASS; amplitude/phase SSIM pinn-off-s0 0.812/0.901``."""
        checks = ", ".join(f"{c} {r.status}" for c, r in self.checks.items())
        scored = ", ".join(f"{arm} {s['amp_ssim']:.3f}/{s['phase_ssim']:.3f}" for arm, s in self.models.items())
        return f"{self.condition}: {checks}; amplitude/phase SSIM {scored}"

    def to_json(self) -> dict[str, Any]:
        """Its fields, each check under its own name."""
        out = write_fields(self, skip=("checks",))
        models = out.pop("models")
        return {**out, **{c: r.to_json() for c, r in self.checks.items()}, "models": models}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConditionCheck:
        return cls(**read_fields(cls, d, skip=("checks",)), checks={c: ItemResult.from_json(d[c]) for c in CHECKS})
