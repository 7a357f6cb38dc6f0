"""Running one parsed subcommand the way every entry point does: a user's mistake
(a MixleMPIError) is one line and exit 2, not a traceback. Shared by ``mixle-mpi`` and the
``python -m mixle_mpi.cli.slurm`` / ``python -m mixle_mpi.cli.collect`` module entry points."""

from __future__ import annotations

import argparse
import sys

from mixle_mpi.core import exitcodes, logs
from mixle_mpi.core.errors import MixleMPIError


def run_command(args, name: str) -> int:
    try:
        return args.func(args)
    except MixleMPIError as exc:
        if getattr(args, "spmd", False):
            raise  # under MPI, errors end the job through mixle_mpi.runtime.exiting
        sys.stderr.write(f"mixle-mpi {name}: error: {logs.clean(str(exc))}\n")
        return exitcodes.BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C before the launcher took it over: nothing was running yet
        if getattr(args, "spmd", False):
            raise
        sys.stderr.write(f"mixle-mpi {name}: interrupted (Ctrl-C)\n")
        return exitcodes.INTERRUPTED


def module_main(name: str, doc: str, add_arguments, argv=None) -> int:
    """``python -m mixle_mpi.<name>``: the same as ``mixle-mpi <name>``."""
    p = argparse.ArgumentParser(
        prog=f"python -m mixle_mpi.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    from mixle_mpi.cli import argvfix

    argv, warnings = argvfix.rewrite(name, list(sys.argv[1:] if argv is None else argv))
    for warning in warnings:
        sys.stderr.write(f"python -m mixle_mpi.{name}: warning: {warning}\n")
    args, unknown = p.parse_known_args(argv)
    if unknown:
        p.error(
            f"unrecognized arguments: {' '.join(unknown)}"
            + argvfix.suggestion(unknown, argvfix.flags_in(p.format_help()))
        )
    return run_command(args, name)
