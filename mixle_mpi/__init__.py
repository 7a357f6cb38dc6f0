"""mixle_mpi: a resilient MPI/SPMD encoded-data handle for mixle's EM.

Import is cheap and does not initialize MPI; the handle imports mpi4py when built. mixle
itself is imported on first use, so `mixle-mpi run` starts (and takes signals) at once.
"""

from mixle_mpi.chaos.fault_plan import Fault
from mixle_mpi.core.errors import ConfigError, DataError, MixleMPIError, NoWorkersLeft, WorkerError
from mixle_mpi.core.version import VERSION as __version__


def __getattr__(name):
    if name in ("ResilientMPIEncodedData", "is_driver"):
        from mixle_mpi.runtime import handle

        return getattr(handle, name)
    if name == "fit":
        from mixle_mpi.fitting.fitloop import fit

        return fit
    if name == "checkpointed_fold":
        from mixle.utils.parallel.resilient_em import checkpointed_fold

        return checkpointed_fold
    raise AttributeError(name)


__all__ = [
    "__version__",
    "ResilientMPIEncodedData",
    "is_driver",
    "fit",
    "checkpointed_fold",
    "Fault",
    "MixleMPIError",
    "ConfigError",
    "DataError",
    "NoWorkersLeft",
    "WorkerError",
]
