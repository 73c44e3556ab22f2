"""Command-line interface: ``python -m ptycho COMMAND ...``.

Every command validates its inputs first and reports problems as one line on stderr
(``ptycho COMMAND: error: ...``) with a non-zero exit: 2 for bad arguments or config,
1 for bad data files. Heavy libraries are imported inside the command that needs them.

Each command is declared beside its function (:func:`ptycho.cli.declare.command`), in
one module per group: :mod:`~ptycho.cli.data`, :mod:`~ptycho.cli.nets`,
:mod:`~ptycho.cli.study`, :mod:`~ptycho.cli.track`. A command parses its arguments into
values, calls one package function and returns its record
(:class:`ptycho.tracking.record.JobRecord`); :func:`main` prints the record's summary
and, under ``--mlflow-parent``, runs the command inside an MLflow child run that
receives the record (:func:`ptycho.tracking.job_run`, the CLI's one tracking hook).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ptycho import __version__
from ptycho.cli import data, nets, study, track  # noqa: F401 - each declares its commands
from ptycho.cli.declare import COMMANDS, Command
from ptycho.cli.values import pairs
from ptycho.errors import ConfigError, PtychoError
from ptycho.study.arms import Arm
from ptycho.tracking.record import JobRecord

__all__ = ["COMMANDS", "build_parser", "check_outputs", "main"]


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
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
    for spec in COMMANDS.values():
        spec.add_to(sub)
    return parser


def _spec(args: argparse.Namespace) -> Command:
    return COMMANDS[args.command]


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written, and two outputs on one path, up front:
    an unwritable path costs a second, not a simulation. The outputs are the arguments the
    command declares with ``output=``."""
    from ptycho.artifacts import writable_problem

    seen: dict[Path, str] = {}
    for attr, flag, folder in _spec(args).outputs():
        value = getattr(args, attr, None)
        if not value:
            continue
        path = Path(value)
        key = Path(os.path.abspath(path))
        if key in seen:
            raise ConfigError(f"{seen[key]} and {flag} are the same path {value}; give each output its own path")
        seen[key] = flag
        problem = writable_problem(path, folder)
        if problem:
            raise ConfigError(f"cannot write {flag} {value} ({problem}); choose a writable path")


def _run(args: argparse.Namespace) -> int:
    """Run the command and print its summary; under ``--mlflow-parent``, inside an MLflow
    child run that receives the command's record."""
    if not args.mlflow_parent:
        _done(args.func(args, None))
        return 0
    from ptycho import tracking

    spec = _spec(args)
    tags = pairs(args.mlflow_tag)
    rule = tags.get("rule") or args.command
    arm = Arm.of_tags(tags)
    what = spec.help[:1].upper() + spec.help[1:]
    # The description MLflow shows on the run's page (its note).
    tags["mlflow.note.content"] = arm.describe(rule, what) if arm else f"{what} (the study's '{rule}' job)."
    tracking.job_run(
        args.mlflow_parent,
        args.command,
        lambda live: args.func(args, live),
        tags=tags,
        name=arm.run_name(rule) if arm else "-".join(w for w in (rule, tags.get("split")) if w),
        # the arm as params too, so that MLflow's compare view lines the arms' runs up
        params={f"arm.{k}": v for k, v in arm.tags.items()} if arm else {},
        device=spec.uses_tensorflow(args),
        system_metrics=spec.system_metrics,
        done=_done,
    )
    return 0


def _done(record: JobRecord) -> None:
    """Close the study's parent run if the record says so (the report's job), then print
    the record's summary (a failure recorded as a result goes to stderr)."""
    if record.close_parent:
        from ptycho import tracking

        parent = record.close_parent
        tracking.close_pipeline(parent["tracking_uri"], parent["run_id"], record.others)
    if record.summary:
        print(record.summary, file=sys.stderr if record.failure else sys.stdout)


def _terminate(signum, frame):  # noqa: ARG001
    # Snakemake cancels jobs with SIGTERM: raise, so runs end KILLED and temp files go.
    raise KeyboardInterrupt


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
        if _spec(args).uses_tensorflow(args):
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
