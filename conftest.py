"""Settings for every package's tests, whichever of them a pytest run collects.

One SOL cache for the whole run. What several tests build (the oneDNN glue, autotuning timings, the PyTorch
native reader, the emulated VE, a zoo model compiled by several modules) is built once per run instead of once
per test, module or subprocess. The run's cache starts empty, so a run compiles everything afresh and neither
reads nor fills the user's cache. Tests about the cache itself keep a private one (`sol_cache_dir`).

Under pytest-xdist the workers inherit the controller's environment, so they share the cache (SOL's cache is
safe for concurrent processes). ``SOL_TEST_RUN_CACHE=<dir>`` names a cache to use and keep instead, for
iterating on one test without recompiling its models.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

RUN_CACHE = "SOL_TEST_RUN_CACHE"
_made = pytest.StashKey[str]()
_previous = pytest.StashKey[dict[str, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller set the environment it inherited
        return
    given = os.environ.get(RUN_CACHE)
    path = given or tempfile.mkdtemp(prefix="sol-test-cache-")  # 0700: SOL refuses caches others can write
    if not given:
        config.stash[_made] = path
    config.stash[_previous] = {name: os.environ.get(name) for name in (RUN_CACHE, "SOL_CACHE_DIR", "OMP_WAIT_POLICY")}
    os.environ[RUN_CACHE] = os.environ["SOL_CACHE_DIR"] = path
    # OpenMP threads that wait sleep instead of spinning: two xdist workers share the cores, and a spinning
    # thread holds one that the other worker's compiler or model needs. (Only the waiting changes, not the
    # threads: generated code still runs its parallel loops on every core.)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in config.stash.get(_previous, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    made = config.stash.get(_made, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
