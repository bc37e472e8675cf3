"""MkDocs hook: fills the generated reference pages from SOL's code.

A page containing ``<!-- sol:config-reference -->`` or
``<!-- sol:hook-reference -->`` gets the table of every config key (core and
installed plugins) or every hook specification in its place.
"""

from __future__ import annotations

import re
from pathlib import Path

from sol.reference import config_reference_markdown, device_runtime_reference_markdown, hook_reference_markdown

MARKERS = {
    "<!-- sol:config-reference -->": config_reference_markdown,
    "<!-- sol:hook-reference -->": hook_reference_markdown,
    "<!-- sol:device-runtime-reference -->": device_runtime_reference_markdown,
}


DOCS = Path(__file__).parent
# ``<!-- sol:include path/in/docs.py -->`` shows a file of docs/ (the tested
# example backend) verbatim, so the tutorial cannot drift from working code.
INCLUDE = re.compile(r"<!-- sol:include (\S+) -->")


def _include(match: re.Match[str]) -> str:
    path = DOCS / match.group(1)
    language = {".py": "python", ".toml": "toml"}.get(path.suffix, "")
    return f"```{language}\n{path.read_text(encoding='utf-8').rstrip()}\n```"


def on_page_markdown(markdown: str, **_kwargs) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return INCLUDE.sub(_include, markdown)
