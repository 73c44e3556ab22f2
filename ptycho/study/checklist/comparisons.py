"""What the measuring items (accuracy, gradients) compare across the study's two axes,
and the limit each comparison is judged against.

Each XLA mode is compared with ``off`` at the same precision, and each reduced precision
with float32 in the same mode. A comparison at float32 is judged against the item's
threshold (float32 round-off); one at a reduced precision against a number of that
precision's unit round-offs (:data:`ptycho.nets.precision.EPSILON`), the item's second
threshold (docs/physics.md sections 7 and 9). Two thresholds, one verdict: an item's value
is its worst difference over its limit, judged against 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from ptycho.nets.precision import EPSILON, PRECISIONS, REFERENCE_PRECISION, SHORT
from ptycho.nets.xla import REFERENCE

#: The judged value's limit: every difference is divided by its own limit first.
RATIO_LIMIT = 1.0


class Comparison(NamedTuple):
    """``(mode, precision)`` against ``(reference_mode, reference_precision)``: the same
    precision with ``off``, or the same mode with float32."""

    mode: str
    precision: str
    reference_mode: str
    reference_precision: str

    @property
    def arm(self) -> tuple[str, str]:
        return self.mode, self.precision

    @property
    def reference(self) -> tuple[str, str]:
        return self.reference_mode, self.reference_precision

    @property
    def across_precisions(self) -> bool:
        return self.precision != self.reference_precision

    @property
    def key(self) -> str:
        """The evidence's key, in the words of the arms' pair keys: ``jit`` and ``jit-bf16``
        (vs off at the same precision), ``jit-bf16-vs-fp32`` (vs float32 in the same mode)."""
        words = [self.mode] + ([SHORT[self.precision]] if self.precision != REFERENCE_PRECISION else [])
        if self.across_precisions:
            words += ["vs", SHORT[self.reference_precision]]
        return "-".join(words)

    @property
    def label(self) -> str:
        """``"jit vs off, fp32"`` or ``"bf16 vs fp32, jit"``, for tables and summaries."""
        if self.across_precisions:
            return f"{SHORT[self.precision]} vs {SHORT[self.reference_precision]}, {self.mode}"
        return f"{self.mode} vs {self.reference_mode}, {SHORT[self.precision]}"


def ordered(precisions: Iterable[str]) -> list[str]:
    """float32 (always: every other precision is judged against it), then the others, in
    the package's order."""
    given = {REFERENCE_PRECISION, *precisions}
    return [p for p in PRECISIONS if p in given]


def comparisons(modes: Iterable[str], precisions: Iterable[str]) -> list[Comparison]:
    """Every mode of ``modes`` (not ``off``) vs ``off`` at each precision, then each
    reduced precision vs float32 in every mode, ``off`` included."""
    modes = [m for m in modes if m != REFERENCE]
    ps = ordered(precisions)
    same = [Comparison(m, p, REFERENCE, p) for p in ps for m in modes]
    across = [Comparison(m, p, m, REFERENCE_PRECISION) for p in ps[1:] for m in [REFERENCE, *modes]]
    return same + across


def path_roundings(depth: int | None = None, mixing: int | None = None) -> int:
    """R, the roundings on the network's longest path, input to output, at a reduced
    precision: 2 per convolution or dense layer (4 per encoder level, 1 per mixing layer),
    1 per pooling, residual add, input cast and recast, so ``10 depth + 3 mixing`` (23 at
    the default depth 2, mixing 1; docs/physics.md section 9). Default: the package's default
    model (:class:`~ptycho.nets.models.ModelConfig`), the one the roundoff thresholds were
    sized for."""
    from ptycho.nets.models import ModelConfig

    model = ModelConfig()
    depth = model.depth if depth is None else depth
    mixing = model.mixing if mixing is None else mixing
    return 10 * depth + 3 * mixing


def emulated(precisions: Iterable[str]) -> list[str]:
    """The reduced precisions of ``precisions`` that this machine (:func:`ptycho.study.bench.machine.hardware`)
    does not compute natively: its kernels accumulate partly in the reduced type (bf16 on an
    AVX2-only CPU, fp16 on a CPU without AVX512-FP16), so their roundings need not be
    independent (docs/physics.md section 9)."""
    from ptycho.nets.precision import is_native
    from ptycho.study.bench.machine import hardware

    hw = hardware()
    return [p for p in ordered(precisions) if p != REFERENCE_PRECISION and not is_native(p, hw)]


def limits(precisions: Iterable[str], threshold: float, roundoffs: float, aligned: float = 0.0) -> dict[str, float]:
    """Each precision's limit: the item's ``threshold`` at float32, ``roundoffs`` unit
    round-offs at a reduced precision, and at least ``aligned`` of them (the bound where
    every rounding errs the same way: R for outputs, 2R for gradients, :func:`path_roundings`)
    at one this machine only emulates (:func:`emulated`), whose kernels accumulate in it."""
    raised = emulated(precisions) if aligned else []
    return {
        p: threshold
        if p == REFERENCE_PRECISION
        else (max(roundoffs, aligned) if p in raised else roundoffs) * EPSILON[p]
        for p in ordered(precisions)
    }


def roundoffs(given: float | None, key: str) -> float:
    """The reduced-precision limit in unit round-offs: ``given`` (``check
    --precision-threshold``, the workflow's ``thresholds.<key>``), or the schema's default of ``key``."""
    from ptycho.config import spec

    return float(spec(f"thresholds.{key}")["default"]) if given is None else float(given)


class Compared(Protocol):
    """An evidence entry of one comparison (:mod:`ptycho.study.checklist.differences`)."""

    precision: str
    across_precisions: bool


def group(record: Compared) -> str:
    """A comparison's kind over its modes, as summaries name it: ``modes vs off at bf16``
    or ``bf16 vs fp32``."""
    short = SHORT[record.precision]
    if record.across_precisions:
        return f"{short} vs {SHORT[REFERENCE_PRECISION]}"
    return f"modes vs off at {short}"


def worst_by_group(records: Iterable[Compared], field: str) -> str:
    """``"modes vs off at fp32 worst 9.4e-07, bf16 vs fp32 worst 1.4e-02"``: the largest
    ``field`` of the evidence entries of each :func:`group`, for a summary."""
    worst: dict[str, float] = {}
    for record in records:
        kind = group(record)
        worst[kind] = max(worst.get(kind, 0.0), getattr(record, field))
    return ", ".join(f"{kind} worst {value:.1e}" for kind, value in worst.items())


def limits_text(limit_of: Mapping[str, float], roundoff_count: float) -> str:
    """``"fp32 1e-05; bf16 0.0625 (16 u)"``: the limits a summary states; a limit that
    :func:`limits` raised above ``roundoff_count`` (the aligned bound of an emulated
    precision) says so: ``"fp16 0.0112 (23 u, emulated here: aligned bound)"``."""

    def count(p: str, limit: float) -> str:
        n = limit / EPSILON[p]
        return f" ({n:.3g} u, emulated here: aligned bound)" if n > roundoff_count else f" ({n:.3g} u)"

    return "; ".join(
        f"{SHORT[p]} {limit:.3g}" + ("" if p == REFERENCE_PRECISION else count(p, limit))
        for p, limit in limit_of.items()
    )
