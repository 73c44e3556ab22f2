"""The report's two views of its record, ``validation.md`` and a self-contained
``validation.html`` (the package's ``templates/validation.html.j2``), section by section
(:func:`sections`: each checklist item and the solver and conditions sections declare
their own text, tables and figures), written atomically (:func:`write`) and published
whole (:func:`publish`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

from ptycho.study.bench.machine import machine_line
from ptycho.study.report.record import REPORT_FILES, StudyReport, reads_report
from ptycho.study.report.words import (
    answer,
    cost_line,
    decided_by,
    mlflow_url,
    provenance_line,
    rest_lines,
    verdict_line,
)
from ptycho.study.tables import fmt, to_html, to_markdown


@reads_report
def cost_table(report: StudyReport) -> tuple[list[str], list[list[str]]]:
    return (
        ["step", "jobs", "wall min (sum)", "CPU min (sum)", "largest peak RSS MB"],
        [
            [name, str(v.jobs), fmt(v.wall_s / 60), fmt(v.cpu_s / 60), fmt(v.max_rss_mb)]
            for name, v in report.cost.largest
        ],
    )


def figures() -> list[tuple[str, str, str]]:
    """(file stem, section, alt text) of the report's figures, in order; each section
    (:func:`ptycho.study.report.items.sections`) declares its own. Captions are the package's
    ``captions/<stem>.rst``, shared with ``snakemake --report``."""
    from ptycho.study.report import items

    return [(f.stem, section, f.alt) for section, f in items.figures()]


def caption(stem: str) -> str:
    from importlib.resources import files

    return files("ptycho").joinpath("captions", f"{stem}.rst").read_text().strip()


@reads_report
def checklist_table(report: StudyReport) -> tuple[list[str], list[list[str]]]:
    return (
        ["item", "status", "value", "threshold", "summary"],
        [
            [name, it.status, fmt(it.value), f"{it.comparison} {fmt(it.threshold)}", it.summary]
            for name, it in report.items.items()
        ],
    )


@reads_report
def sections(report: StudyReport) -> list[tuple[str, str, str, list[tuple[str, list[str], list[list[str]]]]]]:
    """(id, title, text, [(table title, header, rows)]) in reading order; both views use it.
    The checklist's items always; a section without a verdict (the solver) when the
    report holds its record."""
    from ptycho.study.report import items

    out = []
    for section in items.sections():
        if section.name in report.items or getattr(report, section.name, None):
            out.append((section.name, section.title, section.describe(report), section.tables(report)))
    return out


@reads_report
def markdown(report: StudyReport) -> str:
    table = to_markdown
    parts = [
        f"# XLA validation report: preset `{report.config.get('preset')}`",
        provenance_line(report),
        f"**{report.question}**",
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
        f"{machine_line(report.machine)}. Generated {report.generated_utc}; preset `{report.config.get('preset')}`. "
        f"Figures are in `validation.html`. {cost_line(report)}".strip(),
    ]
    if report.cost:
        parts += ["### Where this run's time went (Snakemake benchmark files)", table(*cost_table(report))]
    return "\n\n".join(parts) + "\n"


@reads_report
def page(report: StudyReport, pngs: Mapping[str, bytes] | None = None) -> str:
    """A self-contained page (no external CSS, scripts or images), rendered from the
    package's ``templates/validation.html.j2`` with autoescape on; ``pngs`` maps a stem of
    :func:`figures` to PNG bytes, embedded as data URLs."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    figures_ = dict(pngs or {})
    env = Environment(loader=PackageLoader("ptycho", "templates"), autoescape=select_autoescape(["html", "j2"]))
    body = []
    for sid, title, text, tables in sections(report):
        item = report.items.get(sid)
        body.append(
            {
                "id": sid,
                "title": title,
                "status": item.status if item else "",
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
    prov = report.provenance
    return env.get_template("validation.html.j2").render(
        preset=str(report.config.get("preset")),
        verdict=report.verdict,
        decided_by=decided_by(report),
        question=report.question,
        provenance=provenance_line(report),
        answer=answer(report),
        rest=rest_lines(report),
        mlflow_url=mlflow_url(report),
        mlflow_run=prov.mlflow_run_id,
        contents=[("verdict", "Verdict"), ("checklist", "Checklist")]
        + [(s["id"], s["title"]) for s in body]
        + [("machine", "Machine and run")],
        checklist=checklist_table(report),
        sections=body,
        machine=machine_line(report.machine),
        generated=report.generated_utc,
        cost_line=cost_line(report),
        cost_table=to_html(*cost_table(report)) if report.cost else "",
    )


@reads_report
def write(report: StudyReport, out_dir: str | Path, pngs: Mapping[str, bytes] | None = None) -> dict[str, Path]:
    """Write ``validation.{json,md,html}`` atomically into ``out_dir``."""
    from ptycho.artifacts import atomic_write, write_json

    out_dir = Path(out_dir)
    paths = {key: out_dir / name for key, name in REPORT_FILES.items()}
    views = {"md": markdown(report), "html": page(report, pngs)}  # render all before writing any
    write_json(paths["json"], report.to_json())
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
