"""Data commands: simulate, inspect, and the NPZ and CXI converters."""

from __future__ import annotations

import argparse
import json

from ptycho.cli.declare import Live, arg, command, config_flags, config_section
from ptycho.config import SimulationConfig, choices, spec
from ptycho.data import SPLITS
from ptycho.data.cxi import CxiGeometry
from ptycho.study import jobs
from ptycho.tracking.record import JobRecord

_SPLIT = SPLITS[0]


@command(
    "simulate",
    "simulate a train/test pair of datasets (HDF5)",
    arg("--train", output=True, help="output path of the train split (.h5); without it, the test split alone"),
    arg("--test", required=True, output=True, help="output path of the test split (.h5)"),
    arg("--config", help="YAML file; its 'simulation' section (or the whole file) sets defaults"),
    arg("--quiet", action="store_true", help="no progress bars"),
    config_flags(SimulationConfig, "sim_"),
)
def cmd_simulate(args: argparse.Namespace, live: Live) -> JobRecord:
    cfg = config_section(args, SimulationConfig, "sim_", "simulation")
    return jobs.simulate(cfg, args.train, args.test, progress=not args.quiet)


@command(
    "inspect",
    "validate a dataset file and print its summary",
    arg("file"),
    arg("--json", action="store_true", help="machine-readable output"),
)
def cmd_inspect(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.dataset import read_dataset, summary

    ds = read_dataset(args.file)
    info = summary(ds)
    info["digest"] = ds.attrs["digest"]
    if args.json:
        return JobRecord(summary=json.dumps(info, indent=2, sort_keys=True))
    attrs, c = info["attributes"], info["counts_per_pattern"]
    truth = (
        []
        if info["ground_truth"]
        else [
            "  no ground truth (measured data): reconstruct-only; train a PINN, infer and stitch; "
            "evaluate gives the data misfit, not scores (nothing to score against)"
        ]
    )
    return JobRecord(
        summary="\n".join(
            [
                f"{args.file}: valid ptycho dataset (schema {ds.attrs['schema_version']}, sha256 {info['digest']})",
                *(f"  {name:16s} {tuple(shape)}" for name, shape in info["shapes"].items()),
                "  " + "  ".join(f"{printable(k)}={printable(attrs[k])}" for k in sorted(attrs) if k != "digest"),
                f"  units={info['units']} scale={info['scale']:.6g} counts/pattern mean={c['mean']:.6g} "
                f"std={c['std']:.3g} min={c['min']:.6g} max={c['max']:.6g} max pixel={info['max_pixel_count']:.6g}",
                *truth,
            ]
        )
    )


def printable(value: object) -> str:
    """``str(value)`` with control and format characters escaped (``\\x1b``, ``\\u202e``).

    Attributes are whatever the file's writer put there: printed raw, an escape
    sequence would drive the terminal and a newline or a right-to-left override would
    forge lines or text of the summary.
    """
    import unicodedata

    return "".join(
        ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
        for ch in str(value)
    )


def _imported(args: argparse.Namespace, read) -> JobRecord:
    """Another format's file -> a dataset file."""
    from ptycho.data.dataset import write_dataset

    ds = read(args.source, gridsize=args.gridsize, split=args.split)
    digest = write_dataset(args.out, ds)
    return JobRecord(
        summary=f"{args.out}: imported {ds.diffraction.shape[0]} patterns, scale={ds.scale:.6g} sha256={digest[:16]}"
    )


#: Group sides a dataset may have (the smallest, one pattern per group, for files from elsewhere).
_GRIDSIZES = choices("simulation.gridsize")


@command(
    "import-npz",
    "convert a PtychoPINN-style NPZ into a dataset file",
    arg("source", metavar="npz"),
    arg("--out", required=True, output=True),
    arg("--gridsize", type=int, choices=_GRIDSIZES, default=_GRIDSIZES[0]),
    arg("--split", choices=SPLITS, default=_SPLIT),
)
def cmd_import_npz(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.npz import import_npz

    return _imported(args, import_npz)


@command(
    "import-cxi",
    "convert a CXI 1.6 file into a dataset file",
    arg("source", metavar="cxi"),
    arg("--out", required=True, output=True),
    arg(
        "--gridsize",
        type=int,
        choices=_GRIDSIZES,
        default=_GRIDSIZES[0],
        help="(CXI files from elsewhere) grouping",
    ),
    arg("--split", choices=SPLITS, default=_SPLIT, help="(CXI files from elsewhere)"),
)
def cmd_import_cxi(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.cxi import import_cxi

    return _imported(args, import_cxi)


@command(
    "import-data",
    "read a CXI 1.6 file, a tike scan or a ptycho dataset as one split of the study (the workflow's import_data "
    "rule: config data)",
    arg(
        "source",
        metavar="file",
        help="a CXI 1.6 file (measured data, with or without an object), a tike scan (.npz, .npz.bz2) or a ptycho dataset",
    ),
    arg("--out", required=True, output=True, help="the split's dataset file (.h5)"),
    arg("--split", choices=SPLITS, default=_SPLIT),
    arg(
        "--gridsize",
        type=int,
        choices=_GRIDSIZES,
        default=spec("simulation.gridsize")["default"],
        help="(CXI files from elsewhere) patterns per group side: the study's simulation.gridsize",
    ),
    arg("--n", type=int, default=0, help="(tike scans) the pattern side to read at, 0: as recorded (config data.n)"),
    arg("--reduce", choices=choices("data.reduce"), default="crop", help="(tike scans) how --n is made (data.reduce)"),
)
def cmd_import_data(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.import_data(
        args.source, args.out, split=args.split, gridsize=args.gridsize, n=args.n, reduce=args.reduce
    )


@command(
    "export-npz",
    "write a dataset file as a PtychoPINN-style NPZ",
    arg("file"),
    arg("--out", required=True, output=True),
)
def cmd_export_npz(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.data.dataset import read_dataset
    from ptycho.data.npz import export_npz

    export_npz(read_dataset(args.file), args.out)
    return JobRecord(summary=f"{args.out}: exported")


@command(
    "export-cxi",
    "write a dataset file as CXI 1.6 (ptychodus, NXcxi_ptycho), in physical units",
    arg("file"),
    arg("--out", required=True, output=True),
    arg("--config", help="YAML file whose 'cxi' section gives the geometry (flags override it)"),
    config_flags(CxiGeometry, "cxi_"),
)
def cmd_export_cxi(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.export_cxi(args.file, args.out, config_section(args, CxiGeometry, "cxi_", "cxi"))
