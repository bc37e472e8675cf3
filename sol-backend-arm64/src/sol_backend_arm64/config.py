"""The ``arm64::`` settings: which cross toolchain SOL uses for ARM64 code."""

from __future__ import annotations

import sol
from sol.records import ConfigKey

CXX_KEY = ConfigKey(
    "arm64::cxx",
    str,
    "aarch64-linux-gnu-g++",
    "C++ compiler for ARM64 code (a cross compiler on other machines; on ARM64 Linux it is the native g++).",
)
QEMU_KEY = ConfigKey(
    "arm64::qemu",
    str,
    "qemu-aarch64",
    "User-mode emulator that runs cross-compiled ARM64 code on other machines (testing sol.deploy output).",
)
KEYS = (CXX_KEY, QEMU_KEY)


def configured(key: ConfigKey) -> str:
    # .get: a registry built without this plugin (tests) does not declare the key.
    return str(sol.config.get(key.name, key.default))
