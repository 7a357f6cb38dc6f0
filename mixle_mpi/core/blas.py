"""Pin BLAS threads on every rank: a shard's bits depend on the BLAS thread count.

OpenBLAS splits a large dot product differently with 1 and 2 threads, so a shard recomputed
on another rank is only bit-identical if every rank runs the same BLAS configuration.
"""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits

from mixle_mpi.core.importmemo import until_next_import


def pin_blas_threads(n: int):
    """Limit every BLAS/OpenMP pool in this process to ``n`` threads; keep the returned
    object alive for as long as the limit must hold."""
    return threadpool_limits(limits=int(n))


def blas_description() -> list[dict]:
    """The BLAS libraries loaded here, with versions and thread counts (for logs and checkpoints)."""
    keys = ("internal_api", "version", "num_threads", "threading_layer", "architecture")
    return [{k: info.get(k) for k in keys} for info in threadpool_info()]


@until_next_import
def blas_cores() -> list[str]:
    """The kernel set (OpenBLAS's core type) of each loaded BLAS library, sorted: what a
    rank's bits depend on, unlike its thread counts (pinned apart)."""
    return sorted({str(info.get("architecture")) for info in threadpool_info()})
