"""PyTorch's fp32 math settings (TF32 for convolutions and for matmuls), which SOL follows call by call.

Eager PyTorch on an Ampere-or-later GPU computes fp32 convolutions with TF32
tensor cores by default and fp32 matmuls without them; a user may change
either at any time. SOL's library calls (the CUDA backend's cuDNN and cuBLAS)
do what eager would do with the settings as of each call: every call of a
compiled model runs inside `following_torch`, whose function `torch_fp32_math`
the backend asks when it launches (so a model compiled for the CPU never pays
for reading them).

Which API is authoritative: since PyTorch 2.9 the settings live in a tree of
``fp32_precision`` values (``torch.backends.cudnn.conv``, ``torch.backends.cuda.matmul``,
their parent ``torch.backends.cudnn`` ("cuda", "all") and the root
``torch.backends``), where "none" defers to the parent, and ATen's
convolutions and cuBLAS calls read exactly that (``Context::float32Precision``);
the legacy flags (``torch.backends.cudnn.allow_tf32``,
``torch.backends.cuda.matmul.allow_tf32``, ``torch.set_float32_matmul_precision``)
write into the same tree, and reading them raises a RuntimeError once a
program mixed both APIs. So SOL resolves the tree itself, like ATen, and reads
the legacy flags only on a PyTorch without it. ``set_float32_matmul_precision("medium")``
gives the CUDA matmuls TF32 (CUDA has no bf16 fp32 mode), so "medium" counts as "high".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from sol.precision import Fp32Math, using_fp32_math

#: the four settings, made once (read at every launch of a library call): (conv TF32, matmul TF32) -> Fp32Math
_SETTINGS = {(conv, matmul): Fp32Math(conv_tf32=conv, matmul_tf32=matmul) for conv in (False, True)
             for matmul in (False, True)}


def _resolve(*chain: str) -> str:
    """The first setting of ``chain`` (leaf first) that is not "none" (ATen's ``Context::float32Precision``)."""
    return next((value for value in chain if value != "none"), "none")


def torch_fp32_math() -> Fp32Math:
    """What eager PyTorch would compute fp32 CUDA convolutions and matmuls with, as of now."""
    backends = torch.backends
    conv = getattr(backends.cudnn, "conv", None)
    if conv is not None and hasattr(backends.cuda.matmul, "fp32_precision"):
        generic, cuda = backends.fp32_precision, backends.cudnn.fp32_precision  # ("generic", "all"), ("cuda", "all")
        return _SETTINGS[_resolve(conv.fp32_precision, cuda, generic) == "tf32",
                         _resolve(backends.cuda.matmul.fp32_precision, cuda, generic) == "tf32"]
    # PyTorch before 2.9: the legacy flags are all there is
    return _SETTINGS[bool(backends.cudnn.allow_tf32), torch.get_float32_matmul_precision() != "highest"]


#: the nodes of PyTorch's fp32_precision tree (2.9+) that decide CUDA convolutions, RNNs and matmuls
def _tree() -> list[tuple[object, str]]:
    b = torch.backends
    return [(b, "fp32_precision"), (b.cudnn, "fp32_precision"), (b.cudnn.conv, "fp32_precision"),
            (b.cudnn.rnn, "fp32_precision"), (b.cuda.matmul, "fp32_precision")]


def _legacy(read: Callable[[], Any]) -> Any:
    """A legacy setting, or None where PyTorch refuses to read it (its records disagree: a mix of both APIs)."""
    try:
        return read()
    except RuntimeError:
        return None


@contextlib.contextmanager
def tf32_disabled() -> Iterator[None]:
    """PyTorch's CUDA convolutions and matmuls (and so SOL's) in strict fp32 inside, the settings as they were after.

    For checks against eager and float64 (``benchmarks/cuda_check.py``). PyTorch keeps each switch twice, a legacy
    record and the fp32_precision tree, and parts of it (torch.export, ATen's cuBLAS calls) refuse to run when the
    two disagree. So each is switched off through its legacy setter, which writes both records, where the legacy
    record can be read; the cuDNN nodes (conv and rnn alike, which the legacy reader compares) are set to "ieee" on
    top only where a parent node still gives TF32 ("none" defers to it) or the records disagreed before.
    Restored: the legacy records, then the tree's values as they were.
    """
    backends = torch.backends
    new_api = getattr(backends.cudnn, "conv", None) is not None and hasattr(backends.cuda.matmul, "fp32_precision")
    tree = [(node, attr, getattr(node, attr)) for node, attr in _tree()] if new_api else []
    conv = _legacy(lambda: backends.cudnn.allow_tf32)
    matmul = _legacy(torch.get_float32_matmul_precision)
    try:
        if conv is not None:
            backends.cudnn.allow_tf32 = False
        if matmul is not None:
            backends.cuda.matmul.allow_tf32 = False
        if new_api:
            if conv is None or torch_fp32_math().conv_tf32:
                backends.cudnn.conv.fp32_precision = backends.cudnn.rnn.fp32_precision = "ieee"
            if matmul is None or torch_fp32_math().matmul_tf32:
                backends.cuda.matmul.fp32_precision = "ieee"
        yield
    finally:
        if conv is not None:
            backends.cudnn.allow_tf32 = conv
        if matmul is not None:
            torch.set_float32_matmul_precision(matmul)
        for node, attr, value in tree:
            setattr(node, attr, value)


def following_torch() -> using_fp32_math:
    """Calls of compiled models inside compute fp32 as eager PyTorch would at the time each launch happens."""
    return using_fp32_math(torch_fp32_math)


__all__ = ["following_torch", "tf32_disabled", "torch_fp32_math"]
