"""Naming ARM cores from the ``CPU implementer`` and ``CPU part`` codes.

arm64 kernels print no "model name"; the codes identify the core design, as
in util-linux's lscpu. Only cores that run Linux servers and workstations
are listed; others are named by their codes.
"""

from __future__ import annotations

IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0x6D: "Microsoft",
    0xC0: "Ampere",
}

PARTS = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD04): "Cortex-A35",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD46): "Cortex-A510",
    (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4D): "Cortex-A715",
    (0x41, 0xD4E): "Cortex-X3",
    (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD80): "Cortex-A520",
    (0x41, 0xD81): "Cortex-A720",
    (0x41, 0xD82): "Cortex-X4",
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD8E): "Neoverse-N3",
    (0x43, 0x0AF): "ThunderX2",
    (0x46, 0x001): "A64FX",
    (0x48, 0xD01): "Kunpeng-920",
    (0x4E, 0x004): "Carmel",
    (0xC0, 0xAC3): "Ampere-1",
    (0xC0, 0xAC4): "Ampere-1a",
}


def vendor_name(implementer: str) -> str:
    code = _code(implementer)
    return IMPLEMENTERS.get(code, f"implementer {implementer}") if code is not None else "unknown"


def core_name(implementer: str, part: str) -> str:
    """E.g. "ARM Neoverse-V2" for ("0x41", "0xd4f")."""
    vendor_code, part_code = _code(implementer), _code(part)
    model = PARTS.get((vendor_code, part_code)) if vendor_code is not None and part_code is not None else None
    return f"{vendor_name(implementer)} {model or f'CPU part {part}'}"


def _code(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None
