"""The XLA modes: the one definition of how each arm of the study invokes XLA.

TensorFlow can hand a computation to XLA in three ways; with the no-XLA reference
they are the study's four modes (docs/physics.md section 5):

* ``off``: the train and predict steps are ``tf.function`` graphs run by TensorFlow's
  executor (oneDNN kernels), with the reference translation
  ``ImageProjectiveTransformV3``, which XLA cannot compile. The reference every other
  mode is judged against.
* ``jit``: the whole step is one ``tf.function(jit_compile=True)``, with the XLA-safe
  (``tf.gather``) translation.
* ``auto``: TensorFlow's auto-clustering: the step is a plain graph and TensorFlow's
  ``MarkForCompilation`` pass cuts it into XLA clusters itself. On CPU this needs
  ``--tf_xla_cpu_global_jit`` in ``TF_XLA_FLAGS`` before TensorFlow initialises
  (:func:`xla_flags_environment`), then ``tf.config.optimizer.set_jit("autoclustering")``
  while the step's graph is instantiated (its first call): the setting is read per
  function at instantiation, so an ``auto`` step and an ``off`` step can live in one
  process (:func:`compile_step`). ``tf_xla_auto_jit=2`` alone does nothing on CPU.
* ``physics``: selective jit: the network runs as a plain graph (oneDNN), only the
  physics head (object canvas, translation, probe, FFT, amplitude, loss) is one
  ``jit_compile=True`` function called from inside the step.

Every mode other than ``off`` uses the XLA-safe translation, so the translation the
accuracy item validates is the one every XLA mode runs.

Every compiled function is guarded against retracing (:func:`compile_step`): a step
traced again would silently compile again, so it raises :class:`Retraced` instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ptycho.errors import ConfigError, PtychoError


class Mode(NamedTuple):
    """One XLA mode: its name and what it hands to XLA. Everything that differs between
    modes reads these fields (:func:`compile_step`, :func:`compile_physics`,
    :func:`compile_head`, :func:`xla_translation`, the benchmark's cluster count, the
    accuracy item's inference modes), never a mode's name; its words and colour are in
    :mod:`ptycho.study.presentation`."""

    name: str  #: the config's and the arm names' word (letters, digits, ``_``: arm names split on ``-``)
    description: str  #: one line (``--help``, docs)
    jit_step: bool = False  #: the whole train/predict step is one ``tf.function(jit_compile=True)``
    autocluster: bool = False  #: the step is a graph instantiated under ``set_jit("autoclustering")``
    jit_physics: bool = False  #: the physics head (and loss) is its own ``jit_compile=True`` function
    xla_translation: bool = True  #: the XLA-safe ``tf.gather`` translation (False: ``ImageProjectiveTransformV3``)
    #: a training step's cost relative to ``off``'s, measured with two 1-thread trainings at
    #: once; it only orders the workflow's trainings (``rules/common.smk``), the costliest first
    cost: float = 1.0

    @property
    def xla_step(self) -> bool:
        """Whether XLA compiles the step itself (whole or clustered); when not, the predict
        step, which has no physics head, is the reference's plain graph."""
        return self.jit_step or self.autocluster


#: The modes, in display order: the one record of each (iterate for names; ``MODES[name]``
#: for the record).
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode(
            "off",
            "graph mode, no XLA, reference translation (ImageProjectiveTransformV3)",
            xla_translation=False,
        ),
        Mode(
            "jit",
            "whole step jit-compiled (tf.function(jit_compile=True)), XLA-safe translation",
            jit_step=True,
            cost=1.3,
        ),
        Mode(
            "auto",
            "TensorFlow auto-clustering (set_jit('autoclustering'), --tf_xla_cpu_global_jit), XLA-safe translation",
            autocluster=True,
            cost=1.3,
        ),
        Mode(
            "physics",
            "network in graph mode (oneDNN), only the physics head and loss jit-compiled",
            jit_physics=True,
        ),
    )
}
REFERENCE = "off"


def __getattr__(name: str):
    # COMPARED is derived from MODES when read, so a mode registered later is in it too.
    if name == "COMPARED":
        return tuple(m for m in MODES if m != REFERENCE)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compared(modes) -> list[str]:
    """The modes of ``modes`` compared with the reference, in order; the first mode
    compared with it when there is none (a check of XLA against the reference always
    compares some XLA mode)."""
    return [m for m in modes if m != REFERENCE] or [next(m for m in MODES if m != REFERENCE)]


#: Pre-mode configs and model.json files said ``xla: true/false``.
_LEGACY = {True: "jit", False: "off", "true": "jit", "false": "off"}


def parse_mode(value: object, key: str | None = "xla") -> str:
    """A mode name from a mode or a legacy boolean; anything else is a one-line
    ConfigError, naming the config ``key`` (or just the value, for a CLI argument)."""
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in _LEGACY):
        return _LEGACY[value if isinstance(value, bool) else value.lower()]
    if isinstance(value, str) and value in MODES:
        return value
    message = f"{value!r} is not an XLA mode; choose one of {', '.join(MODES)} (true/false mean jit/off)"
    raise ConfigError(f"config key '{key}': {message}" if key else message)


def mode_of(mode: str | Mode) -> Mode:
    """The record of a mode (its name, or a legacy boolean); a record is returned as is."""
    return mode if isinstance(mode, Mode) else MODES[parse_mode(mode, None)]


def xla_translation(mode: str | Mode) -> bool:
    """Whether the mode runs the XLA-safe translation (every mode but ``off``)."""
    return mode_of(mode).xla_translation


def xla_flags_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``TF_XLA_FLAGS`` with ``--tf_xla_cpu_global_jit`` added (the user's flags kept).

    Without it, auto-clustering never clusters on CPU; on its own it changes nothing
    (no mode but ``auto`` asks for clustering). Must be in the environment before
    TensorFlow initialises: the CLI sets it first thing (``ptycho.cli.main``).
    """
    environ = os.environ if environ is None else environ
    flags = environ.get("TF_XLA_FLAGS", "").split()
    if "--tf_xla_cpu_global_jit" not in flags:
        flags.append("--tf_xla_cpu_global_jit")
    return {"TF_XLA_FLAGS": " ".join(flags)}


class Retraced(PtychoError):
    """A compiled step was traced more often than allowed (it would recompile)."""


def compile_step(fn: Callable, mode: str | Mode, *, max_traces: int | None = 1, name: str | None = None) -> Callable:
    """``fn`` as the step of ``mode``: a ``tf.function``, jit-compiled when the mode's
    ``jit_step`` (``jit``), auto-clustered when its ``autocluster`` (``auto``), a plain
    graph otherwise (``off``, and ``physics``, whose physics head is compiled separately,
    :func:`compile_physics`; so a predict step, which has no head, runs under ``physics``
    exactly as under ``off``).

    Traced once per input signature (``reduce_retracing=False``), and guarded: the call
    that traces it for the ``max_traces + 1``-th time raises :class:`Retraced` (None: no
    limit), the way equinox's ``assert_max_traces`` does. The count is the function's
    ``experimental_get_tracing_count()``.
    """
    import tensorflow as tf

    spec = mode_of(mode)
    step = tf.function(fn, jit_compile=spec.jit_step, reduce_retracing=False)
    if spec.autocluster:
        if "--tf_xla_cpu_global_jit" not in os.environ.get("TF_XLA_FLAGS", "").split():
            raise ConfigError(
                f"the {spec.name} XLA mode (auto-clustering) needs TF_XLA_FLAGS=--tf_xla_cpu_global_jit set before TensorFlow "
                "starts (without it nothing is clustered on CPU); run through 'python -m ptycho', or set "
                "os.environ.update(ptycho.nets.xla.xla_flags_environment()) before importing TensorFlow"
            )
        return _Guarded(_AutoClustered(step), step, name or _name(fn), max_traces)
    return _Guarded(step, step, name or _name(fn), max_traces)


def compile_physics(fn: Callable, mode: str | Mode, *, max_traces: int | None = 1, name: str | None = None) -> Callable:
    """The physics head of ``mode``: its own jit-compiled (and guarded) function when the
    mode's ``jit_physics`` (``physics``); inlined into the step (a plain Python call) for
    every other mode."""
    if not mode_of(mode).jit_physics:
        return fn
    import tensorflow as tf

    step = tf.function(fn, jit_compile=True, reduce_retracing=False)
    return _Guarded(step, step, name or _name(fn), max_traces)


def compile_head(fn: Callable, mode: str | Mode, *, max_traces: int | None = 1, name: str | None = None) -> Callable:
    """A function that is all physics head, compiled as ``mode`` compiles the head: its own
    XLA function under ``jit_physics`` (:func:`compile_physics`), else as the mode's step
    (:func:`compile_step`), into which the head is inlined."""
    if mode_of(mode).jit_physics:
        return compile_physics(fn, mode, max_traces=max_traces, name=name)
    return compile_step(fn, mode, max_traces=max_traces, name=name)


def tracing_count(fn: Callable) -> int:
    """How often a function of :func:`compile_step` or :func:`compile_physics` was traced
    (0 for a plain Python function: the physics head inlined into its step)."""
    count = getattr(fn, "experimental_get_tracing_count", None)
    return int(count()) if count is not None else 0


def _inside_trace() -> bool:
    import tensorflow as tf

    return tf.inside_function()


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", "step").strip("_").replace("_", " ")


#: Functions traced past their limit inside another function's trace, where raising
#: would only be wrapped by TensorFlow: the outermost guarded call raises for them.
_PENDING: list[str] = []


class _Guarded:
    """The one retrace guard: calls ``call``, then compares the traces of ``function``
    (its ``tf.function``) with ``max_traces`` and raises :class:`Retraced` past it."""

    def __init__(self, call: Callable, function, name: str, max_traces: int | None):
        self._call, self._function = call, function
        self.name, self.max_traces = name, max_traces

    def __call__(self, *args, **kwargs):
        out = self._call(*args, **kwargs)
        count = self._function.experimental_get_tracing_count()
        if self.max_traces is not None and count > self.max_traces:
            _PENDING.append(f"the {self.name} was traced {count} times (at most {self.max_traces})")
        if _PENDING and not _inside_trace():
            message = _PENDING[0]
            _PENDING.clear()
            raise Retraced(
                f"{message}: its input shapes or types changed, which would compile it again; keep them fixed"
            )
        return out

    def experimental_get_tracing_count(self) -> int:
        return int(self._function.experimental_get_tracing_count())

    def __getattr__(self, name):
        return getattr(self._call, name)


class _AutoClustered:
    """A ``tf.function`` whose graph is instantiated with auto-clustering on.

    TensorFlow reads the global jit level when it instantiates a function (its first
    call), so the level is switched on around that call only and restored after: other
    steps of the process keep their own mode.
    """

    def __init__(self, step):
        self._step = step
        self._instantiated = False

    def __call__(self, *args, **kwargs):
        if self._instantiated:
            return self._step(*args, **kwargs)
        import tensorflow as tf

        before = tf.config.optimizer.get_jit()
        tf.config.optimizer.set_jit("autoclustering")
        try:
            out = self._step(*args, **kwargs)
        finally:
            tf.config.optimizer.set_jit(before or False)
        self._instantiated = True
        return out

    def __getattr__(self, name):
        return getattr(self._step, name)


def count_clusters(dump_dir: str) -> int:
    """XLA clusters TensorFlow's auto-clustering formed, from the graphs it dumped.

    Needs ``TF_DUMP_GRAPH_PREFIX=dump_dir`` and ``--tf_xla_clustering_debug`` in
    ``TF_XLA_FLAGS`` when TensorFlow initialises: the ``MarkForCompilation`` pass then
    writes every graph it annotated, each clustered node carrying ``_XlaCluster``.
    Counts distinct cluster names per graph, summed over graphs.
    """
    import glob
    import re

    total = 0
    for path in glob.glob(os.path.join(dump_dir, "mark_for_compilation_annotated*.pbtxt")):
        with open(path) as fh:
            total += len(set(re.findall(r's: "(cluster_\d+)"', fh.read())))
    return total
