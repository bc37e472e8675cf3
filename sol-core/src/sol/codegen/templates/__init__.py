"""The jinja2 templates of generated code (``*.j2`` next to this file)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    # imported here: jinja2 costs ~0.1 s, and loading a cached model renders nothing
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("sol.codegen", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # C++ source, not HTML
    )
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
