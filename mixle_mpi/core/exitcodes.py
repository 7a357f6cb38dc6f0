"""Process exit codes with one meaning each (documented in docs/reference.md, generated from this file)."""

OK = 0  # the fit finished, whether or not it recovered from failures
FAILED = 1  # the fit could not finish: the cause is on stderr
BAD_INPUT = 2  # bad data, configuration or launch (e.g. too few ranks)
FAULT_EXIT = 3  # a test fault plan's "exit" action: the worker exits on its own
DRIVER_LOST = 70  # a worker lost its driver and ended itself
RECONFIG_TIMEOUT = 71  # a shrink/respawn overran its deadline
WORKER_ABORTED = 72  # a worker ended because the driver aborted the job
NEVER_STARTED = 73  # a rank died or hung while the job started; nothing was computed: safe to rerun
RERUN_TO_RESUME = 74  # the driver could not reconfigure (e.g. a spawn stuck in MPI); the checkpoint is intact: rerun
CHECKPOINTED = 75  # preempted (SIGTERM/SIGUSR1): checkpointed, please requeue (EX_TEMPFAIL)
PREEMPTED_UNSAVED = 76  # preempted, no checkpoint configured: nothing saved, a rerun starts over
CHECKPOINT_TIMEOUT = 77  # a checkpoint write timed out (hung file system?); rerun to resume
INTERRUPTED = 130  # Ctrl-C (SIGINT): every rank ended, checkpointed if one was configured (128 + 2)

# What to do about each code: the last column of the one exit-code table (docs/reference.md).
WHAT_TO_DO = {
    OK: "nothing",
    FAILED: "read the cause; a rerun resumes from the checkpoint",
    BAD_INPUT: "fix what the message names (`fit --dry-run` lists every problem)",
    FAULT_EXIT: "(tests only)",
    DRIVER_LOST: "rerun: it resumes from the checkpoint",
    RECONFIG_TIMEOUT: "rerun: it resumes from the checkpoint",
    WORKER_ABORTED: "read the driver's message; rerun",
    NEVER_STARTED: "`mixle-mpi run` already ran it again (`--start-retries`); rerun",
    RERUN_TO_RESUME: "`mixle-mpi run` already ran it again (`--max-restarts`); rerun",
    CHECKPOINTED: "requeue (the SLURM templates do, within `--max-requeues`)",
    PREEMPTED_UNSAVED: "rerun from scratch; keep checkpoints on",
    CHECKPOINT_TIMEOUT: "`mixle-mpi run` already ran it again (`--max-restarts`); check the "
    "checkpoint's file system, then rerun",
    INTERRUPTED: "rerun to resume",
}
