"""The ``track`` command: the pipeline's MLflow parent run, journals replayed, a lost store rebuilt, stale runs
ended; and ``serve``: a tracking server run for ``make mlflow-server``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ptycho import tracking
from ptycho.cli.declare import Live, arg, command
from ptycho.cli.values import json_object, pairs
from ptycho.config import spec
from ptycho.errors import ConfigError, PtychoError
from ptycho.tracking.record import JobRecord

#: Where ``track start`` falls back to when the config names no study or results folder.
_EXPERIMENT = spec("study")["default"]
_RESULTS = spec("results")["default"]


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in counts.items())


def _replay(args: argparse.Namespace) -> JobRecord:
    if not args.journal:
        raise PtychoError("track replay: name the journal files or folders (<results>/<preset>/mlflow/journal/)")
    files = tracking.journal_files(args.journal)
    if not files:
        raise PtychoError(f"track replay: no .jsonl journal in {' '.join(args.journal)}")
    done = tracking.replay_journals(files, args.tracking_uri)
    lines = [f"{path}: replayed {_counts(counts)}" for path, counts in done.files]
    return JobRecord(summary="\n".join([*lines, *done.notes]))


def _rebuild(args: argparse.Namespace) -> JobRecord:
    if not args.journal:
        raise PtychoError("track rebuild: name the results folder (e.g. results), whose studies' journals rebuild it")
    done, moved = tracking.rebuild(args.journal, args.tracking_uri)
    totals = {
        k: done.total(k) for k in ("runs", "created", "params", "metrics", "models", "artifacts", "missing_files")
    }
    lines = [
        *moved,
        f"rebuilt the MLflow store from {len(done.files)} journal(s): {totals['created']} run(s) created again, "
        f"{totals['runs'] - totals['created']} already there; " + _counts(totals),
        *done.notes,
    ]
    return JobRecord(summary="\n".join(lines))


def _sweep(args: argparse.Namespace) -> JobRecord:
    if not args.parent:
        raise PtychoError("track sweep: --parent is required (the JSON written by 'track start')")
    swept = tracking.sweep_study(args.parent, by="'ptycho track sweep'")
    return JobRecord(summary="\n".join(f"ptycho track sweep: {line}" for line in swept.lines()))


def _start(args: argparse.Namespace) -> JobRecord:
    from ptycho.artifacts import read_json

    needed = {
        "--config-json": (
            args.config_json or os.environ.get("PTYCHO_CONFIG_JSON"),
            "the resolved config JSON to log, or PTYCHO_CONFIG_JSON set to it",
        ),
        "--out": (args.out, "where to write the parent run's id"),
    }
    missing = [f"{flag} ({what})" for flag, (value, what) in needed.items() if not value]
    if missing:
        raise ConfigError(f"'track start' needs {' and '.join(missing)}; see 'ptycho track --help'")
    if args.parent:
        raise ConfigError("'track start' takes no --parent (that is for 'track finish'); drop it")
    if args.config_json:
        config = read_json(args.config_json)
    else:  # the workflow's way: not a file input, so that a config change re-runs no job (rules/simulate.smk)
        config = json_object(os.environ["PTYCHO_CONFIG_JSON"], "PTYCHO_CONFIG_JSON", "unset it or pass --config-json")
    # The workflow's config names the experiment, the run and the store's folder.
    experiment = args.experiment or config.get("study") or _EXPERIMENT
    run_name = args.run_name or (f"{experiment}-{config['preset']}" if config.get("preset") else "pipeline")
    tags = {**({"preset": config["preset"]} if config.get("preset") else {}), **pairs(args.tag)}
    if config.get("auto_precision"):  # what `precision: auto` chose on this machine (its reason is a param)
        tags.setdefault("auto_precision", config["auto_precision"]["precision"])
    record = tracking.start_pipeline(
        config,
        args.results or config.get("results") or _RESULTS,
        experiment,
        run_name,
        tags,
        args.out,
        renew=args.renew,
    )
    if not record:
        return JobRecord(summary=f"{args.out}: no parent run to renew (the workflow creates it)")
    return JobRecord(summary=f"{args.out}: MLflow parent run {record['run_id']} at {record['tracking_uri']}")


def _finish(args: argparse.Namespace) -> JobRecord:
    if not args.parent:
        raise ConfigError(
            "'track finish' needs --parent (the JSON written by 'track start'); see 'ptycho track --help'"
        )
    if not Path(args.parent).exists() and tracking.journaled_parent(args.parent) is None:
        # e.g. the workflow's error hook, when the pipeline stopped before 'track start'
        raise PtychoError(
            f"{args.parent}: no such file, so there is no MLflow parent run to mark {args.status} "
            "(it is written by 'track start')"
        )
    run_id, swept = tracking.finish_study(args.parent, args.status, by="'ptycho track finish'")
    return JobRecord(
        summary="\n".join(
            [*(f"ptycho track finish: {line}" for line in swept.lines()), f"MLflow parent run {run_id}: {args.status}"]
        )
    )


def _ui(args: argparse.Namespace) -> JobRecord:
    """``make ui``: the results folder's store made to work where it is (a copied or moved
    folder), the address of each study's arm runs printed, then ``mlflow ui`` over it."""
    import json
    import shutil
    import sys

    given = (args.journal or [_RESULTS])[0]
    results = Path(os.path.abspath(given))
    db = results / "mlflow.db"
    if not db.is_file():
        raise PtychoError(
            f"track ui: {given} holds no MLflow store (mlflow.db); run the study first (make all), "
            "or name the results folder it wrote (make ui RESULTS=<folder>)"
        )
    for note in tracking.follow_folder(results):
        print(f"ptycho track ui: note: {note}", file=sys.stderr)
    base = f"http://127.0.0.1:{args.port}"  # this machine only: a server for others is 'make mlflow-server'
    from ptycho.tracking.server import serve

    lines = []
    for preset, (experiment, ids) in tracking.pinn_arm_runs(results).items():
        runs, experiments = json.dumps(ids, separators=(",", ":")), json.dumps([experiment])
        lines.append(
            f"MLflow: the PINN's arms of {preset} side by side (mode, precision, seed, SSIM, time to quality): "
            f"{base}/#/compare-runs?runs={runs}&experiments={experiments}"
        )
        # A fresh browser starts MLflow 3 in its GenAI mode, where the experiment opens on an
        # empty overview; the parameter switches it to machine learning.
        lines.append(
            "MLflow: every run of the study (its jobs under the parent run's +): "
            f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"
        )
    lines.append(f"MLflow UI at {base} (Ctrl-C stops it)")
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [str(mlflow if mlflow.exists() else shutil.which("mlflow") or "mlflow"), "ui"]
    command += ["--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(args.port)]
    # The addresses once the server answers (under load MLflow takes a minute or more to
    # start, and a link printed before then led to a refused connection).
    code = serve(command, announce=lines, port_fix="choose another port (make ui UI_PORT=5002)")
    if code:
        raise PtychoError(f"mlflow ui exited with code {code}; see its output above")
    return JobRecord(summary="MLflow UI stopped")


_ACTIONS = {"start": _start, "finish": _finish, "replay": _replay, "rebuild": _rebuild, "sweep": _sweep, "ui": _ui}


@command(
    "track",
    "start or finish the pipeline's MLflow parent run; replay journals; rebuild a lost store; end stale runs",
    arg(
        "action",
        choices=tuple(_ACTIONS),
        help="replay: send journals (JSONL kept beside the outputs) to MLflow again, idempotently, creating "
        "runs the store lost; rebuild: a lost or damaged store rebuilt from every journal of a results folder "
        "(a damaged SQLite file is moved aside first); "
        "sweep: replay the journals of RUNNING child runs whose job went on without the server, mark KILLED "
        "those whose process is gone and parent runs of the study that parent.json does not name; "
        "finish: sweep, then end the parent run (--status); "
        "ui: serve a results folder's store (made to work where the folder is now) and print its address",
    ),
    arg(
        "journal",
        nargs="*",
        help="(replay) journal files or folders, e.g. results/smoke/mlflow/journal; "
        "(rebuild) results folders, e.g. results; (ui) one results folder",
    ),
    arg(
        "--tracking-uri",
        help="(replay, rebuild) send to this store instead of the study's (parent.json's, else the journal's)",
    ),
    arg(
        "--config-json",
        help="(start) resolved config file, logged as the parent's params "
        "(default: the JSON in $PTYCHO_CONFIG_JSON, as the workflow sets it)",
    ),
    arg("--experiment", help=f"(start) default: the config's study, else {_EXPERIMENT}"),
    arg("--run-name", help="(start) default: <study>-<preset> from the config, else pipeline"),
    arg("--tag", action="append", metavar="KEY=VALUE"),
    arg("--out", output=True, help="(start) where to write the parent run's id and tracking URI"),
    arg(
        "--renew",
        action="store_true",
        help="(start) with --out there: a new parent run only if the config changed since it was created "
        "(the workflow, before its first job); the old one keeps its params and verdict",
    ),
    arg(
        "--results",
        help=f"(start) folder of the embedded store <results>/mlflow.db (default: the config's results, else {_RESULTS})",
    ),
    arg("--parent", help="(finish, sweep) the JSON written by 'track start'"),
    arg("--status", choices=tracking.END_STATUSES, default=tracking.END_STATUSES[0]),
    arg("--port", type=int, default=5000, help="(ui) the port to serve on, at 127.0.0.1"),
)
def cmd_track(args: argparse.Namespace, live: Live) -> JobRecord:
    return _ACTIONS[args.action](args)


@command(
    "serve",
    "run a tracking server (make mlflow-server): announce it once it answers, stop it with this command",
    arg(
        "--tracking-uri",
        help="the address jobs reach the server at, printed with the announcement (export MLFLOW_TRACKING_URI=...)",
    ),
    arg(
        "server",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the server's command, e.g. -- mlflow server --host 127.0.0.1 --port 5001 (its --host and --port "
        "say where it is asked whether it answers)",
    ),
)
def cmd_serve(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.tracking.server import serve

    server = args.server[1:] if args.server[:1] == ["--"] else args.server
    code = serve(server, args.tracking_uri)
    if code:
        raise PtychoError(f"the MLflow server exited with code {code}; see its output above")
    return JobRecord(summary="MLflow server stopped")
