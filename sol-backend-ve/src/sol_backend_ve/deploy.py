"""``sol.deploy`` for the VE: a library that runs on the VE itself, called by a program running there.

With NEC's nc++ the target builds both kinds (``lib::shared``, ``lib::static``)
with nc++ and NEC's binutils (nar, nnm, nobjcopy, nreadelf). Without it,
``lib::static`` builds an archive of VE objects with upstream LLVM's VE
target (clang-14) and LLVM's binutils; a shared library needs the VE's libc
and linker setup, which only NEC's SDK has.

The library's code is the VE flavour's (no system header), and so is its
wrapper: the generic ``deploy_library.j2`` reads the weights with stdio and
guards initialisation with pthreads, so the VE wrapper embeds the weights
(the parameters are taken from memory), declares the three libc functions
it calls (posix_memalign, free, abort, plus write for its one error message)
and uses compiler atomics instead of pthreads.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sol.errors import SolBuildError, SolInputError
from sol.records import DeployLibraries, DeployTarget

from . import toolchain

#: LLVM's binutils of the clang-14 release (versioned names first, as Debian/Ubuntu install them)
LLVM_TOOLS = ("llvm-{name}-14", "llvm-{name}", "/usr/lib/llvm-14/bin/llvm-{name}")
INSTALL_HINT = ("NEC's SDK (nc++ and its binutils in /opt/nec/ve/bin; sol.config['ve::cxx'] names nc++) for shared and "
                "static libraries, or, for target='lib::static' only, LLVM's VE target: apt-get install clang-14 llvm-14")
CLANG_NOTE = ("built by clang-14's VE target (no nc++ here): link the archive into a VE program with the OpenMP runtime "
              "the objects call (__kmpc_fork_call, __kmpc_for_static_init_8 & co.: LLVM's libomp built for the VE, "
              "-lomp), the VE's libm (expf, erff & co., -lm) and libc (posix_memalign, free, abort, write)")
NCC_NOTE = ("built by nc++: link with nc++ -fopenmp (NEC's OpenMP runtime) and -lm; the library needs only the VE's "
            "libc, libm and OpenMP runtime")


class VeDeployTarget(DeployTarget):
    device_type = "ve"
    description = "NEC SX-Aurora VE programs (nc++; clang-14's VE target for static archives)"
    install_hint = INSTALL_HINT
    options: ClassVar[dict[str, str]] = {}

    # -- the toolchain at hand ----------------------------------------------------------
    def ncc(self) -> str | None:
        return toolchain.find_cxx(toolchain.configured_cxx())

    def compiler(self) -> list[str]:
        ncc = self.ncc()
        if ncc is not None:
            return [ncc]
        return [toolchain.find_clang() or toolchain.CLANG, toolchain.CLANG_TARGET]

    def tool(self, name: str) -> str:
        ncc = self.ncc()
        if ncc is not None:  # NEC's binutils beside nc++: nar, nnm, nobjcopy, nreadelf
            return str(Path(ncc).parent / f"n{name}")
        for pattern in LLVM_TOOLS:
            found = shutil.which(pattern.format(name=name))
            if found:
                return found
        return LLVM_TOOLS[0].format(name=name)

    def check_kind(self, kind: str, options: Mapping[str, str]) -> None:
        """A shared library needs nc++; a weights file would need stdio on the VE (the wrapper embeds them)."""
        if options.get("weights", "embedded") != "embedded":
            raise SolInputError("sol.deploy for ve embeds the weights in the library (the VE code reads no files); "
                                "use options={'weights': 'embedded'}")
        if kind == "shared" and self.ncc() is None:
            raise SolBuildError(f"target='lib::shared' for ve needs NEC's nc++ ({toolchain.configured_cxx()!r} is "
                                "not installed; install NEC's SDK or set sol.config['ve::cxx']). Without it, "
                                "target='lib::static' builds an archive of VE objects with clang-14")

    # -- what the library's code is ------------------------------------------------------
    def flavour(self, options: Mapping[str, str]) -> Any:
        from .flavour import VeFlavour  # lazy: importing the plugin stays cheap

        # Only the code generation of the flavour is used (its deploy_wrapper is render_wrapper's); the
        # deploy driver compiles with compiler() and flags(). Deployed libraries are library-free (no vednn call:
        # the program linking them needs nothing beyond OpenMP and libm).
        return VeFlavour(emulate=False, dnn=False)

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        return DeployLibraries(notes=(NCC_NOTE if self.ncc() is not None else CLANG_NOTE,))


def render_wrapper(**context: Any) -> str:
    """The VE library's source: the model's code plus the C API (`VeFlavour.deploy_wrapper`)."""
    if not context["embedded"]:
        raise SolInputError("sol.deploy for ve embeds the weights; use options={'weights': 'embedded'}")
    from sol.codegen.templates import environment

    return environment().from_string(WRAPPER).render(**context)


WRAPPER = """\
// {{ lib_name }}: a standalone VE library generated by SOL {{ sol_version }} (sol.deploy) for model '{{ model }}'.
// It runs on the VE, called by a program running there. The model's code below has hidden entry points
// ({{ impl }}_*); only the API of {{ lib_name }}.h is exported. Like the model's code, this wrapper includes no
// system header (LLVM's VE target has no VE libc headers): it declares the few libc functions it calls.
{{ model_source }}

// The library is built for batch {{ batch }}: the model's code takes it as its runtime batch N.
#define SOL_API extern "C" __attribute__((visibility("default")))
extern "C" {
int posix_memalign(void** ptr, size_t alignment, size_t bytes);
void free(void* ptr);
void abort(void);
long write(int fd, const void* data, size_t bytes);
}

// Weak, so an application can route allocations through its own allocator and
// two SOL libraries linked into one program share one definition.
SOL_API __attribute__((weak)) void* sol_ext_malloc(size_t bytes) {
  void* ptr = 0;
  return posix_memalign(&ptr, 64, bytes ? bytes : 1) == 0 ? ptr : 0;
}

SOL_API __attribute__((weak)) void sol_ext_free(void* ptr) { free(ptr); }

static const int sol_param_count = {{ params|length }};
static const uint64_t sol_param_offsets[{{ [params|length, 1]|max }}] = { {{ params|map(attribute="offset")|join(", ") or "0" }} };
static const void* sol_params[{{ [params|length, 1]|max }}];
static char* sol_derived = 0;
static void* sol_workspace = 0;  // the workspace of the first caller; concurrent callers allocate their own
static char sol_workspace_busy = 0;
static int sol_init_state = 0;  // 0: not initialised, 1: being initialised, 2: initialised
static int sol_seed_current = 0;

static void sol_die(const char* what) {
  // The C API has no error channel: running with missing weights would give silently wrong results.
  static const char prefix[] = "{{ lib_name }}: ";
  write(2, prefix, sizeof prefix - 1);
  write(2, what, __builtin_strlen(what));
  write(2, "\\n", 1);
  abort();
}

static void* sol_alloc_or_die(size_t bytes, const char* what) {
  void* ptr = 0;
  if (posix_memalign(&ptr, 64, bytes ? bytes : 1) != 0) sol_die(what);
  __builtin_memset(ptr, 0, bytes ? bytes : 1);
  return ptr;
}

// The weights, embedded at build time from {{ blob_file }} (assembler .incbin: no giant C array to compile).
__asm__(".section .rodata.sol_weights,\\"a\\"\\n"
        ".balign 64\\n"
        "{{ blob_symbol }}:\\n"
        ".incbin \\"{{ blob_file }}\\"\\n"
        ".previous\\n");
extern "C" const char {{ blob_symbol }}[] __attribute__((visibility("hidden")));

static void sol_initialise(void) {
  const char* weights = {{ blob_symbol }};
  for (int i = 0; i < sol_param_count; ++i) sol_params[i] = weights + sol_param_offsets[i];
  (void)weights;
  if ({{ impl }}_init(0) != 0) sol_die("initialising the model failed");
  sol_derived = (char*)sol_alloc_or_die((size_t){{ impl }}_derived_size(), "out of memory for the derived parameters");
  // Derived parameters (e.g. BatchNorm folded into convolutions) are computed once, here, by the model's prepare program.
  if ({{ impl }}_prepare(sol_derived, (const void**)sol_params, 1) != 0) sol_die("computing the derived parameters failed");
  sol_workspace = sol_alloc_or_die((size_t){{ impl }}_workspace_size({{ batch }}), "out of memory for the workspace");
}

SOL_API void {{ func }}_init(int deviceIdx) {
  (void)deviceIdx;  // the library runs on the VE whose program calls it
  if (__atomic_load_n(&sol_init_state, __ATOMIC_ACQUIRE) == 2) return;
  int expected = 0;
  if (__atomic_compare_exchange_n(&sol_init_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    sol_initialise();
    __atomic_store_n(&sol_init_state, 2, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(&sol_init_state, __ATOMIC_ACQUIRE) != 2) {
  }  // another thread initialises
}

SOL_API int {{ func }}_seed(int seed) {
  const int previous = sol_seed_current;
  sol_seed_current = seed;
  {{ impl }}_seed(seed);
  return previous;
}

SOL_API void {{ func }}(void* ctx{% for t in inputs %}, const {{ t.ctype }}* in{{ loop.index0 }}{% endfor %}{% for t in outputs %}, {{ t.ctype }}** out{{ loop.index0 }}{% endfor %}) {
  (void)ctx;
  {{ func }}_init(0);
  const void* inputs[{{ [inputs|length, 1]|max }}] = { {{ inputs_list }} };
  void* outputs[{{ [outputs|length, 1]|max }}] = { 0 };
{% for t in outputs %}
  *out{{ loop.index0 }} = ({{ t.ctype }}*)sol_ext_malloc({{ t.bytes }});
  if (!*out{{ loop.index0 }}) sol_die("sol_ext_malloc failed for output {{ loop.index0 }}");
  outputs[{{ loop.index0 }}] = *out{{ loop.index0 }};
{% endfor %}
  const int shared = !__atomic_test_and_set(&sol_workspace_busy, __ATOMIC_ACQUIRE);
  void* workspace = shared ? sol_workspace
                           : sol_alloc_or_die((size_t){{ impl }}_workspace_size({{ batch }}), "out of memory for the workspace");
  const int status = {{ impl }}_forward(sol_derived, inputs, (const void**)sol_params, outputs, workspace, {{ batch }});
  if (shared) __atomic_clear(&sol_workspace_busy, __ATOMIC_RELEASE);
  else free(workspace);
  if (status != 0) {
    static const char message[] = "{{ lib_name }}: the model reported a nonzero status (an index out of range)\\n";
    write(2, message, sizeof message - 1);
  }
}
"""
