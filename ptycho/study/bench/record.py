"""The benchmark's record as types: the one reader of ``bench.json``'s keys.

:func:`ptycho.study.bench.run` writes the record (its arms, contexts, the machine's peak
and :func:`~ptycho.study.bench.result.ratios`); everything that judges, tabulates or
words it reads it through :class:`BenchRecord`, so a key's name, its default for a record
from before a field existed (no precision: float32; no start-up overhead: the compile
time; no ``xla`` entry: a float32 arm's top-level ratios) and what JSON's ``null`` means
are decided here once. The record keeps the JSON it was read from (``raw``), which the
speed item's evidence embeds unchanged."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptycho.artifacts import stored_number
from ptycho.errors import PtychoError
from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.nets.xla import REFERENCE
from ptycho.study.arms import Arm
from ptycho.study.json_record import JsonRecord

#: The measurements a ratio entry may hold, in the record's order.
MEASUREMENTS = ("train_step_alone", "train_step_shared", "inference")
#: Each measurement in words, in that order (the report's index of ratios, the figures' labels).
MEASUREMENT_WORDS = dict(
    zip(MEASUREMENTS, ("train step alone", "train step, pipeline's schedule", "inference"), strict=True)
)


def _number(value: Any) -> float | None:
    """A number that may be missing (``None``); JSON's null stays ``None``."""
    return None if value is None else float(value)


def _break_even(d: Mapping, key: str) -> float | None:
    """A break-even step count: ``None`` when not recorded; JSON's null (how an infinite
    count is written) is ``inf``, never repaid."""
    if key not in d:
        return None
    return math.inf if d[key] is None else float(d[key])


@dataclass(frozen=True)
class Interval(JsonRecord):
    """A ratio of medians (the reference's time over the arm's: above 1 = faster) with its
    bootstrap interval (:func:`ptycho.study.stats.bootstrap_ratio`); NaN ends when fewer
    than 2 samples were timed on a side."""

    ratio: float
    low: float = math.nan
    high: float = math.nan
    level: float = 0.95
    resamples: int = 0

    @property
    def bounded(self) -> bool:
        """Both ends of the interval are finite."""
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Spread(JsonRecord):
    """Quartiles of timed samples (:func:`ptycho.study.stats.quartiles`), seconds."""

    median: float = math.nan
    q1: float = math.nan
    q3: float = math.nan
    iqr: float = math.nan
    n: int = 0


@dataclass(frozen=True)
class Load:
    """What other processes took while a context (or the peak) was timed (/proc/stat)."""

    foreign_cores: float
    of_cores: int | None
    contaminated: bool
    load_before: float | None = None
    load_after: float | None = None

    @classmethod
    def from_json(cls, d: Mapping | None) -> Load | None:
        if not d:
            return None
        return cls(
            stored_number(d.get("foreign_cores")),
            d.get("of_cores"),
            bool(d.get("contaminated")),
            _number(d.get("load_average_before")),
            _number(d.get("load_average_after")),
        )


@dataclass(frozen=True)
class Context:
    """How the arms were timed in one context: ``alone`` or ``shared`` (the pipeline's schedule)."""

    name: str
    jobs: int | None
    threads: int | None
    how: str
    load: Load | None = None
    trainings_at_once: int | None = None

    @classmethod
    def from_json(cls, name: str, d: Mapping) -> Context:
        return cls(
            name,
            d.get("jobs"),
            d.get("threads"),
            d.get("how", ""),
            Load.from_json(d.get("foreign_load")),
            d.get("trainings_at_once"),
        )


@dataclass(frozen=True)
class Peak:
    """The machine's matmul peak per dtype (:func:`ptycho.study.bench.roofline.peak_gflops`)."""

    gflops: Mapping[str, float]
    threads: int | None = None
    how: str | None = None
    load: Load | None = None

    @classmethod
    def from_json(cls, d: Mapping | None) -> Peak | None:
        if not d:
            return None
        return cls(dict(d.get("gflops", {})), d.get("threads"), d.get("how"), Load.from_json(d.get("foreign_load")))


@dataclass(frozen=True)
class Roofline(JsonRecord):
    """An arm's achieved GFLOP/s alone and its fraction of its compute dtype's peak."""

    gflops: float
    dtype: str
    peak_gflops: float = math.nan
    of_peak: float = math.nan


@dataclass(frozen=True)
class BatchTiming:
    """One batch size of the sweep (alone): the time per call's spread and its samples."""

    spread: Spread
    samples: tuple[float, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping) -> BatchTiming:
        return cls(Spread.from_json(d), tuple(d.get("samples_s", ())))


@dataclass(frozen=True)
class BenchArm:
    """One (model, mode, precision) arm as the benchmark timed it."""

    model: str
    mode: str
    precision: str
    compile_s: float
    startup_overhead_s: float  #: getting ready beyond steady steps (compile included)
    step: Spread  #: train step alone
    step_samples: tuple[float, ...]
    shared: Spread | None = None  #: train step in the pipeline's schedule
    shared_samples: tuple[float, ...] = ()
    infer_compile_s: float = math.nan
    infer_patterns_per_s: float = math.nan
    naive_patterns_per_s: float = math.nan
    infer_batch_samples: tuple[float, ...] = ()
    components: Mapping[str, float] = field(default_factory=dict)  #: part -> median seconds
    peak_rss_mb: float | None = None
    peak_above_baseline_mb: float | None = None
    xla_clusters: int | None = None
    flops_per_step: float | None = None
    roofline: Roofline | None = None
    batch_size: int | None = None
    #: the batch sweep: ``"train"``/``"infer"`` -> batch size -> timing
    batches: Mapping[str, Mapping[int, BatchTiming]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping) -> BenchArm:
        shared = d.get("shared") or {}
        flops = d.get("flops") or {}
        return cls(
            model=d["model"],
            mode=d["mode"],
            precision=d.get("precision", REFERENCE_PRECISION),
            compile_s=stored_number(d.get("compile_s")),
            startup_overhead_s=stored_number(d.get("startup_overhead_s", d.get("compile_s"))),
            step=Spread.from_json(d.get("step_s") or {}),
            step_samples=tuple(d.get("step_samples_s", ())),
            shared=Spread.from_json(shared["step_s"]) if "step_s" in shared else None,
            shared_samples=tuple(shared.get("step_samples_s", ())),
            infer_compile_s=stored_number(d.get("infer_compile_s")),
            infer_patterns_per_s=stored_number(d.get("infer_patterns_per_s")),
            naive_patterns_per_s=stored_number(d.get("naive_patterns_per_s")),
            infer_batch_samples=tuple(d.get("infer_batch_samples_s") or ()),
            components={k: stored_number(c.get("median")) for k, c in (d.get("components") or {}).items()},
            peak_rss_mb=_number(d.get("peak_rss_mb")),
            peak_above_baseline_mb=_number(d.get("peak_above_baseline_mb")),
            xla_clusters=d.get("xla_clusters"),
            flops_per_step=_number(flops.get("per_step")),
            roofline=Roofline.from_json(r) if (r := d.get("roofline")) else None,
            batch_size=d.get("batch_size"),
            batches={
                kind: {int(b): BatchTiming.from_json(rec) for b, rec in sizes.items()}
                for kind, sizes in (d.get("batches") or {}).items()
            },
        )

    @property
    def key(self) -> str:
        """The arm's key among its model's (:attr:`BenchRecord.ratios`): the mode at float32,
        as before the precision axis (``jit``), ``<mode>-<short>`` otherwise (``jit-bf16``)."""
        return self.arm.key("mode", "precision")

    @property
    def arm(self) -> Arm:
        """The arm (seed 0) this timing is of."""
        return Arm(self.model, self.mode, 0, self.precision)

    def spread(self, context: str) -> Spread | None:
        """The train step's spread in ``context`` (``alone`` or ``shared``)."""
        return self.step if context == "alone" else self.shared


@dataclass(frozen=True)
class ArmRatios:
    """One arm's speed against its references (:func:`~ptycho.study.bench.result.ratios`),
    each comparison holding the other axis fixed: ``xla`` vs ``off`` at the same precision
    (XLA's own effect), ``vs_float32`` vs float32 in the same mode (the precision's own),
    ``overall`` vs ``off`` at float32 (the configuration, both axes at once)."""

    mode: str
    precision: str
    overall: Mapping[str, Interval] = field(default_factory=dict)
    xla: Mapping[str, Interval] = field(default_factory=dict)
    xla_batches: Mapping[str, Mapping[str, Interval]] = field(default_factory=dict)
    vs_float32: Mapping[str, Interval] = field(default_factory=dict)
    compile_extra_s: float | None = None
    #: steps to repay the extra compile time: ``inf`` never (JSON's null), ``None`` not recorded
    break_even_steps: float | None = None
    break_even_steps_shared: float | None = None
    padded_vs_naive: float | None = None

    @classmethod
    def from_json(cls, d: Mapping, key: str) -> ArmRatios:
        """An entry keyed ``key`` (for a record from before the precision axis, its mode).
        A record from before the ``xla`` entry holds a float32 XLA mode's ratios vs
        ``off`` at the top level only: they are XLA's own effect too when the entry names
        its mode."""
        mode, precision = d.get("mode", key), d.get("precision", REFERENCE_PRECISION)
        overall = {k: Interval.from_json(d[k]) for k in MEASUREMENTS if k in d}
        if "xla" in d:
            xla = {k: Interval.from_json(v) for k, v in d["xla"].items()}
        elif d.get("mode", REFERENCE) != REFERENCE and precision == REFERENCE_PRECISION:
            # a recorded mode's top-level ratios; an entry without its mode (the oldest
            # records) is never credited to XLA
            xla = overall
        else:
            xla = {}
        return cls(
            mode,
            precision,
            overall,
            xla,
            {
                kind: {b: Interval.from_json(v) for b, v in sizes.items()}
                for kind, sizes in (d.get("xla_batches") or {}).items()
            },
            {k: Interval.from_json(v) for k, v in (d.get("vs_float32") or {}).items()},
            _number(d.get("compile_extra_s")),
            _break_even(d, "break_even_steps"),
            _break_even(d, "break_even_steps_shared"),
            _number(d.get("padded_vs_naive")),
        )

    @property
    def label(self) -> str:
        """The arm in words: ``jit`` at float32, ``jit at bf16`` otherwise."""
        from ptycho.nets.precision import short

        if self.precision == REFERENCE_PRECISION:
            return self.mode
        return f"{self.mode} at {short(self.precision)}"


@dataclass(frozen=True)
class BenchRecord:
    """A benchmark's record: the machine, its contexts and peak, every arm and their ratios.
    Parts a record lacks are empty (no contexts, no peak: ``None``)."""

    raw: Mapping[str, Any] = field(repr=False, compare=False)
    machine: Mapping[str, Any]
    modes: tuple[str, ...]
    precisions: tuple[str, ...]
    contexts: Mapping[str, Context]
    peak: Peak | None
    arms: tuple[BenchArm, ...]
    #: model -> arm key -> its ratios
    ratios: Mapping[str, Mapping[str, ArmRatios]]

    @classmethod
    def from_json(cls, d: Mapping[str, Any], source: str = "benchmark record") -> BenchRecord:
        """Read a record as written (``bench.json``), or any part of one; a broken record
        is refused in one line naming ``source``."""
        try:
            return cls(
                raw=d,
                machine=d.get("machine") or {},
                modes=tuple(d.get("modes", ())),
                precisions=tuple(d.get("precisions", ())),
                contexts={k: Context.from_json(k, c) for k, c in (d.get("contexts") or {}).items()},
                peak=Peak.from_json(d.get("peak")),
                arms=tuple(BenchArm.from_json(a) for a in d.get("arms", ())),
                ratios={
                    model: {key: ArmRatios.from_json(r, key) for key, r in per.items()}
                    for model, per in (d.get("ratios") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PtychoError(
                f"{source}: not a benchmark record ({type(exc).__name__}: {exc}); pass the JSON written by "
                "'ptycho bench --out'"
            ) from None

    @classmethod
    def of(cls, bench: BenchRecord | Mapping[str, Any]) -> BenchRecord:
        """``bench`` as a record: itself, or read from its JSON."""
        return bench if isinstance(bench, BenchRecord) else cls.from_json(bench)

    def to_json(self) -> Mapping[str, Any]:
        """The JSON the record was read from, unchanged."""
        return self.raw

    def entry(self, model: str, key: str) -> ArmRatios | None:
        """``model``'s arm ``key``'s ratios, ``None`` when not recorded."""
        return self.ratios.get(model, {}).get(key)

    def arms_of(self, model: str) -> list[BenchArm]:
        return [a for a in self.arms if a.model == model]

    def steps(self, model: str, context: str) -> int:
        """The fewest timed steps of ``model``'s arms in ``context``: what an interval rests on."""
        counts = [(s.n if (s := a.spread(context)) else 0) for a in self.arms_of(model)]
        return min(counts, default=0)

    def load(self, context: str) -> Load | None:
        """What other processes took while ``context`` was timed; ``None`` unrecorded."""
        c = self.contexts.get(context)
        return c.load if c else None

    def contaminated(self, context: str) -> bool:
        found = self.load(context)
        return bool(found and found.contaminated)
