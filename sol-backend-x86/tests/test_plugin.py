"""The installed distribution is found through its entry point and works through sol's API."""

from __future__ import annotations

import sol
from sol.plugins import registry


def test_entry_point_is_discovered_and_ok():
    assert "x86" in registry().backends
    (info,) = [p for p in sol.plugins() if p.kind == "backend" and p.name == "x86"]
    assert info.status == "ok", info.error
    assert info.distribution == "sol-backend-x86"
    assert info.module == "sol_backend_x86.plugin"
    assert set(info.hooks) == {"sol_backends", "sol_config_keys", "sol_deploy_targets"}


def test_config_key_is_declared():
    assert sol.config["x86::onednn_library"] == ""


def test_device_dump_lists_x86(capsys):
    from sol.devices import dump

    text = dump()
    assert text.startswith("x86: ") or "\nx86: " in text
    assert "[x86:0]" in text or "no devices: not an x86-64 machine" in text


def test_versions_report_the_toolchain():
    versions = sol.versions()
    assert versions["plugin:x86"] == "sol-backend-x86 0.1.0"
    assert "x86:onednn" in versions
