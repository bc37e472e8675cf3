"""Sizes from torch.export's symbolic shapes: the batch SymInt's symbol becomes `sol.ir.BATCH`."""

from __future__ import annotations

from typing import Any

import sympy
import torch
from sol.errors import SolUnsupportedError
from sol.ir import BATCH, Size, as_size


class SizeMapper:
    """Turns SymInts / ints into SOL sizes; knows which torch symbol is the wildcard batch."""

    def __init__(self) -> None:
        self.symbols: dict[sympy.Symbol, sympy.Expr] = {}

    def bind_batch(self, value: Any) -> None:
        """Declare the size ``value`` (a SymInt of an input's batch dim) to be BATCH."""
        if isinstance(value, torch.SymInt):
            expr = value.node.expr
            if isinstance(expr, sympy.Symbol):
                self.symbols[expr] = BATCH

    def size(self, value: Any) -> Size:
        if isinstance(value, torch.SymInt):
            expr = value.node.expr
            if isinstance(expr, sympy.Integer):
                return int(expr)
            unknown = expr.free_symbols - self.symbols.keys()
            if unknown:
                raise SolUnsupportedError(
                    f"the size {expr} depends on dynamic dimensions other than the batch ({sorted(map(str, unknown))}); "
                    "SOL supports only a wildcard batch dimension: give the other dims fixed sizes in sol.input")
            return as_size(expr.xreplace(self.symbols))
        if isinstance(value, (torch.SymFloat, torch.SymBool)):
            raise SolUnsupportedError(f"a symbolic {type(value).__name__} ({value}) is not supported")
        return int(value)

    def shape(self, values: Any) -> tuple[Size, ...]:
        return tuple(self.size(v) for v in values)
