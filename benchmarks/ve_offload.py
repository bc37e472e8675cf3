"""Transparent offloading to the (emulated) VE: what travels per call, and what a call costs over the same code on x86.

    python benchmarks/ve_offload.py                                  # squeezenet1_1 and resnet18, batch 1
    python benchmarks/ve_offload.py --models resnet18 --batch 8 --runs 50
    python benchmarks/ve_offload.py --training --models resnet18 --batch 16   # bytes per training step

No VE is reachable here, so this runs on the emulated VE (``SOL_VE_EMULATE=1``, set by the script): device
memory in a separate process, kernels the VE flavour's source compiled for this host. For each model it
reports the copies and bytes per call (inputs and outputs only; parameters once), and times, interleaved in
one process, the same artifact called two ways: offloaded through the VEDA binding (copies over a socket,
one launch, synchronize) and loaded into this process and called with host pointers ("x86"). The difference
is the per-call cost of offloading on the emulator; it says nothing about a real VE's speed (no speed target:
it is an emulator).

``--training`` compares the bytes copied between host and VE per training step (forward, cross entropy,
backward, SGD step) the two ways a PyTorch user trains on the VE: native (the model moved with ``.to('ve')``,
VE tensors in, the loss and the optimizer on VE tensors) and transparent (CPU tensors, ``sol.device.set('ve')``:
inputs, outputs, saved activations and gradients travel per step, parameters again after every optimizer
step). SOL's own transfers (`SolModule.transfers`) and the VE extension's copy counters (which also see the
loss and optimizer ops that still run on the CPU through the fallback) are reported separately, with the
median time per step of each way, interleaved, on the emulator.
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


def measure_training(name: str, batch: int, steps: int, model=None, example=None) -> list[dict[str, float | int | str]]:  # type: ignore[no-untyped-def]
    """Two rows (native, transparent): bytes copied per training step of ``name`` (or ``model`` with an
    ``example`` input, for tests) at ``batch``, averaged over ``steps`` steps after one warm-up step each."""
    import copy

    import sol as sol_core
    import sol.pytorch as sol
    import sol_backend_ve.torch_ve as torch_ve
    import torch
    from sol.devices import forget
    from sol_frontend_torch.offload_checks import ModelCallCopies
    from sol_frontend_torch.zoo import build

    if not torch_ve.register():
        raise RuntimeError(f"PyTorch's VE device is not available: {torch_ve.reason()}")
    if model is None:
        model, example = build(name)
    torch.manual_seed(0)
    x = torch.randn((batch, *example.shape[1:]), dtype=example.dtype)
    classes = model.eval()(x[:1]).shape[1]
    target = torch.randint(0, classes, (batch,))
    ve = torch.device("ve:0")

    native_model = sol.optimize(copy.deepcopy(model), x).to(ve).train()  # for the host; compiled for ve:0 on first use
    sol_core.device.set("ve", 0)
    try:
        transparent_model = sol.optimize(copy.deepcopy(model), x).train()  # CPU tensors, the network on ve:0
    finally:
        forget()  # the device selection is process-wide
    xv, target_v = x.to(ve), target.to(ve)
    ways = {
        "native": (native_model, xv, target_v, torch.optim.SGD(native_model.parameters(), lr=0.01, momentum=0.9)),
        "transparent": (transparent_model, x, target,
                        torch.optim.SGD(transparent_model.parameters(), lr=0.01, momentum=0.9)),
    }
    calls = {way: ModelCallCopies(m, torch_ve.copy_counters) for way, (m, *_) in ways.items()}
    totals: dict[str, dict[str, float]] = {way: {} for way in ways}
    times: dict[str, list[float]] = {way: [] for way in ways}

    def step(way: str) -> dict[str, float]:
        net, inputs, labels, optimizer = ways[way]
        counted = calls[way]
        before = net.transfers()
        start = time.perf_counter()
        counters = torch_ve.copy_counters()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(counted.call(net, inputs), labels)
        loss.backward()
        optimizer.step()
        loss.item()  # the step is done when its loss is known (and the VE queue drained)
        times[way].append(time.perf_counter() - start)
        whole = torch_ve.copy_counters()
        moved = sum(whole[k] - counters[k] for k in ("to_ve_bytes", "to_cpu_bytes"))
        in_calls = sum(c.get(k, 0) for c in (counted.forward, counted.backward) for k in ("to_ve_bytes", "to_cpu_bytes"))
        spent = net.transfers().since(before) if before is not None else net.transfers()
        return {
            "sol_to_device_bytes": spent.to_device_bytes,
            "sol_to_host_bytes": spent.to_host_bytes,
            "sol_parameter_bytes": spent.parameter_bytes,
            "calls_ext_bytes": in_calls,  # PyTorch's VE tensors copied inside SOL's calls (the dropout key)
            "other_ext_bytes": moved - in_calls,  # the loss and the optimizer, outside SOL
        }

    for way in ways:  # warm-up: compiles the training steps, captures, first parameter upload
        step(way)
    for way in ways:
        times[way].clear()
    for _ in range(steps):  # interleaved: drift on a shared machine hits both alike
        for way in ways:
            for key, value in step(way).items():
                totals[way][key] = totals[way].get(key, 0.0) + value
    rows = []
    for way in ways:
        row: dict[str, float | int | str] = {"model": name, "batch": batch, "way": way}
        row.update({key: value / steps for key, value in totals[way].items()})
        # everything SOL's model calls moved: its own transfers, and VE tensors the calls copied (the dropout key)
        row["sol_bytes"] = sum(float(row[k]) for k in ("sol_to_device_bytes", "sol_to_host_bytes", "sol_parameter_bytes",
                                                        "calls_ext_bytes"))
        row["step_ms"] = statistics.median(times[way]) * 1e3
        rows.append(row)
    return rows


def training_table(rows: list[dict[str, float | int | str]]) -> str:
    mb = 1e6
    header = (f"{'model':<14} {'batch':>5} {'way':<12} {'SOL to VE MB':>12} {'SOL to host MB':>14} {'params MB':>9} "
              f"{'SOL total MB':>12} {'loss+optim MB':>13} {'ms/step':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        other = float(r["other_ext_bytes"])
        lines.append(f"{r['model']:<14} {r['batch']:>5} {r['way']:<12} {float(r['sol_to_device_bytes']) / mb:>12.2f} "
                     f"{float(r['sol_to_host_bytes']) / mb:>14.2f} {float(r['sol_parameter_bytes']) / mb:>9.2f} "
                     f"{float(r['sol_bytes']) / mb:>12.2f} {other / mb:>13.2f} {float(r['step_ms']):>9.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20, help="timed calls per round and way")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--training", action="store_true",
                        help="bytes copied per training step, native (VE tensors) against transparent (CPU tensors)")
    parser.add_argument("--steps", type=int, default=3, help="--training: measured steps per way after a warm-up")
    args = parser.parse_args(argv)
    os.environ.setdefault("SOL_VE_EMULATE", "1")
    if os.environ["SOL_VE_EMULATE"] != "1":
        print("this benchmark needs the emulated VE (SOL_VE_EMULATE=1)", file=sys.stderr)
        return 2
    if args.training:
        rows = [r for name in args.models for r in measure_training(name, args.batch, args.steps)]
        print("Bytes copied between host and the EMULATED VE per training step (forward, cross entropy, backward, "
              f"SGD with momentum), mean of {args.steps} steps after a warm-up; 'loss+optim': copies of PyTorch ops "
              "outside SOL's model calls (the CPU fallback of ops without a VE kernel); ms/step: medians, "
              "interleaved, on the emulator (not a VE's speed)")
        print(training_table(rows))
        by_way = {(r["model"], r["way"]): r for r in rows}
        for name in args.models:
            native, transparent = by_way[(name, "native")], by_way[(name, "transparent")]
            native_total, transparent_total = (float(r["sol_bytes"]) + float(r["other_ext_bytes"])
                                               for r in (native, transparent))
            print(f"{name}: all bytes per step, native / transparent = {native_total / transparent_total:.4f}; "
                  f"SOL's model calls alone: {float(native['sol_bytes']):.0f} B "
                  f"native, {float(transparent['sol_bytes']):.0f} B transparent; time per step native / "
                  f"transparent = {float(native['step_ms']) / float(transparent['step_ms']):.2f}x (emulator)")
        return 0
    rows = [measure(name, args.batch, args.runs, args.rounds) for name in args.models]
    print("Transparent offloading on the EMULATED VE (SOL_VE_EMULATE=1): per call, medians of "
          f"{args.rounds} x {args.runs} interleaved calls; 'x86' is the same artifact called in this process")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
