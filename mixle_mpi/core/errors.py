"""One small exception tree: every message says what was found and what was needed."""

from __future__ import annotations

# what a job that cannot go on says about rerunning it
RERUN_ADVICE = (
    "Nothing saved is lost: `mixle-mpi run`/`fit` runs the job again by itself (--max-restarts, "
    "default 1), which resumes from the last checkpoint if one is configured; exit 74 means rerun "
    "the same command. Or disable respawn (--no-respawn)"
)


class MixleMPIError(RuntimeError):
    """Base of every error mixle_mpi raises on purpose."""


class ConfigError(MixleMPIError, ValueError):
    """A parameter, environment variable or launch setup is wrong (found X, needed Y)."""


class DataError(MixleMPIError, ValueError):
    """The data (or the estimator applied to it) cannot be fitted as given."""


class NoWorkersLeft(MixleMPIError):
    """Every worker rank is dead or blacklisted: the fit cannot continue."""


class WorkerError(MixleMPIError):
    """A worker raised while computing; carries its rank, host and traceback. Rank 0 is the
    driver, computing its own share of the shards (setting ``driver_computes``)."""

    def __init__(self, worker: int, host: str, pid: int, text: str) -> None:
        who = (
            "the driver, rank 0, computing its own shards"
            if worker == 0
            else f"worker rank {worker}"
        )
        super().__init__(f"{who} (pid {pid} on {host}) failed:\n{text}")
        self.worker, self.host, self.pid, self.text = worker, host, pid, text


class ReconfigurationTimeout(MixleMPIError):
    """A shrink or respawn did not finish within its deadline; the job cannot recover.
    ``mpi_held``: an abandoned call holds this process's MPI, so no MPI call can tell the
    workers to end (they see the driver's process gone and end on their own)."""

    def __init__(self, message: str, mpi_held: bool = False) -> None:
        super().__init__(message)
        self.mpi_held = mpi_held


class Preempted(MixleMPIError):
    """The driver was asked to stop (SIGTERM/SIGUSR1); a checkpoint was written. Rerun to resume."""


class PreemptedUnsaved(Preempted):
    """Preempted, with no checkpoint configured: nothing was saved, and a rerun starts over."""


class Interrupted(Preempted):
    """Ctrl-C: the driver stopped after the current iteration (and checkpointed, if it can)."""
