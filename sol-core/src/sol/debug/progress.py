"""The compile progress bar: parse, passes, plan, codegen, build (and tune where a backend tunes).

A compile shows a one-line bar on stderr once it has run for ``delay``
seconds (1 s: cached and small models never flicker one), unless
``sol.config["compiler::progress"]`` is False or stderr is not a terminal;
then every stage is a log line instead (``sol.log``, INFO). Stages are
announced with the module-level `stage`, so the pipeline's functions need no
progress object passed around: `compiling` makes one current for the
duration of a compile, and nested compiles (a training step compiling its
forward and backward graphs inside sol.optimize) report into the outer one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

from .. import log

_log = log.get("compiler")

#: every stage name the pipeline announces, in order
STAGES = ("parse", "passes", "plan", "codegen", "build", "tune")
_WIDTH = 24


class CompileProgress:
    """One compile's stages; draws the bar from a background thread (see the module docstring)."""

    def __init__(self, title: str, stages: Sequence[str] = STAGES[:-1], *, stream: TextIO | None = None,
                 bar: bool | None = None, delay: float = 1.0, interval: float = 0.2) -> None:
        self.title = title
        self.stages = list(stages)
        self.stream = stream if stream is not None else sys.stderr
        self.bar = _wants_bar(self.stream) if bar is None else bar
        self.delay = delay
        self.interval = interval
        self.current = ""
        self.done_stages = 0
        self.drawn = False
        self._started = time.monotonic()
        self._stage_started = self._started
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- stages --------------------------------------------------------------
    def stage(self, name: str) -> None:
        """``name`` starts now (and the previous stage ends)."""
        now = time.monotonic()
        with self._lock:
            if self.current:
                self._log_end(now)
            if name not in self.stages:
                self.stages.append(name)
            self.done_stages = self.stages.index(name)
            self.current, self._stage_started = name, now
        if not self.bar:
            _log.info("%s: %s ...", self.title, name)

    def _log_end(self, now: float) -> None:
        (_log.debug if self.bar else _log.info)("%s: %s took %.2f s", self.title, self.current,
                                                now - self._stage_started)

    # -- drawing -------------------------------------------------------------
    def line(self) -> str:
        """The bar as text, e.g. ``SOL resnet18 [##########--------------] 2/6 plan 1.3s``."""
        total = max(len(self.stages), 1)
        filled = round(_WIDTH * self.done_stages / total)
        elapsed = time.monotonic() - self._started
        return (f"SOL {self.title} [{'#' * filled}{'-' * (_WIDTH - filled)}] {self.done_stages}/{total} "
                f"{self.current or 'starting'} {elapsed:.1f}s")

    def _draw(self, text: str) -> None:
        with self._lock:
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()
            self.drawn = True

    def _run(self) -> None:
        if self._closed.wait(self.delay):
            return  # finished before the delay: no bar at all
        while not self._closed.is_set():
            self._draw(self.line())
            self._closed.wait(self.interval)

    # -- lifetime --------------------------------------------------------------
    def __enter__(self) -> CompileProgress:
        if self.bar:
            self._thread = threading.Thread(target=self._run, name="sol-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        self.close(failed=error is not None)

    def close(self, failed: bool = False) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
        elapsed = time.monotonic() - self._started
        if self.current:
            self._log_end(time.monotonic())
        if self.drawn:
            self.done_stages = len(self.stages) if not failed else self.done_stages
            self.current = "failed" if failed else "done"
            self._draw(self.line())
            self.stream.write("\n")
            self.stream.flush()
        if not failed:
            (_log.debug if self.bar else _log.info)("%s: compiled in %.2f s", self.title, elapsed)


def _wants_bar(stream: TextIO) -> bool:
    import sol

    if not sol.config["compiler::progress"]:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


_current: ContextVar[CompileProgress | None] = ContextVar("sol_compile_progress", default=None)


@contextmanager
def compiling(title: str, stages: Sequence[str] = STAGES[:-1], **options: object) -> Iterator[CompileProgress]:
    """Make a progress current for a compile; inside another compile, the outer one (``options``: see the class)."""
    active = _current.get()
    if active is not None:
        yield active
        return
    progress = CompileProgress(title, stages, **options)  # type: ignore[arg-type]
    token = _current.set(progress)
    try:
        with progress:
            yield progress
    finally:
        _current.reset(token)


def stage(name: str) -> None:
    """Announce a stage of the current compile (no-op outside one)."""
    active = _current.get()
    if active is not None:
        active.stage(name)
