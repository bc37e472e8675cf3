"""benchmarks/cuda_check.py --dry-run without a GPU: it builds what the GPU run would, into a store it packs.

CI runs one model through the whole machinery (build, store, pack, unpack); the slow set runs the full dry run
(every model and training step the GPU run may reach: 20-30 minutes on two cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sol_backend_cuda.toolkit import find_nvcc

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cuda_check.py"
pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout"),
    pytest.mark.skipif(find_nvcc("nvcc") is None, reason='nvcc is not installed: pip install "sol-backend-cuda[toolchain]"'),
]


def _dry_run(tmp_path: Path, *extra: str) -> tuple[dict, Path, Path]:
    pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    store, archive, out = tmp_path / "store", tmp_path / "carried.tar.xz", tmp_path / "dry.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--artifacts", str(store), "--pack", str(archive),
                           "--out", str(out), *extra], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # --jobs N: each process writes its own dry.dry<i>.json, the parent none
    return (json.loads(out.read_text()) if out.exists() else {}), store, archive


def test_dry_run_stores_and_packs_what_the_run_loads(tmp_path):
    report, store, archive = _dry_run(tmp_path, "--only", "inference:mlp")
    assert report["dry_run"] and [r["model"] for r in report["inference"]] == ["mlp"]
    assert not [r for r in report["inference"] if "error" in r]
    libraries = sorted(p.name for p in store.glob("*.so"))
    assert libraries and all((store / name.replace(".so", ".json")).exists() for name in libraries)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import cuda_check  # noqa: PLC0415
    finally:
        sys.path.remove(str(SCRIPT.parent))
    unpacked = cuda_check.unpack(archive)
    assert sorted(p.name for p in unpacked.glob("*.so")) == libraries
    assert all((unpacked / n).read_bytes() == (store / n).read_bytes() for n in libraries)


@pytest.mark.slow
def test_full_dry_run_builds_everything(tmp_path):
    _, store, archive = _dry_run(tmp_path, "--jobs", "2")
    dry = [json.loads(p.read_text()) for p in tmp_path.glob("dry.dry*.json")]
    assert len(dry) == 2 and archive.exists()
    errors = [r["what"] for d in dry for r in d["inference"] + d["training"] + d["speed"] if "error" in r]
    assert not errors and not [s for d in dry for s in d["skipped"]]
    assert len(list(store.glob("*.so"))) >= 20


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cuda_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gradients_pass_within_three_times_the_largest_eager_error():
    """The project's gradient rule (sol_frontend_torch.gradient_check): each run's worst parameter against float64,
    SOL within 3x the largest of the eager float32 runs (CPU in both layouts, GPU); the table prints them all."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    check = _script()

    def grads(weight_error: float, bias_error: float = 0.0) -> dict:
        return {"weight": torch.full((2, 3), 10.0 + weight_error, dtype=torch.float64),
                "bias": torch.full((2,), 1.0 + bias_error, dtype=torch.float64)}

    exact = grads(0.0)
    eagers = {"CPU": grads(0.1), "CPU channels-last": grads(0.0, 0.002), "GPU": grads(0.3)}  # worst: 1e-2, 2e-3, 3e-2
    out = want = want64 = torch.ones(2)
    passes = check._gradient_check(grads(0.0, 0.089), eagers, exact, out, want, want64)
    assert passes["ok"] and passes["gradients"] == 2
    assert passes["sol"]["parameter"] == "bias" and passes["sol"]["error"] == pytest.approx(0.089)
    assert passes["yardstick"] == pytest.approx(0.03)
    assert not check._gradient_check(grads(0.0, 0.091), eagers, exact, out, want, want64)["ok"]
    assert not check._gradient_check(grads(0.0, 0.089), {"CPU": eagers["CPU"]}, exact, out, want, want64)["ok"]
    assert not check._gradient_check({"weight": exact["weight"]}, eagers, exact, out, want, want64)["ok"]
    assert not check._gradient_check(grads(0.0), eagers, exact, out + 0.01, want, want64)["ok"]
    report = {"device": "stand-in", "torch": torch.__version__, "seconds": 0.0, "versions": {}, "inference": [],
              "speed": [], "skipped": [], "artifacts": {"carried": [], "built_here": []},
              "training": [{"model": "linear", "native": passes, "ok": True}]}
    line = next(x for x in check.table(report).splitlines() if x.startswith("linear"))
    assert line.endswith("SOL 8.9e-02 (bias); eager fp32 CPU 1.0e-02, CPU channels-last 2.0e-03, GPU 3.0e-02  OK"), line


def test_profile_specs():
    """--profile model[:training][@batch]: inference at any batch (its graph takes any), training only at the batch its
    graphs were captured and carried for."""
    check = _script()
    assert check.parse_profile("vit_b_16") == ("vit_b_16", "inference", 1)
    assert check.parse_profile(" resnet18@64") == ("resnet18", "inference", 64)
    assert check.parse_profile("resnet18:inference@8") == ("resnet18", "inference", 8)
    assert check.parse_profile("resnet18:training") == ("resnet18", "training", check.TRAIN_SPEED_BATCH)
    with pytest.raises(ValueError, match="batch 16 only"):
        check.parse_profile("resnet18:training@64")
    with pytest.raises(ValueError, match="'inference' or 'training'"):
        check.parse_profile("resnet18:backward")
