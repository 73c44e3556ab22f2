"""The report's record, ``validation.json``: :func:`build` assembles it from the
checklist's records, the arms, the solver's and the conditions' entries and the run's
cost (:func:`pipeline_cost`, from the jobs' Snakemake benchmark files); its format is one
number (:data:`REPORT_SCHEMA_VERSION`). The JSON is the contract (docs/report.md): an
overall ``verdict`` and ``items.{accuracy, gradients, convergence, quality, speedup}``,
each with ``status``, ``value``, ``threshold`` and ``evidence``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ptycho.artifacts import FORMATS
from ptycho.study import checklist, conditions_view
from ptycho.study.checklist.result import ItemResult

#: The report's format: one number, its producer's (:data:`ptycho.artifacts.FORMATS`), in
#: the record as ``schema_version`` (2: XLA modes replace the boolean arms).
REPORT_SCHEMA_VERSION = FORMATS["report"]


def build(
    items: Mapping[str, ItemResult],
    arms: Mapping[str, dict],
    config: Mapping,
    machine: Mapping | None = None,
    figures: tuple[str, ...] = (),
    cost: Mapping | None = None,
    provenance: Mapping | None = None,
    solver: Mapping | None = None,
    conditions: Sequence[Mapping] = (),
    probe: Mapping | None = None,
) -> dict:
    """Assemble the report record. ``arms`` maps arm name -> {metrics, timing, ...};
    ``cost`` is :func:`pipeline_cost` of the run's job benchmarks; ``provenance`` says
    which run this is (config hash, git commit, MLflow parent run; the preset is added
    from ``config``), shown in the views' first lines; ``solver`` is
    :func:`ptycho.study.solver_view.summarise` of the conventional solver's records;
    ``conditions`` the rows of :func:`ptycho.study.conditions_view.rows` (a condition's
    accuracy or gradients FAIL fails the verdict); ``probe`` the summary of measured
    data's probe refinement (:func:`ptycho.study.probe.summary`)."""
    names = checklist.names()
    missing = [name for name in names if name not in items]
    if missing:
        raise ValueError(f"checklist items missing from the report: {', '.join(missing)}")
    failed = {name: arm.get("failure") or "diverged" for name, arm in arms.items() if arm.get("status") == "FAILED"}
    statuses = {items[name].status for name in names}
    statuses |= {row[c]["status"] for row in conditions for c in conditions_view.CHECKS}
    # PASS only when every item passes; INCONCLUSIVE (too few seeds to say) is not a PASS.
    verdict = (
        "FAIL" if failed or statuses - {"PASS", "INCONCLUSIVE"} else max(statuses, key=("PASS", "INCONCLUSIVE").index)
    )
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "question": "Does XLA make physics-informed ptychographic reconstruction faster without making it worse?",
        "verdict": verdict,
        "items": {name: items[name].to_json() for name in names},
        "arms": dict(arms),
        "failed_arms": failed,
        "machine": dict(machine or {}),
        "figures": list(figures),
        "cost": dict(cost or {}),
        "config": {k: v for k, v in config.items() if k != "presets"},
        "provenance": {"preset": config.get("preset", ""), **dict(provenance or {})},
        **({"solver": dict(solver)} if solver else {}),
        **({"conditions": [dict(row) for row in conditions]} if conditions else {}),
        **({"probe": dict(probe)} if probe else {}),
        "generated_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def pipeline_cost(bench_dir: str | Path) -> dict:
    """Where the run's time went, from Snakemake's ``benchmark:`` files (one TSV per job).

    Per step (the folder or file name under ``bench_dir``: train, infer, stitch, ...):
    jobs, their summed wall and CPU seconds and the largest peak RSS. ``span_s`` runs
    from the first job's start (its end minus its wall time) to the last job's end, so
    it counts the time jobs waited for each other but not the report itself; a span much
    longer than the jobs' sum would mean the outputs come from several invocations.
    """
    import csv

    steps: dict[str, dict[str, float]] = {}
    starts, ends = [], []
    for path in sorted(Path(bench_dir).rglob("*.tsv")):
        rel = path.relative_to(bench_dir)
        step = rel.parts[0] if len(rel.parts) > 1 else path.stem
        try:
            with open(path, newline="") as fh:
                rows = list(csv.DictReader(fh, delimiter="\t"))
            wall = float(rows[-1]["s"])
        except (OSError, KeyError, IndexError, ValueError):
            continue  # a job killed mid-write leaves no usable line: its time is unknown, not zero
        row = rows[-1]
        end = path.stat().st_mtime
        starts.append(end - wall)
        ends.append(end)
        acc = steps.setdefault(step, {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0, "max_rss_mb": 0.0})
        acc["jobs"] += 1
        acc["wall_s"] += wall
        acc["cpu_s"] += _column(row, "cpu_time")
        acc["max_rss_mb"] = max(acc["max_rss_mb"], _column(row, "max_rss"))
    if not steps:
        return {}
    ordered = dict(sorted(steps.items(), key=lambda kv: -kv[1]["wall_s"]))
    return {
        "steps": ordered,
        "span_s": max(ends) - min(starts),
        "job_wall_s": sum(v["wall_s"] for v in steps.values()),
        "job_cpu_s": sum(v["cpu_s"] for v in steps.values()),
    }


def _column(row: Mapping[str, str], key: str) -> float:
    """A benchmark column as a number; Snakemake writes "NA" (or nothing) where it could not measure."""
    try:
        return float(row.get(key) or 0.0)
    except ValueError:
        return 0.0


#: The files of one report, by key: the record and its two views.
REPORT_FILES = {"json": "validation.json", "md": "validation.md", "html": "validation.html"}
