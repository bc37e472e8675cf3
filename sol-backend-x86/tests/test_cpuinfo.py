from __future__ import annotations

from sol_backend_x86.cpuinfo import parse_cpuinfo, read_cpuinfo


def test_amd_epyc_sample(fixtures):
    info = read_cpuinfo(fixtures / "cpuinfo_x86_amd_epyc_kvm.txt")
    assert info.cpu_ids() == [0, 1]
    assert info.value("model name") == "AMD EPYC"
    assert info.value("vendor_id") == "AuthenticAMD"
    assert {"avx2", "fma", "sse4_2"} <= info.features("flags")
    assert "avx512f" not in info.features("flags")


def test_two_socket_xeon_sample(fixtures):
    info = read_cpuinfo(fixtures / "cpuinfo_x86_xeon_2s_ht.txt")
    assert info.cpu_ids() == list(range(8))
    assert info.distinct("physical id") == ["0", "1"]
    assert info.by_cpu()[5]["core id"] == "1"
    assert {"amx_bf16", "avx512_bf16", "avx512f"} <= info.features("flags")


def test_features_are_those_every_cpu_has():
    # A hybrid CPU whose cores differ: only the common features are safe to use.
    info = parse_cpuinfo("processor : 0\nflags : sse avx avx2\n\nprocessor : 1\nflags : sse avx\n")
    assert info.features("flags") == {"sse", "avx"}


def test_aarch64_format_and_system_keys():
    text = (
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
        "CPU part\t: 0xd40\n\nprocessor\t: 1\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n\n"
        "Hardware\t: Some SoC\n"
    )
    info = parse_cpuinfo(text)
    assert info.cpu_ids() == [0, 1]
    assert info.features("Features") == {"fp", "asimd", "sve"}
    assert info.value("Hardware") == "Some SoC"
    assert info.distinct("CPU part") == ["0xd40"]


def test_processor_lines_without_blank_lines_start_new_blocks():
    info = parse_cpuinfo("processor : 0\nprocessor : 1\nFeatures : fp asimd\n")
    assert info.cpu_ids() == [0, 1]


def test_empty_and_garbage_text():
    assert parse_cpuinfo("").processors == ()
    assert parse_cpuinfo("no colon here\n\n").cpu_ids() == []
    assert parse_cpuinfo("").value("model name") is None
    assert parse_cpuinfo("").features("flags") == frozenset()
