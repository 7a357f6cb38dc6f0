"""The ``mixle-mpi`` command (also ``python -m mixle_mpi``)."""

from __future__ import annotations

import argparse
import sys

from mixle_mpi.errors import MixleMPIError


def _run(args) -> int:
    from mixle_mpi.launcher import run

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return run(args.n, cmd, mpiexec=args.mpiexec, flavor=args.mpi, timeout=args.timeout,
               blas_threads=args.blas_threads)


def _demo(args) -> int:
    from mixle_mpi.demo import demo

    return demo(n=args.n, ranks=args.ranks, model=args.model, timeout=args.timeout)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mixle-mpi", description="Resilient MPI EM for mixle.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="launch a command under mpiexec with the flags each MPI needs")
    r.add_argument("-n", type=int, required=True, help="number of ranks (driver + workers)")
    r.add_argument("--mpi", choices=["openmpi", "mpich"], default=None, help="default: detected")
    r.add_argument("--mpiexec", default=None, help="default: the one beside this Python, else PATH")
    r.add_argument("--timeout", type=float, default=None, help="kill the job after this many seconds")
    r.add_argument("--blas-threads", type=int, default=1)
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python script.py [args]")
    r.set_defaults(func=_run)
    d = sub.add_parser("demo", help="fit a built-in model, kill a worker mid-fit, check the bits")
    d.add_argument("--n", type=int, default=200000)
    d.add_argument("--ranks", type=int, default=4)
    d.add_argument("--model", default="gmm1d")
    d.add_argument("--timeout", type=float, default=600)
    d.set_defaults(func=_demo)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MixleMPIError as exc:
        sys.stderr.write(f"mixle-mpi: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
