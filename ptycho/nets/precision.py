"""The network's arithmetic: the study's second axis, beside the XLA modes.

A precision is a Keras dtype policy for every layer of the network
(:func:`ptycho.nets.models.build_network`): ``float32`` is the reference every other
precision is judged against; ``mixed_bfloat16`` computes in bfloat16 over float32
variables (CPUs with AVX512_BF16 or AMX, TPUs); ``mixed_float16`` computes in float16
with Keras's loss scaling (the GPU standard; on CPU correct, not fast). The physics
head, the FFT and the loss stay float32/complex64 at every precision (docs/physics.md
section 9).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from ptycho.errors import ConfigError


class Precision(NamedTuple):
    """One precision: everything that differs between precisions reads these fields (the
    network's dtype policy, the loss scaling, arm names, the accuracy and gradients limits,
    the roofline's peak, the emulation warning), never a precision's name; its words and
    drawing are in :mod:`ptycho.study.presentation`."""

    name: str  #: the config's word (``precision:``), saved in ``model.json``
    short: str  #: the word in arm names, figures and tables (letters and digits: arm names split on ``-``)
    description: str  #: one line (``--help``, docs)
    policy: str  #: the Keras dtype policy of every layer of the network (:func:`ptycho.nets.models.build_network`)
    compute_dtype: str  #: the dtype the network computes in (the roofline's peak is measured per dtype)
    #: the unit round-off of the compute type (2**-p, p the significand bits after the
    #: point): what the reduced-precision thresholds are derived from
    epsilon: float
    #: the CPU flags (``/proc/cpuinfo``) under which the compute type has native kernels on
    #: CPU (oneDNN: AVX512_BF16 or AMX for bfloat16, AVX512_FP16 or AMX-FP16 for float16);
    #: without them the type is converted to and from float32 around every operation,
    #: slower than float32 itself. None: native everywhere.
    native_flags: tuple[str, ...] | None = None
    loss_scaled: bool = False  #: the optimiser scales the loss (Keras's ``LossScaleOptimizer``: float16 underflows)


#: The precisions, in display order: the one record of each (iterate for names;
#: ``PRECISIONS[name]`` for the record).
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("float32", "fp32", "float32 throughout (the reference)", "float32", "float32", 2.0**-24),
        Precision(
            "mixed_bfloat16",
            "bf16",
            "network computes in bfloat16 over float32 variables",
            "mixed_bfloat16",
            "bfloat16",
            2.0**-8,
            native_flags=("avx512_bf16", "amx_bf16"),
        ),
        Precision(
            "mixed_float16",
            "fp16",
            "network computes in float16 over float32 variables, with loss scaling",
            "mixed_float16",
            "float16",
            2.0**-11,
            native_flags=("avx512_fp16", "amx_fp16"),
            loss_scaled=True,
        ),
    )
}
REFERENCE_PRECISION = "float32"


class _Field(Mapping):
    """One field of every record of :data:`PRECISIONS` (optionally only the records where it
    is set), read when asked: a precision registered later is in it too."""

    def __init__(self, field: str, skip_none: bool = False):
        self._field, self._skip_none = field, skip_none

    def _names(self) -> list[str]:
        return [n for n, p in PRECISIONS.items() if not (self._skip_none and getattr(p, self._field) is None)]

    def __getitem__(self, name: str):
        if name not in self._names():
            raise KeyError(name)
        return getattr(PRECISIONS[name], self._field)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(dict(self))


#: The short word of each precision in arm names, figures and tables (from the records).
SHORT: Mapping[str, str] = _Field("short")
#: The unit round-off of each precision's compute type (from the records).
EPSILON: Mapping[str, float] = _Field("epsilon")
#: The CPU flags giving each reduced precision native kernels (from the records; the
#: precisions native everywhere are not in it).
NATIVE_FLAGS: Mapping[str, tuple[str, ...]] = _Field("native_flags", skip_none=True)


def emulated(precisions, cpu_flags) -> list[str]:
    """The reduced precisions of ``precisions`` this CPU (its ``cpu_flags``) has no native
    kernels for (their records' ``native_flags``)."""
    flags = set(cpu_flags)
    return [
        p for p in precisions if PRECISIONS[p].native_flags is not None and not flags & set(PRECISIONS[p].native_flags)
    ]


def parse_precision(value: object, key: str | None = "precision") -> str:
    """A precision name from its full or short name; a one-line :class:`ConfigError` otherwise."""
    text = str(value)
    for p in PRECISIONS.values():
        if text in (p.name, p.short):
            return p.name
    where = f"{key}: " if key else ""
    raise ConfigError(
        f"{where}unknown precision {value!r}; use one of {', '.join(PRECISIONS)} (or {', '.join(SHORT.values())})"
    )
