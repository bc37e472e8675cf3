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
"""

from __future__ import annotations

from ..ir.graph import Dim, Graph, Layer, Tensor
from ._rewrite import only_reader

#: elementwise layers whose result at an index depends only on their operands at that index
MOVABLE = frozenset({
    "add", "sub", "mul", "div", "maximum", "minimum",
    "relu", "leaky_relu", "clamp", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "elu",
})


def elementwise_before_permute(graph: Graph) -> Graph:
    # one move at a time: each rewrite changes who reads what (maps rebuilt, as in `sole_reader_pairs`)
    while (pair := _next_move(graph)) is not None:
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
        if layer is not None and _movable(layer, y):
            return permute, layer
    return None


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
