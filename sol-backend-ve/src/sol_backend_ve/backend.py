"""The ve backend: SX-Aurora Vector Engines as SOL devices, and their toolchain."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sol.records import Backend, Device, ProbeResult

from . import emulator
from .product import product_name
from .slots import VISIBLE_ENV, Slot, dev_root, find_slots, sysfs_root, visible_slots
from .sysfs import properties_from, read_attributes
from .toolchain import compiler_version, configured_cxx, find_cxx

NO_VE = "no /dev/veslot* device files (no SX-Aurora VE in this machine, or the VE driver is not loaded)"


def probe_ve(dev: Path, sysfs: Path, visible: str | None) -> ProbeResult:
    """The VEs under ``dev``/``sysfs`` that ``visible`` (VEDA_VISIBLE_DEVICES) selects.

    ``ve:N`` is the N-th selected VE; its slot number is the ``slot`` property.
    """
    slots = find_slots(dev)
    if not slots:
        return ProbeResult(reason=NO_VE)
    chosen = visible_slots(slots, visible)
    if not chosen:
        present = ", ".join(str(s.slot) for s in slots)
        return ProbeResult(reason=f"{VISIBLE_ENV}={visible!r} selects none of this machine's VEs (slots {present})")
    return ProbeResult(devices=tuple(_device(index, slot, sysfs) for index, slot in enumerate(chosen)))


def emulated_device() -> Device:
    """``ve:0`` of the emulated VE (`sol_backend_ve.emulator`): SOL's tests and CI, never a real VE."""
    memory = _emulated_capacity(os.environ.get(emulator.MEMORY_ENV, ""))
    return Device("ve", 0, "NEC SX-Aurora VE (emulated)", "ve",
                  {"emulated": True, "cores": 8, "memory_bytes": memory})


def _emulated_capacity(text: str, default: int = 8 << 30) -> int:
    """The emulated VE's memory: SOL_VE_EMULATE_MEMORY as the emulator reads it (a number, optional k/m/g/t)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgtKMGT]?)\S*", text)
    if not match:
        return default
    scale = 1024 ** " kmgt".index(match.group(2).lower() or " ")
    return int(float(match.group(1)) * scale) or default


def _device(index: int, slot: Slot, sysfs: Path) -> Device:
    properties = {"slot": slot.slot, "sysfs_node": f"ve{slot.node}"}
    properties.update(properties_from(read_attributes(sysfs / f"ve{slot.node}")))
    return Device("ve", index, product_name(properties), "ve", properties)


class VeBackend(Backend):
    name = "ve"
    description = "NEC SX-Aurora TSUBASA Vector Engines (nc++)"
    framework_devices: ClassVar[Mapping[str, str]] = {"pytorch": "ve"}  # PyTorch's VE tensors (sol_backend_ve.torch_ve)
    # sysfs reads of a VE in a bad state can block; sol-core probes in a
    # child process and gives up after this long.
    probe_timeout = 10.0

    def probe(self) -> ProbeResult:
        if emulator.enabled():  # opt-in only, and labelled wherever the device shows
            return ProbeResult(devices=(emulated_device(),))
        return probe_ve(dev_root(), sysfs_root(), os.environ.get(VISIBLE_ENV))

    def versions(self) -> Mapping[str, str]:
        cxx = configured_cxx()
        versions = {
            Path(cxx).name: compiler_version(find_cxx(cxx)),
            # upstream LLVM's VE target, an alternative to nc++ for generated code
            "clang-14": compiler_version(shutil.which("clang-14")),
        }
        if emulator.enabled():
            versions["veda"] = f"emulated ({emulator.ENV}=1): SOL's VEDA subset, device memory in a separate process"
        return versions

    def runtime(self, device: Device) -> Any:
        """VEDA (NEC's, or the emulator's with SOL_VE_EMULATE=1) behind sol-core's device contract."""
        from .runtime import open_runtime  # lazy: loads libveda only when a model is compiled for the VE

        return open_runtime(device.index)

    def flavour(self) -> Any:
        """The VE flavour (`sol_backend_ve.flavour.VeFlavour`): nc++, or g++ for the emulated VE."""
        from .flavour import VeFlavour  # lazy: the plugin's import stays cheap

        return VeFlavour()
