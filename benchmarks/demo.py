"""SOL's demo: optimize a real model, check it against PyTorch, show the speed-up.

    python benchmarks/demo.py [--model resnet18] [--batch 1] [--runs 20]

Weights are random (nothing is downloaded); outputs are compared with eager
PyTorch and timings are medians of repeated runs in this one process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import sol.pytorch as sol
import torch
from sol_frontend_torch.zoo import MODELS, build


def median_ms(fn, runs: int) -> float:
    fn()  # warm-up: first-call allocations and thread start-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    model, example = build(args.model)
    example = torch.randn((args.batch, *example.shape[1:]))
    print(f"SOL {sol.__version__}: optimizing {args.model} (batch {args.batch}, random weights)")
    sol.devices()

    start = time.perf_counter()
    sol_model = sol.optimize(model, example)
    print(f"compile: {time.perf_counter() - start:.1f} s (a second run is served from the cache)")

    with torch.no_grad():
        expected = model(example)
        got = sol_model(example)
        err = (got - expected).abs().max().item()
        ok = torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
        print(f"max abs difference to PyTorch: {err:.2e} ({'match' if ok else 'MISMATCH'})")
        eager = median_ms(lambda: model(example), args.runs)
        fast = median_ms(lambda: sol_model(example), args.runs)
    print(f"PyTorch eager {eager:8.2f} ms")
    print(f"SOL           {fast:8.2f} ms   speed-up {eager / fast:.2f}x")
    if not ok:
        raise SystemExit("SOL's output does not match PyTorch")


if __name__ == "__main__":
    main()
