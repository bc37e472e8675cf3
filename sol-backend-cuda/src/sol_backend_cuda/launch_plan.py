"""Host-side planning of the CUDA flavour: one Cluster's loop nest -> `__global__` kernels and their launches.

The loop-nest model says what may run in parallel (``Loop.parallel``,
``Loop.vector``, ``Loop.reduction``); this module decides how it runs on a GPU:

* the perfectly nested parallel loops at the top of a Cluster are flattened
  into one index of *work items*, walked by a grid-stride loop (any size works
  with any grid; the grid is capped at `MAX_BLOCKS`);
* ``elementwise``: the innermost vector loop joins the flattened index when it is
  the whole body, so one thread computes one element (copies, permutes, adds);
* ``warp``: a body with inner vector loops (a dot product, a row of a
  convolution, a normalisation's statistics) runs on one warp per work item,
  the warp being the SIMD group: every innermost vector loop is strided over
  the 32 lanes (lane ``l`` owns the iterations ``i % 32 == l``, whatever the
  loop's start, so a lane reads back the elements of a private row that it
  wrote itself), its scalar reduction is combined with warp shuffles
  (`sol_cuda_warp_*`, a butterfly, so every lane holds the bitwise same
  result), and the scalar code between the loops runs redundantly in all
  lanes;
* ``thread``: otherwise one thread runs one work item, inner loops sequential
  (a body that keeps private arrays it indexes outside its vector loops, or that
  updates memory in place outside them, would not survive redundant lanes);
* ``serial``: a Cluster whose top level is not a parallel loop runs in one
  thread (correct for any nest; slow, and logged).

Every kernel receives exactly the tensors, the batch ``N`` and the seed its
code names (`Kernel.params`); the host code launches them in Cluster order on
the caller's stream (`launch_lines`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from sol.codegen.flavour import has_vector_loop
from sol.codegen.nest import Block, Loop, Node, Stmt, walk

#: threads per block of every parallel kernel (8 warps)
BLOCK_THREADS = 256
WARP = 32
#: grid-stride loops cover any size; more blocks than this only add scheduling overhead
MAX_BLOCKS = 65535
#: a launch with fewer items than fill this many full blocks takes smaller blocks (`sol_cuda_threads`): two per SM
#: of the largest GPUs (132 on an H100/H200), so a few long work items do not crowd onto a few SMs
SPREAD_BLOCKS = 264
#: innermost vector loops of at most this many iterations (constants) do not fill a warp: one thread per item
SHORT_VECTOR = 8

#: reduction operator -> (warp combine function, the identity lanes other than 0 start from, or None: idempotent)
WARP_REDUCTIONS = {"+": ("sol_cuda_warp_sum", "0"), "*": ("sol_cuda_warp_prod", "1"),
                   "max": ("sol_cuda_warp_max", None), "min": ("sol_cuda_warp_min", None)}

_IDENT = re.compile(r"[A-Za-z_]\w*")
#: a private array declared in generated code, e.g. ``alignas(64) float acc[56];``
_ARRAY_DECL = re.compile(r"^\s*(?:alignas\(\d+\)\s+)?(?:const\s+)?[A-Za-z_][\w:]*\s+([A-Za-z_]\w*)\s*\[")
#: a compound assignment or increment (``+=``, ``<<=``, ``++``...), not a comparison
_UPDATE = re.compile(r"(?:\+\+|--|(?:<<|>>|[-+*/%|&^])=)")
#: a pointer declaration of the programs (`sol.codegen.source._pointers`): "const float* t_x = (const float*)(...);"
_POINTER = re.compile(r"^(const )?([\w:]+)\* ([A-Za-z_]\w*) = ")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its C type and the host variable passed for it (the same name in both)."""

    ctype: str
    name: str

    def declaration(self) -> str:
        return f"{self.ctype} {self.name}"


@dataclass
class FlatLoop:
    """One loop of the flattened work index: ``var = start + k * step`` for k in [0, count)."""

    var: str
    count: str
    start: str = "0"
    step: str = "1"

    def value(self, k: str) -> str:
        if self.start == "0" and self.step == "1":
            return k
        return f"({self.start}) + ({k}) * ({self.step})"


@dataclass
class Kernel:
    """One ``__global__`` function and its launch."""

    name: str
    #: "elementwise" | "warp" | "thread" | "serial"
    mode: str
    #: the flattened parallel loops, outermost first (empty for serial)
    loops: list[FlatLoop]
    #: what one work item runs (serial: the whole Cluster)
    body: list[Node]
    params: list[Param] = field(default_factory=list)
    title: str = ""
    #: C expression (host) of the device-heap bytes one thread takes with ``new`` (`scratch_bytes`); None: none,
    #: or not computable on the host
    scratch: str | None = None

    @property
    def threads(self) -> int:
        """Threads per block at most (``__launch_bounds__``; a launch of few items takes fewer: `launch_lines`)."""
        return 1 if self.mode == "serial" else BLOCK_THREADS

    @property
    def items_per_block(self) -> int:
        """Work items per block of ``threads`` threads."""
        return {"serial": 1, "warp": BLOCK_THREADS // WARP}.get(self.mode, BLOCK_THREADS)

    def work(self) -> str:
        """C expression (host and device) of the number of work items."""
        if not self.loops:
            return "1"
        return " * ".join(f"({lp.count})" for lp in self.loops)

    def describe(self) -> str:
        what = {"elementwise": "one thread per element", "warp": "one warp per item, vector loops over its lanes",
                "thread": "one thread per item", "serial": "one thread (no parallel loop at the top)"}[self.mode]
        over = " x ".join(f"{lp.var}<{lp.count}" for lp in self.loops)
        return f"{self.mode}: {what}" + (f"; items {over}" if over else "")


# -- planning ------------------------------------------------------------------------------------------------------
def plan_kernels(nodes: Sequence[Node], name: str, host_names: dict[str, str], title: str = "") -> list[Kernel]:
    """The kernels of one Cluster (in launch order). ``host_names``: host variable -> C type (tensor pointers,
    ``N``, the seed) that kernels may read as parameters."""
    nodes = copy.deepcopy(list(nodes))  # the mapping rewrites loops (lane strides); the caller's nodes stay as they are
    if nodes and all(isinstance(n, Loop) and n.parallel for n in nodes):
        kernels = [_parallel_kernel(n, f"{name}_{i}" if len(nodes) > 1 else name)  # type: ignore[arg-type]
                   for i, n in enumerate(nodes)]
    else:
        kernels = [Kernel(name, "serial", [], nodes)]
    for k in kernels:
        k.title = title
        k.params = kernel_params(k, host_names)
    return kernels


def _parallel_kernel(top: Loop, name: str) -> Kernel:
    loops: list[FlatLoop] = []
    current = top
    bound: set[str] = set()
    while True:
        loops.append(FlatLoop(current.var, _count(current), current.start, current.step))
        bound.add(current.var)
        inner = current.body[0] if len(current.body) == 1 else None
        if (isinstance(inner, Loop) and inner.parallel and not current.vector
                and not _mentions(" ".join((inner.extent, inner.start, inner.step)), bound)):
            current = inner
            continue
        break
    body = current.body
    if current.vector:
        return Kernel(name, "elementwise", loops, body)
    only = body[0] if len(body) == 1 else None
    if (isinstance(only, Loop) and only.vector and only.reduction is None and not has_vector_loop(only.body)
            and not _mentions(" ".join((only.extent, only.start, only.step)), bound)):
        loops.append(FlatLoop(only.var, _count(only), only.start, only.step))
        return Kernel(name, "elementwise", loops, only.body)
    if _warp_mappable(body):
        arrays = _private_arrays(body)
        _stride_over_lanes(body, arrays)
        _compact_private_arrays(body, arrays)
        return Kernel(name, "warp", loops, body)
    return Kernel(name, "thread", loops, body)


def _count(loop: Loop) -> str:
    if loop.start == "0" and loop.step == "1":
        return loop.extent
    if loop.step == "1":
        return f"(({loop.extent}) - ({loop.start}))"
    return f"sol_ceil_div(({loop.extent}) - ({loop.start}), {loop.step})"


def _mentions(text: str, names: set[str]) -> bool:
    return any(m in names for m in _IDENT.findall(text))


def _lane_loops(nodes: Sequence[Node]) -> list[Loop]:
    """The innermost vector loops (the ones a warp strides over its lanes)."""
    found: list[Loop] = []
    for n in nodes:
        if isinstance(n, Loop):
            if n.vector and not has_vector_loop(n.body):
                found.append(n)
            else:
                found += _lane_loops(n.body)
        elif isinstance(n, Block):
            found += _lane_loops(n.body)
    return found


def _outside_lane_loops(nodes: Sequence[Node]) -> list[str]:
    """Code of every statement and loop header not inside an innermost vector loop."""
    out: list[str] = []
    for n in nodes:
        if isinstance(n, Stmt):
            out.append(n.code)
        elif isinstance(n, Loop):
            out.append(f"{n.start} {n.extent} {n.step}")
            if not (n.vector and not has_vector_loop(n.body)):
                out += _outside_lane_loops(n.body)
        elif isinstance(n, Block):
            out += _outside_lane_loops(n.body)
    return out


def _all_code(nodes: Sequence[Node]) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if isinstance(n, Stmt):
            out.append(n.code)
        elif isinstance(n, Loop):
            out.append(f"{n.start} {n.extent} {n.step}")
            out += _all_code(n.body)
        elif isinstance(n, Block):
            out += _all_code(n.body)
    return out


def _warp_mappable(body: list[Node]) -> bool:
    """Whether a warp may run one work item (see the module docstring)."""
    lane_loops = _lane_loops(body)
    if not lane_loops:
        return False
    if all(lp.extent.isdigit() and lp.start.isdigit() and int(lp.extent) - int(lp.start) <= SHORT_VECTOR
           for lp in lane_loops):
        return False  # short rows: a thread per item keeps every lane busy
    if any(lp.reduction is not None and lp.reduction[0] not in WARP_REDUCTIONS for lp in lane_loops):
        return False
    outside = _outside_lane_loops(body)
    # memory (or a private array) updated in place by code every lane runs would be updated 32 times
    if any("[" in code and _UPDATE.search(code) for code in outside):
        return False
    arrays = _private_arrays(body)
    if not arrays:
        return True
    # a private array must only be read and written inside lane loops, at that loop's index (or its offset from
    # the loop's start), so each lane touches its own elements (see `_lane_origin`)
    if any(re.search(rf"\b{re.escape(a)}\s*\[", code) for a in arrays for code in outside
           if not _ARRAY_DECL.match(code)):
        return False
    return all(lp.step == "1" and _lane_origin(lp, arrays) is not None for lp in lane_loops)


def _private_arrays(body: Sequence[Node]) -> set[str]:
    return {m.group(1) for code in _all_code(body) if (m := _ARRAY_DECL.match(code))}


def _lane_origin(loop: Loop, arrays: set[str]) -> str | None:
    """How a lane loop indexes the work item's private arrays, which decides which iterations a lane takes:

    * "absolute": at the loop variable (``acc[ow]``); lane l takes the iterations i with i % 32 == l, whatever
      the loop's start;
    * "relative": at its offset from the loop's start (``acc[k - j0]``: a column reduction's block of
      accumulators); lane l takes the iterations with (i - start) % 32 == l.

    Either way lane l owns the elements whose index is l modulo 32 in every loop, so it reads back what it wrote.
    None: an access of another form (or both forms in one loop), which a warp cannot share out."""
    found = set()
    relative = f"{loop.var}-{loop.start}".replace(" ", "")
    for code in _all_code(loop.body):
        for a in arrays:
            for m in re.finditer(rf"\b{re.escape(a)}\s*\[([^\]]*)\]", code):
                index = m.group(1).replace(" ", "")
                if index == loop.var:
                    found.add("absolute")
                elif loop.start != "0" and index == relative:
                    found.add("relative")
                else:
                    return None
    if len(found) > 1:
        return None
    return found.pop() if found else "absolute"


def _stride_over_lanes(nodes: list[Node], arrays: set[str]) -> None:
    """Rewrite every innermost vector loop of ``nodes`` to the lanes of the warp; combine reductions after it.
    ``arrays``: the work item's private arrays (`_lane_origin` decides which iterations each lane takes)."""
    i = 0
    while i < len(nodes):
        n = nodes[i]
        if isinstance(n, Loop) and n.vector and not has_vector_loop(n.body):
            if n.step == "1" and _lane_origin(n, arrays) == "relative":  # lane l: (i - start) % 32 == l
                n.start = f"({n.start}) + sol_lane"
                n.step = str(WARP)
            elif n.step == "1":  # lane l takes the indices i % 32 == l, whatever the start
                n.start = f"({n.start}) + ((sol_lane - ({n.start})) & {WARP - 1})"
                n.step = str(WARP)
            else:
                n.start = f"({n.start}) + sol_lane * ({n.step})"
                n.step = f"{WARP} * ({n.step})"
            n.comment = (n.comment + "; " if n.comment else "") + "over the warp's lanes"
            if n.reduction is not None:
                op, names = n.reduction
                combine, identity = WARP_REDUCTIONS[op]
                variables = [v.strip() for v in names.split(",")]  # "a, b": several variables, one operator
                if identity is not None:  # the start value counts once: lane 0 keeps it, the others start neutral
                    for var in variables:  # every reset before the loop (nodes[i] is the loop again after each)
                        nodes.insert(i, Stmt(f"if (sol_lane != 0) {var} = {identity};", "the warp's partial results"))
                        i += 1
                for offset, var in enumerate(variables, 1):  # every combination after it
                    nodes.insert(i + offset, Stmt(f"{var} = {combine}({var});", "combined over the warp (shuffles)"))
                i += len(variables)
        elif isinstance(n, (Loop, Block)):
            _stride_over_lanes(n.body, arrays)
        i += 1


def _compact_private_arrays(nodes: list[Node], arrays: set[str]) -> None:
    """Shrink a warp item's private arrays to what one lane holds: a lane touches only the elements whose index is
    its lane number modulo 32 (`_lane_origin`), so element i lives at i / 32 of the lane's own array, 32x shorter.

    A column reduction's ``double acc[64]`` indexed at ``k - j0`` took 512 bytes of local memory per thread, the
    lanes of a warp each at another element (32 cache lines per access); compacted it is 16 bytes, every lane at
    the same element. A softmax row kept on the stack shrinks from 32 KiB per thread to 1 KiB."""
    if not arrays:
        return
    access = re.compile(rf"\b({'|'.join(re.escape(a) for a in sorted(arrays))})\s*\[([^\]]*)\]")
    for n in walk(nodes):
        if not isinstance(n, Stmt):
            continue
        declared = _ARRAY_DECL.match(n.code)
        if declared is not None and declared.group(1) in arrays:  # its size: ceil(size / 32)
            n.code = access.sub(lambda m: f"{m.group(1)}[(({m.group(2)}) + {WARP - 1}) / {WARP}]", n.code, count=1)
        else:
            n.code = access.sub(lambda m: f"{m.group(1)}[({m.group(2)}) / {WARP}]", n.code)


# -- parameters ----------------------------------------------------------------------------------------------------
def host_variables(pointer_lines: Sequence[str]) -> dict[str, str]:
    """Host variable -> C type of every tensor pointer the program declares (its lines from the core)."""
    found: dict[str, str] = {}
    for line in pointer_lines:
        m = _POINTER.match(line)
        if m is None:
            raise ValueError(f"unexpected pointer declaration in generated code: {line!r}")
        const, ctype, var = m.groups()
        found[var] = f"{const or ''}{ctype}*"
    return found


def kernel_params(kernel: Kernel, host_names: dict[str, str]) -> list[Param]:
    """The host variables the kernel's code names, in first-use order (its parameters)."""
    text = " ".join([*_all_code(kernel.body), *(f"{lp.count} {lp.start} {lp.step}" for lp in kernel.loops)])
    seen: dict[str, Param] = {}
    for ident in _IDENT.findall(text):
        if ident in host_names and ident not in seen:
            seen[ident] = Param(host_names[ident], ident)
    return list(seen.values())


# -- source --------------------------------------------------------------------------------------------------------
def kernel_head(kernel: Kernel) -> list[str]:
    """The signature and the work-item loop's opening lines (the body follows, then `kernel_tail`)."""
    params = ", ".join(["const int64_t sol_items", *(p.declaration() for p in kernel.params)])
    lines = [f"static __global__ void __launch_bounds__({kernel.threads}) {kernel.name}({params}) {{"]
    if kernel.mode == "serial":
        lines += ["  (void)sol_items;", "  {"]
        return lines
    if kernel.mode == "warp":
        lines += [f"  const int sol_lane = (int)(threadIdx.x & {WARP - 1});",
                  f"  const int64_t sol_first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / {WARP};",
                  f"  const int64_t sol_stride = (int64_t)gridDim.x * blockDim.x / {WARP};"]
    else:
        lines += ["  const int64_t sol_first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                  "  const int64_t sol_stride = (int64_t)gridDim.x * blockDim.x;"]
    lines.append("  for (int64_t sol_item = sol_first; sol_item < sol_items; sol_item += sol_stride) {")
    if len(kernel.loops) == 1:
        lines.append(f"    const int64_t {kernel.loops[0].var} = {kernel.loops[0].value('sol_item')};")
    else:
        lines.append("    int64_t sol_rest = sol_item;")
        for depth, lp in enumerate(reversed(kernel.loops)):
            if depth == len(kernel.loops) - 1:
                lines.append(f"    const int64_t {lp.var} = {lp.value('sol_rest')};")
            else:
                lines.append(f"    const int64_t {lp.var} = {lp.value(f'sol_rest % ({lp.count})')}; "
                             f"sol_rest /= ({lp.count});")
    return lines


def kernel_tail(kernel: Kernel) -> list[str]:
    return ["  }", "}"]


def launch_lines(kernel: Kernel, stream: str = "sol_stream") -> list[str]:
    """Host code launching ``kernel`` on ``stream`` (no launch for zero work items: an empty grid is an error).

    A kernel whose threads take device-heap scratch gets no more blocks than half the heap holds at once
    (`sol_cuda_scratch_blocks`; the grid-stride loop runs the remaining items): thousands of threads each taking
    a pooling gradient's whole input plane exhausted the heap on an H100.
    """
    args = ", ".join(["sol_items", *(p.name for p in kernel.params)])
    lines = ["{", f"  const int64_t sol_items = {kernel.work()};"]
    if kernel.mode == "serial":
        grid, threads = "1", "1"
    else:  # the block size follows the item count at run time (`sol_cuda_threads`)
        per_item = WARP if kernel.mode == "warp" else 1
        lines.append(f"  const int sol_threads = sol_cuda_threads(sol_items, {per_item});")
        per_block = f"sol_threads / {per_item}" if per_item > 1 else "sol_threads"
        grid, threads = f"sol_cuda_blocks(sol_items, {per_block})", "sol_threads"
        if kernel.scratch is not None:
            grid = f"sol_cuda_scratch_blocks(sol_items, {per_block}, sol_threads, {kernel.scratch})"
    lines += [f"  if (sol_items > 0) {kernel.name}<<<{grid}, {threads}, 0, {stream}>>>({args});", "}"]
    return lines


#: ``T* name = new T[count]`` (optionally ``()``-initialised) in a kernel body
_NEW_ARRAY = re.compile(r"^\s*[\w:]+\s*\*\s*\w+\s*=\s*new\s+([\w:]+)\s*\[(.+)\]\s*(?:\(\))?\s*;\s*$")


def scratch_bytes(kernel: Kernel, host_names: dict[str, str]) -> str | None:
    """C expression of the device-heap bytes one thread of ``kernel`` holds at once (every ``new`` of its body
    added up), or None when it takes none or a count names something only the kernel knows."""
    terms = []
    for code in _all_code(kernel.body):
        for line in code.splitlines():
            match = _NEW_ARRAY.match(line)
            if match is None:
                continue
            ctype, count = match.groups()
            if any(ident not in host_names and ident not in ("sizeof", "int64_t")
                   for ident in _IDENT.findall(count)):
                return None
            terms.append(f"(int64_t)sizeof({ctype}) * (int64_t)({count})")
    return " + ".join(terms) if terms else None
