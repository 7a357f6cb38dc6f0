"""Keep a worker's freed memory for reuse (glibc only; elsewhere a no-op).

An E-step allocates the same large numpy temporaries on every call (responsibilities,
per-component densities: N/W x K doubles, megabytes each). glibc sizes its thresholds
from the largest block freed so far, and in a worker that block is small (a shard arrives
as one array), so the top of the heap was handed back to the kernel after every call and
every temporary came back as fresh zeroed pages: ~12,000 page faults per E-step of the
diagonal-GMM benchmark, its compute 25-40% slower than in mixle's own MPI ranks, whose
larger scattered pickles happen to raise the thresholds. Fixing both thresholds keeps
blocks up to 32 MiB (glibc's maximum for the mmap threshold) on the heap and keeps up to
``trim`` bytes of free heap instead of trimming it. Memory use then stays at the steady
state of an E-step instead of dipping between calls. The numbers are unchanged: this
only decides where freed pages go.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
MMAP_THRESHOLD = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 512 << 20


@functools.cache
def _mallopt():
    """glibc's ``mallopt``, or None (not glibc: musl, macOS). Found once per process:
    ``find_library`` runs ``ldconfig``, milliseconds that a spare's adoption would wait for."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def retain_freed_memory(mmap_threshold: int = MMAP_THRESHOLD, trim: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's mmap and trim thresholds; True if both were accepted."""
    mallopt = _mallopt()
    if mallopt is None:
        return False  # nothing to tune
    return bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(
        mallopt(M_TRIM_THRESHOLD, int(trim))
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (for summary.json: every rank sends its
    own with its results). Linux reports ``ru_maxrss`` in KiB, macOS in bytes."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
