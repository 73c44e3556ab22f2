"""Network and reconstruction commands: train, infer, stitch, evaluate, solve."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ptycho.cli.declare import Live, arg, command, config_flags, config_from_args, config_section
from ptycho.cli.values import load_yaml_section, mode, pairs
from ptycho.data.cxi import CxiGeometry
from ptycho.errors import ConfigError
from ptycho.nets.models import ModelConfig, method_of
from ptycho.nets.train import TrainConfig
from ptycho.nets.xla import COMPARED, MODES, REFERENCE
from ptycho.solvers.engines import SolverConfig
from ptycho.study import jobs
from ptycho.study.solve import CHECKPOINTS
from ptycho.tracking.record import JobRecord

#: What ``train --on-diverge`` may do (ptycho.nets.train.train's ``on_diverge``), the first by default.
ON_DIVERGE = ("raise", "record")


@command(
    "train",
    "train a PINN or baseline model on a dataset",
    arg("--dataset", required=True, help="training split (.h5)"),
    arg("--out", required=True, output="folder", help="output folder (model.keras, model.json)"),
    arg("--config", help="YAML file with 'model' and 'train' sections"),
    arg("--quiet", action="store_true", help="no progress bars"),
    arg(
        "--resume",
        action="store_true",
        help="continue from the saved state in the checkpoint folder if it has the same configuration and dataset",
    ),
    arg("--checkpoint-dir", help="folder of the resumable state (default: OUT/checkpoint)"),
    arg(
        "--on-diverge",
        choices=ON_DIVERGE,
        default=ON_DIVERGE[0],
        help="on a NaN/inf loss: fail (raise, the default) or write the last good state as the model, "
        "marked status FAILED in model.json, and exit 0 (record); a collapsed training (final validation "
        "loss not below a featureless object's) is kept as it ended, marked FAILED, and fails or exits 0 alike",
    ),
    config_flags(ModelConfig, "model_"),
    config_flags(TrainConfig, "train_"),
    tensorflow=True,
    system_metrics=True,
)
def cmd_train(args: argparse.Namespace, live: Live) -> JobRecord:
    sections = {name: load_yaml_section(args.config, name) for name in ("model", "train")}
    model_cfg = config_from_args(args, ModelConfig, "model_", sections["model"])
    if not method_of(model_cfg.kind).physics:
        from ptycho.data.provenance import require_ground_truth

        require_ground_truth(args.dataset, f"a {model_cfg.kind} model (trained on object patches) cannot learn from it")
    return jobs.train(
        args.dataset,
        model_cfg,
        config_from_args(args, TrainConfig, "train_", sections["train"]),
        args.out,
        arm=pairs(args.mlflow_tag),
        progress=not args.quiet,
        resume=args.resume,
        checkpoint_dir=args.checkpoint_dir,
        on_diverge=args.on_diverge,
        live=live,
    )


@command(
    "infer",
    "reconstruct every pattern of a dataset with a trained model",
    arg("--model", required=True, help="folder written by 'ptycho train'"),
    arg("--dataset", required=True),
    arg("--out", required=True, output=True, help="reconstruction (.npz)"),
    arg("--xla", type=mode, default=None, help=f"override the training arm's XLA mode ({', '.join(MODES)})"),
    arg("--batch-size", type=int, default=None, help="fixed predict batch (default: training batch)"),
    tensorflow=True,
)
def cmd_infer(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.infer(args.model, args.dataset, args.out, xla=args.xla, batch_size=args.batch_size)


@command(
    "stitch",
    "stitch reconstructed patches into full objects",
    arg("--reconstruction", required=True, help=".npz written by 'ptycho infer'"),
    arg("--dataset", required=True, help="the dataset that was reconstructed"),
    arg("--out", required=True, output=True, help="stitched objects (.npz)"),
    arg("--unweighted", action="store_true", help="plain average instead of illumination weighting"),
    arg(
        "--no-phase-sync",
        action="store_true",
        help="keep each patch's own constant phase (default: align overlapping patches first)",
    ),
)
def cmd_stitch(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.provenance import check_made_from

    _warn("stitch", check_made_from(args.reconstruction, args.dataset, "'ptycho infer'"))
    return jobs.stitch(
        args.dataset, args.reconstruction, args.out, weighted=not args.unweighted, phase_sync=not args.no_phase_sync
    )


#: The products' flags of ``evaluate`` and ``solve`` (docs/ptychodus.md), beside each one's folder flag.
_PRODUCT_ARGS = (
    arg("--name", default="", help="the products' name (default: the input file's stem)"),
    arg(
        "--assumed-geometry",
        action="store_true",
        help="the data did not come with the --cxi geometry (measured data): the products' comments say so",
    ),
    config_flags(CxiGeometry, "cxi_"),
)


def _products(args: argparse.Namespace, folder: str | None, stem: str, what: str, model: str | None = None):
    """The :class:`ptycho.study.products.Products` the flags ask for, or None without a folder."""
    from ptycho.study import products

    if not folder:
        return None
    geometry = config_from_args(args, CxiGeometry, "cxi_")
    name = args.name or stem
    source = products.ASSUMED if args.assumed_geometry else products.SIMULATED
    return products.Products(
        folder=folder,
        name=name,
        comments=products.comments(f"{what} {name}", args.mlflow_parent, geometry, source),
        geometry=geometry,
        losses=products.training_losses(model) if model else (),
    )


@command(
    "evaluate",
    "score stitched objects against the ground truth (measured data, which has none: their data misfit); "
    "optionally write them as ptychodus products",
    arg("--stitched", required=True, help=".npz written by 'ptycho stitch'"),
    arg("--dataset", required=True),
    arg("--out", required=True, output=True, help="metrics (.json)"),
    arg(
        "--product-dir",
        output="folder",
        help="also write each object as a ptychodus product, <dir>/object-<m>.h5 (docs/ptychodus.md)",
    ),
    arg(
        "--model",
        help="the network's folder written by 'ptycho train' (or its model.json): its training losses go into the products",
    ),
    *_PRODUCT_ARGS,
)
def cmd_evaluate(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.provenance import check_made_from

    _warn("evaluate", check_made_from(args.stitched, args.dataset, "'ptycho infer' and 'ptycho stitch'"))
    products = _products(args, args.product_dir, Path(args.stitched).stem, "reconstruction", args.model)
    return jobs.evaluate(args.dataset, args.stitched, args.out, products=products)


def _warn(command: str, warning: str | None) -> None:
    if warning:
        print(f"ptycho {command}: warning: {warning}", file=sys.stderr)


_SOLVE_MODES = [REFERENCE, COMPARED[0]]


@command(
    "solve",
    "reconstruct with the iterative solver (known probe) under XLA modes, timed interleaved; "
    "optionally warm-started from stitched network reconstructions",
    arg("--dataset", required=True, help="dataset with probe and positions (the test split)"),
    arg("--out", required=True, output=True, help="record (.json): timing, misfit, quality against iterations"),
    arg(
        "--stitched-dir",
        output="folder",
        help="folder for solver-<mode>.npz (the flat start's objects, stitched format)",
    ),
    arg("--modes", type=mode, nargs="+", default=_SOLVE_MODES, help=f"XLA modes (default: {' '.join(_SOLVE_MODES)})"),
    arg(
        "--start",
        action="append",
        default=[],
        metavar="NAME=NPZ",
        help="also start from this stitched reconstruction (repeatable), besides the flat start",
    ),
    arg(
        "--checkpoints",
        type=int,
        nargs="+",
        help=f"iterations at which to score (default: {' '.join(map(str, CHECKPOINTS[:5]))} ...)",
    ),
    arg("--config", help="YAML file whose 'solver' section gives the settings (flags override it)"),
    arg(
        "--products-dir",
        output="folder",
        help="also write each mode's flat-start objects as ptychodus products, <dir>/solver-<mode>/object-<m>.h5",
    ),
    *_PRODUCT_ARGS,
    config_flags(SolverConfig, "solver_"),
    tensorflow=True,
)
def cmd_solve(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.study.solve import solve

    products = _products(args, args.products_dir, Path(args.dataset).stem, "the iterative solver on")
    cfg = config_section(args, SolverConfig, "solver_", "solver")
    starts = pairs(args.start, "--start")
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
        products=products,
    )


@command(
    "refine-probe",
    "refine a measured scan's probe with the iterative solver (object and probe together) and write the splits "
    "again with it (the workflow's refine_probe rule: config data.probe)",
    arg("--dataset", required=True, help="the dataset whose patterns refine the probe (the training split)"),
    arg(
        "--write",
        action="append",
        required=True,
        metavar="DATASET=OUT",
        help="write DATASET again as OUT with the refined probe (repeatable; the --dataset itself too)",
    ),
    arg("--out", required=True, output=True, help="record (.json): the probe's change, misfit given and refined"),
    arg("--mode", type=mode, default=REFERENCE, help=f"the solver's XLA mode (default: {REFERENCE})"),
    arg("--config", help="YAML file whose 'solver' section gives the settings (flags override it)"),
    config_flags(SolverConfig, "solver_"),
    tensorflow=True,
)
def cmd_refine_probe(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.study.probe import refine_probe

    cfg = config_section(args, SolverConfig, "solver_", "solver")
    targets = pairs(args.write, "--write")
    for path in targets:
        if not Path(path).is_file():
            raise ConfigError(f"--write {path}=...: no such file; give a dataset (.h5) of the study")
    if len(set(targets.values())) != len(targets) or set(targets.values()) & set(targets):
        raise ConfigError("--write: each dataset needs its own OUT, none of them an input; name new files")
    return refine_probe(args.dataset, list(targets.items()), args.out, cfg=cfg, mode=args.mode)


@command(
    "calibrate",
    "time a few steps of every arm a study plans, for its estimate (the workflow runs this once per machine and config)",
    arg("--config-json", required=True, help="the resolved study configuration, a JSON object"),
    arg("--at-once", type=int, default=1, help="arms stepping together (the trainings the pipeline runs at once)"),
    arg("--threads-per-arm", type=int, default=1, help="TensorFlow threads per arm (train_threads)"),
    arg("--out", required=True, output=True, help="calibration JSON"),
)
def cmd_calibrate(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.artifacts import write_json
    from ptycho.cli.values import json_object
    from ptycho.study.calibration import calibrate

    if args.at_once < 1 or args.threads_per_arm < 1:
        raise ConfigError("--at-once and --threads-per-arm must be at least 1")
    config = json_object(args.config_json, "--config-json", "pass the workflow's resolved configuration")
    record = calibrate(config, args.at_once, args.threads_per_arm)
    write_json(args.out, record)
    return JobRecord(summary=f"{args.out}: {len(record['arms'])} arms calibrated")
