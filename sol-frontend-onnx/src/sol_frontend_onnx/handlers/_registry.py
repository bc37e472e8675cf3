"""The table of handlers by ONNX op type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[[Any], Any]

HANDLERS: dict[str, Handler] = {}


def handler(*op_types: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in op_types:
            if name in HANDLERS:
                raise ValueError(f"ONNX op {name!r} has two handlers")
            HANDLERS[name] = fn
        return fn

    return register
