"""Finding oneDNN (libdnnl) and reading its version.

SOL runs Conv/Linear/MatMul layers through oneDNN on x86 when it is
installed (the ``onednn`` wheels put ``libdnnl.so.*`` into ``<prefix>/lib``).
The version is read from the library itself (``dnnl_version()``), so it is
the one that would actually be loaded, not what some package metadata says.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

from sol.records import ConfigKey

LIBRARY_KEY = ConfigKey(
    "x86::onednn_library",
    str,
    "",
    "Path of the oneDNN library (libdnnl.so) to use; empty: search <sys.prefix>/lib.",
)

DNN_KEY = ConfigKey(
    "x86::dnn",
    bool,
    True,
    "Run Conv/ConvTranspose/Linear/MatMul through oneDNN; False generates library-free code for every layer.",
)


class _DnnlVersion(ctypes.Structure):
    # The leading fields of dnnl_version_t; later oneDNN releases append
    # runtime fields, which we never read, so declaring the prefix is safe.
    _fields_ = [
        ("major", ctypes.c_int),
        ("minor", ctypes.c_int),
        ("patch", ctypes.c_int),
        ("hash", ctypes.c_char_p),
    ]


def default_search_dirs() -> tuple[Path, ...]:
    return (Path(sys.prefix) / "lib",)


def find_library(search_dirs: Sequence[Path]) -> Path | None:
    """The first ``libdnnl.so*`` in ``search_dirs``, preferring the plain soname link."""
    for directory in search_dirs:
        candidates = sorted(directory.glob("libdnnl.so*"), key=lambda p: (len(p.name), p.name))
        for candidate in candidates:
            if candidate.is_file():
                return candidate
    return None


@functools.cache
def library_version(path: Path) -> str:
    """``major.minor.patch (git <hash>)`` of the library at ``path``, or why it is unusable."""
    try:
        lib = ctypes.CDLL(str(path))
        dnnl_version = lib.dnnl_version
    except OSError as exc:
        return f"unusable ({path}: {exc})"
    except AttributeError:
        return f"unusable ({path} has no dnnl_version(); not a oneDNN library)"
    dnnl_version.argtypes = []
    dnnl_version.restype = ctypes.POINTER(_DnnlVersion)
    found = dnnl_version()
    if not found:
        return f"unusable ({path}: dnnl_version() returned NULL)"
    version = found.contents
    text = f"{version.major}.{version.minor}.{version.patch}"
    if version.hash:
        text += f" (git {version.hash.decode('ascii', 'replace')[:12]})"
    return text


def onednn_version(configured: str = "", search_dirs: Sequence[Path] | None = None) -> str:
    """The version of the oneDNN SOL would use: ``configured`` path, else the first found."""
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            return f"not found at {configured} (set by {LIBRARY_KEY.name})"
        return library_version(path.resolve())
    found = find_library(default_search_dirs() if search_dirs is None else search_dirs)
    return "not installed" if found is None else library_version(found.resolve())
