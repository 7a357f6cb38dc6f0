"""The child that ``jitcache.prime`` runs: it compiles (or loads) every kernel into numba's
on-disk cache and prints the parallel ones, so that its parent then loads them all.

    python -m mixle_mpi.core.jitwarm     (with the ranks' environment)
"""

from __future__ import annotations

import importlib

from mixle_mpi.core import jitcache, kernels, numerics


def warm() -> list[str]:
    """Import (and so compile or load) every kernel and run the probe's E-steps once."""
    for name in jitcache.KERNEL_MODULES:
        importlib.import_module(name)
    kernels.warm()
    numerics.probe()
    return sorted(name for name, _ in jitcache.parallel_dispatchers())


if __name__ == "__main__":
    print("\n".join(warm()))
