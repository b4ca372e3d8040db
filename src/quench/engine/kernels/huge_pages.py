"""Zeroed CPU tensors on transparent huge pages, for the buffers a step streams through (KV caches, packed weights).

A decode step at a large batch reads every row's keys and values: hundreds of megabytes in runs of a few kilobytes,
one TLB miss per 4 KB page, and the hardware prefetcher stops at each page's end. On 2 MB pages both go away. The
memory is an anonymous mapping (zero-filled by the kernel) advised MADV_HUGEPAGE, aligned to 2 MB inside it; where
the platform has no such advice (or the buffer is small) it is an ordinary `torch.zeros`. Storage only: the values,
and every result computed from them, are the same either way.
"""

from __future__ import annotations

import math
import mmap

import torch

HUGE_PAGE = 2 * 1024 * 1024
ADVICE = getattr(mmap, "MADV_HUGEPAGE", None)


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero tensor of `shape` and `dtype` on the CPU, on huge pages where it spans at least one."""
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if ADVICE is None or nbytes < HUGE_PAGE:
        return torch.zeros(shape, dtype=dtype)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        mapping.madvise(ADVICE)
    except OSError:  # a kernel without transparent huge pages
        mapping.close()
        return torch.zeros(shape, dtype=dtype)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)  # keeps the mapping alive
    skip = -whole.data_ptr() % HUGE_PAGE
    return whole[skip : skip + nbytes].view(dtype).view(shape)
