"""Debug mode on small hand-built graphs: time table, GraphViz graph, memory plot, sol.profile, chrome trace."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.codegen.plan import plan
from sol.compiler import compile_graph, flavour_for
from sol.debug import graphviz, memory_plot
from sol.debug.profile import Profile, profile
from sol.debug.table import format_table, parse_title, records
from sol.errors import SolError
from sol.ir import BATCH, Dim, Graph, Purpose


def _net(name: str = "tinynet") -> tuple[Graph, dict[str, np.ndarray]]:
    """linear+relu (a library call where the flavour has one), then softmax -> tanh -> add (DFP), then reshape."""
    rng = np.random.default_rng(0)
    params = {"fc.weight": rng.standard_normal((32, 16)).astype(np.float32),
              "fc.bias": rng.standard_normal(32).astype(np.float32)}
    g = Graph(name)
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(16)])
    w, b = g.add_param("fc.weight", params["fc.weight"]), g.add_param("fc.bias", params["fc.bias"])
    (h,) = g.add_layer("linear", [x, w, b], name="fc")
    (r,) = g.add_layer("relu", [h], name="relu")
    (s,) = g.add_layer("softmax", [r], {"axis": 1}, name="softmax")
    (t,) = g.add_layer("tanh", [s], name="tanh")
    (u,) = g.add_layer("add", [t, r], name="add")
    g.outputs = [u]
    return g, params


class _Callable:
    """What a frontend returns: a callable exposing its CompiledModel as ``.compiled``."""

    def __init__(self, compiled, params: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
        self.compiled, self.params = compiled, params

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.compiled.run_numpy([x], self.params)[0]


@pytest.fixture
def debug_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path / "cache"))
    sol.config["compiler::debug"] = True
    sol.config["compiler::debug_memory_consumption"] = True
    sol.config["compiler::debug_dir"] = str(tmp_path / "debug")
    sol.config["compiler::name"] = "unit"
    try:
        yield tmp_path / "debug"
    finally:
        for key in ("compiler::debug", "compiler::debug_memory_consumption", "compiler::debug_dir", "compiler::name"):
            del sol.config[key]


def _main_clusters(dot_text: str) -> list[int]:
    return [int(i) for i in re.findall(r"subgraph cluster_main_(\d+) \{", dot_text)]


def test_parse_title_and_table() -> None:
    assert parse_title("DNN conv1 (conv) -> conv1.relu (relu)") == ("DNN", ("conv1", "conv1.relu"), ("conv", "relu"))
    assert parse_title("pool (max_pool)") == ("DFP", ("pool",), ("max_pool",))
    rows = records(["DNN fc (linear)", "softmax (softmax) -> tanh (tanh)"], [0.003, 0.001])
    assert [r.share for r in rows] == [0.75, 0.25]
    assert rows[1].to_dict()["layers"] == ["softmax", "tanh"]
    text = format_table(rows, "title")
    assert text.splitlines()[0] == "title"
    assert "fc (linear)" in text and "softmax (softmax), tanh (tanh)" in text and "75.0%" in text
    assert "2 clusters" in text.splitlines()[-1]


def test_dot_names_every_cluster_of_the_plan() -> None:
    graph, _ = _net()
    flavour, _ = flavour_for(None)  # the default device's (the generic CPU flavour where no backend is installed)
    the_plan = plan(graph, flavour)
    text = graphviz.to_dot(the_plan, "x86:0")
    assert "cluster_prepare" not in text
    clusters = [c for c in the_plan.programs.main if not c.alias]
    assert _main_clusters(text) == list(range(len(clusters)))
    for c in clusters:
        for layer in c.layers:
            assert f'label="{layer.name}\\n' in text
    assert 'cluster_device_x86:0' in text and "device x86:0" in text
    assert "I0 ->" in text and "-> O0;" in text


def test_render_without_dot_is_a_logged_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    dot_file = tmp_path / "g.dot"
    dot_file.write_text("digraph g { a -> b; }")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert graphviz.render(dot_file) == []
    assert "GraphViz `dot` is not installed" in capsys_text(caplog)


def capsys_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


@pytest.fixture(autouse=True)
def _propagate_sol_logs() -> Iterator[None]:
    """SOL's root logger does not propagate; caplog listens at the root."""
    import logging

    root = logging.getLogger("sol")
    root.propagate = True
    try:
        yield
    finally:
        root.propagate = False


def test_memory_timeline_peak_is_the_planned_workspace() -> None:
    graph, _ = _net()
    the_plan = plan(graph, flavour_for(None)[0])
    data = memory_plot.timeline(the_plan, batch=3)
    assert len(data.steps) == len(the_plan.programs.main)
    assert data.peak == data.planned_peak == the_plan.memory.workspace.at(3)
    assert all(live <= arena for live, arena in zip(data.live_bytes, data.arena_bytes, strict=True))


def test_debug_mode_writes_consistent_artifacts(debug_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    graph, params = _net("debugnet")
    compiled = compile_graph(graph, "x86", passes=False)
    artifacts = compiled.debug_artifacts
    titles = compiled.metadata["clusters"]
    # one graph, one source copy, one memory plot, all named <compiler::name>_<model>
    assert artifacts.dot == debug_config / "unit_debugnet.dot"
    assert artifacts.source is not None and artifacts.source.read_text() == compiled.source_path.read_text()
    assert _main_clusters(artifacts.dot.read_text()) == list(range(len(titles)))
    if shutil.which("dot"):
        assert {p.suffix for p in artifacts.rendered} == {".svg", ".png"}
        assert "<svg" in (debug_config / "unit_debugnet.svg").read_text()
    assert artifacts.memory_plot is not None and artifacts.memory_plot.stat().st_size > 0
    workspace_a, workspace_c = compiled.metadata["workspace"]
    assert artifacts.memory.peak == workspace_a * 1 + workspace_c
    printed = capsys.readouterr().out
    assert f"generated source of debugnet for x86:0: {compiled.source_path}" in printed

    out = _Callable(compiled, params)(np.ones((2, 16), np.float32))
    assert out.shape == (2, 32)
    table = capsys.readouterr().out
    assert "SOL debug: debugnet on x86:0, call 1" in table
    rows = [line for line in table.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(rows) == len(titles)
    assert f"{len(titles)} clusters" in table


def test_profile_returns_records_and_a_chrome_trace(debug_config: Path, tmp_path: Path) -> None:
    graph, params = _net("profilenet")
    model = _Callable(compile_graph(graph, "x86", passes=False), params)
    result = sol.profile(model, np.ones((4, 16), np.float32), runs=2, warmup=1)
    assert isinstance(result, Profile) and result.runs == 2
    assert [c.index for c in result.clusters] == list(range(len(model.compiled.metadata["clusters"])))
    assert all(c.seconds >= 0 for c in result.clusters)
    assert result.to_dict()["clusters"][0]["module"] in ("DNN", "DFP")
    assert "SOL profile of profilenet on x86:0 (average of 2 calls)" in str(result)
    trace = json.loads(result.save_chrome_trace(tmp_path / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in spans] == [f"#{c.index} {c.name}" for c in result.clusters]
    assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-6 for a, b in zip(spans, spans[1:], strict=False))


def test_profile_without_timers_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path))
    graph, params = _net("plainnet")
    model = _Callable(compile_graph(graph, "x86", passes=False), params)
    with pytest.raises(SolError, match=r"compiler::profile"):
        profile(model, np.ones((1, 16), np.float32))
    with pytest.raises(SolError, match=r"model returned by sol.optimize"):
        profile(object())
