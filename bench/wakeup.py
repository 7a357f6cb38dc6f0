"""Issue 15: what waking a sleeping process costs on this machine, the floor under a round's
fixed cost.

Two processes ping-pong a small datagram over a Unix socket pair, as a driver and a worker
do with a task and its reply (a doorbell ring is such a datagram). Three ways to wait:

- ``sleep``: a blocking ``recv``; the waiting process sleeps and its core may go idle
  (what mixle_mpi's ranks do between messages: they may not spin);
- ``spin``: a non-blocking ``recv`` in a loop; the waiting process never sleeps (what
  mixle's own MPI ranks do inside a collective);
- ``sleep, busy``: as ``sleep``, with a third process computing beside them, so an idle
  core is rarer (3 processes on 2 cores: the driver-idle layout).

Each round trip is two wake-ups. Printed: the median and the 90th percentile of the round
trip in microseconds, and each mode's median against ``spin`` measured in the same run.
A round of mixle_mpi pays at least one round trip (task out, reply back) beyond what a
spinning rank pays; no timing is asserted anywhere.

    python bench/wakeup.py [--trips 2000] [--out bench/results/wakeup.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time

GAP = 0.002  # s between trips: the peer has gone back to waiting (as between rounds)


def _echo(sock: socket.socket, spin: bool, trips: int) -> None:
    sock.setblocking(not spin)
    for _ in range(trips):
        while True:
            try:
                msg = sock.recv(64)
                break
            except BlockingIOError:
                continue
        sock.send(msg)


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x += i * i


def measure(mode: str, trips: int) -> list[float]:
    """Round trips in seconds, ``trips`` of them, with the echoing peer waiting as ``mode``."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ctx = mp.get_context("fork")
    peer = ctx.Process(target=_echo, args=(b, mode == "spin", trips + 10))
    stop = ctx.Event()
    burner = ctx.Process(target=_burn, args=(stop,)) if mode == "sleep, busy" else None
    peer.start()
    if burner:
        burner.start()
    out = []
    try:
        for i in range(trips + 10):
            time.sleep(GAP)
            t0 = time.perf_counter()
            a.send(b"x")
            a.recv(64)
            if i >= 10:  # the first trips warm both processes up
                out.append(time.perf_counter() - t0)
    finally:
        stop.set()
        peer.join(30)
        if burner:
            burner.join(30)
        a.close()
        b.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trips", type=int, default=2000)
    ap.add_argument("--out", default=None, help="write the figures here (JSON)")
    args = ap.parse_args(argv)
    rows = {}
    for mode in ("spin", "sleep", "sleep, busy"):
        rt = sorted(measure(mode, args.trips))
        rows[mode] = {
            "median_us": 1e6 * statistics.median(rt),
            "p90_us": 1e6 * rt[int(0.9 * len(rt))],
            "trips": len(rt),
        }
    base = rows["spin"]["median_us"]
    print(f"round trip of a datagram, {args.trips} trips, {os.cpu_count()} CPUs")
    print("| peer waits by | median us | p90 us | median / spin |")
    print("|---|---:|---:|---:|")
    for mode, r in rows.items():
        print(
            f"| {mode} | {r['median_us']:.1f} | {r['p90_us']:.1f} | {r['median_us'] / base:.1f} |"
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"argv": sys.argv[1:], "cpus": os.cpu_count(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
