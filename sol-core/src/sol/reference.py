"""Reference documentation generated from the code: config keys, hooks and the device-runtime contract.

The documentation site renders these (``docs/hooks.py``), and a test checks
that every hook, hook argument and config key is documented, so the
reference can never silently fall behind the code.
"""

from __future__ import annotations

import inspect
import textwrap

from .hookspecs import SolSpecs


def hook_specs() -> dict[str, object]:
    """Every hook specification of SOL by name."""
    return {name: fn for name, fn in inspect.getmembers(SolSpecs, inspect.isfunction) if name.startswith("sol_")}


def hook_arguments(name: str) -> list[str]:
    params = inspect.signature(hook_specs()[name]).parameters
    return [p for p in params if p != "self"]


def undocumented_hooks() -> list[str]:
    """Hooks (or ``hook(argument)``) whose docstring lacks a description, an example, or an argument."""
    problems = []
    for name, fn in hook_specs().items():
        doc = inspect.getdoc(fn) or ""
        if not doc.strip():
            problems.append(name)
            continue
        if "Example::" not in doc:
            problems.append(f"{name} (no Example::)")
        problems.extend(f"{name}({arg})" for arg in hook_arguments(name) if f"``{arg}``" not in doc)
    return problems


def hook_reference_markdown() -> str:
    lines = []
    for name, fn in hook_specs().items():
        signature = str(inspect.signature(fn)).replace("(self, ", "(").replace("(self)", "()")
        doc = inspect.getdoc(fn) or ""
        summary, _, example = doc.partition("Example::")
        lines += [f"## `{name}`", "", f"```python\n{name}{signature}\n```", "", summary.strip(), ""]
        if example.strip():
            lines += ["Example:", "", "```python", textwrap.dedent(example).strip("\n"), "```", ""]
    return "\n".join(lines)


def config_reference_markdown() -> str:
    import sol

    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, key in sorted(sol.config.schema.items()):
        types = key.type if isinstance(key.type, tuple) else (key.type,)
        type_name = " or ".join(t.__name__ for t in types)
        if key.choices:
            type_name += " (" + ", ".join(map(str, key.choices)) + ")"
        doc = key.doc.replace("|", "\\|")
        lines.append(f"| `{name}` | {type_name} | `{key.default!r}` | {doc} |")
    return "\n".join(lines)


#: the records of the device-runtime contract, in the order the reference shows them
DEVICE_RUNTIME_RECORDS = ("DeviceRuntime", "DeviceAllocator", "DevicePointer", "HostBuffer", "Copy", "Launch")


def _public_methods(cls: type) -> list[tuple[str, object]]:
    return [(name, fn) for name, fn in cls.__dict__.items() if inspect.isfunction(fn) and not name.startswith("_")]


def device_runtime_reference_markdown() -> str:
    """`Backend.runtime` and the records of `sol.records` a device with its own memory implements or passes."""
    from . import records

    runtime = records.Backend.runtime
    lines = ["## `Backend.runtime`", "", f"```python\nruntime{inspect.signature(runtime)}\n```".replace("(self, ", "("),
             "", inspect.getdoc(runtime) or "", ""]
    for name in DEVICE_RUNTIME_RECORDS:
        cls = getattr(records, name)
        lines += [f"## `sol.records.{name}`", "", inspect.getdoc(cls) or "", ""]
        for method, fn in _public_methods(cls):
            signature = str(inspect.signature(fn)).replace("(self, ", "(").replace("(self)", "()")
            lines += [f"- `{method}{signature}`: {(inspect.getdoc(fn) or '').strip()}"]
        lines.append("")
    return "\n".join(lines)


def undocumented_device_runtime() -> list[str]:
    """Records and methods of the device-runtime contract without a docstring."""
    from . import records

    problems = [] if inspect.getdoc(records.Backend.runtime) else ["Backend.runtime"]
    for name in DEVICE_RUNTIME_RECORDS:
        cls = getattr(records, name)
        if not cls.__doc__:
            problems.append(name)
        problems += [f"{name}.{method}" for method, fn in _public_methods(cls) if not getattr(fn, "__doc__", None)]
    return problems
