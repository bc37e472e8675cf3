"""The example device compiles and runs SOL graphs with its own flavour."""

import numpy as np
import sol
from sol.compiler import compile_graph
from sol.ir import Dim, Graph, Purpose
from sol.ir.interpret import run_reference


def _small_graph() -> Graph:
    graph = Graph("example_net")
    x = graph.add_input("x", [Dim(2, Purpose.N), Dim(8, Purpose.C)])
    rng = np.random.default_rng(0)
    w = graph.add_param("fc.weight", rng.standard_normal((4, 8)).astype(np.float32))
    b = graph.add_param("fc.bias", rng.standard_normal(4).astype(np.float32))
    (y,) = graph.add_layer("linear", [x, w, b], name="fc")
    (z,) = graph.add_layer("relu", [y], name="act")
    graph.outputs = [z]
    return graph


def test_compiles_with_its_own_flavour(sol_cache_dir):
    previous = sol.device.get()
    sol.device.set(sol.device.example, 0)
    graph = _small_graph()
    try:
        compiled = compile_graph(graph)
    finally:
        sol.device.set(previous.type, previous.index)
    source = compiled.source_path.read_text()
    assert compiled.metadata["flavour"] == "example"
    assert "(example flavour)" in source and "#define sol_example_exp(x)" in source
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    params = {name: t.data for name, t in graph.params.items()}
    (got,) = compiled.run_numpy([x], params)
    (expected,) = run_reference(graph, [x], params)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
