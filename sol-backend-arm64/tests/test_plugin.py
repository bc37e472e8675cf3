"""The installed distribution is found through its entry point and works through sol's API."""

from __future__ import annotations

import platform

import sol
from sol.devices import dump
from sol.plugins import registry


def test_entry_point_is_discovered_and_ok():
    assert "arm64" in registry().backends
    (info,) = [p for p in sol.plugins() if p.kind == "backend" and p.name == "arm64"]
    assert info.status == "ok", info.error
    assert info.distribution == "sol-backend-arm64"
    assert set(info.hooks) == {"sol_backends", "sol_config_keys", "sol_deploy_targets"}


def test_config_keys_are_declared():
    assert sol.config["arm64::cxx"] == "aarch64-linux-gnu-g++"
    assert sol.config["arm64::qemu"] == "qemu-aarch64"


def test_device_dump_shows_arm64_with_its_reason():
    text = dump()
    assert "arm64: " in text
    if platform.machine().lower() not in {"aarch64", "arm64"}:
        assert "no devices: not an ARM64 machine" in text
