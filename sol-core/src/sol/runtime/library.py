"""A built model library loaded with ctypes: the plain C entry points of the ABI."""

from __future__ import annotations

import ctypes
from pathlib import Path

from ..errors import SolBuildError

_VOIDP = ctypes.c_void_p
_PTRS = ctypes.POINTER(ctypes.c_void_p)


class ModelLibrary:
    """``<prefix>_init / _seed / _workspace_size / _derived_size / _prepare / _forward`` of one artifact."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path = Path(path)
        self.prefix = prefix
        try:
            self._lib = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise SolBuildError(f"cannot load the model library {self.path}: {exc}") from exc
        self.init = self._fn("init", ctypes.c_int, [ctypes.c_int])
        self.seed = self._fn("seed", None, [ctypes.c_int])
        self.workspace_size = self._fn("workspace_size", ctypes.c_int64, [ctypes.c_int64])
        self.derived_size = self._fn("derived_size", ctypes.c_int64, [])
        self.prepare = self._fn("prepare", ctypes.c_int, [_VOIDP, _PTRS, ctypes.c_int64])
        self.forward = self._fn("forward", ctypes.c_int, [_VOIDP, _PTRS, _PTRS, _PTRS, _VOIDP, ctypes.c_int64])
        # only in models built with compiler::profile
        self.profile = (self._fn("profile", ctypes.c_int64, [ctypes.POINTER(ctypes.c_double), ctypes.c_int64])
                        if hasattr(self._lib, f"{prefix}_profile") else None)

    def _fn(self, name: str, restype: object, argtypes: list[object]):  # type: ignore[no-untyped-def]
        symbol = f"{self.prefix}_{name}"
        try:
            fn = getattr(self._lib, symbol)
        except AttributeError:
            raise SolBuildError(f"the model library {self.path} does not export {symbol}; rebuild it "
                                "(`sol cache clear`)") from None
        fn.restype = restype
        fn.argtypes = argtypes
        return fn


def pointer_array(pointers: list[int]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
