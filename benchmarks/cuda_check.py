"""SOL on an NVIDIA GPU: correctness, training gradients and speed against PyTorch (one GPU, about 8 minutes).

    python benchmarks/cuda_check.py --dry-run [--jobs 2] [--pack cuda_check_artifacts.tar.xz]   # no GPU: builds
    python benchmarks/cuda_check.py [--artifacts cuda_check_artifacts.tar.xz]                    # on the GPU
    python benchmarks/cuda_check.py ... --profile resnet18:training,vit_b_16@64   # plus where SOL's GPU time goes

What it checks (issue 30's Done-when):

- correctness: the CI half of the zoo (every model of sol_frontend_torch.zoo not in SLOW, the MLP and the
  transformer encoder included) compiled for ``cuda``, run on CUDA tensors (native: no copies, PyTorch's
  stream and caching allocator) at batch 1 and 8 against eager PyTorch on the same GPU with TF32 off
  (both of PyTorch's switches, convolutions and matmuls; restored afterwards);
  pass: max|SOL - eager| <= 1e-3 * max(max|eager|, 1). At batch 1 also CPU tensors through transparent
  offloading (copies per call) against eager on the CPU.
- training gradients: resnet18, mobilenet_v2 and the transformer encoder (dropout 0) in train mode, the model
  compiled for ``cuda``, once with CPU tensors (transparent offloading: SOL's training forward and backward run
  on the GPU, tensors are copied) and once with the model and input on the GPU (native: parameters, saved
  activations and gradients stay CUDA tensors); every parameter gradient against a float64 run on the CPU,
  passing when SOL's error is at most twice eager float32's own (or 1e-3 of the tensor's scale).
- speed, PyTorch's precision settings as found (its defaults: TF32 convolutions, strict fp32 matmuls), which
  SOL's cuDNN/cuBLAS calls follow call by call like eager's, for all three: eager, ``torch.compile`` (default mode) and
  SOL (native, CUDA tensors) for resnet18, resnet50, mobilenet_v2, densenet121, vit_b_16 and the
  transformer encoder at batch 1 and 64 (ms per call, after warm-up, ``torch.cuda.synchronize`` around
  the timed loop); training steps (forward, backward, SGD) at batch 16 for resnet18 and the transformer
  encoder, on CUDA tensors for all three.

Artifacts: the GPU machines have no network and their nvcc/torch differ from this machine's, so
``--dry-run`` builds every graph the run compiles (sol.optimize and the training steps, exactly as on
the GPU) with ``CUDA_VISIBLE_DEVICES`` empty (sm_90, the H100/H200's), through sol-backend-cuda's
artifact store ``sol.config["cuda::artifacts"] = --artifacts`` (default ``cuda_check_artifacts/`` in the
repository): every library lands there under a hash of its source and nvcc flags. The run sets the
same key, so SOL's ordinary compile path copies each library from there (carried: no nvcc) and builds
only what it does not find; the report counts both. With cuBLAS/cuDNN found (sol-backend-cuda[libs],
or a CUDA PyTorch's wheels) Conv, Linear and MatMul run through them, so the zoo models, the training
steps (cuDNN's backward data and filter) and the transformer (cuBLASLt, strided batches) test those
calls; ``sol versions`` lines for cuBLAS and cuDNN are in the report.

Budget: ``--budget`` seconds (default 450; none for a dry run, which builds everything) over the whole
run; a section that would start after it is recorded as skipped. torch.compile is timed last, with what is left. Results: ``--out`` (JSON; default
cuda_check.json) and the table on stdout (and ``--table``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARTIFACTS = ROOT / "cuda_check_artifacts"
SPEED_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "densenet121", "vit_b_16", "transformer_encoder")
SPEED_BATCHES = (1, 64)
TRAIN_MODELS = ("resnet18", "mobilenet_v2", "transformer_encoder")
TRAIN_SPEED_MODELS = ("resnet18", "transformer_encoder")
TRAIN_SPEED_BATCH = 16
CHECK_BATCHES = (1, 8)
RTOL = 1e-3


def ci_models() -> list[str]:
    from sol_frontend_torch.zoo import MODELS, SLOW

    return [name for name in MODELS if name not in SLOW]


# -- carried artifacts ----------------------------------------------------------------------------------------
class NotRun(Exception):
    """A dry run's stand-in model was asked to run."""


class Artifacts:
    """The carried libraries: sol-backend-cuda's ``cuda::artifacts`` store (`sol_backend_cuda.artifacts`).

    Every CUDA build of the run goes through ``directory``: a library built from the same source with the same nvcc
    flags is copied from there (carried: no nvcc), anything else is built and stored there. The GPU run uses SOL's
    ordinary compile path; only a dry run stands a model in for each build (nothing can be loaded without a GPU,
    but the flows that compile further graphs, such as a training step's backward, must go on).
    """

    def __init__(self, directory: Path, dry_run: bool) -> None:
        self.directory = directory
        self.dry_run = dry_run

    def install(self) -> None:
        import sol

        sol.config["cuda::artifacts"] = str(self.directory)
        if self.dry_run:
            import sol.compiler
            import sol_frontend_torch.training

            self._original = sol.compiler.compile_graph
            sol.compiler.compile_graph = self.stand_in  # sol.optimize and the native path
            sol_frontend_torch.training.compile_graph = self.stand_in  # the training steps

    @property
    def used(self) -> list[str]:
        from sol_backend_cuda import artifacts

        return list(artifacts.carried)

    @property
    def built(self) -> list[str]:
        from sol_backend_cuda import artifacts

        return list(artifacts.exported)

    def stand_in(self, graph: Any, device: Any = None, **kwargs: Any) -> Any:
        """Dry run: build (or find) the graph's library as compile_graph does, then a model that is never run."""
        from sol import cache
        from sol.compiler import cache_key, flavour_for, model_prefix
        from sol.errors import SolDeviceError
        from sol.passes import run_inference_passes
        from sol.runtime import CompiledModel

        if not str(device or "").startswith("cuda"):
            return self._original(graph, device, **kwargs)
        if kwargs.pop("passes", True):
            graph = run_inference_passes(graph)
        try:
            self._original(graph, "cuda", passes=False, **kwargs)  # builds into the store (or finds), wants a GPU
        except SolDeviceError:
            pass  # the library is built and stored; only loading it needs a GPU (the lookup below finds it)
        flavour, _ = flavour_for("cuda")
        entry = cache.lookup(cache_key(graph, flavour))
        if entry is None:
            raise RuntimeError(f"{graph.name}: no artifact after the build")
        metadata = dict(entry.metadata)
        # a hit in SOL's cache ran no nvcc, so nothing was stored: store it (the run's key is its source's)
        from sol.codegen.build import SOURCE_NAME
        from sol_backend_cuda import artifacts

        artifacts.export(self.directory, entry.file(SOURCE_NAME + flavour.source_suffix).read_text(), flavour.flags(),
                         entry.file(SOURCE_NAME + flavour.library_suffix), graph.name)

        class Unloaded(CompiledModel):  # what the callers read (names, specs, metadata), never run
            def _open(self, library_path: Path, prefix: str, device: int) -> None:
                pass

            def prepare(self, *args: Any, **kwargs: Any) -> None:
                raise NotRun(graph.name)

            def run(self, *args: Any, **kwargs: Any) -> None:
                raise NotRun(graph.name)

        model = Unloaded(graph, Path("/nonexistent"), model_prefix(graph))
        model.metadata = metadata  # type: ignore[attr-defined]
        return model


# -- helpers --------------------------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def _error(x: Any, ref: Any) -> tuple[float, float]:
    x = x.detach().float().cpu()
    ref = ref.detach().float().cpu()
    return float((x - ref).abs().max()), float(ref.abs().max())


def _ok(err: float, scale: float) -> bool:
    return err == err and err <= RTOL * max(scale, 1.0)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time(call: Any, min_reps: int = 5, seconds: float = 0.4) -> float:
    """ms per call: a warm-up, one timed call to size the loop, then ``seconds`` of calls (at least ``min_reps``,
    but only 2 for a call slower than 0.2 s: the generated library-free kernels take seconds at batch 64)."""
    call()
    _sync()
    start = time.perf_counter()
    call()
    _sync()
    once = time.perf_counter() - start
    reps = 2 if once > 0.2 else max(min_reps, min(200, int(seconds / max(once, 1e-6))))
    start = time.perf_counter()
    for _ in range(reps):
        call()
    _sync()
    return (time.perf_counter() - start) / reps * 1e3


def _outputs(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    return [v for v in value if isinstance(v, torch.Tensor)]


def _no_dropout(model: Any) -> Any:
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0
    return model


# -- sections -------------------------------------------------------------------------------------------------
def check_inference(name: str, dry_run: bool) -> dict[str, Any]:
    import sol
    import torch
    from sol_frontend_torch.zoo import build

    result: dict[str, Any] = {"model": name}
    model, x = build(name)
    started = time.perf_counter()
    optimized = sol.optimize(model, sol.input([0, *x.shape[1:]]), device="cuda")  # any batch
    result["optimize_s"] = round(time.perf_counter() - started, 2)
    if dry_run:
        return result
    with torch.no_grad():  # transparent offloading: CPU tensors, copies per call
        want = model(x)
        got = optimized(x)
    err, scale = _error(_outputs(got)[0], _outputs(want)[0])
    result["transparent_b1"] = {"err": err, "scale": scale, "ok": _ok(err, scale)}
    optimized.cuda()  # the model's own parameters move; SOL uses them in place
    for batch in CHECK_BATCHES:
        torch.manual_seed(batch)
        xb = torch.randn((batch, *x.shape[1:])).cuda()
        with torch.no_grad():
            want = model(xb)
            got = optimized(xb)
        torch.cuda.synchronize()
        errs = [_error(g, w) for g, w in zip(_outputs(got), _outputs(want), strict=True)]
        err, scale = max(e for e, _ in errs), max(s for _, s in errs)
        result[f"native_b{batch}"] = {"err": err, "scale": scale, "ok": _ok(err, scale)}
    result["ok"] = all(v["ok"] for k, v in result.items() if isinstance(v, dict))
    return result


def _train_model(name: str) -> tuple[Any, Any]:
    import torch
    from sol_frontend_torch.zoo import build

    model, x = build(name)
    _no_dropout(model)
    torch.manual_seed(1)
    batch = 4 if name != "transformer_encoder" else 2
    return model.train(), torch.randn((batch, *x.shape[1:]))


def _gradients(model: Any) -> dict[str, Any]:
    return {n: p.grad.detach().double().cpu() for n, p in model.named_parameters() if p.grad is not None}


def _gradient_check(mine: dict[str, Any], eagers: dict[str, dict[str, Any]], exact: dict[str, Any], out: Any,
                    want: Any, want64: Any) -> dict[str, Any]:
    """SOL's parameter gradients (``mine``) and output against a float64 run, with eager float32's own error as the
    yardstick: the project's rule (`sol_frontend_torch.gradient_check`). A run's error is that of its worst
    parameter (max |g - g64| / max |g64|, over the parameters whose gradient is at least 1e-3 of the largest);
    SOL passes when its error is within `gradient_check.FACTOR` times the largest of the eager float32 runs' (``eagers``:
    on the CPU in PyTorch's default layout and in channels-last, and on the GPU with TF32 off), and its output
    within twice eager's error (or RTOL).

    Why several eager runs, and why not tensor by tensor: a ReLU whose float64 input lies within float32 rounding
    of 0 (or of 6) lands on either side in a float32 run, and batch norm over a few values spreads one such flip
    over its channel's gradients. Which elements flip depends on the summation order, so equally correct float32
    runs differ by up to 10x on one tensor (mobilenet_v2 at batch 4, features.15.conv.1.0.weight: eager 8.1e-3 in
    the default layout, 5.7e-2 in channels-last); SOL compiled in float64 matches eager float64 to 1e-12."""
    from sol_frontend_torch.gradient_check import FACTOR, worst

    out_err, out_scale = _error(out, want64)
    out_eager, _ = _error(want, want64)
    output_ok = out_err == out_err and out_err <= max(2 * out_eager, RTOL * max(out_scale, 1.0))
    sol_worst = worst(mine, exact)
    eager_worst = {tag: worst(grads, exact) for tag, grads in eagers.items()}
    yardstick = max(e.error for e in eager_worst.values())
    ok = output_ok and sol_worst.error == sol_worst.error and sol_worst.error <= FACTOR * yardstick
    return {"gradients": len(mine), "ok": bool(ok),
            "sol": {"error": sol_worst.error, "parameter": sol_worst.parameter},
            "eager": {tag: {"error": e.error, "parameter": e.parameter} for tag, e in eager_worst.items()},
            "yardstick": yardstick, "output": {"err": out_err, "eager_err": out_eager, "scale": out_scale,
                                               "ok": bool(output_ok)}}


def check_training(name: str, dry_run: bool) -> dict[str, Any]:
    """One training forward and backward, compiled for ``cuda``, against a float64 run (eager float32 on the CPU
    in both layouts and on the GPU the yardstick): with CPU tensors (transparent offloading) and with the model
    and input on the GPU (native: parameters, activations and gradients stay CUDA tensors)."""
    import copy

    import sol
    import torch
    from sol_frontend_torch.gradient_check import float64_reference

    result: dict[str, Any] = {"model": name}
    model, x = _train_model(name)
    eager = copy.deepcopy(model)
    eager_cl = copy.deepcopy(model).to(memory_format=torch.channels_last) if x.dim() == 4 else None
    eager_gpu = copy.deepcopy(model)
    exact = float64_reference(model)
    native_model = copy.deepcopy(model)
    optimized = sol.optimize(model, x, device="cuda")
    optimized.train()
    try:
        out = _outputs(optimized(x))[0]
    except NotRun:
        if dry_run:
            return result
        raise
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weights).sum().backward()
    want = _outputs(eager(x))[0]
    (want * weights).sum().backward()
    want64 = _outputs(exact(x.double()))[0]
    (want64 * weights.double()).sum().backward()
    (_outputs(eager_gpu.cuda()(x.cuda()))[0] * weights.cuda()).sum().backward()
    eagers = {"CPU": _gradients(eager), "GPU": _gradients(eager_gpu)}
    if eager_cl is not None:
        (_outputs(eager_cl(x.to(memory_format=torch.channels_last)))[0] * weights).sum().backward()
        eagers["CPU channels-last"] = _gradients(eager_cl)
    exact_grads = _gradients(exact)
    result["transparent"] = _gradient_check(_gradients(model), eagers, exact_grads, out, want, want64)
    native_model.cuda()
    native = sol.optimize(native_model, x.cuda(), device="cuda").train()
    out = _outputs(native(x.cuda()))[0]
    (out * weights.cuda()).sum().backward()
    result["native"] = _gradient_check(_gradients(native_model), eagers, exact_grads, out, want, want64)
    result["ok"] = result["transparent"]["ok"] and result["native"]["ok"]
    return result


def speed_inference(name: str, budget: Budget, dry_run: bool, compiled_too: bool) -> list[dict[str, Any]]:
    import sol
    import torch
    from sol_frontend_torch.zoo import build

    model, x = build(name)
    optimized = sol.optimize(model, sol.input([0, *x.shape[1:]]), device="cuda")  # the same artifact as above
    if dry_run:
        return []
    model.cuda()
    optimized.cuda()
    rows = []
    for batch in SPEED_BATCHES:
        torch.manual_seed(batch)
        xb = torch.randn((batch, *x.shape[1:]), device="cuda")
        with torch.no_grad():
            row = {"model": name, "batch": batch, "mode": "inference",
                   "eager_ms": _time(lambda xb=xb: model(xb)), "sol_ms": _time(lambda xb=xb: optimized(xb))}
        rows.append(row)
    return rows


def speed_compiled(row: dict[str, Any]) -> None:
    """torch.compile (default mode) of the row's model at its batch, timed into the row."""
    import torch
    from sol_frontend_torch.zoo import build

    model, x = build(row["model"])
    model.cuda()
    xb = torch.randn((row["batch"], *x.shape[1:]), device="cuda")
    compiled = torch.compile(model)
    started = time.perf_counter()
    with torch.no_grad():
        compiled(xb)
        torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - started, 1)
        row["compiled_ms"] = _time(lambda: compiled(xb))


def _train_step(m: Any, inp: Any, opt: Any) -> None:
    opt.zero_grad(set_to_none=True)
    _outputs(m(inp))[0].float().mean().backward()
    opt.step()


def _train_setup(name: str) -> tuple[Any, Any]:
    import torch
    from sol_frontend_torch.zoo import build

    model, x = build(name)
    _no_dropout(model).train()
    torch.manual_seed(TRAIN_SPEED_BATCH)
    return model, torch.randn((TRAIN_SPEED_BATCH, *x.shape[1:]))


def speed_training(name: str, budget: Budget, dry_run: bool) -> dict[str, Any] | None:
    """ms per training step (forward, backward, SGD) on CUDA tensors: eager and SOL."""
    import copy

    import sol
    import torch

    model, xb = _train_setup(name)
    reference = copy.deepcopy(model)
    optimized = sol.optimize(model, xb, device="cuda")  # training graphs are captured for this batch
    optimized.train()
    sol_opt = torch.optim.SGD(optimized.parameters(), lr=1e-6)
    try:
        _train_step(optimized, xb, sol_opt)
    except NotRun:
        if dry_run:
            return None
        raise
    if dry_run:
        return None
    reference.cuda()
    optimized.cuda()  # the parameters move in place: the optimizer keeps them
    eager_opt = torch.optim.SGD(reference.parameters(), lr=1e-6)
    xc = xb.cuda()
    return {"model": name, "batch": TRAIN_SPEED_BATCH, "mode": "training",
            "eager_ms": _time(lambda: _train_step(reference, xc, eager_opt), min_reps=3),
            "sol_ms": _time(lambda: _train_step(optimized, xc, sol_opt), min_reps=3),
            "sol_note": "native (CUDA tensors)"}


def speed_training_compiled(row: dict[str, Any]) -> None:
    """torch.compile (default mode) of the row's training step, timed into the row."""
    import torch

    model, xb = _train_setup(row["model"])
    model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    xc = xb.cuda()
    compiled = torch.compile(model)
    started = time.perf_counter()
    _train_step(compiled, xc, opt)
    torch.cuda.synchronize()
    row["compile_s"] = round(time.perf_counter() - started, 1)
    row["compiled_ms"] = _time(lambda: _train_step(compiled, xc, opt), min_reps=3)


def parse_profile(spec: str) -> tuple[str, str, int]:
    """``model[:training][@batch]`` -> (model, mode, batch): inference at batch 1 unless given (its graph takes any
    batch); a training step at `TRAIN_SPEED_BATCH`, the batch its graphs were captured (and carried) for."""
    what, _, batch = spec.strip().partition("@")
    name, _, mode = what.partition(":")
    mode = mode or "inference"
    if mode not in ("inference", "training"):
        raise ValueError(f"--profile {spec!r}: the mode is 'inference' or 'training', not {mode!r}")
    if mode == "training":
        if batch and int(batch) != TRAIN_SPEED_BATCH:
            raise ValueError(f"--profile {spec!r}: training steps are captured (and carried) for batch "
                             f"{TRAIN_SPEED_BATCH} only")
        return name, mode, TRAIN_SPEED_BATCH
    return name, mode, int(batch) if batch else 1


def _device_time_ms(events: Any) -> float:
    """The summed self time of the profiled kernels and copies on the GPU."""
    return sum(e.self_device_time_total for e in events) / 1000.0


def profile(name: str, mode: str, rows: int, batch: int = 1) -> str:
    """The CUDA kernels (and library calls) SOL's compiled model spends its GPU time in, as torch.profiler's table:
    one inference call at ``batch`` on CUDA tensors, or one training step at batch 16 (``mode``). The header gives
    the call's time and how much of it the GPU computed: the rest is the GPU waiting for launches and host work."""
    import sol
    import torch
    from sol_frontend_torch.zoo import build

    if mode == "training":
        model, xb = _train_setup(name)
        optimized = sol.optimize(model, xb, device="cuda").train().cuda()
        opt = torch.optim.SGD(optimized.parameters(), lr=1e-6)
        xc = xb.cuda()

        def call() -> None:
            _train_step(optimized, xc, opt)
    else:
        model, x = build(name)
        optimized = sol.optimize(model, sol.input([0, *x.shape[1:]]), device="cuda").cuda()
        xc = torch.randn((batch, *x.shape[1:]), device="cuda")

        def call() -> None:
            with torch.no_grad():
                optimized(xc)
    for _ in range(2):  # warm-up: the first call of a batch size sets up (and autotunes) the library calls
        call()
    wall = _time(call, min_reps=3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    events = prof.key_averages()
    table = events.table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=70)
    return (f"== {name} {mode} b{batch} (SOL, CUDA tensors): {wall:.3f} ms per call, of which the GPU computed "
            f"{_device_time_ms(events):.3f} ms\n{table}")


# -- driver ---------------------------------------------------------------------------------------------------
def _guarded(results: list[Any], what: str, call: Any) -> Any:
    started = time.perf_counter()
    try:
        value = call()
    except Exception as exc:  # one model's failure is a result, not the end of the run
        value = {"what": what, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:600],
                 "trace": traceback.format_exc()[-2000:]}
    if isinstance(value, dict):
        value.setdefault("what", what)
        value["seconds"] = round(time.perf_counter() - started, 2)
        results.append(value)
    print(f"[{time.strftime('%H:%M:%S')}] {what}: "
          f"{json.dumps(value, default=str)[:400] if value is not None else 'done'}", flush=True)
    return value


def selected_items(only: str) -> list[tuple[str, str]]:
    """The work items ``--only`` names (``kind:model,...``; all when empty), in run order."""
    wanted = set(only.split(",")) if only else None
    return [i for i in work_items() if wanted is None or f"{i[0]}:{i[1]}" in wanted]


def work_items() -> list[tuple[str, str]]:
    items = [("inference", n) for n in ci_models()]
    items += [("training", n) for n in TRAIN_MODELS]
    items += [("speed", n) for n in SPEED_MODELS if n not in ci_models()]
    items += [("train-speed", n) for n in TRAIN_SPEED_MODELS]
    return items


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from sol_frontend_torch.fp32_math import tf32_disabled, torch_fp32_math

    budget = Budget(args.budget)
    artifacts = Artifacts(Path(args.artifacts), args.dry_run)
    artifacts.install()
    from sol_backend_cuda.backend import CudaBackend

    report: dict[str, Any] = {"device": None, "torch": torch.__version__, "dry_run": args.dry_run,
                              "versions": dict(CudaBackend().versions()),
                              "inference": [], "training": [], "speed": [], "skipped": []}
    if not args.dry_run:
        report["device"] = torch.cuda.get_device_name(0)
    # speed runs with the settings as they are (PyTorch's defaults: TF32 convolutions, strict matmuls), which SOL's
    # library calls follow like eager's; correctness and gradients with both switches off, restored after each
    report["speed_fp32_math"] = str(torch_fp32_math())
    only = set(args.only.split(",")) if args.only else None  # also speed:<model>, which work_items() omits
    items = selected_items(args.only)

    lost: list[str] = []  # a kernel's illegal address ends the CUDA context: later sections cannot run

    def section(kind: str, name: str, need: float) -> bool:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))  # so far: kept if the run is killed
        if lost:
            report["skipped"].append(f"{kind} {name} (CUDA context lost in {lost[0]})")
            return False
        if budget.left() < need:
            report["skipped"].append(f"{kind} {name} (budget)")
            print(f"skipped {kind} {name}: {budget.left():.0f} s left", flush=True)
            return False
        return True

    def guarded(results: list[Any], what: str, call: Any) -> None:
        value = _guarded(results, what, call)
        if isinstance(value, dict) and "illegal memory access" in str(value.get("error", "")):
            lost.append(what)

    def wanted(kind: str, name: str) -> bool:
        return only is None or f"{kind}:{name}" in only

    # the sections most likely to break the context (training: more generated kernels) run last
    with tf32_disabled():  # correctness: TF32 off for eager and SOL alike
        for kind, name in items:
            if kind == "inference" and section(kind, name, 10):
                guarded(report["inference"], f"inference {name}", lambda n=name: check_inference(n, args.dry_run))
    for name in SPEED_MODELS:
        if (wanted("speed", name) or wanted("inference", name)) and section("speed", name, 15):
            rows: list[Any] = []
            guarded(rows, f"speed {name}", lambda n=name: {"rows": speed_inference(n, budget, args.dry_run, True)})
            for r in rows:
                report["speed"] += r.get("rows", []) or ([r] if "error" in r else [])
    with tf32_disabled():  # gradients against float64, eager fp32's error the yardstick: TF32 off
        for kind, name in items:
            if kind == "training" and section(kind, name, 20):
                guarded(report["training"], f"training {name}", lambda n=name: check_training(n, args.dry_run))
    for name in TRAIN_SPEED_MODELS:
        if wanted("train-speed", name) and section("train-speed", name, 30):
            rows = []
            guarded(rows, f"train-speed {name}", lambda n=name: speed_training(n, budget, args.dry_run) or {})
            report["speed"] += [r for r in rows if "eager_ms" in r or "error" in r]
    if not args.dry_run:  # torch.compile last, with what is left: it is the slowest to set up and not SOL's
        for row in [r for r in report["speed"] if "eager_ms" in r]:
            # what compiling took on an H100 (2026-11-28): inference 0.2-53 s (densenet121 at batch 64 the longest),
            # resnet18's training step 29 s
            need = 45 if row["mode"] == "inference" else 60
            if section("torch.compile", f"{row['model']} {row['mode']} b{row['batch']}", need):
                with contextlib.suppress(Exception):
                    (speed_compiled if row["mode"] == "inference" else speed_training_compiled)(row)
                    print(f"compiled {row['model']} {row['mode']} b{row['batch']}: "
                          f"{row.get('compiled_ms', 0):.3f} ms", flush=True)
    report["artifacts"] = {"carried": artifacts.used, "built_here": artifacts.built}
    report["seconds"] = round(time.perf_counter() - budget.start, 1)
    return report


def table(report: dict[str, Any]) -> str:
    versions = report.get("versions", {})
    lines = [f"SOL cuda_check on {report['device']} (torch {report['torch']}), {report['seconds']} s; "
             f"carried artifacts {len(report['artifacts']['carried'])}, built here {len(report['artifacts']['built_here'])}",
             "libraries: " + ", ".join(f"{k} {str(versions.get(k, '?')).split(' (')[0]}"
                                       for k in ("driver", "runtime", "cublas", "cudnn")),
             "", "correctness (max|SOL-eager| / max(max|eager|,1), pass <= 1e-3; TF32 off)",
             f"{'model':22s} {'transparent b1':>15s} {'native b1':>12s} {'native b8':>12s}  result"]
    for r in report["inference"]:
        if "error" in r:
            lines.append(f"{r['what'][10:]:22s} ERROR {r['error'][:150]}")
            continue
        cells = [f"{r[k]['err'] / max(r[k]['scale'], 1.0):.2e}" if k in r else "-"
                 for k in ("transparent_b1", "native_b1", "native_b8")]
        lines.append(f"{r['model']:22s} {cells[0]:>15s} {cells[1]:>12s} {cells[2]:>12s}  "
                     f"{'OK' if r.get('ok') else 'FAIL'}")
    from sol_frontend_torch.gradient_check import FACTOR

    lines += ["", "training gradients against float64 (a run's error: its worst parameter's max|g - g64| / max|g64|; "
              f"pass: SOL's within {FACTOR:g}x the largest eager float32 run's, CPU in both layouts and GPU "
              "with TF32 off; transparent: CPU tensors, native: CUDA tensors)"]
    for r in report["training"]:
        if "error" in r:
            lines.append(f"{r['what'][9:]:22s} ERROR {r['error'][:150]}")
            continue
        for mode in ("transparent", "native"):
            if mode in r:
                c = r[mode]
                eagers = ", ".join(f"{tag} {e['error']:.1e}" for tag, e in c["eager"].items())
                lines.append(f"{r['model']:22s} {mode:11s} {c['gradients']:4d} gradients: SOL {c['sol']['error']:.1e} "
                             f"({c['sol']['parameter']}); eager fp32 {eagers}  {'OK' if c['ok'] else 'FAIL'}")
    lines += ["", f"speed, ms per call (PyTorch's settings as found: {report.get('speed_fp32_math', '?')}; "
              "SOL's cuDNN/cuBLAS calls follow them like eager's)",
              f"{'model':22s} {'mode':10s} {'batch':>5s} {'eager':>9s} {'compile':>9s} {'SOL':>9s} {'SOL/eager':>9s}  (times: < 1 is SOL faster)"]
    for r in report["speed"]:
        if "error" in r:
            lines.append(f"{r.get('what', '?'):33s} ERROR {r['error'][:150]}")
            continue
        fmt = lambda v: f"{v:9.3f}" if isinstance(v, float) else f"{'-':>9s}"  # noqa: E731
        ratio = r["sol_ms"] / r["eager_ms"] if r.get("eager_ms") else float("nan")
        lines.append(f"{r['model']:22s} {r['mode']:10s} {r['batch']:5d} {fmt(r.get('eager_ms'))} "
                     f"{fmt(r.get('compiled_ms'))} {fmt(r.get('sol_ms'))} {ratio:9.2f}")
    if report["skipped"]:
        lines += ["", "skipped: " + ", ".join(report["skipped"])]
    return "\n".join(lines)


def dry_run_parallel(args: argparse.Namespace) -> int:
    """--dry-run --jobs N: the work items split over N processes (each builds its own graphs)."""
    items = [f"{k}:{n}" for k, n in selected_items(args.only)]
    chunks = [c for c in (items[i::args.jobs] for i in range(args.jobs)) if c]
    procs = []
    for index, chunk in enumerate(chunks):
        command = [sys.executable, __file__, "--dry-run", "--jobs", "1", "--only", ",".join(chunk),
                   "--artifacts", args.artifacts, "--budget", str(args.budget),
                   "--out", str(Path(args.out).with_suffix(f".dry{index}.json"))]
        procs.append(subprocess.Popen(command))
    return max(p.wait() for p in procs)


def pack(store: Path, archive: Path) -> None:
    """The store as one .tar.xz (cubins and host code compress about 5x)."""
    import tarfile

    with tarfile.open(archive, "w:xz") as tar:
        for path in sorted(store.iterdir()):
            tar.add(path, arcname=path.name)
    print(f"packed {len(list(store.iterdir()))} files of {store} into {archive} ({archive.stat().st_size >> 20} MiB)")


def unpack(archive: Path) -> Path:
    """A packed store, unpacked beside it (``<name>.unpacked``), as the directory the run uses."""
    import tarfile

    target = archive.with_name(archive.name.removesuffix(".tar.xz") + ".unpacked")
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(target, filter="data")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="build every artifact without a GPU")
    parser.add_argument("--jobs", type=int, default=1, help="dry run: processes building in parallel")
    parser.add_argument("--artifacts", default=str(DEFAULT_ARTIFACTS),
                        help="the store of carried libraries (a directory), or a .tar.xz of one (--pack)")
    parser.add_argument("--pack", default="", help="dry run: also write the store as this .tar.xz (about 5x smaller: "
                                                   "what to carry to the GPU machine)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds; later sections are skipped (default 450; a dry run builds everything)")
    parser.add_argument("--only", default="", help="kind:model,... (inference, training, speed, train-speed)")
    parser.add_argument("--out", default="cuda_check.json")
    parser.add_argument("--table", default="", help="also write the table to this file")
    parser.add_argument("--profile", default="", help="after the run: the top CUDA kernels of SOL's compiled model, "
                                                     "per model[:training][@batch], e.g. resnet18:training,vit_b_16@64")
    parser.add_argument("--profile-rows", type=int, default=15, help="kernels per --profile table (15)")
    args = parser.parse_args()
    if args.budget is None:
        args.budget = 1e9 if args.dry_run else 450.0
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the build as on a machine without a GPU (sm_90)
        if args.jobs > 1:
            code = dry_run_parallel(args)
            if args.pack:
                pack(Path(args.artifacts), Path(args.pack))
            return code
    elif args.artifacts.endswith(".tar.xz"):
        args.artifacts = str(unpack(Path(args.artifacts)))
    report = run(args)
    if args.dry_run and args.pack:
        pack(Path(args.artifacts), Path(args.pack))
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    if args.dry_run:
        stored = len(list(Path(args.artifacts).glob("*.so")))
        print(f"dry run: {len(report['artifacts']['built_here'])} libraries built by nvcc now, {stored} in "
              f"{args.artifacts}; "
              f"errors: {[r['what'] for r in report['inference'] + report['training'] if 'error' in r]}")
        return 0
    text = table(report)
    if args.profile:
        for what in args.profile.split(","):
            try:
                name, mode, batch = parse_profile(what)
                text += "\n\n" + profile(name, mode, args.profile_rows, batch)
            except Exception as exc:  # a profile is extra information: its failure is reported, not fatal
                text += f"\n\n== {what}: profile failed: {type(exc).__name__}: {exc}"
    print(text)
    if args.table:
        Path(args.table).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
