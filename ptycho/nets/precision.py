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
    #: the lowest CUDA compute capability whose tensor cores compute the type (float16 from
    #: Volta, 7.0; bfloat16 from Ampere, 8.0: NVIDIA's and TensorFlow's mixed-precision
    #: guides); below it a GPU computes it no faster than float32. None: native everywhere.
    gpu_capability: tuple[int, int] | None = None
    #: a training step's cost relative to float32's where the type is native, measured with
    #: two 1-thread trainings at once; it only orders the workflow's trainings
    #: (``rules/common.smk``), the costliest first
    cost: float = 1.0


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
            gpu_capability=(8, 0),
            cost=0.7,
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
            gpu_capability=(7, 0),
        ),
    )
}
REFERENCE_PRECISION = "float32"
#: The config's word for "the fastest precision this machine runs natively"
#: (:func:`native_precision`), resolved when the config is parsed.
AUTO = "auto"


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


def short(precision: str) -> str:
    """A precision's short word (``bf16``); a name no record has, as itself."""
    return SHORT.get(precision, precision)


#: The unit round-off of each precision's compute type (from the records).
EPSILON: Mapping[str, float] = _Field("epsilon")
#: The CPU flags giving each reduced precision native kernels (from the records; the
#: precisions native everywhere are not in it).
NATIVE_FLAGS: Mapping[str, tuple[str, ...]] = _Field("native_flags", skip_none=True)


class Hardware(NamedTuple):
    """What decides which precisions a machine computes natively: its CPU's dtype flags
    (``/proc/cpuinfo``) and the compute capability of the GPU TensorFlow would use (None:
    no GPU; the network then runs on the CPU). Detected by
    :func:`ptycho.study.bench.machine.hardware`, or given (tests, planning for another machine)."""

    cpu_flags: tuple[str, ...] = ()
    gpu_capability: tuple[int, int] | None = None

    def words(self) -> str:
        """``GPU compute capability 8.0`` or ``this CPU``: whose arithmetic decides."""
        if self.gpu_capability is not None:
            return f"the GPU (compute capability {self.gpu_capability[0]}.{self.gpu_capability[1]})"
        return "this CPU"


def is_native(precision: str, hardware: Hardware) -> bool:
    """Whether ``hardware`` computes ``precision``'s type natively: on a GPU from its
    record's compute capability, on a CPU from its flags (float32 everywhere)."""
    p = PRECISIONS[precision]
    if hardware.gpu_capability is not None:
        return p.gpu_capability is None or tuple(hardware.gpu_capability) >= p.gpu_capability
    return p.native_flags is None or bool(set(hardware.cpu_flags) & set(p.native_flags))


def native_precision(hardware: Hardware) -> tuple[str, str]:
    """The precision ``auto`` means on ``hardware``, and why, in words.

    The first reduced precision (in :data:`PRECISIONS`' order: bfloat16, which needs no
    loss scaling, before float16) that the hardware computes natively; float32 where none
    is. An emulated type is converted to and from float32 around every operation: on an
    AVX2-only CPU a bfloat16 training step was 6x slower than float32 (docs/timing.md).
    """
    for p in PRECISIONS.values():
        if p.name != REFERENCE_PRECISION and is_native(p.name, hardware):
            if hardware.gpu_capability is not None:
                why = f"{hardware.words()} has {p.compute_dtype} tensor cores"
            else:
                have = [f for f in p.native_flags if f in hardware.cpu_flags]
                why = f"this CPU has {', '.join(have)}, native {p.compute_dtype} kernels"
            return p.name, why
    reduced = [p for p in PRECISIONS.values() if p.name != REFERENCE_PRECISION]
    if hardware.gpu_capability is not None:
        why = f"{hardware.words()} has no tensor cores for {' or '.join(p.compute_dtype for p in reduced)}"
    else:
        lacks = "; ".join(f"none of {', '.join(p.native_flags)} for {p.compute_dtype}" for p in reduced)
        why = f"this CPU only emulates the reduced types ({lacks}), several times slower than float32"
    return REFERENCE_PRECISION, why


def resolve_auto(values: list[str], native: str) -> list[str]:
    """A config's precision list with :data:`AUTO` replaced by ``native``, each name once
    (``[float32, auto]`` is ``[float32]`` where float32 is what ``auto`` means)."""
    return list(dict.fromkeys(native if v == AUTO else v for v in values))


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
