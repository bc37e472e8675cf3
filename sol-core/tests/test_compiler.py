"""The pipeline: cache keys and hits across processes, build failures, frontend selection."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.compiler import cache_key, compile_graph, flavour_for, optimize
from sol.errors import SolBuildError, SolError
from sol.ir import Dim, Graph, Purpose

BUILD_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import sol.compiler
    from sol.ir import Dim, Graph, Purpose

    if sys.argv[1] == "forbid-build":
        def no_build(*args, **kwargs):
            raise AssertionError("built again although the cache holds the artifact")
        sol.compiler.build = no_build
    g = Graph("cached")
    x = g.add_input("x", [Dim(4, Purpose.N), Dim(8)])
    (y,) = g.add_layer("tanh", [x], name="act")
    g.outputs = [y]
    model = sol.compiler.compile_graph(g, passes=False)
    out = model.run_numpy([np.ones((4, 8), np.float32)], {})[0]
    assert np.allclose(out, np.tanh(1.0))
    print(model.library_path)
""")


def _run(mode: str, cache_dir: Path) -> str:
    env = dict(os.environ, SOL_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, mode], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cache_hit_in_a_new_process(tmp_path: Path) -> None:
    first = _run("build", tmp_path)
    second = _run("forbid-build", tmp_path)
    assert first == second
    assert str(tmp_path) in first


def _tiny(name: str = "tiny") -> Graph:
    g = Graph(name)
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3)])
    (y,) = g.add_layer("relu", [x], name="act")
    g.outputs = [y]
    return g


def test_cache_key_covers_flags_and_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    flavour, _ = flavour_for(None)
    base = cache_key(_tiny(), flavour)
    assert cache_key(_tiny(), flavour) == base
    assert cache_key(_tiny("other"), flavour) != base
    monkeypatch.setitem(sol.config, "compiler::cflags", "-O2 -fopenmp")
    assert cache_key(_tiny(), flavour_for(None)[0]) != base


def test_failed_build_names_the_kept_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sol.config, "compiler::cflags", "-O1 -fopenmp -include sol_no_such_header.h")
    with pytest.raises(SolBuildError) as info:
        compile_graph(_tiny("broken"), passes=False)
    message = str(info.value)
    source = Path(message.split("Source kept at ")[1].split(";")[0])
    assert source.exists() and "sol_broken_forward" in source.read_text()
    assert "sol_no_such_header.h" in message  # the compiler's own words
    assert not str(source).startswith(str(tmp_path / "cache"))
    assert (source.parent / "build.log").exists()


def test_optimize_without_a_frontend_names_the_packages() -> None:
    class NotAModel:
        pass

    with pytest.raises(SolError, match="NotAModel.*sol-frontend-torch"):
        optimize(NotAModel(), np.zeros(3))


def test_compiled_graph_runs_after_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path))
    g = _tiny("with_passes")
    model = compile_graph(g)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(model.run_numpy([x], {})[0], np.maximum(x, 0))
