"""Recurrent layers: eager PyTorch against SOL with oneDNN's RNN primitives and with SOL's own time loop.

    python benchmarks/rnn.py [--rounds 15] [--calls 5] [--batch 1,16] [--json rnn.json]

Per layer (nn.LSTM, nn.GRU, nn.RNN; 2 layers, 256 hidden units, 64 steps, batch first) and batch, three
contenders run side by side in one process: eager PyTorch (no_grad), SOL with ``x86::onednn_rnn`` on (one
oneDNN primitive per layer and direction) and off (a oneDNN GEMM for the input projection of all steps,
then SOL's generated loop: per step one GEMM of all gates and the cell math). Each round times
``--calls`` calls of each contender (median), in an order that rotates every round, so a slow phase of a
shared machine hits all three; printed are the medians of the per-round ratios eager/SOL (> 1: SOL is
faster) with their interquartile ranges, and the largest difference of each SOL output from eager.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import sol.pytorch as sol
import torch
from bench import median_iqr  # this directory is on sys.path when rnn.py runs as a script
from torch import nn

STEPS, FEATURES, HIDDEN, LAYERS = 64, 256, 256, 2
KEY = "x86::onednn_rnn"


def layers() -> dict[str, nn.Module]:
    options = {"num_layers": LAYERS, "batch_first": True}
    return {"lstm": nn.LSTM(FEATURES, HIDDEN, **options), "gru": nn.GRU(FEATURES, HIDDEN, **options),
            "rnn_tanh": nn.RNN(FEATURES, HIDDEN, **options)}


def timed(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def flat(outputs: object) -> list[torch.Tensor]:
    y, state = outputs  # type: ignore[misc]
    return [y, *(state if isinstance(state, tuple) else (state,))]


def measure(name: str, model: nn.Module, batch: int, rounds: int, calls: int) -> dict[str, object]:
    x = torch.randn(batch, STEPS, FEATURES)
    contenders: dict[str, Callable[[], object]] = {"eager": lambda: model(x)}
    errors = {}
    with torch.no_grad():
        expected = flat(model(x))
        for flag, label in ((True, "sol_onednn"), (False, "sol_loop")):
            sol.config[KEY] = flag
            optimized = sol.optimize(model, x)
            got = flat(optimized(x))
            errors[label] = max(float((a - b).abs().max()) for a, b in zip(got, expected, strict=True))
            contenders[label] = lambda optimized=optimized: optimized(x)
        sol.config[KEY] = True
        for fn in contenders.values():  # warm-up
            fn()
        names = list(contenders)
        samples: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                samples[n].append(timed(contenders[n], calls))
    result: dict[str, object] = {"model": name, "batch": batch,
                                 "median_ms": {n: statistics.median(v) for n, v in samples.items()},
                                 "max_abs_diff_vs_eager": errors}
    for label in ("sol_onednn", "sol_loop"):
        ratio, iqr = median_iqr([e / s for e, s in zip(samples["eager"], samples[label], strict=True)])
        result[f"eager_over_{label}"] = {"median": ratio, "iqr": iqr}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--batch", default="1,16")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    results = []
    print(f"{'layer':<9} {'batch':>5} {'eager ms':>9} {'oneDNN ms':>10} {'loop ms':>9} "
          f"{'eager/oneDNN (IQR)':>22} {'eager/loop (IQR)':>22}  max diff")
    for name, model in layers().items():
        model.eval()
        for batch in (int(b) for b in args.batch.split(",")):
            r = measure(name, model, batch, args.rounds, args.calls)
            results.append(r)
            ms, a, b = r["median_ms"], r["eager_over_sol_onednn"], r["eager_over_sol_loop"]  # type: ignore[index]
            cell = lambda v: f"{v['median']:.2f}x [{v['iqr'][0]:.2f}, {v['iqr'][1]:.2f}]"  # noqa: E731
            print(f"{name:<9} {batch:>5} {ms['eager']:>9.3f} {ms['sol_onednn']:>10.3f} {ms['sol_loop']:>9.3f} "  # type: ignore[index]
                  f"{cell(a):>22} {cell(b):>22}  {max(r['max_abs_diff_vs_eager'].values()):.1e}", flush=True)  # type: ignore[union-attr]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
