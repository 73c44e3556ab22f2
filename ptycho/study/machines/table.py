"""One :class:`Report` per run read, the judgement (:func:`rows`, :func:`recommend`) and
the views (:func:`markdown`, :func:`record`, :func:`write`). The rules are docs/machines.md's:
one axis at a time, an upper bound is no measurement, and a setting is recommended among
what was trained, over ``off`` or float32 only where the measurement resolved it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ptycho.errors import ConfigError, PtychoError
from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import PRECISIONS, REFERENCE_PRECISION, short
from ptycho.nets.xla import REFERENCE
from ptycho.study import ttq_comparison as ttc
from ptycho.study.arms import Arm, pairs
from ptycho.study.bench.machine import cpu_words
from ptycho.study.report import REPORT_SCHEMA_VERSION
from ptycho.study.stats import SeedComparison

NOT_SHOWN = "XLA not shown faster here"


def _number(value: Any) -> float:
    """A field as a float (NaN when absent: JSON stores NaN as null)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def _count(value: Any) -> int | None:
    return int(value) if math.isfinite(_number(value)) else None


@dataclass(frozen=True)
class Kind:
    """A machine kind: the CPU (its model name, with its x86 family and model numbers where
    recorded: :func:`~ptycho.study.bench.machine.cpu_words`), its dtype flags, the cores and
    the GPUs (not the load average nor the library versions of the report's ``machine``
    record)."""

    cpu: str
    cpu_flags: tuple[str, ...]
    cores: int | None
    gpus: int | None
    cpu_id: str | None = None

    @classmethod
    def of(cls, m: Mapping[str, Any]) -> Kind:
        flags = tuple(str(f) for f in m.get("cpu_flags") or ())
        cpu, cpu_id = str(m.get("cpu") or "CPU not recorded"), m.get("cpu_id") or None
        return cls(cpu, flags, _count(m.get("cores")), _count(m.get("gpus")), cpu_id)

    def words(self) -> str:
        """``AMD EPYC family 26 model 2 (avx2, avx512_bf16), 2 cores, no GPU``."""
        flags = f"({', '.join(self.cpu_flags)})" if self.cpu_flags else "(no dtype flags)"
        cores = "cores n/a" if self.cores is None else f"{self.cores} cores"
        gpus = "GPU n/a" if self.gpus is None else f"{self.gpus} GPU" if self.gpus else "no GPU"
        return f"{cpu_words({'cpu': self.cpu, 'cpu_id': self.cpu_id})} {flags}, {cores}, {gpus}"


@dataclass(frozen=True)
class Comparison:
    """One comparison of the PINN along one axis (:class:`ptycho.study.arms.Pair`): the
    speedup item's time-to-quality record (:class:`ptycho.study.ttq_comparison.Comparison`,
    None when the item has none) and the quality item's SSIM outcomes ('' when the quality
    item has none)."""

    mode: str
    precision: str
    reference_mode: str
    reference_precision: str
    speed: ttc.Comparison | None = None
    amp_ssim: str = ""
    phase_ssim: str = ""

    @property
    def axis(self) -> str:
        return "mode" if self.mode != self.reference_mode else "precision"

    @property
    def measured(self) -> bool:
        return self.speed is not None and self.speed.measured

    @property
    def low(self) -> float:
        return self.speed.low if self.speed else math.nan

    @property
    def resolved_faster(self) -> bool:
        """A measured ratio, not an upper bound nor INCONCLUSIVE, whose interval's lower end is above 1."""
        return self.measured and not self.speed.upper_bound and not self.speed.inconclusive and self.low > 1.0

    @property
    def acceptable(self) -> bool:
        """Faster with confidence and not made worse (its quality is neither DIFFERENT nor WORSE)."""
        return self.resolved_faster and not {"DIFFERENT", "WORSE"} & {self.amp_ssim, self.phase_ssim}

    @property
    def outcome(self) -> str:
        """The report's words (:attr:`ptycho.study.ttq_comparison.Comparison.outcome`), first clause."""
        return self.speed.outcome.split(" (")[0] if self.measured else "not measured"

    def label(self) -> str:
        """``jit`` on the mode axis, ``bf16 vs fp32 (off)`` on the precision axis."""
        vs = f"{short(self.precision)} vs {short(self.reference_precision)} ({self.mode})"
        return self.mode if self.axis == "mode" else vs

    def value_words(self) -> str:
        """``1.21x (1.11-1.35)``; an upper bound ``<= 0.80x (upper bound)``."""
        return self.speed.value_words() if self.speed else "n/a"

    def words(self) -> str:
        """``jit 1.09x (0.99-1.25): not resolved``; ``jit: not measured``."""
        if not self.measured:
            return f"{self.label()}: not measured"
        return f"{self.label()} {self.value_words()}: {self.outcome}"

    def as_dict(self) -> dict:
        speed = self.speed or ttc.Comparison(math.nan, inconclusive=False)
        return {
            "mode": self.mode,
            "precision": self.precision,
            "reference_mode": self.reference_mode,
            "reference_precision": self.reference_precision,
            "ratio": speed.ratio,
            "low": speed.low,
            "high": speed.high,
            "upper_bound": speed.upper_bound,
            "inconclusive": speed.inconclusive,
            "amp_ssim": self.amp_ssim,
            "phase_ssim": self.phase_ssim,
            "axis": self.axis,
            "outcome": self.outcome,
            "resolved_faster": self.resolved_faster,
            "words": self.words(),
        }


def _comparison(pair, speed: ttc.Comparison | None, quality: Mapping[str, SeedComparison]) -> Comparison:
    """The comparison of ``pair`` from the two items' records under its key. A ratio whose
    record names other arms than its key is left out (never shown under another name); one
    that names none (a record from before they were written) is the key's."""
    names = (pair.arm.mode, pair.arm.precision, pair.reference.mode, pair.reference.precision)
    keys = ("mode", "precision", "reference_mode", "reference_precision")
    if speed is not None and tuple(getattr(speed, k) or n for k, n in zip(keys, names, strict=True)) == names:
        speed = dataclasses.replace(speed, **dict(zip(keys, names, strict=True)))
    else:
        speed = None
    outcomes = {k: quality[k].outcome if k in quality else "n/a" for k in ("amp_ssim", "phase_ssim")} if quality else {}
    return Comparison(*names, speed=speed, **outcomes)


@dataclass(frozen=True)
class Report:
    """One finished run of the study as this command needs it."""

    source: str  #: the source as given (a folder, a file, a tracking URI)
    path: str  #: the report read: its file, or ``<uri> run <id>``
    generated_utc: str
    config_hash: str
    preset: str
    run_id: str  #: the MLflow parent run ('' when the report names none)
    verdict: str
    statuses: tuple[tuple[str, str], ...]  #: (item, status) in the report's order
    kind: Kind
    train_threads: int | None
    batch_size: int | None
    precisions: tuple[str, ...]  #: the PINN's trained precisions, in the package's order
    comparisons: tuple[Comparison, ...]  #: the PINN's, both axes
    #: what makes two runs one study: the question, the preset, the models, ``simulation`` (or
    #: ``data``) and ``thresholds``, and each model's ``model`` and ``train`` as it sees them;
    #: not what a machine chooses for itself (precisions, modes, seeds, bench, threads, solver...)
    study: Mapping[str, Any]

    @property
    def label(self) -> str:
        """The source in a table cell: a store with its parent run."""
        return f"{self.source} (run {self.run_id[:12]})" if "://" in self.source else self.source

    def verdict_words(self) -> str:
        """``FAIL (speedup FAIL, quality INCONCLUSIVE)``."""
        others = [f"{item} {status}" for item, status in self.statuses if status != "PASS"]
        return f"{self.verdict} ({', '.join(others)})" if others else self.verdict

    def head(self) -> dict:
        return {
            "source": self.source,
            "report": self.path,
            "generated_utc": self.generated_utc,
            "config_hash": self.config_hash,
            "preset": self.preset,
            "mlflow_run_id": self.run_id,
            "machine_kind": self.kind.words(),
            "machine": asdict(self.kind),
        }


def report_of(record: Any, source: str, path: str) -> Report:
    """The :class:`Report` of a ``validation.json`` record; one line (exit 1) if it is not
    a finished report of this schema version, however it is broken."""
    try:
        return _report_of(record, source, path)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        why = f"no {exc.args[0]}" if isinstance(exc, KeyError) else " ".join(f"{type(exc).__name__}: {exc}".split())
        raise PtychoError(
            f"{path}: not a validation report of this ptycho ({why[:200]}); name a report's validation.json, "
            "or make it again with this ptycho (make all)"
        ) from None


def _report_of(record: Mapping, source: str, path: str) -> Report:
    from ptycho.study.report.record import StudyReport
    from ptycho.study.workflow import section_for

    version = record["schema_version"]
    if version != REPORT_SCHEMA_VERSION:
        raise PtychoError(
            f"{path}: a validation report of schema version {version}, this ptycho reads version "
            f"{REPORT_SCHEMA_VERSION}; make the report again with this ptycho (make all)"
        )
    report = StudyReport.from_json(record)
    cfg, provenance = report.config, report.provenance
    speed, quality = report.time_to_quality, report.seed_comparisons("quality")
    arms = set()
    for name in report.arms:
        try:
            arms.add(Arm.parse(name)._replace(seed=0))
        except ValueError:  # a mode or precision this ptycho does not know: no comparison here
            continue
    trained = [a for a in arms if a.model == SUBJECT]
    found = (_comparison(p, speed.get(p.group), quality.get(p.group, {})) for p in pairs(trained))
    comparisons = tuple(c for c in found if c.measured or c.amp_ssim)  # one of the items compared the pair
    models = sorted(cfg.get("models") or ())
    study = {"question": report.question, "preset": cfg.get("preset"), "models": models}
    study.update({s: cfg.get(s) for s in ("simulation", "data", "thresholds")})
    study.update({s: {m: section_for(cfg, s, m) for m in models} for s in ("model", "train")})
    return Report(
        source=source,
        path=path,
        generated_utc=report.generated_utc or "",
        config_hash=provenance.config_hash,
        preset=provenance.preset or str(cfg.get("preset") or ""),
        run_id=provenance.mlflow_run_id,
        verdict=report.verdict or "?",
        statuses=tuple((k, item.status or "?") for k, item in report.items.items()),
        kind=Kind.of(report.machine or report.speed.machine or {}),
        train_threads=_count(cfg.get("train_threads")),
        batch_size=_count(section_for(cfg, "train", SUBJECT).get("batch_size")),
        precisions=tuple(p for p in PRECISIONS if p in {a.precision for a in trained}),
        comparisons=comparisons,
        study=study,
    )


def check_one_study(reports: Sequence[Report]) -> None:
    """Refuse reports of different studies (:attr:`Report.study`) in one line naming two
    of them and the first key they differ in."""
    from ptycho.tracking.store import flatten_params

    for first, other in zip(reports, reports[1:], strict=False):
        mine, theirs = flatten_params(first.study), flatten_params(other.study)
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if differ:
            key, parts = differ[0], differ[0].split(".")
            per_model = parts[0] in ("model", "train") and len(parts) > 2  # train.pinn.epochs: train.epochs of pinn
            words = f"{parts[0]}.{'.'.join(parts[2:])} of {parts[1]}" if per_model else key
            hint = ": choose one with --preset" if first.preset != other.preset else ""
            raise ConfigError(
                f"{first.path} and {other.path} are runs of different studies ({words} = {mine.get(key)} vs "
                f"{theirs.get(key)}); set side by side the runs of one study (the same preset, simulation or data, "
                f"models, network, training and thresholds; precisions, bench and threads may differ){hint}"
            )


# --------------------------------------------------------------------- judgement
@dataclass(frozen=True)
class Row:
    """One row of the table: one run (one machine kind) at one precision."""

    report: Report
    precision: str
    xla: tuple[Comparison, ...]  #: each trained XLA mode vs off at this precision
    precision_effect: tuple[Comparison, ...]  #: this precision vs float32, per mode (none at float32)
    choice: str  #: the mode recommended at this precision
    choice_words: str


def _best(comparisons: Iterable[Comparison]) -> Comparison | None:
    """The acceptable comparison with the highest lower end, if any."""
    return max((c for c in comparisons if c.acceptable), key=lambda c: c.low, default=None)


def mode_choice(report: Report, precision: str) -> tuple[str, str]:
    """The XLA mode recommended at ``precision`` (over ``off`` at the same precision), and why."""
    here = [c for c in report.comparisons if c.axis == "mode" and c.precision == precision]
    if not here:
        return REFERENCE, f"{NOT_SHOWN} (no XLA mode trained at {short(precision)})"
    best = _best(here)
    if best is not None:
        return best.mode, f"{best.mode} faster than {REFERENCE} at {short(precision)}: {best.value_words()}"
    worse = [c.mode for c in here if c.resolved_faster]
    return REFERENCE, f"{NOT_SHOWN} ({worse[0]} faster but its quality DIFFERENT or WORSE)" if worse else NOT_SHOWN


def recommend(report: Report) -> dict:
    """The setting for this run's machine kind, among what it trained, one axis at a time:
    the precision (with one trained, that one; with several, a reduced one over float32
    only when its own effect with ``off`` is resolved faster, see :class:`Comparison`),
    then the XLA mode at that precision (:func:`mode_choice`). ``resolved``: the mode or
    the precision was chosen by a resolved measurement."""
    effects = [c for c in report.comparisons if c.axis == "precision" and c.mode == REFERENCE]
    best = _best(effects)
    if best is not None:
        precision = best.precision
        why = f"{short(precision)} faster than fp32 with {REFERENCE} (its own effect): {best.value_words()}"
    elif len(report.precisions) == 1:
        precision, why = report.precisions[0], f"{short(report.precisions[0])}: the only precision trained"
    else:
        precision, shown = REFERENCE_PRECISION, ", ".join(sorted({short(c.precision) for c in effects}))
        why = f"{shown} not shown faster than fp32 here" if shown else ""
    mode, mode_why = mode_choice(report, precision)
    return {
        "mode": mode,
        "precision": precision,
        "train_threads": report.train_threads,
        "batch_size": report.batch_size,
        "resolved": mode != REFERENCE or best is not None,
        "why": "; ".join(w for w in (mode_why, why) if w),
    }


def rows(reports: Sequence[Report]) -> list[Row]:
    """One row per run and PINN precision, in the reports' order, then the package's."""
    out = []
    for r in reports:
        for p in r.precisions:
            at = [c for c in r.comparisons if c.precision == p]
            xla = tuple(c for c in at if c.axis == "mode")
            out.append(Row(r, p, xla, tuple(c for c in at if c.axis == "precision"), *mode_choice(r, p)))
    return out


# --------------------------------------------------------------------- views
_NOTE = (
    "XLA's ratio: the PINN's time to its quality target, each mode vs off AT THE SAME precision (above 1 = "
    "sooner; 95 % interval). A precision's effect: that precision vs fp32 in the same mode, never XLA's. "
    "'<= x (upper bound)': no seed of the mode reached the target, so the ratio is a bound, not a measurement. "
    "A setting is recommended among those trained, a mode or precision over off or fp32 only when the lower end "
    "of its interval is above 1 and its quality is neither DIFFERENT nor WORSE."
)
_HEAD = ("machine kind", "source", "date (UTC)", "preset", "config")
ROW_COLUMNS = (
    *_HEAD,
    "precision",
    "XLA vs off (time to quality)",
    "precision vs fp32 (its own effect)",
    "quality (SSIM vs reference)",
    "verdict",
    "XLA at this precision",
)
SETTING_COLUMNS = (*_HEAD, "mode", "precision", "train_threads", "batch size", "why")


def _head_cells(r: Report) -> list[str]:
    return [r.kind.words(), r.label, r.generated_utc, r.preset, r.config_hash]


def _row_cells(row: Row) -> list[str]:
    fp32 = "reference" if row.precision == REFERENCE_PRECISION else "not compared with fp32"
    quality = [
        f"{c.label()}: amp {c.amp_ssim}, phase {c.phase_ssim}" for c in row.xla + row.precision_effect if c.amp_ssim
    ]
    return [
        *_head_cells(row.report),
        short(row.precision),
        "; ".join(c.words() for c in row.xla) or "no XLA mode trained",
        "; ".join(c.words() for c in row.precision_effect) or fp32,
        "; ".join(quality) or "no comparison",
        row.report.verdict_words(),
        row.choice_words if row.choice != REFERENCE else f"{REFERENCE}: {row.choice_words}",
    ]


def _setting_cells(r: Report) -> list[str]:
    rec = recommend(r)
    counts = ["n/a" if rec[k] is None else str(rec[k]) for k in ("train_threads", "batch_size")]
    return [*_head_cells(r), rec["mode"], rec["precision"], *counts, rec["why"]]


def _table(columns: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    def cell(text: str) -> str:  # no pipe or line break breaks the row
        return " ".join(str(text).split()).replace("|", "\\|")

    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + [
        "| " + " | ".join(map(cell, cells)) + " |" for cells in body
    ]


def markdown(reports: Sequence[Report]) -> str:
    """The per-precision table, then the recommended setting per run."""
    kinds, presets = len({r.kind for r in reports}), ", ".join(sorted({r.preset for r in reports}))
    lines = [
        "# The answer per machine kind",
        "",
        f"{len(reports)} run(s) of the study (preset {presets}) on {kinds} machine kind(s). {_NOTE}",
        "",
        *_table(ROW_COLUMNS, map(_row_cells, rows(reports))),
        "",
        "## Recommended setting per machine kind (only where the measurement resolved it)",
        "",
        *_table(SETTING_COLUMNS, map(_setting_cells, reports)),
    ]
    return "\n".join(lines) + "\n"


def record(reports: Sequence[Report]) -> dict:
    """The same as JSON: every row and every recommendation, each naming its run."""
    return {
        "question": reports[0].study.get("question") if reports else None,
        "note": _NOTE,
        "rows": [
            {
                **row.report.head(),
                "precision": row.precision,
                "xla": [c.as_dict() for c in row.xla],
                "precision_effect": [c.as_dict() for c in row.precision_effect],
                "verdict": row.report.verdict,
                "items": dict(row.report.statuses),
                "recommended_mode": row.choice,
                "recommended_mode_why": row.choice_words,
            }
            for row in rows(reports)
        ],
        "recommendations": [{**r.head(), **recommend(r)} for r in reports],
    }


def write(reports: Sequence[Report], out: str | None = None, json_out: str | None = None) -> str:
    """The Markdown table, also written to ``out``, and the JSON record to ``json_out``
    (each atomically: :func:`ptycho.artifacts.atomic_write`); returns the table."""
    from pathlib import Path

    from ptycho.artifacts import atomic_write, write_json

    text = markdown(reports)
    if json_out:
        write_json(json_out, record(reports))
    if out:
        atomic_write(out, lambda tmp: Path(tmp).write_text(text))
    return text
