"""The ``mixle-mpi`` command (also ``python -m mixle_mpi``).

Subcommands: ``fit`` (one resilient fit), ``run`` (the launcher), ``chaos`` (a randomized
fault campaign against a failure-free reference), ``inspect`` (a shard store, checkpoint,
event log or output folder, for a human) and ``demo`` (the built-in default).
"""

from __future__ import annotations

import argparse
import os
import sys

from mixle_mpi.chaos.external_plan import window_from_text
from mixle_mpi.cli.cmdrun import run_command
from mixle_mpi.core.errors import ConfigError

CONTINUATION_HELP = (
    "After a worker dies, the fit continues in one of three ways, chosen at the start and logged "
    '("after a failure: continue by ..."): ulfm, Open MPI\'s Comm.Shrink (mpiexec --with-ft ulfm, what '
    "`mixle-mpi run` starts for Open MPI); emulated, Create_from_group over the survivors (MPICH, under mpiexec "
    "or srun --mpi=pmi2; Open MPI without ULFM); keep, the original communicator is kept and the dead rank is "
    "never addressed again (srun --mpi=pmix with Open MPI, where neither of the others works). Under srun no "
    "replacement is spawned: a hot spare (--spares) takes the dead worker's place, or else its shards move to "
    "the survivors. MIXLE_MPI_CONTINUATION="
    "auto|ulfm|emulated|keep forces a method where it works."
)


def _kill_window(text: str):
    """argparse's reading of ``--kill-window`` (a bad value is a usage error that says why)."""
    try:
        return window_from_text(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_launch_options(p, required_n: bool = False, full_help: bool = True) -> None:
    """How the ranks are launched. ``full_help`` False: only -n and --launcher are described."""
    more = (lambda text: text) if full_help else (lambda text: argparse.SUPPRESS)
    p.add_argument(
        "-n",
        type=int,
        required=required_n,
        default=None,
        help="number of ranks: the driver, which also computes a share unless "
        "--no-driver-computes, and n-1 workers"
        if required_n
        else "N ranks: the driver and N-1 workers (default: none)",
    )
    p.add_argument(
        "--launcher",
        dest="mpi",
        choices=["openmpi", "mpich", "srun"],
        default=None,
        help="how ranks start (was --mpi): mpiexec of Open MPI or MPICH, or srun; "
        "default: detected from --mpiexec; srun launches with srun --mpi=pmix (Open MPI) or "
        "--mpi=pmi2 (MPICH), --kill-on-bad-exit=0 --wait=0 --no-kill: no ULFM, and a worker death is "
        "survived without respawn"
        if full_help
        else "default: detected from the mpiexec found",
    )
    p.add_argument(
        "--mpiexec",
        default=None,
        help=more(
            "default: the first mpiexec on PATH (a loaded module's), else the one beside this Python "
            "(an MPI wheel's)"
        ),
    )
    p.add_argument(
        "--mpiexec-args",
        default=None,
        metavar="FLAGS",
        help=more(
            "more flags for mpiexec (or srun), one shell-quoted string, put before -n: e.g. "
            "'--hostfile hosts --map-by slot' to place ranks on several hosts (or "
            "MIXLE_MPI_MPIEXEC_ARGS)"
        ),
    )
    p.add_argument(
        "--timeout", type=float, default=None, help=more("kill the job after this many seconds")
    )
    p.add_argument(
        "--start-retries",
        type=int,
        default=1,
        help=more(
            "launch again, up to this many times, a job that never started (exit 73: a rank "
            "died or hung while starting; nothing was computed)"
        ),
    )
    p.add_argument(
        "--max-restarts",
        dest="resume_retries",
        type=int,
        default=1,
        help=more(
            "launch again, up to this many times (was --resume-retries), a job whose driver "
            "could not reconfigure after a failure (exit 74, e.g. a replacement that died inside "
            "MPI_Comm_spawn under MPICH), or whose checkpoint write timed out (exit 77): it "
            "resumes from its checkpoint"
        ),
    )
    p.add_argument(
        "--max-host-failures",
        type=int,
        default=host_defaults()[0],
        help=more(
            "a launch over several hosts that loses one is launched again without it, from its "
            "checkpoint, up to this many host losses (default: %(default)s)"
        ),
    )
    p.add_argument(
        "--host-cooldown",
        type=float,
        default=host_defaults()[1],
        metavar="SECONDS",
        help=more(
            "a host left out after a loss may come back this many seconds later, if it answers "
            "(default: %(default)s)"
        ),
    )
    p.add_argument(
        "--allow-many-ranks",
        action="store_true",
        help=more(
            "launch -n N even when N is more than 4 ranks per core of this machine (refused by "
            "default as a likely typo; or set MIXLE_MPI_ALLOW_MANY_RANKS=1) (default: off)"
        ),
    )
    p.add_argument(
        "--numerics",
        choices=("auto", "baseline", "native"),
        default=None,
        help=more(
            "auto: each rank's native SIMD and BLAS kernels while every rank's numerics probe "
            "agrees, else launch again under the common baseline (x86-64-v3); baseline: always "
            "(a partition of mixed CPUs); native: never (a homogeneous cluster). A rank whose "
            "numerics still differ from the driver's gets no shard (or set MIXLE_MPI_NUMERICS) "
            "(default: auto)"
        ),
    )


def host_defaults() -> tuple[int, float]:
    from mixle_mpi.launch import host_plan

    return host_plan.DEFAULT_MAX_HOST_FAILURES, host_plan.DEFAULT_HOST_COOLDOWN


def _host_options(args) -> dict:
    return {"max_host_failures": args.max_host_failures, "host_cooldown": args.host_cooldown}


def _add_log_options(p) -> None:
    p.add_argument(
        "-q", "--quiet", action="store_true", help="log only warnings and errors (default: off)"
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log everything, also each checkpoint and the launch details "
        "(default: off; MIXLE_MPI_LOG_LEVEL=debug)",
    )


def _flag_level(args) -> int | None:
    """The log level -q/-v ask for; None when neither was given (the environment decides)."""
    from mixle_mpi.core import logs

    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    return logs.level_from(quiet, verbose)[0] if quiet or verbose else None


def _rank_env(args) -> dict:
    """The log level of -q/-v and the numerics mode for every rank, through the environment
    they inherit."""
    from mixle_mpi.core import logs, numerics

    level = _flag_level(args)
    env = {} if level is None else {logs.LEVEL_ENV: logs.level_name(level)}
    if getattr(args, "numerics", None):
        env[numerics.MODE_ENV] = args.numerics
    return env


def _mpiexec_args(args) -> list[str]:
    """--mpiexec-args, else MIXLE_MPI_MPIEXEC_ARGS, split as a shell would."""
    import shlex

    text = (
        args.mpiexec_args
        if args.mpiexec_args is not None
        else os.environ.get("MIXLE_MPI_MPIEXEC_ARGS", "")
    )
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(
            f"--mpiexec-args (or MIXLE_MPI_MPIEXEC_ARGS) is not valid shell quoting: {exc}; found {text!r}"
        ) from None


def _run(args) -> int:
    from mixle_mpi.launch.launcher import is_own_fit, run

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return run(
        args.n,
        cmd,
        mpiexec=args.mpiexec,
        flavor=args.mpi,
        timeout=args.timeout,
        extra=_mpiexec_args(args),
        blas_threads=args.blas_threads,
        start_retries=args.start_retries,
        env=_rank_env(args),
        allow_many_ranks=args.allow_many_ranks,
        resume_retries=args.resume_retries,
        own_job=is_own_fit(cmd),
        **_host_options(args),
    )


def _fit(args) -> int:
    from mixle_mpi.cli import fitcmd
    from mixle_mpi.cli.jobconfig import from_args, to_argv

    cfg = from_args(args)
    if args.n is not None and not fitcmd.under_mpi_launcher():
        from mixle_mpi.cli import preflight
        from mixle_mpi.cli.restartpaths import restart_checkpoints
        from mixle_mpi.core.joblock import check_file_free, check_free
        from mixle_mpi.launch import prologue
        from mixle_mpi.launch.launcher import run

        preflight.check(
            cfg
        ).raise_any()  # every problem of the data and model: exit 2 before MPI starts
        check_free(cfg.out_dir, "output")  # another fit there: exit 2 before MPI starts
        for path in restart_checkpoints(cfg.checkpoint, cfg.restarts) if cfg.checkpoint else ():
            check_file_free(path, "checkpoint")  # another fit's checkpoint: the same
        site = prologue.environment(cfg.prologue, dict(os.environ)) if cfg.prologue else {}
        return run(
            args.n + (cfg.spares or 0),
            [sys.executable, "-m", "mixle_mpi", "fit", *to_argv(cfg)],
            mpiexec=args.mpiexec,
            extra=_mpiexec_args(args),
            flavor=args.mpi,
            timeout=args.timeout,
            start_retries=args.start_retries,
            env={**site, **_rank_env(args)},
            allow_many_ranks=args.allow_many_ranks,
            resume_retries=args.resume_retries,
            own_job=True,
            fewest=2 + (cfg.spares or 0),
            **_host_options(args),
        )
    if not fitcmd.under_mpi_launcher():
        raise ConfigError(
            "fit runs on several MPI ranks: give -n N (e.g. -n 4: a driver and 3 workers), "
            "or start it under mpiexec/srun"
        )
    args.spmd = (
        True  # under MPI, errors end the job through mixle_mpi.runtime.exiting, not in main()
    )
    from mixle_mpi.core import jitcache

    jitcache.prime()  # before mixle is imported: load the kernels, never compile them here
    return fitcmd.run(cfg)


def _chaos(args) -> int:
    if args.external:
        from mixle_mpi.chaos.external import campaign_from_args
    else:
        from mixle_mpi.chaos.campaign import campaign_from_args
    return campaign_from_args(args)


def _inspect(args) -> int:
    from mixle_mpi.cli.inspector import inspect_paths

    return inspect_paths(args.paths, sys.stdout)


def _demo(args) -> int:
    from mixle_mpi.cli.demo import demo

    return demo(ranks=args.ranks, timeout=args.timeout, out_dir=args.out_dir)


def build_parser(full_help: bool = False) -> argparse.ArgumentParser:
    """The whole command. ``full_help``: ``fit --help`` describes every option (``--help-all``)."""
    from mixle_mpi.cli import helptext, status
    from mixle_mpi.cli.dryrun import dry_run
    from mixle_mpi.cli.jobconfig import add_fit_options

    p = argparse.ArgumentParser(prog="mixle-mpi", description="Resilient MPI EM for mixle.")
    sub = p.add_subparsers(dest="command", required=True)
    p.subcommands = sub.choices  # each subcommand's parser, for main's suggestions

    f = sub.add_parser(
        "fit",
        help="fit a model to HDF5/.npy/CSV data on MPI ranks (survives rank failures)",
        usage=None if full_help else "mixle-mpi fit [-n N] --data DATA --model MODEL [options]",
        description="Fit a model by EM on MPI ranks. With -n N it launches itself; under "
        "mpiexec/srun every rank runs this command. Options may come from a TOML job "
        "file (--config); flags override it.",
        epilog=CONTINUATION_HELP
        if full_help
        else "--help-all shows every option; docs/user-guide.md explains them.",
    )
    launch = f.add_argument_group("launch")
    _add_launch_options(launch, full_help=full_help)
    launch.add_argument(
        "--dry-run",
        dest="func",
        action="store_const",
        const=dry_run,
        default=argparse.SUPPRESS,
        help="check data, model, layout; print the launch (default: off)",
    )
    _add_log_options(launch)
    add_fit_options(f, full_help=full_help)
    f.set_defaults(func=_fit)

    r = sub.add_parser(
        "run",
        help="launch a command under mpiexec with the flags each MPI needs",
        epilog=CONTINUATION_HELP,
    )
    _add_launch_options(r, required_n=True)
    _add_log_options(r)
    r.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads on every rank (the bits depend on it)",
    )
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python script.py [args]")
    r.set_defaults(func=_run)

    _add_chaos_parser(sub)

    i = sub.add_parser(
        "inspect", help="summarize a shard store, checkpoint, event log or fit output folder"
    )
    i.add_argument(
        "paths",
        nargs="+",
        help="shards.h5, a checkpoint .h5, events.jsonl, summary.json or an out_dir",
    )
    i.set_defaults(func=_inspect)

    d = sub.add_parser(
        "demo", help="fit the built-in Iris data, kill a worker mid-fit, check the bits"
    )
    d.add_argument(
        "-n",
        dest="ranks",
        type=int,
        default=4,
        help="MPI ranks (was --ranks): 1 driver + the workers",
    )
    d.add_argument(
        "--timeout", type=float, default=600, help="seconds before each of the two fits is ended"
    )
    d.add_argument("--out-dir", default=None, help="default: a new temporary folder")
    d.set_defaults(func=_demo)

    for register in _extensions():
        register(sub)
    status.add_subcommand(sub)
    p.add_argument("--version", action="version", version=f"%(prog)s {helptext.version()}")
    for name, text in helptext.DESCRIPTIONS.items():
        sub.choices[name].description = text
    for parser in (p, *sub.choices.values()):
        helptext.polish(parser)  # defaults shown, docstring markup gone
    return p


def _add_chaos_parser(sub) -> None:
    """``mixle-mpi chaos``: the fault-plan campaign, and with --external kills from outside."""
    from mixle_mpi.cli.jobconfig import add_fit_options

    c = sub.add_parser(
        "chaos",
        help="randomized fault campaign: kill/stop real ranks, check the bits",
        description="Runs the fit once without failures, then --runs times with random faults "
        "(kill or stop a worker at a random phase, deaths during recovery, repeated "
        "deaths), and checks every result is bit-identical. Exits 1 on any "
        "divergence, failure or hang.",
    )
    _add_launch_options(c)
    c.add_argument("--runs", type=int, default=5, help="fault runs after the reference run")
    c.add_argument("--campaign-seed", type=int, default=0, help="seed of the random fault plans")
    c.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before a run counts as hung (default: 10 x the reference run + 60)",
    )
    c.add_argument(
        "--external",
        action="store_true",
        help="kill real processes from outside instead of fault plans: SIGKILL or SIGSTOP of a "
        "worker, two workers, a second death during recovery, or SIGKILL of the driver "
        "(then the same command is rerun and must resume), at random times: 3 in 4 over the "
        "fit, the others over the whole run (see --fit-share); also fails a run whose "
        "processes outlive the launcher (default: off)",
    )
    c.add_argument(
        "--kinds",
        default=None,
        help="with --external: comma-separated kinds, cycled over the runs "
        "(default: worker,two_workers,during_recovery,stop,driver); also host: every worker of "
        "one simulated host SIGKILLed at once (a host is 2 consecutive world ranks here, the "
        "driver alone on its own; needs -n 4 or more)",
    )
    c.add_argument(
        "--kill-window",
        type=_kill_window,
        default=1.0,
        help="with --external: kill times not drawn over the fit are uniform over [0, this x the "
        "reference run's wall time]; 'start': every first kill over the job's start and "
        "shard load (from the launch to just past the reference's started marker)",
    )
    c.add_argument(
        "--kill-window-seconds",
        type=float,
        default=None,
        help="with --external: kill times are uniform over [0, this many seconds] instead "
        "(default: none: --kill-window x the reference run)",
    )
    c.add_argument(
        "--kill-window-from",
        type=float,
        default=0.0,
        help="with --external and --kill-window-seconds: kill times not drawn over the fit start this "
        "many seconds after the launch (default: 0; a replay of a --kill-window start campaign)",
    )
    c.add_argument(
        "--fit-share",
        type=float,
        default=0.75,
        help="with --external: this fraction of the first kills (drawn by the seeded rng) comes at a "
        "time uniform over the reference's fit, counted from the run's own started marker; the "
        "others over the whole run (0: every kill over the whole run; default: 0.75)",
    )
    c.add_argument(
        "--fit-window-seconds",
        type=float,
        default=None,
        help="with --external: fit draws are uniform over [0, this many seconds] after the started "
        "marker (default: none: the reference run's time from its started marker to its end)",
    )
    c.add_argument(
        "--replay",
        default=None,
        help="with --external: run only these runs of the campaign, as numbered in its table "
        "(e.g. 4,7.1: run 4, and run 7's second draw), with the kills they had; give the same "
        "--campaign-seed, --kinds, --kill-window-seconds, --fit-share and --fit-window-seconds "
        "(default: none: every run)",
    )
    c.add_argument(
        "--leftover-seconds",
        type=float,
        default=10.0,
        help="with --external: a process of the job still alive this long after the launcher "
        "exited is a LEFTOVER",
    )
    add_fit_options(c)
    c.set_defaults(func=_chaos)


def _extensions():
    """Subcommands defined beside their modules (templates, collectors)."""
    from mixle_mpi.cli import collect, slurm

    return [slurm.add_subcommand, collect.add_subcommand]


def main(argv=None) -> int:
    from mixle_mpi.core import logs

    argv = list(sys.argv[1:] if argv is None else argv)
    full_help = "--help-all" in argv
    if full_help:
        argv = ["--help" if a == "--help-all" else a for a in argv]
    argv = _renamed(argv)
    parser = build_parser(full_help=full_help)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    logs.setup(_flag_level(args))
    return run_command(args, args.command)


def _renamed(argv: list[str]) -> list[str]:
    """argv with the renamed flags of its subcommand renamed (and a warning for each)."""
    from mixle_mpi.cli import argvfix

    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if at is None:
        return argv
    rest, warnings = argvfix.rewrite(argv[at], argv[at + 1 :])
    for warning in warnings:
        sys.stderr.write(f"mixle-mpi {argv[at]}: warning: {warning}\n")
    return [*argv[: at + 1], *rest]


def _refuse_unknown(parser, command: str, unknown: list[str]) -> None:
    """argparse's usage error, with the closest flag of the subcommand (exits 2)."""
    from mixle_mpi.cli import argvfix

    known = argvfix.flags_in(build_parser(full_help=True).subcommands[command].format_help())
    parser.subcommands[command].error(
        f"unrecognized arguments: {' '.join(unknown)}{argvfix.suggestion(unknown, known)}"
    )


if __name__ == "__main__":
    sys.exit(main())
