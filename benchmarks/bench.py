"""SOL side by side with its peers: PyTorch eager, torch.compile, ONNX Runtime, OpenVINO.

    python benchmarks/bench.py                                   # resnet18, mobilenet_v2, mlp; batch 1; all peers
    python benchmarks/bench.py --models resnet18,mobilenet_v2 --batch 1,16 --threads 2 --runs 30
    python benchmarks/bench.py --models all --json results.json  # every zoo model ("fast": all but the slow set)
    python benchmarks/bench.py --mode training --models resnet18  # forward + backward + SGD step (batch 16; MLP 64)
    python benchmarks/bench.py --onnx model.onnx --batch 1       # one .onnx file: SOL vs ONNX Runtime vs OpenVINO
    python benchmarks/bench.py --precision bf16 --models all     # SOL bf16 vs OpenVINO's default (bf16) and ORT

Every (model, batch, threads) configuration runs in its own child process
(`--_worker`), in which all peers are measured side by side on the same input
with the same thread count: a crash or a leak stays in that child. Timings are
medians of repeated runs after warm-up, measured in interleaved blocks (each
round runs every peer once, in rotated order) so that drift of a shared machine
hits all peers alike; before each block the other peers' thread pools get
`--settle-ms` to stop spinning, and the peer runs untimed for `--ramp-ms`
while the cores speed up again. The table shows SOL against the fastest peer
twice: the ratio of the two medians, and the median (with IQR) of the
per-round ratios of their blocks' medians, which a slow phase of a shared
machine spanning a round does not tip. Every peer's output is checked against eager PyTorch (or,
for --onnx, against ONNX Runtime without graph optimizations); a mismatch is
reported in the table, never hidden. See benchmarks/README.md.

``--precision bf16`` (issue 33) compares what users get without forcing fp32:
SOL with ``precision="bf16"``, OpenVINO with its default inference precision
(bf16 wherever the CPU computes it natively; the one it used is reported) and
ONNX Runtime, eager and torch.compile in fp32 (none has a default CPU bf16).
Each peer's error against fp32 eager, max |out - eager| / max |eager| on the
same input, is printed beside its time, with SOL's time and error against
OpenVINO's and the accuracy criterion: SOL's error at most 1.5x OpenVINO's or
2e-2, whichever is larger.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = ("eager", "compile", "ort", "openvino", "sol")
TORCH_ONLY = ("eager", "compile")  # peers that need a torch.nn.Module (not for --onnx)
INFERENCE_ONLY = ("ort", "openvino")  # peers that cannot train a model here
LABELS = {"eager": "eager", "compile": "compile", "ort": "ORT", "openvino": "OpenVINO", "sol": "SOL"}
DEFAULT_MODELS = "resnet18,mobilenet_v2,mlp"
#: --precision bf16: SOL's error may be this many times OpenVINO's bf16 error, or ERROR_FLOOR, whichever is larger
ERROR_FACTOR, ERROR_FLOOR = 1.5, 2e-2
#: --precision bf16 peers unless --peers says otherwise (torch.compile adds minutes of compiling for an fp32 number)
BF16_PEERS = ("eager", "ort", "openvino", "sol")
RTOL, ATOL = 1e-4, 1e-5
#: ms before each peer's block of timed runs (see Worker._measure); ONNX Runtime's pool spins for tens of ms
SETTLE_MS = 100.0
#: untimed calls for at least this many ms after the settle pause: the cores come back from the pause at a lower
#: speed. On the 2-core AMX VM, resnet18 in bf16 took 6.7, 4.1, 3.3, 2.9, 2.8, 2.6 ms on the calls after a 100 ms
#: sleep against 2.5 steadily (SOL; OpenVINO 6.9, 4.0, 3.4, 2.9, 2.8, 2.7 against 2.5), so a block timed from the
#: second call on measured the ramp as much as the model
RAMP_MS = 30.0
TRAIN_BATCH = {"mlp": 64}  # training batch per model; CNNs and the rest: 16
TRAIN_BATCH_DEFAULT = 16
FLUSH_NOTE = ("denormals: torch and SOL run with torch.set_flush_denormal(True) set before any thread starts "
              "(threads inherit FTZ/DAZ); ONNX Runtime flushes by its own setting session.set_denormal_as_zero=1, "
              "OpenVINO by CPU_DENORMALS_OPTIMIZATION=YES")
DISTRIBUTIONS = ("torch", "torchvision", "onnx", "onnxscript", "onnxruntime", "openvino", "numpy",
                 "sol-core", "sol-backend-x86", "sol-frontend-torch", "sol-frontend-onnx")


# --------------------------------------------------------------------------------------------------------------------
# statistics and small helpers


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(times_ms: list[float]) -> dict[str, Any]:
    return {
        "runs": len(times_ms),
        "median_ms": statistics.median(times_ms),
        "p10_ms": percentile(times_ms, 10),
        "p90_ms": percentile(times_ms, 90),
        "min_ms": min(times_ms),
        "times_ms": times_ms,
    }


def median_iqr(ratios: list[float]) -> tuple[float, list[float]]:
    """The median of a non-empty list and its interquartile range [q1, q3] (one value: that value twice)."""
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), [quartiles[0], quartiles[2]]


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def dist_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


# --------------------------------------------------------------------------------------------------------------------
# the worker: one configuration, all peers side by side in this one process


class Unavailable(Exception):
    """A peer that does not apply (reported as n/a with the reason, not as an error)."""


def _flatten_outputs(value: Any) -> list[Any]:
    """Tensors / arrays of a model output (tensor, tuple, list, dict, OpenVINO result) as a list of numpy arrays."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten_outputs(v)]
    if hasattr(value, "to_tuple"):  # openvino OVDict
        return [np.asarray(v) for v in value.to_tuple()]
    return [np.asarray(value)]


def compare(got: list[Any], ref: list[Any]) -> dict[str, Any]:
    """Max abs / relative error and whether every output is allclose(rtol=1e-4, atol=1e-5) to the reference."""
    import numpy as np

    if len(got) != len(ref):
        return {"match": False, "max_abs_err": None, "max_rel_err": None,
                "note": f"{len(got)} outputs, the reference has {len(ref)}"}
    max_abs, max_rel, match, notes = 0.0, 0.0, True, []
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        g, r = np.asarray(g, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            match = False
            notes.append(f"output {i}: shape {list(g.shape)}, the reference has {list(r.shape)}")
            continue
        if g.size == 0:
            continue
        diff = np.abs(g - r)
        if not np.all(np.isfinite(g)):
            notes.append(f"output {i}: non-finite values")
        err = float(np.nanmax(diff)) if np.any(np.isfinite(diff)) else float("inf")
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / max(float(np.max(np.abs(r))), 1e-30))
        match = match and bool(np.allclose(g, r, rtol=RTOL, atol=ATOL))
    out: dict[str, Any] = {"match": match, "max_abs_err": max_abs, "max_rel_err": max_rel}
    if notes:
        out["note"] = "; ".join(notes)
    return out


class Worker:
    def __init__(self, spec: dict[str, Any], out_path: Path) -> None:
        self.spec = spec
        self.out_path = out_path
        self.result: dict[str, Any] = {
            "model": spec["model"], "batch": spec["batch"], "threads": spec["threads"], "mode": spec["mode"],
            "onnx": spec.get("onnx"), "phase": "start", "peers": {}, "notes": [],
        }
        self.fns: dict[str, Callable[[], Any]] = {}

    def save(self) -> None:
        write_json(self.out_path, self.result)

    def peer(self, name: str) -> dict[str, Any]:
        return self.result["peers"].setdefault(name, {"status": "pending"})

    def phase(self, text: str) -> None:
        self.result["phase"] = text
        self.save()
        print(f"[{self.spec['model']} b{self.spec['batch']} t{self.spec['threads']}] {text}", file=sys.stderr, flush=True)

    # ---- setup -----------------------------------------------------------------------------------------------------

    def run(self) -> None:
        import numpy as np
        import torch

        threads = self.spec["threads"]
        # Before anything starts a thread: FTZ/DAZ are per thread and inherited by threads created later.
        torch.set_flush_denormal(True)
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        self.result["torch_threads"] = torch.get_num_threads()
        self.result["parallel_info"] = torch.__config__.parallel_info()
        self.np, self.torch = np, torch

        self.phase("build model")
        if self.spec.get("onnx"):
            self._build_onnx()
        else:
            self._build_torch()
        self.save()

        for name in self.spec["peers"]:
            entry = self.peer(name)
            self.phase(f"set up {name}")
            try:
                setup = getattr(self, f"_setup_{name}_{'onnx' if self.spec.get('onnx') else self.spec['mode']}")
                setup(entry)
                entry["status"] = "ok"
            except Unavailable as exc:
                entry.update(status="n/a", error=str(exc))
            except Exception as exc:
                unsupported = "Unsupported" in type(exc).__name__ or "not supported" in str(exc)
                na = unsupported or (name == "sol" and self.spec["mode"] == "training")
                entry.update(status="n/a" if na else "error", error=one_line(exc), traceback=traceback.format_exc(limit=8))
            self.save()

        self.phase("measure")
        self._measure()
        if "sol" in self.fns and self.spec.get("sol_cached", True):
            self.phase("sol cached load (fresh process)")
            self._sol_cached(self.peer("sol"))
        self.phase("done")

    def _build_torch(self) -> None:
        torch = self.torch
        model, self.x = build_model(self.spec["model"], self.spec["batch"])
        self.model = model
        if self.spec["mode"] == "inference":
            with torch.no_grad():
                self.ref = _flatten_outputs(model(self.x))
        else:
            with torch.no_grad():
                self.target = torch.randn_like(model(self.x))
            if any(isinstance(m, torch.nn.Dropout) or getattr(m, "dropout", None) for m in model.modules()):
                self.result["notes"].append(
                    "model has dropout: training outputs are random, so comparisons with eager are not meaningful")
            self.ref = self._train_reference()
        self.onnx_path: str | None = None

    def _build_onnx(self) -> None:
        import onnx

        np = self.np
        path = self.spec["onnx"]
        model = onnx.load(path, load_external_data=False)
        initializers = {i.name for i in model.graph.initializer}
        self.inputs: dict[str, Any] = {}
        rng = np.random.default_rng(1)
        for value in model.graph.input:
            if value.name in initializers:
                continue
            tensor_type = value.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else self.spec["batch"]
                     for d in tensor_type.shape.dim]
            if np.issubdtype(dtype, np.floating):
                self.inputs[value.name] = rng.standard_normal(shape).astype(dtype)
            else:
                self.inputs[value.name] = rng.integers(0, 2, size=shape).astype(dtype)
        self.result["inputs"] = {k: [list(v.shape), str(v.dtype)] for k, v in self.inputs.items()}
        self.onnx_path = path
        import onnxruntime as ort

        options = self._ort_options()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        reference = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.ref = _flatten_outputs(reference.run(None, self.inputs))
        self.result["notes"].append("reference: ONNX Runtime with graph optimizations disabled")
        del reference

    def _export_onnx(self) -> str:
        """Export the model once (shared by ONNX Runtime and OpenVINO): the dynamo exporter, else the legacy one."""
        if self.onnx_path is not None:
            return self.onnx_path
        if getattr(self, "export_error", None):
            raise Unavailable(self.export_error)
        torch = self.torch
        directory = Path(self.spec["scratch"]) / "onnx"
        directory.mkdir(parents=True, exist_ok=True)
        errors = []
        for dynamo in (True, False):
            path = directory / f"{self.spec['model']}_{'dynamo' if dynamo else 'legacy'}.onnx"
            start = time.perf_counter()
            try:
                with torch.no_grad(), contextlib.redirect_stdout(sys.stderr):
                    torch.onnx.export(self.model, (self.x,), str(path), dynamo=dynamo,
                                      **({} if dynamo else {"opset_version": 17}))
            except Exception as exc:
                errors.append(f"{'dynamo' if dynamo else 'legacy'} exporter: {one_line(exc)}")
                continue
            self.result["onnx_export"] = {"exporter": "dynamo" if dynamo else "legacy (TorchScript)",
                                          "seconds": time.perf_counter() - start, "errors": errors}
            self.onnx_path = str(path)
            return self.onnx_path
        self.export_error = "torch.onnx.export failed: " + " | ".join(errors)
        self.result["onnx_export"] = {"exporter": None, "errors": errors}
        raise Unavailable(self.export_error)

    # ---- inference peers -------------------------------------------------------------------------------------------

    def _first_call(self, entry: dict[str, Any], fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        out = fn()
        entry["first_call_ms"] = (time.perf_counter() - start) * 1e3
        return out

    def _check(self, entry: dict[str, Any], out: Any) -> None:
        entry.update(compare(_flatten_outputs(out), self.ref))

    def _setup_eager_inference(self, entry: dict[str, Any]) -> None:
        torch, model, x = self.torch, self.model, self.x

        def fn() -> Any:
            with torch.no_grad():
                return model(x)

        self._check(entry, self._first_call(entry, fn))
        self.fns["eager"] = fn

    def _setup_compile_inference(self, entry: dict[str, Any]) -> None:
        torch, x = self.torch, self.x
        compiled = torch.compile(self.model, backend="inductor")

        def fn() -> Any:
            with torch.no_grad():
                return compiled(x)

        out = self._first_call(entry, fn)  # the first call compiles
        entry["compile_s"] = entry["first_call_ms"] / 1e3
        self._check(entry, out)
        self.fns["compile"] = fn

    def _ort_options(self) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.spec["threads"]
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.set_denormal_as_zero", "1")
        return options

    def _setup_ort_inference(self, entry: dict[str, Any]) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise Unavailable(f"onnxruntime is not installed ({exc}); pip install onnxruntime") from exc
        path = self._export_onnx()
        start = time.perf_counter()
        session = ort.InferenceSession(path, self._ort_options(), providers=["CPUExecutionProvider"])
        entry["compile_s"] = time.perf_counter() - start
        entry["source"] = path
        feeds = self.inputs if self.spec.get("onnx") else {session.get_inputs()[0].name: self.x.numpy()}

        def fn() -> Any:
            return session.run(None, feeds)

        self._check(entry, self._first_call(entry, fn))
        self.fns["ort"] = fn

    def _setup_openvino_inference(self, entry: dict[str, Any]) -> None:
        try:
            import openvino as ov
        except ImportError as exc:
            raise Unavailable(f"openvino is not installed ({exc}); pip install openvino") from exc
        core = ov.Core()
        config = {
            "INFERENCE_NUM_THREADS": self.spec["threads"],
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32",  # never bf16/f16 behind our back: every peer computes in fp32
            "CPU_DENORMALS_OPTIMIZATION": "YES",
        }
        if self.spec.get("precision", "fp32") != "fp32":
            del config["INFERENCE_PRECISION_HINT"]  # OpenVINO's default: bf16 where the CPU has it natively
        start = time.perf_counter()
        try:
            source: Any = self._export_onnx()
            entry["source"] = source
        except Unavailable as exc:  # no ONNX file: OpenVINO converts the torch model itself
            source = ov.convert_model(self.model, example_input=self.x)
            entry["source"] = f"ov.convert_model(torch model) [{exc}]"
        compiled = core.compile_model(source, "CPU", config)
        entry["compile_s"] = time.perf_counter() - start
        entry["device_name"] = core.get_property("CPU", "FULL_DEVICE_NAME")
        entry["precision"] = str(compiled.get_property("INFERENCE_PRECISION_HINT"))  # what it computes in
        request = compiled.create_infer_request()
        feeds = self.inputs if self.spec.get("onnx") else {0: self.x.numpy()}

        def fn() -> Any:
            return request.infer(feeds, share_inputs=True)

        self._check(entry, self._first_call(entry, fn))
        self.fns["openvino"] = fn

    def _setup_sol_inference(self, entry: dict[str, Any]) -> None:
        torch, x = self.torch, self.x
        import sol

        _build_sol_reader()
        start = time.perf_counter()
        sol_model = sol.optimize(self.model, x, precision=self.spec.get("precision", "fp32"))
        entry["compile_cold_s"] = time.perf_counter() - start
        entry["precision"] = getattr(sol_model.compiled, "precision", "fp32")

        def fn() -> Any:
            with torch.no_grad():
                return sol_model(x)

        self._check(entry, self._first_call(entry, fn))
        self.fns["sol"] = fn

    # ---- peers on an .onnx file ------------------------------------------------------------------------------------

    def _setup_eager_onnx(self, entry: dict[str, Any]) -> None:
        raise Unavailable("an .onnx file is not a PyTorch model")

    _setup_compile_onnx = _setup_eager_onnx
    _setup_ort_onnx = _setup_ort_inference
    _setup_openvino_onnx = _setup_openvino_inference

    def _setup_sol_onnx(self, entry: dict[str, Any]) -> None:
        import sol

        inputs = list(self.inputs.values())
        start = time.perf_counter()
        try:
            sol_model = sol.optimize(self.onnx_path, *inputs)
        except Exception as exc:
            raise Unavailable(f"sol.optimize on the .onnx file: {one_line(exc)}") from exc
        entry["compile_cold_s"] = time.perf_counter() - start

        def fn() -> Any:
            return sol_model(*inputs)

        self._check(entry, self._first_call(entry, fn))
        self.fns["sol"] = fn

    # ---- training peers --------------------------------------------------------------------------------------------

    def _train_step_fn(self, model: Any, forward: Callable[[Any], Any]) -> Callable[[], Any]:
        torch, x, target = self.torch, self.x, self.target
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(forward(x), target)
            loss.backward()
            optimizer.step()
            return loss.detach()

        return step

    def _train_snapshot(self, model: Any, loss: Any) -> list[Any]:
        return [loss.numpy().reshape(1)] + [p.detach().numpy().copy() for p in model.parameters()]

    def _train_reference(self) -> list[Any]:
        """Loss of one eager training step and every parameter after it: what each peer's first step must match."""
        model = copy.deepcopy(self.model).train()
        self.torch.manual_seed(2)
        loss = self._train_step_fn(model, model)()
        return self._train_snapshot(model, loss)

    def _setup_training(self, entry: dict[str, Any], name: str, wrap: Callable[[Any], Any]) -> None:
        model = copy.deepcopy(self.model).train()
        forward = wrap(model)
        step = self._train_step_fn(model, forward)
        self.torch.manual_seed(2)
        loss = self._first_call(entry, step)  # the first step compiles where a peer compiles
        entry.update(compare(self._train_snapshot(model, loss), self.ref))
        entry["check"] = "loss of the first step and every parameter after it, vs eager"
        self.fns[name] = step

    def _setup_eager_training(self, entry: dict[str, Any]) -> None:
        self._setup_training(entry, "eager", lambda m: m)

    def _setup_compile_training(self, entry: dict[str, Any]) -> None:
        self._setup_training(entry, "compile", lambda m: self.torch.compile(m, backend="inductor"))
        entry["compile_s"] = entry["first_call_ms"] / 1e3

    def _setup_ort_training(self, entry: dict[str, Any]) -> None:
        raise Unavailable("ONNX Runtime is benchmarked for inference only")

    _setup_openvino_training = _setup_ort_training

    def _setup_sol_training(self, entry: dict[str, Any]) -> None:
        import sol

        times: dict[str, float] = {}

        def wrap(model: Any) -> Any:
            start = time.perf_counter()
            optimized = sol.optimize(model, self.x)
            times["compile"] = time.perf_counter() - start
            return optimized

        _build_sol_reader()
        self._setup_training(entry, "sol", wrap)
        entry["compile_cold_s"] = times["compile"]

    # ---- measurement -----------------------------------------------------------------------------------------------

    def _measure(self) -> None:
        """Warm-up, then interleaved rounds: each round runs a block of every peer in rotated order."""
        runs, rounds, warmup = self.spec["runs"], self.spec["rounds"], self.spec["warmup"]
        budget, settle = self.spec["max_seconds"], self.spec.get("settle_ms", SETTLE_MS) / 1e3
        ramp = self.spec.get("ramp_ms", RAMP_MS) / 1e3
        names = [n for n in self.spec["peers"] if n in self.fns]
        planned: dict[str, int] = {}
        for name in names:
            start = time.perf_counter()
            for _ in range(warmup):
                self.fns[name]()
            per_run = (time.perf_counter() - start) / max(warmup, 1)
            # A time budget per peer keeps very slow peers bounded; the run count is reported.
            planned[name] = max(min(runs, 3), min(runs, int(budget / max(per_run, 1e-9))))
            self.peer(name)["warmup_runs"] = warmup
        times: dict[str, list[float]] = {n: [] for n in names}
        round_medians: dict[str, list[float]] = {n: [] for n in names}  # per round: the median of its block
        rounds = max(1, min(rounds, min(planned.values(), default=1)))
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)] if names else []
            for name in order:
                fn = self.fns[name]
                block = planned[name] // rounds + (1 if r < planned[name] % rounds else 0)
                # Each peer's thread pool spins for a while after its calls return (ONNX Runtime's for tens of ms,
                # libgomp's, TBB's). On a machine with as many cores as threads, a block started right after
                # another peer's was measured against those spinning threads: SOL's efficientnet_b0 ran 7.9 ms in
                # blocks right after ONNX Runtime's against 3.7 ms alone. So the other pools settle first, and one
                # untimed call wakes this peer's own threads and caches: each peer is timed in its steady state.
                # Untimed calls go on for RAMP_MS, while the cores speed up again after the pause.
                time.sleep(settle)
                ramp_end = time.perf_counter() + ramp
                fn()
                while time.perf_counter() < ramp_end:
                    fn()
                block_ms = []
                for _ in range(block):
                    start = time.perf_counter_ns()
                    fn()
                    block_ms.append((time.perf_counter_ns() - start) / 1e6)
                times[name] += block_ms
                if block_ms:
                    round_medians[name].append(statistics.median(block_ms))
            self.save()
        for name in names:
            entry = self.peer(name)
            entry.update(summarize(times[name]))
            entry["runs_planned"] = runs
            entry["round_medians_ms"] = round_medians[name]
        self.result["rounds"] = rounds

    def _sol_cached(self, entry: dict[str, Any]) -> None:
        """sol.optimize again in a fresh process on the now-filled cache: what a user's second run pays."""
        spec = dict(self.spec)
        spec_path = Path(self.spec["scratch"]) / "sol_cached.json"
        write_json(spec_path, spec)
        command = [sys.executable, str(Path(__file__).resolve()), "--_sol_cached", str(spec_path)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=self.spec["timeout"])
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                entry["compile_cached_error"] = f"rc {proc.returncode}: {proc.stderr.strip()[-500:]}"
                return
            entry.update(json.loads(lines[-1]))
        except subprocess.TimeoutExpired:
            entry["compile_cached_error"] = "timed out"


def sol_cached_main(spec_path: str) -> None:
    """Child of a worker: time sol.optimize alone (model building and imports are not timed)."""
    spec = json.loads(Path(spec_path).read_text())
    import torch

    torch.set_flush_denormal(True)
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    import sol

    import_s = time.perf_counter() - start
    if spec.get("onnx"):
        # the same inputs as the worker (shapes only matter for compilation)
        worker = Worker(spec, Path(spec["scratch"]) / "unused.json")
        worker.np, worker.torch = __import__("numpy"), torch
        worker._build_onnx()
        model, inputs = spec["onnx"], list(worker.inputs.values())
    else:
        model, x = build_model(spec["model"], spec["batch"])
        if spec["mode"] == "training":
            model.train()
        inputs = [x]
    before = _cache_entries()
    start = time.perf_counter()
    sol.optimize(model, *inputs, precision=spec.get("precision", "fp32"))
    elapsed = time.perf_counter() - start
    built = sorted(_cache_entries() - before)
    report: dict[str, Any] = {"compile_cached_s": elapsed, "import_sol_s": import_s, "cache_hit": not built}
    if built:  # the key differed from the cold compile's (e.g. SOL's code changed in between): not a cached load
        report["compile_cached_error"] = f"cache miss: sol.optimize built {len(built)} new entr(y/ies) instead of loading"
    print(json.dumps(report))


def build_model(name: str, batch: int) -> tuple[Any, Any]:
    """A zoo model with a random input of ``batch`` (seeded), or a language model of zoo.TEXT_MODELS with random
    token ids."""
    import torch
    from sol_frontend_torch.zoo import TEXT_MODELS, build, build_text

    if name in TEXT_MODELS:
        torch.manual_seed(1)
        return build_text(name, batch)
    model, example = build(name)
    torch.manual_seed(1)
    return model, torch.randn((batch, *example.shape[1:]))


def _build_sol_reader() -> None:
    """The first sol.optimize of a PyTorch model builds SOL's parameter reader when the cache lacks it (once per
    torch version and cache directory, 7 s): built before the first timed compile, so that no model's cold
    compile time includes it."""
    from sol_frontend_torch import native_reader

    native_reader.ensure()


def _cache_entries() -> set[str]:
    """The published entries of the private SOL cache (index.json per entry)."""
    root = Path(os.environ.get("SOL_CACHE_DIR", ""))
    return {str(p.parent) for p in root.glob("*/*/*/index.json")} if root.parts else set()


def worker_main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    worker = Worker(spec, Path(out_path))
    try:
        worker.run()
    except Exception as exc:  # setup of the model itself failed: report it as the row's error
        worker.result["error"] = one_line(exc)
        worker.result["traceback"] = traceback.format_exc(limit=8)
        worker.save()
        raise


# --------------------------------------------------------------------------------------------------------------------
# the parent: one child per configuration, the table, the JSON


def run_config(spec: dict[str, Any], log_dir: Path) -> dict[str, Any]:
    """Run one configuration in a child process; a peer that crashes the child is dropped and the rest re-run."""
    peers = list(spec["peers"])
    crashed: dict[str, str] = {}
    tag = f"{spec['model']}_b{spec['batch']}_t{spec['threads']}_{spec['mode']}"
    for attempt in range(len(PEERS)):
        scratch = Path(tempfile.mkdtemp(prefix=f"solbench_{tag}_"))
        spec = dict(spec, peers=peers, scratch=str(scratch))
        spec_path, out_path = scratch / "spec.json", scratch / "result.json"
        write_json(spec_path, spec)
        env = dict(os.environ)
        # Private, empty caches: SOL's compile and torch.compile's compile are both measured cold (unless
        # --sol-cache names a cache to share, whose entries make SOL's "cold" compile partly a load).
        env["SOL_CACHE_DIR"] = spec.get("sol_cache") or str(scratch / "sol_cache")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "inductor_cache")
        env["OMP_NUM_THREADS"] = str(spec["threads"])  # SOL's generated OpenMP code and torch's pool alike
        env.setdefault("PYTHONWARNINGS", "ignore")
        log_path = log_dir / f"{tag}.attempt{attempt}.log"
        command = [sys.executable, str(Path(__file__).resolve()), "--_worker", str(spec_path), str(out_path)]
        start = time.perf_counter()
        with open(log_path, "w") as log:
            try:
                proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=spec["timeout"])
                rc: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                rc = f"timeout after {spec['timeout']} s"
        result = json.loads(out_path.read_text()) if out_path.exists() else {
            "model": spec["model"], "batch": spec["batch"], "threads": spec["threads"], "mode": spec["mode"],
            "phase": "start", "peers": {}, "notes": []}
        result["wall_s"] = time.perf_counter() - start
        result["log"] = str(log_path)
        if not spec.get("keep"):  # exported ONNX files and private caches can be large; the log stays
            shutil.rmtree(scratch, ignore_errors=True)
        if rc == 0:
            break
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        phase = result.get("phase", "")
        culprit = phase.removeprefix("set up ") if phase.startswith("set up ") else None
        if culprit in peers and not spec.get("no_retry"):
            crashed[culprit] = f"crashed the worker (rc {rc}) while setting up: " + " | ".join(tail[-3:])
            peers = [p for p in peers if p != culprit]
            print(f"  {culprit} crashed the worker (rc {rc}); re-running the other peers without it", flush=True)
            if peers:
                continue
        result["error"] = result.get("error") or f"worker exited with rc {rc} during '{phase}': " + " | ".join(tail[-5:])
        break
    for name, why in crashed.items():
        result["peers"][name] = {"status": "error", "error": why}
    result["peers"] = {p: result["peers"].get(p, {"status": "error", "error": result.get("error", "not run")})
                       for p in spec["requested_peers"]}
    for entry in result["peers"].values():
        if entry.get("status") == "pending":
            entry.update(status="error", error=result.get("error", "not finished"))
    derive(result)
    return result


def derive(result: dict[str, Any]) -> None:
    """The ratios: SOL vs eager, SOL vs the fastest other peer (> 1: SOL is faster)."""
    peers = result["peers"]
    timed = {n: e["median_ms"] for n, e in peers.items() if e.get("status") == "ok" and e.get("median_ms")}
    sol_ms = timed.get("sol")
    others = {n: ms for n, ms in timed.items() if n != "sol"}
    fastest = min(others, key=others.get) if others else None
    result["fastest_peer"] = fastest
    result["sol_speedup_vs_eager"] = timed["eager"] / sol_ms if sol_ms and "eager" in timed else None
    result["sol_vs_fastest_peer"] = others[fastest] / sol_ms if sol_ms and fastest else None
    # The same ratio round by round (the two blocks of a round ran within a second of each other, so a slow phase
    # of a shared machine that spans a round hits both): its median and interquartile range.
    result["sol_vs_openvino"] = timed["openvino"] / sol_ms if sol_ms and "openvino" in timed else None
    sol_err = peers.get("sol", {}).get("max_rel_err") if sol_ms else None
    ov_err = peers.get("openvino", {}).get("max_rel_err") if "openvino" in timed else None
    result["sol_error_bound"] = max(ERROR_FACTOR * ov_err, ERROR_FLOOR) if ov_err is not None else None
    result["sol_error_ok"] = (sol_err <= result["sol_error_bound"]
                              if sol_err is not None and result["sol_error_bound"] is not None else None)
    sol_rounds = peers.get("sol", {}).get("round_medians_ms") if sol_ms else None
    fastest_rounds = peers[fastest].get("round_medians_ms") if fastest else None
    result["sol_vs_fastest_per_round"] = result["sol_vs_fastest_per_round_iqr"] = None
    if sol_rounds and fastest_rounds and len(sol_rounds) == len(fastest_rounds):
        result["sol_vs_fastest_per_round"], result["sol_vs_fastest_per_round_iqr"] = median_iqr(
            [f / s for f, s in zip(fastest_rounds, sol_rounds, strict=True)])


def fmt_ms(entry: dict[str, Any]) -> str:
    status = entry.get("status")
    if status != "ok":
        return "n/a" if status == "n/a" else "ERR"
    if "median_ms" not in entry:
        return "-"
    flag = "" if entry.get("match", True) else "!"
    return f"{entry['median_ms']:.2f}{flag}"


def fmt_ratio(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def fmt_per_round(result: dict[str, Any]) -> str:
    """SOL vs the fastest peer, the median of the per-round ratios with their interquartile range."""
    ratio, iqr = result.get("sol_vs_fastest_per_round"), result.get("sol_vs_fastest_per_round_iqr")
    if not ratio or not iqr:
        return "-"
    return f"{ratio:.2f} [{iqr[0]:.2f}..{iqr[1]:.2f}]"


def print_table(results: list[dict[str, Any]], peers: list[str]) -> float | None:
    shown = [p for p in PEERS if p in peers]
    with_eager = "eager" in shown and "sol" in shown
    header = ["model", *[f"{LABELS[p]} ms" for p in shown], *(["SOL vs eager"] if with_eager else []),
              "SOL vs fastest", "per round [IQR]", "SOL compile cold/cached s"]
    rows = []
    for r in results:
        sol = r["peers"].get("sol", {})
        cold, cached = sol.get("compile_cold_s"), sol.get("compile_cached_s")
        if sol.get("cache_hit") is False:
            cached_cell = "miss"  # the second sol.optimize rebuilt: no cached-load time to show
        else:
            cached_cell = f"{cached:.2f}" if cached is not None else "-"
        compile_cell = f"{cold:.1f} / {cached_cell}" if cold is not None else "-"
        fastest = r.get("fastest_peer")
        rows.append([f"{r['model']} b{r['batch']} t{r['threads']}",
                     *[fmt_ms(r["peers"].get(p, {})) for p in shown],
                     *([fmt_ratio(r.get("sol_speedup_vs_eager"))] if with_eager else []),
                     fmt_ratio(r.get("sol_vs_fastest_peer")) + (f" ({LABELS[fastest]})" if fastest and r.get("sol_vs_fastest_peer") else ""),
                     fmt_per_round(r), compile_cell])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    gm = geomean([r["sol_vs_fastest_peer"] for r in results if r.get("sol_vs_fastest_peer")])
    counted = sum(1 for r in results if r.get("sol_vs_fastest_peer"))
    print(f"\ngeometric mean of SOL vs fastest peer over {counted} row(s): {fmt_ratio(gm)} (> 1: SOL is faster)")
    per_round = [r["sol_vs_fastest_per_round"] for r in results if r.get("sol_vs_fastest_per_round")]
    if per_round:
        print(f"geometric mean of the per-round ratios over {len(per_round)} row(s): {fmt_ratio(geomean(per_round))}")
    return gm


def fmt_err(entry: dict[str, Any]) -> str:
    err = entry.get("max_rel_err")
    return f"{err:.1e}" if entry.get("status") == "ok" and err is not None else "-"


def print_precision_table(results: list[dict[str, Any]], peers: list[str], precision: str) -> float | None:
    """--precision: each peer's time with its error against fp32 eager (max |out - eager| / max |eager|), SOL against
    OpenVINO (its default precision) in time and error, and the accuracy criterion per model."""
    shown = [p for p in PEERS if p in peers]
    header = ["model"]
    for p in shown:
        header += [f"{LABELS[p]} ms", f"{LABELS[p]} err"]
    header += ["SOL vs OpenVINO", "SOL vs fastest", "err bound", "accuracy"]
    rows = []
    for r in results:
        row = [f"{r['model']} b{r['batch']} t{r['threads']}"]
        for p in shown:
            e = r["peers"].get(p, {})
            row += [fmt_ms(e).rstrip("!"), fmt_err(e)]
        fastest = r.get("fastest_peer")
        bound, ok = r.get("sol_error_bound"), r.get("sol_error_ok")
        row += [fmt_ratio(r.get("sol_vs_openvino")),
                fmt_ratio(r.get("sol_vs_fastest_peer")) + (f" ({LABELS[fastest]})" if fastest and r.get("sol_vs_fastest_peer") else ""),
                f"{bound:.1e}" if bound is not None else "-", "-" if ok is None else ("ok" if ok else "FAIL")]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    precisions = sorted({f"{LABELS[n]} {e['precision']}" for r in results for n, e in r["peers"].items() if e.get("precision")})
    print(f"\ncomputing in: {', '.join(precisions) or '-'} (SOL asked for {precision}; ORT, eager, torch.compile: fp32)")
    gm = geomean([r["sol_vs_openvino"] for r in results if r.get("sol_vs_openvino")])
    counted = sum(1 for r in results if r.get("sol_vs_openvino"))
    print(f"geometric mean of SOL vs OpenVINO over {counted} row(s): {fmt_ratio(gm)} (> 1: SOL is faster)")
    gm_fastest = geomean([r["sol_vs_fastest_peer"] for r in results if r.get("sol_vs_fastest_peer")])
    print(f"geometric mean of SOL vs the fastest peer: {fmt_ratio(gm_fastest)}")
    failed = [r["model"] for r in results if r.get("sol_error_ok") is False]
    checked = sum(1 for r in results if r.get("sol_error_ok") is not None)
    print(f"accuracy: SOL's error <= max({ERROR_FACTOR:g} x OpenVINO's, {ERROR_FLOOR:g}) on "
          f"{checked - len(failed)} of {checked} model(s)" + (f"; not on {', '.join(failed)}" if failed else ""))
    return gm


def print_details(results: list[dict[str, Any]]) -> None:
    """Spread, compile times, output errors and every n/a or error with its reason."""
    print("\ndetails (median [p10..p90] ms, runs; compile/first call; max abs error vs reference):")
    for r in results:
        print(f"  {r['model']} b{r['batch']} t{r['threads']} {r['mode']}"
              + (f"  [onnx export: {r['onnx_export'].get('exporter')}]" if r.get("onnx_export") else ""))
        if r.get("error"):
            print(f"    ERROR: {r['error']}  (log: {r.get('log')})")
        for name, e in r["peers"].items():
            label = LABELS.get(name, name)
            if e.get("status") != "ok":
                print(f"    {label:9s} {e.get('status')}: {e.get('error', '')}")
                continue
            parts = []
            if "median_ms" in e:
                parts.append(f"{e['median_ms']:.2f} [{e['p10_ms']:.2f}..{e['p90_ms']:.2f}] ms, {e['runs']} runs")
            for key, text in (("compile_s", "compile {:.1f} s"), ("compile_cold_s", "compile cold {:.1f} s"),
                              ("compile_cached_s", "cached {:.2f} s"), ("first_call_ms", "first call {:.0f} ms")):
                if e.get(key) is not None:
                    parts.append(text.format(e[key]))
            if e.get("compile_cached_error"):
                parts.append(f"cached load failed: {e['compile_cached_error']}")
            if e.get("max_abs_err") is not None:
                parts.append(f"err {e['max_abs_err']:.1e} (rel {e['max_rel_err']:.1e})"
                             + ("" if e.get("match") else " MISMATCH"))
            if e.get("note"):
                parts.append(e["note"])
            print(f"    {label:9s} " + ", ".join(parts))
        for note in r.get("notes", []):
            print(f"    note: {note}")


def parse_list(text: str, kind: type = str) -> list[Any]:
    return [kind(t.strip()) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_worker"]:
        worker_main(argv[1], argv[2])
        return 0
    if argv[:1] == ["--_sol_cached"]:
        sol_cached_main(argv[1])
        return 0

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma-separated zoo models, 'all', or 'fast' (all but the slow set), and language models "
                             f"(bert_base, gpt2_small: token ids of 128); default {DEFAULT_MODELS}")
    parser.add_argument("--onnx", action="append", default=[], metavar="PATH",
                        help="benchmark an .onnx file instead (SOL, ONNX Runtime, OpenVINO); repeatable")
    parser.add_argument("--batch", default=None,
                        help="comma-separated batch sizes; default 1 (inference), 16 / 64 for the MLP (training)")
    parser.add_argument("--threads", default=str(len(os.sched_getaffinity(0))),
                        help="comma-separated thread counts; default: the CPUs this process may use")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per peer (median, p10, p90 reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per peer after the first call")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds the timed runs are split into")
    parser.add_argument("--settle-ms", type=float, default=SETTLE_MS,
                        help=f"pause before each peer's block of timed runs, for the other peers' thread pools to "
                             f"stop spinning (followed by --ramp-ms of untimed calls); default {SETTLE_MS:g}")
    parser.add_argument("--ramp-ms", type=float, default=RAMP_MS,
                        help=f"untimed calls for this long after the settle pause, while the cores speed up again "
                             f"({RAMP_MS:g})")
    parser.add_argument("--max-seconds", type=float, default=60.0,
                        help="time budget per peer for the timed runs (at least 3 runs); default 60")
    parser.add_argument("--peers", default=None, help=f"comma-separated subset of {','.join(PEERS)} (default: all)")
    parser.add_argument("--mode", choices=("inference", "training"), default="inference")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="fp32 (default): every peer forced to fp32. bf16: SOL in bf16 against OpenVINO's default "
                             "precision (bf16 on CPUs with native bf16) and the fp32 peers, errors against fp32 eager "
                             f"beside the times (peers default to {','.join(BF16_PEERS)})")
    parser.add_argument("--json", default=None, help="write every measurement, version and setting to this file")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per configuration's worker process")
    parser.add_argument("--keep", action="store_true",
                        help="keep each configuration's scratch directory (exported ONNX file, private caches)")
    parser.add_argument("--no-sol-cached", action="store_true", help="skip the fresh-process cached-load measurement")
    parser.add_argument("--sol-cache", default=None, metavar="DIR",
                        help="compile into this SOL cache instead of a private, empty one per configuration (what it "
                             "already holds is loaded, not compiled: SOL's compile time is then not cold; for tests)")
    args = parser.parse_args(argv)

    if args.precision != "fp32" and args.mode != "inference":
        parser.error("--precision bf16 measures inference (SOL does not train in bf16)")
    peers = parse_list(args.peers or ",".join(BF16_PEERS if args.precision != "fp32" else PEERS))
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    threads = parse_list(args.threads, int)
    targets: list[tuple[str, str | None]]
    if args.onnx:
        for path in args.onnx:
            if not Path(path).is_file():
                parser.error(f"--onnx {path}: no such file")
        targets = [(Path(p).stem, str(Path(p).resolve())) for p in args.onnx]
        peers = [p for p in peers if p not in TORCH_ONLY]
    else:
        from sol_frontend_torch.zoo import MODELS, SLOW

        if args.models == "all":
            names = list(MODELS)
        elif args.models == "fast":
            names = [m for m in MODELS if m not in SLOW]
        else:
            names = parse_list(args.models)
            from sol_frontend_torch.zoo import TEXT_MODELS

            unknown = [m for m in names if m not in MODELS and m not in TEXT_MODELS]
            if unknown:
                parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(MODELS)}")
        targets = [(name, None) for name in names]

    import sol

    log_dir = Path(tempfile.mkdtemp(prefix="solbench_logs_"))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": argv, "cpu": cpu_name(), "cpus_usable": len(os.sched_getaffinity(0)), "cpus_total": os.cpu_count(),
        "threads": threads, "mode": args.mode, "precision": args.precision, "peers": peers, "runs": args.runs, "warmup": args.warmup,
        "rounds": args.rounds, "settle_ms": args.settle_ms, "ramp_ms": args.ramp_ms,
        "max_seconds_per_peer": args.max_seconds,
        "rtol": RTOL, "atol": ATOL,
        "denormals": FLUSH_NOTE, "versions": dist_versions(), "sol_versions": sol.versions(), "logs": str(log_dir),
    }
    print(f"SOL benchmark: {meta['cpu']}, threads {threads}, mode {args.mode}, precision {args.precision}, "
          f"peers {', '.join(peers)}")
    print(FLUSH_NOTE)
    versions = meta["versions"]
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    results = []
    for name, onnx_path in targets:
        if args.batch:
            batches = parse_list(args.batch, int)
        else:
            batches = [TRAIN_BATCH.get(name, TRAIN_BATCH_DEFAULT) if args.mode == "training" else 1]
        for batch in batches:
            for t in threads:
                print(f"{name} batch {batch}, {t} thread(s) ...", flush=True)
                spec = {"model": name, "onnx": onnx_path, "batch": batch, "threads": t, "mode": args.mode,
                        "peers": peers, "requested_peers": peers, "runs": args.runs, "warmup": args.warmup,
                        "rounds": args.rounds, "settle_ms": args.settle_ms, "ramp_ms": args.ramp_ms,
                        "max_seconds": args.max_seconds,
                        "timeout": args.timeout, "precision": args.precision,
                        "sol_cached": not args.no_sol_cached, "keep": args.keep, "sol_cache": args.sol_cache}
                result = run_config(spec, log_dir)
                print(f"  done in {result['wall_s']:.0f} s", flush=True)
                results.append(result)
    print()
    if args.precision != "fp32":
        gm = print_precision_table(results, peers, args.precision)
        print("ms: median; err: max |output - fp32 eager| / max |fp32 eager| on the same input; "
              "n/a: the peer does not apply (reason below); ERR: it failed")
    else:
        gm = print_table(results, peers)
        print("ms: median; '!': output differs from the reference beyond rtol 1e-4 / atol 1e-5 (see details); "
              "n/a: the peer does not apply (reason below); ERR: it failed")
    print_details(results)
    if args.json:
        for r in results:
            for e in r["peers"].values():
                e.pop("traceback", None) if e.get("status") == "ok" else None
        write_json(Path(args.json), {"meta": meta, "results": results, "geomean_sol_vs_fastest_peer": gm})
        print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
