"""``mixle-mpi demo``: the main job on a built-in default.

It fits a 3-component full-covariance Gaussian mixture to Fisher's Iris measurements
(shipped with the package, see ``mixle_mpi/data/README.md``) twice under MPI: once with no
failure, and once with a worker rank SIGKILLed in the middle of an E-step (a real process,
killed by the fault plan). Then it says what happened to which rank and whether the two
fits are bit-identical.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile

from mixle_mpi.cli.helptext import command
from mixle_mpi.cli.jobconfig import DEMO_JOB
from mixle_mpi.storage.events import describe, read_events

KILL_ROUND = 12


def demo(ranks: int = 4, timeout: float = 600, out_dir: str | None = None) -> int:
    from mixle_mpi.chaos.campaign import compare, launch_fit, read_output
    from mixle_mpi.cli.jobconfig import resolve

    if ranks < 3:
        sys.stderr.write(
            f"mixle-mpi demo: needs -n 3 or more (a driver and at least two workers); found -n {ranks}\n"
        )
        return 2
    cfg = resolve(None, {**DEMO_JOB, "progress": "off"})
    base = out_dir or tempfile.mkdtemp(prefix="mixle_mpi_demo_")
    victim = 2
    plan = f"{victim}:kill:estep_mid:{KILL_ROUND}"
    print(
        f"mixle_mpi demo: {cfg.model} on Fisher's Iris data (150 flowers, 4 measurements), {ranks} ranks "
        f"(1 driver + {ranks - 1} workers), {cfg.num_shards} shards, up to {cfg.max_its} EM iterations"
    )
    print("  1) failure-free fit ...", flush=True)
    c1, s1, _ = launch_fit(cfg, ranks, os.path.join(base, "clean"), "", timeout, [])
    print(
        f"  2) the same fit, worker rank {victim} SIGKILLed in the middle of E-step round {KILL_ROUND} ...",
        flush=True,
    )
    c2, s2, _ = launch_fit(cfg, ranks, os.path.join(base, "chaos"), plan, timeout, [])
    clean, chaos = (
        read_output(os.path.join(base, "clean")),
        read_output(os.path.join(base, "chaos")),
    )
    events_path = os.path.join(base, "chaos", "events.jsonl")
    print("\nWhat happened to which rank (from the event log):")
    for e in read_events(events_path) if os.path.exists(events_path) else []:
        if e["event"] not in ("start", "closed", "checkpoint"):
            print("  " + describe(e))
    if c1 != 0 or c2 != 0 or clean is None or chaos is None:
        print(f"\nFAILED: exit codes {c1} (clean) and {c2} (with failure); logs: {base}/*/job.log")
        return 1
    diffs = compare(clean, chaos)
    print(
        f"\nfinal log-likelihood  failure-free: {clean['summary']['final_ll']!r}\n"
        f"                      with failure: {chaos['summary']['final_ll']!r}"
    )
    print(
        f"iterations: {chaos['summary']['iterations']}; failures survived: {chaos['summary']['failures_survived']}; "
        f"seconds: failure-free {s1:.1f}, with failure {s2:.1f}"
    )
    print(
        f"bit-identical to the failure-free fit: {'yes' if not diffs else 'NO (' + '; '.join(diffs) + ')'}"
    )
    print(
        f"outputs: {base}/clean and {base}/chaos; to see what happened to each rank, run:\n"
        f"  {command()} inspect {shlex.quote(os.path.join(base, 'chaos'))}"
    )
    return 0 if not diffs else 1
