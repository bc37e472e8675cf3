"""The source of a standalone library (``sol.deploy``): the model, its weights, and the user-facing C API.

The model's generated code is the same as for ``sol.optimize`` (rendered
through the target's flavour) but with hidden entry points; a wrapper from
``deploy_library.j2`` adds the API of ``deploy_header.j2``: ``<func>_init``,
``<func>_seed`` and ``<func>(ctx, in..., &out...)``. The parameters are
packed into one blob (64-byte aligned each) that is either embedded in the
library with the assembler's ``.incbin`` (no giant C array for the compiler
to parse) or written to a weights file that ``<func>_init`` reads.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import SolInputError, SolUnsupportedError
from ..ir import Graph, Tensor
from . import cexpr
from .flavour import Flavour
from .plan import Plan
from .source import generate
from .templates import render

ALIGN = 64
#: the first 8 bytes of a weights file; the next 8 are the deployment's id, then the blob size, then padding to 64
WEIGHTS_MAGIC = b"SOLWGT01"
WEIGHTS_HEADER_BYTES = 64


@dataclass(frozen=True)
class ApiTensor:
    """One input or output of the deployed function, as the header documents it."""

    name: str
    dtype: str
    ctype: str
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> int:
        return self.count * np.dtype(self.dtype).itemsize

    @property
    def shape_text(self) -> str:
        return "[" + ", ".join(map(str, self.shape)) + "]"


@dataclass(frozen=True)
class PackedParam:
    name: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Weights:
    """Every parameter of the graph, packed in ``graph.params`` order (the ABI's ``params`` array)."""

    params: tuple[PackedParam, ...]
    blob: bytes
    #: a hash of the blob: a weights file only loads into the library deployed with it
    id: int

    def write_file(self, path: Path) -> None:
        """The weights file ``<func>_init`` reads: a 64-byte header (magic, id, size), then the blob."""
        header = WEIGHTS_MAGIC + self.id.to_bytes(8, "little") + len(self.blob).to_bytes(8, "little")
        with path.open("wb") as file:  # two writes: no second copy of a blob that may be hundreds of MB
            file.write(header.ljust(WEIGHTS_HEADER_BYTES, b"\0"))
            file.write(self.blob)


@dataclass(frozen=True)
class LibrarySources:
    header: str
    source: str
    weights: Weights
    inputs: tuple[ApiTensor, ...]
    outputs: tuple[ApiTensor, ...]


def api_tensor(tensor: Tensor, role: str, batch: int) -> ApiTensor:
    """The fixed-shape description of a model input or output at ``batch``."""
    return ApiTensor(tensor.name, tensor.dtype, cexpr.ctype(tensor.dtype, f"{role} {tensor.name}"),
                     tuple(int(s) for s in tensor.concrete_shape(batch)))


def pack_weights(graph: Graph) -> Weights:
    """The current values of ``graph.params`` in one blob, each parameter 64-byte aligned."""
    chunks: list[bytes] = []
    params: list[PackedParam] = []
    offset = 0
    for name, tensor in graph.params.items():
        if tensor.data is None:
            raise SolUnsupportedError(f"parameter {name!r} has no value in the parsed graph; the frontend must "
                                      "keep parameter data for sol.deploy to embed it")
        cexpr.ctype(tensor.dtype, f"parameter {name}")  # a dtype generated code supports (names it otherwise)
        data = np.ascontiguousarray(np.asarray(tensor.data), dtype=np.dtype(tensor.dtype))
        if data.shape != tuple(tensor.concrete_shape(1)):
            raise SolInputError(f"parameter {name!r} holds a value of shape {list(data.shape)}, the graph expects "
                                f"{list(tensor.shape)}")
        raw = data.tobytes()
        padding = -offset % ALIGN
        chunks.append(b"\0" * padding + raw)
        offset += padding
        params.append(PackedParam(name, offset, len(raw)))
        offset += len(raw)
    blob = b"".join(chunks)
    # Derived from the content (reproducible builds); 63 bits keep it a positive int64 literal in C.
    identity = int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little") >> 1
    return Weights(tuple(params), blob, identity)


def c_guard(lib_name: str) -> str:
    return cexpr.identifier(lib_name).upper().strip("_") + "_H"


def sources(graph: Graph, the_plan: Plan, flavour: Flavour, *, lib_name: str, func: str, device_type: str,
            kind: str, flags: str, weights_file: str | None, blob_path: Path, batch: int = 1) -> LibrarySources:
    """The header and library source of ``graph``; the weights blob is written to ``blob_path`` when embedded.

    ``batch``: the value of a wildcard batch in ``graph`` (the library is built for that batch).

    ``weights_file``: None embeds the weights; a file name makes ``<func>_init`` read that file instead.
    """
    inputs = tuple(api_tensor(t, "input", batch) for t in graph.inputs)
    outputs = tuple(api_tensor(t, "output", batch) for t in graph.outputs)
    weights = pack_weights(graph)
    impl = f"{func}_model"
    flavour.visibility = "hidden"  # the model's own entry points stay inside the library
    model_source = generate(graph, the_plan.programs, the_plan.memory, flavour, impl)
    weights_env = cexpr.identifier(func).upper() + "_WEIGHTS"
    if weights_file is None:
        blob_path.write_bytes(weights.blob or b"\0")
        weights_doc = f"embedded ({len(weights.blob)} bytes)"
    else:
        weights_doc = (f"read by {func}_init from the file named by ${weights_env}, else from {weights_file} "
                       f"beside the library ({len(weights.blob)} bytes)")
    common = {
        "sol_version": __version__,
        "lib_name": lib_name,
        "func": func,
        "model": graph.name,
        "inputs": inputs,
        "outputs": outputs,
        "batch": batch,
    }
    header = render(
        "deploy_header.j2", **common, graph_hash=graph.structural_hash()[:16], device_type=device_type, kind=kind,
        flags=flags, weights_doc=weights_doc, guard=c_guard(lib_name),
        uses_bool=any(t.ctype == "bool" for t in (*inputs, *outputs)),
    )
    source = flavour.deploy_wrapper(
        **common, model_source=model_source, impl=impl, params=weights.params,
        weights_bytes=len(weights.blob), embedded=weights_file is None,
        blob_file=str(blob_path.resolve()).replace("\\", "\\\\").replace('"', '\\"'),
        blob_symbol=f"{impl}_weights_blob", weights_env=weights_env, weights_file=weights_file or "",
        magic=", ".join(str(b) for b in WEIGHTS_MAGIC), weights_id=weights.id,
        inputs_list=", ".join(f"in{i}" for i in range(len(inputs))) or "0",
    )
    return LibrarySources(header, source, weights, inputs, outputs)
