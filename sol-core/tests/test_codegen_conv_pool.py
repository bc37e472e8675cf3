"""A pool fused depth first into the generated conv before it (`sol.codegen.kernels.conv_pool`).

conv -> elementwise chain -> max_pool/avg_pool/adaptive pooling is one Cluster when the conv is generated code
(no library: here the x86 flavour with ``x86::dnn`` off, else the generic CpuFlavour) and the pool is the only
reader of the chain: built, run at two batch sizes (wildcard batch) and compared with the numpy reference;
the plan has one cluster and no buffer for the unpooled activation.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.codegen import CpuFlavour
from sol.codegen.plan import plan
from sol.ir import Tensor

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import CaseGraph, check, private_cache, run_cases  # noqa: E402

__all__ = ["private_cache"]

pytestmark = pytest.mark.usefixtures("private_cache")
RNG = np.random.default_rng(7)
DNN = "x86::dnn"


@pytest.fixture(autouse=True)
def _library_free() -> Iterator[None]:
    """Convolutions as generated code: ``x86::dnn`` off where the x86 backend (and oneDNN) is installed."""
    try:
        previous = sol.config[DNN]
    except Exception:  # noqa: BLE001 - no x86 backend: the host flavour has no library anyway
        yield
        return
    sol.config[DNN] = False
    try:
        yield
    finally:
        sol.config[DNN] = previous


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _conv(cg: CaseGraph, name: str, x: Tensor, cout: int, k: tuple[int, ...], stride: tuple[int, ...] | None = None,
          padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> Tensor:
    r = len(k)
    cin = int(x.shape[1])
    ins = [x, cg.param(f"{name}.w", _f32(cout, cin // groups, *k))]
    if bias:
        ins.append(cg.param(f"{name}.b", _f32(cout)))
    attrs = {"stride": stride or (1,) * r, "padding": ((padding, padding),) * r, "dilation": (dilation,) * r,
             "groups": groups}
    return cg.graph.add_layer("conv", ins, attrs, name=name)[0]


def _layer(cg: CaseGraph, op: str, inputs: list[Tensor], attrs: dict | None = None, name: str = "") -> Tensor:
    return cg.graph.add_layer(op, inputs, attrs or {}, name=name or None)[0]


def _max(kernel: tuple[int, ...], stride: tuple[int, ...], padding: int = 0, ceil: bool = False,
         dilation: int = 1) -> dict:
    r = len(kernel)
    return {"kernel": kernel, "stride": stride, "padding": (padding,) * r, "dilation": (dilation,) * r,
            "ceil_mode": ceil}


def _avg(kernel: tuple[int, ...], stride: tuple[int, ...], padding: int = 0, ceil: bool = False,
         include_pad: bool = True, divisor: int | None = None) -> dict:
    r = len(kernel)
    return {"kernel": kernel, "stride": stride, "padding": (padding,) * r, "ceil_mode": ceil,
            "count_include_pad": include_pad, "divisor_override": divisor}


def _fused_graph() -> CaseGraph:
    cg = CaseGraph("conv_pool")
    x = cg.input("x", (0, 4, 12, 11))
    relu = _layer(cg, "relu", [_conv(cg, "c_avg", x, 6, (3, 3), padding=1)])
    cg.case("relu_avg_2x2", "avg_pool", [relu], _avg((2, 2), (2, 2)))
    relu = _layer(cg, "relu", [_conv(cg, "c_max", x, 6, (3, 3), padding=1)])
    cg.case("relu_max_2x2", "max_pool", [relu], _max((2, 2), (2, 2)))
    # resnet's stem: 7x7 stride 2, then a 3x3 stride-2 max pool with padding (relu moved after the pool)
    pooled = _layer(cg, "max_pool", [_conv(cg, "c_stem", x, 5, (7, 7), (2, 2), padding=3)], _max((3, 3), (2, 2), 1))
    cg.case("stem_max_3x3_relu", "relu", [pooled])
    # squeezenet's: max pool 3x3 stride 2 in ceil mode (the last window hangs over the edge)
    relu = _layer(cg, "relu", [_conv(cg, "c_ceil", x, 5, (3, 3), (2, 2))])
    cg.case("max_3x3_ceil", "max_pool", [relu], _max((3, 3), (2, 2), ceil=True))
    # conv -> batch norm -> relu -> global average pool
    mean, var = cg.param("bn.mean", _f32(6)), cg.param("bn.var", RNG.uniform(0.5, 2, 6).astype(np.float32))
    bn = _layer(cg, "batch_norm", [_conv(cg, "c_bn", x, 6, (3, 3), padding=1, bias=False), mean, var,
                                   cg.param("bn.w", _f32(6)), cg.param("bn.b", _f32(6))], {"eps": 1e-5})
    cg.case("bn_relu_global_avg", "adaptive_avg_pool", [_layer(cg, "relu", [bn])], {"output_size": (1, 1)})
    # depthwise conv -> relu6 -> overlapping average pool, padding not counted, ceil mode
    relu6 = _layer(cg, "clamp", [_conv(cg, "c_dw", x, 4, (3, 3), padding=1, groups=4)], {"min": 0.0, "max": 6.0})
    cg.case("depthwise_avg_3x3_excl", "avg_pool", [relu6], _avg((3, 3), (2, 2), 1, ceil=True, include_pad=False))
    # grouped, dilated, strided conv -> adaptive average pool to 3x2 (uneven regions)
    relu = _layer(cg, "relu", [_conv(cg, "c_grp", x, 6, (3, 3), (1, 2), padding=2, dilation=2, groups=2)])
    cg.case("grouped_adaptive_avg_3x2", "adaptive_avg_pool", [relu], {"output_size": (3, 2)})
    # a residual add in the chain (another input read at the conv's index), then a global max pool
    res = cg.input("res", (0, 6, 12, 11))
    added = _layer(cg, "add", [_conv(cg, "c_res", x, 6, (3, 3), padding=1), res])
    cg.case("residual_global_max", "adaptive_max_pool", [_layer(cg, "relu", [added])], {"output_size": (1, 1)})
    relu = _layer(cg, "relu", [_conv(cg, "c_dil", x, 3, (1, 1), bias=False)])
    cg.case("max_dilated", "max_pool", [relu], _max((2, 3), (2, 2), 1, dilation=2))
    relu = _layer(cg, "relu", [_conv(cg, "c_div", x, 3, (3, 3))])
    cg.case("avg_divisor_override", "avg_pool", [relu], _avg((3, 3), (3, 3), divisor=5))
    relu = _layer(cg, "relu", [_conv(cg, "c_inc", x, 3, (3, 3), padding=1)])
    cg.case("avg_3x3_s1_pad", "avg_pool", [relu], _avg((3, 3), (1, 1), 1))
    line = cg.input("line", (0, 3, 17))
    relu = _layer(cg, "relu", [_conv(cg, "c_1d", line, 4, (3,), (2,), padding=1)])
    cg.case("conv1d_max", "max_pool", [relu], _max((3,), (2,), 1))
    volume = cg.input("volume", (0, 2, 5, 6, 7))
    relu = _layer(cg, "relu", [_conv(cg, "c_3d", volume, 3, (3, 3, 3), padding=1)])
    cg.case("conv3d_avg", "avg_pool", [relu], _avg((2, 2, 2), (2, 2, 2), ceil=True))
    # not fused: the activation is a model output too (a training forward saves it the same way)
    relu = _layer(cg, "relu", [_conv(cg, "c_kept", x, 3, (3, 3), padding=1)], name="kept_relu")
    cg.graph.outputs.append(relu)
    cg.cases.append("kept_relu")
    cg.case("kept_avg", "avg_pool", [relu], _avg((2, 2), (2, 2)))
    return cg


_CASES = _fused_graph().cases
_RESULTS: dict[str, object] = {}


@pytest.mark.parametrize("case", _CASES)
def test_fused_conv_pool_matches_reference(case: str) -> None:
    if "results" not in _RESULTS:
        _RESULTS["results"] = run_cases(_fused_graph())
    check(_RESULTS["results"], case)  # type: ignore[arg-type]


def _planned(cg: CaseGraph):  # type: ignore[no-untyped-def]
    return plan(cg.graph, CpuFlavour("x86"))


def _titles(cg: CaseGraph) -> list[str]:
    return [c.title() for c in _planned(cg).programs.main if not c.alias]


def test_every_fusable_case_is_one_cluster() -> None:
    cg = _fused_graph()
    titles = _titles(cg)
    pooled = [t for t in titles if "pool" in t]
    fused = [t for t in pooled if "(conv)" in t]
    assert len(fused) == len(pooled) - 1, titles  # all but the kept activation's pool
    assert "c_stem (conv) -> max_pool (max_pool) -> stem_max_3x3_relu (relu)" in titles
    assert any(t.startswith("c_bn (conv) -> batch_norm (batch_norm) -> relu (relu) -> bn_relu_global_avg") for t in titles)
    assert "kept_avg (avg_pool)" in titles


def test_unpooled_activation_is_not_allocated() -> None:
    """conv -> relu -> avg_pool: one cluster instead of two, and no workspace for the relu's output."""
    cg = CaseGraph("one")
    x = cg.input("x", (0, 3, 16, 16))
    relu = _layer(cg, "relu", [_conv(cg, "c", x, 8, (3, 3), padding=1)], name="relu")
    cg.case("p", "avg_pool", [relu], _avg((2, 2), (2, 2)))
    planned = _planned(cg)
    clusters = [c for c in planned.programs.main if not c.alias]
    assert [c.title() for c in clusters] == ["c (conv) -> relu (relu) -> p (avg_pool)"]
    assert planned.memory.of(relu) is None
    assert planned.memory.workspace.a == planned.memory.workspace.c == 0

    # the same graph with a second reader of the activation: two clusters, the activation in the workspace
    cg.case("second_reader", "max_pool", [relu], _max((2, 2), (2, 2)))
    planned = _planned(cg)
    assert len([c for c in planned.programs.main if not c.alias]) == 3
    assert planned.memory.of(relu) is not None and planned.memory.of(relu).kind == "workspace"


def test_library_conv_takes_no_pool() -> None:
    """A conv the flavour's library runs is not generated code: its pool stays a cluster of its own."""
    from sol.codegen.cluster import cluster
    from sol.codegen.dnn import DnnModule

    class TakesConv(DnnModule):  # only what clustering asks
        def accepts(self, layer):  # type: ignore[no-untyped-def]
            return layer.op == "conv"

        def static_inputs(self, layer):  # type: ignore[no-untyped-def]
            return ()

        def fuses(self, call, value, layer):  # type: ignore[no-untyped-def]
            return False

        def render(self, call, forward, prepare):  # type: ignore[no-untyped-def]
            raise AssertionError("not rendered here")

    cg = CaseGraph("lib")
    x = cg.input("x", (0, 3, 8, 8))
    relu = _layer(cg, "relu", [_conv(cg, "c", x, 4, (3, 3), padding=1)])
    cg.case("p", "max_pool", [relu], _max((2, 2), (2, 2)))
    clusters = cluster(cg.graph.layers, {id(x)}, cg.graph.outputs, TakesConv())
    assert [c.title() for c in clusters] == ["DNN c (conv)", "relu (relu)", "p (max_pool)"]
