"""Per-category pass/fail counts of ONNX's backend test suite, for SOL and for onnxruntime.backend.

Both backends run the very same test functions (``onnx.backend.test.BackendTest``, CPU device,
ONNX's own tolerances); a test passes when it neither fails nor errors. Skipped tests (a backend's
``is_compatible`` said no) count as failures::

    python -m sol_frontend_onnx.suite_report                  # SOL and onnxruntime, every category
    python -m sol_frontend_onnx.suite_report --backend ort    # only onnxruntime
    python -m sol_frontend_onnx.suite_report --sol-junit run.xml   # SOL's outcomes from a pytest run of
                                                              # tests/test_backend_suite.py (xfail = fail)

SOL compiles every test with cheap flags (-O1, as tests/test_backend_suite.py does) into
``--cache`` (default: the suite's pytest cache directory when run from the repository, so the
artifacts of a test run are reused), ``--jobs`` builds at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

#: BackendTest's TestCase class names -> the category names of the issue tracker
CATEGORIES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendRealModelTest": "light",
}
ORDER = list(CATEGORIES.values())

Outcomes = dict[str, dict[str, bool]]  # category -> test name -> passed


def _suite(backend: ModuleType) -> dict[str, type[unittest.TestCase]]:
    import onnx.backend.test

    return onnx.backend.test.BackendTest(backend, __name__).test_cases


def _cpu_tests(case: type[unittest.TestCase]) -> list[str]:
    return sorted(n for n in dir(case) if n.startswith("test_") and n.endswith("_cpu"))


def _passed(case: type[unittest.TestCase], name: str) -> bool:
    result = unittest.TestResult()
    case(name).run(result)
    return result.wasSuccessful() and not result.skipped


def measure(backend: ModuleType, jobs: int = 1, progress: Callable[[str], None] | None = None,
            select: Iterable[str] | None = None) -> Outcomes:
    """Run every CPU test of the suite against ``backend`` (``jobs`` at a time)."""
    wanted = set(select) if select is not None else None
    outcomes: Outcomes = {}
    with tempfile.TemporaryDirectory() as home:
        previous = os.environ.get("ONNX_HOME")
        os.environ["ONNX_HOME"] = home  # the light models write their generated data here
        try:
            for class_name, case in _suite(backend).items():
                category = CATEGORIES.get(class_name, class_name)
                if wanted is not None and category not in wanted:
                    continue
                names = _cpu_tests(case)
                if progress:
                    progress(f"{backend.__name__}: {category} ({len(names)} tests)")
                with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                    results = list(pool.map(lambda n, c=case: _passed(c, n), names))
                outcomes[category] = dict(zip(names, results, strict=True))
        finally:
            if previous is None:
                os.environ.pop("ONNX_HOME", None)
            else:
                os.environ["ONNX_HOME"] = previous
    return outcomes


def from_junit(path: str | Path) -> Outcomes:
    """SOL's outcomes from pytest's ``--junitxml`` of tests/test_backend_suite.py (xfail and skips: not passed,
    strict xpass: passed)."""
    outcomes: Outcomes = {}
    for testcase in ET.parse(path).getroot().iter("testcase"):
        name = testcase.get("name", "")
        class_name = (testcase.get("classname") or "").rsplit(".", 1)[-1]
        if class_name not in CATEGORIES or not name.endswith("_cpu"):
            continue
        # a strict xfail that passed is reported as a failure of the run, but the test itself passed
        failed = any(child.tag in ("error", "skipped") or (child.tag == "failure" and not
                     (child.get("message") or "").startswith("[XPASS(strict)]")) for child in testcase)
        outcomes.setdefault(CATEGORIES[class_name], {})[name] = not failed
    return outcomes


def counts(outcomes: Outcomes) -> dict[str, tuple[int, int]]:
    return {c: (sum(r.values()), sum(not v for v in r.values())) for c, r in outcomes.items()}


def table(columns: dict[str, Outcomes]) -> str:
    """One row per category, a ``pass/fail`` column per backend."""
    header = f"{'category':<20}" + "".join(f"{name:>16}" for name in columns)
    lines = [header, "-" * len(header)]
    per = {name: counts(o) for name, o in columns.items()}
    for category in ORDER:
        cells = []
        for name in columns:
            p, f = per[name].get(category, (0, 0))
            cells.append(f"{p:>10}/{f:<5}" if category in per[name] else f"{'-':>16}")
        lines.append(f"{category:<20}" + "".join(cells))
    return "\n".join(lines)


def _default_cache() -> Path | None:
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "pytest.ini").exists() and (base / "sol-frontend-onnx").is_dir():
            return base / ".pytest_cache" / "d" / "sol-onnx-suite"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sol_frontend_onnx.suite_report", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sol", "ort", "both"], default="both")
    parser.add_argument("--sol-junit", help="take SOL's outcomes from this pytest junit xml instead of running SOL")
    parser.add_argument("--category", action="append", choices=ORDER, help="only these categories (repeatable)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="SOL tests built at a time")
    parser.add_argument("--cache", help="SOL's artifact cache directory for this run")
    parser.add_argument("--cflags", default="-O1 -fopenmp", help="host compiler flags of SOL's builds")
    parser.add_argument("--failures", action="store_true", help="also list SOL's failing tests per category")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    columns: dict[str, Outcomes] = {}
    if args.backend in ("sol", "both"):
        if args.sol_junit:
            columns["SOL"] = from_junit(args.sol_junit)
            if args.category:
                columns["SOL"] = {c: r for c, r in columns["SOL"].items() if c in args.category}
        else:
            cache = args.cache or _default_cache()
            if cache:
                os.environ["SOL_CACHE_DIR"] = str(cache)
            import sol

            from . import backend as sol_backend

            sol.config["compiler::cflags"] = args.cflags
            columns["SOL"] = measure(sol_backend, jobs=args.jobs, progress=say, select=args.category)
    if args.backend in ("ort", "both"):
        import onnxruntime
        import onnxruntime.backend as ort_backend

        onnxruntime.set_default_logger_severity(3)  # errors only: the old opsets of the suite warn a lot

        columns["onnxruntime"] = measure(ort_backend, jobs=1, progress=say, select=args.category)
    print(table(columns))
    if args.failures and "SOL" in columns:
        for category in ORDER:
            failed = sorted(n for n, ok in columns["SOL"].get(category, {}).items() if not ok)
            if failed:
                print(f"\nSOL fails in {category} ({len(failed)}):")
                print("\n".join(f"  {n}" for n in failed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
