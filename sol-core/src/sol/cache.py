"""Placeholder replaced by the cache implementation."""

def info():
    raise NotImplementedError


def clear():
    raise NotImplementedError
