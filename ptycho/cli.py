"""Command-line interface: ``python -m ptycho COMMAND ...``.

Every command validates its inputs first and reports problems as one line on stderr
(``ptycho COMMAND: error: ...``) with a non-zero exit: 2 for bad arguments or config,
1 for bad data files. Heavy libraries are imported inside the command that needs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ptycho import __version__
from ptycho.errors import ConfigError, PtychoError
from ptycho.nets.models import MODEL_KINDS
from ptycho.nets.xla import COMPARED, MODES, REFERENCE
from ptycho.study import checks, jobs
from ptycho.study.arms import ARM_TAGS
from ptycho.tracking.record import JobRecord


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _add_config_flags(parser: argparse.ArgumentParser, cls: type, dest_prefix: str) -> None:
    """One ``--flag`` per dataclass field, typed by its default; unset flags stay None."""
    for f in dataclasses.fields(cls):
        default = getattr(cls, f.name)
        flag = "--" + f.name.replace("_", "-")
        kind = type(default)
        parser.add_argument(
            flag,
            dest=f"{dest_prefix}{f.name}",
            type=_bool if kind is bool else kind,
            default=None,
            metavar=kind.__name__.upper(),
            help=f"default: {default}",
        )


def _config_from_args(args: argparse.Namespace, cls: type, dest_prefix: str, base: dict | None = None):
    from ptycho.config import from_dict

    values = dict(base or {})
    for f in dataclasses.fields(cls):
        v = getattr(args, f"{dest_prefix}{f.name}")
        if v is not None:
            values[f.name] = v
    return from_dict(cls, values)


def _load_yaml(path: str) -> dict[str, Any]:
    """A YAML config file's top-level mapping, or a one-line :class:`ConfigError`."""
    import yaml

    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return doc


def _load_yaml_section(path: str | None, section: str) -> dict[str, Any]:
    if not path:
        return {}
    doc = _load_yaml(path)
    data = doc.get(section, doc)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: section '{section}' must be a mapping")
    return data


# --------------------------------------------------------------------- commands
# Each command parses its arguments into values, calls one package function and returns
# its record (``ptycho.tracking.record.JobRecord``); ``_run`` prints the record's summary
# and, under ``--mlflow-parent``, hands it to tracking. ``live`` is where a long job
# reports progress as it goes (a training's epochs); it is None without a run.


def cmd_simulate(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.config import SimulationConfig

    cfg = _config_from_args(args, SimulationConfig, "sim_", _load_yaml_section(args.config, "simulation"))
    return jobs.simulate(cfg, args.train, args.test, progress=not args.quiet)


def cmd_inspect(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.data.dataset import read_dataset, summary

    ds = read_dataset(args.file)
    info = summary(ds)
    info["digest"] = ds.attrs["digest"]
    if args.json:
        return JobRecord(summary=json.dumps(info, indent=2, sort_keys=True))
    attrs, c = info["attributes"], info["counts_per_pattern"]
    return JobRecord(
        summary="\n".join(
            [
                f"{args.file}: valid ptycho dataset (schema {ds.attrs['schema_version']}, sha256 {info['digest']})",
                *(f"  {name:16s} {tuple(shape)}" for name, shape in info["shapes"].items()),
                "  " + "  ".join(f"{k}={attrs[k]}" for k in sorted(attrs) if k not in ("digest",)),
                f"  units={info['units']} scale={info['scale']:.6g} counts/pattern mean={c['mean']:.6g} "
                f"std={c['std']:.3g} min={c['min']:.6g} max={c['max']:.6g} max pixel={info['max_pixel_count']:.6g}",
            ]
        )
    )


def cmd_import(args: argparse.Namespace, live) -> JobRecord:
    """import-npz and import-cxi: another format's file -> a dataset file."""
    from ptycho.data.dataset import write_dataset

    if args.command == "import-npz":
        from ptycho.data.npz import import_npz as read
    else:
        from ptycho.data.cxi import import_cxi as read
    ds = read(args.source, gridsize=args.gridsize, split=args.split)
    digest = write_dataset(args.out, ds)
    return JobRecord(
        summary=f"{args.out}: imported {ds.diffraction.shape[0]} patterns, scale={ds.scale:.6g} sha256={digest[:16]}"
    )


def cmd_export_npz(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.data.dataset import read_dataset
    from ptycho.data.npz import export_npz

    export_npz(read_dataset(args.file), args.out)
    return JobRecord(summary=f"{args.out}: exported")


def cmd_export_cxi(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.data.cxi import CxiGeometry

    geometry = _config_from_args(args, CxiGeometry, "cxi_", _load_yaml_section(args.config, "cxi"))
    return jobs.export_cxi(args.file, args.out, geometry)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _mode(text: str) -> str:
    from ptycho.nets.xla import parse_mode

    try:
        return parse_mode(text, key=None)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cmd_train(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig

    model_cfg = _config_from_args(args, ModelConfig, "model_", _load_yaml_section(args.config, "model"))
    train_cfg = _config_from_args(args, TrainConfig, "train_", _load_yaml_section(args.config, "train"))
    return jobs.train(
        args.dataset,
        model_cfg,
        train_cfg,
        args.out,
        arm=_pairs(args.mlflow_tag),
        progress=not args.quiet,
        resume=args.resume,
        checkpoint_dir=args.checkpoint_dir,
        on_diverge=args.on_diverge,
        live=live,
    )


def cmd_infer(args: argparse.Namespace, live) -> JobRecord:
    return jobs.infer(args.model, args.dataset, args.out, xla=args.xla, batch_size=args.batch_size)


def cmd_stitch(args: argparse.Namespace, live) -> JobRecord:
    return jobs.stitch(
        args.dataset, args.reconstruction, args.out, weighted=not args.unweighted, phase_sync=not args.no_phase_sync
    )


def cmd_evaluate(args: argparse.Namespace, live) -> JobRecord:
    return jobs.evaluate(args.dataset, args.stitched, args.out)


def cmd_solve(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.solvers.gradient import SolverConfig
    from ptycho.study.solve import CHECKPOINTS, solve

    cfg = _config_from_args(args, SolverConfig, "solver_", _load_yaml_section(args.config, "solver"))
    starts = _pairs(args.start, "--start")
    for name, path in starts.items():
        if not Path(path).is_file():
            raise ConfigError(f"--start {name}={path}: no such file; give the stitched .npz of a reconstruction")
    return solve(
        args.dataset,
        args.out,
        modes=tuple(dict.fromkeys(args.modes)),
        cfg=cfg,
        starts=starts,
        stitched_dir=args.stitched_dir,
        checkpoints=args.checkpoints or CHECKPOINTS,
    )


def cmd_scaling(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.study import workflow

    cfg = workflow.resolve(_load_yaml(args.config), {"preset": args.preset})
    return jobs.scaling(cfg, args.preset, args.sizes, args.out)


def cmd_bench(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.config import SimulationConfig
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig
    from ptycho.study import bench

    models = [
        ModelConfig(
            kind=k, filters=args.filters, pooling=args.pooling, depth=args.depth, mixing=args.mixing, loss=args.loss
        )
        for k in args.models
    ]
    config = bench.BenchConfig(
        warmup=args.warmup,
        repeats=args.repeats,
        component_repeats=args.component_repeats,
        threads=args.threads_alone,
        shared=not args.no_shared,
        shared_threads=args.shared_threads,
    )
    sim = None if args.dataset else SimulationConfig(n=args.n, object_size=args.object_size, probe_kind="defocused")
    return jobs.bench(
        args.dataset,
        args.like or (),
        models,
        TrainConfig(batch_size=args.batch_size),
        args.modes,
        config,
        args.out,
        sim=sim,
    )


def _json_object(text: str, what: str, fix: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or a one-line :class:`ConfigError` naming ``what`` and the ``fix``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{what} is not valid JSON ({err.msg} at character {err.pos}); {fix}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object, not {type(value).__name__}; {fix}")
    return value


def cmd_config(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.artifacts import write_json

    config = _json_object(args.json, "--json", "pass a JSON object")
    write_json(args.out, config)
    return JobRecord(summary=f"{args.out}: resolved configuration (preset {config.get('preset', '?')})")


def cmd_track(args: argparse.Namespace, live) -> JobRecord:
    from ptycho import tracking
    from ptycho.artifacts import read_json

    if args.action == "replay":
        if not args.journal:
            raise PtychoError("track replay: name the journal files or folders (<results>/<preset>/mlflow/journal/)")
        files = tracking.journal_files(args.journal)
        if not files:
            raise PtychoError(f"track replay: no .jsonl journal in {' '.join(args.journal)}")
        lines = []
        for path in files:
            counts = tracking.replay_journal(path, args.tracking_uri)
            lines.append(f"{path}: replayed " + " ".join(f"{k}={v}" for k, v in counts.items()))
        return JobRecord(summary="\n".join(lines))
    if args.action == "sweep":
        if not args.parent:
            raise PtychoError("track sweep: --parent is required (the JSON written by 'track start')")
        parent = read_json(args.parent)
        ended = tracking.end_stale_children(parent["tracking_uri"], parent["run_id"], by="'ptycho track sweep'")
        return JobRecord(
            summary=f"MLflow parent run {parent['run_id']}: {len(ended)} stale child run(s) marked KILLED"
            + (f" ({', '.join(ended)})" if ended else "")
        )
    if args.action == "start":
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
            config = _json_object(
                os.environ["PTYCHO_CONFIG_JSON"], "PTYCHO_CONFIG_JSON", "unset it or pass --config-json"
            )
        # The workflow's config names the experiment, the run and the store's folder.
        experiment = args.experiment or config.get("study") or "xla-ptycho"
        run_name = args.run_name or (f"{experiment}-{config['preset']}" if config.get("preset") else "pipeline")
        tags = {**({"preset": config["preset"]} if config.get("preset") else {}), **_pairs(args.tag)}
        record = tracking.start_pipeline(
            config, args.results or config.get("results") or "results", experiment, run_name, tags, args.out
        )
        return JobRecord(summary=f"{args.out}: MLflow parent run {record['run_id']} at {record['tracking_uri']}")
    if not args.parent:
        raise ConfigError(
            "'track finish' needs --parent (the JSON written by 'track start'); see 'ptycho track --help'"
        )
    if not Path(args.parent).exists():  # e.g. the workflow's error hook, when the pipeline stopped before 'track start'
        raise PtychoError(
            f"{args.parent}: no such file, so there is no MLflow parent run to mark {args.status} "
            "(it is written by 'track start')"
        )
    parent = read_json(args.parent)
    tracking.finish_run(parent["tracking_uri"], parent["run_id"], args.status)
    return JobRecord(summary=f"MLflow parent run {parent['run_id']}: {args.status}")


def cmd_check(args: argparse.Namespace, live) -> JobRecord:
    return jobs.check(
        args.item,
        args.threshold,
        args.out,
        model_jsons=args.models or (),
        dataset=args.dataset,
        metrics=args.metrics or (),
        bench=args.bench,
        modes=args.modes,
        loss=args.loss,
        context=args.context,
    )


def cmd_report(args: argparse.Namespace, live) -> JobRecord:
    from ptycho.artifacts import read_json

    parent = read_json(args.finish_parent) if args.finish_parent else {}
    return jobs.report(
        args.checks,
        args.models,
        args.metrics,
        args.reconstructions or (),
        args.figures or (),
        args.benchmarks,
        read_json(args.config_json),
        args.out_dir,
        parent,
        solver=args.solver or (),
    )


def cmd_figures(args: argparse.Namespace, live) -> JobRecord:
    return jobs.figures(
        args.dataset,
        args.stitched,
        args.metrics,
        args.models,
        args.bench,
        args.out_dir,
        solver=args.solver or (),
        reconstructions=args.reconstructions or (),
    )


def _pairs(items: list[str] | None, what: str = "tag") -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {item!r} is not KEY=VALUE")
        out[key] = value
    return out


_SOLVER_HELP = "'ptycho solve' records: every mode from a flat start, then (optional) the warm starts"


def build_parser() -> argparse.ArgumentParser:
    from ptycho.config import SimulationConfig
    from ptycho.solvers.gradient import SolverConfig

    parser = _Parser(
        prog="ptycho", description="Simulate, train, reconstruct and score ptychography with and without XLA."
    )
    parser.add_argument("--version", action="version", version=f"ptycho {__version__}")
    parser.add_argument(
        "--mlflow-parent",
        metavar="JSON",
        help="log this command as a child run of the parent run in JSON (written by 'track start')",
    )
    parser.add_argument("--mlflow-tag", action="append", metavar="KEY=VALUE", help="tag of the child run (repeatable)")
    parser.add_argument("--threads", type=int, metavar="N", help="TensorFlow intra-op threads (default: all cores)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("simulate", help="simulate a train/test pair of datasets (HDF5)")
    p.add_argument("--train", required=True, help="output path of the train split (.h5)")
    p.add_argument("--test", required=True, help="output path of the test split (.h5)")
    p.add_argument("--config", help="YAML file; its 'simulation' section (or the whole file) sets defaults")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_config_flags(p, SimulationConfig, "sim_")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("inspect", help="validate a dataset file and print its summary")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("import-npz", help="convert a PtychoPINN-style NPZ into a dataset file")
    p.add_argument("source", metavar="npz")
    p.add_argument("--out", required=True)
    p.add_argument("--gridsize", type=int, choices=(1, 2), default=1)
    p.add_argument("--split", choices=("train", "test"), default="train")
    p.set_defaults(func=cmd_import)

    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig

    p = sub.add_parser("train", help="train a PINN or baseline model on a dataset")
    p.add_argument("--dataset", required=True, help="training split (.h5)")
    p.add_argument("--out", required=True, help="output folder (model.keras, model.json)")
    p.add_argument("--config", help="YAML file with 'model' and 'train' sections")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the saved state in the checkpoint folder if it has the same configuration and dataset",
    )
    p.add_argument("--checkpoint-dir", help="folder of the resumable state (default: OUT/checkpoint)")
    p.add_argument(
        "--on-diverge",
        choices=("raise", "record"),
        default="raise",
        help="on a NaN/inf loss: fail (raise, the default) or write the last good state as the model, "
        "marked status FAILED in model.json, and exit 0 (record)",
    )
    _add_config_flags(p, ModelConfig, "model_")
    _add_config_flags(p, TrainConfig, "train_")
    p.set_defaults(func=cmd_train, system_metrics=True, tensorflow=True)

    p = sub.add_parser("infer", help="reconstruct every pattern of a dataset with a trained model")
    p.add_argument("--model", required=True, help="folder written by 'ptycho train'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="reconstruction (.npz)")
    p.add_argument(
        "--xla", type=_mode, default=None, help="override the training arm's XLA mode (off, jit, auto, physics)"
    )
    p.add_argument("--batch-size", type=int, default=None, help="fixed predict batch (default: training batch)")
    p.set_defaults(func=cmd_infer, tensorflow=True)

    p = sub.add_parser("stitch", help="stitch reconstructed patches into full objects")
    p.add_argument("--reconstruction", required=True, help=".npz written by 'ptycho infer'")
    p.add_argument("--dataset", required=True, help="the dataset that was reconstructed")
    p.add_argument("--out", required=True, help="stitched objects (.npz)")
    p.add_argument("--unweighted", action="store_true", help="plain average instead of illumination weighting")
    p.add_argument(
        "--no-phase-sync",
        action="store_true",
        help="keep each patch's own constant phase (default: align overlapping patches first)",
    )
    p.set_defaults(func=cmd_stitch)

    p = sub.add_parser("evaluate", help="score stitched objects against the ground truth")
    p.add_argument("--stitched", required=True, help=".npz written by 'ptycho stitch'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="metrics (.json)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "solve",
        help="reconstruct with the iterative solver (known probe) under XLA modes, timed interleaved; "
        "optionally warm-started from stitched network reconstructions",
    )
    p.add_argument("--dataset", required=True, help="dataset with probe and positions (the test split)")
    p.add_argument("--out", required=True, help="record (.json): timing, misfit, quality against iterations")
    p.add_argument("--stitched-dir", help="folder for solver-<mode>.npz (the flat start's objects, stitched format)")
    modes = [REFERENCE, COMPARED[0]]
    p.add_argument("--modes", type=_mode, nargs="+", default=modes, help=f"XLA modes (default: {' '.join(modes)})")
    p.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="NAME=NPZ",
        help="also start from this stitched reconstruction (repeatable), besides the flat start",
    )
    p.add_argument("--checkpoints", type=int, nargs="+", help="iterations at which to score (default: 0 1 2 3 5 ...)")
    p.add_argument("--config", help="YAML file whose 'solver' section gives the settings (flags override it)")
    _add_config_flags(p, SolverConfig, "solver_")
    p.set_defaults(func=cmd_solve, tensorflow=True)

    p = sub.add_parser(
        "bench", help="time every XLA mode vs off: compile, step alone and shared, components, memory, inference"
    )
    p.add_argument("--dataset", help="dataset to time on (default: simulate the default train split)")
    p.add_argument("--object-size", type=int, default=128, help="object side when simulating (default 128)")
    p.add_argument("--n", type=int, default=64, help="patch side when simulating (default 64)")
    p.add_argument("--models", nargs="+", choices=MODEL_KINDS, default=list(MODEL_KINDS))
    p.add_argument("--filters", type=int, default=32, help="encoder filters (default: the pipeline's)")
    p.add_argument("--pooling", choices=("max", "avg", "strided"), default="avg")
    p.add_argument("--depth", type=int, default=2, help="encoder pooling levels (default: the pipeline's)")
    p.add_argument("--mixing", type=int, default=1, help="code mixing layers (default: the pipeline's)")
    p.add_argument("--loss", choices=("poisson", "mae"), default="mae", help="PINN loss (default: the pipeline's)")
    p.add_argument(
        "--like",
        nargs="+",
        metavar="MODEL_JSON",
        help="time the architecture, loss and batch size of these trained models (model.json), "
        "instead of --filters/--pooling/--depth/--mixing/--loss/--batch-size",
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument(
        "--modes",
        nargs="+",
        type=_mode,
        default=list(MODES),
        help=f"XLA modes to time ({', '.join(MODES)}); off is always added (default: all)",
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=60, help="timed steps per arm and context")
    p.add_argument("--component-repeats", type=int, default=20, help="timed calls of each step component")
    p.add_argument("--threads-alone", type=int, default=0, help="intra-op threads per arm alone (default: all cores)")
    p.add_argument(
        "--shared-threads",
        type=int,
        default=1,
        help="intra-op threads per arm when all arms share the cores (default: the pipeline's train_threads)",
    )
    p.add_argument("--no-shared", action="store_true", help="time the arms alone only")
    p.add_argument("--out", help="also write the full result as JSON")
    p.set_defaults(func=cmd_bench, system_metrics=True)  # TensorFlow runs in its workers

    p = sub.add_parser("scaling", help="time simulation, one training epoch and stitching at several data sizes")
    p.add_argument("--config", default="config.yaml", help="the study's config (default: config.yaml)")
    p.add_argument("--preset", default="default", help="its preset to time (default: default)")
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 4], help="objects per split (default: 1 2 4)")
    p.add_argument("--out", help="also write the result as JSON")
    p.set_defaults(func=cmd_scaling, tensorflow=True)

    p = sub.add_parser("config", help="write a resolved configuration (JSON text) to a file, atomically")
    p.add_argument("--json", required=True, help="the configuration, a JSON object")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_config)

    p = sub.add_parser(
        "track", help="start or finish the pipeline's MLflow parent run; replay journals; end stale runs"
    )
    p.add_argument(
        "action",
        choices=("start", "finish", "replay", "sweep"),
        help="replay: send journals (JSONL kept beside the outputs) to MLflow again, idempotently; "
        "sweep: mark KILLED the RUNNING child runs whose process is gone",
    )
    p.add_argument("journal", nargs="*", help="(replay) journal files or folders, e.g. results/smoke/mlflow/journal")
    p.add_argument("--tracking-uri", help="(replay) send to this store instead of the one recorded in the journal")
    p.add_argument(
        "--config-json",
        help="(start) resolved config file, logged as the parent's params "
        "(default: the JSON in $PTYCHO_CONFIG_JSON, as the workflow sets it)",
    )
    p.add_argument("--experiment", help="(start) default: the config's study, else xla-ptycho")
    p.add_argument("--run-name", help="(start) default: <study>-<preset> from the config, else pipeline")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE")
    p.add_argument("--out", help="(start) where to write the parent run's id and tracking URI")
    p.add_argument(
        "--results",
        help="(start) folder of the embedded store <results>/mlflow.db (default: the config's results, else results)",
    )
    p.add_argument("--parent", help="(finish, sweep) the JSON written by 'track start'")
    p.add_argument("--status", choices=("FINISHED", "FAILED", "KILLED"), default="FINISHED")
    p.set_defaults(func=cmd_track)

    p = sub.add_parser("check", help="measure and judge one validation checklist item")
    p.add_argument("item", choices=checks.ITEMS)
    p.add_argument("--threshold", type=float, required=True)
    p.add_argument("--models", nargs="*", default=[], help="model.json files (accuracy, convergence, quality, speedup)")
    p.add_argument("--dataset", help="test split the trained models are run on (accuracy)")
    p.add_argument("--metrics", nargs="*", default=[], help="metrics JSON files (quality)")
    p.add_argument("--bench", help="bench JSON (speedup)")
    p.add_argument("--loss", choices=("poisson", "mae"), default="poisson", help="PINN loss (gradients)")
    p.add_argument(
        "--modes",
        nargs="+",
        type=_mode,
        default=list(COMPARED),
        help="XLA modes compared with off (accuracy, gradients; default: all)",
    )
    p.add_argument(
        "--context",
        choices=("alone", "shared"),
        default="alone",
        help="the benchmark context the speedup verdict is for (speedup)",
    )
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("figures", help="draw the report's figures (PNG) from the pipeline's outputs")
    p.add_argument("--dataset", required=True, help="the test split (ground truth)")
    p.add_argument("--stitched", nargs="+", required=True, help=".npz files written by 'ptycho stitch'")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files (FRC curves)")
    p.add_argument("--models", nargs="+", required=True, help="model.json files of the arms (loss curves)")
    p.add_argument("--bench", required=True, help="the benchmark's JSON (step times, speedup intervals)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--solver", nargs="*", help=_SOLVER_HELP)
    p.add_argument("--reconstructions", nargs="*", help="'ptycho infer' outputs: the networks' seconds per object")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("report", help="assemble reports/<preset>/validation.{json,md,html}")
    p.add_argument("--checks", nargs="+", required=True)
    p.add_argument("--metrics", nargs="+", required=True)
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--reconstructions", nargs="*")
    p.add_argument("--figures", nargs="*", help="PNG files written by 'ptycho figures' (embedded in the HTML)")
    p.add_argument("--config-json", required=True)
    p.add_argument("--out-dir", default="reports")
    p.add_argument("--finish-parent", help="parent JSON: attach the report and mark the parent run FINISHED")
    p.add_argument(
        "--benchmarks", help="folder of the jobs' Snakemake benchmark TSVs: the report says where the time went"
    )
    p.add_argument("--solver", nargs="*", help=_SOLVER_HELP)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export-npz", help="write a dataset file as a PtychoPINN-style NPZ")
    p.add_argument("file")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_export_npz)

    from ptycho.data.cxi import CxiGeometry

    p = sub.add_parser(
        "export-cxi", help="write a dataset file as CXI 1.6 (ptychodus, NXcxi_ptycho), in physical units"
    )
    p.add_argument("file")
    p.add_argument("--out", required=True)
    p.add_argument("--config", help="YAML file whose 'cxi' section gives the geometry (flags override it)")
    _add_config_flags(p, CxiGeometry, "cxi_")
    p.set_defaults(func=cmd_export_cxi)

    p = sub.add_parser("import-cxi", help="convert a CXI 1.6 file into a dataset file")
    p.add_argument("source", metavar="cxi")
    p.add_argument("--out", required=True)
    p.add_argument("--gridsize", type=int, choices=(1, 2), default=1, help="(CXI files from elsewhere) grouping")
    p.add_argument("--split", choices=("train", "test"), default="train", help="(CXI files from elsewhere)")
    p.set_defaults(func=cmd_import)
    return parser


#: Output arguments of every command: (attribute, flag, is a folder). Checked before the
#: command does any work, so that an unwritable path costs a second, not a simulation.
_OUTPUTS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "simulate": (("train", "--train", False), ("test", "--test", False)),
    "import-npz": (("out", "--out", False),),
    "export-npz": (("out", "--out", False),),
    "export-cxi": (("out", "--out", False),),
    "import-cxi": (("out", "--out", False),),
    "train": (("out", "--out", True),),
    "infer": (("out", "--out", False),),
    "stitch": (("out", "--out", False),),
    "evaluate": (("out", "--out", False),),
    "solve": (("out", "--out", False), ("stitched_dir", "--stitched-dir", True)),
    "bench": (("out", "--out", False),),
    "scaling": (("out", "--out", False),),
    "track": (("out", "--out", False),),
    "config": (("out", "--out", False),),
    "check": (("out", "--out", False),),
    "figures": (("out_dir", "--out-dir", True),),
    "report": (("out_dir", "--out-dir", True),),
}


def _writable_problem(path: Path, folder: bool) -> str | None:
    """Why ``path`` could not be written (``strerror``-like), or None; creates nothing.

    The deepest existing ancestor must be a folder in which a file can be created (tried
    for real with a temporary file, removed at once: permission bits do not tell the
    whole story for root, read-only mounts or /proc).
    """
    import tempfile

    if path.exists():
        if folder and not path.is_dir():
            return "it is a file, not a folder"
        if not folder and path.is_dir():
            return "Is a directory"
    probe = path if folder and path.is_dir() else path.parent
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: the target's folder decides, let the write say it
            return None
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written, and two outputs on one path, up front."""
    seen: dict[Path, str] = {}
    for attr, flag, folder in _OUTPUTS.get(args.command, ()):
        value = getattr(args, attr, None)
        if not value:
            continue
        path = Path(value)
        key = Path(os.path.abspath(path))
        if key in seen:
            raise ConfigError(f"{seen[key]} and {flag} are the same path {value}; give each output its own path")
        seen[key] = flag
        problem = _writable_problem(path, folder)
        if problem:
            raise ConfigError(f"cannot write {flag} {value} ({problem}); choose a writable path")


def _run(args: argparse.Namespace) -> int:
    """Run the command and print its summary; under ``--mlflow-parent``, inside an MLflow
    child run that receives the command's record: the CLI's one tracking hook."""
    if not args.mlflow_parent:
        _done(args, args.func(args, None))
        return 0
    from contextlib import nullcontext

    from ptycho import tracking
    from ptycho.artifacts import read_json
    from ptycho.tracking.record import log_record

    parent = read_json(args.mlflow_parent)
    commit = tracking.git_commit(Path.cwd())
    tags = dict(_pairs(args.mlflow_tag), command=args.command, git_commit=commit)
    # The configuration in force for this job (the workflow exports it; it may differ
    # from the parent's after a config change re-ran some jobs).
    tags.setdefault("config_hash", os.environ.get("PTYCHO_CONFIG_HASH") or parent.get("config_hash", ""))
    if "SLURM_JOB_ID" in os.environ:
        tags["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    name = "-".join(v for k, v in tags.items() if k in ("rule", *ARM_TAGS) and v) or args.command
    # Everything the job logs also goes to a journal beside the pipeline's outputs, so
    # that nothing is lost if the tracking server goes away ('ptycho track replay').
    journal = Path(args.mlflow_parent).resolve().parent / "journal" / f"{name.replace('/', '_')}.jsonl"
    # The arm as params too (not only tags): the runs table filters and the compare view
    # lines runs up by params, and every run of an arm then carries the same ones.
    params = {f"arm.{k}": tags[k] for k in ARM_TAGS if k in tags}
    if _uses_tensorflow(args):
        from ptycho.runtime import device_info

        info = device_info()
        tags.update(device=info["device"], gpus=", ".join(info["gpus"]) or "none")
    tags.update(tracking.source_tags(commit))
    with tracking.child_run(parent["tracking_uri"], parent["run_id"], name, tags, params, journal=journal) as run:
        _end_stale_runs(parent, name)
        with tracking.system_metrics(run) if getattr(args, "system_metrics", False) else nullcontext():
            record = args.func(args, lambda step, metrics: run.log_metrics(metrics, step=step))
        log_record(run, record, tags)
        _done(args, record)
    return 0


def _done(args: argparse.Namespace, record: JobRecord) -> None:
    """Close the study's parent run if the record says so (the report's job), then print
    the record's summary (a failure recorded as a result goes to stderr)."""
    if record.close_parent:
        from ptycho import tracking

        parent = record.close_parent
        tracking.close_pipeline(parent["tracking_uri"], parent["run_id"], record.parent_artifacts)
    if record.summary:
        print(record.summary, file=sys.stderr if record.failure else sys.stdout)


def _end_stale_runs(parent: dict, name: str) -> None:
    """Close the runs of earlier attempts whose process was killed; never fails the job."""
    import logging

    from ptycho import tracking

    try:
        ended = tracking.end_stale_children(
            parent["tracking_uri"], parent["run_id"], by=f"job {name} (pid {os.getpid()})"
        )
    except Exception as exc:  # bookkeeping of other runs must not stop this one
        logging.getLogger(__name__).warning("could not look for stale MLflow runs: %s", exc)
        return
    if ended:
        print(
            f"ptycho: marked {len(ended)} stale MLflow run(s) of killed jobs KILLED: {', '.join(ended)}",
            file=sys.stderr,
        )


def _terminate(signum, frame):  # noqa: ARG001
    # Snakemake cancels jobs with SIGTERM: raise, so runs end KILLED and temp files go.
    raise KeyboardInterrupt


def _uses_tensorflow(args: argparse.Namespace) -> bool:
    return getattr(args, "tensorflow", False) or (args.command == "check" and args.item in checks.MEASURED)


def main(argv: Sequence[str] | None = None) -> int:
    import logging
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    # MLflow logs a traceback for every sqlite lock it then recovers from by retrying.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    from ptycho.nets.xla import xla_flags_environment

    # Read by TensorFlow when it initialises; set before its (lazy) import. The XLA flag
    # lets the auto mode cluster on CPU and changes nothing for the others (ptycho.nets.xla).
    os.environ.update(xla_flags_environment())
    if args.threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = str(args.threads)
        os.environ["TF_NUM_INTEROP_THREADS"] = "1" if args.threads <= 2 else "2"
    try:
        check_outputs(args)
        if _uses_tensorflow(args):
            from ptycho.runtime import import_tensorflow

            import_tensorflow()  # now, with its start-up notices filtered (ptycho.runtime)
        return _run(args)
    except PtychoError as err:
        print(f"ptycho {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"ptycho {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``ptycho inspect f.h5 | head -3``): stop quietly, and
        # point stdout at /dev/null so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
