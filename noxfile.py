"""SOL's task runner.

    nox -s tests          every package's tests in one environment (what CI runs)
    nox -s tests-sol-core one package alone, in an environment holding only it and
                          what it declares (a missing dependency declaration fails)
    nox -s demo           optimize a real model and show the speed-up
    nox -s bench          side-by-side benchmarks against the peers (benchmarks/)
    nox -s docs           build the documentation site strictly
    nox -s lint           ruff and the import contracts (import-linter)

Extra arguments after ``--`` go to pytest, e.g. ``nox -s tests -- -m slow``.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

# In-repo packages and the in-repo packages each one depends on (their PyPI
# dependencies come from their own pyproject.toml).
PACKAGES: dict[str, list[str]] = {
    "sol-core": [],
    "sol-backend-x86": ["sol-core"],
    "sol-backend-arm64": ["sol-core", "sol-backend-x86"],
    "sol-backend-cuda": ["sol-core"],
    "sol-backend-ve": ["sol-core"],
    "sol-frontend-torch": ["sol-core"],
    "sol-frontend-onnx": ["sol-core"],
    # the example third-party backend of the "Writing a backend" tutorial
    "docs/examples/sol-backend-example": ["sol-core"],
}
# The CPU build of torch lies on disk here; naming the version keeps pip from
# fetching a CUDA build with several GB of dependencies.
TORCH = "torch==2.13.0"
# CI's versions of the torch stack (sol-frontend-torch's test extra gives ranges, so that it installs on any
# machine's torch, e.g. a GPU image's 2.11): pinned here so CI's model coverage compares across runs.
TORCH_STACK = [TORCH, "torchvision==0.28.0", "transformers==5.24.0", "timm==1.0.31"]
# What `nox -s bench` adds, pinned so that results compare across runs: the zoo's torchvision, the
# peers ONNX Runtime and OpenVINO, and onnxscript, which torch's (dynamo) ONNX exporter needs.
BENCH_PEERS = ["torchvision==0.28.0", "onnxruntime==1.31.1", "openvino==2026.4.1", "onnxscript==0.7.2"]
DOCS_REQUIREMENTS = ["mkdocs>=1.6,<2"]
# The import contracts between the packages (.importlinter): checked after the tests and by the lint session.
IMPORT_LINTER = ["import-linter>=2.1,<3"]
# pytest exits 5 when it collected no tests; a package without tests yet is not a failure.
PYTEST_OK = [0, 5]
# The tests run in one pytest-xdist worker per core: most of their time is g++ on generated code and models
# running in subprocesses, one core each. worksteal: each worker starts on its own half of the test list (the
# tests of a module mostly stay in one worker, and so do its module fixtures) and takes over part of the other's
# queue when it runs dry.
PARALLEL = ["pytest-xdist>=3.6"]
PARALLEL_ARGS = ["-n", "auto", "--dist", "worksteal"]


# Extras the tests of a package need besides "test" (debug: matplotlib for the memory plot tests).
# sol-backend-cuda: nvcc, cuobjdump, cuBLAS and cuDNN from NVIDIA's wheels, so its CUDA compile tests run in CI.
TEST_EXTRAS: dict[str, str] = {"sol-core": "test,debug", "sol-backend-cuda": "test,toolchain,libs"}


def _install(session: nox.Session, packages: list[str], extras: str = "test") -> None:
    """Install in-repo packages (with extras) from their source directories in one resolve."""
    specs = [f"./{p}[{TEST_EXTRAS.get(p, extras) if extras == 'test' else extras}]" if extras else f"./{p}"
             for p in packages]
    needs_torch = any(p == "sol-frontend-torch" for p in packages)
    session.install(*(TORCH_STACK if needs_torch else []), *specs)


def _existing(packages: list[str]) -> list[str]:
    return [p for p in packages if (ROOT / p / "pyproject.toml").exists()]


def _pytest_args(session: nox.Session) -> list[str]:
    """pytest's arguments: the user's (default: the not-slow set), in parallel unless they choose workers
    themselves (``-n 0`` runs in one process, ``-p no:xdist`` without xdist)."""
    args = session.posargs or ["-m", "not slow"]
    chosen = any(a in ("-n", "--numprocesses", "no:xdist") or a.startswith(("-n", "--numprocesses=")) for a in args)
    return args if chosen else [*PARALLEL_ARGS, *args]


@nox.session(name="tests")
def tests(session: nox.Session) -> None:
    """All packages' tests in one environment (the slow set only if asked for), then the docs build."""
    packages = _existing(list(PACKAGES))
    _install(session, packages)
    session.install(*DOCS_REQUIREMENTS, *PARALLEL, *IMPORT_LINTER)
    session.run("pytest", "-q", *_pytest_args(session), *[f"{p}/tests" for p in packages], success_codes=PYTEST_OK)
    # the documentation is part of the product: it must build strictly wherever the tests pass
    session.run("mkdocs", "build", "--strict", "--site-dir", "build/site")
    session.run("lint-imports")


for _package, _deps in PACKAGES.items():

    def _package_session(session: nox.Session, package: str = _package, deps: list[str] = _deps) -> None:
        if not (ROOT / package / "pyproject.toml").exists():
            session.skip(f"{package} does not exist in this checkout")
        # only the package (plus the in-repo packages it declares); test extras only for itself
        session.install(*(TORCH_STACK if package == "sol-frontend-torch" else []), *PARALLEL,
                        *[f"./{d}" for d in deps], f"./{package}[{TEST_EXTRAS.get(package, 'test')}]")
        session.run("pytest", "-q", *_pytest_args(session), f"{package}/tests", success_codes=PYTEST_OK)

    nox.session(name=f"tests-{Path(_package).name}")(_package_session)


@nox.session
def demo(session: nox.Session) -> None:
    """Optimize a real model with SOL and print the speed-up over PyTorch."""
    _install(session, _existing(["sol-core", "sol-backend-x86", "sol-frontend-torch"]))
    session.run("python", "benchmarks/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks against the peers; arguments pick models, batch sizes, threads.

    ``nox -s bench -- --models resnet18,mobilenet_v2 --batch 1,16 --json out.json`` (see benchmarks/README.md).
    """
    # One resolve: torch pinned (no CUDA wheels), torchvision for the zoo's models, and the peers.
    packages = _existing(["sol-core", "sol-backend-x86", "sol-frontend-torch", "sol-frontend-onnx"])
    session.install(TORCH, *BENCH_PEERS, *[f"./{p}" for p in packages])
    session.run("python", "benchmarks/bench.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; warnings fail the build."""
    session.install(*DOCS_REQUIREMENTS)
    _install(session, _existing(list(PACKAGES)), extras="")
    session.run("mkdocs", "build", "--strict", "--site-dir", "build/site")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, and the import contracts between the packages (.importlinter), read from the sources."""
    session.install("ruff", *IMPORT_LINTER)
    session.run("ruff", "check", ".")
    # import-linter finds the packages on the path without importing them: no install (and no torch) needed
    sources = [str(ROOT / p / "src") for p in _existing(list(PACKAGES))]
    session.run("lint-imports", env={"PYTHONPATH": ":".join(sources)})
