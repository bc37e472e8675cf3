"""The compile progress bar: drawn on a terminal after the delay, log lines otherwise."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator

import pytest
import sol
from sol.debug import progress


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def sol_records() -> Iterator[list[logging.LogRecord]]:
    """Every record of SOL's compiler logger at INFO and above (SOL's root logger does not propagate)."""
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("sol.compiler")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_bar_on_a_terminal_after_the_delay() -> None:
    stream = FakeTty()
    with progress.compiling("net", stream=stream, delay=0.0, interval=0.01) as bar:
        assert bar.bar
        for name in ("parse", "passes", "plan"):
            progress.stage(name)
            time.sleep(0.05)
    text = stream.getvalue()
    assert "SOL net [" in text and "plan" in text
    assert "5/5 done" in text and text.endswith("\n")


def test_no_bar_before_the_delay() -> None:
    stream = FakeTty()
    with progress.compiling("quick", stream=stream, delay=10.0):
        progress.stage("parse")
    assert stream.getvalue() == ""


def test_log_lines_without_a_terminal(sol_records: list[logging.LogRecord]) -> None:
    stream = io.StringIO()  # not a TTY
    with progress.compiling("piped", stream=stream, delay=0.0) as bar:
        assert not bar.bar
        progress.stage("parse")
        progress.stage("build")
    assert stream.getvalue() == ""
    messages = [r.getMessage() for r in sol_records]
    assert "piped: parse ..." in messages and "piped: build ..." in messages
    assert any(m.startswith("piped: parse took") for m in messages)
    assert any(m.startswith("piped: compiled in") for m in messages)


def test_config_switches_the_bar_off() -> None:
    sol.config["compiler::progress"] = False
    try:
        with progress.compiling("off", stream=FakeTty(), delay=0.0) as bar:
            assert not bar.bar
    finally:
        del sol.config["compiler::progress"]


def test_nested_compiles_report_into_the_outer_one() -> None:
    with progress.compiling("outer", stream=io.StringIO()) as outer:
        with progress.compiling("inner") as inner:
            progress.stage("tune")  # a stage the outer did not list is appended
        assert inner is outer and outer.stages[-1] == "tune"
    progress.stage("plan")  # outside a compile: nothing to report into, no error


def test_compile_graph_announces_its_stages(sol_records: list[logging.LogRecord], tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sol.compiler import compile_graph
    from sol.ir import Dim, Graph, Purpose

    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path))
    g = Graph("staged")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3)])
    (y,) = g.add_layer("relu", [x], name="act")
    g.outputs = [y]
    compile_graph(g)  # pytest's stderr is no terminal: log lines
    started = [r.getMessage() for r in sol_records if r.getMessage().endswith(" ...")]
    assert started == ["staged: passes ...", "staged: plan ...", "staged: codegen ...", "staged: build ..."]
