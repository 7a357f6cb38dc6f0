"""Process exit codes with one meaning each (documented in docs/reference.md, generated from this file)."""

OK = 0
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
NUMERICS_DIFFER = 77  # numerics auto: the ranks' probes differ, nothing computed: relaunch pinned
INTERRUPTED = 130  # Ctrl-C (SIGINT): every rank ended, checkpointed if one was configured (128 + 2)
