"""How far each model can go on this machine: its FLOPs at the cores' FMA peak, its weights at the memory bandwidth.

    python benchmarks/roofline.py --models resnet18,vit_b_16,mlp
    python benchmarks/roofline.py --results results.json      # the models of a bench.py --json run, with its times

A model cannot run faster than its multiply-adds take at the cores' peak, nor
(at batch 1, when its weights do not fit in the last-level cache) faster than
reading its weights once from memory takes. This measures both limits here, with
the benchmark's thread count: the fp32 FMA peak of a compiled loop of
independent AVX-512 (else AVX2) FMAs, and the read bandwidth of a pass over
600 MB. FLOPs come from `torch.utils.flop_counter` on the eager model, with
PyTorch's fused attention paths turned off so that every matrix product is
counted (and scaled-dot-product attention's two products added).

With `--results` (a `bench.py --json` file) each row also shows SOL's and the
fastest peer's time as a fraction of the bound, and the ceiling: the fastest
peer's time over the bound, which is the most any implementation could beat
that peer by on this machine. A target ratio above a model's ceiling cannot be
met. The memory bound counts weights only (activations move too), and neither
bound counts the time between library calls, so real runs stay above both.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

#: bytes read per bandwidth pass: well past any last-level cache
STREAM_BYTES = 600 << 20

_PEAK_SOURCE = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET(x) _mm512_set1_ps(x)
#define LOAD(p) _mm512_load_ps(p)
#define ADD(a, b) _mm512_add_ps(a, b)
#define SUM(v) _mm512_reduce_add_ps(v)
#else
typedef __m256 vec;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET(x) _mm256_set1_ps(x)
#define LOAD(p) _mm256_load_ps(p)
#define ADD(a, b) _mm256_add_ps(a, b)
static float SUM(vec v) { float f[8]; _mm256_storeu_ps(f, v); return f[0]+f[1]+f[2]+f[3]+f[4]+f[5]+f[6]+f[7]; }
#endif

/* FLOP per second of `threads` threads each running 12 independent FMA chains (more than latency x ports). */
double sol_fma_peak(int threads, long iterations) {
  float sink = 0;
  double start = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    vec a[12], b = SET(1.0000001f), c = SET(1e-7f);
    for (int i = 0; i < 12; ++i) a[i] = SET((float)i);
    for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) a[i] = FMA(a[i], b, c);
    }
    for (int i = 0; i < 12; ++i) sink += SUM(a[i]);
  }
  double seconds = omp_get_wtime() - start;
  return sink == 12345.0f ? 0.0 : 2.0 * LANES * 12 * iterations * threads / seconds;
}

/* Bytes per second read by `threads` threads summing `bytes` of memory, best of `passes`. */
double sol_read_bandwidth(int threads, long bytes, int passes) {
  long n = bytes / sizeof(float) / 64 * 64;
  float* data = aligned_alloc(64, n * sizeof(float));
  if (!data) return 0.0;
  memset(data, 0, n * sizeof(float));
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    float sink = 0;
    double start = omp_get_wtime();
#pragma omp parallel for num_threads(threads) reduction(+ : sink)
    for (long i = 0; i < n; i += 64) {
      vec s = SET(0.0f);
      for (int j = 0; j < 64; j += LANES) s = ADD(s, LOAD(data + i + j));
      sink += SUM(s);
    }
    double rate = n * sizeof(float) / (omp_get_wtime() - start);
    if (rate > best && sink == 0.0f) best = rate;
  }
  free(data);
  return best;
}
"""


@cache
def _probe_library() -> ctypes.CDLL:
    """The peak and bandwidth loops, compiled for this CPU with the C compiler SOL uses (cc, or $CC)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("roofline.py: no C compiler (cc, gcc or $CC) to build the peak and bandwidth loops")
    with tempfile.TemporaryDirectory(prefix="sol_roofline_") as scratch:  # a loaded library outlives its file
        source, library = Path(scratch) / "probe.c", Path(scratch) / "probe.so"
        source.write_text(_PEAK_SOURCE)
        command = [compiler, "-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", str(source), "-o", str(library)]
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            raise SystemExit(f"roofline.py: compiling the probe failed ({' '.join(command)}):\n{built.stderr[-2000:]}")
        lib = ctypes.CDLL(str(library))
    lib.sol_fma_peak.restype = lib.sol_read_bandwidth.restype = ctypes.c_double
    lib.sol_fma_peak.argtypes = [ctypes.c_int, ctypes.c_long]
    lib.sol_read_bandwidth.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
    return lib


def machine_limits(threads: int) -> dict[str, float]:
    """This machine's fp32 FMA peak (FLOP/s) and memory read bandwidth (bytes/s) with ``threads`` threads, the
    best of three measurements each, and its last-level cache size in bytes (0 when unknown)."""
    lib = _probe_library()
    peak = max(lib.sol_fma_peak(threads, 20_000_000) for _ in range(3))
    bandwidth = lib.sol_read_bandwidth(threads, STREAM_BYTES, 3)
    return {"flops_per_s": peak, "bytes_per_s": bandwidth, "last_level_cache_bytes": last_level_cache_bytes()}


def last_level_cache_bytes() -> int:
    """The largest cache of CPU 0 per sysfs (``index*/size``, e.g. "32768K"), or 0."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=0)


def model_work(model: Any, example: Any) -> list[tuple[str, float, float, bool]]:
    """(module, FLOPs, bytes of weights, whether it is a dense 3x3 stride-1 convolution) per module of one
    inference, each counting only what the module does itself (not its children): FLOPs of matrix products and
    convolutions, attention included."""
    import torch
    from torch.utils import flop_counter

    def cpu_attention(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    formulas = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention}
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused MHA kernels hide their matrix products
    try:
        with torch.no_grad(), flop_counter.FlopCounterMode(display=False, custom_mapping=formulas) as counter:
            model(example)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    # The counter keys each module it saw called by the root's class name and the module's path. Modules never
    # called (a ModuleList, a weight read by its parent like MultiheadAttention's out_proj) have no key: their
    # weights go to the nearest called ancestor, and a called module's own FLOPs are its total less those of the
    # nearest called modules below it.
    root = type(model).__name__
    totals = {("" if key == root else key[len(root) + 1:]): sum(per_op.values())
              for key, per_op in counter.get_flop_counts().items() if key == root or key.startswith(root + ".")}
    totals.setdefault("", 0)  # a model without matrix products or convolutions still has its weights

    def called_ancestor(path: str) -> str:
        while path and path not in totals:
            path = path.rpartition(".")[0]
        return path

    own_flops = dict.fromkeys(totals, 0.0)
    for path, total in totals.items():
        own_flops[path] += total
        if path:
            own_flops[called_ancestor(path.rpartition(".")[0])] -= total
    own_bytes = dict.fromkeys(totals, 0.0)
    for path, module in model.named_modules():
        own_bytes[called_ancestor(path)] += sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
    modules = dict(model.named_modules())
    return [(path or root, own_flops[path], own_bytes[path], winograd_shape(modules[path]))
            for path in totals if own_flops[path] or own_bytes[path]]


def winograd_shape(module: Any) -> bool:
    """A dense 3x3 stride-1 2-D convolution: what Winograd's algorithms compute with fewer multiplies."""
    import torch

    return (isinstance(module, torch.nn.Conv2d) and tuple(module.kernel_size) == (3, 3)
            and tuple(module.stride) == (1, 1) and tuple(module.dilation) == (1, 1) and module.groups == 1)


def bounds(parts: list[tuple[str, float, float, bool]], limits: dict[str, float]) -> dict[str, float]:
    """The model's FLOPs, weight bytes and share of FLOPs in 3x3 stride-1 convolutions, and in seconds: all its
    FLOPs at the compute peak, all its weights read at the bandwidth (0 when they fit in the last-level cache,
    where they stay between calls), and the bound: the sum over its modules of the larger of the two (a
    convolution waits for the cores, a batch-1 Linear for memory)."""
    flops = sum(f for _, f, _, _ in parts)
    weight_bytes = sum(b for _, _, b, _ in parts)
    cached = weight_bytes <= limits["last_level_cache_bytes"]
    peak, bandwidth = limits["flops_per_s"], limits["bytes_per_s"]
    read = (lambda b: 0.0) if cached else (lambda b: b / bandwidth)
    return {"flops": flops, "weight_bytes": weight_bytes,
            "winograd_share": sum(f for _, f, _, w in parts if w) / flops if flops else 0.0,
            "compute_s": flops / peak, "memory_s": read(weight_bytes),
            "bound_s": sum(max(f / peak, read(b)) for _, f, b, _ in parts)}


def measured(result: dict[str, Any]) -> tuple[float | None, str | None, float | None]:
    """SOL's median ms, the fastest other peer's name and median ms, from one bench.py result row."""
    times = {name: e["median_ms"] for name, e in result.get("peers", {}).items()
             if e.get("status") == "ok" and e.get("median_ms")}
    others = {name: t for name, t in times.items() if name != "sol"}
    fastest = min(others, key=others.get) if others else None
    return times.get("sol"), fastest, others.get(fastest) if fastest else None


def table(rows: list[dict[str, Any]], limits: dict[str, float], threads: int) -> str:
    lines = [f"this machine, {threads} thread(s): fp32 FMA peak {limits['flops_per_s'] / 1e9:.0f} GFLOP/s, "
             f"read bandwidth {limits['bytes_per_s'] / 1e9:.1f} GB/s, last-level cache "
             f"{limits['last_level_cache_bytes'] / 2**20:.0f} MiB", ""]
    header = ["model", "GFLOP", "3x3 conv share", "weights MB", "at peak ms", "weights read ms", "bound ms", "SOL ms",
              "SOL % of bound", "fastest peer ms", "peer % of bound", "ceiling vs peer"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in rows:
        bound_ms = row["bound_s"] * 1e3
        sol, peer, peer_ms = row.get("sol_ms"), row.get("fastest_peer"), row.get("fastest_peer_ms")
        cells = [row["model"], f"{row['flops'] / 1e9:.2f}", f"{100 * row['winograd_share']:.0f}%",
                 f"{row['weight_bytes'] / 1e6:.1f}",
                 f"{row['compute_s'] * 1e3:.2f}", f"{row['memory_s'] * 1e3:.2f}" if row["memory_s"] else "cached",
                 f"{bound_ms:.2f}",
                 f"{sol:.2f}" if sol else "-", f"{100 * bound_ms / sol:.0f}%" if sol else "-",
                 f"{peer_ms:.2f} ({peer})" if peer_ms else "-",
                 f"{100 * bound_ms / peer_ms:.0f}%" if peer_ms else "-",
                 f"{peer_ms / bound_ms:.2f}x" if peer_ms and bound_ms > 0 else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    ceilings = [row["fastest_peer_ms"] / (row["bound_s"] * 1e3) for row in rows
                if row.get("fastest_peer_ms") and row["bound_s"] > 0]
    if ceilings:
        geomean = math.exp(sum(map(math.log, ceilings)) / len(ceilings))
        lines += ["", f"geometric mean of the ceilings over the fastest peer: {geomean:.2f}x ({len(ceilings)} models)"]
    lines += ["", "bound: direct algorithms at the FMA peak, weights read once from memory when they do not fit in "
                  "the last-level cache; Winograd computes 3x3 stride-1 convolutions with fewer multiplies, so a model "
                  "with a large 3x3 conv share can run below its bound (% of bound over 100%)"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None, help="zoo models, comma-separated (default: those in --results, "
                        "else resnet18,mobilenet_v2,mlp)")
    parser.add_argument("--results", default=None, help="a bench.py --json file: adds each model's measured times")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: the --results run's, else "
                        "the CPUs this process may use)")
    parser.add_argument("--json", default=None, help="write the limits and every row to this file")
    args = parser.parse_args()

    import torch
    from sol_frontend_torch.zoo import MODELS, build

    results: list[dict[str, Any]] = []
    threads = args.threads
    if args.results:
        data = json.loads(Path(args.results).read_text())
        results = [r for r in data.get("results", []) if r.get("mode", "inference") == "inference"
                   and r.get("batch") == 1 and not r.get("onnx")]
        threads = threads or data.get("meta", {}).get("threads", [None])[0]
    threads = threads or len(os.sched_getaffinity(0))
    names = args.models.split(",") if args.models else [r["model"] for r in results] or \
        ["resnet18", "mobilenet_v2", "mlp"]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(sorted(MODELS))}")
    by_model = {r["model"]: r for r in results}

    torch.set_num_threads(threads)
    limits = machine_limits(threads)
    rows = []
    for name in names:
        model, example = build(name)
        row = {"model": name, **bounds(model_work(model.eval(), example), limits)}
        if name in by_model:
            row["sol_ms"], row["fastest_peer"], row["fastest_peer_ms"] = measured(by_model[name])
        rows.append(row)
        print(f"{name}: {row['flops'] / 1e9:.2f} GFLOP, {row['weight_bytes'] / 1e6:.1f} MB of weights",
              file=sys.stderr, flush=True)
    print(table(rows, limits, threads))
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "limits": limits, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
