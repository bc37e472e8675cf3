from __future__ import annotations

import json
import os
import subprocess
import sys

from sol_backend_ve.backend import NO_VE, VeBackend, probe_ve


def test_two_ves(ve_tree, type_20b, type_10b_offline):
    # Slot 0 is the driver's ve1 and slot 1 its ve0 (cards not in PCI order).
    dev, sysfs = ve_tree({0: (1, type_20b), 1: (0, type_10b_offline)})
    result = probe_ve(dev, sysfs, None)
    assert [d.id for d in result.devices] == ["ve:0", "ve:1"]
    first, second = result.devices
    assert first.name == "NEC SX-Aurora Tsubasa VE Type 20B"
    assert (first.properties["slot"], first.properties["sysfs_node"]) == (0, "ve1")
    assert (first.properties["cores"], first.properties["memory_bytes"]) == (8, 48 * 2**30)
    assert second.name == "NEC SX-Aurora Tsubasa VE Type 10B"
    assert (second.properties["slot"], second.properties["os_state"]) == (1, "offline")
    json.dumps([d.to_dict() for d in result.devices])


def test_veda_visible_devices_filters_and_reorders(ve_tree, type_20b, type_10b_offline):
    dev, sysfs = ve_tree({0: (1, type_20b), 1: (0, type_10b_offline)})
    reordered = probe_ve(dev, sysfs, "1,0").devices
    assert [(d.id, d.properties["slot"]) for d in reordered] == [("ve:0", 1), ("ve:1", 0)]
    only = probe_ve(dev, sysfs, "1").devices
    assert [(d.id, d.name) for d in only] == [("ve:0", "NEC SX-Aurora Tsubasa VE Type 10B")]
    none = probe_ve(dev, sysfs, "5")
    assert none.devices == ()
    assert none.reason == "VEDA_VISIBLE_DEVICES='5' selects none of this machine's VEs (slots 0, 1)"


def test_empty_tree(ve_tree, tmp_path):
    dev, sysfs = ve_tree({})
    assert probe_ve(dev, sysfs, None).reason == NO_VE
    assert NO_VE == ("no /dev/veslot* device files (no SX-Aurora VE in this machine, or the VE driver is not loaded)")
    assert probe_ve(tmp_path / "no-dev", tmp_path / "no-sys", None).reason == NO_VE


def test_slot_without_sysfs_directory_is_still_a_device(ve_tree, type_20b):
    dev, sysfs = ve_tree({0: (0, type_20b)})
    (dev / "veslot1").write_text("")
    devices = probe_ve(dev, sysfs, None).devices
    assert [d.name for d in devices] == ["NEC SX-Aurora Tsubasa VE Type 20B", "NEC SX-Aurora Tsubasa VE"]
    assert devices[1].properties == {"slot": 1, "sysfs_node": "ve1"}


def test_backend_reads_the_environment(ve_tree, monkeypatch, type_20b):
    dev, sysfs = ve_tree({0: (0, type_20b), 1: (1, type_20b)})
    monkeypatch.setenv("SOL_VE_DEV_ROOT", str(dev))
    monkeypatch.setenv("SOL_VE_SYSFS_ROOT", str(sysfs))
    monkeypatch.setenv("VEDA_VISIBLE_DEVICES", "1")
    (device,) = VeBackend().probe().devices
    assert device.properties["slot"] == 1


def test_sol_devices_in_a_fresh_process(ve_tree, type_20b, type_10b_offline):
    # The whole path: entry point, sol-core's out-of-process probe (probe_timeout), the dump.
    dev, sysfs = ve_tree({0: (1, type_20b), 1: (0, type_10b_offline)})
    env = {**os.environ, "SOL_VE_DEV_ROOT": str(dev), "SOL_VE_SYSFS_ROOT": str(sysfs), "VEDA_VISIBLE_DEVICES": "1,0"}
    code = "from sol.devices import dump\nprint(dump())\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "ve: NEC SX-Aurora TSUBASA Vector Engines (nc++) (2 device(s))" in out
    assert "[ve:0] NEC SX-Aurora Tsubasa VE Type 10B, 8 cores, 48.0 GiB" in out
    assert "[ve:1] NEC SX-Aurora Tsubasa VE Type 20B, 8 cores, 48.0 GiB" in out
