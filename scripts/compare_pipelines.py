"""Compare two finished pipelines of the same preset: checklist items, seeded values and MLflow tags.

    python scripts/compare_pipelines.py BEFORE_DIR AFTER_DIR [--preset smoke]

Each directory is a checkout that ran ``snakemake all`` (its ``results/<preset>/``,
``results/mlflow.db`` and ``reports/<preset>/validation.json``). A refactoring must leave
the report's items, their statuses and every seeded value the same; what depends on the
clock (timings, speed ratios, dates, run ids, commits) is listed apart as "timed" and not
compared. MLflow runs are matched by run name; their tags are compared except the
volatile ones. Exit status 0 when nothing but timed values differ.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: Keys whose values come from a clock or a machine's state: never equal between two runs.
TIMED = (
    "seconds",
    "_s",
    "_ms",
    "time",
    "wall",
    "ratio",
    "low",
    "high",
    "speed",
    "rss",
    "_mb",
    "load",
    "utc",
    "per_s",
    "break_even",
    "foreign",
    "iqr",
    "median",
    "mean_s",
    "contaminated",
    "reliable",
    "clusters",
    "minutes",
)
#: Evidence and report parts that are measurements of speed as a whole.
TIMED_PARTS = {"bench", "cost", "machine", "training_jobs", "per_context", "intervals", "timing", "provenance"}
VOLATILE_TAGS = ("mlflow.", "git_commit", "slurm_job_id", "pid", "host", "device", "gpus", "ptycho.pid", "killed")


def _timed(key: str) -> bool:
    return any(t in key for t in TIMED)


def diff(a, b, path: str = "", out: list | None = None, timed: list | None = None, tol: float = 1e-9):
    """Differences of two JSON values, recursively: (path, a, b) into ``out``; those under
    a timed key into ``timed``."""
    out = [] if out is None else out
    timed = [] if timed is None else timed
    key = path.rsplit(".", 1)[-1]
    if key in TIMED_PARTS or _timed(key):
        if a != b:
            timed.append(path)
        return out, timed
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append((f"{path}.{k}", a.get(k, "<missing>"), b.get(k, "<missing>")))
            else:
                diff(a[k], b[k], f"{path}.{k}", out, timed, tol)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", out, timed, tol)
    elif isinstance(a, float) and isinstance(b, float):
        if not (a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(abs(a), abs(b))):
            out.append((path, a, b))
    elif a != b:
        out.append((path, a, b))
    return out, timed


def summary_sentences(report: dict) -> dict[str, str]:
    return {name: item["summary"] for name, item in report["items"].items()}


def mlflow_runs(root: Path) -> dict[str, dict[str, str]]:
    """``<parent run name>/<run name>`` -> tags and params (volatile tags dropped), over
    every experiment of the store; runs of the same name under the same parent (the two
    CXI exports) are numbered in start order."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'results' / 'mlflow.db'}")
    every = [
        run
        for exp in client.search_experiments()
        for run in client.search_runs([exp.experiment_id], max_results=5000, order_by=["attributes.start_time ASC"])
    ]
    names = {run.info.run_id: run.info.run_name for run in every}
    runs: dict[str, dict[str, str]] = {}
    for run in every:
        parent = names.get(run.data.tags.get("mlflow.parentRunId", ""), "")
        key = f"{parent}/{run.info.run_name}"
        n = sum(1 for k in runs if k == key or k.startswith(key + "#"))
        tags = {k: v for k, v in run.data.tags.items() if not k.startswith(VOLATILE_TAGS)}
        tags.update({f"param:{k}": v for k, v in run.data.params.items()})
        runs[f"{key}#{n + 1}" if n else key] = tags
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--preset", default="smoke")
    args = parser.parse_args(argv)
    rep = {
        d: json.loads((d / "reports" / args.preset / "validation.json").read_text()) for d in (args.before, args.after)
    }
    a, b = rep[args.before], rep[args.after]
    problems = 0

    print(f"== report items ({args.preset})")
    for name in sorted(set(a["items"]) | set(b["items"])):
        x, y = a["items"].get(name, {}), b["items"].get(name, {})
        print(
            f"  {name:12s} {x.get('status', '-'):4s} -> {y.get('status', '-'):4s}  value {x.get('value')} -> {y.get('value')}"
        )
    print(f"  verdict {a['verdict']} -> {b['verdict']}")

    found, timed = diff(
        {k: v for k, v in a.items() if k not in ("generated_utc", "config")},
        {k: v for k, v in b.items() if k not in ("generated_utc", "config")},
        "report",
    )
    # The speedup item's value and summary are timings.
    found = [f for f in found if not f[0].startswith(("report.items.speedup.value", "report.items.speedup.summary"))]
    print(f"== report values: {len(found)} differ (not timed), {len(timed)} timed values differ (not compared)")
    for path, x, y in found[:40]:
        print(f"  {path}: {str(x)[:100]!r} -> {str(y)[:100]!r}")
    problems += len(found)

    print("== per-arm metrics files")
    for path in sorted((args.before / "results" / args.preset / "metrics").glob("*.json")):
        other = args.after / "results" / args.preset / "metrics" / path.name
        d, _ = diff(json.loads(path.read_text()), json.loads(other.read_text()), path.stem)
        print(f"  {path.stem}: {'same' if not d else f'{len(d)} differ'}")
        problems += len(d)

    runs_a, runs_b = mlflow_runs(args.before), mlflow_runs(args.after)
    print(f"== MLflow runs: {len(runs_a)} -> {len(runs_b)}")
    for name in sorted(set(runs_a) | set(runs_b)):
        if name not in runs_b or name not in runs_a:
            print(f"  run {name!r}: only {'before' if name in runs_a else 'after'}")
            problems += 1
            continue
        ta, tb = runs_a[name], runs_b[name]
        changed = {k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k)}
        if changed:
            problems += 1
            print(f"  run {name!r}: " + "; ".join(f"{k}: {ta.get(k)!r} -> {tb.get(k)!r}" for k in sorted(changed)))
    print(f"== {problems} difference(s) beyond timings")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
