"""The native parameter reader: built inside the first sol.optimize (never while a model runs), reused from the
cache, and a failed build leaves the Python check working with one warning."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sol_frontend_torch import native_reader


def run_child(code: str, cache_dir: Path | None = None,
              extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **(extra_env or {}))
    if cache_dir is not None:
        env["SOL_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


SMALL_MODEL = """
    import torch, sol
    from sol_frontend_torch import native_reader
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(2, 8)
    sol_model = sol.optimize(model, x)
    print("loaded" if native_reader.loaded() is not None else "python")
    with torch.no_grad():
        torch.testing.assert_close(sol_model(x), model(x))
        model[0].weight.mul_(2)  # an in-place write the per-call check must see
        torch.testing.assert_close(sol_model(x), model(x))
"""


def test_the_reader_is_built_inside_the_first_optimize_and_then_reused(tmp_path: Path) -> None:
    # a fresh cache: the build is part of sol.optimize (its "reader" stage), so the helper is loaded when it
    # returns and nothing is left to compile while the model runs; the next process finds it in the cache
    first = run_child(SMALL_MODEL, cache_dir=tmp_path, extra_env={"SOL_LOG": "INFO"})
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.strip() == "loaded"
    assert ": reader" in first.stderr  # SOL's progress line names the stage
    second = run_child(SMALL_MODEL, cache_dir=tmp_path, extra_env={"SOL_LOG": "INFO"})
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip() == "loaded" and ": reader" not in second.stderr


def test_a_failed_build_keeps_python_checks_and_says_why_once(tmp_path: Path) -> None:
    code = SMALL_MODEL + """
    sol.optimize(torch.nn.Linear(4, 4), torch.randn(1, 4))  # a second model: no second build, no second warning
    """
    child = run_child(code, cache_dir=tmp_path, extra_env={"CXX": "/bin/false"})
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "python"
    warnings = [line for line in child.stderr.splitlines() if "parameter checks stay in Python" in line]
    assert len(warnings) == 1 and "compiling tensor_reader.cpp failed" in warnings[0], child.stderr[-2000:]


def test_processes_ending_right_after_optimize_exit_cleanly() -> None:
    # the reader's verification runs torch's C++ code; a process ending right after sol.optimize must not abort
    # ("terminate called without an active exception" came from a daemon thread stopped inside it)
    assert native_reader.ensure() is not None  # in the cache the children share
    for _ in range(3):
        child = run_child("""
            import torch, sol
            sol.optimize(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(2, 8))
        """)
        assert child.returncode == 0, child.stderr[-2000:]


def test_loading_the_plugin_does_not_import_torch() -> None:
    # the plugin loader reads the reader's setting in every process that calls sol.optimize, ONNX-only ones too:
    # importing torch there cost 1.3 s of an ONNX model's 1.9 s cached load
    child = run_child("""
        import sys
        import sol
        from sol.plugins import registry
        assert "pytorch" in registry().frontends
        assert "pytorch::native_reader" in sol.config
        print("torch" in sys.modules)
    """)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "False"
