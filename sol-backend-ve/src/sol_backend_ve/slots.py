"""Which VEs exist and which of them this process may use.

The VE driver's udev rules create ``/dev/veslot<N>`` as a symlink to the
driver's ``/dev/ve<M>``. The slot number N is the id users see (``ve:N`` in
tools, VEDA_VISIBLE_DEVICES); M names the driver's sysfs directory
``ve<M>``. They differ when cards are not in slot order on the PCI bus.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

#: environment variables that move the roots (tests build fake trees)
DEV_ROOT_ENV = "SOL_VE_DEV_ROOT"
SYSFS_ROOT_ENV = "SOL_VE_SYSFS_ROOT"
VISIBLE_ENV = "VEDA_VISIBLE_DEVICES"


def dev_root() -> Path:
    return Path(os.environ.get(DEV_ROOT_ENV) or "/dev")


def sysfs_root() -> Path:
    return Path(os.environ.get(SYSFS_ROOT_ENV) or "/sys/class/ve")


@dataclasses.dataclass(frozen=True)
class Slot:
    slot: int  # /dev/veslot<slot>: the user-visible id
    node: int  # /dev/ve<node>, /sys/class/ve/ve<node>: the driver's id


def find_slots(dev: Path) -> list[Slot]:
    """Every ``veslot<N>`` under ``dev``, by slot number."""
    slots = []
    for path in dev.glob("veslot*"):
        match = re.fullmatch(r"veslot(\d+)", path.name)
        if match:
            slot = int(match.group(1))
            slots.append(Slot(slot, _node_of(path, slot)))
    return sorted(slots, key=lambda s: s.slot)


def _node_of(slot_path: Path, slot: int) -> int:
    # Without the udev symlink (a hand-made device node) slot and driver id coincide.
    target = Path(os.path.realpath(slot_path)).name
    match = re.fullmatch(r"ve(\d+)", target)
    return int(match.group(1)) if match else slot


def visible_slots(slots: list[Slot], spec: str | None) -> list[Slot]:
    """The slots ``VEDA_VISIBLE_DEVICES`` selects, in the order it names them.

    Unset or blank selects all (as in VEDA). Entries are slot numbers; VEDA's
    "N.M" NUMA-node form selects VE N (SOL always uses a whole VE). Entries
    that name no slot of this machine are ignored.
    """
    if spec is None or not spec.strip():
        return list(slots)
    by_slot = {s.slot: s for s in slots}
    chosen: dict[int, Slot] = {}
    for entry in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\.\d+)?\s*", entry)
        if match and int(match.group(1)) in by_slot:
            chosen.setdefault(int(match.group(1)), by_slot[int(match.group(1))])
    return list(chosen.values())
