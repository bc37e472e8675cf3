from __future__ import annotations

from sol_backend_ve.product import product_name
from sol_backend_ve.sysfs import properties_from, read_attributes


def test_type_20b_properties(type_20b):
    props = properties_from(type_20b)
    assert props == {
        "cores": 8,
        "memory_bytes": 48 * 2**30,
        "model": 2,
        "type": 1,
        "abi_version": 101,
        "fw_version": 5399,
        "os_state": "online",
        "ve_state": "online",
        "clock_chip_mhz": 1600,
        "clock_base_mhz": 1400,
        "clock_memory_mhz": 1600,
        "cache_bytes": {"L1d": 32 * 1024, "L1i": 32 * 1024, "L2": 256 * 1024, "LLC": 16 * 2**20},
        "numa_nodes": 1,
    }
    assert product_name(props) == "NEC SX-Aurora Tsubasa VE Type 20B"


def test_missing_and_garbled_attributes_are_skipped():
    props = properties_from({"model": "2", "memory_size": "lots", "os_state": "9", "num_of_core": "10"})
    assert props == {"model": 2, "os_state": "unknown (9)", "cores": 10}
    assert product_name(props) == "NEC SX-Aurora Tsubasa VE Type 20A"
    assert properties_from({}) == {}
    assert product_name({}) == "NEC SX-Aurora Tsubasa VE"


def test_enabled_cores_win_over_the_design_count():
    assert properties_from({"cores_enable": "0x3f", "num_of_core": "8"})["cores"] == 6


def test_first_generation_types(type_10b_offline):
    assert product_name(properties_from(type_10b_offline)) == "NEC SX-Aurora Tsubasa VE Type 10B"
    fast = {**type_10b_offline, "clock_chip": "1584", "clock_memory": "1800"}
    assert product_name(properties_from(fast)) == "NEC SX-Aurora Tsubasa VE Type 10AE"
    small = {**type_10b_offline, "memory_size": "24"}
    assert product_name(properties_from(small)) == "NEC SX-Aurora Tsubasa VE Type 10C"


def test_unknown_model_is_named_by_its_numbers():
    assert product_name({"model": 3, "type": 2}) == "NEC SX-Aurora Tsubasa VE (model 3, type 2)"


def test_read_attributes(ve_tree):
    _, sysfs = ve_tree({0: (0, {"model": "2", "memory_size": "48", "unrelated": "x"})})
    assert read_attributes(sysfs / "ve0") == {"model": "2", "memory_size": "48"}
    assert read_attributes(sysfs / "ve9") == {}
