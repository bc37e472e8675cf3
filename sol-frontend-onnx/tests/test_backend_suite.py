"""ONNX's own backend test suite (onnx.backend.test) run against SOL.

Every test of the suite runs; the ones SOL is known to fail are listed in
`expected_failures.EXPECTED_FAILURES` with a reason and marked
``xfail(strict=True)``, so a test that starts passing fails the run until
it is removed from the list (coverage can only go up).

Speed: each node test compiles a tiny graph with the host compiler. The
module builds with cheap flags (-O1: these graphs are a few hundred
elements) into one cache directory per machine (pytest's cache dir, so
re-runs reuse the artifacts), and before the first test it builds every
node test's graph in parallel, one thread per core (the compiler runs as
a subprocess, so threads overlap).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx.backend.test
import pytest
import sol
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import _normalize_tensor
from sol_frontend_onnx import backend

sys.path.insert(0, str(Path(__file__).parent))
from expected_failures import EXPECTED_FAILURES  # noqa: E402

#: the node tests' 1,400 small graphs build in ~0.18 s each at -O0 (0.21 at -O1): conformance, not speed, is tested
CFLAGS = "-O0 -fopenmp"

backend_test = onnx.backend.test.BackendTest(backend, __name__)
_cases = backend_test.test_cases
_known: set[str] = set()
for _case in _cases.values():
    for _name in dir(_case):
        if not _name.startswith("test_"):
            continue
        _known.add(_name)
        _reason = EXPECTED_FAILURES.get(_name)
        if _reason is not None:
            setattr(_case, _name, pytest.mark.xfail(strict=True, reason=_reason)(getattr(_case, _name)))
globals().update(_cases)
del _case, _name, _reason  # module-level TestCase names would be collected a second time


@pytest.fixture(scope="module", autouse=True)
def _suite_environment(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[None]:
    """Cheap flags, a persistent per-machine cache, a private ONNX_HOME for the light models' data."""
    cache_dir = Path(os.environ.get("SOL_ONNX_SUITE_CACHE") or request.config.cache.mkdir("sol-onnx-suite"))
    previous = sol.config["compiler::cflags"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOL_CACHE_DIR", str(cache_dir))
        mp.setenv("ONNX_HOME", str(tmp_path_factory.mktemp("onnx-home")))
        sol.config["compiler::cflags"] = CFLAGS
        try:
            # under pytest-xdist the workers compile the node tests side by side already (and a prebuild would
            # hold all of them in one worker's setup, 270 s of one core while the other worker may run dry)
            if os.environ.get("SOL_ONNX_SUITE_PREBUILD", "1") != "0" and not _xdist_workers():
                _prebuild_node_tests()
            yield
        finally:
            sol.config["compiler::cflags"] = previous


def _xdist_workers() -> bool:
    """Whether this process is one of several pytest-xdist workers."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1


def _prebuild_node_tests() -> None:
    """Compile every node test's graph ahead, in parallel; failures are left to the tests themselves."""
    cases = [t for t in load_model_tests(kind="node") if f"{t.name}_cpu" not in EXPECTED_FAILURES]

    def build(case: object) -> None:
        try:
            rep = backend.prepare(case.model, "CPU")  # type: ignore[attr-defined]
            inputs, _ = case.data_sets[0]  # type: ignore[attr-defined]
            rep.run([_normalize_tensor(x) for x in inputs])
        except Exception:  # noqa: BLE001  (the test reports it)
            pass

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(build, cases))


def test_expected_failures_name_real_tests() -> None:
    """A renamed or removed suite test must leave the list too."""
    stale = sorted(set(EXPECTED_FAILURES) - _known)
    assert not stale, f"expected failures that are not tests of the installed onnx: {stale}"
