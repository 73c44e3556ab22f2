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

from ptycho.errors import ConfigError

#: The precisions, in display order, with one line each (report, --help, docs).
PRECISIONS: dict[str, str] = {
    "float32": "float32 throughout (the reference)",
    "mixed_bfloat16": "network computes in bfloat16 over float32 variables",
    "mixed_float16": "network computes in float16 over float32 variables, with loss scaling",
}
REFERENCE_PRECISION = "float32"
#: The short word of each precision in arm names, figures and tables.
SHORT: dict[str, str] = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}
#: The unit round-off of each precision's compute type (2**-p, p the significand bits
#: after the point): what the reduced-precision thresholds are derived from.
EPSILON: dict[str, float] = {"float32": 2.0**-24, "mixed_bfloat16": 2.0**-8, "mixed_float16": 2.0**-11}


#: The CPU flags (``/proc/cpuinfo``) under which a precision's compute type has native
#: kernels on CPU (oneDNN: AVX512_BF16 or AMX for bfloat16, AVX512_FP16 or AMX-FP16 for
#: float16); without them the type is converted to and from float32 around every
#: operation, slower than float32 itself.
NATIVE_FLAGS: dict[str, tuple[str, ...]] = {
    "mixed_bfloat16": ("avx512_bf16", "amx_bf16"),
    "mixed_float16": ("avx512_fp16", "amx_fp16"),
}


def emulated(precisions, cpu_flags) -> list[str]:
    """The reduced precisions of ``precisions`` this CPU (its ``cpu_flags``) has no native
    kernels for (:data:`NATIVE_FLAGS`)."""
    flags = set(cpu_flags)
    return [p for p in precisions if p in NATIVE_FLAGS and not flags & set(NATIVE_FLAGS[p])]


def parse_precision(value: object, key: str | None = "precision") -> str:
    """A precision name from its full or short name; a one-line :class:`ConfigError` otherwise."""
    text = str(value)
    for name, short in SHORT.items():
        if text in (name, short):
            return name
    where = f"{key}: " if key else ""
    raise ConfigError(
        f"{where}unknown precision {value!r}; use one of {', '.join(PRECISIONS)} (or {', '.join(SHORT.values())})"
    )
