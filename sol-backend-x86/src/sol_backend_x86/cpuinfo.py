"""Parsing ``/proc/cpuinfo``.

The kernel prints one ``key : value`` block per logical CPU, blocks separated
by blank lines. x86 and arm64 kernels use different keys ("flags" versus
"Features", "model name" versus "CPU part"), so this module knows the format
only; each backend picks the keys it needs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path

PROC_CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """The parsed file: one mapping per logical CPU, plus keys printed outside them."""

    processors: tuple[Mapping[str, str], ...]
    #: keys outside every processor block (e.g. "Hardware" on some arm64 kernels)
    system: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def value(self, key: str) -> str | None:
        """The first processor's value of ``key``, else the system-wide one."""
        for proc in self.processors:
            if key in proc:
                return proc[key]
        return self.system.get(key)

    def distinct(self, key: str) -> list[str]:
        """Every distinct value of ``key`` over the processors, in order of first appearance."""
        seen: dict[str, None] = {}
        for proc in self.processors:
            if key in proc:
                seen.setdefault(proc[key], None)
        return list(seen)

    def features(self, key: str) -> frozenset[str]:
        """The feature words *every* processor lists under ``key``.

        The intersection, because generated code may be scheduled on any core
        (hybrid CPUs can differ per core).
        """
        sets = [frozenset(proc[key].split()) for proc in self.processors if key in proc]
        if sets:
            return frozenset.intersection(*sets)
        return frozenset(self.system.get(key, "").split())

    def cpu_ids(self) -> list[int]:
        """The logical CPU numbers ("processor" values) the file lists."""
        ids = []
        for proc in self.processors:
            try:
                ids.append(int(proc["processor"]))
            except ValueError:
                continue
        return ids

    def by_cpu(self) -> dict[int, Mapping[str, str]]:
        """Processor blocks keyed by logical CPU number."""
        out: dict[int, Mapping[str, str]] = {}
        for proc in self.processors:
            try:
                out[int(proc["processor"])] = proc
            except ValueError:
                continue
        return out


def parse_cpuinfo(text: str) -> CpuInfo:
    processors: list[dict[str, str]] = []
    system: dict[str, str] = {}
    current: dict[str, str] = {}

    def flush() -> None:
        if "processor" in current:
            processors.append(dict(current))
        else:
            system.update(current)
        current.clear()

    for line in text.splitlines():
        if not line.strip():
            flush()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        # Some older arm kernels list "processor : N" lines without blank lines between them.
        if key == "processor" and "processor" in current:
            flush()
        current[key] = value.strip()
    flush()
    return CpuInfo(processors=tuple(processors), system=system)


def read_cpuinfo(path: Path = PROC_CPUINFO) -> CpuInfo:
    """Parse the file at ``path``; raises OSError when it cannot be read."""
    return parse_cpuinfo(path.read_text(encoding="utf-8", errors="replace"))


@functools.cache
def host_flags() -> frozenset[str]:
    """This machine's CPU flags (/proc/cpuinfo), read once; empty where it cannot be read (nothing is assumed)."""
    try:
        return frozenset(read_cpuinfo().features("flags"))
    except OSError:
        return frozenset()


def host_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512F."""
    return "avx512f" in host_flags()
