"""The precision switch (sol.precision): the config key, the optimize/compile argument, the cache key and the
per-backend capability check (a backend computes fp32 only unless its flavour says otherwise)."""

from __future__ import annotations

import pytest
import sol
from sol import precision
from sol.codegen import CpuFlavour
from sol.compiler import cache_key, compile_graph
from sol.errors import SolConfigError, SolUnsupportedError
from sol.ir import Dim, Graph, Purpose


def _tiny() -> Graph:
    g = Graph("tiny_precision")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3)])
    (y,) = g.add_layer("relu", [x], name="act")
    g.outputs = [y]
    return g


def test_config_key_defaults_to_fp32_and_checks_values() -> None:
    assert sol.config["compiler::precision"] == "fp32"
    assert precision.requested(None) == "fp32"
    with pytest.raises(SolConfigError, match="compiler::precision"):
        sol.config["compiler::precision"] = "int8"
    try:
        sol.config["compiler::precision"] = "bf16"
        assert precision.requested(None) == "bf16"
    finally:
        del sol.config["compiler::precision"]


def test_requested_names_the_argument() -> None:
    assert precision.requested("BF16") == "bf16"
    with pytest.raises(SolConfigError, match="precision='half'.*'fp32'"):
        precision.requested("half")


@pytest.mark.parametrize("wanted", ["bf16", "fp16"])
def test_a_backend_without_reduced_kernels_raises_naming_the_device(wanted: str) -> None:
    flavour = CpuFlavour("arm64")  # sol-core's default: fp32 only
    with pytest.raises(SolUnsupportedError, match=f"precision='{wanted}' cannot run on arm64:0: .*no {wanted} kernels"):
        precision.resolve(wanted, flavour, "arm64:0")
    assert precision.resolve("auto", flavour, "arm64:0") == "fp32"
    assert precision.resolve("fp32", flavour, "arm64:0") == "fp32"


def test_compile_graph_checks_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_build(*args, **kwargs):
        raise AssertionError("built although the precision is unsupported")

    monkeypatch.setattr("sol.compiler.build", no_build)
    with pytest.raises(SolUnsupportedError, match="arm64"):
        compile_graph(_tiny(), "arm64", passes=False, precision="bf16")


def test_precision_is_part_of_the_cache_key() -> None:
    g = _tiny()
    fp32, reduced = CpuFlavour("x86"), CpuFlavour("x86")
    before = cache_key(g, fp32)
    fp32.use_precision("fp32")
    assert cache_key(g, fp32) == before  # fp32 keeps the key it had before precisions existed
    reduced.use_precision("bf16")
    assert cache_key(g, reduced) != before
