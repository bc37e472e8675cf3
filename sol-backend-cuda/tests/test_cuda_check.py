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
