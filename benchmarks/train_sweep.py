"""Training gradients of the zoo's classifiers against float64: SOL next to eager PyTorch's own float32 error.

    python benchmarks/train_sweep.py                                   # every classifier at 64 (batch 8) and 96 (batch 4)
    python benchmarks/train_sweep.py --models resnet18,vgg11_bn --sizes 64:8 --float64

Each model (10 classes, random weights, dropout and stochastic depth off) takes one cross-entropy step on
random images; the table shows the relative error of the worst parameter for SOL, eager float32 in the
model's layout and in channels-last, optionally SOL compiled in float64, and whether SOL is within
``--factor`` times eager float32's error (see `sol_frontend_torch.gradient_check` for why two layouts).
Correctness, not speed: nothing here is timed.
"""

from __future__ import annotations

import argparse
import sys
import time

import sol.pytorch as sol
from sol_frontend_torch import gradient_check, zoo


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """"64:8,96:4" -> [(64, 8), (96, 4)] (image size, batch)."""
    pairs = []
    for item in text.split(","):
        size, _, batch = item.partition(":")
        pairs.append((int(size), int(batch or 8)))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="all", help="comma-separated zoo classifiers, or 'all'")
    parser.add_argument("--sizes", default="64:8,96:4", help="image size:batch pairs (default 64:8,96:4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--factor", type=float, default=gradient_check.FACTOR,
                        help="allowed multiple of eager float32's error")
    parser.add_argument("--float64", action="store_true", help="also compile SOL in float64 (checks the gradient rules alone)")
    args = parser.parse_args(argv)
    names = list(zoo.CLASSIFIERS) if args.models == "all" else args.models.split(",")
    reports = []
    for name in names:
        for size, batch in parse_sizes(args.sizes):
            model, x, target = gradient_check.classifier_case(name, size, batch, args.seed)
            label = f"{name} {x.shape[-1]}px b{batch}"
            start = time.perf_counter()
            try:
                report = gradient_check.check(label, model, x, target, sol.optimize,
                                              sol.optimize if args.float64 else None)
            except Exception as error:  # a model that cannot train is a row of the table, not the end of the sweep
                print(f"{label}: FAILED {type(error).__name__}: {str(error).splitlines()[0][:300]}", flush=True)
                report = gradient_check.GradientReport.failed(label, error)
            else:
                print(f"{label}: SOL {report.sol}, eager {report.eager}, channels-last {report.eager_channels_last} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
            reports.append(report)
    print()
    print(gradient_check.table(reports, args.factor))
    good = sum(r.within(args.factor) for r in reports)
    print(f"\n{good} of {len(reports)} within {args.factor:g}x of eager float32's error against float64")
    return 0 if good == len(reports) else 1


if __name__ == "__main__":
    sys.exit(main())
