"""Carried artifacts: CUDA libraries built on one machine (no GPU needed) and used on another (no nvcc needed).

``sol.config["cuda::artifacts"] = "DIR"`` (or ``SOL_CUDA_ARTIFACTS=DIR``)
makes every CUDA build go through ``DIR``:

* import: when ``DIR`` holds a library built from exactly the same source
  with the same nvcc flags, it is copied into SOL's cache instead of running nvcc;
* export: a library nvcc builds is also stored in ``DIR``.

So ``DIR`` filled on a build machine (e.g. by ``benchmarks/cuda_check.py
--dry-run``) and copied to a GPU machine turns every compile there into a copy,
through the ordinary ``sol.optimize`` path and SOL's own cache. The key is a
hash of the generated source and the nvcc flags (`source_key`), not of a graph
or of a machine's paths: the same key means the same code for the same
architectures, and a changed code generator can never be served a stale library.

The store's files: ``<key>.so`` and ``<key>.json`` (the model's name, which
nvcc and when, for people reading the directory). `carried` and `exported`
list this process's hits and builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import sol
from sol.records import ConfigKey

ARTIFACTS_KEY = ConfigKey(
    "cuda::artifacts",
    str,
    "",
    "A directory of carried CUDA libraries: a build whose source and nvcc flags match one there copies it instead of "
    "running nvcc, and every library nvcc builds is stored there too (empty: off; SOL_CUDA_ARTIFACTS sets it too).",
)
ENVIRONMENT = "SOL_CUDA_ARTIFACTS"
#: this process's imports and exports (keys), for reports such as cuda_check.py's
carried: list[str] = []
exported: list[str] = []


def directory() -> Path | None:
    """The configured store (``cuda::artifacts``, else $SOL_CUDA_ARTIFACTS), or None."""
    value = str(sol.config.get(ARTIFACTS_KEY.name, "") or "").strip() or os.environ.get(ENVIRONMENT, "").strip()
    return Path(value).expanduser().resolve() if value else None  # absolute: the build runs in its own directory


def source_key(source: str, flags: Sequence[str]) -> str:
    """What identifies a library: its exact source and the nvcc flags that shape the binary (architectures...)."""
    digest = hashlib.sha256(source.encode())
    digest.update(b"\0" + " ".join(flags).encode())
    return digest.hexdigest()[:40]


def find(store: Path, key: str) -> Path | None:
    library = store / f"{key}.so"
    return library if library.is_file() else None


def import_command(library: Path, target: Path) -> list[str]:
    """The build command that copies a carried library into the cache entry being built (no nvcc)."""
    return [sys.executable, "-m", __name__, "import", str(library), str(target)]


def export_command(store: Path, key: str, nvcc_command: Sequence[str], library: Path, model: str) -> list[str]:
    """The build command that runs nvcc, then stores its library in ``store`` under ``key``."""
    return [sys.executable, "-m", __name__, "export", str(store), key, str(library), model, "--", *nvcc_command]


def export(store: Path, source: str, flags: Sequence[str], library: Path, model: str = "") -> str:
    """Store an already built library (e.g. a cache hit of SOL's, which ran no nvcc) under its key; returns the key."""
    key = source_key(source, flags)
    if find(store, key) is None:
        _copy_atomically(library, store / f"{key}.so")
        _describe(store, key, model, "(from SOL's cache)")
    return key


def _describe(store: Path, key: str, model: str, nvcc: str) -> None:
    (store / f"{key}.json").write_text(json.dumps({"model": model, "nvcc": nvcc,
                                                   "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


def _copy_atomically(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.copyfile(source, partial)
    os.replace(partial, target)  # concurrent builders never see half a library


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["import"] and len(args) == 3:
        _copy_atomically(Path(args[1]), Path(args[2]))
        print(f"carried: {args[1]} (no nvcc run)")
        return 0
    if args[:1] == ["export"] and "--" in args:
        split = args.index("--")
        store, key, library, model = Path(args[1]), args[2], Path(args[3]), args[4]
        command = args[split + 1:]
        code = subprocess.run(command, check=False).returncode
        if code == 0 and library.is_file():
            _copy_atomically(library, store / f"{key}.so")
            _describe(store, key, model, command[0])
        return code
    print(f"usage: python -m {__name__} import LIBRARY TARGET | export STORE KEY LIBRARY MODEL -- NVCC...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
