"""Command-line interface: ``python -m ptycho COMMAND ...``.

Every command validates its inputs first and reports problems as one line on stderr
(``ptycho COMMAND: error: ...``) with a non-zero exit: 2 for bad arguments or config,
1 for bad data files. Heavy libraries are imported inside the command that needs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ptycho import __version__
from ptycho.errors import PtychoError


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


def _load_yaml_section(path: str | None, section: str) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    from ptycho.errors import ConfigError

    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    data = doc.get(section, doc)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: section '{section}' must be a mapping")
    return data


# --------------------------------------------------------------------- commands
def cmd_simulate(args: argparse.Namespace) -> int:
    from ptycho.config import SimulationConfig
    from ptycho.data import write_dataset
    from ptycho.simulate import simulate

    cfg = _config_from_args(args, SimulationConfig, "sim_", _load_yaml_section(args.config, "simulation"))
    datasets = simulate(cfg, progress=not args.quiet)
    for split, path in (("train", args.train), ("test", args.test)):
        digest = write_dataset(path, datasets[split])
        ds = datasets[split]
        print(
            f"{split}: {path}  patterns={ds.diffraction.shape[0]} groups={ds.groups.shape[0]} "
            f"scale={ds.scale:.6g} sha256={digest[:16]}"
        )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ptycho.data import read_dataset, summary

    ds = read_dataset(args.file)
    info = summary(ds)
    info["digest"] = ds.attrs["digest"]
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"{args.file}: valid ptycho dataset (schema {ds.attrs['schema_version']}, sha256 {info['digest']})")
    for name, shape in info["shapes"].items():
        print(f"  {name:16s} {tuple(shape)}")
    attrs = info["attributes"]
    print("  " + "  ".join(f"{k}={attrs[k]}" for k in sorted(attrs) if k not in ("digest",)))
    c = info["counts_per_pattern"]
    print(
        f"  units={info['units']} scale={info['scale']:.6g} counts/pattern mean={c['mean']:.6g} "
        f"std={c['std']:.3g} min={c['min']:.6g} max={c['max']:.6g} max pixel={info['max_pixel_count']:.6g}"
    )
    return 0


def cmd_import_npz(args: argparse.Namespace) -> int:
    from ptycho.data import write_dataset
    from ptycho.npz import import_npz

    ds = import_npz(args.npz, gridsize=args.gridsize, split=args.split)
    digest = write_dataset(args.out, ds)
    print(f"{args.out}: imported {ds.diffraction.shape[0]} patterns, scale={ds.scale:.6g} sha256={digest[:16]}")
    return 0


def cmd_export_npz(args: argparse.Namespace) -> int:
    from ptycho.data import read_dataset
    from ptycho.npz import export_npz

    export_npz(read_dataset(args.file), args.out)
    print(f"{args.out}: exported")
    return 0


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def cmd_train(args: argparse.Namespace) -> int:
    from ptycho.data import read_dataset
    from ptycho.models import ModelConfig
    from ptycho.train import TrainConfig, train

    model_cfg = _config_from_args(args, ModelConfig, "model_", _load_yaml_section(args.config, "model"))
    train_cfg = _config_from_args(args, TrainConfig, "train_", _load_yaml_section(args.config, "train"))
    ds = read_dataset(args.dataset)
    meta = train(ds, model_cfg, train_cfg, args.out, progress=not args.quiet)
    last = meta["history"][-1]
    t = meta["timing"]
    print(
        f"{args.out}: {model_cfg.kind} xla={train_cfg.xla} epochs={last['epoch']} train_loss={last['train_loss']:.6g} "
        f"val_loss={last['val_loss']:.6g} compile={t['compile_s']:.2f}s step_median={t['step_median_s'] or float('nan'):.4f}s"
    )
    return 0


def cmd_infer(args: argparse.Namespace) -> int:
    from ptycho.artifacts import write_arrays
    from ptycho.data import read_dataset
    from ptycho.infer import reconstruct

    ds = read_dataset(args.dataset)
    rec = reconstruct(args.model, ds, xla=args.xla, batch_size=args.batch_size)
    write_arrays(
        args.out,
        patches=rec.patches,
        positions=rec.positions,
        position_object=rec.position_object,
        seconds=np.float64(rec.seconds),
        compile_seconds=np.float64(rec.compile_seconds),
        patterns=np.int64(rec.patterns),
    )
    print(f"{args.out}: {len(rec.patches)} patches, {rec.patterns_per_second:.1f} patterns/s, compile {rec.compile_seconds:.2f}s")
    return 0


def cmd_stitch(args: argparse.Namespace) -> int:
    from ptycho.artifacts import read_arrays, write_arrays
    from ptycho.data import read_dataset
    from ptycho.stitch import stitch_objects

    ds = read_dataset(args.dataset)
    rec = read_arrays(args.reconstruction, ("patches", "positions", "position_object"))
    images = stitch_objects(rec["patches"], rec["positions"], rec["position_object"], ds, weighted=not args.unweighted)
    write_arrays(args.out, images=np.stack(images).astype(np.complex64))
    print(f"{args.out}: {len(images)} stitched object(s) of shape {images[0].shape}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ptycho.artifacts import read_arrays, write_json
    from ptycho.data import read_dataset
    from ptycho.errors import PtychoError
    from ptycho.metrics import score_all

    ds = read_dataset(args.dataset)
    images = read_arrays(args.stitched, ("images",))["images"]
    truths = [ds.ground_truth(m) for m in range(ds.objects.shape[0])]
    if len(images) != len(truths) or any(i.shape != t.shape for i, t in zip(images, truths, strict=True)):
        raise PtychoError(f"{args.stitched}: stitched images do not match the objects of {args.dataset}; re-run stitch with this dataset")
    result = score_all(list(images), truths)
    result["dataset_digest"] = ds.attrs["digest"]
    write_json(args.out, result)
    mean = result["mean"]
    print(f"{args.out}: amp SSIM {mean['amp_ssim']:.4f} phase SSIM {mean['phase_ssim']:.4f} "
          f"amp PSNR {mean['amp_psnr']:.2f} dB over {result['n_images']} image(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ptycho.config import SimulationConfig

    parser = _Parser(prog="ptycho", description="Simulate, train, reconstruct and score ptychography with and without XLA.")
    parser.add_argument("--version", action="version", version=f"ptycho {__version__}")
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
    p.add_argument("npz")
    p.add_argument("--out", required=True)
    p.add_argument("--gridsize", type=int, choices=(1, 2), default=1)
    p.add_argument("--split", choices=("train", "test"), default="train")
    p.set_defaults(func=cmd_import_npz)

    from ptycho.models import ModelConfig
    from ptycho.train import TrainConfig

    p = sub.add_parser("train", help="train a PINN or baseline model on a dataset")
    p.add_argument("--dataset", required=True, help="training split (.h5)")
    p.add_argument("--out", required=True, help="output folder (model.keras, model.json)")
    p.add_argument("--config", help="YAML file with 'model' and 'train' sections")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_config_flags(p, ModelConfig, "model_")
    _add_config_flags(p, TrainConfig, "train_")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("infer", help="reconstruct every pattern of a dataset with a trained model")
    p.add_argument("--model", required=True, help="folder written by 'ptycho train'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="reconstruction (.npz)")
    p.add_argument("--xla", type=_bool, default=None, help="override the training arm (true/false)")
    p.add_argument("--batch-size", type=int, default=None, help="fixed predict batch (default: training batch)")
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("stitch", help="stitch reconstructed patches into full objects")
    p.add_argument("--reconstruction", required=True, help=".npz written by 'ptycho infer'")
    p.add_argument("--dataset", required=True, help="the dataset that was reconstructed")
    p.add_argument("--out", required=True, help="stitched objects (.npz)")
    p.add_argument("--unweighted", action="store_true", help="plain average instead of illumination weighting")
    p.set_defaults(func=cmd_stitch)

    p = sub.add_parser("evaluate", help="score stitched objects against the ground truth")
    p.add_argument("--stitched", required=True, help=".npz written by 'ptycho stitch'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="metrics (.json)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("export-npz", help="write a dataset file as a PtychoPINN-style NPZ")
    p.add_argument("file")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_export_npz)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except PtychoError as err:
        print(f"ptycho {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"ptycho {args.command}: interrupted", file=sys.stderr)
        return 130
