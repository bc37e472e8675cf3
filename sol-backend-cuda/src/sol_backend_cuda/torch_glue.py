"""PyTorch's CUDA tensors as SOL's native device memory: PyTorch's current stream and caching allocator.

The PyTorch frontend's glue for this device (`CudaBackend.framework_glue`): imported only by a PyTorch process
that runs a model on CUDA tensors, so the backend itself never needs torch.

A model compiled for ``cuda:N`` runs on CUDA tensors with no copies
(`SolModule`'s native path): inputs, outputs and parameters are the tensors'
own memory, its kernels go on ``torch.cuda.current_stream()`` (so
``torch.cuda.synchronize()`` and stream semantics hold, and nothing inside a
call waits for the GPU), and its workspace comes from PyTorch's caching
allocator, the pool PyTorch's own kernels use.
"""

from __future__ import annotations

from typing import Any

import torch
from sol.records import DeviceAllocator


class CachingAllocator(DeviceAllocator):
    """`sol.records.DeviceAllocator` over ``torch.cuda.caching_allocator_alloc`` / ``caching_allocator_delete``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def alloc(self, nbytes: int) -> int:
        stream = torch.cuda.current_stream(self.device)
        return int(torch.cuda.caching_allocator_alloc(max(int(nbytes), 1), self.device, stream))

    def free(self, handle: int) -> None:
        torch.cuda.caching_allocator_delete(handle)


def native_queue(model: Any, device: torch.device) -> Any:
    """The queue a native call on ``device`` runs on (None for device types SOL queues itself); for CUDA,
    PyTorch's current stream, and the model's workspace allocator becomes PyTorch's (once)."""
    if device.type != "cuda":
        return None
    if not isinstance(getattr(model, "allocator", None), CachingAllocator):
        model.allocator = CachingAllocator(device)
    return torch.cuda.current_stream(device).cuda_stream
