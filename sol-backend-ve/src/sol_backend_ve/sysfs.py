"""Reading a VE's description from its sysfs directory ``/sys/class/ve/ve<N>/``.

Attribute names and units follow the VE driver and VEDA (memory in GiB,
clocks in MHz, caches in KiB, ``cores_enable`` a hex bit mask of the usable
cores). Driver versions differ in what they publish, so every attribute is
optional: a missing or unreadable one is simply not reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

ATTRIBUTES = (
    "model",
    "type",
    "cores_enable",
    "num_of_core",
    "cores",
    "memory_size",
    "os_state",
    "ve_state",
    "clock_chip",
    "clock_base",
    "clock_memory",
    "cache_l1d",
    "cache_l1i",
    "cache_l2",
    "cache_llc",
    "abi_version",
    "fw_version",
    "partitioning_mode",
)

# enum os_state / enum ve_state of the VE driver
OS_STATES = ("online", "offline", "initializing", "terminating")
VE_STATES = ("uninitialized", "online", "offline", "maintenance", "unavailable")


def read_attributes(node_dir: Path) -> dict[str, str]:
    """The attributes of `ATTRIBUTES` that ``node_dir`` has, as stripped text."""
    found = {}
    for name in ATTRIBUTES:
        try:
            found[name] = (node_dir / name).read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            continue
    return found


def properties_from(attrs: Mapping[str, str]) -> dict[str, Any]:
    """SOL device properties of one VE from its raw attributes."""
    props: dict[str, Any] = {}
    cores = _core_count(attrs)
    if cores is not None:
        props["cores"] = cores
    memory_gib = _int(attrs.get("memory_size"))
    if memory_gib is not None:
        props["memory_bytes"] = memory_gib * 2**30
    for name in ("model", "type", "abi_version", "fw_version"):
        value = _int(attrs.get(name))
        if value is not None:
            props[name] = value
    for name, states in (("os_state", OS_STATES), ("ve_state", VE_STATES)):
        value = _int(attrs.get(name))
        if value is not None:
            props[name] = states[value] if 0 <= value < len(states) else f"unknown ({value})"
    for name in ("clock_chip", "clock_base", "clock_memory"):
        value = _int(attrs.get(name))
        if value is not None:
            props[f"{name}_mhz"] = value
    caches = {
        label: kib * 1024
        for label, name in (("L1d", "cache_l1d"), ("L1i", "cache_l1i"), ("L2", "cache_l2"), ("LLC", "cache_llc"))
        if (kib := _int(attrs.get(name))) is not None
    }
    if caches:
        props["cache_bytes"] = caches
    partitioned = _int(attrs.get("partitioning_mode"))
    if partitioned is not None:
        props["numa_nodes"] = 2 if partitioned else 1
    return props


def _core_count(attrs: Mapping[str, str]) -> int | None:
    # cores_enable counts the cores that work (a VE may ship with some fused off); num_of_core is the design's.
    mask = _int(attrs.get("cores_enable"), base=16)
    if mask is not None:
        return bin(mask).count("1")
    return _int(attrs.get("num_of_core")) or _int(attrs.get("cores"))


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None
