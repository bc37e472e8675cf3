"""GELU's tanh approximation written out elementwise becomes one ``gelu(approximate="tanh")`` layer.

GPT-2 (transformers' ``NewGELUActivation``) and the models copied from it
spell the activation as ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 *
x^3)))``: nine elementwise layers that read ``x`` three times. Because ``x``
has several readers, the linear before it cannot take the chain as post-ops
and it ran as two clusters of generated code, ~0.2 ms per GPT-2 block on two
cores. As one ``gelu`` layer it is a single post-op of that linear (oneDNN's
``eltwise_gelu_tanh``), or one loop without a library.

Matched up to the order of commutative operands, with ``x^3`` as ``x * x * x``
(either association) or ``pow(x, 3)``, and the constants to float32 precision.
The layers the match leaves unread are removed by the dead-layer pass.
"""

from __future__ import annotations

import math

from ..ir.graph import Graph, Layer, Tensor
from .budget import step

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _scalar(t: Tensor) -> float | None:
    if t.kind not in ("const", "param") or t.data is None or t.data.size != 1:
        return None
    return float(t.data.reshape(()))


def _close(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= 1e-6 * abs(expected)


class _Matcher:
    def __init__(self, graph: Graph) -> None:
        self.producers = graph.producers()

    def layer(self, t: Tensor, op: str) -> Layer | None:
        p = self.producers.get(id(t))
        return p if p is not None and p.op == op and len(p.inputs) == 2 else None

    def times_constant(self, t: Tensor, constant: float) -> Tensor | None:
        """y where ``t = y * constant`` (either order)."""
        mul = self.layer(t, "mul")
        if mul is None:
            return None
        a, b = mul.inputs
        if _close(_scalar(b), constant):
            return a
        return b if _close(_scalar(a), constant) else None

    def plus_constant(self, t: Tensor, constant: float) -> Tensor | None:
        add = self.layer(t, "add")
        if add is None:
            return None
        a, b = add.inputs
        if _close(_scalar(b), constant):
            return a
        return b if _close(_scalar(a), constant) else None

    def is_cube_of(self, t: Tensor, x: Tensor) -> bool:
        p = self.producers.get(id(t))
        if p is None:
            return False
        if p.op == "pow" and p.inputs[0] is x:
            exponent = _scalar(p.inputs[1]) if len(p.inputs) > 1 else p.attrs.get("exponent")
            return exponent is not None and float(exponent) == 3.0
        if p.op != "mul" or len(p.inputs) != 2:
            return False
        a, b = p.inputs
        return (a is x and self.is_square_of(b, x)) or (b is x and self.is_square_of(a, x))

    def is_square_of(self, t: Tensor, x: Tensor) -> bool:
        p = self.producers.get(id(t))
        return p is not None and p.op == "mul" and len(p.inputs) == 2 and p.inputs[0] is x and p.inputs[1] is x

    def tanh_argument_of(self, t: Tensor) -> Tensor | None:
        """x where ``t = tanh(sqrt(2/pi) * (x + 0.044715 * x^3))``."""
        tanh = self.producers.get(id(t))
        if tanh is None or tanh.op != "tanh":
            return None
        inner = self.times_constant(tanh.inputs[0], _SQRT_2_OVER_PI)
        add = self.layer(inner, "add") if inner is not None else None
        if add is None:
            return None
        for x, other in (add.inputs, reversed(add.inputs)):
            cube = self.times_constant(other, 0.044715)
            if cube is not None and self.is_cube_of(cube, x):
                return x
        return None

    def gelu_input(self, mul: Layer) -> Tensor | None:
        """x when ``mul`` computes ``(0.5 * x) * (1 + tanh(...x...))`` (operands in either order)."""
        for half, rest in (mul.inputs, reversed(mul.inputs)):
            x = self.times_constant(half, 0.5)
            one_plus = self.plus_constant(rest, 1.0)
            if x is not None and one_plus is not None and self.tanh_argument_of(one_plus) is x:
                return x
        return None


def gelu_tanh_from_elementwise(graph: Graph) -> Graph:
    matcher = _Matcher(graph)
    for mul in [layer for layer in graph.layers if layer.op == "mul" and len(layer.inputs) == 2]:
        x = matcher.gelu_input(mul)
        if x is None or x.dtype != mul.outputs[0].dtype or x.shape != mul.outputs[0].shape:
            continue
        step(graph)
        # the final product becomes the gelu in place: same output tensor, same position (x comes before it)
        mul.op, mul.inputs, mul.attrs = "gelu", [x], {"approximate": "tanh"}
        matcher = _Matcher(graph)
    return graph
