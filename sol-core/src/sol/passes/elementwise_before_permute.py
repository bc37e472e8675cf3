"""f(permute(x), b) -> permute(f(x, permute^-1(b))): elementwise layers move before a permute.

ConvNeXt's block ends with ``Linear -> permute(0, 3, 1, 2) -> mul(layer
scale) -> add(residual)``. After the permute, the scale and the residual add
are a pass of their own over the activation; before it they follow the
Linear directly and join its library call as post-ops (or the loop of the
DFP code that wrote ``x``). Elementwise ops and permutes commute exactly, so
the other operands only have to be brought into ``x``'s order: a broadcast
operand such as the layer scale (96, 1, 1) becomes a reshape to
(1, 1, 1, 96) (`permute_as_reshape` turns permutes that move only dims of
size 1 into reshapes), and a full-size operand such as the residual gets the
inverse permute, which layout planning makes a free view where its layout
allows (`sol.codegen.layout.permuted_layout`).

Done only where the permute is the sole reader of ``x`` and the elementwise
layer the sole reader of the permute (neither value a model output), and
every operand has the result's dtype. Repeated, so a chain of elementwise
layers after one permute moves as a whole.

Termination. A move may not create its own next candidate: the operand
permutes it inserts must never be a permute the pass moves a layer across.
A permute is a candidate only when its input has a producer and no other
reader, and its output's only reader is a movable layer of its own shape.
So a move is refused when a full-size operand ``t`` (other than the permuted
value) has a producer and the moved layer is its only reader, or has a lower
rank (the reshape padding it is such a producer): its inverse
permute would be such a candidate, and moving the layer back across it
re-creates the first permute, forever (timm's CoaT: ``q * v.transpose(-1, -2)``
where both ``q`` and ``v`` are used only there). Every other operand permute
is never a candidate: a full-size operand with no producer (input, parameter)
gives a permute whose input has none; one with other readers keeps them (a
move never changes how many layers read a tensor that survives it: the
permute's reader of ``x`` becomes the moved layer's, the layer's reader of an
operand becomes the operand permute's); a broadcast operand's permute writes
a shape other than the moved layer's. Hence the measure

    M = sum, over candidate-eligible permutes P (input produced and read by P
        only), of the number of movable layers on P's chain: the sole readers
        followed from P's output through movable layers of the same shape and
        permutes,

drops by exactly one per move: the moved layer leaves P's chain (the
re-created permute keeps the rest of it); a chain that ran through ``x``
still holds the moved layer; no chain runs through an operand (a full-size
one on a chain has a producer and only the moved layer reads it: refused;
a broadcast one ends its chain); and the inserted operand permutes are not
eligible or have empty chains. Eligibility never changes either, as reader
counts do not. So the pass stops after at most M (<= permutes x movable
layers) moves. The pass driver's budget (`sol.passes.budget`) backs this up.
"""

from __future__ import annotations

from ..ir.graph import Dim, Graph, Layer, Tensor
from ._rewrite import only_reader
from .budget import step

#: elementwise layers whose result at an index depends only on their operands at that index
MOVABLE = frozenset({
    "add", "sub", "mul", "div", "maximum", "minimum",
    "relu", "leaky_relu", "clamp", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "elu",
})


def elementwise_before_permute(graph: Graph) -> Graph:
    # one move at a time: each rewrite changes who reads what (maps rebuilt, as in `sole_reader_pairs`)
    # terminates: each move lowers the measure M of the module docstring by one
    while (pair := _next_move(graph)) is not None:
        step(graph)
        _rewrite(graph, *pair)
    return graph


def _next_move(graph: Graph) -> tuple[Layer, Layer] | None:
    """(permute, the elementwise layer to move before it), or None when nothing is left to move."""
    producers = graph.producers()
    consumers = graph.consumers()
    for permute in graph.layers:
        if permute.op != "permute":
            continue
        x, y = permute.inputs[0], permute.outputs[0]
        if id(x) not in producers or only_reader(graph, consumers, x) is not permute:
            continue
        layer = only_reader(graph, consumers, y)
        if layer is not None and _movable(layer, y) and not _creates_candidate(graph, producers, consumers, layer, y):
            return permute, layer
    return None


def _creates_candidate(graph: Graph, producers: dict[int, Layer], consumers: dict[int, list[Layer]],
                       layer: Layer, y: Tensor) -> bool:
    """Whether moving ``layer`` would insert an operand permute that is itself a candidate (see Termination).

    That is a full-size operand other than ``y`` that a layer writes and only ``layer`` reads, or one of lower
    rank (its padding reshape is such a writer): its inverse permute would read a produced value nothing else
    reads and feed ``layer`` alone, so the next move would carry ``layer`` back across it.
    """
    for t in layer.inputs:
        if t is y or (1,) * (y.rank - t.rank) + tuple(t.shape) != tuple(y.shape):
            continue  # broadcast operands: their permute writes a shape other than the moved layer's
        if t.rank < y.rank:
            return True  # the reshape that pads its rank is a producer only its permute reads
        if id(t) in producers and only_reader(graph, consumers, t) is layer:
            return True
    return False


def _movable(layer: Layer, y: Tensor) -> bool:
    if layer.op not in MOVABLE or len(layer.outputs) != 1:
        return False
    out = layer.outputs[0]
    if out.shape != y.shape or out.dtype != y.dtype or sum(t is y for t in layer.inputs) != 1:
        return False
    return all(t.dtype == y.dtype and t.rank <= y.rank for t in layer.inputs)


def _rewrite(graph: Graph, permute: Layer, layer: Layer) -> None:
    """``layer`` reads ``x`` (operands brought into x's dim order) and the permute writes ``layer``'s result."""
    x, y = permute.inputs[0], permute.outputs[0]
    perm = tuple(permute.attrs["perm"])
    inverse = tuple(perm.index(d) for d in range(len(perm)))  # output dim of each input dim
    inputs = [x if t is y else _in_order_of_x(graph, t, y.rank, inverse, layer.name) for t in layer.inputs]
    moved = Tensor(graph.unique_name(f"{layer.name}_before_permute"), x.dims, layer.outputs[0].dtype)
    index = graph.layers.index(layer)
    graph.layers[index:index + 1] = [
        Layer(layer.op, inputs, [moved], dict(layer.attrs), layer.name),
        Layer("permute", [moved], [layer.outputs[0]], {"perm": perm}, permute.name),
    ]
    graph.layers.remove(permute)


def _in_order_of_x(graph: Graph, operand: Tensor, rank: int, inverse: tuple[int, ...], name: str) -> Tensor:
    """``operand`` (which broadcasts against the permute's output) brought into the permute's input dim order.

    The layers doing it go right after the operand's producer: a library call that takes the moved layer as
    a post-op needs its operands ready when it starts.
    """
    if operand.rank == 0:
        return operand  # a scalar broadcasts in any order
    layers: list[Layer] = []
    if operand.rank < rank:  # numpy broadcasting aligns the trailing dims: make the leading 1s explicit
        shape = (1,) * (rank - operand.rank) + tuple(operand.shape)
        padded = Tensor(graph.unique_name(f"{operand.name}_rank{rank}"),
                        (*(Dim(1),) * (rank - operand.rank), *operand.dims), operand.dtype)
        layers.append(Layer("reshape", [operand], [padded], {"shape": shape}, name))
        operand = padded
    ordered = Tensor(graph.unique_name(f"{operand.name}_permuted"), tuple(operand.dims[i] for i in inverse),
                     operand.dtype)
    layers.append(Layer("permute", [operand], [ordered], {"perm": inverse}, name))
    producer = graph.producers().get(id(layers[0].inputs[0]))
    at = graph.layers.index(producer) + 1 if producer is not None else 0
    graph.layers[at:at] = layers
    return ordered
