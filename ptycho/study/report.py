"""The validation report: ``validation.json`` (the record), ``.md`` and ``.html`` (views).

Everything in it comes from this run's job outputs (checklist items, per-arm metrics,
training metadata); nothing is typed in. The JSON is the contract (documented in
docs/report.md): an overall ``verdict`` and ``items.{accuracy, gradients, convergence,
quality, speedup}``, each with ``status``, ``value``, ``threshold`` and ``evidence``.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ptycho.artifacts import FORMATS
from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION, SHORT
from ptycho.study import checklist, conditions_view
from ptycho.study.arms import Pair
from ptycho.study.bench.machine import machine_line
from ptycho.study.stats import SeedComparison
from ptycho.study.tables import fmt, to_html, to_markdown

#: The report's format: one number, its producer's (:data:`ptycho.artifacts.FORMATS`), in
#: the record as ``schema_version`` (2: XLA modes replace the boolean arms).
REPORT_SCHEMA_VERSION = FORMATS["report"]


def build(
    items: Mapping[str, dict],
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
    statuses = {items[name]["status"] for name in names}
    statuses |= {row[c]["status"] for row in conditions for c in conditions_view.CHECKS}
    # PASS only when every item passes; INCONCLUSIVE (too few seeds to say) is not a PASS.
    verdict = (
        "FAIL" if failed or statuses - {"PASS", "INCONCLUSIVE"} else max(statuses, key=("PASS", "INCONCLUSIVE").index)
    )
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "question": "Does XLA make physics-informed ptychographic reconstruction faster without making it worse?",
        "verdict": verdict,
        "items": {name: items[name] for name in names},
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


def cost_line(report: Mapping) -> str:
    """One sentence: the run's wall time and its largest parts (empty without benchmarks)."""
    cost = report.get("cost") or {}
    if not cost.get("steps"):
        return ""
    parts = [
        f"{name} {v['wall_s'] / 60:.1f} min ({v['jobs']} job{'s' if v['jobs'] != 1 else ''})"
        for name, v in list(cost["steps"].items())[:3]
    ]
    estimate = cost.get("estimate") or {}
    estimated = (
        f"Estimated {estimate['total_s'] / 60:.1f} min before its first job ({estimate['trainings']} trainings "
        f"{estimate['training_s'] / 60:.1f} min, bench {estimate['bench_s'] / 60:.1f} min, rest "
        f"{estimate['rest_s'] / 60:.1f} min); "
        if isinstance(estimate.get("total_s"), int | float)
        else ""
    )
    return (
        f"{estimated}{'t' if estimated else 'T'}his run took {cost['span_s'] / 60:.1f} min from its first job to the report "
        f"(jobs' wall time {cost['job_wall_s'] / 60:.1f} min in all, CPU {cost['job_cpu_s'] / 60:.1f} min); "
        f"largest: {', '.join(parts)}."
    )


def cost_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    steps = (report.get("cost") or {}).get("steps", {})
    return (
        ["step", "jobs", "wall min (sum)", "CPU min (sum)", "largest peak RSS MB"],
        [
            [name, str(v["jobs"]), fmt(v["wall_s"] / 60), fmt(v["cpu_s"] / 60), fmt(v["max_rss_mb"])]
            for name, v in steps.items()
        ],
    )


def figures() -> list[tuple[str, str, str]]:
    """(file stem, section, alt text) of the report's figures, in order; each section
    (:func:`ptycho.study.checklist.sections`) declares its own. Captions are the package's
    ``captions/<stem>.rst``, shared with ``snakemake --report``."""
    return [(f.stem, section, f.alt) for section, f in checklist.figures()]


def caption(stem: str) -> str:
    from importlib.resources import files

    return files("ptycho").joinpath("captions", f"{stem}.rst").read_text().strip()


def checklist_table(report: Mapping) -> tuple[list[str], list[list[str]]]:
    return (
        ["item", "status", "value", "threshold", "summary"],
        [
            [name, it["status"], fmt(it["value"]), f"{it['comparison']} {fmt(it['threshold'])}", it["summary"]]
            for name, it in report["items"].items()
        ],
    )


def sections(report: Mapping) -> list[tuple[str, str, str, list[tuple[str, list[str], list[list[str]]]]]]:
    """(id, title, text, [(table title, header, rows)]) in reading order; both views use it.
    The checklist's items always; a section without a verdict (the solver) when the
    report holds its record."""
    out = []
    for section in checklist.sections():
        if section.name in report["items"] or report.get(section.name):
            out.append((section.name, section.title, section.describe(report), section.tables(report)))
    return out


def _num(v: Any) -> float:
    return float(v) if v is not None else math.nan


def speed_sentence(report: Mapping) -> str:
    """XLA's own speed in one sentence: per precision, the fastest XLA mode's time to
    quality vs ``off`` at that precision with its interval, where it was timed, and the
    plain answer (faster, SLOWER, no measurable effect, not resolved)."""
    from ptycho.study.checklist.speedup import comparisons

    ev = report["items"]["speedup"]["evidence"]
    best: dict[str, Any] = {}  # per precision, the fastest measured XLA mode of the PINN
    for c in comparisons(report).values():
        if c.is_xla(SUBJECT) and c.measured and (c.precision not in best or c.ratio > best[c.precision].ratio):
            best[c.precision] = c
    if best:
        return (
            "Speed: XLA vs off at the same precision, time to quality in the pipeline's schedule: "
            + "; ".join(c.headline() for c in best.values())
            + "."
        )
    words = ev.get("per_step", {}).get(ev.get("context", "alone"))
    if words:
        return f"Speed: XLA vs off at the same precision, per train step (no trained XLA pair), {words}."
    return "Speed: not measured (no PINN timings of off and an XLA mode at the same precision)."


def _subject_comparisons(report: Mapping, axis: str) -> list[tuple[Pair, dict[str, SeedComparison]]]:
    """The quality item's across-seed comparisons of the study's subject along ``axis``
    ("mode" or "precision"), metric by metric, each with its
    :class:`~ptycho.study.arms.Pair` (from the arms, never from parsing the evidence's keys)."""
    from ptycho.study.checklist.seeds import seed_groups

    comparisons = report["items"]["quality"]["evidence"].get("comparisons", {})
    return [
        (g.pair, {metric: SeedComparison.from_json(c) for metric, c in comparisons[g.key].items()})
        for g in seed_groups(report.get("arms", {}))
        if g.key in comparisons and g.pair.axis == axis and g.pair.arm.model == SUBJECT
    ]


def _mode_parts(report: Mapping, vs: str, ssim) -> list[str]:
    """``"<mode> <vs>: amplitude ..., phase ..."`` for each PINN mode vs off at the same
    precision, each SSIM comparison ``m`` put in words by ``ssim(word, m)``."""
    parts = []
    for pair, c in _subject_comparisons(report, "mode"):
        arm = pair.arm
        label = arm.mode if arm.precision == REFERENCE_PRECISION else f"{arm.mode} at {SHORT[arm.precision]}"
        metrics = [ssim(word, c[k]) for k, word in (("amp_ssim", "amplitude"), ("phase_ssim", "phase")) if k in c]
        parts.append(f"{label} {vs}: " + ", ".join(metrics))
    return parts


def quality_sentence(report: Mapping) -> str:
    """XLA's own effect on the reconstructions in one sentence: each PINN mode vs ``off``
    at the same precision, amplitude and phase SSIM, outcome and 90 % interval (without a
    ground truth: the SSIM between the two arms' reconstructions, :func:`agreement_sentence`)."""
    if report["items"]["quality"]["evidence"].get("ground_truth") is False:
        return agreement_sentence(report)

    def difference(word: str, m: SeedComparison) -> str:
        interval = f", 90% interval {m.low90:+.3f} to {m.high90:+.3f}" if math.isfinite(m.low90) else ""
        return f"{word} SSIM {m.difference:+.3f}{interval}: {m.outcome}"

    parts = _mode_parts(report, "- off", difference)
    if not parts:
        return f"Quality: {report['items']['quality']['summary']}."
    margin = report["items"]["quality"]["threshold"]
    return f"Quality: XLA vs off at the same precision (PINN, margin {margin:g} SSIM): " + "; ".join(parts) + "."


def agreement_sentence(report: Mapping) -> str:
    """The quality sentence on measured data: for each PINN mode against off of the same
    seed and precision, the data misfit (relative difference) and the half-scan FRC means
    (differences), each with the end of its 90 % interval on the worse side, and the SSIM
    between the two arms' reconstructions against the SSIM between two seeds of off, each
    with its outcome (:mod:`ptycho.study.checklist.agreement`)."""
    from ptycho.study.stats import LOWER

    def worse_end(m: SeedComparison) -> float:
        return m.high90 if m.better == LOWER else m.low90  # the 90 % interval's worse end

    def relative(word: str, m: SeedComparison) -> str:
        bound = f" (90% interval to {worse_end(m):+.1%})" if math.isfinite(worse_end(m)) else ""
        return f"{word} {m.difference:+.1%}{bound}: {m.outcome}"

    def difference(word: str, m: SeedComparison) -> str:
        bound = f" (90% interval to {worse_end(m):+.3f})" if math.isfinite(worse_end(m)) else ""
        return f"{word} {m.difference:+.3f}{bound}: {m.outcome}"

    def agreement(word: str, m: SeedComparison) -> str:
        return f"{word} {m.mean_mode:.3f} vs {m.mean_off:.3f}: {m.outcome}"

    parts = []
    for pair, c in _subject_comparisons(report, "mode"):
        arm = pair.arm
        label = arm.mode if arm.precision == REFERENCE_PRECISION else f"{arm.mode} at {SHORT[arm.precision]}"
        own = [relative("data misfit", c["data_misfit"])] if "data_misfit" in c else []
        own += [
            difference(word, c[k])
            for k, word in (("amp_half_frc_mean", "half-scan FRC mean amplitude"), ("phase_half_frc_mean", "phase"))
            if k in c
        ]
        agreed = [agreement(word, c[k]) for k, word in (("amp_ssim", "amplitude"), ("phase_ssim", "phase")) if k in c]
        parts.append(
            f"{label} vs off: "
            + ", ".join(own)
            + (f"; SSIM between the two against between two seeds of off, {', '.join(agreed)}" if agreed else "")
        )
    if not parts:
        return f"Quality: {report['items']['quality']['summary']}."
    ev = report["items"]["quality"]["evidence"]
    return (
        "Quality, no ground truth (measured data): each XLA mode against off of the same seed and precision (PINN; "
        f"margins {_num(ev.get('margin')):.0%} relative and {_num(ev.get('threshold')):g} similarity): "
        + "; ".join(parts)
        + "."
    )


def data_sentence(report: Mapping) -> str:
    """Which data the study ran on when it was not simulated (config ``data``), or nothing."""
    from ptycho.study.data_files import data_files

    data = data_files(report.get("config") or {})  # its files; data.n and data.reduce alone are no data
    if not data:
        return ""
    truth = report["items"]["quality"]["evidence"].get("ground_truth", True)
    probe = report.get("probe")
    refined = (
        f" Probe: the file's estimate refined by the solver on the training split ({probe['patterns']} patterns, "
        f"{probe['iterations']} iterations): it moved {probe['probe_change']:.0%} (relative, up to phase and scale), "
        f"and the solver's data misfit fell from {probe['misfit_given_probe']:.3g} with the given probe to "
        f"{probe['misfit_refined_probe']:.3g}; every arm trained, and every reconstruction was scored, with it."
        if probe
        else ""
    )
    return (
        f"Data: your own files, train {data.get('train')}, test {data.get('test')} "
        f"({'with a ground truth' if truth else 'no ground truth: measured data, nothing scored against a truth'})."
        + refined
    )


def precision_sentence(report: Mapping) -> str:
    """The precision's own effect (never counted as XLA's) in one sentence."""
    words = report["items"]["speedup"]["evidence"].get("precision") or ""
    outcomes = [
        f"{pair.words()}: amplitude {c['amp_ssim'].outcome}, phase {c['phase_ssim'].outcome}"
        for pair, c in _subject_comparisons(report, "precision")
        if "amp_ssim" in c and "phase_ssim" in c
    ]
    if not words and not outcomes:
        return "Precision: only float32 was measured."
    quality = f"; quality {'; '.join(outcomes)}" if outcomes else ""
    return f"{words or 'Precision: no per-step timing of a reduced precision'}{quality}."


def answer(report: Mapping) -> list[str]:
    """The report's three sentences: XLA's speed, XLA's quality, the precision's effect."""
    return [speed_sentence(report), quality_sentence(report), precision_sentence(report)]


def rest_lines(report: Mapping) -> str:
    """What follows the three sentences: the data when it is the user's own, the items
    whose evidence is INCONCLUSIVE, the recommendation, the solver's sentence, the
    conditions' and any failed training."""
    unsettled = [name for name, item in report["items"].items() if item["status"] == "INCONCLUSIVE"]
    parts = [
        data_sentence(report),
        f"INCONCLUSIVE: {', '.join(unsettled)} (the evidence does not settle it; each item says what would)."
        * bool(unsettled),
    ]
    rec = report["items"]["speedup"]["evidence"].get("recommendation")
    if rec:
        parts.append(rec + ".")
    if report.get("solver"):
        from ptycho.study import solver_view

        parts.append(solver_view.headline(report["solver"]) + ".")
    parts.append(conditions_view.sentence(report))
    parts.append(failed_sentence(report))
    return " ".join(p for p in parts if p)


def mlflow_url(report: Mapping) -> str:
    """The MLflow UI's page of the parent run when the run was tracked on a server (an
    http(s) tracking URI, and the experiment's id known); empty for a local store
    (``make ui`` serves it)."""
    prov = report.get("provenance") or {}
    uri, run, exp = prov.get("tracking_uri") or "", prov.get("mlflow_run_id"), prov.get("experiment_id")
    if not run or not uri.startswith(("http://", "https://")) or not exp:
        return ""
    return f"{uri.rstrip('/')}/#/experiments/{exp}/runs/{run}"


def decided_by(report: Mapping) -> str:
    """What decides a verdict other than PASS, in words: the failed trainings, items and
    conditions, then the items that are INCONCLUSIVE (``speedup FAIL; quality INCONCLUSIVE``);
    '' for a PASS. So the first screen says what failed without a scroll to the checklist."""
    if report["verdict"] == "PASS":
        return ""
    items = report.get("items", {})
    failed = [f"training FAILED for {arm}" for arm in sorted(report.get("failed_arms") or {})]
    failed += [f"{name} FAIL" for name, it in items.items() if it.get("status") == "FAIL"]
    failed += [f"conditions FAIL at {', '.join(conditions_view.failing(report))}"] * bool(
        conditions_view.failing(report)
    )
    open_ = [name for name, it in items.items() if it.get("status") == "INCONCLUSIVE"]
    return "; ".join([*failed, *([f"{', '.join(open_)} INCONCLUSIVE"] if open_ else [])])


def verdict_line(report: Mapping) -> str:
    """``Verdict: FAIL (speedup FAIL; quality INCONCLUSIVE)``: the verdict and what decides it."""
    why = decided_by(report)
    return f"Verdict: {report['verdict']}" + (f" ({why})" if why else "")


def console_lines(report: Mapping, path: str | Path) -> list[str]:
    """What ``make all`` prints last: the verdict with the three sentences (and the
    conditions whose checks failed it, if any), and where the report is."""
    failed = conditions_view.failing(report)
    why = [f"Conditions: FAIL at {', '.join(failed)} (the report's Conditions section)."] if failed else []
    return [verdict_line(report), *answer(report), *why, f"Report: {path}"]


def print_answer(json_path: str | Path) -> None:
    """Print :func:`console_lines` of a published report (the workflow's ``onsuccess``):
    the verdict, the three sentences and the HTML view's path. A missing or unreadable
    report prints one line saying so, never a traceback: the run itself succeeded."""
    import json

    json_path = Path(json_path)
    try:
        report = json.loads(json_path.read_text())
        lines = console_lines(report, json_path.with_name(REPORT_FILES["html"]).resolve())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"ptycho: no answer to print from {json_path} ({type(exc).__name__}: {exc})")
        return
    print("\n".join(["", *lines]), flush=True)


def failed_sentence(report: Mapping) -> str:
    """One sentence naming every arm whose training diverged, or nothing."""
    failed = report.get("failed_arms") or {}
    return " ".join(f"Training FAILED for {arm}: {reason}." for arm, reason in sorted(failed.items()))


def provenance_line(report: Mapping) -> str:
    """Which run this report is of: preset, config hash, git commit, MLflow parent run."""
    prov = report.get("provenance") or {"preset": report["config"].get("preset", "")}
    commit = (prov.get("git_commit") or "")[:12] or "unknown (not a git checkout)"
    parts = [f"Preset {prov.get('preset') or '?'}", f"config {prov.get('config_hash') or '?'}", f"commit {commit}"]
    auto = (report.get("config") or {}).get("auto_precision")
    if auto:  # what `precision: auto` chose on the machine it ran on, and why
        parts.insert(1, f"precision auto = {auto['precision']} ({auto['reason']})")
    if prov.get("mlflow_run_id"):
        parts.append(f"MLflow parent run {prov['mlflow_run_id']}")
    return "; ".join(parts) + f"; generated {report['generated_utc']}"


def markdown(report: Mapping) -> str:
    table = to_markdown
    parts = [
        f"# XLA validation report: preset `{report['config'].get('preset')}`",
        provenance_line(report),
        f"**{report['question']}**",
        f"## {verdict_line(report)}",
        *answer(report),
        *[rest_lines(report)] * bool(rest_lines(report)),
        table(*checklist_table(report)),
    ]
    for _, title, text, tables in sections(report):
        parts += [f"## {title}", text]
        for sub, header, rows in tables:
            parts += ([f"### {sub}"] if sub else []) + [table(header, rows)]
    parts += [
        "## Machine and run",
        f"{machine_line(report.get('machine', {}))}. Generated {report['generated_utc']}; preset `{report['config'].get('preset')}`. "
        f"Figures are in `validation.html`. {cost_line(report)}".strip(),
    ]
    if report.get("cost"):
        parts += ["### Where this run's time went (Snakemake benchmark files)", table(*cost_table(report))]
    return "\n\n".join(parts) + "\n"


def page(report: Mapping, pngs: Mapping[str, bytes] | None = None) -> str:
    """A self-contained page (no external CSS, scripts or images), rendered from the
    package's ``templates/validation.html.j2`` with autoescape on; ``pngs`` maps a stem of
    :func:`figures` to PNG bytes, embedded as data URLs."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    figures_ = dict(pngs or {})
    env = Environment(loader=PackageLoader("ptycho", "templates"), autoescape=select_autoescape(["html", "j2"]))
    body = []
    for sid, title, text, tables in sections(report):
        item = report["items"].get(sid)
        body.append(
            {
                "id": sid,
                "title": title,
                "status": item["status"] if item else "",
                "text": text,
                "tables": [(sub, to_html(header, rows)) for sub, header, rows in tables],
                "figures": [
                    {
                        "stem": stem,
                        "alt": alt,
                        "data": base64.b64encode(figures_[stem]).decode(),
                        "caption": caption(stem),
                    }
                    for stem, where, alt in figures()
                    if where == sid and stem in figures_
                ],
            }
        )
    prov = report.get("provenance") or {}
    return env.get_template("validation.html.j2").render(
        preset=str(report["config"].get("preset")),
        verdict=report["verdict"],
        decided_by=decided_by(report),
        question=report["question"],
        provenance=provenance_line(report),
        answer=answer(report),
        rest=rest_lines(report),
        mlflow_url=mlflow_url(report),
        mlflow_run=prov.get("mlflow_run_id", ""),
        contents=[("verdict", "Verdict"), ("checklist", "Checklist")]
        + [(s["id"], s["title"]) for s in body]
        + [("machine", "Machine and run")],
        checklist=checklist_table(report),
        sections=body,
        machine=machine_line(report.get("machine", {})),
        generated=report["generated_utc"],
        cost_line=cost_line(report),
        cost_table=to_html(*cost_table(report)) if report.get("cost") else "",
    )


#: The files of one report, by key: the record and its two views.
REPORT_FILES = {"json": "validation.json", "md": "validation.md", "html": "validation.html"}


def write(report: Mapping, out_dir: str | Path, pngs: Mapping[str, bytes] | None = None) -> dict[str, Path]:
    """Write ``validation.{json,md,html}`` atomically into ``out_dir``."""
    from ptycho.artifacts import atomic_write, write_json

    out_dir = Path(out_dir)
    paths = {key: out_dir / name for key, name in REPORT_FILES.items()}
    views = {"md": markdown(report), "html": page(report, pngs)}  # render all before writing any
    write_json(paths["json"], dict(report))
    for key, text in views.items():
        atomic_write(paths[key], lambda tmp, text=text: Path(tmp).write_text(text))
    return paths


def publish(staged: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Copy the complete report in ``staged`` (what :func:`write` wrote) to ``out_dir``.

    Why the workflow writes a report twice: Snakemake deletes a job's declared outputs
    before the job runs and again when it fails, so a report job that writes
    ``reports/<preset>/`` itself loses the previous report whenever the new one fails
    (a read-only or damaged store, ``kill -9``, a bad input). The ``report`` rule
    therefore writes into the results folder (``results/<preset>/report/``), and only
    when it has finished does the ``publish_report`` rule copy that complete report
    here. A failed or killed report job leaves ``reports/<preset>/`` untouched (and its
    missing staged outputs make the next run redo it); a publish that is itself
    interrupted (it takes milliseconds) is redone from the staged copy without
    recomputing anything. Each file is copied atomically; the JSON is read first, so a
    staged report that is not complete is refused, not copied.
    """
    import json
    import shutil

    from ptycho.artifacts import atomic_write
    from ptycho.errors import PtychoError

    staged, out_dir = Path(staged), Path(out_dir)
    sources = {key: staged / name for key, name in REPORT_FILES.items()}
    missing = [str(p) for p in sources.values() if not p.is_file()]
    if missing:
        raise PtychoError(
            f"report {staged} is incomplete ({', '.join(missing)} missing); run snakemake again: it redoes the report"
        )
    try:
        record = json.loads(sources["json"].read_text())
    except (OSError, ValueError) as exc:
        raise PtychoError(
            f"{sources['json']}: not a complete report ({exc}); redo it with snakemake -R report"
        ) from None
    if not isinstance(record, dict) or "verdict" not in record:
        raise PtychoError(f"{sources['json']}: not a validation report (no verdict); redo it with snakemake -R report")
    paths = {key: out_dir / name for key, name in REPORT_FILES.items()}
    for key, source in sources.items():
        atomic_write(paths[key], lambda tmp, source=source: shutil.copyfile(source, tmp))
    return paths
