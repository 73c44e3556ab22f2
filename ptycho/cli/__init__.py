"""Command-line interface: ``python -m ptycho COMMAND ...``.

Every command validates its inputs first and reports problems as one line on stderr
(``ptycho COMMAND: error: ...``) with a non-zero exit: 2 for bad arguments or config,
1 for bad data files, :data:`OUT_OF_MEMORY` (3) for a command that ran out of memory
(:func:`out_of_memory`), 130 when interrupted. Heavy libraries are imported inside the
command that needs them.

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

__all__ = ["COMMANDS", "OUT_OF_MEMORY", "build_parser", "check_outputs", "is_out_of_memory", "main", "out_of_memory"]

#: Exit code of a command that ran out of memory: a ``MemoryError`` (NumPy's "Unable to
#: allocate ..."), or TensorFlow's ``ResourceExhaustedError`` ("OOM when allocating ...").
#: A process killed for memory without a Python exception exits by its signal instead:
#: 137 (SIGKILL: the kernel's or the cgroup's OOM killer), 134 (SIGABRT: a C++
#: ``std::bad_alloc`` in TensorFlow, its log says so), 139 (SIGSEGV: a native library
#: that did not check an allocation; the log then holds a "Fatal Python error:
#: Segmentation fault" and the Python stack, from :mod:`faulthandler`).
OUT_OF_MEMORY = 3

#: What makes each command need less memory (the others: smaller inputs).
_LESS_MEMORY = {
    "simulate": "simulate less (lower simulation.n_objects_train / n_objects_test or simulation.object_size, "
    "raise simulation.stride_train / stride_test)",
    "train": "use fewer threads (--threads, train_threads), a smaller train.batch_size or a smaller training "
    "split (simulation.n_objects_train, object_size, stride_train)",
    "infer": "use fewer threads (--threads), a smaller --batch-size or a smaller test split "
    "(simulation.n_objects_test, object_size, stride_test)",
    "bench": "use fewer threads (--threads), smaller bench.train_batches or a smaller simulation",
    "solve": "use fewer threads (--threads) or a smaller test split (simulation.n_objects_test, stride_test)",
}


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


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says the process ran out of memory: a ``MemoryError``, or
    TensorFlow's ``ResourceExhaustedError`` for an allocation (recognised by name, so
    TensorFlow is not imported for it)."""
    if isinstance(err, MemoryError):
        return True
    names = {cls.__name__ for cls in type(err).__mro__}
    return "ResourceExhaustedError" in names and "OOM" in str(err)


def out_of_memory(command: str, err: BaseException, rule: str | None = None) -> str:
    """The one line for a command that ran out of memory: what failed to be allocated,
    the process's peak and the memory there is, and the fix (a smaller job, or more
    memory for its rule)."""
    import resource

    from ptycho.runtime import machine_memory_bytes
    from ptycho.study.resources import GIB

    first = " ".join(str(err).split("\n", 1)[0].split())[:200] or type(err).__name__
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    try:
        limit = f" of {machine_memory_bytes() / GIB:.1f} GiB here"
    except Exception:  # noqa: BLE001 - the message must not fail in its turn
        limit = ""
    less = _LESS_MEMORY.get(command, "give it smaller inputs")
    return (
        f"ptycho {command}: error: out of memory ({first}; this process reached {peak / GIB:.1f} GiB{limit}); "
        f"{less}, or give the job more memory (its rule's mem_mb: snakemake --set-resources {rule or command}:mem_mb=N)"
    )


def _tags(args: argparse.Namespace) -> dict[str, str]:
    """The job's ``--mlflow-tag`` items as a mapping (:func:`~ptycho.cli.values.pairs`);
    empty when one is malformed, which the command itself then reports."""
    try:
        return pairs(args.mlflow_tag)
    except ConfigError:
        return {}


def _rule(args: argparse.Namespace) -> str | None:
    """The workflow rule that ran the command (its ``--mlflow-tag rule=...``), if any."""
    return _tags(args).get("rule") or None


def _describe(args: argparse.Namespace) -> str:
    """The job in a few words (its command and arm, else its rule), for the message of a
    new run that finds it still running."""
    tags = _tags(args)
    try:
        arm = Arm.of_tags(tags)
    except ValueError:
        arm = None
    return f"ptycho {args.command} {arm.name if arm else tags.get('rule', '')}".strip()


def _enable_faulthandler() -> None:
    """A crash in native code (a segmentation fault, an abort) prints the Python stack
    to stderr (the job's log) instead of nothing; unless something enabled it already
    (pytest does)."""
    import faulthandler

    if faulthandler.is_enabled():
        return
    try:
        faulthandler.enable(sys.stderr)
    except (AttributeError, ValueError, OSError):  # a stderr without a file descriptor
        pass


def address_space_note(command: str) -> str:
    """A note for the log of a TensorFlow command run under an address-space limit
    (``ulimit -v``), else ``""``. TensorFlow reserves far more address space than it
    uses, and running out of it ends the process in native code, by ``std::bad_alloc``
    (exit 134) or a segmentation fault (exit 139), where no Python error can say "memory";
    the note says it beforehand."""
    from ptycho.runtime import address_space_limit

    soft = address_space_limit()
    if soft is None:
        return ""
    return (
        f"ptycho {command}: note: this process may use {soft / 2**30:.1f} GiB of address space (ulimit -v); "
        "TensorFlow reserves more than it uses, and if it runs out the job ends with std::bad_alloc (exit 134) "
        "or a segmentation fault (exit 139): that is out of memory, raise the limit (ulimit -v) or make the job smaller"
    )


def _terminate(signum, frame):  # noqa: ARG001
    # Snakemake cancels jobs with SIGTERM: raise, so runs end KILLED and temp files go.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    _enable_faulthandler()
    # A workflow job ends when its Snakemake is gone (kill -9 leaves no one to stop it), and
    # marks itself running in the results folder, so that a new run waits for its end.
    from ptycho.study import run_lock

    run_lock.watch_workflow(os.environ.get(run_lock.WORKFLOW_ENV))
    with run_lock.job_marked(args.mlflow_parent, _describe(args)):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    import logging

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
            from ptycho.runtime import address_space_problem, import_tensorflow

            problem = address_space_problem()
            if problem:
                print(f"ptycho {args.command}: error: out of memory before the start: {problem}", file=sys.stderr)
                return OUT_OF_MEMORY

            note = address_space_note(args.command)
            if note:
                print(note, file=sys.stderr, flush=True)

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
    except Exception as err:
        from ptycho.artifacts import full_disk_error, no_space

        if no_space(err):  # a write outside atomic_write (a library's own): one line, not its traceback
            print(f"ptycho {args.command}: error: {full_disk_error(err)}", file=sys.stderr)
            return 1
        if not is_out_of_memory(err):
            raise
        # One line, not the traceback (whose frames hold the arrays that filled the memory).
        print(out_of_memory(args.command, err, _rule(args)), file=sys.stderr)
        return OUT_OF_MEMORY
