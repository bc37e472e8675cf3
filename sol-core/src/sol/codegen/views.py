"""Planning, part 1a: library operands read (or results written) through a chain of view layers, in place.

Transformer attention moves its heads around the two batched matmuls with
slices, reshapes and permutes: q, k and v are slices of the packed input
projection, permuted from [L, heads, E] to [heads, L, E], and the product
with v is permuted back to [L, heads, E] for the output projection. Each
slice and permute was a copy of its own (ViT-B/16: seven per layer, about 3
of its 44 ms in bf16). A library call can read an operand where it lies
when that memory is a dense permutation of the operand's dims (oneDNN's
matmul reads [heads, L, E] from an [L, heads, E] buffer, its ``acbd``
format), so the chain of views between the materialised tensor and the
call needs no code at all.

A `View` is such a chain: the tensor the memory belongs to (``base``), the
view layers in order, and where the operand's elements lie in ``base``'s
memory (sizes, strides in elements, an element offset). `operand_view`
walks back from a library call's input through view layers whose results
nothing else reads; `result_view` walks forward from a call's result
through the permutes (and reshapes) that are its only readers. The DNN
module decides which views it reads or writes (`DnnModule.reads_view`,
`DnnModule.writes_view`); clustering then runs the chain's layers inside
the call, where they generate nothing.

Static shapes only: a view of a batch-sized dimension keeps its layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import Layer, Tensor, is_static

#: ops that only say where elements lie: reshape, permute, slice, and the identity the layout planner inserts
#: (a copy into another memory order: the same logical tensor)
VIEW_OPS = frozenset({"reshape", "permute", "slice", "identity"})
#: view ops that are free on their own (aliases of their input): a chain of only these needs no view
FREE_OPS = frozenset({"reshape"})


@dataclass(frozen=True)
class View:
    """Where an operand's elements lie in the memory of ``base`` (see the module docstring)."""

    base: Tensor
    #: the view layers from ``base`` to the operand (inputs) or from the result to ``base`` (results), in graph order
    layers: tuple[Layer, ...]
    shape: tuple[int, ...]
    #: per dim of the operand, the distance in elements between neighbours in ``base``'s memory
    strides: tuple[int, ...]
    #: the element of ``base``'s memory that holds the operand's first element
    offset: int


def static_shape(t: Tensor) -> tuple[int, ...] | None:
    return tuple(int(s) for s in t.shape) if all(is_static(s) for s in t.shape) else None  # type: ignore[call-overload]


def dense_strides(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Strides of a dense tensor whose dims lie in memory in ``order`` (outermost first)."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def reshaped_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Strides of ``new_shape`` viewing the same elements (row-major order) as ``shape`` with ``strides``, or None
    where the elements of a merged group of dims are not evenly spaced (the reshape would need a copy). PyTorch's
    rule for ``Tensor.view``."""
    if not shape:
        return tuple(1 for _ in new_shape)
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        # a chunk ends where the next outer dim does not continue it contiguously
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(out) if view_d == -1 else None


def _apply(layer: Layer, shape: tuple[int, ...], strides: tuple[int, ...],
           offset: int) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """The view after ``layer`` (reading input 0 at shape/strides/offset), or None where it is no strided view."""
    out = static_shape(layer.outputs[0])
    if out is None:
        return None
    if layer.op == "identity":
        return shape, strides, offset
    if layer.op == "permute":
        perm = [int(p) for p in layer.attrs["perm"]]
        return tuple(shape[p] for p in perm), tuple(strides[p] for p in perm), offset
    if layer.op == "slice":
        axis, start, step = int(layer.attrs["axis"]) % len(shape), layer.attrs["start"], layer.attrs["step"]
        if not (is_static(start) and is_static(step)):
            return None
        new_strides = list(strides)
        new_strides[axis] = strides[axis] * int(step)
        return out, tuple(new_strides), offset + int(start) * strides[axis]
    if layer.op == "reshape":
        new = reshaped_strides(shape, strides, out)
        return None if new is None else (out, new, offset)
    return None


def _base_view(t: Tensor, layouts: dict[int, tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    shape = static_shape(t)
    if shape is None:
        return None
    return shape, dense_strides(shape, layouts.get(id(t), tuple(range(t.rank))))


def chain_view(base: Tensor, chain: Sequence[Layer], layouts: dict[int, tuple[int, ...]]) -> View | None:
    """The view of ``chain``'s last result in ``base``'s memory (``chain[0]`` reads ``base``)."""
    start = _base_view(base, layouts)
    if start is None:
        return None
    shape, strides = start
    offset = 0
    for layer in chain:
        step = _apply(layer, shape, strides, offset)
        if step is None:
            return None
        shape, strides, offset = step
    return View(base, tuple(chain), shape, strides, offset)


def _inverse(perm: Sequence[int]) -> list[int]:
    inverse = [0] * len(perm)
    for j, p in enumerate(perm):
        inverse[int(p)] = j
    return inverse


def result_chain_view(chain: Sequence[Layer], layouts: dict[int, tuple[int, ...]]) -> View | None:
    """The view of ``chain[0]``'s input in the memory of ``chain[-1]``'s result (each layer reads the one before):
    where a call that writes that input puts each element so that the chain's result is complete."""
    base = chain[-1].outputs[0]
    start = _base_view(base, layouts)
    if start is None:
        return None
    shape, strides = start
    for layer in reversed(chain):
        source = static_shape(layer.inputs[0])
        if source is None:
            return None
        if layer.op == "permute":  # out dim j is in dim perm[j]: in dim i is out dim inverse[i]
            inverse = _inverse(layer.attrs["perm"])
            shape, strides = tuple(shape[j] for j in inverse), tuple(strides[j] for j in inverse)
        elif layer.op == "reshape":
            new = reshaped_strides(shape, strides, source)
            if new is None:
                return None
            shape, strides = source, new
        elif layer.op != "identity":
            return None  # a slice drops elements: the call's result would not fit
    return View(base, tuple(chain), shape, strides, 0)


def operand_views(layer: Layer, index: int, made_by: dict[int, Layer], readers: dict[int, int],
                  output_ids: set[int], taken: set[int], layouts: dict[int, tuple[int, ...]]) -> list[View]:
    """The views of input ``index`` of ``layer`` through the view layers before it, longest chain first.

    Every layer of a chain writes a tensor only the next one reads (the chain's layers then run nowhere else);
    chains of only reshapes (free already) are left out, and so are layers in ``taken`` (another call's chain).
    """
    chain: list[Layer] = []
    t = layer.inputs[index]
    while True:
        producer = made_by.get(id(t))
        if (producer is None or producer.op not in VIEW_OPS or len(producer.outputs) != 1 or id(producer) in taken
                or readers.get(id(t), 0) != 1 or id(t) in output_ids or not producer.inputs):
            break
        chain.insert(0, producer)
        t = producer.inputs[0]
    views = []
    for start in range(len(chain)):
        part = chain[start:]
        if all(p.op in FREE_OPS for p in part):
            break
        view = chain_view(part[0].inputs[0], part, layouts)
        if view is not None:
            views.append(view)
    return views


def result_views(layer: Layer, consumers: dict[int, list[Layer]], output_ids: set[int], taken: set[int],
                 layouts: dict[int, tuple[int, ...]]) -> list[View]:
    """The views of ``layer``'s result through the view layers after it (each its value's only reader), longest
    chain first; each chain ends with a layer that is not free (a trailing reshape stays the free alias it is)."""
    chain: list[Layer] = []
    t = layer.outputs[0]
    while True:
        readers = consumers.get(id(t), [])
        if len(readers) != 1 or id(t) in output_ids:
            break
        reader = readers[0]
        if reader.op not in VIEW_OPS or reader.op == "slice" or len(reader.outputs) != 1 or id(reader) in taken:
            break
        chain.append(reader)
        t = reader.outputs[0]
    views = []
    for end in range(len(chain), 0, -1):
        part = chain[:end]
        if part[-1].op in FREE_OPS or id(part[-1].outputs[0]) in output_ids:
            continue
        view = result_chain_view(part, layouts)
        if view is not None:
            views.append(view)
    return views
