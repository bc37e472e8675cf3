"""Codegen cases of the training ops (batch_norm_train and the gradient ops), one build, wildcard batch."""

from __future__ import annotations

import numpy as np
from _codegen_helpers import CaseGraph
from sol.ir import Dim, Purpose

RNG = np.random.default_rng(5)


def training_graph() -> CaseGraph:
    cg = CaseGraph("training")
    x = cg.input("x", (1, 4, 7, 6))
    dy = cg.input("dy", (1, 4, 7, 6))
    pooled = cg.input("pooled", (1, 4, 4, 3))
    target = cg.input("target", (1,), "int64", make=lambda shape, rng: rng.integers(0, 5, shape))
    logp = cg.input("logp", (1, 5))
    key = cg.graph.add_input("key", [Dim(2, Purpose.C)], "int64")
    cg.feeds.append(lambda batch, rng: np.array([2024, 3], dtype=np.int64))
    # [1], not 0-d: CompiledModel.run_numpy passes arrays through np.ascontiguousarray, which makes 0-d arrays 1-d
    scalar = cg.graph.add_input("dloss", [Dim(1, Purpose.C)], "float32")
    cg.feeds.append(lambda batch, rng: rng.standard_normal(1).astype(np.float32))
    gamma = cg.param("gamma", RNG.uniform(0.5, 1.5, 4).astype(np.float32))
    beta = cg.param("beta", RNG.standard_normal(4).astype(np.float32))
    y, mean, invstd, _ = cg.case("batch_norm_train", "batch_norm_train", [x, gamma, beta], {"eps": 1e-5})
    cg.case("batch_norm_train_grad", "batch_norm_train_grad", [dy, x, mean, invstd, gamma])
    conv = {"stride": (2, 1), "padding": ((1, 1), (0, 0)), "dilation": (1, 2), "groups": 2, "kernel": (3, 2)}
    cg.case("conv_grad_weight", "conv_grad_weight", [x, pooled], conv)
    window = {"kernel": (3, 2), "stride": (2, 2), "padding": (1, 0), "dilation": (1, 1), "ceil_mode": True,
              "input_shape": x.shape}
    cg.case("max_pool_grad", "max_pool_grad", [pooled, x], window)
    cg.case("avg_pool_grad", "avg_pool_grad", [pooled], dict(window, count_include_pad=False, divisor_override=None))
    # dilated windows (a tap lands on an input only at multiples of the dilation: the gather form's check)
    dilated = cg.input("dilated", (1, 4, 4, 6))
    window2 = {"kernel": (2, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (2, 2), "ceil_mode": False,
               "input_shape": x.shape}
    cg.case("max_pool_grad_dilated", "max_pool_grad", [dilated, x], window2)
    cg.case("avg_pool_grad_dilated", "avg_pool_grad", [dilated], dict(window2, count_include_pad=True,
                                                                        divisor_override=None))
    cg.case("adaptive_avg_pool_grad", "adaptive_avg_pool_grad", [pooled], {"output_size": (4, 3), "input_shape": x.shape})
    cg.case("adaptive_max_pool_grad", "adaptive_max_pool_grad", [pooled, x], {"output_size": (4, 3), "input_shape": x.shape})
    cg.case("dropout_train", "dropout_train", [x, key], {"p": 0.4, "stream": 3, "per_channel": False})
    cg.case("dropout_train_channels", "dropout_train", [x, key], {"p": 0.5, "stream": 4, "per_channel": True})
    for reduction in ("mean", "sum", "none"):
        attrs = {"reduction": reduction, "ignore_index": 2}
        cg.case(f"nll_loss_{reduction}", "nll_loss", [logp, target], attrs)
    cg.case("nll_loss_grad_mean", "nll_loss_grad", [scalar, target], {"reduction": "mean", "ignore_index": 2, "classes": 5})
    cg.case("div_size", "div_size", [y], {"size": 6})
    return cg
