"""Model broadcast: what sending the round's model point to point costs the driver (issue 13).

Each round the driver pickles the model once (``Task.body``) and posts one non-blocking send
of it per worker. A collective (``Bcast``) or a tree would cost the driver O(log W) sends,
but a collective over a communicator with a dead member can hang (MPICH) or fail for
everyone (ULFM), so it is not safe mid-round. This measures, under MPI with W receivers
that poll with a sleeping backoff like the workers do:

- the driver's CPU and wall per round to post the W sends and see them complete
  (``isend`` + ``Test``, as ``Link.post``/``progress`` do), for bodies of 1 kB to 8 MB;
- the same body with ``comm.bcast`` (not failure-safe: for comparison only).

The built-in models' bodies are 1-7 kB (``bench/results/report.md``, item 7: 4.4, 25 and
5.5 kB sent down per iteration to W = 2 for gmm1d, diag and hmm, two rounds each).

From the per-destination cost c(B) it reports the largest W for which the driver's sends
stay within 5 % of a 100 ms E-step (W x c(B) <= 5 ms): up to there point to point is
fine; beyond it, for that body size, a tree would pay.

    python -m mixle_mpi run -n 5 -- python bench/broadcast.py [--reps 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from mpi4py import MPI

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 23)
TAG = 7


def backoff_recv(comm, source: int = 0, tag: int = TAG):
    delay = 1e-5
    while True:
        msg = comm.improbe(source=source, tag=tag)
        if msg is not None:
            return msg.recv()
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


def p2p_round(comm, body: bytes, dests: list[int]) -> None:
    reqs = [comm.isend(body, dest=d, tag=TAG) for d in dests]
    while reqs:
        reqs = [r for r in reqs if not r.Test()]
        if reqs:
            time.sleep(1e-4)


def driver(comm, reps: int) -> dict:
    dests = list(range(1, comm.Get_size()))
    out = {}
    for size in SIZES:
        body = os.urandom(size)
        for method in ("p2p", "bcast"):
            cpu, wall = [], []
            for _ in range(reps):
                c0, w0 = time.thread_time(), time.perf_counter()
                if method == "p2p":
                    p2p_round(comm, body, dests)
                else:
                    comm.bcast(body, root=0)
                cpu.append(time.thread_time() - c0)
                wall.append(time.perf_counter() - w0)
                for d in dests:  # every worker has it: the next round starts clean
                    backoff_recv(comm, source=d, tag=TAG + 2)
            out[f"{method}:{size}"] = {
                "cpu_ms": statistics.median(cpu) * 1e3,
                "wall_ms": statistics.median(wall) * 1e3,
            }
    return out


def worker(comm, reps: int) -> None:
    for _ in SIZES:
        for method in ("p2p", "bcast"):
            for _ in range(reps):
                if method == "p2p":
                    backoff_recv(comm)
                else:
                    comm.bcast(None, root=0)
                comm.send(None, dest=0, tag=TAG + 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_rank() != 0:
        worker(comm, args.reps)
        return 0
    res = driver(comm, args.reps)
    w = comm.Get_size() - 1
    rows = []
    for size in SIZES:
        p, b = res[f"p2p:{size}"], res[f"bcast:{size}"]
        per_dest = p["cpu_ms"] / w
        rows.append(
            {
                "bytes": size,
                "p2p_cpu_ms": p["cpu_ms"],
                "p2p_wall_ms": p["wall_ms"],
                "bcast_cpu_ms": b["cpu_ms"],
                "bcast_wall_ms": b["wall_ms"],
                "p2p_cpu_ms_per_worker": per_dest,
                "max_w_within_5pct_of_100ms": int(5.0 / per_dest) if per_dest > 0 else None,
            }
        )
    report = {
        "workers": w,
        "reps": args.reps,
        "mpi": MPI.Get_library_version().splitlines()[0],
        "rows": rows,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
