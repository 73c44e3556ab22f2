"""The validation report: ``validation.json`` (the record), ``.md`` and ``.html`` (views).

Everything in it comes from this run's job outputs (checklist items, per-arm metrics,
training metadata); nothing is typed in. The JSON is the contract (documented in
docs/report.md): an overall ``verdict`` and ``items.{accuracy, gradients, convergence,
quality, speedup}``, each with ``status``, ``value``, ``threshold`` and ``evidence``.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ptycho.study.checks import ITEMS

REPORT_SCHEMA_VERSION = 2  # 2: XLA modes (off, jit, auto, physics) replace the boolean arms


def build(
    items: Mapping[str, dict],
    arms: Mapping[str, dict],
    config: Mapping,
    machine: Mapping | None = None,
    figures: tuple[str, ...] = (),
    cost: Mapping | None = None,
    provenance: Mapping | None = None,
    solver: Mapping | None = None,
) -> dict:
    """Assemble the report record. ``arms`` maps arm name -> {metrics, timing, ...};
    ``cost`` is :func:`pipeline_cost` of the run's job benchmarks; ``provenance`` says
    which run this is (config hash, git commit, MLflow parent run; the preset is added
    from ``config``), shown in the views' first lines; ``solver`` is
    :func:`ptycho.study.solver_view.summarise` of the conventional solver's records."""
    missing = [name for name in ITEMS if name not in items]
    if missing:
        raise ValueError(f"checklist items missing from the report: {', '.join(missing)}")
    failed = {name: arm.get("failure") or "diverged" for name, arm in arms.items() if arm.get("status") == "FAILED"}
    verdict = "PASS" if all(items[name]["status"] == "PASS" for name in ITEMS) and not failed else "FAIL"
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "question": "Does XLA make physics-informed ptychographic reconstruction faster without making it worse?",
        "verdict": verdict,
        "items": {name: items[name] for name in ITEMS},
        "arms": dict(arms),
        "failed_arms": failed,
        "machine": dict(machine or {}),
        "figures": list(figures),
        "cost": dict(cost or {}),
        "config": {k: v for k, v in config.items() if k != "presets"},
        "provenance": {"preset": config.get("preset", ""), **dict(provenance or {})},
        **({"solver": dict(solver)} if solver else {}),
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


def cost_line(report: Mapping) -> str:
    """One sentence: the run's wall time and its largest parts (empty without benchmarks)."""
    cost = report.get("cost") or {}
    if not cost.get("steps"):
        return ""
    parts = [
        f"{name} {v['wall_s'] / 60:.1f} min ({v['jobs']} job{'s' if v['jobs'] != 1 else ''})"
        for name, v in list(cost["steps"].items())[:3]
    ]
    return (
        f"This run took {cost['span_s'] / 60:.1f} min from its first job to the report "
        f"(jobs' wall time {cost['job_wall_s'] / 60:.1f} min in all, CPU {cost['job_cpu_s'] / 60:.1f} min); "
        f"largest: {', '.join(parts)}."
    )


def cost_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    steps = (report.get("cost") or {}).get("steps", {})
    return (
        ["step", "jobs", "wall min (sum)", "CPU min (sum)", "largest peak RSS MB"],
        [
            [name, str(v["jobs"]), _fmt(v["wall_s"] / 60), _fmt(v["cpu_s"] / 60), _fmt(v["max_rss_mb"])]
            for name, v in steps.items()
        ],
    )


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:.4g}"
    return "n/a" if value is None else str(value)


#: Figures of the report, in order: (file stem, section, alt text). Captions are the
#: package's ``captions/<stem>.rst``, shared with ``snakemake --report``.
FIGURES = (
    ("losses", "convergence", "loss curves of every mode and off"),
    ("reconstructions", "quality", "reconstruction grid"),
    ("errors", "quality", "error maps"),
    ("frc", "quality", "Fourier ring correlation curves"),
    ("step_times", "speedup", "step-time distributions"),
    ("components", "speedup", "where the step time goes, per mode"),
    ("speedup", "speedup", "speedup with bootstrap intervals"),
    ("solver", "solver", "quality against seconds per object: networks and the iterative solver"),
)


def caption(stem: str) -> str:
    from importlib.resources import files

    return files("ptycho").joinpath("captions", f"{stem}.rst").read_text().strip()


# ----------------------------------------------------------------- tables
# Each returns (header, rows); the Markdown and HTML views render the same tables.
def checklist_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    return (
        ["item", "status", "value", "threshold", "summary"],
        [
            [name, it["status"], _fmt(it["value"]), f"{it['comparison']} {_fmt(it['threshold'])}", it["summary"]]
            for name, it in report["items"].items()
        ],
    )


def accuracy_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    ev = report["items"]["accuracy"]["evidence"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in ev.get("translation", []):
        groups.setdefault((case["dtype"], case["shifts"]), []).append(case)
    rows = [
        [
            f"translation, {dtype}, {shifts} shifts",
            "XLA-safe vs reference",
            ", ".join(str(c["batch"]) for c in cases),
            _fmt(max(c["max_abs"] for c in cases)),
            _fmt(max(c["mean_abs"] for c in cases)),
        ]
        for (dtype, shifts), cases in sorted(groups.items())
    ]
    fm = ev.get("forward_model")
    if fm:
        for mode, r in fm.get("modes", {"jit": fm}).items():
            rows.append(
                ["whole forward model (relative)", f"{mode} vs off", "16", _fmt(r["max_abs"]), _fmt(r["mean_abs"])]
            )
    for arm, r in sorted(ev.get("trained_inference", {}).items()):
        modes = ", ".join(r.get("modes", {})) or "jit"
        rows.append(
            [
                f"trained {arm} at inference (relative)",
                f"{modes} vs off (worst)",
                f"{r['samples']} patterns",
                _fmt(r["max_abs"]),
                _fmt(r["mean_abs"]),
            ]
        )
    return ["what", "compared", "batch sizes", "max abs difference", "mean abs difference"], rows


def gradients_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    """Per model, mode and layer: the largest relative gradient difference from off of its variables."""
    ev = report["items"]["gradients"]["evidence"]
    rows = []
    for model, m in sorted(ev.get("models", {}).items()):
        for mode, g in m.get("modes", {}).items():
            layers: dict[str, float] = {}
            for path, rel in g["relative_error_per_variable"].items():
                layer = path.rsplit("/", 1)[0] if "/" in path else path
                layers[layer] = max(layers.get(layer, 0.0), rel)
            for layer, rel in layers.items():
                rows.append([model, mode, layer, _fmt(rel)])
            rows.append([model, mode, "inputs (diffraction)", _fmt(g["relative_error_inputs"])])
            rows.append([model, mode, "loss value (mode / off)", f"{_fmt(g['loss'])} / {_fmt(m['loss_off'])}"])
    fd = ev.get("finite_differences")
    if fd:
        rows.append(
            ["PINN physics (float64)", "jit", f"finite differences, {fd['points']} points", _fmt(fd["max_rel"])]
        )
    return ["model", "mode vs off", "layer", "relative difference"], rows


def convergence_tables(report: Mapping) -> list[tuple[str, list[str], list[list[str]]]]:
    """The across-seed comparison (when there is one), then the per-seed final losses."""
    ev = report["items"]["convergence"]["evidence"]
    out = []
    if ev.get("comparisons"):
        out.append(
            seed_comparison_table({(name, "final val loss / off's mean"): c for name, c in ev["comparisons"].items()})
        )
    return [*out, ("Per seed", *convergence_table(report))]


def convergence_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    rows = []
    for name, p in sorted(report["items"]["convergence"]["evidence"].get("pairs", {}).items()):
        rows.append(
            [
                name,
                _fmt(p["final_val_loss"]),
                _fmt(p["final_val_loss_off"]),
                _fmt(p["relative_difference"]),
                ", ".join(f"{arm}: {_fmt(ok)}" for arm, ok in sorted(p["decreased"].items())),
            ]
        )
    return [
        "model, seed, mode",
        "final val loss (mode)",
        "final val loss (off)",
        "relative difference",
        "decreased",
    ], rows


def seed_comparison_table(comparisons: Mapping[tuple[str, str], Mapping]) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of ``checks.seed_comparison`` records keyed by (model-mode, metric)."""
    rows = []
    for (name, metric), c in sorted(comparisons.items()):
        judged = "within" if c["within"] else "EXCEEDS"
        rows.append(
            [
                name,
                metric,
                f"{len(c['seeds_mode'])} / {len(c['seeds_off'])}",
                _fmt(c["mean_mode"]),
                _fmt(c["mean_off"]),
                f"{_fmt(c['difference'])} ({_fmt(c['low'])} - {_fmt(c['high'])})",
                _fmt(c["spread"]),
                _fmt(c["margin"]),
                f"{judged}{', equivalent' if c['equivalent'] else ''}",
            ]
        )
    return (
        "Each XLA mode vs off across seeds: the difference of the means against the seed-to-seed spread "
        "(margin = the larger of the spread and the threshold)",
        [
            "model-mode",
            "metric",
            "seeds (mode / off)",
            "mean (mode)",
            "mean (off)",
            "difference (95 % interval)",
            "seed spread",
            "margin",
            "verdict",
        ],
        rows,
    )


QUALITY_COLUMNS = (
    ("amp_ssim", "amp SSIM"),
    ("phase_ssim", "phase SSIM"),
    ("amp_psnr", "amp PSNR dB"),
    ("phase_psnr", "phase PSNR dB"),
    ("amp_mae", "amp MAE"),
    ("phase_mae", "phase MAE rad"),
    ("amp_frc50", "amp FRC50 1/px"),
    ("phase_frc50", "phase FRC50 1/px"),
)


def quality_tables(report: Mapping) -> list[tuple[str, list[str], list[list[str]]]]:
    ev = report["items"]["quality"]["evidence"]
    header = [label for _, label in QUALITY_COLUMNS]
    out = [
        (
            "Per arm (test split, stitched objects, mean over images)",
            ["arm", *header],
            [[arm, *(_fmt(m.get(k)) for k, _ in QUALITY_COLUMNS)] for arm, m in sorted(ev.get("per_arm", {}).items())],
        )
    ]
    if ev.get("comparisons"):
        out.append(
            seed_comparison_table(
                {(name, key.replace("_", " ")): c for name, per in ev["comparisons"].items() for key, c in per.items()}
            )
        )
    for key, title, first in (
        ("arm_differences", "Each XLA mode minus off, per seed", "model, seed, mode"),
        ("pinn_minus_baseline", "PINN minus baseline (physics-informed vs supervised)", "mode, seed"),
    ):
        if ev.get(key):
            rows = [[name, *(_fmt(d.get(k)) for k, _ in QUALITY_COLUMNS)] for name, d in sorted(ev[key].items())]
            out.append((title, [first, *header], rows))
    return out


def _break_even(ratios: Mapping, key: str) -> str:
    """A break-even step count; infinite (stored as null in JSON) is "never"."""
    if key not in ratios:
        return "n/a"
    value = ratios[key]
    return "never" if value is None or value == float("inf") else f"{value:.0f}"


def speedup_tables(report: Mapping) -> list[tuple[str, list[str], list[list[str]]]]:
    ev = report["items"]["speedup"]["evidence"]
    bench = ev.get("bench", {})
    arms = bench.get("arms", [])
    contexts = bench.get("contexts", {})

    def ms(quart):
        return _fmt(1e3 * quart["median"]) if quart else "n/a"

    timing = [
        [
            a["model"],
            a["mode"],
            _fmt(a["compile_s"]),
            ms(a["step_s"]),
            _fmt(1e3 * a["step_s"]["iqr"]),
            ms(a.get("shared", {}).get("step_s")),
            _fmt(1e3 * a.get("shared", {}).get("step_s", {}).get("iqr", float("nan"))),
            *(
                _fmt(1e3 * a.get("components", {}).get(k, {}).get("median", float("nan")))
                for k in ("network", "physics", "optimizer")
            ),
            _fmt(a.get("peak_rss_mb")),
            _fmt(a.get("peak_above_baseline_mb")),
            _fmt(a.get("xla_clusters")) if a.get("xla_clusters") is not None else "-",
        ]
        for a in arms
    ]
    inference = [
        [
            a["model"],
            a["mode"],
            _fmt(a["infer_compile_s"]),
            _fmt(a["infer_patterns_per_s"]),
            _fmt(a["naive_patterns_per_s"]),
            _fmt(a["infer_patterns_per_s"] / a["naive_patterns_per_s"]),
        ]
        for a in arms
    ]

    def interval(r):
        return f"{_fmt(r['ratio'])} ({_fmt(r['low'])} - {_fmt(r['high'])})" if r else "n/a"

    ratios = []
    for model, per in bench.get("ratios", {}).items():
        for mode, r in per.items():
            if mode == "off":
                continue
            ratios.append(
                [
                    model,
                    mode,
                    interval(r.get("train_step_alone")),
                    interval(r.get("train_step_shared")),
                    interval(r.get("inference")),
                    _fmt(r.get("compile_extra_s")),
                    _break_even(r, "break_even_steps"),
                    _break_even(r, "break_even_steps_shared"),
                ]
            )
    how = "; ".join(f"{k}: {c['how']}" for k, c in contexts.items())
    conditions = []
    for name, c in contexts.items():
        f = c.get("foreign_load") or {}
        conditions.append(
            [
                name,
                str(c.get("jobs")),
                str(c.get("threads")),
                _fmt(f.get("foreign_cores")),
                str(f.get("of_cores", "n/a")),
                "n/a" if not f else ("CONTAMINATED" if f.get("contaminated") else "clean"),
                f"{_fmt(f.get('load_average_before'))} / {_fmt(f.get('load_average_after'))}",
            ]
        )
    return [
        (
            "Benchmark conditions: other processes' CPU use while each context was timed (/proc/stat)",
            [
                "context",
                "concurrent arms",
                "threads each",
                "foreign cores busy",
                "of cores",
                "verdict",
                "load average before / after",
            ],
            conditions,
        ),
        (
            f"Train-step timings per mode ({how})",
            [
                "model",
                "mode",
                "compile s",
                "alone median ms",
                "alone IQR ms",
                "shared median ms",
                "shared IQR ms",
                "network ms",
                "physics head ms",
                "optimiser ms",
                "peak RSS MB",
                "above start MB",
                "XLA clusters (auto)",
            ],
            timing,
        ),
        (
            "Each mode vs off (off's time / the mode's; > 1 means faster), 95 % bootstrap intervals",
            [
                "model",
                "mode",
                "train step alone",
                "train step shared",
                "inference (padded batch)",
                "extra compile s",
                "break-even steps alone",
                "break-even steps shared",
            ],
            ratios,
        ),
        (
            "Inference: padded fixed batch vs a per-pattern loop (batch 1)",
            ["model", "mode", "compile s", "padded-batch patterns/s", "per-pattern patterns/s", "padded / per-pattern"],
            inference,
        ),
    ]


def training_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    rows = []
    for name, arm in sorted(report["arms"].items()):
        t = arm.get("timing", {})
        status = arm.get("status", "FINISHED")
        if status == "FAILED":
            status = f"FAILED: {arm.get('failure') or 'diverged'}"
        rows.append(
            [
                name,
                status,
                _fmt(t.get("compile_s")),
                _fmt(t.get("step_median_s")),
                _fmt(t.get("train_wall_s")),
                _fmt(arm.get("infer_patterns_per_s")),
            ]
        )
    return ["arm", "training", "compile s", "step median s", "train wall s", "infer patterns/s"], rows


def machine_line(report: Mapping) -> str:
    m = report.get("machine", {})
    load = m.get("load_average")
    load = ", ".join(f"{v:.2f}" for v in load) if load else "n/a"
    gpus = m.get("gpus")
    device = "device n/a" if gpus is None else (f"device GPU ({gpus})" if gpus else "device CPU (no GPU)")
    return (
        f"{m.get('cpu', 'n/a')}, {m.get('cores', 'n/a')} cores, {device}, load average {load}; "
        f"TensorFlow {m.get('tensorflow', 'n/a')}, Python {m.get('python', 'n/a')}"
    )


def sections(report: Mapping) -> list[tuple[str, str, str, list[tuple[str, list[str], list[list[str]]]]]]:
    """(id, title, text, [(table title, header, rows)]) in reading order; both views use it."""
    items = report["items"]
    text = {name: items[name]["summary"] for name in ITEMS}
    text["speedup"] += (
        ". Benchmark machine: " + machine_line({"machine": items["speedup"]["evidence"].get("machine", {})}) + "."
    )
    out = [(name, name.capitalize(), text[name], _TABLES[name](report)) for name in ITEMS]
    if report.get("solver"):
        from ptycho.study import solver_view

        out.append(
            ("solver", "Conventional solver", solver_view.headline(report["solver"]) + ".", solver_view.tables(report))
        )
    return out


def first_lines(report: Mapping) -> str:
    """The answer under the verdict: the speedup and quality items' summaries, the
    solver's sentence (where XLA helps and how far the networks are from the data's
    ceiling) and any failed training."""
    parts = [f"{report['items']['speedup']['summary']}.", f"{report['items']['quality']['summary']}."]
    if report.get("solver"):
        from ptycho.study import solver_view

        parts.append(solver_view.headline(report["solver"]) + ".")
    parts.append(failed_sentence(report))
    return " ".join(p for p in parts if p)


#: Each checklist item's tables, keyed by item (:data:`ptycho.study.checks.ITEMS` gives the order).
_TABLES = {
    "accuracy": lambda r: [("", *accuracy_table(r))],
    "gradients": lambda r: [("", *gradients_table(r))],
    "convergence": convergence_tables,
    "quality": quality_tables,
    "speedup": lambda r: [
        *speedup_tables(r),
        ("Training jobs (shared the CPU with other jobs: indicative only)", *training_table(r)),
    ],
}


def failed_sentence(report: Mapping) -> str:
    """One sentence naming every arm whose training diverged, or nothing."""
    failed = report.get("failed_arms") or {}
    return " ".join(f"Training FAILED for {arm}: {reason}." for arm, reason in sorted(failed.items()))


def provenance_line(report: Mapping) -> str:
    """Which run this report is of: preset, config hash, git commit, MLflow parent run."""
    prov = report.get("provenance") or {"preset": report["config"].get("preset", "")}
    commit = prov.get("git_commit") or "unknown (not a git checkout)"
    parts = [f"Preset {prov.get('preset') or '?'}", f"config {prov.get('config_hash') or '?'}", f"commit {commit[:12]}"]
    if prov.get("mlflow_run_id"):
        parts.append(f"MLflow parent run {prov['mlflow_run_id']}")
    return "; ".join(parts) + f"; generated {report['generated_utc']}"


def to_markdown(report: Mapping) -> str:
    def table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
        return "\n".join(lines)

    parts = [
        f"# XLA validation report: preset `{report['config'].get('preset')}`",
        provenance_line(report),
        f"**{report['question']}**",
        f"## Verdict: {report['verdict']}",
        first_lines(report),
        table(*checklist_table(report)),
    ]
    for _, title, text, tables in sections(report):
        parts += [f"## {title}", text]
        for sub, header, rows in tables:
            parts += ([f"### {sub}"] if sub else []) + [table(header, rows)]
    parts += [
        "## Machine and run",
        f"{machine_line(report)}. Generated {report['generated_utc']}; preset `{report['config'].get('preset')}`. "
        f"Figures are in `validation.html`. {cost_line(report)}".strip(),
    ]
    if report.get("cost"):
        parts += ["### Where this run's time went (Snakemake benchmark files)", table(*cost_table(report))]
    return "\n\n".join(parts) + "\n"


def to_html(report: Mapping, figures: Mapping[str, bytes] | None = None) -> str:
    """A self-contained page (no external CSS, scripts or images); ``figures`` maps a
    stem of :data:`FIGURES` to PNG bytes, embedded as data URLs."""
    figures = dict(figures or {})
    esc = html.escape

    def table(header, rows, status_col=None):
        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = []
        for r in rows:
            cells = []
            for i, c in enumerate(r):
                cls = f' class="{c.lower()}"' if i == status_col and c in ("PASS", "FAIL") else ""
                cells.append(f"<td{cls}>{esc(c)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

    def figure_html(section_id):
        out = []
        for stem, where, alt in FIGURES:
            if where != section_id or stem not in figures:
                continue
            data = base64.b64encode(figures[stem]).decode()
            out.append(
                f'<figure id="fig-{stem}"><img alt="{esc(alt)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(caption(stem))}</figcaption></figure>"
            )
        return "".join(out)

    body = []
    for sid, title, text, tables in sections(report):
        item = report["items"].get(sid)
        badge = f' <span class="{item["status"].lower()}">{item["status"]}</span>' if item else ""
        parts = [f'<section id="{sid}"><h2>{esc(title)}{badge}</h2>', f"<p>{esc(text)}</p>"]
        for sub, header, rows in tables:
            parts.append((f"<h3>{esc(sub)}</h3>" if sub else "") + table(header, rows))
        parts.append(figure_html(sid) + "</section>")
        body.append("".join(parts))

    cost_html = (
        f"<h3>Where this run's time went (Snakemake benchmark files)</h3>{table(*cost_table(report))}"
        if report.get("cost")
        else ""
    )
    verdict = report["verdict"]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>XLA validation report ({esc(str(report["config"].get("preset")))}): {verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 76rem; color: #222; padding: 0 1rem; }}
table {{ border-collapse: collapse; margin: .6rem 0 1rem; font-size: .92rem; }}
th, td {{ border: 1px solid #bbb; padding: .25rem .55rem; text-align: left; }}
th {{ background: #eee; }} .pass {{ background: #cfe8d5; font-weight: bold; }} .fail {{ background: #f6c9c4; font-weight: bold; }}
h2 span {{ font-size: .9rem; padding: .1rem .5rem; vertical-align: middle; }}
.verdict {{ font-size: 1.6rem; padding: .5rem 1rem; display: inline-block; }}
figure {{ margin: 1rem 0; }} figure img {{ max-width: 100%; height: auto; border: 1px solid #ddd; }}
figcaption {{ font-size: .9rem; color: #444; max-width: 60rem; }}
</style></head><body>
<h1>XLA validation report: preset <code>{esc(str(report["config"].get("preset")))}</code></h1>
<p id="provenance">{esc(provenance_line(report))}</p>
<p><strong>{esc(report["question"])}</strong></p>
<section id="verdict"><h2>Verdict</h2><p class="verdict {verdict.lower()}">{verdict}</p>
<p>{esc(first_lines(report))}</p></section>
<section id="checklist"><h2>Checklist</h2>{table(*checklist_table(report), status_col=1)}</section>
{"".join(body)}
<section id="machine"><h2>Machine and run</h2><p>{esc(machine_line(report))}; preset
<code>{esc(str(report["config"].get("preset")))}</code>; generated {report["generated_utc"]}. {esc(cost_line(report))}</p>
{cost_html}</section>
</body></html>
"""


def write(report: Mapping, out_dir: str | Path, figures: Mapping[str, bytes] | None = None) -> dict[str, Path]:
    """Write ``validation.{json,md,html}`` atomically into ``out_dir``."""
    from ptycho.artifacts import atomic_write, write_json

    out_dir = Path(out_dir)
    paths = {"json": out_dir / "validation.json", "md": out_dir / "validation.md", "html": out_dir / "validation.html"}
    views = {"md": to_markdown(report), "html": to_html(report, figures)}  # render all before writing any
    write_json(paths["json"], dict(report))
    for key, text in views.items():
        atomic_write(paths[key], lambda tmp, text=text: Path(tmp).write_text(text))
    return paths


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
