"""The installed distribution is found through its entry point and works through sol's API."""

from __future__ import annotations

import sol
from sol.devices import dump
from sol.plugins import registry
from sol_backend_ve import VeBackend


def test_entry_point_is_discovered_and_ok():
    assert "ve" in registry().backends
    (info,) = [p for p in sol.plugins() if p.kind == "backend" and p.name == "ve"]
    assert info.status == "ok", info.error
    assert info.distribution == "sol-backend-ve"


def test_probe_runs_out_of_process():
    assert VeBackend.probe_timeout == 10.0


def test_config_key_is_declared():
    assert sol.config["ve::cxx"] == "nc++"


def test_device_dump_shows_ve():
    assert "ve: NEC SX-Aurora TSUBASA Vector Engines" in dump()
