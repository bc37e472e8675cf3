"""SOL against SOL: one setting on against off, measured in paired rounds in one process.

    python benchmarks/ab.py --key x86::winograd --models resnet18,googlenet [--rounds 20] [--calls 5]
    python benchmarks/ab.py --key autotuning --models mobilenet_v2 --json ab.json

A change that makes SOL a few percent faster is smaller than the run-to-run
noise of a shared or virtualized machine (rows of `bench.py` have moved by
10-30% between two runs on this project's 2-core VMs). So this compiles the model twice, with the
boolean `sol.config` key set to True and to False, and then runs the two
alternately, with the key set as at each one's compile (for settings read
per call): each round times `--calls` calls of each (median), the order
flipping every round, and the result is the median of the per-round ratios
off/on with its interquartile range. A slow phase of the machine that spans a
round hits both alike and cancels out of that round's ratio.

The order of the two compilations matters too: of two identical builds of
squeezenet1_1 in one process, the one compiled first ran 4-6% faster (where
the two land in memory, most likely). So half of the rounds compare a pair
compiled "on" first and half a fresh pair compiled "off" first; the medians of
both halves are reported as well, and their spread shows the size of that
effect.

Printed per model: both medians, the speed-up of "on" over "off" (> 1: the
setting makes SOL faster) with its IQR, and the largest difference between the
two outputs (both are also checked against eager PyTorch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import sol.pytorch as sol
import torch
from bench import median_iqr  # this directory is on sys.path when ab.py runs as a script
from sol_frontend_torch.zoo import MODELS, build


def median_seconds(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _compile(model: torch.nn.Module, x: torch.Tensor, key: str, order: tuple[bool, bool]) -> dict[bool, object]:
    """The model compiled with ``key`` set as in ``order`` (the first one compiled first)."""
    previous = sol.config[key]
    compiled = {}
    try:
        for value in order:
            sol.config[key] = value
            compiled[value] = sol.optimize(model, x)
    finally:
        sol.config[key] = previous
    return compiled


def _paired_rounds(compiled: dict[bool, object], x: torch.Tensor, key: str, rounds: int,
                   calls: int) -> dict[str, list[float]]:
    """Per round, the median seconds of ``calls`` calls of each, the order flipping every round."""
    previous = sol.config[key]
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(rounds):
        for value in ((True, False) if r % 2 == 0 else (False, True)):
            sol.config[key] = value  # also for settings read per call, not only at compile time
            try:
                seconds["on" if value else "off"].append(median_seconds(lambda m=compiled[value]: m(x), calls))
            finally:
                sol.config[key] = previous
    return seconds


def _speedups(seconds: dict[str, list[float]]) -> list[float]:
    """Per round, off's time over on's (> 1: "on" is faster)."""
    return [b / a for a, b in zip(seconds["on"], seconds["off"], strict=True)]


def compare(name: str, key: str, rounds: int, calls: int, batch: int) -> dict[str, object]:
    """One model compiled with ``key`` on and off, timed in paired rounds (see the module docstring)."""
    model, example = build(name)
    x = torch.randn((batch, *example.shape[1:]))
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    by_order: dict[str, float] = {}
    with torch.no_grad():
        reference = model(x)
        # half the rounds with "on" compiled first, half with a fresh pair compiled "off" first
        for order, share in (((True, False), (rounds + 1) // 2), ((False, True), rounds // 2)):
            if share == 0:
                continue
            compiled = _compile(model, x, key, order)
            y_on, y_off = compiled[True](x), compiled[False](x)
            for _ in range(3):  # warm-up: first-call allocations, thread start-up
                compiled[True](x), compiled[False](x)
            leg = _paired_rounds(compiled, x, key, share, calls)
            by_order["on_compiled_first" if order[0] else "off_compiled_first"] = median_iqr(_speedups(leg))[0]
            for label in seconds:
                seconds[label] += leg[label]
            del compiled
    speedup, iqr = median_iqr(_speedups(seconds))
    return {
        "model": name, "key": key, "batch": batch, "rounds": rounds, "calls": calls,
        "on_ms": statistics.median(seconds["on"]) * 1e3, "off_ms": statistics.median(seconds["off"]) * 1e3,
        "speedup": speedup, "iqr": iqr,
        "speedup_by_compile_order": by_order,
        "max_diff_on_off": float((y_on - y_off).abs().max()),
        "max_error_vs_eager": {"on": float((y_on - reference).abs().max()),
                               "off": float((y_off - reference).abs().max())},
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True, help="a boolean sol.config key, e.g. x86::winograd")
    parser.add_argument("--models", default="resnet18", help=f"comma-separated, of: {', '.join(sorted(MODELS))}")
    parser.add_argument("--rounds", type=int, default=20, help="paired rounds (median of the per-round ratios)")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per model per round (their median)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every measurement to this file")
    parser.add_argument("--precision", default=None,
                        help="compiler::precision of both builds (fp32, bf16, auto; default: as configured)")
    args = parser.parse_args()
    if args.precision is not None:
        sol.config["compiler::precision"] = args.precision

    if args.key not in sol.config or not isinstance(sol.config[args.key], bool):
        parser.error(f"--key {args.key!r} is not a boolean sol.config key")
    names = [m for m in args.models.split(",") if m]
    if unknown := [m for m in names if m not in MODELS]:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(sorted(MODELS))}")
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    torch.set_flush_denormal(True)  # as in bench.py: denormals flushed, set before any thread starts

    results = []
    for name in names:
        result = compare(name, args.key, args.rounds, args.calls, args.batch)
        results.append(result)
        low, high = result["iqr"]
        print(f"{name} b{args.batch}: {args.key} on {result['on_ms']:.2f} ms, off {result['off_ms']:.2f} ms; "
              f"on is {result['speedup']:.3f}x as fast (IQR {low:.3f}..{high:.3f}, {args.rounds} rounds; "
              + ", ".join(f"{k.replace('_', ' ')} {v:.3f}x" for k, v in result["speedup_by_compile_order"].items())
              + f"); max |on - off| {result['max_diff_on_off']:.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
