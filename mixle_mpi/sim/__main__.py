"""``python -m mixle_mpi.sim --seed N``: replay one schedule (and say what it did);
``--seeds A B``: run the schedules A..B-1, stopping at the first violation."""

from __future__ import annotations

import argparse
import sys
import time

from mixle_mpi.sim.check import run
from mixle_mpi.sim.schedule import Schedule
from mixle_mpi.sim.world import Violation


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mixle_mpi.sim", description=__doc__)
    ap.add_argument("--seed", type=int, help="replay this schedule and print it and its outcome")
    ap.add_argument(
        "--seeds", type=int, nargs=2, metavar=("FIRST", "END"), help="run schedules FIRST..END-1"
    )
    args = ap.parse_args(argv)
    if args.seed is None and args.seeds is None:
        ap.error("give --seed N or --seeds FIRST END")
    seeds = [args.seed] if args.seed is not None else range(*args.seeds)
    t0 = time.perf_counter()
    try:
        for seed in seeds:
            out = run(Schedule.draw(seed))
            if args.seed is not None:
                print(Schedule.draw(seed))
                print(out)
    except Violation as exc:
        print(f"VIOLATION {exc}", file=sys.stderr)
        return 1
    print(f"{len(seeds)} schedule(s) passed in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
