"""``sol.versions()``: everything that decides what SOL builds and runs."""

from __future__ import annotations

import platform
import sys

from ._version import __version__


def versions() -> dict[str, str]:
    """SOL, Python, OS, each plugin, and each toolchain/library a plugin uses.

    Plugin entries are ``plugin:<name>``; toolchain entries are
    ``<plugin>:<tool>`` as each plugin reports them.
    """
    from .plugins import registry

    reg = registry()
    out = {
        "sol": __version__,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "libc": " ".join(platform.libc_ver()) or "unknown",
    }
    for info in reg.plugins():
        status = "" if info.status == "ok" else f" [{info.status}]"
        out[f"plugin:{info.name}"] = f"{info.distribution} {info.version}{status}"
    for owner in (*reg.backends.values(), *reg.frontends.values()):
        try:
            tools = owner.versions()
        except Exception as exc:  # a tool probe must not break the version report
            tools = {"error": f"{type(exc).__name__}: {exc}"}
        for tool, version in sorted(tools.items()):
            out[f"{owner.name}:{tool}"] = str(version)
    out["executable"] = sys.executable
    return out
