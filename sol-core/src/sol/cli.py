"""The ``sol`` command: ``sol devices | plugins [--json] | versions [--json] | cache info|clear``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _cmd_devices(args: argparse.Namespace) -> int:
    from .devices import all_devices, dump

    if args.json:
        print(json.dumps([d.to_dict() for d in all_devices()], indent=2))
    else:
        print(dump())
    return 0


def _cmd_plugins(args: argparse.Namespace) -> int:
    from .plugins import plugins

    infos = plugins()
    if args.json:
        print(json.dumps([p.to_dict() for p in infos], indent=2))
        return 0
    if not infos:
        print("no SOL plugins installed (pip install sol-backend-x86 sol-frontend-torch)")
        return 0
    rows = [("NAME", "KIND", "DISTRIBUTION", "VERSION", "STATUS", "HOOKS / ERROR")]
    for p in infos:
        detail = p.error if p.status != "ok" else ", ".join(p.hooks)
        rows.append((p.name, p.kind, p.distribution, p.version, p.status, detail))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5])
    return 0


def _cmd_versions(args: argparse.Namespace) -> int:
    from .versions import versions

    report = versions()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(map(len, report))
        for key, value in report.items():
            print(f"{key.ljust(width)}  {value}")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from . import cache

    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} cache entries from {cache.path()}")
    else:
        print(cache.info())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sol", description="SOL: AI acceleration middleware.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the devices of every installed backend")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("plugins", help="list discovered plugins and their status")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_plugins)
    p = sub.add_parser("versions", help="versions of SOL, Python, plugins and toolchains")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_versions)
    p = sub.add_parser("cache", help="inspect or clear the compiled-artifact cache")
    p.add_argument("action", choices=["info", "clear"])
    p.set_defaults(func=_cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import SolError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SolError as exc:
        print(f"sol: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
