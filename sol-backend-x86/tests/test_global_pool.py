"""Global pooling of a channels-last map (sol.codegen.kernels.pool's row-chunked nest).

After a oneDNN convolution the map lies NHWC; a global average or max pool then runs as tasks of (image, block of
16 channels) and, on images of at least 2 x GLOBAL_POOL_CHUNK_ROWS rows, of chunks of pixel rows too, each chunk
writing partial results that a second loop combines per channel. The shapes cover both paths, chunks of unequal
rows (37 rows in 9 chunks), a single row, channel counts that are not a multiple of 16 (the masked last block),
several images (partials per image), and bf16 storage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol_backend_x86 import precision
from sol_backend_x86.flavour import onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(11)
BOUNDS = {"fp32": 1e-5, "bf16": 2e-2}  # as test_precision

pytestmark = pytest.mark.skipif(onednn_paths() is None, reason="needs oneDNN (its convolution writes NHWC)")


def _pool_graph(name: str, channels: int, height: int, width: int) -> Graph:
    """1x1 conv -> relu -> global average pool and global max pool (two outputs)."""
    g = Graph(name)
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(height, Purpose.P), Dim(width, Purpose.P)])
    h = builders.conv(RNG, g, x, "conv", 8, channels, k=1)
    (h,) = g.add_layer("relu", [h], name="relu")
    (avg,) = g.add_layer("adaptive_avg_pool", [h], {"output_size": (1, 1)}, name="avg")
    (top,) = g.add_layer("adaptive_max_pool", [h], {"output_size": (1, 1)}, name="max")
    g.outputs = [avg, top]
    return g


@pytest.mark.parametrize("channels,height,width,chunked", [
    (20, 7, 7, False),    # 7 rows: one chunk, split by channels alone; a masked second block of channels
    (48, 37, 3, True),    # 37 rows in 9 chunks of 4-5 rows
    (24, 20, 20, True),   # 20 rows in 5 chunks
    (33, 1, 50, False),   # one row
])
@pytest.mark.parametrize("computed_in", ["fp32", "bf16"])
def test_global_pools_of_a_channels_last_map_match_the_reference(channels: int, height: int, width: int,
                                                                  chunked: bool, computed_in: str) -> None:
    if computed_in == "bf16" and not precision.native_bf16():
        pytest.skip("the CPU has no native bf16")
    g = _pool_graph(f"global_pool_{channels}_{height}_{width}_{computed_in}", channels, height, width)
    compiled = compile_graph(g, "x86", passes=False, precision=computed_in)
    source = compiled.source_path.read_text()
    assert source.count("for (int64_t cb = 0; cb < ") == 2  # both pools in the channels-last nest
    assert source.count("sol_part = new") == (2 if chunked else 0)  # its row-chunked form
    params = {name: t.data for name, t in g.params.items()}
    for batch in (1, 3):
        inputs = [builders.f32(RNG, batch, 8, height, width)]
        got = compiled.run_numpy(inputs, params)
        exact = run_reference(g, [i.astype(np.float64) for i in inputs],
                              {k: np.asarray(v, np.float64) for k, v in params.items()})
        for name, a, b in zip(("avg", "max"), got, exact, strict=True):
            assert a.shape == b.shape == (batch, channels, 1, 1)
            error = float(np.abs(a - b).max() / np.abs(b).max())
            assert error <= BOUNDS[computed_in], f"{name} at batch {batch}: relative error {error:.2e}"
