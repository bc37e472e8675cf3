"""Which reduced precisions the x86 backend computes (`sol.precision`), from the CPU's flags.

bf16 runs Conv/Linear/MatMul through oneDNN with bf16 operands and fp32
accumulation (dst, bias and post-ops stay fp32); everything generated (DFP
Clusters: normalisations, softmax, pooling, elementwise) computes in fp32.
It needs oneDNN and a CPU that computes bf16 natively: AVX512-BF16 (dot
products of bf16 pairs) or AMX-BF16 (tile matrix multiplies), which oneDNN
3.2 both uses. On other CPUs oneDNN would emulate bf16 slower than fp32, so
SOL refuses instead of silently running slower.

fp16 is not implemented on x86 yet.
"""

from __future__ import annotations

from sol.records import ConfigKey

from .cpuinfo import host_flags

BF16_STORAGE_KEY = ConfigKey(
    "x86::bf16_storage", bool, True,
    "In bf16, store the activations between bf16 library calls as bf16 (oneDNN writes and reads them directly, "
    "generated code converts on load and store): half the memory traffic and no conversion per call.")

#: /proc/cpuinfo flags of native bf16 arithmetic oneDNN uses (either is enough)
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16)."""
    flags = host_flags() if flags is None else flags
    return any(f in flags for f in BF16_FLAGS)


def missing(precision: str, has_onednn: bool, flags: frozenset[str] | None = None) -> str | None:
    """What this machine lacks to compute in ``precision`` on x86 (None: nothing)."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        if not native_bf16(flags):
            return ("this CPU has no native bf16 arithmetic (neither of the CPU flags "
                    f"{' nor '.join(BF16_FLAGS)} in /proc/cpuinfo)")
        if not has_onednn:
            return ("bf16 runs Conv/Linear/MatMul through oneDNN, which is not in use "
                    "(install it with `pip install onednn`, and leave sol.config['x86::dnn'] on)")
        return None
    return f"the x86 backend has no {precision} kernels yet (fp32 and bf16 only)"
