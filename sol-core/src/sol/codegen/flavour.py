"""The backend "flavour": the only part of code generation a backend supplies.

The loop-nest model and the templates are shared; a flavour says how loops
map onto the device (threads, SIMD lanes), which math functions exist (every
generated call is ``sol_<flavour>_<fn>(...)``, defined by the flavour's
prelude), and how the source is compiled.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .nest import Block, Loop, Node

if TYPE_CHECKING:  # the DNN interface names KernelContext, whose module imports this one
    from ..ir import Layer
    from .dnn import DnnModule

#: The math functions generated code may call as ``sol_<flavour>_<fn>``; a prelude defines them all.
MATH_FUNCTIONS = (
    "exp", "expm1", "log", "log1p", "sqrt", "tanh", "erf", "abs", "pow", "floor", "ceil", "trunc", "fmod",
    "isnan",
    # trigonometric/hyperbolic, rounding and classification (ONNX's math ops)
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "round", "isinf",
)

#: the math functions that take two operands
BINARY_MATH = ("pow", "fmod")


def typed_math(macro_prefix: str, callee: Callable[[str], str], qualifiers: str = "static inline",
               libm_names: Mapping[str, str] | None = None) -> list[str]:
    """Prelude lines for a flavour without <cmath>'s overloads (device compilers, headerless code): every
    `MATH_FUNCTIONS` entry as ``<macro_prefix>_<fn>(...)``, float staying float and double double like <cmath>,
    integers computed in double (``abs`` keeps their type; ``isnan``/``isinf`` of an integer are false).

    ``callee(name)`` spells a C math function of the device (``"__builtin_" + name``, ``"::" + name``);
    ``libm_names`` renames functions whose C name differs (default: abs -> fabs, round -> nearbyint, which rounds
    half to even under the default rounding mode, numpy's and ONNX's rule).
    """
    names = {"abs": "fabs", "round": "nearbyint", **(libm_names or {})}
    impl = f"{macro_prefix}_impl_"
    lines = []
    for fn in MATH_FUNCTIONS:
        c = names.get(fn, fn)
        if fn in ("isnan", "isinf"):
            lines += [f"{qualifiers} bool {impl}{fn}(float x) {{ return {callee(c)}(x); }}",
                      f"{qualifiers} bool {impl}{fn}(double x) {{ return {callee(c)}(x); }}",
                      f"template <class T> {qualifiers} bool {impl}{fn}(T) {{ return false; }}"]
        elif fn in BINARY_MATH:
            lines += [f"{qualifiers} float {impl}{fn}(float x, float y) {{ return {callee(c + 'f')}(x, y); }}",
                      f"{qualifiers} double {impl}{fn}(double x, double y) {{ return {callee(c)}(x, y); }}",
                      f"template <class A, class B> {qualifiers} double {impl}{fn}(A x, B y) "
                      f"{{ return {callee(c)}((double)x, (double)y); }}"]
        else:
            integer = "{ return x < 0 ? (T)-x : x; }" if fn == "abs" else (
                "{ return (double)x; }" if fn == "round" else f"{{ return {callee(c)}((double)x); }}")
            lines += [f"{qualifiers} float {impl}{fn}(float x) {{ return {callee(c + 'f')}(x); }}",
                      f"{qualifiers} double {impl}{fn}(double x) {{ return {callee(c)}(x); }}",
                      f"template <class T> {qualifiers} {'T' if fn == 'abs' else 'double'} {impl}{fn}(T x) {integer}"]
    for fn in MATH_FUNCTIONS:
        args = "x, y" if fn in BINARY_MATH else "x"
        lines.append(f"#define {macro_prefix}_{fn}({args}) {impl}{fn}({args})")
    return lines


class Flavour(abc.ABC):
    """How one device type runs the loop-nest model."""

    #: prefix of the math macros (``sol_<name>_exp``) and part of the cache key
    name: str = ""
    #: file name suffixes of the source and the built artifact
    source_suffix = ".cpp"
    library_suffix = ".so"
    #: library calls for Conv/Linear/MatMul (None: everything is generated DFP code)
    dnn: DnnModule | None = None

    def math(self, fn: str) -> str:
        """The macro name generated code calls for a math function."""
        if fn not in MATH_FUNCTIONS:
            raise KeyError(f"math function {fn!r} is not part of the flavour interface")
        return f"sol_{self.name}_{fn}"

    @abc.abstractmethod
    def prelude(self) -> str:
        """Source text placed before the generated code (includes, math macros, helpers)."""

    @abc.abstractmethod
    def parallel_pragma(self, collapse: int, simd: bool) -> str:
        """The annotation of the outermost parallel loop (spanning ``collapse`` perfectly nested loops)."""

    @abc.abstractmethod
    def vector_pragma(self, reduction: tuple[str, str] | None) -> str:
        """The annotation of an innermost vectorisable loop (with an optional scalar reduction)."""

    @abc.abstractmethod
    def compile_command(self, source: Path, library: Path) -> list[str]:
        """argv that builds ``source`` into the shared library ``library``."""

    @abc.abstractmethod
    def toolchain_id(self) -> str:
        """Everything about the toolchain that changes the artifact (compiler, version, flags), for the cache key."""

    #: ELF visibility of the entry points; sol.deploy sets "hidden" to export only its own API
    visibility = "default"

    #: the precision this flavour generates code for (`sol.precision`); set through `use_precision`
    precision = "fp32"

    #: pooling gradients as a gather per input element (each sums the outputs whose window holds it) instead of a
    #: scatter into a scratch plane per (n, c) task: a device with thousands of threads and a slow heap (a GPU:
    #: resnet18's max pool gradient took 11.8 ms of a 27 ms training step as 256 threads with heap planes)
    gathers_pool_grads = False

    def precision_missing(self, precision: str) -> str | None:
        """Why this device cannot compute in ``precision`` ("bf16", "fp16"), naming the missing feature; None
        when it can. The default computes fp32 only: a backend overrides this when it implements another."""
        if precision == "fp32":
            return None
        return f"the {self.name or type(self).__name__} backend has no {precision} kernels yet (fp32 only)"

    def native_precision(self) -> str:
        """What ``precision="auto"`` becomes: the reduced precision the device computes natively, else "fp32"."""
        return "fp32"

    def use_precision(self, precision: str) -> None:
        """Generate code for ``precision`` (already checked with `precision_missing`)."""
        self.precision = precision

    def lowers(self, layer: Layer) -> bool:
        """Whether ``layer`` runs as its decomposition (`sol.codegen.lowering`) on this device whatever its DNN
        module takes: a shape of work the device's generated code runs better in pieces (a GPU's batch norm
        statistics). The DNN module's own `DnnModule.lowers` asks for decompositions whose parts a library runs."""
        return False

    def exported(self) -> str:
        """The declaration prefix of an exported entry point."""
        return f'extern "C" __attribute__((visibility("{self.visibility}")))'

    def profile_clock_declarations(self) -> str:
        """What ``sol_profile_clock`` (compiler::profile) needs: ``clock_gettime``, ``CLOCK_MONOTONIC``, timespec.

        A flavour whose code includes no system headers (the VE) declares them itself.
        """
        return "#include <time.h>"

    def render_module(self, **context: Any) -> str:
        """The whole source of one model from the rendered programs (the variables of ``module.j2``).

        A host flavour keeps the default; a device whose main loop runs on the host (CUDA: one kernel launch per
        Cluster) turns each Cluster's nodes into a kernel of its own and the programs into host code.
        """
        from .templates import render

        return render("module.j2", **context)

    def deploy_wrapper(self, **context: Any) -> str:
        """The source of a ``sol.deploy`` library: the model's code (``model_source``) plus the C API.

        ``context`` holds the variables of ``deploy_library.j2``; a flavour that cannot use its libc calls
        (files, pthreads) renders its own wrapper.
        """
        from .templates import render

        return render("deploy_library.j2", **context)

    # -- mapping the loop-nest model --------------------------------------
    def annotate(self, nodes: Sequence[Node]) -> None:
        """Fill in ``Loop.pragma``: threads on the outermost parallel loops, SIMD on innermost vector loops."""
        self._annotate(nodes, inside_parallel=False)

    def _annotate(self, nodes: Sequence[Node], inside_parallel: bool) -> None:
        for n in nodes:
            if isinstance(n, Block):
                self._annotate(n.body, inside_parallel)
            elif isinstance(n, Loop):
                vector_here = n.vector and not has_vector_loop(n.body)
                if n.parallel and not inside_parallel:
                    collapse, innermost = _collapsible(n)
                    n.pragma = self.parallel_pragma(collapse, innermost.vector and not has_vector_loop(innermost.body)
                                                    and collapse == 1)
                    self._annotate(n.body, inside_parallel=True)
                else:
                    n.pragma = self.vector_pragma(n.reduction) if vector_here else ""
                    self._annotate(n.body, inside_parallel)


def _collapsible(loop: Loop) -> tuple[int, Loop]:
    """How many perfectly nested parallel loops start at ``loop`` (OpenMP's collapse)."""
    depth, current = 1, loop
    while len(current.body) == 1 and isinstance(current.body[0], Loop) and current.body[0].parallel \
            and current.body[0].start == "0" and current.body[0].step == "1" and not current.body[0].vector:
        current = current.body[0]
        depth += 1
    return depth, current


def has_vector_loop(nodes: Sequence[Node]) -> bool:
    """Whether a vector loop lies anywhere in ``nodes`` (a loop is innermost-vector when its body has none)."""
    for n in nodes:
        if isinstance(n, Loop) and (n.vector or has_vector_loop(n.body)):
            return True
        if isinstance(n, Block) and has_vector_loop(n.body):
            return True
    return False
