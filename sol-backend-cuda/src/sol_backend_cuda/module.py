"""The CUDA source of one model: kernels per Cluster plus host entry points that launch them.

`sol.codegen.source.generate` hands over the rendered programs (the variables
of sol-core's ``module.j2``); this module turns every generated Cluster into
kernels (`sol_backend_cuda.launch_plan`) and every program into a host function
taking a stream (ABI in `sol_backend_cuda.flavour`). Library calls (a DNN
module's lines) stay host code at their place in the schedule.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sol.codegen.nest import Block, Loop, Node, Stmt

from . import launch_plan as kmap

#: the module's Jinja template (package data); rendered in sol-core's environment, for nest.j2's render macro
TEMPLATE = Path(__file__).with_name("native") / "module.cu.j2"
#: what kernel code writes through ``sol_fail(&sol_status, ...)``: the module's device status word
STATUS_WORD = "sol_cuda_status_word"
#: what the flavour appends to every program's parameters: the stream, then the call's math word (which fp32
#: library calls may use TF32: `sol.precision.Fp32Math.word`, read by the runtime at each launch)
STREAM_PARAMETER = "void* stream, int sol_fp32_math"


@dataclass
class HostStep:
    """One Cluster in a host function: kernels to launch, or library lines to run."""

    index: int
    title: str
    kernels: list[kmap.Kernel] = field(default_factory=list)
    host_lines: list[str] = field(default_factory=list)


@dataclass
class HostProgram:
    name: str
    doc: str
    signature: str
    pointers: list[str]
    steps: list[HostStep]


def plan_program(program: Any, prefix: str) -> HostProgram:
    """The kernels and launches of one rendered program (``RenderedProgram`` of sol.codegen.source)."""
    host_names = kmap.host_variables(program.pointers)
    host_names.update({"N": "int64_t", "sol_seed_value": "int"})
    steps = []
    for c in program.clusters:
        step = HostStep(c.index, c.title)
        if _is_library_call(c.title):
            step.host_lines = [n.code for n in c.nodes if isinstance(n, Stmt)]
        else:
            name = f"{prefix}_{program.name}_c{c.index}"
            step.kernels = kmap.plan_kernels(c.nodes, name, host_names, c.title)
            for k in step.kernels:
                _to_status_word(k.body)
                k.scratch = kmap.scratch_bytes(k, host_names)
                if k.mode != "warp":  # a warp's lanes must not leave before its shuffles: only per-thread kernels
                    _guard_scratch(k.body)
        steps.append(step)
    return HostProgram(program.name, program.doc, f"{program.signature}, {STREAM_PARAMETER}", program.pointers, steps)


def _is_library_call(title: str) -> bool:
    # Cluster.title() of a DNN call, and the prepare step that packs the library's weights
    return title.startswith("DNN ") or title.startswith("library calls")


def _to_status_word(nodes: Sequence[Node]) -> None:
    for n in nodes:
        if isinstance(n, Stmt):
            n.code = n.code.replace("&sol_status", f"&{STATUS_WORD}")
        elif isinstance(n, (Loop, Block)):
            _to_status_word(n.body)


#: ``T* name = new T[...]`` in a kernel body: per-thread scratch from the device heap (8 MB by default)
_DEVICE_NEW = re.compile(r"^\s*[\w:]+\s*\*\s*(\w+)\s*=\s*new\s+[\w:]+\s*\[")


def _guard_scratch(nodes: list[Node]) -> None:
    """After every device-heap ``new``: a thread that got none reports SOL_STATUS_SCRATCH and stops.

    Why: kernels of the thread mapping take their scratch (a pooling gradient's whole input plane) with
    ``new``; thousands of threads at once exhaust CUDA's device heap, ``new`` returns null, and writing
    through it is an illegal address that ends the CUDA context (seen on an H100: resnet18's maxpool
    gradient, 4 x 64 threads x 112*112 doubles). The status word turns that into a SOL error instead.
    """
    index = 0
    while index < len(nodes):
        node = nodes[index]
        if isinstance(node, Stmt):
            match = _DEVICE_NEW.match(node.code)
            if match is not None:
                nodes.insert(index + 1, Stmt(f"if ({match.group(1)} == nullptr) {{ sol_fail(&{STATUS_WORD}, "
                                             "SOL_STATUS_SCRATCH); return; }"))
                index += 1
        elif isinstance(node, (Loop, Block)):
            _guard_scratch(node.body)
        index += 1


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    from sol.codegen.templates import environment

    return environment().from_string(TEMPLATE.read_text())  # the core's environment: nest.j2's render macro


def render_module(**context: Any) -> str:
    """The module's source; ``context``: the variables of sol-core's module.j2 (``flavour`` the CudaFlavour)."""
    programs = [plan_program(p, context["prefix"]) for p in context["programs"]]
    uses_heap = any(_DEVICE_NEW.search(line) for prog in programs for step in prog.steps for k in step.kernels
                    for line in kmap._all_code(k.body))
    return _template().render(cuda_programs=programs, status_word=STATUS_WORD, kmap=kmap, uses_heap=uses_heap,
                              **context)
