"""``mixle-mpi demo``: the main job on a built-in default.

It fits a built-in model twice under MPI: once with no failure and once with a worker
SIGKILLed in the middle of an E-step (a real process, killed by the fault plan), then says
whether the two fits are bit-identical and what happened to which rank.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from mixle_mpi.events import describe, read_events
from mixle_mpi.launcher import run


def _fit(workdir: str, ranks: int, model: str, n: int, its: int, timeout: float, plan: str | None) -> tuple[int, dict | None, list]:
    out = os.path.join(workdir, "result.json")
    events = os.path.join(workdir, "events.jsonl")
    cmd = [sys.executable, "-m", "mixle_mpi.fitjob", "--model", model, "--n", str(n), "--max-its", str(its),
           "--num-shards", str(2 * (ranks - 1)), "--out", out, "--workdir", workdir, "--quiet"]
    env = {"MIXLE_MPI_EVENT_LOG": events, "MIXLE_MPI_FAULT_PLAN": plan or "", "PYTHONWARNINGS": "ignore"}
    code = run(ranks, cmd, timeout=timeout, env=env)
    result = json.load(open(out, encoding="utf-8")) if os.path.exists(out) else None
    return code, result, (read_events(events) if os.path.exists(events) else [])


def demo(n: int = 200000, ranks: int = 4, model: str = "gmm1d", timeout: float = 600, its: int = 12) -> int:
    if ranks < 3:
        sys.stderr.write("mixle-mpi demo: needs --ranks >= 3 (a driver and at least two workers)\n")
        return 2
    victim = 2
    plan = f"{victim}:kill:estep_mid:{its // 2}"
    base = tempfile.mkdtemp(prefix="mixle_mpi_demo_")
    print(f"mixle_mpi demo: {model}, {n} points, {ranks} ranks (1 driver + {ranks - 1} workers), {its} EM iterations")
    print(f"  1) failure-free fit ...", flush=True)
    c1, clean, _ = _fit(os.path.join(base, "clean"), ranks, model, n, its, timeout, None)
    print(f"  2) same fit, worker rank {victim} SIGKILLed mid-E-step in iteration {its // 2 + 1} ...", flush=True)
    c2, chaos, events = _fit(os.path.join(base, "chaos"), ranks, model, n, its, timeout, plan)
    print("\nWhat happened to which rank:")
    for e in events:
        if e["event"] not in ("start", "closed"):
            print("  " + describe(e))
    if c1 != 0 or c2 != 0 or clean is None or chaos is None:
        print(f"\nFAILED: exit codes {c1} (clean) and {c2} (with failure); see the messages above")
        return 1
    identical = clean["model"] == chaos["model"] and clean["ll"] == chaos["ll"]
    print(f"\nfinal log-likelihood  clean: {clean['ll'][-1]!r}\n                 with failure: {chaos['ll'][-1]!r}")
    print(f"failures survived: {sum(chaos['failures'].values())}; seconds: clean {clean['seconds']:.1f}, with failure {chaos['seconds']:.1f}")
    print(f"bit-identical to the failure-free fit: {'yes' if identical else 'NO'}")
    print(f"(work files in {base})")
    return 0 if identical else 1
