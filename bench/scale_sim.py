"""The driver's decisions at scale, with the simulated transport (pure policy, no MPI).

    python bench/scale_sim.py                       # W = 100, 1,000, 10,000 with S = 10 W
    python bench/scale_sim.py --sizes 10000:100000  # one size
    python bench/scale_sim.py --out bench/results/scale_sim.md

For each size it builds the driver's state as the driver holds it in the middle of a
round (``Membership``, the owners from ``initial_placement``, a ``RoundState`` with every
shard dispatched, a ``HeartbeatTracker`` and a ``StallTracker`` watching every worker), then
times each kind of decision with ``time.perf_counter`` (wall) and ``time.thread_time``
(this thread's CPU) over many events and reports the median and the max per event:

- a reply accepted: ``RoundState.accept`` and the ``next_step`` that follows it (Wait);
- a failure and its recovery plan: ``mark_failed``, ``next_step`` -> ``Recover`` (the
  ``placement`` plan for the failed worker's missing shards) and ``sent`` for that plan;
- a lost host: 1 % of the workers fail at once, the same calls;
- a reconfiguration pass: ``reconfig_plan.plan`` for one failed place, the blacklist, and
  ``reconfig_plan.migrate`` (the ``Migrate`` action for its shards), or a respawn;
- a heartbeat tick: ``overdue()`` and ``stalled()`` over all workers (a beat itself is
  ``heard`` + ``observe``, O(1));
- the round's end: ``reused`` and the sorted ``recomputed`` list the driver records;

and the memory of that state (tracemalloc, while it is built). Last, one whole round of the
real driver code in the simulation (``mixle_mpi.sim``: the Driver, its Round and its
reconfiguration against simulated links and a simulated clock), without failures and with
1 % of the workers dying or hanging, divided by W + S, up to ``--sim-max-shards``: the
simulated links are polled one by one (a real job's mailroom drains a shared communicator
with one wildcard probe), so this part grows as W x (W + S) and is run at the smaller sizes. On a shared, loaded box the wall time also counts the time the
scheduler gave to other processes (and a garbage collection may land in any event, as it
would in the driver): the CPU time is the decision's own cost.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mixle_mpi.policy import reconfig_plan  # noqa: E402
from mixle_mpi.policy.heartbeat import HeartbeatTracker, StallTracker  # noqa: E402
from mixle_mpi.policy.membership import Membership  # noqa: E402
from mixle_mpi.policy.placement import initial_placement  # noqa: E402
from mixle_mpi.policy.round_plan import Recover, RoundState, Wait  # noqa: E402
from mixle_mpi.sim.check import run  # noqa: E402
from mixle_mpi.sim.schedule import Schedule  # noqa: E402

TARGET_MS = 50.0
ORDER = (
    "reply accepted (accept + next_step)",
    "failure + recovery plan",
    "lost host (1 % of W at once) + plan",
    "reconfiguration pass + migration",
    "reconfiguration pass + respawn",
    "heartbeat tick (overdue + stalled)",
    "round end (reused, recomputed)",
)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Driver:
    """The driver's policy state for one round, as ``runtime.driver`` holds it."""

    def __init__(self, workers: int, shards: int) -> None:
        self.ids = list(range(1, workers + 1))
        self.membership = Membership(self.ids, 3)
        self.owners = initial_placement(shards, self.ids)
        self.live = {w: 0 for w in self.ids}
        self.rs = RoundState(shards)
        for w, sids in self.rs.own_work(self.owners, self.live).items():
            self.rs.sent(w, 0, sids)
        self.clock = Clock()
        self.beats = HeartbeatTracker(3.0, clock=self.clock)
        self.beats.watch(self.ids)
        self.stalls = StallTracker(10.0, clock=self.clock)
        for w in self.ids:
            self.stalls.observe(w, 0, True)

    def fail(self, workers) -> object:
        for w in workers:
            self.membership.mark_failed(w)
            del self.live[w]
        step = self.rs.next_step(self.owners, self.live)
        if isinstance(step, Recover):
            for w, sids in step.plan.items():
                self.rs.sent(w, self.live[w], sids, True)
        return step


def state_memory(workers: int, shards: int) -> float:
    """MB allocated by the driver's state, built under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    d = Driver(workers, shards)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del d
    gc.collect()
    return size / 2**20


def timed(fn) -> tuple[float, float]:
    """(wall ms by perf_counter, this thread's CPU ms): on a loaded box the wall time also
    counts the time the scheduler gave to other processes; the CPU time is the decision's."""
    c0, t0 = time.thread_time(), time.perf_counter()
    fn()
    t1, c1 = time.perf_counter(), time.thread_time()
    return (t1 - t0) * 1e3, (c1 - c0) * 1e3


def measure(
    workers: int, shards: int, reps: int, seed: int = 1
) -> dict[str, list[tuple[float, float]]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in ORDER}

    # replies: a random pending shard from its assignee, then the step the driver takes next
    d = Driver(workers, shards)
    pending = list(range(shards))
    rng.shuffle(pending)
    for s in pending[: min(reps * 10, shards - 1)]:  # the last reply would end the round
        w, inc = d.rs.assigned[s]

        def reply(d=d, w=w, inc=inc, s=s) -> None:
            assert d.rs.accept(w, inc, s, d.live)
            assert isinstance(d.rs.next_step(d.owners, d.live), Wait)

        out[ORDER[0]].append(timed(reply))

    # failures, one at a time, each recovered at once (the plan is sent)
    d = Driver(workers, shards)
    victims = rng.sample(d.ids, min(reps, workers // 2))
    for w in victims:
        out[ORDER[1]].append(timed(functools.partial(d.fail, [w])))

    # a lost host: 1 % of the workers at once
    for _ in range(max(1, reps // 20)):
        d = Driver(workers, shards)
        host = rng.sample(d.ids, max(1, workers // 100))
        out[ORDER[2]].append(timed(functools.partial(d.fail, host)))

    # reconfiguration passes between rounds: one failed place each
    for respawn in (False, True):
        d = Driver(workers, shards)
        victims = rng.sample(d.ids, min(reps, workers // 2))
        for w in victims:
            d.membership.mark_failed(w)
            del d.live[w]

            def reconfigure(d=d, w=w, respawn=respawn) -> None:
                spares = reconfig_plan.idle_places(d.owners, d.live)
                for a in reconfig_plan.plan(
                    [w], {}, d.membership, respawn, respawn, d.owners, spares
                ):
                    if isinstance(a, reconfig_plan.Respawn):
                        d.live[a.worker] = d.membership.revive(a.worker)
                    elif isinstance(a, reconfig_plan.Blacklist):
                        d.membership.blacklist(a.worker)
                move = reconfig_plan.migrate(d.owners, d.membership.blacklisted(), d.live)
                if move is not None:
                    d.owners = move.owners

            out[ORDER[4 if respawn else 3]].append(timed(reconfigure))

    # heartbeat ticks over all workers (some overdue, some stalled)
    d = Driver(workers, shards)
    for i in range(reps):
        d.clock.t += 0.5
        for w in rng.sample(d.ids, max(1, workers * 9 // 10)):
            d.beats.heard(w)
            d.stalls.observe(w, i, True)
        out[ORDER[5]].append(timed(lambda: (d.beats.overdue(), d.stalls.stalled())))

    # the round's end: what the driver records
    d = Driver(workers, shards)
    d.fail(rng.sample(d.ids, max(1, workers // 100)))
    for s, (w, inc) in list(d.rs.assigned.items()):
        d.rs.accept(w, inc, s, d.live)
    for _ in range(max(3, reps // 10)):
        out[ORDER[6]].append(timed(lambda: (d.rs.reused, sorted(d.rs.recomputed))))
    return out


def whole_round(workers: int, shards: int, failing: int, seed: int = 7) -> tuple[float, float, int]:
    """One simulated round of the real driver code (mixle_mpi.sim: ``failing`` workers die
    or hang) and its reconfiguration: wall ms, CPU ms, polls."""
    rng = random.Random(seed)
    faults = sorted(
        (rng.uniform(0.0, 0.2), w, kind, 5.0 if kind == "hang" else 0.0)
        for w in rng.sample(range(1, workers + 1), failing)
        for kind in [rng.choice(["die", "die", "hang"])]
    )
    schedule = Schedule(
        seed, workers, 0, shards, 1, 3, True, True, False, False, False, 0.0, False, {}, faults
    )
    c0, t0 = time.thread_time(), time.perf_counter()
    out = run(schedule)
    return (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3, out.events


def fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes", default="100:1000,1000:10000,10000:100000", help="W:S pairs, comma-separated"
    )
    ap.add_argument("--reps", type=int, default=200, help="events per kind (replies: 10x)")
    ap.add_argument(
        "--sim-max-shards",
        type=int,
        default=10_000,
        help="run the whole simulated round only up to this S",
    )
    ap.add_argument(
        "--no-gc",
        action="store_true",
        help="measure with the garbage collector off (shows which tails are gen-2 collections)",
    )
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)
    sizes = [tuple(int(x) for x in p.split(":")) for p in args.sizes.split(",")]
    command = "python bench/scale_sim.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.no_gc:
        gc.disable()
    results = {}
    for w, s in sizes:
        t0 = time.time()
        mem = state_memory(w, s)
        times = measure(w, s, args.reps)
        sims = [
            whole_round(w, s, f) if s <= args.sim_max_shards else None
            for f in (0, max(1, w // 100))
        ]
        results[(w, s)] = (mem, times, sims)
        print(f"# W={w} S={s} measured in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)

    head = "| event | " + " | ".join(f"W={w:,} S={s:,}" for w, s in sizes) + " |"
    rule = "|---|" + "---:|" * len(sizes)
    lines = ["Wall time per event (perf_counter), ms: median / max (n events)", "", head, rule]
    for k in ORDER:
        lines.append(
            f"| {k} | "
            + " | ".join(
                "{} / {} (n={})".format(
                    fmt(statistics.median(x[0] for x in results[z][1][k])),
                    fmt(max(x[0] for x in results[z][1][k])),
                    len(results[z][1][k]),
                )
                for z in sizes
            )
            + " |"
        )
    lines += ["", "CPU time per event (this thread), ms: median / max", "", head, rule]
    for k in ORDER:
        lines.append(
            f"| {k} | "
            + " | ".join(
                "{} / {}".format(
                    fmt(statistics.median(x[1] for x in results[z][1][k])),
                    fmt(max(x[1] for x in results[z][1][k])),
                )
                for z in sizes
            )
            + " |"
        )
    lines += ["", "State and whole rounds", "", head, rule]
    lines.append(
        "| driver state memory, MB | " + " | ".join(f"{results[z][0]:.1f}" for z in sizes) + " |"
    )
    for i, what in enumerate(("no failure", "1 % of W die or hang")):
        lines.append(
            f"| one simulated round, {what}: wall ms / CPU ms (polls) | "
            + " | ".join(
                f"{fmt(r[0])} / {fmt(r[1])} ({r[2]:,})" if (r := results[z][2][i]) else "not run"
                for z in sizes
            )
            + " |"
        )
        lines.append(
            f"| one simulated round, {what}: CPU / (W + S), µs | "
            + " | ".join(
                f"{r[1] * 1e3 / sum(z):.1f}" if (r := results[z][2][i]) else "not run"
                for z in sizes
            )
            + " |"
        )
    big = sizes[-1]
    ev = results[big][1]
    wall_med = max(statistics.median(x[0] for x in ev[k]) for k in ORDER)
    cpu_med = max(statistics.median(x[1] for x in ev[k]) for k in ORDER)
    cpu_max = max(max(x[1] for x in ev[k]) for k in ORDER)
    wall_max = max(max(x[0] for x in ev[k]) for k in ORDER)
    load = os.getloadavg()
    text = "\n".join(
        [
            f"Command: `{command.strip()}`",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) when it ended",
            "",
            *lines,
            "",
            f"Largest size W={big[0]:,} S={big[1]:,}, slowest kind of decision: CPU median {fmt(cpu_med)} ms, "
            f"CPU max {fmt(cpu_max)} ms; wall median {fmt(wall_med)} ms, wall max {fmt(wall_max)} ms "
            f"(target <= {TARGET_MS:.0f} ms: {'met' if cpu_max <= TARGET_MS else 'NOT met'} by the CPU time of every event, "
            f"{'met' if wall_med <= TARGET_MS else 'NOT met'} by the wall-time medians, "
            f"{'met' if wall_max <= TARGET_MS else 'not met'} by every wall time)",
        ]
    )
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
