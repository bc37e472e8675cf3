"""The host buffers a compiled model owns (its derived parameters and its workspace), backed by huge pages.

A model streams its weights through the cores once per call: ViT-B/16's 172
MB of bf16 weights, resnet50's 51 MB. In 4 KiB pages that is one TLB entry
per 4 KiB, so every call walks the page tables again (on a virtual machine a
nested walk), and it also evicts the TLB entries of everything else the call
touches. oneDNN's bf16 matmul of 197 x 768 by 768 x 3072 (ViT's MLP), its
weights cycling through 8 such layers, took 618-627 us per call in 4 KiB pages
and 489-532 us in 2 MiB pages (two threads, AMX); and the per-call check of
the framework's parameters (each tensor's version and address) took 290 us
after a resnet50 call and 800 us after a ViT-B/16 call (516 us with the model's
buffers in huge pages). Whole models gain less than that Linear alone, paired
rounds on against off (``runtime::huge_pages``, two threads): vit_b_16 1.017x
in bf16 and 1.020x in fp32, resnet50 0.988x and 0.997x (noise).

So buffers of at least HUGE_FROM bytes are anonymous private mappings advised
for transparent huge pages (``madvise(MADV_HUGEPAGE)``; Linux, where THP is
"always" or "madvise"), and the address handed to generated code is aligned
to HUGE_PAGE. Elsewhere, or with ``sol.config["runtime::huge_pages"]`` off,
they are ordinary zeroed arrays aligned to 64 bytes. Either way the memory
starts zeroed.
"""

from __future__ import annotations

import mmap

import numpy as np

import sol

#: the alignment generated code assumes of every buffer (sol.codegen.memory.ALIGN)
ALIGN = 64
#: the transparent huge page size of x86-64 and (with 4 KiB base pages) ARM64 Linux
HUGE_PAGE = 2 << 20
#: smaller buffers keep 4 KiB pages: a huge page would mostly hold nothing
HUGE_FROM = HUGE_PAGE


def huge_pages_available() -> bool:
    """Whether this Python can map memory and advise it for transparent huge pages."""
    return all(hasattr(mmap, name) for name in ("MADV_HUGEPAGE", "MAP_PRIVATE", "MAP_ANONYMOUS"))


def aligned_buffer(nbytes: int) -> tuple[object, int]:
    """A zeroed buffer of at least ``nbytes`` bytes (kept alive by the caller) and the aligned address inside it."""
    if nbytes >= HUGE_FROM and huge_pages_available() and sol.config.get("runtime::huge_pages", True):
        mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            mapping.madvise(mmap.MADV_HUGEPAGE)  # before any page is touched: faults then take whole huge pages
        except OSError:  # a kernel without THP: the mapping still works with base pages
            pass
        raw = np.frombuffer(mapping, dtype=np.uint8)  # holds the mapping
        address = raw.ctypes.data
        return raw, address + (-address) % HUGE_PAGE
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    address = raw.ctypes.data
    return raw, address + (-address) % ALIGN
