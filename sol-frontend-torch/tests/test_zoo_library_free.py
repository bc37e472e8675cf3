"""The zoo through the library-free path: ``x86::dnn`` off, every layer a generated DFP loop nest.

ARM64, the deployed libraries and the NEC VE backend have no oneDNN: Conv/Linear/MatMul run as SOL's
own DFP kernels there. This is the zoo test (`test_zoo_optimize`: same models, same split into the CI
half and the ``slow`` set, same tolerance and comparison against eager PyTorch) with oneDNN switched off
through ``sol.config``, and each compiled model must contain no library call at all. The CI models
of the training sweep also train through this path, at the sweep's smaller size (64 px, batch 8).

CI time (2 cores, measured with other jobs on the machine, load ~5): the 13 CI zoo models take 200 s
(131 s of CPU), about what `test_zoo_optimize`'s CI half takes with oneDNN (219 s in the same conditions):
without oneDNN the compiles are shorter (no tuning, no glue) and the batch-4 calls slower (alexnet 1.1 s
against 0.12 s). Training costs most (every case compiles inference, training forward and backward, in
float32 and float64: 20-80 s each), so CI trains only mobilenet_v3_small (77 s): it has the dense
(3x3 stride 2, 1x1), depthwise (3x3, 5x5) and linear gradients the library would otherwise compute. The
sweep's other CI models (resnet18 58 s, squeezenet1_1 24 s, shufflenet_v2_x1_0 ~150 s, mnasnet1_0
~160 s) train in the slow set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sol.pytorch as sol
import torch
from sol.compiler import cache_key, flavour_for
from sol.ir import Graph
from sol_frontend_torch import gradient_check

from .test_training_sweep import FAST as TRAINING_FAST
from .test_training_sweep import FLOAT64_TOLERANCE, SIZES
from .test_zoo_optimize import CASES, check_zoo_model

DNN = "x86::dnn"


@pytest.fixture(autouse=True)
def _library_free() -> Iterator[None]:
    """``x86::dnn`` off for the test (it is part of the cache key), restored after it."""
    previous = sol.config[DNN]
    sol.config[DNN] = False
    try:
        yield
    finally:
        sol.config[DNN] = previous


def assert_library_free(compiled) -> None:  # type: ignore[no-untyped-def]
    """No oneDNN in the plan, in the clusters or in the generated source."""
    metadata = compiled.metadata
    assert "(0 library calls" in metadata["plan"], metadata["plan"]
    assert not [t for t in metadata["clusters"] if t.startswith("DNN ")]
    source = compiled.source_path.read_text()
    assert "sol_dnnl" not in source and "dnnl" not in source.lower()


def test_dnn_setting_is_part_of_the_cache_key() -> None:
    """A oneDNN artifact is never reused for a library-free compile of the same graph (and vice versa)."""
    graph = Graph("key")
    off, _ = flavour_for("x86")
    assert off.dnn is None
    sol.config[DNN] = True
    on, _ = flavour_for("x86")
    if on.dnn is None:
        pytest.skip("oneDNN is not installed: both flavours are library-free")
    assert cache_key(graph, on) != cache_key(graph, off)


@pytest.mark.parametrize("name", CASES)
def test_library_free_model_matches_eager(name: str) -> None:
    assert_library_free(check_zoo_model(name).compiled)


#: the training sweep's CI models: one in CI (the CI time above), the others in the slow set
TRAINING_CI = "mobilenet_v3_small"
TRAINING_CASES = [name if name == TRAINING_CI else pytest.param(name, marks=pytest.mark.slow) for name in TRAINING_FAST]


@pytest.mark.parametrize("name", TRAINING_CASES)
def test_library_free_training_gradients(name: str) -> None:
    """The training sweep's CI models at its smaller size: gradients within the sweep's yardstick."""
    size, batch = min(SIZES)
    model, x, target = gradient_check.classifier_case(name, size, batch)
    compiled = []

    def optimize(m: torch.nn.Module, inputs: torch.Tensor) -> torch.nn.Module:
        optimized = sol.optimize(m, inputs)
        compiled.append(optimized)
        return optimized

    report = gradient_check.check(f"{name} {size}px b{batch} library-free", model, x, target, optimize, optimize)
    assert report.sol_float64 is not None and report.sol_float64.error <= FLOAT64_TOLERANCE, report
    assert report.within(3.0), gradient_check.table([report])
    steps = [step for optimized in compiled for variant in optimized._sol_variants.values()
             for step in variant.steps.values()]
    assert steps
    for step in steps:
        assert_library_free(step.forward)
        if step.backward is not None:
            assert_library_free(step.backward)
