"""The conventional solvers as records: what an engine is, which exist, and the settings
and results every engine shares.

An engine is one :class:`Engine` in :data:`ENGINES` and one class that follows
:class:`IterativeSolver`: ``Solver(problem, mode, cfg)`` for one
:class:`~ptycho.solvers.problem.Problem` under one XLA mode, with ``compile``,
``iterate`` (a generator of :class:`Iteration`, so that the solve job can advance the
modes in lockstep and time them interleaved) and ``rescaled`` (a warm start scaled to
the measured count). The config's ``solver.engine`` names the study's engine; the solve
job, the scaling benchmark, the report and MLflow read the name from the records, so a
second engine is its module and its record here. Every job of the workflow is a process
of its own that reads :data:`ENGINES` as this module defines it; :func:`register` adds an
engine to one process only, as :mod:`tests.test_solver_records` does with a NumPy one.

Probe refinement (``data.probe: refine``) is the ``apg`` engine's own
(:meth:`ptycho.solvers.gradient.Solver.refine`) whatever the study's engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

import numpy as np

from ptycho.config import check_settings, defaults
from ptycho.errors import ConfigError

_SOLVER = defaults("solver")


@dataclass(frozen=True)
class Engine:
    """One conventional solver: the config's and the records' ``name``, one line saying
    what it is, and its solver class, ``"module:Class"`` (imported when it runs: engines
    may import TensorFlow) or the class itself."""

    name: str
    description: str
    solver: str | Callable[..., IterativeSolver]

    def build(self, problem, mode: str, cfg: SolverConfig) -> IterativeSolver:
        """The engine's solver for one problem under one XLA mode."""
        factory = self.solver
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(import_module(module), name)
        return factory(problem, mode, cfg)


#: The engines, by name: the one record of each.
ENGINES: dict[str, Engine] = {
    "apg": Engine(
        "apg",
        "accelerated gradient descent on the Poisson likelihood, preconditioned by the illumination (TensorFlow)",
        "ptycho.solvers.gradient:Solver",
    ),
}
#: The engine that refines a measured scan's probe (``data.probe: refine``).
REFINER = "apg"


def parse_engine(value: object, key: str | None = "solver.engine") -> str:
    """An engine's name; anything else is a one-line ConfigError naming ``key``."""
    if isinstance(value, str) and value in ENGINES:
        return value
    message = f"{value!r} is not a solver engine; choose one of {', '.join(ENGINES)}"
    raise ConfigError(f"config key '{key}': {message}" if key else message)


def engine(name: str) -> Engine:
    return ENGINES[parse_engine(name, None)]


def register(record: Engine) -> Engine:
    """Add (or replace) an engine in this process (a test's; the workflow's jobs are
    processes of their own, which know the engines this module lists)."""
    ENGINES[record.name] = record
    return record


@dataclass(frozen=True)
class SolverConfig:
    """Settings of the iterative solver: the schema's ``solver`` section (meaning, range, default)."""

    iterations: int = _SOLVER["iterations"]  #: iteration budget per object
    tolerance: float = _SOLVER["tolerance"]  #: stop when a step changes the object by less than this (relative L2)
    step: float = _SOLVER["step"]  #: fraction of the textbook step 1/(4 I)
    momentum: float = _SOLVER["momentum"]  #: Nesterov momentum (0: plain preconditioned gradient descent)
    floor: float = _SOLVER["floor"]  #: preconditioner floor, relative to the peak illumination
    engine: str = _SOLVER["engine"]  #: the solver (:data:`ENGINES`)

    def __post_init__(self) -> None:
        check_settings(self, "solver", "solver.")
        parse_engine(self.engine)


@dataclass
class Iteration:
    """What one iteration did: its number (1-based), the misfit before the step (NLL
    per measured pixel above the saturated model's, ~0.5 at the noise level), the
    step's relative size, its wall time, whether it restarted the momentum (the
    object is then unchanged), and the object after it."""

    number: int
    misfit: float
    relative_step: float
    seconds: float
    restart: bool = False
    obj: Any = field(default=None, repr=False)  #: the object after the step (an array or a tensor)
    probe: Any = field(default=None, repr=False)  #: the probe after the step (refine only; scale included)


@dataclass
class Result:
    obj: np.ndarray
    iterations: list[Iteration] = field(default_factory=list)
    compile_seconds: float = 0.0
    stopped: str = "budget"  #: "budget" or "tolerance"


class IterativeSolver:
    """What an engine's solver does (subclass it): the solve job and the scaling benchmark
    call nothing else."""

    problem: Any
    mode: str
    cfg: SolverConfig

    def compile(self) -> float:
        """Prepare (trace, compile) the iteration; its seconds. The iterate is not changed."""
        raise NotImplementedError

    def iterate(self, start: np.ndarray | None = None, iterations: int | None = None) -> Iterator[Iteration]:
        """Run from ``start`` (default: the flat start), yielding each applied
        :class:`Iteration`; the generator returns why it ended, ``"tolerance"`` or
        ``"budget"``. Several generators of one solver may run interleaved."""
        raise NotImplementedError

    def rescaled(self, obj: np.ndarray) -> np.ndarray:
        """``obj`` times the real factor that makes it predict the measured total count."""
        raise NotImplementedError

    def solve(self, start: np.ndarray | None = None, iterations: int | None = None) -> Result:
        """Compile, then iterate to the tolerance or the budget."""
        from ptycho.solvers.problem import flat_start

        compile_s = self.compile()
        done, stopped = drained(self.iterate(start, iterations))
        obj = np.asarray(done[-1].obj) if done else np.asarray(flat_start(self.problem) if start is None else start)
        return Result(obj.astype(np.complex64), done, compile_s, stopped)


def drained(steps) -> tuple[list[Iteration], str]:
    """Every :class:`Iteration` of a run (``iterate``, ``refine``) and why it ended (the
    generator's return value)."""
    done: list[Iteration] = []
    while True:
        try:
            done.append(next(steps))
        except StopIteration as stop:
            return done, stop.value
