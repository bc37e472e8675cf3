"""Run CUDA artifacts built without a GPU against eager PyTorch on a GPU (a manual check, not a pytest module).

    python sol-backend-cuda/tests/gpu_run_artifacts.py DIR

DIR holds ``<model>.so`` (built by the CUDA flavour) and ``meta.json`` (per model: the exported prefix and the
parameter names in the order of the params table). Needs only torch and torchvision: the zoo's models are
rebuilt from sol_frontend_torch/zoo.py (loaded by path, without SOL), so the weights are the device's own.
Calls ``<prefix>_init / _prepare / _forward`` through ctypes on CUDA tensors and PyTorch's current stream.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

#: the math word passed to every call: TF32 off, as run() sets eager's
STRICT = 0
ZOO = Path(__file__).resolve().parents[2] / "sol-frontend-torch" / "src" / "sol_frontend_torch" / "zoo.py"


def _zoo():
    spec = importlib.util.spec_from_file_location("zoo", ZOO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _table(tensors):
    return (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])


def _check(zoo, directory: Path, name: str, info: dict) -> bool:
    model, x = zoo.build(name)
    model = model.cuda()
    x = x.cuda()
    with torch.no_grad():
        expected = model(x)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    params = [state[p].detach().contiguous() for p in info["params"]]
    lib = ctypes.CDLL(str(directory / f"{name}.so"))
    prefix = info["prefix"]
    fn = {f: getattr(lib, f"{prefix}_{f}") for f in ("init", "prepare", "forward", "workspace_size",
                                                    "derived_size", "status")}
    fn["workspace_size"].restype = ctypes.c_int64
    fn["derived_size"].restype = ctypes.c_int64
    fn["workspace_size"].argtypes = [ctypes.c_int64]
    # the last argument: the math word (sol.precision.Fp32Math.word), 0: no TF32, like eager with it off (run())
    fn["prepare"].argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    fn["forward"].argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    fn["status"].argtypes = [ctypes.c_void_p]
    batch = x.shape[0]
    assert fn["init"](0) == 0
    derived = torch.empty(max(fn["derived_size"](), 1), dtype=torch.uint8, device="cuda")
    workspace = torch.empty(max(fn["workspace_size"](batch), 1), dtype=torch.uint8, device="cuda")
    outputs = [torch.empty(tuple(s), device="cuda") for s in info["outputs"]]
    stream = torch.cuda.current_stream().cuda_stream
    ptable, itable, otable = _table(params), _table([x.contiguous()]), _table(outputs)
    rc = fn["prepare"](derived.data_ptr(), ptable, batch, stream, STRICT)
    rc |= fn["forward"](derived.data_ptr(), itable, ptable, otable, workspace.data_ptr(), batch, stream, STRICT)
    torch.cuda.synchronize()
    status = fn["status"](stream)
    got = outputs[0].reshape(expected.shape)
    err = (got - expected).abs().max().item()
    scale = expected.abs().max().item()
    ok = rc == 0 and status == 0 and err <= 1e-3 * max(scale, 1.0)
    # speed: SOL's kernels and eager, same stream, after a warm-up
    def timed(call, repeat=20):
        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / repeat * 1e3

    sol_ms = timed(lambda: fn["forward"](derived.data_ptr(), itable, ptable, otable, workspace.data_ptr(), batch,
                                         stream, STRICT))
    with torch.no_grad():
        eager_ms = timed(lambda: model(x))
    print(f"{name:22s} rc={rc} status={status} max|err|={err:.3g} (max|y|={scale:.3g}) "
          f"{'OK' if ok else 'MISMATCH'}  sol {sol_ms:.3f} ms  eager {eager_ms:.3f} ms", flush=True)
    return ok


def run(directory: Path) -> int:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    zoo = _zoo()
    meta = json.loads((directory / "meta.json").read_text())
    failures = 0
    for name, info in meta.items():
        failures += not _check(zoo, directory, name, info)
    return failures


if __name__ == "__main__":
    sys.exit(1 if run(Path(sys.argv[1])) else 0)
