"""Compile time with and without the precompiled system headers (``compiler::pch``), interleaved.

SOL's cache is off, so every call compiles: a one-layer graph through ``sol.compiler.compile_graph`` (almost only
g++ on the prelude), and ``sol.optimize`` of squeezenet1_1 at 64 px (parse to load). The first call of each warms
the one-time helpers and the precompiled header itself. ``python benchmarks/compile_pch.py [rounds]`` (default 5).
"""

from __future__ import annotations

import statistics
import sys
import time

import sol
import sol.compiler
import torch
from sol.ir import Dim, Graph, Purpose
from sol_frontend_torch.zoo import import_torchvision

torchvision = import_torchvision()
import sol.pytorch as solpt  # noqa: E402


def tiny():
    g = Graph("tiny")
    x = g.add_input("x", [Dim(4, Purpose.N), Dim(8)])
    (y,) = g.add_layer("tanh", [x], name="act")
    g.outputs = [y]
    return lambda: sol.compiler.compile_graph(g, passes=False)


def squeeze():
    m = torchvision.models.squeezenet1_1(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    return lambda: solpt.optimize(m, x)


sol.config["cache::enabled"] = False
for name, make in (("tanh graph", tiny), ("squeezenet1_1 64px", squeeze)):
    run = make()
    run()  # warm: the glue, the helpers, the precompiled header itself
    times = {True: [], False: []}
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        for pch in (True, False):
            sol.config["compiler::pch"] = pch
            started = time.perf_counter()
            run()
            times[pch].append(time.perf_counter() - started)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{name}: pch {on*1000:.0f} ms, without {off*1000:.0f} ms, ratio {off/on:.2f}x (median of {len(times[True])})")
