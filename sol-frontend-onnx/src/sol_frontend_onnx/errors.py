"""Errors of the import itself."""

from __future__ import annotations

from sol.errors import SolUnsupportedError


class NeedsStaticBatch(SolUnsupportedError):
    """A value needed at import depends on the wildcard batch; the caller retries with a fixed batch."""
