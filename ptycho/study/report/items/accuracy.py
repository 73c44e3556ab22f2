"""The accuracy item's section: the physics and the trained networks' differences, each
with its limit (the judging: :mod:`ptycho.study.checklist.accuracy`)."""

from __future__ import annotations

from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Section
from ptycho.study.tables import Table, fmt


def tables(report: StudyReport) -> list[Table]:
    """The physics per dtype and shift kind, and per mode; the trained networks per model
    and comparison, worst over the models (seeds, the arms' modes); each row with its limit."""
    ev = report.evidence("accuracy")
    strict = fmt(ev.get("limits", {}).get(REFERENCE_PRECISION, float("nan")))
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in ev.get("translation", []):
        groups.setdefault((case["dtype"], case["shifts"]), []).append(case)
    rows = [
        [
            f"translation, {dtype}, {shifts} shifts",
            "XLA-safe vs reference",
            ", ".join(str(c["batch"]) for c in cases),
            fmt(max(c["max_abs"] for c in cases)),
            fmt(max(c["mean_abs"] for c in cases)),
            strict,
        ]
        for (dtype, shifts), cases in sorted(groups.items())
    ]
    fm = ev.get("forward_model")
    if fm:
        for mode, r in fm.get("modes", {"jit": fm}).items():
            rows.append(
                [
                    "whole forward model (relative)",
                    f"{mode} vs off",
                    "16",
                    fmt(r["max_abs"]),
                    fmt(r["mean_abs"]),
                    strict,
                ]
            )
    trained: dict[tuple[str, str], dict] = {}
    for record in ev.get("trained_inference", {}).values():
        for diff in record["comparisons"].values():
            row = trained.setdefault((record["model"], diff["compared"]), {**diff, "models": 0, "samples": 0})
            row["max_abs"] = max(row["max_abs"], diff["max_abs"])
            row["mean_abs"] = max(row["mean_abs"], diff["mean_abs"])
            row["models"] += 1
            row["samples"] = max(row["samples"], record["samples"])
    for (model, compared_), row in trained.items():
        rows.append(
            [
                f"trained {model} at inference (relative)",
                f"{compared_} (worst of {row['models']})",
                f"{row['samples']} patterns",
                fmt(row["max_abs"]),
                fmt(row["mean_abs"]),
                fmt(row["limit"]),
            ]
        )
    return [("", ["what", "compared", "batch sizes", "max abs difference", "mean abs difference", "limit"], rows)]


SECTION = Section(name="accuracy", title="Accuracy", tables=tables)
