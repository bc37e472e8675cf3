"""The VE flavour of generated code: what NEC's nc++ vectorises, and nothing libc has to provide.

Loops: OpenMP threads (``#pragma omp parallel for``) over the outer dims, one
per VE core; ``#pragma _NEC ivdep`` on the innermost unit-stride loops, which
nc++ turns into 256-element vector instructions. Where the parallel loop is
itself the vector loop, each thread's chunk is a multiple of the vector length
(256), so no core runs a partial vector in the middle of the range.

No system header: LLVM's VE target (``clang-14 --target=ve-unknown-linux-gnu``)
ships no VE libc headers, so the prelude defines what generated code uses (the
fixed-width integer types, INFINITY/NAN, a `std::numeric_limits` shim,
`std::memcpy`, and the math as type-generic overloads over the compiler's
``__builtin_*`` functions, which become libm calls). The same source also
builds for the host with g++, for the emulated VE (``SOL_VE_EMULATE=1``).

Exported functions take no ``bool`` (one byte on the host, four on the VE).

Conv/Linear and their gradients call vednn (`VednnModule`) when it is there:
always on the emulated VE (the emulator's libvednn), on a real VE when NEC's
vednn is installed (``ve::vednn``, else /opt/nec/ve); ``ve::dnn`` False (or
``dnn=False``) generates library-free code for every layer.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sol
from sol.codegen import Flavour
from sol.codegen.flavour import typed_math
from sol.codegen.nest import Block, Loop, Node
from sol.errors import SolBuildError

from . import toolchain
from .vednn import DECLARATIONS, DNN_KEY, VednnInstall, VednnModule, find_vednn

#: elements of one VE vector register (64-bit lanes)
VECTOR_LENGTH = 256
#: placeholder of the chunk expression in a parallel vector loop's pragma (filled in by `VeFlavour.annotate`)
_CHUNK = "@SOL_VE_CHUNK@"


_LIMITS = (  # type, lowest, min (smallest positive for floats), max
    ("bool", "false", "false", "true"),
    ("int8_t", "(-127 - 1)", "(-127 - 1)", "127"),
    ("uint8_t", "0", "0", "255"),
    ("int16_t", "(-32767 - 1)", "(-32767 - 1)", "32767"),
    ("uint16_t", "0", "0", "65535"),
    ("int32_t", "(-__INT32_MAX__ - 1)", "(-__INT32_MAX__ - 1)", "__INT32_MAX__"),
    ("uint32_t", "0", "0", "__UINT32_MAX__"),
    ("int64_t", "(-__INT64_MAX__ - 1)", "(-__INT64_MAX__ - 1)", "__INT64_MAX__"),
    ("uint64_t", "0", "0", "__UINT64_MAX__"),
    ("float", "(-__FLT_MAX__)", "__FLT_MIN__", "__FLT_MAX__"),
    ("double", "(-__DBL_MAX__)", "__DBL_MIN__", "__DBL_MAX__"),
)


def _prelude() -> str:
    lines = [
        "// Prelude of the VE flavour (nc++, clang's VE target, or g++ for the emulated VE). No system header: LLVM's VE",
        "// target has no VE libc headers, so everything generated code uses is defined here.",
        "typedef __INT8_TYPE__ int8_t;",
        "typedef __UINT8_TYPE__ uint8_t;",
        "typedef __INT16_TYPE__ int16_t;",
        "typedef __UINT16_TYPE__ uint16_t;",
        "typedef __INT32_TYPE__ int32_t;",
        "typedef __UINT32_TYPE__ uint32_t;",
        "typedef __INT64_TYPE__ int64_t;",
        "typedef __UINT64_TYPE__ uint64_t;",
        "typedef __INTPTR_TYPE__ intptr_t;",
        "typedef __UINTPTR_TYPE__ uintptr_t;",
        "typedef __SIZE_TYPE__ size_t;",
        *(f"#define INT{b}_C(c) ((int{b}_t)(c))" for b in (8, 16, 32, 64)),
        *(f"#define UINT{b}_C(c) ((uint{b}_t)(c##U))" for b in (8, 16, 32, 64)),
        "#define INFINITY (__builtin_inff())",
        '#define NAN (__builtin_nanf(""))',
        "",
        "namespace std {",
        "template <class T> struct numeric_limits;",
    ]
    for ctype, lowest, least, highest in _LIMITS:
        lines.append(f"template <> struct numeric_limits<{ctype}> {{ static constexpr {ctype} lowest() {{ return "
                     f"{lowest}; }} static constexpr {ctype} min() {{ return {least}; }} static constexpr {ctype} "
                     f"max() {{ return {highest}; }} }};")
    lines += [
        "static inline void* memcpy(void* d, const void* s, size_t n) { return __builtin_memcpy(d, s, n); }",
        "static inline void* memset(void* d, int c, size_t n) { return __builtin_memset(d, c, n); }",
        "}  // namespace std",
        "",
        "// The OpenMP runtime's thread count: chunks of parallel vector loops are whole vectors per thread.",
        'extern "C" int omp_get_max_threads(void);',
        "static inline int64_t sol_ve_chunk(int64_t iterations) {",
        "  const int64_t threads = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;",
        "  const int64_t per_thread = (iterations + threads - 1) / threads;",
        f"  return per_thread <= {VECTOR_LENGTH} ? {VECTOR_LENGTH} "
        f": (per_thread + {VECTOR_LENGTH - 1}) / {VECTOR_LENGTH} * {VECTOR_LENGTH};",
        "}",
        "",
        "// Math: float stays float (like <cmath>'s overloads); integers compute in double. The builtins become",
        "// libm calls (or inline code), which both nc++ and clang vectorise.",
    ]
    lines += typed_math("sol_ncc", lambda name: f"__builtin_{name}")
    return "\n".join(lines) + "\n"


PRELUDE = _prelude()

#: what sol_profile_clock needs, declared (no <time.h>): the Linux ABI of clock_gettime, which VE libc shares
PROFILE_CLOCK = """\
struct timespec { long tv_sec; long tv_nsec; };
extern "C" int clock_gettime(int clock, struct timespec* ts);
#define CLOCK_MONOTONIC 1"""


class VeFlavour(Flavour):
    """OpenMP + ``_NEC ivdep`` loops, ``sol_ncc_*`` math, no system headers; built by nc++ or, emulated, by g++.

    ``emulate``: build for the emulated VE (default: ``SOL_VE_EMULATE=1``). ``cxx``: the nc++ to use
    (default: ``ve::cxx``, searched as `toolchain.find_cxx` does). ``emulator_include_dirs`` and
    ``emulator_link_flags``: what the emulated VE's libraries need on the g++ line (default: the emulator's
    `toolchain.emulator_build_extras` hook). ``dnn``: call vednn for Conv/Linear (default: ``ve::dnn``, when vednn
    is installed; the emulated VE always has it).
    """

    name = "ve"

    def __init__(self, *, emulate: bool | None = None, cxx: str | None = None,
                 emulator_include_dirs: Sequence[str] | None = None,
                 emulator_link_flags: Sequence[str] | None = None, dnn: bool | None = None) -> None:
        self._emulate = emulate
        self._cxx = cxx
        self._include_dirs = None if emulator_include_dirs is None else tuple(emulator_include_dirs)
        self._link_flags = None if emulator_link_flags is None else tuple(emulator_link_flags)
        wanted = bool(sol.config.get(DNN_KEY.name, DNN_KEY.default)) if dnn is None else dnn
        self._vednn: VednnInstall | None = None
        if wanted and self.emulated:
            self.dnn = VednnModule("emulated")  # the emulator's libvednn (its build is in toolchain_id)
        elif wanted:
            self._vednn = find_vednn()
            if self._vednn is not None:
                self.dnn = VednnModule(str(self._vednn.library))

    # -- math and prelude ---------------------------------------------------------
    def math(self, fn: str) -> str:
        # the device is "ve"; its math macros carry the compiler's name, as NEC's own code does
        super().math(fn)  # validates fn
        return f"sol_ncc_{fn}"

    def prelude(self) -> str:
        return PRELUDE + DECLARATIONS if self.dnn is not None else PRELUDE

    def profile_clock_declarations(self) -> str:
        return PROFILE_CLOCK

    def deploy_wrapper(self, **context: Any) -> str:
        # the generic wrapper reads weights with stdio and locks with pthreads; the VE's embeds and uses atomics
        from .deploy import render_wrapper

        return render_wrapper(**context)

    # -- loop mapping ---------------------------------------------------------------
    def parallel_pragma(self, collapse: int, simd: bool) -> str:
        if simd:  # the thread loop is the vector loop: whole vectors per thread, vectorised inside each chunk
            return f"#pragma omp parallel for schedule(static, {_CHUNK})\n#pragma _NEC ivdep"
        clause = f" collapse({collapse})" if collapse > 1 else ""
        return f"#pragma omp parallel for{clause} schedule(static)"

    def vector_pragma(self, reduction: tuple[str, str] | None) -> str:
        if reduction is None:
            return "#pragma _NEC ivdep"
        return "#pragma _NEC vector\n#pragma _NEC ivdep"  # nc++ vectorises the scalar reduction itself

    def annotate(self, nodes: Sequence[Node]) -> None:
        super().annotate(nodes)
        for loop in _loops(nodes):
            if _CHUNK in loop.pragma:
                chunk = (f"sol_ve_chunk((int64_t)({loop.extent}) - (int64_t)({loop.start}))" if loop.step == "1"
                         else str(VECTOR_LENGTH))
                loop.pragma = loop.pragma.replace(_CHUNK, chunk)

    # -- toolchain ---------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return toolchain.emulated() if self._emulate is None else self._emulate

    def emulator_extras(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        hooked_dirs, hooked_flags = toolchain.emulator_build_extras()
        return (hooked_dirs if self._include_dirs is None else self._include_dirs,
                hooked_flags if self._link_flags is None else self._link_flags)

    def _ncc(self) -> str:
        found = toolchain.find_cxx(self._cxx or toolchain.configured_cxx())
        if found is None:
            raise SolBuildError(f"building for the VE needs NEC's C++ compiler, and "
                                f"{self._cxx or toolchain.configured_cxx()!r} is not installed: {toolchain.INSTALL_HINT}")
        return found

    def _gxx(self) -> str:
        found = shutil.which(toolchain.EMULATOR_CXX)
        if found is None:
            raise SolBuildError(f"the emulated VE ({toolchain.EMULATE_ENV}=1) builds VE code for this host with "
                                f"{toolchain.EMULATOR_CXX}, which is not installed: apt install g++ (Debian/Ubuntu) "
                                "or dnf install gcc-c++ (Fedora/RHEL)")
        return found

    def compile_command(self, source: Path, library: Path) -> list[str]:
        if self.emulated:
            self._gxx()
            return toolchain.emulator_command(source, library, *self.emulator_extras())
        command = toolchain.native_command(self._ncc(), source, library)
        return [*command, *self._vednn.link_flags] if self._vednn is not None else command

    def toolchain_id(self) -> str:
        if self.emulated:
            gxx = self._gxx()
            dirs, flags = self.emulator_extras()
            return (f"ve|emulated|{gxx}|{toolchain.compiler_version(gxx)}|{' '.join(toolchain.EMULATOR_FLAGS)}|"
                    f"{' '.join(dirs)}|{' '.join(flags)}")
        ncc = self._ncc()
        vednn = f"|{' '.join(self._vednn.link_flags)}" if self._vednn is not None else ""
        return f"ve|nc++|{ncc}|{toolchain.compiler_version(ncc)}|{' '.join(toolchain.NCC_FLAGS)}{vednn}"


def _loops(nodes: Sequence[Node]) -> list[Loop]:
    found: list[Loop] = []
    for n in nodes:
        if isinstance(n, Loop):
            found.append(n)
            found.extend(_loops(n.body))
        elif isinstance(n, Block):
            found.extend(_loops(n.body))
    return found
