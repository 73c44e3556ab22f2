"""The validation report: ``validation.json`` (the record), ``.md`` and ``.html`` (views).

Everything in it comes from this run's job outputs (checklist items, per-arm metrics,
training metadata); nothing is typed in. The JSON is the contract (documented in
docs/report.md): an overall ``verdict`` and ``items.{accuracy, gradients, convergence,
quality, speedup}``, each with ``status``, ``value``, ``threshold`` and ``evidence``.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ptycho.checks import ITEMS

REPORT_SCHEMA_VERSION = 1


def build(items: Mapping[str, dict], arms: Mapping[str, dict], config: Mapping, machine: Mapping | None = None) -> dict:
    """Assemble the report record. ``arms`` maps arm name -> {metrics, timing, ...}."""
    missing = [name for name in ITEMS if name not in items]
    if missing:
        raise ValueError(f"checklist items missing from the report: {', '.join(missing)}")
    verdict = "PASS" if all(items[name]["status"] == "PASS" for name in ITEMS) else "FAIL"
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "question": "Does XLA make physics-informed ptychographic reconstruction faster without making it worse?",
        "verdict": verdict,
        "items": {name: items[name] for name in ITEMS},
        "arms": dict(arms),
        "machine": dict(machine or {}),
        "config": {k: v for k, v in config.items() if k != "presets"},
        "generated_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:.4g}"
    return "n/a" if value is None else str(value)


def arm_rows(report: Mapping) -> list[list[str]]:
    rows = []
    for name, arm in sorted(report["arms"].items()):
        m, t = arm.get("metrics", {}), arm.get("timing", {})
        rows.append([name, _fmt(m.get("amp_ssim")), _fmt(m.get("phase_ssim")), _fmt(m.get("amp_psnr")),
                     _fmt(m.get("phase_psnr")), _fmt(m.get("amp_frc50")), _fmt(t.get("compile_s")),
                     _fmt(t.get("step_median_s")), _fmt(t.get("train_wall_s")), _fmt(arm.get("infer_patterns_per_s"))])
    return rows


ARM_HEADER = ["arm", "amp SSIM", "phase SSIM", "amp PSNR dB", "phase PSNR dB", "amp FRC0.5 (1/px)",
              "compile s", "step median s", "train wall s", "infer patterns/s"]
ITEM_HEADER = ["item", "status", "value", "threshold", "summary"]


def item_rows(report: Mapping) -> list[list[str]]:
    return [[name, it["status"], _fmt(it["value"]), f"{it['comparison']} {_fmt(it['threshold'])}", it["summary"]]
            for name, it in report["items"].items()]


def to_markdown(report: Mapping) -> str:
    def table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)

    m = report.get("machine", {})
    return "\n\n".join([
        "# XLA validation report",
        f"**{report['question']}**",
        f"## Verdict: {report['verdict']}",
        table(ITEM_HEADER, item_rows(report)),
        "## Per arm (test split, stitched objects)",
        table(ARM_HEADER, arm_rows(report)),
        f"Machine: {m.get('cpu', 'n/a')}, {m.get('cores', 'n/a')} cores, TensorFlow {m.get('tensorflow', 'n/a')}. "
        f"Generated {report['generated_utc']}; preset `{report['config'].get('preset')}`.",
        "Timings of training jobs come from the pipeline's jobs; the speedup item uses the dedicated "
        "benchmark job, which runs alone.",
    ]) + "\n"


def loss_curve_png(report: Mapping) -> str | None:
    """Base64 PNG of the training/validation losses of both arms, or None if no pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = report["items"]["convergence"]["evidence"].get("pairs", {})
    if not pairs:
        return None
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 3.5), squeeze=False)
    for ax, (name, p) in zip(axes[0], sorted(pairs.items()), strict=True):
        for key, style, colour in (("val_loss_xla", "-", "#0072B2"), ("val_loss_noxla", "--", "#D55E00")):
            ax.plot(range(1, len(p[key]) + 1), p[key], style, color=colour, label=key.replace("val_loss_", "val, "))
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation loss")
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def to_html(report: Mapping) -> str:
    """A self-contained page: no external CSS, scripts or images."""

    def table(header, rows, status_col=None):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = []
        for r in rows:
            cells = []
            for i, c in enumerate(r):
                cls = f' class="{c.lower()}"' if i == status_col and c in ("PASS", "FAIL") else ""
                cells.append(f"<td{cls}>{html.escape(c)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

    png = loss_curve_png(report)
    figure = (f'<figure><img alt="loss curves of both arms" src="data:image/png;base64,{png}">'
              f"<figcaption>Validation loss per epoch, XLA (solid) vs no-XLA (dashed), same seed and data.</figcaption></figure>"
              if png else "<p>No XLA / no-XLA pair to plot.</p>")
    verdict = report["verdict"]
    m = report.get("machine", {})
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>XLA validation report: {verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }} th, td {{ border: 1px solid #bbb; padding: .3rem .6rem; text-align: left; }}
th {{ background: #eee; }} .pass {{ background: #cfe8d5; font-weight: bold; }} .fail {{ background: #f6c9c4; font-weight: bold; }}
.verdict {{ font-size: 1.6rem; padding: .5rem 1rem; display: inline-block; }}
</style></head><body>
<h1>XLA validation report</h1>
<p><strong>{html.escape(report['question'])}</strong></p>
<section id="verdict"><h2>Verdict</h2><p class="verdict {verdict.lower()}">{verdict}</p></section>
<section id="checklist"><h2>Checklist</h2>{table(ITEM_HEADER, item_rows(report), status_col=1)}</section>
<section id="arms"><h2>Per arm (test split, stitched objects)</h2>{table(ARM_HEADER, arm_rows(report))}</section>
<section id="convergence"><h2>Convergence</h2>{figure}</section>
<section id="machine"><h2>Machine and run</h2><p>{html.escape(str(m.get('cpu', 'n/a')))}, {m.get('cores', 'n/a')} cores,
TensorFlow {html.escape(str(m.get('tensorflow', 'n/a')))}; preset <code>{html.escape(str(report['config'].get('preset')))}</code>;
generated {report['generated_utc']}.</p></section>
</body></html>
"""


def write(report: Mapping, out_dir: str | Path) -> dict[str, Path]:
    """Write ``validation.{json,md,html}`` atomically into ``out_dir``."""
    from ptycho.artifacts import atomic_write, write_json

    out_dir = Path(out_dir)
    paths = {"json": out_dir / "validation.json", "md": out_dir / "validation.md", "html": out_dir / "validation.html"}
    write_json(paths["json"], dict(report))
    for key, render in (("md", to_markdown), ("html", to_html)):
        text = render(report)
        atomic_write(paths[key], lambda tmp, text=text: Path(tmp).write_text(text))
    return paths


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
