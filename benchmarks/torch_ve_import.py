"""What sol-backend-ve's PyTorch autoload entry point (torch.backends: sol_ve) adds to ``import torch``.

``import torch`` in fresh processes, alternating TORCH_DEVICE_BACKEND_AUTOLOAD=0 (PyTorch skips every backend entry
point) and =1 (it calls ours), in paired rounds so the machine's drift hits both alike; prints the medians, their
ratio and the difference. ``python -X importtime`` of one autoloaded import then shows what the entry point imported.
Processes must be separate here (an import happens once per process); the two runs alternate within one script.

    python benchmarks/torch_ve_import.py --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

TIMED = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
# our entry point alone, as PyTorch calls it (load, then call), in a process that imported torch without autoload
ENTRY = ("import time, importlib.metadata, torch; "
         "(ep,) = [e for e in importlib.metadata.entry_points(group='torch.backends') if e.name == 'sol_ve']; "
         "t = time.perf_counter(); ep.load()(); print(time.perf_counter() - t)")


def timed(code: str, autoload: str) -> float:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    env.pop("SOL_VE_EMULATE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def entry_point_modules() -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of what the autoload imported, from -X importtime."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], capture_output=True, text=True,
                          env=env, check=True)
    rows = []
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[1].isdigit() and "sol" in parts[2]:
            rows.append((int(parts[1]), parts[2]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds (default 15)")
    args = parser.parse_args()
    timed(TIMED, "1")  # warm the file system cache for both
    off, on, entry = [], [], []
    for _ in range(args.rounds):
        off.append(timed(TIMED, "0"))
        on.append(timed(TIMED, "1"))
        entry.append(timed(ENTRY, "0"))
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"import torch, median of {args.rounds}: autoload off {m_off * 1e3:.0f} ms, on {m_on * 1e3:.0f} ms; "
          f"ratio on/off {m_on / m_off:.3f}; added {(m_on - m_off) * 1e3:+.0f} ms")
    print(f"the sol_ve entry point alone (load + call, median of {args.rounds}): "
          f"{statistics.median(entry) * 1e3:.1f} ms = {statistics.median(entry) / m_off:.2%} of import torch")
    print("imported for the entry point (-X importtime, cumulative us):")
    for micros, module in entry_point_modules():
        print(f"  {micros:>8}  {module}")


if __name__ == "__main__":
    main()
