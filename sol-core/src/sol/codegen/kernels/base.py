"""What a kernel emitter sees: the layer, pointers to materialised tensors, the flavour.

A *kernel* turns one layer into loop-nest nodes that end in `Emit` (one
output element computed); an *expression* turns an elementwise layer into a
C expression of its operands, so it can be fused into any kernel's epilogue.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ...errors import SolUnsupportedError
from ...ir import Layer, Size, Tensor
from .. import cexpr
from ..flavour import Flavour
from ..layout import channels_last
from ..nest import Node, Stmt


class KernelContext:
    """Names of materialised tensors in the generated function, and small helpers."""

    def __init__(self, flavour: Flavour, pointers: dict[int, str], layouts: dict[int, tuple[int, ...]] | None = None,
                 storage: dict[int, str] | None = None) -> None:
        self.flavour = flavour
        self._pointers = pointers
        #: tensor id -> memory order of its dims (outermost first); absent: plain row-major
        self._layouts = layouts or {}
        #: tensor id -> the dtype it is stored in where that is not its own (float32 activations stored as bfloat16,
        #: see `sol.codegen.storage`): `load` and `store` convert, values in registers keep the tensor's dtype
        self._storage = storage or {}
        #: ids of the tensors a kernel reached through `ptr` (raw pointer arithmetic) rather than `load`/`store`;
        #: such a tensor must stay in its own dtype (`sol.codegen.storage` probes kernels with this)
        self.raw: set[int] = set()
        self._counter = itertools.count()

    def stored(self, tensor: Tensor) -> str:
        """The dtype ``tensor`` lies in memory as (its own, or a reduced one chosen by `sol.codegen.storage`)."""
        return self._storage.get(id(tensor), tensor.dtype)

    def layout(self, tensor: Tensor) -> tuple[int, ...]:
        """The memory order of ``tensor``'s dims, outermost first."""
        return self._layouts.get(id(tensor), tuple(range(tensor.rank)))

    def ptr(self, tensor: Tensor) -> str:
        """The pointer variable of ``tensor`` for raw indexing: the kernel then reads or writes its elements in the
        tensor's own dtype, so the tensor is never stored in a reduced one (see ``raw``)."""
        self.raw.add(id(tensor))
        return self._pointer(tensor)

    def _pointer(self, tensor: Tensor) -> str:
        try:
            return self._pointers[id(tensor)]
        except KeyError:
            raise AssertionError(f"tensor {tensor.name} is not materialised") from None

    def load(self, tensor: Tensor, index: Sequence[str]) -> str:
        """``tensor[index]`` for a full (logical) multi-index of ``tensor``, in the tensor's memory layout."""
        if tensor.dtype == "bool":
            # GCC has no vector type for C++ bool loads, so a loop reading a mask would stay scalar: read its bytes
            return f"({self.element(tensor, index)} != 0)"
        if self.stored(tensor) == "bfloat16" and tensor.dtype == "float32":
            return f"sol_bf16_load({self.element(tensor, index)})"
        return self.element(tensor, index)

    def store(self, tensor: Tensor, index: Sequence[str], value: str) -> str:
        """The statement that writes ``value`` (of the tensor's dtype) to ``tensor[index]``."""
        if self.stored(tensor) == "bfloat16" and tensor.dtype == "float32":
            value = f"sol_bf16_store({value})"  # rounded to nearest even, as oneDNN rounds its bf16 results
        return f"{self.element(tensor, index)} = {value};"

    def element(self, tensor: Tensor, index: Sequence[str]) -> str:
        """The element ``tensor[index]`` as an lvalue, in its stored type (bool tensors as bytes): `load` and
        `store` are what kernels use, which convert a reduced storage type."""
        order = self._layouts.get(id(tensor))
        ptr = f"((uint8_t*){self._pointer(tensor)})" if tensor.dtype == "bool" else self._pointer(tensor)
        if order is None:
            return f"{ptr}[{cexpr.linear(index, tensor.shape)}]"
        return f"{ptr}[{cexpr.linear([index[d] for d in order], [tensor.shape[d] for d in order])}]"

    def load_broadcast(self, tensor: Tensor, index: Sequence[str], out_shape: Sequence[Size]) -> str:
        """``tensor`` read at an output multi-index under numpy broadcasting."""
        return self.load(tensor, cexpr.broadcast_index(index, out_shape, tensor.shape))

    def math(self, fn: str) -> str:
        return self.flavour.math(fn)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"


KernelFn = Callable[[Layer, KernelContext], list[Node]]
#: (layer, operand expressions, the output multi-index, context) -> C expression of the result
ExpressionFn = Callable[[Layer, list[str], tuple[str, ...], KernelContext], str]

KERNELS: dict[str, KernelFn] = {}
EXPRESSIONS: dict[str, ExpressionFn] = {}


def kernel(*names: str) -> Callable[[KernelFn], KernelFn]:
    def register(fn: KernelFn) -> KernelFn:
        for name in names:
            KERNELS[name] = fn
        return fn

    return register


def expression(*names: str) -> Callable[[ExpressionFn], ExpressionFn]:
    def register(fn: ExpressionFn) -> ExpressionFn:
        for name in names:
            EXPRESSIONS[name] = fn
        return fn

    return register


def optional_input(layer: Layer, index: int) -> Tensor | None:
    return layer.inputs[index] if len(layer.inputs) > index else None


def ctype_of(tensor: Tensor, layer: Layer) -> str:
    return cexpr.ctype(tensor.dtype, f"tensor {tensor.name} of layer {layer.name!r}")


def unsupported(layer: Layer, why: str) -> SolUnsupportedError:
    return SolUnsupportedError(f"layer {layer.name!r} ({layer.op}): {why}")


def spatial_padding(value: object, spatial: int) -> list[tuple[int, int]]:
    """Padding as (begin, end) per spatial dim, from pairs or symmetric ints."""
    items = list(value) if isinstance(value, (list, tuple)) else [value] * spatial  # type: ignore[list-item]
    out = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out.append((int(item[0]), int(item[1])))
        else:
            out.append((int(item), int(item)))  # type: ignore[call-overload]
    return out


# -- channels-last kernels: a task owns a block of channels ---------------------------------------------------

#: channels per task of the channels-last kernels: one 64-byte cache line of floats, so a task walking the
#: pixels reads whole lines instead of striding C floats through the image once per channel
CHANNEL_BLOCK = 16
#: channel ``j`` of block ``cb``
BLOCK_CHANNEL = f"(cb * {CHANNEL_BLOCK} + j)"


def is_channels_last(kc: KernelContext, *tensors: Tensor) -> bool:
    """Whether every tensor lies N, spatial..., C in memory."""
    return all(t.rank >= 3 and kc.layout(t) == channels_last(t.rank) for t in tensors)


def channel_blocks(channels: str) -> str:
    """How many blocks cover ``channels``: the extent of the loop over ``cb``."""
    return f"({channels} + {CHANNEL_BLOCK - 1}) / {CHANNEL_BLOCK}"


def block_width(channels: str) -> str:
    """The channels of block ``cb``: CHANNEL_BLOCK, fewer in the last block."""
    b = CHANNEL_BLOCK
    return f"({channels} - cb * {b} < {b} ? {channels} - cb * {b} : {b})"


def split_row(names: Sequence[str], sizes: Sequence[Size]) -> list[Node]:
    """``row``, a flat index over dims of ``sizes`` (the last fastest), split into the index variables ``names``:
    the row loop of the channels-last kernels that walk chunks of pixel rows."""
    body: list[Node] = [Stmt("int64_t rest = row;")]
    for name, size in reversed(list(zip(names[1:], sizes[1:], strict=True))):
        body.append(Stmt(f"const int64_t {name} = rest % {cexpr.size(size)}; rest /= {cexpr.size(size)};"))
    body.append(Stmt(f"const int64_t {names[0]} = rest;") if names else Stmt("(void)rest;"))
    return body
