"""Debug mode on resnet18: the time table, the GraphViz graph and the memory plot agree with the plan."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sol
import torch
from sol_frontend_torch import zoo

CLUSTER_ROW = re.compile(r"^\s*(\d+)\s+(\S+)\s+(DNN|DFP)\s")


@pytest.fixture
def debug_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path / "cache"))
    settings = {"compiler::debug": True, "compiler::debug_memory_consumption": True,
                "compiler::debug_dir": str(tmp_path / "debug"), "compiler::name": "r18"}
    for key, value in settings.items():
        sol.config[key] = value
    try:
        yield tmp_path / "debug"
    finally:
        for key in settings:
            del sol.config[key]


def test_resnet18_debug_artifacts_match_the_plan(debug_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    model, _ = zoo.build("resnet18")
    model.eval()
    x = torch.randn(1, 3, 64, 64)  # small pictures keep the test fast; the plan's structure is the same
    sol_model = sol.optimize(model, x)
    compiled = sol_model.compiled
    artifacts = compiled.debug_artifacts
    clusters = compiled.metadata["clusters"]  # the plan's non-alias forward clusters, in schedule order
    assert len(clusters) > 10
    printed = capsys.readouterr().out
    assert f"generated source of {compiled.graph.name} for x86:0: {compiled.source_path}" in printed

    # the table printed by a call: one row per cluster, named by its anchor layer, in schedule order
    with torch.no_grad():
        expected = model(x)
        got = sol_model(x)
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    table = capsys.readouterr().out
    rows = [CLUSTER_ROW.match(line) for line in table.splitlines()]
    rows = [m for m in rows if m]
    assert [int(m.group(1)) for m in rows] == list(range(len(clusters)))
    anchors = [title.removeprefix("DNN ").split(" (")[0] for title in clusters]
    assert [m.group(2) for m in rows] == anchors
    assert [m.group(3) for m in rows] == ["DNN" if t.startswith("DNN ") else "DFP" for t in clusters]

    # the graph: one box per cluster with the same index and anchor, rendered to SVG
    dot_text = artifacts.dot.read_text()
    assert artifacts.dot.name == f"r18_{compiled.graph.name}.dot"
    boxes = re.findall(r'subgraph cluster_main_(\d+) \{\n\s+label="#\d+ (\S+) \((DNN|DFP)\)"', dot_text)
    assert [(int(i), name) for i, name, _ in boxes] == list(enumerate(anchors))
    if shutil.which("dot"):
        svg = artifacts.dot.with_suffix(".svg")
        assert svg.exists() and "<svg" in svg.read_text()

    # the memory plot's data: its peak is the planner's reported workspace peak
    workspace_a, workspace_c = compiled.metadata["workspace"]
    assert artifacts.memory_plot.exists() and artifacts.memory_plot.stat().st_size > 0
    assert artifacts.memory.peak == artifacts.memory.planned_peak == workspace_a + workspace_c

    # sol.profile: the same clusters, as data
    result = sol.profile(sol_model, x)
    assert [c.name for c in result.clusters] == anchors
    assert abs(sum(c.share for c in result.clusters) - 1.0) < 1e-9 or result.total_seconds == 0
