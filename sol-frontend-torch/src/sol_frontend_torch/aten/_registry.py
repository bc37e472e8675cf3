"""The table from aten op names to handlers, and what a handler may call on the converter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from sol.ir import Graph, Size, Tensor

Handler = Callable[..., Any]

#: aten op name (no namespace, no overload; in-place ops fall back to the name without "_") -> handler
HANDLERS: dict[str, Handler] = {}

#: ops computing sizes only (their value is taken from torch's symbolic shape metadata)
SIZE_OPS = frozenset({"sym_size", "sym_numel", "sym_stride", "sym_storage_offset"})

#: ops that only assert facts torch already checked; they produce nothing SOL needs
IGNORED = frozenset({"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "sym_constrain_range",
                     "_assert_async", "_functional_assert_async", "_assert_async_msg"})


def aten(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


class Context:
    """What handlers use: the graph under construction and helpers (implemented by the converter)."""

    graph: Graph
    node: torch.fx.Node
    where: str
    #: whether the model is captured for training (batch statistics, active dropout)
    training: bool = False

    def size(self, value: Any) -> Size:
        raise NotImplementedError

    def const(self, value: Any, like: Tensor | None = None, name: str = "scalar") -> Tensor:
        raise NotImplementedError

    def layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        raise NotImplementedError

    def meta_shape(self, node: torch.fx.Node | None = None) -> tuple[Size, ...]:
        raise NotImplementedError

    def mutate(self, state: Tensor, value: Tensor) -> None:
        """Record that the model writes ``value`` into its buffer ``state`` (e.g. running statistics)."""
        raise NotImplementedError

    def written(self, name: str) -> Tensor | None:
        """The value the model has written into its buffer ``name`` so far (None: not written yet)."""
        raise NotImplementedError

    def rng_key(self) -> Tensor:
        """The int64[2] (seed, step) input of random layers, added to the graph on first use."""
        raise NotImplementedError

    def rng_stream(self) -> int:
        """A number unique per random layer of the model (its Philox stream)."""
        raise NotImplementedError

    def one(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> Tensor:
        (out,) = self.layer(op, inputs, attrs)
        return out


def ints(value: Any, rank: int) -> tuple[int, ...]:
    """An int or a list of ints (PyTorch's conv/pool convention) as a tuple of ``rank`` ints."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1 and rank > 1:
            return (int(value[0]),) * rank
        return tuple(int(v) for v in value)
    return (int(value),) * rank


def axis(value: int, rank: int) -> int:
    return value % rank if rank else 0
