"""The version of sol-core; every in-repo plugin pins exactly this."""

__version__ = "0.1.0"
