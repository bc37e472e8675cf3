"""Transparent offloading to the (emulated) VE: what travels per call, and what a call costs over the same code on x86.

    python benchmarks/ve_offload.py                                  # squeezenet1_1 and resnet18, batch 1
    python benchmarks/ve_offload.py --models resnet18 --batch 8 --runs 50

No VE is reachable here, so this runs on the emulated VE (``SOL_VE_EMULATE=1``, set by the script): device
memory in a separate process, kernels the VE flavour's source compiled for this host. For each model it
reports the copies and bytes per call (inputs and outputs only; parameters once), and times, interleaved in
one process, the same artifact called two ways: offloaded through the VEDA binding (copies over a socket,
one launch, synchronize) and loaded into this process and called with host pointers ("x86"). The difference
is the per-call cost of offloading on the emulator; it says nothing about a real VE's speed (no speed target:
it is an emulator).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

MODELS = ("squeezenet1_1", "resnet18")


def _timed(call, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def measure(name: str, batch: int, runs: int, rounds: int, model=None, example=None) -> dict[str, float | int | str]:  # type: ignore[no-untyped-def]
    """One row: the zoo model ``name`` (or ``model`` with an ``example`` input, for tests) at ``batch``."""
    import sol.pytorch as sol
    import torch
    from sol.runtime import CompiledModel
    from sol_frontend_torch.zoo import build

    if model is None:
        model, example = build(name)
    x = torch.randn((batch, *example.shape[1:]), dtype=example.dtype)
    offloaded = sol.optimize(model.eval(), x, device="ve").compiled
    host = CompiledModel(offloaded.graph, offloaded.library_path, offloaded.library.prefix)
    params = [np.ascontiguousarray(p.detach().numpy()) for p in
              (dict(model.named_parameters()) | dict(model.named_buffers())).values()]
    by_name = dict(zip([n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()], params,
                       strict=True))
    pointers = [by_name[n].ctypes.data for n in offloaded.param_names]
    inputs = [np.ascontiguousarray(x.numpy())]
    outputs = [np.empty(s, np.float32) for s in offloaded.output_shapes(batch)]
    out_ptrs = [o.ctypes.data for o in outputs]
    host.prepare(pointers)
    offloaded.prepare(pointers)

    def run_host() -> None:
        host.run([a.ctypes.data for a in inputs], pointers, out_ptrs, batch)

    def run_ve() -> None:
        offloaded.run([a.ctypes.data for a in inputs], pointers, out_ptrs, batch)

    run_host(), run_ve()  # warm-up: workspace and device buffers for this batch
    before = offloaded.transfers.copy()
    host_times: list[float] = []
    ve_times: list[float] = []
    for _ in range(rounds):  # interleaved: drift on a shared machine hits both alike
        host_times += _timed(run_host, runs)
        ve_times += _timed(run_ve, runs)
    spent = offloaded.transfers.since(before)
    calls = spent.calls
    host_ms, ve_ms = statistics.median(host_times) * 1e3, statistics.median(ve_times) * 1e3
    return {"model": name, "batch": batch, "to_device": spent.to_device / calls,
            "to_device_bytes": spent.to_device_bytes / calls, "to_host": spent.to_host / calls,
            "to_host_bytes": spent.to_host_bytes / calls, "launches": spent.launches / calls,
            "parameters": before.parameters, "parameter_bytes": before.parameter_bytes,
            "x86_ms": host_ms, "ve_ms": ve_ms, "overhead_ms": ve_ms - host_ms, "ratio": ve_ms / host_ms}


def table(rows: list[dict[str, float | int | str]]) -> str:
    header = (f"{'model':<14} {'batch':>5} {'in/call':>8} {'bytes':>10} {'out/call':>8} {'bytes':>8} {'launch':>6} "
              f"{'params once':>16} {'x86 ms':>8} {'VE(emu) ms':>10} {'overhead':>9} {'VE/x86':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['model']:<14} {r['batch']:>5} {r['to_device']:>8.0f} {r['to_device_bytes']:>10.0f} "
                     f"{r['to_host']:>8.0f} {r['to_host_bytes']:>8.0f} {r['launches']:>6.0f} "
                     f"{str(r['parameters']) + ' (' + str(r['parameter_bytes']) + ' B)':>16} {r['x86_ms']:>8.3f} "
                     f"{r['ve_ms']:>10.3f} {r['overhead_ms']:>8.3f}m {r['ratio']:>6.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20, help="timed calls per round and way")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args(argv)
    os.environ.setdefault("SOL_VE_EMULATE", "1")
    if os.environ["SOL_VE_EMULATE"] != "1":
        print("this benchmark needs the emulated VE (SOL_VE_EMULATE=1)", file=sys.stderr)
        return 2
    rows = [measure(name, args.batch, args.runs, args.rounds) for name in args.models]
    print("Transparent offloading on the EMULATED VE (SOL_VE_EMULATE=1): per call, medians of "
          f"{args.rounds} x {args.runs} interleaved calls; 'x86' is the same artifact called in this process")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
