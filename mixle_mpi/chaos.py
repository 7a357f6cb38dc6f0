"""``mixle-mpi chaos``: a randomized fault campaign against a failure-free reference.

The fit runs once with no fault, then ``runs`` times, each under a random fault plan
(:mod:`mixle_mpi.faults`): a real worker process SIGKILLs or SIGSTOPs itself at a random
phase of a random round, a second worker dies while recomputing the first one's shards, a
respawned worker dies again, or two workers die in one round. Every run must end with the
reference's exact model and log-likelihood trace. Plans come from a seeded generator (pure,
unit-tested), so a campaign that found a bug can be replayed with the same seed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace

from mixle_mpi.atomicjson import write_json
from mixle_mpi.errors import ConfigError
from mixle_mpi.events import read_events
from mixle_mpi.jobconfig import FitConfig, to_argv

SINGLE_PHASES = ("init", "estep_before", "estep_mid", "estep_after_reply", "llsum")
ACTIONS = ("kill", "stop")
KINDS = ("single", "repeat", "respawn", "recovery", "double")  # the last two need 3+ workers
RECONFIG_EVENTS = ("recovery", "shrink", "shrink_fallback", "respawned", "blacklisted", "migrated")


@dataclass(frozen=True)
class ChaosRun:
    index: int
    kind: str
    plan: str
    faults: int


def random_plans(rng: random.Random, runs: int, workers: int, rounds: int) -> list[ChaosRun]:
    """``runs`` fault plans for ``workers`` workers and a fit of ``rounds`` E-step rounds (pure).

    Kinds cycle so that every kind appears in a short campaign; workers, actions, phases and
    rounds are drawn from ``rng``.
    """
    if workers < 2:
        raise ConfigError(f"a chaos campaign needs at least 2 workers (-n 3 or more); found {workers}")
    if runs < 1:
        raise ConfigError(f"--runs must be >= 1; found {runs}")
    kinds = KINDS if workers >= 3 else KINDS[:3]
    rounds = max(1, rounds)
    out = []
    for i in range(runs):
        kind = kinds[i % len(kinds)]
        a, b = rng.sample(range(1, workers + 1), 2)
        c = rng.randrange(rounds)
        act = rng.choice(ACTIONS)
        if kind == "single":
            phase = rng.choice(SINGLE_PHASES)
            items = [f"{a}:{act}:{phase}:{0 if phase in ('init', 'llsum') else c}"]
        elif kind == "repeat":  # the replacement dies in a later round
            c = rng.randrange(max(1, rounds - 1))
            later = c + 1 + rng.randrange(max(1, rounds - c - 1))
            items = [f"{a}:kill:estep_mid:{c}:0", f"{a}:{act}:estep_before:{later}:1"]
        elif kind == "respawn":  # the replacement dies while being respawned
            items = [f"{a}:kill:estep_mid:{c}:0", f"{a}:kill:respawn:0:1"]
        elif kind == "recovery":  # b dies while recomputing a's orphaned shards
            items = [f"{a}:{act}:estep_mid:{c}:0", f"{b}:kill:estep_before:{c}:0:recovery"]
        else:  # two deaths in one round
            items = [f"{a}:kill:estep_mid:{c}", f"{b}:{act}:estep_after_reply:{c}"]
        out.append(ChaosRun(i + 1, kind, ",".join(items), len(items)))
    return out


def compare(reference: dict, result: dict) -> list[str]:
    """What differs between two fit outputs; empty when bit-identical (pure)."""
    diffs = []
    if reference["model"] != result["model"]:
        diffs.append("model.json differs")
    ref_ll, got_ll = reference["summary"]["ll"], result["summary"]["ll"]
    if ref_ll != got_ll:
        first = next((i for i, (x, y) in enumerate(zip(ref_ll, got_ll)) if x != y), min(len(ref_ll), len(got_ll)))
        diffs.append(f"log-likelihood trace differs from iteration {first + 1}")
    return diffs


def recovery_seconds(events: list[dict]) -> float | None:
    """From the first detected failure to the last reconfiguration event after it (pure)."""
    fails = [e["time"] for e in events if e.get("event") == "failure_detected"]
    if not fails:
        return None
    after = [e["time"] for e in events if e.get("event") in RECONFIG_EVENTS and e["time"] >= fails[0]]
    return (max(after) if after else fails[-1]) - fails[0]


def read_output(out_dir: str) -> dict | None:
    try:
        with open(os.path.join(out_dir, "model.json"), encoding="utf-8") as fh:
            model = fh.read()
        with open(os.path.join(out_dir, "summary.json"), encoding="utf-8") as fh:
            summary = json.load(fh)
    except (OSError, ValueError):
        return None
    return {"model": model, "summary": summary}


def launch_fit(cfg: FitConfig, n: int, out_dir: str, plan: str, timeout: float, launch: list[str]) -> tuple[int, float, bool]:
    """Run ``mixle-mpi fit -n n`` under fault plan ``plan``, output to ``out_dir/job.log``:
    (exit code, seconds, hung)."""
    os.makedirs(out_dir, exist_ok=True)
    run_cfg = replace(cfg, out_dir=out_dir)
    cmd = [sys.executable, "-m", "mixle_mpi", "fit", "-n", str(n), "--timeout", str(timeout), *launch, *to_argv(run_cfg)]
    env = {**os.environ, "MIXLE_MPI_FAULT_PLAN": plan}
    env.pop("MIXLE_MPI_LIVE_PROGRESS", None)
    t0 = time.perf_counter()
    with open(os.path.join(out_dir, "job.log"), "w", encoding="utf-8") as log:
        try:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout + 60).returncode
        except subprocess.TimeoutExpired:
            code = -1
    seconds = time.perf_counter() - t0
    return code, seconds, seconds >= timeout


def campaign(cfg: FitConfig, *, n: int, runs: int, seed: int, out_dir: str, run_timeout: float | None = None,
             launch: list[str] | None = None, stream=sys.stdout) -> int:
    """Run the campaign; print the table; 0 when every run is bit-identical, else 1."""
    if n < 3:
        raise ConfigError(f"a chaos campaign needs -n 3 or more (a driver and 2+ workers); found -n {n}")
    launch = launch or []
    cfg = replace(cfg, checkpoint=None, plot=False, progress="off", restarts=1)
    w = stream.write
    w(f"chaos: reference run (no faults), {n} ranks, out_dir {out_dir}\n")
    stream.flush()
    code, ref_seconds, hung = launch_fit(cfg, n, os.path.join(out_dir, "reference"), "", run_timeout or 600, launch)
    reference = read_output(os.path.join(out_dir, "reference"))
    if code != 0 or reference is None:
        w(f"chaos: the reference run failed (exit {code}{', hung' if hung else ''}); see "
          f"{os.path.join(out_dir, 'reference', 'job.log')}\n")
        return 1
    rounds = reference["summary"]["iterations"]
    timeout = run_timeout or (10 * ref_seconds + 60)
    plans = random_plans(random.Random(seed), runs, n - 1, rounds)
    w(f"chaos: reference took {ref_seconds:.1f}s, {rounds} iterations; {runs} fault runs (seed {seed}, "
      f"hang deadline {timeout:.0f}s each)\n")
    width = max(len(p.plan) for p in plans)
    header = f"{'run':>3}  {'kind':<8} {'plan':<{width}} {'fired':>5}  {'outcome':<10} {'identical':<9} {'recovery s':>10} {'wall s':>7}"
    w(header + "\n" + "-" * len(header) + "\n")
    stream.flush()
    rows, bad = [], 0
    for run in plans:
        rdir = os.path.join(out_dir, f"run-{run.index:03d}")
        code, seconds, hung = launch_fit(cfg, n, rdir, run.plan, timeout, launch)
        result = read_output(rdir)
        events = read_events(os.path.join(rdir, "events.jsonl")) if os.path.exists(os.path.join(rdir, "events.jsonl")) else []
        fired = sum(1 for e in events if e.get("event") == "failure_detected")
        diffs = compare(reference, result) if (code == 0 and result is not None) else []
        if hung:
            outcome = "HUNG"
        elif code != 0 or result is None:
            outcome = f"FAILED({code})"
        else:
            outcome = "DIVERGED" if diffs else "ok"
        identical = "yes" if outcome == "ok" else ("NO" if outcome == "DIVERGED" else "-")
        rec = recovery_seconds(events)
        bad += outcome != "ok"
        row = {**asdict(run), "fired": fired, "outcome": outcome, "identical": outcome == "ok", "diffs": diffs,
               "recovery_seconds": rec, "wall_seconds": seconds, "exit_code": code, "out_dir": rdir}
        rows.append(row)
        w(f"{run.index:>3}  {run.kind:<8} {run.plan:<{width}} {fired:>5}  {outcome:<10} {identical:<9} "
          f"{'-' if rec is None else f'{rec:.2f}':>10} {seconds:>7.1f}\n")
        stream.flush()
    report = {"n": n, "seed": seed, "runs": rows, "reference_seconds": ref_seconds, "rounds": rounds,
              "config": asdict(cfg), "ok": bad == 0}
    write_json(os.path.join(out_dir, "campaign.json"), report, indent=1)
    w(f"chaos: {len(plans) - bad}/{len(plans)} runs bit-identical to the reference"
      + ("" if bad == 0 else f"; {bad} FAILED: see job.log in their folders") + f"; report in {out_dir}/campaign.json\n")
    return 0 if bad == 0 else 1


def campaign_from_args(args) -> int:
    from mixle_mpi.demo import DEMO_JOB
    from mixle_mpi.jobconfig import from_args

    if getattr(args, "data", None) is None and getattr(args, "config", None) is None:
        for key, value in DEMO_JOB.items():  # no data given: the built-in demo job
            if getattr(args, key, None) is None:
                setattr(args, key, value)
    cfg = from_args(args)
    n = args.n or 4
    out_dir = cfg.out_dir if cfg.out_dir != FitConfig.out_dir else tempfile.mkdtemp(prefix="mixle_mpi_chaos_")
    launch = (["--mpi", args.mpi] if args.mpi else []) + (["--mpiexec", args.mpiexec] if args.mpiexec else [])
    return campaign(cfg, n=n, runs=args.runs, seed=args.campaign_seed, out_dir=out_dir,
                    run_timeout=args.run_timeout, launch=launch)
