"""The product name of a VE ("NEC SX-Aurora Tsubasa VE Type 20B").

NEC's libveproductinfo looks model and type up in a table that ships with
the VE software; where it is absent VEDA infers the type from the model,
cores, memory and clocks. This is that inference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "NEC SX-Aurora Tsubasa VE"


def product_name(props: Mapping[str, Any]) -> str:
    """Name from the device properties `sysfs.properties_from` makes."""
    model = props.get("model")
    type_name = _type_name(model, props)
    if type_name:
        return f"{PREFIX} Type {type_name}"
    if model is None:
        return PREFIX
    return f"{PREFIX} (model {model}, type {props.get('type', '?')})"


def _type_name(model: Any, props: Mapping[str, Any]) -> str | None:
    cores = props.get("cores")
    memory_gib = props.get("memory_bytes", 0) // 2**30
    clock_chip = props.get("clock_chip_mhz", 0)
    # The "E" types have faster memory.
    fast_memory = "E" if props.get("clock_memory_mhz", 0) >= 1700 else ""
    if model == 1:  # first generation, Type 10
        if memory_gib == 48:
            return ("10A" if clock_chip >= 1500 else "10B") + fast_memory
        if memory_gib == 24:
            return "10C" + fast_memory
    if model == 2:  # Type 20: 10 cores (20A) or 8 cores (20B)
        if cores in (5, 10):
            return "20A"
        if cores in (4, 8):
            return "20B"
    return None
