"""How a command is declared: its name, help, arguments and function, in one place.

A command module writes::

    @command(
        "export-npz",
        "write a dataset file as a PtychoPINN-style NPZ",
        arg("file"),
        arg("--out", required=True, output=True),
    )
    def cmd_export_npz(args, live) -> JobRecord: ...

:func:`arg` takes :meth:`argparse.ArgumentParser.add_argument`'s arguments, plus
``output``: ``True`` for a file the command writes, ``"folder"`` for a folder. The
command line probes every declared output before the command does any work
(:func:`ptycho.cli.check_outputs`). :func:`config_flags` declares one flag per field of
a configuration dataclass, read back with :func:`config_from_args`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ptycho.cli.values import boolean, load_yaml_section

#: ``live(step, metrics)``: where a long job reports progress (None without a run).
Live = Callable[[int, Any], None] | None


@dataclass(frozen=True)
class Arg:
    """One argument of a command: :meth:`~argparse.ArgumentParser.add_argument`'s
    ``flags`` and ``options``, and whether it names an output (a file, or a folder)."""

    flags: tuple[str, ...]
    options: dict[str, Any]
    output: bool | str = False

    @property
    def dest(self) -> str:
        """The attribute argparse stores the value in."""
        if "dest" in self.options:
            return self.options["dest"]
        name = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return name.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.options)


def arg(*flags: str, output: bool | str = False, **options: Any) -> Arg:
    """An argument: ``output=True`` marks a file the command writes, ``output="folder"`` a folder."""
    if output not in (False, True, "folder"):
        raise ValueError(f"output must be True or 'folder', not {output!r}")
    return Arg(flags, options, output)


@dataclass(frozen=True)
class ConfigFlags:
    """One ``--flag`` per field of the dataclass ``cls``, stored as ``<prefix><field>``."""

    cls: type
    prefix: str

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Each flag typed by the field's default; unset flags stay None (the config decides)."""
        for f in dataclasses.fields(self.cls):
            default = getattr(self.cls, f.name)
            kind = type(default)
            parser.add_argument(
                "--" + f.name.replace("_", "-"),
                dest=f"{self.prefix}{f.name}",
                type=boolean if kind is bool else kind,
                default=None,
                metavar=kind.__name__.upper(),
                help=f"default: {default}",
            )


def config_flags(cls: type, prefix: str) -> ConfigFlags:
    return ConfigFlags(cls, prefix)


def config_from_args(args: argparse.Namespace, cls: type, prefix: str, base: dict | None = None):
    """``cls`` from ``base`` (a config file's section), overridden by the flags given."""
    from ptycho.config import from_dict

    values = dict(base or {})
    for f in dataclasses.fields(cls):
        v = getattr(args, f"{prefix}{f.name}")
        if v is not None:
            values[f.name] = v
    return from_dict(cls, values)


def config_section(args: argparse.Namespace, cls: type, prefix: str, section: str):
    """``cls`` from section ``section`` of ``--config`` (if given), overridden by the flags."""
    return config_from_args(args, cls, prefix, load_yaml_section(args.config, section))


@dataclass(frozen=True)
class Command:
    """A declared command. ``tensorflow``: it runs TensorFlow in this process (a bool, or
    a function of the parsed arguments); ``system_metrics``: sample the machine while it
    runs under ``--mlflow-parent``."""

    name: str
    help: str
    func: Callable[[argparse.Namespace, Live], Any]
    arguments: tuple[Arg | ConfigFlags, ...]
    tensorflow: bool | Callable[[argparse.Namespace], bool] = False
    system_metrics: bool = False

    def outputs(self) -> list[tuple[str, str, bool]]:
        """(attribute, flag, is a folder) of every declared output, in declaration order."""
        return [(a.dest, a.flags[0], a.output == "folder") for a in self.arguments if isinstance(a, Arg) and a.output]

    def uses_tensorflow(self, args: argparse.Namespace) -> bool:
        return self.tensorflow(args) if callable(self.tensorflow) else self.tensorflow

    def add_to(self, subparsers) -> argparse.ArgumentParser:
        parser = subparsers.add_parser(self.name, help=self.help)
        for a in self.arguments:
            a.add_to(parser)
        parser.set_defaults(func=self.func)
        return parser


#: Every declared command, in declaration order (the order ``ptycho --help`` lists them).
COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,  # noqa: A002 - argparse's word
    *arguments: Arg | ConfigFlags,
    tensorflow: bool | Callable[[argparse.Namespace], bool] = False,
    system_metrics: bool = False,
):
    """Declare the decorated function ``f(args, live) -> JobRecord`` as command ``name``."""

    def register(func):
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is declared twice")
        COMMANDS[name] = Command(name, help, func, arguments, tensorflow, system_metrics)
        return func

    return register
