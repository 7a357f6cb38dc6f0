"""Every option of mixle_mpi, once: its name, type, default, help and where it appears.

An option can be a field of the handle's ``Settings`` (then also the environment variable
``MIXLE_MPI_<NAME>``), a key of a ``mixle-mpi fit`` job file with its ``--flag`` (a field
of ``FitConfig``), a flag of the built-in fit job (``python -m mixle_mpi.fitjob``), or an
environment variable alone. ``core.settings``, ``cli.jobconfig``, ``fitting.fitjob`` and
``cli.refdoc`` (docs/reference.md) are built from this table, so a name, default or
help text is edited here and nowhere else. Pure data: no imports beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

ENV_PREFIX = "MIXLE_MPI_"
AUTO = "auto"  # the fit's checkpoint default: OUT_DIR/checkpoint.h5 (fitting.cadence.AUTO is this value)


@dataclass(frozen=True)
class FitjobFlag:
    """How ``python -m mixle_mpi.fitjob`` takes an option, where it differs from ``fit``."""

    default: object = None
    help: str | None = None  # None: the option's own help


@dataclass(frozen=True)
class Option:
    """One option. ``default`` is the one of the first surface it is on: Settings', else the
    job file's, else the fit job's or (environment only) the one ``help`` names."""

    name: str
    kind: type  # bool, int, float or str
    default: object
    help: str  # the flag's help (fit --help-all), else the meaning
    about: str | None = None  # the longer meaning of a setting (docs/reference.md); None: help
    short: str | None = None  # fit --help's shorter text; None: hidden there (--help-all shows it)
    setting: bool = False  # a field of Settings, read from MIXLE_MPI_<NAME> when not passed
    job: bool = False  # a job-file key, a FitConfig field and a `mixle-mpi fit` flag
    none_ok: bool = False  # the job file and flag accept none (a setting on both: always)
    at_least: int | None = None  # an int's least value (None: unchecked)
    positive: bool = False  # a float must be > 0
    choices: tuple[str, ...] = ()
    metavar: str | None = None  # the fit flag's metavar (None: NAME)
    default_text: str | None = None  # the default as fit --help shows it, when not the value itself
    fitjob: FitjobFlag | None = None
    env: str | None = None  # the variable of an option that is not a setting
    flags: tuple[
        str, ...
    ] = ()  # "COMMAND --flag" of mixle-mpi that sets it too (documented, checked by a test)

    @property
    def env_var(self) -> str | None:
        return ENV_PREFIX + self.name.upper() if self.setting else self.env

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def job_default(self):
        """FitConfig's default: a setting's is None (the handle decides: argument, variable, default)."""
        return None if self.setting else self.default

    @property
    def job_type(self) -> str:
        """FitConfig's annotation as text ("int | None"); error messages quote it."""
        optional = self.setting or self.none_ok or self.job_default is None
        return self.kind.__name__ + (" | None" if optional else "")

    @property
    def meaning(self) -> str:
        return self.about or self.help


OPTIONS: tuple[Option, ...] = (
    # -- the data and the model ------------------------------------------------------
    Option(
        "data",
        str,
        "",
        "PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris (required)",
        short="PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris (required)",
        job=True,
    ),
    Option(
        "model",
        str,
        "",
        "gmm:k=K[,cov=diag|full], poisson:k=K, hmm:states=S, composite:k=K,parts=a+b, or "
        "json:FILE (required)",
        short="gmm:k=K[,cov=diag|full], poisson:k=K, hmm:states=S, composite:..., json:FILE (required)",
        job=True,
        metavar="SPEC",
        fitjob=FitjobFlag(
            "gmm1d",
            "a built-in model with synthetic data: gmm1d, diag, full, poisson, hmm or "
            "composite (mixle_mpi/fitting/models.py)",
        ),
    ),
    Option("n", int, 20000, "rows of synthetic data", fitjob=FitjobFlag(20000)),
    Option("data_seed", int, 1, "seed of the synthetic data", fitjob=FitjobFlag(1)),
    Option(
        "columns",
        str,
        None,
        "CSV columns to use: names or indices, e.g. 0:4 or x,y",
        short="CSV columns, e.g. 0:4 or x,y",
        job=True,
        metavar="COLS",
        default_text="all columns",
    ),
    Option(
        "out_dir",
        str,
        "mixle_mpi_fit",
        "where model.json, summary.json, events.jsonl, progress.json (and fit.png) go",
        short="where model.json, summary.json and the logs go",
        job=True,
        metavar="DIR",
    ),
    Option(
        "num_shards",
        int,
        None,
        "shards S (default: from the data alone, ceil(rows/10000) within [16, 256], "
        "never more than the rows); S fixes the bits, not the rank count",
        short="shards S (default: from the rows alone); S fixes the bits, the rank count does not",
        job=True,
        at_least=1,
        metavar="S",
        fitjob=FitjobFlag(None),
    ),
    Option(
        "sub_chunks",
        int,
        1,
        "sub-chunks per shard",
        job=True,
        at_least=1,
        metavar="K",
        fitjob=FitjobFlag(1),
    ),
    # -- EM ----------------------------------------------------------------------------
    Option(
        "max_its",
        int,
        100,
        "EM iterations at most",
        short="EM iterations at most",
        job=True,
        at_least=1,
        metavar="N",
        fitjob=FitjobFlag(10),
    ),
    Option(
        "delta",
        float,
        1e-9,
        "stop when the log-likelihood gains less than this (0 or 'none': run max_its)",
        short="stop when the log-likelihood gains less (none: run max_its)",
        job=True,
        none_ok=True,
        metavar="D",
    ),
    Option(
        "seed",
        int,
        1,
        "seed of the random initialization (restart r uses seed + r)",
        short="seed of the random initialization",
        job=True,
        fitjob=FitjobFlag(7, "seed of the EM initialization"),
    ),
    Option(
        "init_p",
        float,
        0.1,
        "fraction of rows used by the random initialization",
        job=True,
        metavar="P",
        fitjob=FitjobFlag(0.1),
    ),
    Option(
        "restarts",
        int,
        1,
        "random restarts; restart r uses seed + r, the best final log-likelihood wins, and "
        "with --checkpoint ck.h5 each restart keeps its own checkpoint ck.r0.h5, ck.r1.h5, "
        "... (inspect accepts ck.h5 for all of them)",
        short="random restarts (seed + r); the best one wins",
        job=True,
        at_least=1,
        metavar="R",
    ),
    Option(
        "max_retries",
        int,
        2,
        "failures after which a worker rank is blacklisted",
        short="failures before a worker's place is blacklisted",
        job=True,
        at_least=1,
        metavar="N",
        fitjob=FitjobFlag(2),
    ),
    # -- the handle's settings (Settings; this order is Settings' field order) ---------
    Option(
        "heartbeat_period",
        float,
        0.4,
        "seconds between heartbeats",
        about="Seconds between heartbeats, both directions. 0.4 s against the 1 s timeout: a silent worker "
        "is declared failed after 2.5 missed beats (within 3 periods of its death, see "
        "bench/results/report.md) while a stall of up to 0.6 s is still tolerated.",
        setting=True,
        job=True,
        positive=True,
        metavar="SEC",
    ),
    Option(
        "heartbeat_timeout",
        float,
        1.0,
        "seconds of silence before a rank is declared dead",
        about="silence after which a worker is declared failed",
        setting=True,
        job=True,
        positive=True,
        metavar="SEC",
    ),
    Option(
        "suspect_max_wait",
        float,
        10.0,
        "seconds a silent worker whose process is alive (runnable, or using CPU) may stay "
        "suspected before it is failed; 0: fail it at the first silence",
        about="A worker silent for heartbeat_timeout on the driver's host is suspected, not failed: "
        "a process that is gone or stopped is failed at once, one that is alive gets one more timeout "
        "and, while it stays runnable or uses CPU (starved by a loaded node, or held in the MPI "
        "library), more, up to this many seconds from the first suspicion (policy/suspicion.py). "
        "Workers on other hosts, ULFM errors and stalls are failed at once. 0 turns the check off.",
        setting=True,
        job=True,
        metavar="SEC",
    ),
    Option(
        "driver_timeout",
        float,
        60.0,
        "silence after which a worker gives the driver up",
        setting=True,
        positive=True,
    ),
    Option(
        "reconfigure_timeout",
        float,
        60.0,
        "deadline for one shrink, spawn, or control reply (shard load)",
        setting=True,
        positive=True,
    ),
    Option(
        "blas_threads",
        int,
        1,
        "BLAS threads on every rank (bits depend on it)",
        setting=True,
        at_least=1,
        flags=("run --blas-threads",),
    ),
    Option(
        "respawn",
        bool,
        True,
        "respawn failed workers (else their shards migrate)",
        about="respawn failed ranks below max_retries",
        setting=True,
        job=True,
    ),
    Option(
        "respawn_wait",
        bool,
        False,
        "the fit waits for a replacement to be set up and loaded (else it joins "
        "in the background while the survivors carry its shards)",
        about="A replacement joins in the background (it imports and loads its shards while the survivors "
        "carry them; policy/join_plan.py). True: the next round waits for it instead, as before (every "
        "place computes its own shards again at once; the fit pauses meanwhile).",
        setting=True,
        job=True,
    ),
    Option(
        "stall_timeout",
        float,
        600.0,
        "seconds a busy worker may go without progress (one sub-chunk) before "
        "it is failed as stuck",
        about="A busy worker whose main thread reports no progress (one sub-chunk, one shard) for this long "
        "is stuck (a deadlock in a C extension, a livelock) and is failed like a dead one. 600 s: far "
        "above any sub-chunk of the data sizes we see; raise it, or split shards finer with sub_chunks, "
        "if a single sub-chunk legitimately computes longer.",
        setting=True,
        job=True,
        positive=True,
        metavar="SEC",
    ),
    Option(
        "spares",
        int,
        0,
        "extra ranks started idle; a spare takes a failed worker's place at once, without "
        "Spawn (with -n N, N + spares ranks are launched)",
        about="Ranks started beside the workers that hold no shards: set up, beating, idle. A failed worker's "
        "place is taken by a spare at once (no Spawn, which srun often cannot do); until then spares "
        "help recompute orphaned shards. The job needs 1 + workers + spares ranks.",
        short="idle ranks that take a failed worker's place",
        setting=True,
        job=True,
        at_least=0,
        metavar="N",
    ),
    Option(
        "failover",
        bool,
        False,
        "if the driver (rank 0) dies, the lowest surviving rank takes over and resumes "
        "from the checkpoint, in the same job (under mpiexec and srun); on whenever a "
        "checkpoint is written, unless --no-failover or MIXLE_MPI_FAILOVER=0",
        about="A dead driver is followed by the lowest surviving rank, which resumes the fit from its "
        "checkpoint (policy/failover_plan.py); under mpiexec and srun, with the shard store and the "
        "checkpoint where every rank can read them. Off: a dead driver ends the job.",
        short="a survivor takes over from a dead driver",
        setting=True,
        job=True,
        default_text="on with a checkpoint, or MIXLE_MPI_FAILOVER",
    ),
    Option(
        "heartbeat_fanin",
        int,
        16,
        "most workers of one communicator that beat to the driver itself",
        about="Most workers of one communicator the driver hears itself; above it, relay workers gather the "
        "others' beats (policy/fanin_plan.py), so the driver's load stays bounded and a relayed worker's "
        "death is seen one heartbeat period later. 0: every worker beats directly.",
        setting=True,
        at_least=0,
    ),
    Option(
        "workers_read_store",
        bool,
        True,
        "workers that can open the driver's shard store read their own shards",
        about="Workers that can open the driver's shard store (the same file: a shared file system) read "
        "their own shards at the start, in parallel; the driver streams the others'. The rows are the "
        "same either way, and so are the bits.",
        setting=True,
    ),
    Option(
        "own_read_min_bytes",
        int,
        8 << 20,
        "when it has at least this much to load (less comes faster from the driver)",
        setting=True,
        at_least=0,
    ),
    Option(
        "doorbells",
        bool,
        True,
        "ranks on the driver's host wake each other with a datagram",
        about="Ranks on the driver's host wake each other with a datagram beside each MPI message "
        "(runtime/doorbell.py) instead of polling finely while one is due: a round's messages arrive "
        "at once and a waiting rank takes no CPU. Off: every wait polls (policy/pacing.py).",
        setting=True,
    ),
    Option(
        "estep_ahead",
        bool,
        True,
        "a scoring round also computes the E-step of the model it scores",
        about="A scoring round also computes the E-step of the model it scores (policy/lookahead.py): "
        "mixle's EM loop asks for that E-step next, which then needs no round of its own. One round "
        "per EM iteration instead of two; the same bits. Off: a round per call.",
        setting=True,
    ),
    Option(
        "speculation",
        bool,
        True,
        "idle workers compute copies of a slow worker's outstanding shards",
        about="Idle workers compute copies of a slow worker's outstanding shards within a round "
        "(policy/speculation_plan.py): once some worker has nothing left, a worker whose pace is more "
        "than speculation_multiplier times the median has the tail of its queue copied to the idle "
        "ones; the first result of a shard is folded, the others dropped, and the slow worker is told "
        "to skip what was won. The same bits either way; a failure-free round with no straggler "
        "copies nothing.",
        setting=True,
        job=True,
    ),
    Option(
        "speculation_multiplier",
        float,
        1.5,
        "a worker is slow when its pace exceeds this times the median",
        about="A worker is a straggler when its seconds per shard exceed this times the median worker's "
        "(Spark's default, 1.5; bench/results/stragglers.md has the scatter of equal workers).",
        setting=True,
        positive=True,
    ),
    Option(
        "cores",
        int,
        0,
        "cores of the driver's host that its ranks share (0: what its affinity allows)",
        about="Cores of the driver's host that its ranks share (0: what the process's affinity allows). "
        "With more ranks there than cores, a rank that shares a core looks slower without being so: "
        "speculation_multiplier is raised by ranks / cores, and paces within that factor count as "
        "equal for placement. Set it where ranks do not compete for cores (they wait on I/O or sleep).",
        setting=True,
        at_least=0,
    ),
    Option(
        "driver_computes",
        bool,
        True,
        "the driver (rank 0) computes a worker's share of the shards itself: "
        "every rank computes, as in mixle's own MPI handle; a failure seen in "
        "a round is acted on once the driver's current shard is done. Only "
        "while that share is at most MIXLE_MPI_DRIVER_SHARE_MAX_BYTES (1 MiB) "
        "stored: above, the driver holds no data",
        about="The driver computes a worker's share of the shards itself (policy/placement.py, driver_share), "
        "as mixle's own MPI handle has every rank compute: a job of n ranks then has n E-step "
        "processes, not n - 1, and on a node with as many ranks as cores the driver no longer wakes a "
        "worker's core for each message. Costs: a failure seen during a round is acted on once the "
        "driver's current shard is done, and the driver holds its share encoded. The same bits either "
        "way.",
        setting=True,
        job=True,
    ),
    Option(
        "driver_share_max_bytes",
        int,
        1 << 20,
        "the most stored bytes of the driver's share",
        about="only while that share is small: at most this many stored bytes. A round's fixed cost weighs "
        "where rounds are short, that is where shards are small. An E-step's temporaries are many "
        "times its data (a 1-D GMM share of 2.7 MB stored raised the driver's peak by 63 MB), so above "
        "this the driver holds no data and its memory stays flat in N (bench/results/report.md, item 4).",
        setting=True,
        at_least=0,
    ),
    # -- checkpoints -------------------------------------------------------------------
    Option(
        "checkpoint",
        str,
        AUTO,
        "HDF5 checkpoint path; an existing one is resumed (none, or --no-checkpoint: "
        "no checkpoints)",
        short="where the checkpoint goes; an existing one is resumed",
        job=True,
        none_ok=True,
        metavar="PATH",
        default_text="OUT_DIR/checkpoint.h5",
        fitjob=FitjobFlag(None, "HDF5 checkpoint path (resumes when it exists)"),
    ),
    Option(
        "checkpoint_every",
        int,
        None,
        "also a checkpoint every this many iterations, besides the first one and the clock's",
        job=True,
        at_least=1,
        metavar="N",
        fitjob=FitjobFlag(1, "iterations between checkpoints"),
    ),
    Option(
        "checkpoint_seconds",
        float,
        None,
        "a checkpoint every this many seconds instead of the default clock (given, exactly as asked: no early first write, no 2 percent cap)",
        job=True,
        positive=True,
        metavar="SEC",
        default_text="after the first iteration, then every 60 s, at most 2 percent of the time",
        fitjob=FitjobFlag(None, "seconds between checkpoints"),
    ),
    Option(
        "resume",
        str,
        "auto",
        "auto (resume if a checkpoint exists), yes (require one) or no (start afresh)",
        short="auto, yes (require a checkpoint) or no (afresh)",
        job=True,
        choices=("auto", "yes", "no"),
        metavar="MODE",
        fitjob=FitjobFlag("auto"),
    ),
    Option(
        "allow_version_change",
        bool,
        False,
        "resume a checkpoint that another version of mixle_mpi, mixle or numpy, or another "
        "numeric baseline (CPU numerics), wrote",
        job=True,
        fitjob=FitjobFlag(False),
    ),
    Option(
        "fold_journal",
        bool,
        False,
        "persist each round's received shard payloads (resume mid-round)",
        fitjob=FitjobFlag(False),
    ),
    # -- output --------------------------------------------------------------------------
    Option(
        "plot",
        bool,
        False,
        "write fit.png: log-likelihood per iteration with failures and recoveries marked",
        short="write fit.png: log-likelihood, failures marked",
        job=True,
    ),
    Option(
        "progress",
        str,
        "auto",
        "auto (live in a terminal, one line per iteration otherwise), line, live or off",
        job=True,
        choices=("auto", "line", "live", "off"),
        metavar="MODE",
    ),
    Option(
        "keep_store",
        bool,
        False,
        "keep out_dir/work/shards.h5 (a full copy of the data) after a finished fit",
        job=True,
    ),
    Option(
        "memory_check",
        bool,
        True,
        "refuse (exit 2) a fit whose rough memory estimate (as --dry-run prints it) "
        "exceeds this host's memory: the driver's need against what is free, a "
        "worker's against the whole",
        job=True,
    ),
    Option("out", str, None, "write the JSON result here", fitjob=FitjobFlag(None)),
    Option(
        "quiet", bool, False, "no progress lines from mixle's EM loop", fitjob=FitjobFlag(False)
    ),
    # -- environment variables (their order is docs/reference.md's) ---------------------
    Option(
        "log_level",
        str,
        "info",
        "log level of every rank: debug, info (default), warning or error; `-q`/`-v` "
        "set it for the ranks they launch",
        env="MIXLE_MPI_LOG_LEVEL",
        flags=("fit -q", "fit -v"),
    ),
    Option(
        "workdir",
        str,
        "./mixle_mpi_run",
        "the handle's folder for the shard store and the event log (default "
        "`./mixle_mpi_run`; `mixle-mpi fit` uses `<out-dir>/work`)",
        env="MIXLE_MPI_WORKDIR",
        fitjob=FitjobFlag(
            None,
            "the handle's folder for the shard store and the "
            "event log (default: MIXLE_MPI_WORKDIR or "
            "./mixle_mpi_run)",
        ),
    ),
    Option(
        "event_log",
        str,
        None,
        "the event log's path (default `<workdir>/events.jsonl`)",
        env="MIXLE_MPI_EVENT_LOG",
    ),
    Option(
        "prologue",
        str,
        None,
        "shell lines run in bash before a launch with -n, e.g. 'module load openmpi': the "
        "launch takes the environment they leave, and so the mpiexec they put first on PATH",
        about="Shell lines (a TOML multi-line string in a job file) that `mixle-mpi fit -n N` runs in "
        "bash before it launches: `module load` of the site's MPI, the activation of a shared "
        "environment. The launch takes the environment they leave, so the first mpiexec on PATH "
        "after them is the one used. A failing prologue ends the fit before the launch (exit 2). "
        "A batch script runs its own (`mixle-mpi slurm --prologue`).",
        job=True,
        metavar="LINES",
    ),
    Option(
        "mpiexec_args",
        str,
        None,
        "more flags for mpiexec or srun, one shell-quoted string (as `--mpiexec-args`)",
        env="MIXLE_MPI_MPIEXEC_ARGS",
        flags=("fit --mpiexec-args",),
    ),
    Option(
        "allow_many_ranks",
        bool,
        False,
        "1: launch `-n N` even above 4 ranks per core (as `--allow-many-ranks`)",
        env="MIXLE_MPI_ALLOW_MANY_RANKS",
        flags=("fit --allow-many-ranks",),
    ),
    Option(
        "numerics",
        str,
        "auto",
        "auto (each rank's native SIMD and BLAS kernels while every rank's probe agrees; "
        "else the job is launched again under the common baseline, x86-64-v3), baseline "
        "(always the baseline: a mixed partition) or native (never: a homogeneous cluster); "
        "a rank whose numerics still differ from the driver's gets no shard (as `--numerics`)",
        env="MIXLE_MPI_NUMERICS",
        choices=("auto", "baseline", "native"),
        flags=("fit --numerics", "run --numerics"),
    ),
    Option(
        "startup_timeout",
        float,
        120.0,
        "seconds a rank may take to start (MPI init and the handshake) before "
        "the job counts as never started (exit 73)",
        env="MIXLE_MPI_STARTUP_TIMEOUT",
        positive=True,
    ),
    Option(
        "continuation",
        str,
        "auto",
        "auto, ulfm, emulated or keep: force how the job continues after a failure "
        "where that method works (see the user guide)",
        env="MIXLE_MPI_CONTINUATION",
        choices=("auto", "ulfm", "emulated", "keep"),
    ),
    Option(
        "srun_mpi",
        str,
        None,
        "the srun MPI plugin (`pmix` or `pmi2`) when the one detected is not right",
        env="MIXLE_MPI_SRUN_MPI",
    ),
    Option(
        "fault_plan",
        str,
        None,
        "a fault plan (below): for tests and chaos campaigns only",
        env="MIXLE_MPI_FAULT_PLAN",
    ),
    Option(
        "fault_log",
        str,
        None,
        "a file where each fault of an environment plan is recorded as it fires, so "
        "that it fires once per job even when the launcher runs the job again",
        env="MIXLE_MPI_FAULT_LOG",
    ),
    Option(
        "live_progress",
        bool,
        False,
        "set by the launcher: the progress line is rewritten in place (a terminal)",
        env="MIXLE_MPI_LIVE_PROGRESS",
    ),
    Option(
        "engine",
        str,
        "seq",
        "E-step engine: seq (mixle's own path, its bits), fused (one-pass kernels for 1-D, "
        "diagonal, full Gaussian and Poisson mixtures, seq elsewhere) or auto (the fastest that keeps "
        "every promise: fused today)",
        about="Which code computes each shard's E-step and score (core/engine.py). seq: mixle's "
        "seq_update and seq_log_density, bit for bit mixle's multiprocessing backend. fused: one "
        "numba pass gives both for mixtures of 1-D, diagonal or full-covariance Gaussian or Poisson "
        "components (other models: seq); its bits are its own, independent of ranks, failures "
        "and recovery like seq's. auto: fused where a kernel exists.",
        setting=True,
        job=True,
        choices=("auto", "seq", "fused"),
        metavar="ENGINE",
    ),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
SETTINGS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.setting)
JOB: tuple[Option, ...] = tuple(o for o in OPTIONS if o.job)
FITJOB: tuple[Option, ...] = tuple(o for o in OPTIONS if o.fitjob is not None)
ENVIRONMENT: tuple[Option, ...] = tuple(o for o in OPTIONS if o.env is not None)  # not settings

# How `fit --help` lays the job options out: the groups, each in this order (every job
# option in exactly one; tests/test_unit_options.py checks it).
FIT_GROUPS: dict[str, tuple[str, ...]] = {
    "data and model": ("data", "model", "columns", "num_shards", "sub_chunks", "seed", "restarts"),
    "EM": ("max_its", "delta", "init_p", "engine"),
    "resilience": (
        "checkpoint",
        "checkpoint_every",
        "checkpoint_seconds",
        "resume",
        "allow_version_change",
        "failover",
        "spares",
        "max_retries",
        "respawn",
        "respawn_wait",
        "heartbeat_period",
        "heartbeat_timeout",
        "suspect_max_wait",
        "stall_timeout",
        "driver_computes",
        "speculation",
        "memory_check",
    ),
    "output": ("out_dir", "plot", "progress", "keep_store"),
    "site": ("prologue",),
}


def env_var(name: str) -> str:
    """The environment variable of option ``name`` (a KeyError names a typo at import time)."""
    var = BY_NAME[name].env_var
    assert var, f"option {name!r} is read from no environment variable"
    return var


def show(value) -> str:
    """A default as people read it: on/off, none, 0.4 rather than 0.40000 (pure)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "":
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)
