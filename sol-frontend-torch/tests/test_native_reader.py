"""The background build of the native parameter reader must never hold up or break the end of a process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sol_frontend_torch import native_reader


def run_child(code: str, cache_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache_dir is not None:
        env["SOL_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_a_process_ending_during_the_build_cancels_it(tmp_path: Path) -> None:
    # the compile takes seconds: the process ends long before it, and must neither wait for it nor publish a
    # half-built entry or leave its files behind
    child = run_child("""
        import time
        from sol_frontend_torch import native_reader
        native_reader.start()
        time.sleep(0.5)
    """, cache_dir=tmp_path)
    assert child.returncode == 0, child.stderr
    assert not list(tmp_path.glob("*/*/*/index.json")), "a cancelled build was published"
    assert not list(tmp_path.glob("*/tmp/*")), "a cancelled build left its files"
    assert "WARNING" not in child.stderr


def test_processes_ending_while_the_reader_loads_exit_cleanly() -> None:
    # Python stops daemon threads at exit wherever they are; one stopped inside torch's C++ code (the reader's
    # verification) aborted the process with "terminate called without an active exception" in ~1 of 10 runs
    assert native_reader.wait(timeout=300) is not None  # in the cache the children share
    assert native_reader._thread is not None and not native_reader._thread.daemon
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
