from __future__ import annotations

from sol_backend_arm64.parts import core_name, vendor_name


def test_known_cores():
    assert core_name("0x41", "0xd4f") == "ARM Neoverse-V2"  # NVIDIA Grace
    assert core_name("0x46", "0x001") == "Fujitsu A64FX"
    assert core_name("0x48", "0xd01") == "HiSilicon Kunpeng-920"


def test_unknown_codes_are_named_by_their_codes():
    assert core_name("0x41", "0xfff") == "ARM CPU part 0xfff"
    assert core_name("0x99", "0x001") == "implementer 0x99 CPU part 0x001"
    assert vendor_name("garbage") == "unknown"
