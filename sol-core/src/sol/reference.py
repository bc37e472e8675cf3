"""Reference documentation generated from the code: config keys and hooks.

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
