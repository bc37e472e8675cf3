"""First-run check: does a fresh install run at full speed right after sol.optimize returns?

    python benchmarks/first_run.py                      # resnet18, two 3 s windows 20 s apart
    python benchmarks/first_run.py --model mobilenet_v2 --window 2 --pause 10

A child process with a new, empty SOL cache optimizes the model, times it for ``--window`` seconds right
away, sleeps ``--pause`` seconds and times it again, while a thread watches for compiler processes
(g++, cc1plus, ld, nvcc, ...) started by the child. SOL builds everything it needs inside sol.optimize,
so the first window should be as fast as the second (within 10%) and no compiler should run in either.
Timings drift by 20% on a shared VM: the check compares two windows of one process, not two processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: process names that mean "something is being compiled"
COMPILERS = frozenset({"cc1", "cc1plus", "gcc", "g++", "c++", "cc", "clang", "clang++", "as", "ld", "ld.bfd",
                       "ld.gold", "collect2", "nvcc", "ptxas", "cicc", "x86_64-linux-gnu-g++", "aarch64-linux-gnu-g++"})
TOLERANCE = 0.10


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, name) of every live process below ``root`` (from /proc; empty where there is no /proc)."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        parents[int(entry.name)] = (int(stat[stat.rindex(")") + 2:].split()[1]), name)
    found, frontier = [], {root}
    while frontier:
        children = [(pid, name) for pid, (ppid, name) in parents.items() if ppid in frontier]
        found.extend(children)
        frontier = {pid for pid, _ in children}
    return found


class CompilerWatch:
    """Polls this process's descendants every ``interval`` seconds; ``seen`` collects compiler names."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.update(name for _, name in descendants(os.getpid()) if name in COMPILERS)
            self._stop.wait(self.interval)

    def __enter__(self) -> CompilerWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def timed_window(run, seconds: float) -> tuple[float, int, list[str]]:  # type: ignore[no-untyped-def]
    """(median ms, calls, compilers seen) of calling ``run`` for ``seconds``."""
    times = []
    with CompilerWatch() as watch:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), len(times), sorted(watch.seen)


def child(model_name: str, window: float, pause: float) -> None:
    import sol.pytorch as sol
    import torch
    from sol_frontend_torch.zoo import build

    model, x = build(model_name)
    start = time.perf_counter()
    with CompilerWatch() as during_optimize:
        sol_model = sol.optimize(model, x)
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        first = timed_window(lambda: sol_model(x), window)
        time.sleep(pause)
        second = timed_window(lambda: sol_model(x), window)
    print(json.dumps({"compile_s": compile_s, "optimize_compilers": sorted(during_optimize.seen),
                      "first": first, "second": second}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--window", type=float, default=3.0, help="seconds per timing window")
    parser.add_argument("--pause", type=float, default=20.0, help="seconds between the windows")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.model, args.window, args.pause)
        return 0
    with tempfile.TemporaryDirectory(prefix="sol-first-run-") as cache:
        env = dict(os.environ, SOL_CACHE_DIR=cache)
        argv_child = [sys.executable, __file__, "--child", "--model", args.model, "--window", str(args.window),
                      "--pause", str(args.pause)]
        proc = subprocess.run(argv_child, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return proc.returncode
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    (first_ms, first_n, first_cc), (second_ms, second_n, second_cc) = result["first"], result["second"]
    ratio = first_ms / second_ms
    print(f"{args.model}, new cache: sol.optimize {result['compile_s']:.1f} s "
          f"(compilers inside it: {', '.join(result['optimize_compilers']) or 'none'})")
    print(f"  right away      : {first_ms:7.2f} ms median of {first_n} calls; compilers running: {', '.join(first_cc) or 'none'}")
    print(f"  after {args.pause:4.0f} s pause: {second_ms:7.2f} ms median of {second_n} calls; "
          f"compilers running: {', '.join(second_cc) or 'none'}")
    ok = abs(ratio - 1.0) <= TOLERANCE and not first_cc and not second_cc
    print(f"first window / second window: {ratio:.3f} -> {'OK' if ok else 'NOT OK'} "
          f"(within {TOLERANCE:.0%} and no compiler while timing)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
