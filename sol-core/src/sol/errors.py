"""SOL's exception hierarchy.

Every error a user can cause is a `SolError` whose message names the thing
that is wrong (layer, argument, config key, plugin) and what to do about it.
"""

from __future__ import annotations


class SolError(Exception):
    """Base class of every error SOL raises on purpose."""


class SolConfigError(SolError, KeyError, TypeError):
    """Unknown config key or a value of the wrong type."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SolPluginError(SolError):
    """A plugin failed to load or validate (raised only with SOL_STRICT_PLUGINS=1)."""


class SolDeviceError(SolError):
    """An unknown device type or index, or a device that cannot be used."""


class SolCacheError(SolError):
    """The artifact cache cannot be used safely (permissions, ownership)."""


class SolBuildError(SolError):
    """Compiling generated code failed; the message names the kept sources."""


class SolUnsupportedError(SolError):
    """A layer, op or attribute SOL does not support."""


class SolInputError(SolError, ValueError):
    """A model was called with inputs of the wrong shape, dtype or device."""


class SolPassBudgetError(SolError):
    """A graph pass exceeded its rewrite budget (`sol.passes.budget`): it would not have terminated."""
