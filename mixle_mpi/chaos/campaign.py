"""``mixle-mpi chaos``: a randomized fault campaign against a failure-free reference.

The fit runs once with no fault, then ``runs`` times, each under a random fault plan
(:mod:`mixle_mpi.chaos.fault_plan`): a real worker process SIGKILLs or SIGSTOPs itself at a random
phase of a random round, a second worker dies while recomputing the first one's shards, a
respawned worker dies again, or two workers die in one round. Every run must end with the
reference's exact model and log-likelihood trace, and every planned fault must have fired:
the victim records its fault in ``faults.jsonl`` of the run's folder before it acts
(:func:`mixle_mpi.chaos.fault_actor.record_fired`), and a run whose plan has a fault with no record is
``UNFIRED``, a failure, since it proved nothing. Plans come from a seeded generator (pure,
unit-tested) that picks victims which are sure to reach their fault (workers that hold
shards; for a death during recovery, a survivor that recovery will use), so a campaign
that found a bug can be replayed with the same seed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

from mixle_mpi.chaos.fault_plan import (
    FIRED_ENV,
    Fault,
    needs_replacement_rounds,
    read_fired,
    unfired,
)
from mixle_mpi.cli.jobconfig import FitConfig, moved_to, to_argv
from mixle_mpi.core.atomicfile import write_json
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.policy.placement import initial_placement, plan_recovery
from mixle_mpi.storage.events import read_events

SINGLE_PHASES = (
    "init",
    "estep_before",
    "estep_mid",
    "estep_after_reply",
    "llsum",
    "load",
)  # load: its first, at the start
ACTIONS = ("kill", "stop")
KINDS = (
    "single",
    "repeat",
    "respawn",
    "recovery",
    "double",
)  # the last two need 3+ workers, 2 holding shards
RECONFIG_EVENTS = (
    "recovery",
    "shrink",
    "shrink_fallback",
    "kept",
    "respawn_started",
    "respawned",
    "spare_adopted",
    "blacklisted",
    "migrated",
)
FAULT_LOG = "faults.jsonl"  # in each run's folder: one record per fault that fired


@dataclass(frozen=True)
class ChaosRun:
    index: int
    kind: str
    plan: str
    faults: int


def random_plans(
    rng: random.Random,
    runs: int,
    workers: int,
    rounds: int,
    num_shards: int | None = None,
    spares: int = 0,
    driver_shards: Iterable[int] = (),
) -> list[ChaosRun]:
    """``runs`` fault plans for ``workers`` workers, ``num_shards`` shards (default: one per
    worker, as the handle does), of which the driver computes ``driver_shards`` itself
    (``driver_computes``), and a fit of ``rounds`` E-step rounds (pure).

    Kinds cycle so that every kind appears in a short campaign; workers, actions, phases and
    rounds are drawn from ``rng``. Every planned fault is one the fit is sure to reach:
    victims hold shards (a worker with none gets no task and never reaches a task phase),
    rounds are below ``rounds`` (so ``repeat``, whose replacement dies in a later round, needs
    two), and the worker that dies during recovery is one that
    :func:`~mixle_mpi.policy.placement.plan_recovery` gives some of the first victim's shards to.
    With ``spares`` (ranks ``workers + 1 ..``, no shards) a spare adopts the first victim's
    place, so no run plans a death during a respawn, and a recovery target may be a spare.
    """
    if workers < 2:
        raise ConfigError(
            f"a chaos campaign needs at least 2 workers (-n 3 or more); found {workers}"
        )
    if runs < 1:
        raise ConfigError(f"--runs must be >= 1; found {runs}")
    owners = initial_placement(
        workers if num_shards is None else num_shards, range(1, workers + 1), skip=driver_shards
    )
    owners.update({s: [] for s in range(workers + 1, workers + 1 + spares)})
    holders = [w for w, sids in owners.items() if sids]
    rounds = max(1, rounds)
    kinds = [
        k
        for k in KINDS
        if (k != "repeat" or rounds >= 2)  # a later round must exist
        and (k != "respawn" or not spares)  # a spare adopts instead
        and (k not in ("recovery", "double") or (workers >= 3 and len(holders) >= 2))
    ]
    out = []
    for i in range(runs):
        kind = kinds[i % len(kinds)]
        a, b = rng.sample(range(1, workers + 1), 2)
        if a not in holders:
            a = holders[a % len(holders)]
            b = b if b != a else next(w for w in owners if w != a)
        c = rng.randrange(rounds)
        act = rng.choice(ACTIONS)
        if kind == "single":
            phase = rng.choice(SINGLE_PHASES)
            items = [f"{a}:{act}:{phase}:{0 if phase in ('init', 'llsum', 'load') else c}"]
        elif kind == "repeat":  # the replacement dies in a later round
            c = rng.randrange(max(1, rounds - 1))
            later = c + 1 + rng.randrange(max(1, rounds - c - 1))
            items = [f"{a}:kill:estep_mid:{c}:0", f"{a}:{act}:estep_before:{later}:1"]
        elif kind == "respawn":  # the replacement dies while being respawned
            items = [f"{a}:kill:estep_mid:{c}:0", f"{a}:kill:respawn:0:1"]
        elif kind == "recovery":  # b dies while recomputing a's orphaned shards
            targets = sorted(plan_recovery(owners[a], owners, [w for w in owners if w != a]))
            b = b if b in targets else targets[c % len(targets)]
            items = [f"{a}:{act}:estep_mid:{c}:0", f"{b}:kill:estep_before:{c}:0:recovery"]
        else:  # two deaths in one round
            b = b if b in holders else next(w for w in holders if w != a)
            items = [f"{a}:kill:estep_mid:{c}", f"{b}:{act}:estep_after_reply:{c}"]
        out.append(ChaosRun(i + 1, kind, ",".join(items), len(items)))
    return out


def compact(fault: Fault) -> str:
    """The full compact form ``worker:action:phase:call:incarnation:scope`` of a fault (pure)."""
    tail = f":{fault.factor:g}" if fault.action == "slow" else ""
    return f"{fault.worker}:{fault.action}:{fault.phase}:{fault.call}:{fault.incarnation}:{fault.scope}{tail}"


def compare(reference: dict, result: dict) -> list[str]:
    """What differs between two fit outputs; empty when bit-identical (pure)."""
    diffs = []
    if reference["model"] != result["model"]:
        diffs.append("model.json differs")
    ref_ll, got_ll = reference["summary"]["ll"], result["summary"]["ll"]
    if ref_ll != got_ll:
        first = next(
            (i for i, (x, y) in enumerate(zip(ref_ll, got_ll, strict=False)) if x != y),
            min(len(ref_ll), len(got_ll)),
        )
        diffs.append(f"log-likelihood trace differs from iteration {first + 1}")
    return diffs


def recovery_seconds(events: list[dict]) -> float | None:
    """From the first detected failure to the last reconfiguration event after it (pure). A
    replacement taking its shards back in the background held nothing up: not counted. A
    dead driver followed by a survivor (failover) counts from its death being seen to the
    successor's resume."""
    takeovers = [
        e["seen_at"] for e in events if e.get("event") == "driver_failed"
    ]  # failover: until resumed
    fails = sorted([e["time"] for e in events if e.get("event") == "failure_detected"] + takeovers)
    if not fails:
        return None
    ends = RECONFIG_EVENTS + (("driver_elected", "resumed") if takeovers else ())
    after = [
        e["time"]
        for e in events
        if e.get("event") in ends and e["time"] >= fails[0] and not e.get("background")
    ]
    return (max(after) if after else fails[-1]) - fails[0]


def seconds_from_kill(events: list[dict], kill_wall: float | None) -> float | None:
    """From a kill (its wall-clock time) to the last reconfiguration event after it (pure):
    the whole price of the kill, detection included, which ``recovery_seconds`` leaves out.
    None when the job logged no failure after it (a death before the start is relaunched)."""
    if kill_wall is None or not any(
        e.get("event") == "failure_detected" and e["time"] >= kill_wall for e in events
    ):
        return None
    after = [
        e["time"]
        for e in events
        if e.get("event") in RECONFIG_EVENTS and e["time"] >= kill_wall and not e.get("background")
    ]
    return max(after) - kill_wall if after else None


def read_output(out_dir: str) -> dict | None:
    try:
        with open(os.path.join(out_dir, "model.json"), encoding="utf-8") as fh:
            model = fh.read()
        with open(os.path.join(out_dir, "summary.json"), encoding="utf-8") as fh:
            summary = json.load(fh)
    except (OSError, ValueError):
        return None
    return {"model": model, "summary": summary}


def fit_command(cfg: FitConfig, n: int, timeout: float, launch: list[str]) -> list[str]:
    """``python -m mixle_mpi fit -n n --timeout timeout [launch flags] <cfg>`` (pure): the command
    every campaign run (fault-plan or external) launches, with ``cfg.out_dir`` as its folder."""
    return [
        sys.executable,
        "-m",
        "mixle_mpi",
        "fit",
        "-n",
        str(n),
        "--timeout",
        str(timeout),
        *launch,
        *to_argv(cfg),
    ]


def fit_env(plan: str, fault_log: str, extra: dict | None = None, base=None) -> dict:
    """The environment of a campaign run: fault ``plan`` (empty: none), victims' records
    into ``fault_log``, no live progress line, then ``extra`` (over ``base``, default os.environ).
    A plan in which a replacement acts in its own rounds makes the fit wait for replacements
    (``respawn_wait``): joining in the background, it might not compute before the fit ends."""
    env = {
        **(os.environ if base is None else base),
        "MIXLE_MPI_FAULT_PLAN": plan,
        FIRED_ENV: fault_log,
    }
    env.pop("MIXLE_MPI_LIVE_PROGRESS", None)
    if plan and needs_replacement_rounds(plan):
        env.setdefault("MIXLE_MPI_RESPAWN_WAIT", "1")
    env.update(extra or {})
    return env


def prepare_run_dir(out_dir: str) -> str:
    """Create a run's folder; returns its fault log path, emptied (a record from an earlier
    run in this folder must not count)."""
    os.makedirs(out_dir, exist_ok=True)
    fault_log = os.path.abspath(os.path.join(out_dir, FAULT_LOG))
    if os.path.exists(fault_log):
        os.remove(fault_log)
    return fault_log


def launch_fit(
    cfg: FitConfig,
    n: int,
    out_dir: str,
    plan: str,
    timeout: float,
    launch: list[str],
    env: dict | None = None,
) -> tuple[int, float, bool]:
    """Run ``mixle-mpi fit -n n`` under fault plan ``plan``, output to ``out_dir/job.log``:
    (exit code, seconds, hung). Victims record their faults in ``out_dir/faults.jsonl``
    (read it with :func:`read_fired`). ``env``: extra environment variables."""
    fault_log = prepare_run_dir(out_dir)
    cmd = fit_command(moved_to(cfg, out_dir), n, timeout, launch)
    t0 = time.perf_counter()
    with open(os.path.join(out_dir, "job.log"), "w", encoding="utf-8") as log:
        try:
            code = subprocess.run(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=fit_env(plan, fault_log, env),
                timeout=timeout + 60,
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    seconds = time.perf_counter() - t0
    return code, seconds, seconds >= timeout


def reference_run(
    cfg: FitConfig,
    n: int,
    ref_dir: str,
    timeout: float,
    launch: list[str],
    stream,
    env: dict | None = None,
) -> tuple[dict, float] | None:
    """The failure-free reference fit into ``ref_dir``: (its output, its wall seconds), or None
    after saying on ``stream`` why it cannot serve (it failed, or a fault fired in it)."""
    code, seconds, hung = launch_fit(cfg, n, ref_dir, "", timeout, launch, env)
    reference = read_output(ref_dir)
    problem = reference_problem(code, hung, reference, ref_dir)
    if problem:
        stream.write(problem)
        return None
    return reference, seconds


def reference_problem(code: int, hung: bool, reference: dict | None, ref_dir: str) -> str | None:
    """Why a reference run in ``ref_dir`` cannot serve (it failed, or a fault fired in it), as
    a line to print; None when it can."""
    if code != 0 or hung or reference is None:
        return (
            f"chaos: the reference run failed (exit {code}{', hung' if hung else ''}); see "
            f"{os.path.join(ref_dir, 'job.log')}\n"
        )
    stray = read_fired(os.path.join(ref_dir, FAULT_LOG))
    if stray:
        return (
            f"chaos: a fault fired in the reference run, which has none planned ({len(stray)} records in "
            f"{os.path.join(ref_dir, FAULT_LOG)}); it is not a failure-free reference\n"
        )
    return None


def outcome(code: int, hung: bool, has_result: bool, diffs: list[str], missing: list) -> str:
    """One run's verdict (pure): ``ok`` only for exit 0, the reference's bits and every planned
    fault fired. A run whose fault never fired is ``UNFIRED``: it tested nothing."""
    if hung:
        return "HUNG"
    if code != 0 or not has_result:
        return f"FAILED({code})"
    if diffs:
        return "DIVERGED"
    if missing:
        return "UNFIRED"
    return "ok"


def campaign(
    cfg: FitConfig,
    *,
    n: int,
    runs: int,
    seed: int,
    out_dir: str,
    run_timeout: float | None = None,
    launch: list[str] | None = None,
    stream=sys.stdout,
) -> int:
    """Run the campaign; print the table; 0 when every run fired every planned fault and is
    bit-identical, else 1."""
    if n < 3:
        raise ConfigError(
            f"a chaos campaign needs -n 3 or more (a driver and 2+ workers); found -n {n}"
        )
    launch = launch or []
    cfg = replace(cfg, checkpoint=None, plot=False, progress="off", restarts=1)
    w = stream.write
    w(f"chaos: reference run (no faults), {n} ranks, out_dir {out_dir}\n")
    stream.flush()
    ref = reference_run(
        cfg, n, os.path.join(out_dir, "reference"), run_timeout or 600, launch, stream
    )
    if ref is None:
        return 1
    reference, ref_seconds = ref
    rounds = reference["summary"]["iterations"]
    shards = reference["summary"].get("num_shards")
    timeout = run_timeout or (10 * ref_seconds + 60)
    here = reference["summary"].get(
        "driver_shards", []
    )  # what the driver computed: no kill can orphan those
    plans = random_plans(random.Random(seed), runs, n - 1, rounds, shards, cfg.spares or 0, here)
    planned = sum(p.faults for p in plans)
    w(
        f"chaos: reference took {ref_seconds:.1f}s, {rounds} iterations; {runs} fault runs, {planned} planned faults "
        f"(seed {seed}, hang deadline {timeout:.0f}s each)\n"
    )
    width = max(len(p.plan) for p in plans)
    header = (
        f"{'run':>3}  {'kind':<8} {'plan':<{width}} {'fired':>5}  {'outcome':<10} {'identical':<9} "
        f"{'recovery s':>10} {'wall s':>7}"
    )
    w(header + "\n" + "-" * len(header) + "\n")
    stream.flush()
    rows, bad, fired_total = [], {}, 0
    for run in plans:
        rdir = os.path.join(out_dir, f"run-{run.index:03d}")
        code, seconds, hung = launch_fit(cfg, n, rdir, run.plan, timeout, launch)
        result = read_output(rdir)
        events = read_events(os.path.join(rdir, "events.jsonl"))
        records = read_fired(os.path.join(rdir, FAULT_LOG))
        missing = unfired(run.plan, records)
        fired = run.faults - len(missing)
        fired_total += fired
        diffs = compare(reference, result) if (code == 0 and result is not None) else []
        verdict = outcome(code, hung, result is not None, diffs, missing)
        identical = code == 0 and result is not None and not diffs
        rec = recovery_seconds(events)
        if verdict != "ok":
            bad[verdict.split("(")[0]] = bad.get(verdict.split("(")[0], 0) + 1
        row = {
            **asdict(run),
            "fired": fired,
            "unfired": [compact(f) for f in missing],
            "fired_records": records,
            "outcome": verdict,
            "identical": identical,
            "diffs": diffs,
            "recovery_seconds": rec,
            "wall_seconds": seconds,
            "exit_code": code,
            "out_dir": rdir,
        }
        rows.append(row)
        w(
            f"{run.index:>3}  {run.kind:<8} {run.plan:<{width}} {f'{fired}/{run.faults}':>5}  {verdict:<10} "
            f"{'yes' if identical else ('NO' if diffs else '-'):<9} {'-' if rec is None else f'{rec:.2f}':>10} "
            f"{seconds:>7.1f}\n"
        )
        if missing:
            w(
                f"{'':>5}not fired: {', '.join(compact(f) for f in missing)} "
                f"(no record in {os.path.join(rdir, FAULT_LOG)})\n"
            )
        stream.flush()
    failed = sum(bad.values())
    report = {
        "n": n,
        "seed": seed,
        "runs": rows,
        "reference_seconds": ref_seconds,
        "rounds": rounds,
        "num_shards": shards,
        "planned_faults": planned,
        "fired_faults": fired_total,
        "config": asdict(cfg),
        "ok": failed == 0,
    }
    write_json(os.path.join(out_dir, "campaign.json"), report, indent=1)
    w(
        f"chaos: {len(plans) - failed}/{len(plans)} runs passed (every planned fault fired, bits identical to the "
        f"reference); {fired_total}/{planned} planned faults fired"
        + (
            ""
            if not failed
            else "; FAILED: "
            + ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))
            + "; see job.log in their folders"
        )
        + f"; report in {out_dir}/campaign.json\n"
    )
    return 0 if failed == 0 else 1


def resolve_args(args) -> tuple[FitConfig, int, str, list[str]]:
    """The campaign's fit (the demo job when no data is given), rank count, folder and
    launcher flags, from the ``chaos`` subcommand's arguments."""
    from mixle_mpi.cli.jobconfig import DEMO_JOB, from_args

    if getattr(args, "data", None) is None and getattr(args, "config", None) is None:
        for key, value in DEMO_JOB.items():  # no data given: the built-in demo job
            if getattr(args, key, None) is None:
                setattr(args, key, value)
    cfg = from_args(args)
    n = args.n or 4
    out_dir = (
        cfg.out_dir
        if cfg.out_dir != FitConfig.out_dir
        else tempfile.mkdtemp(prefix="mixle_mpi_chaos_")
    )
    launch = (
        (["--launcher", args.mpi] if args.mpi else [])
        + (["--mpiexec", args.mpiexec] if args.mpiexec else [])
        + (["--allow-many-ranks"] if args.allow_many_ranks else [])
    )
    return cfg, n, os.path.abspath(out_dir), launch


def campaign_from_args(args) -> int:
    """The fault-plan campaign of ``mixle-mpi chaos`` (``--external`` is chaos.external's)."""
    cfg, n, out_dir, launch = resolve_args(args)
    return campaign(
        cfg,
        n=n,
        runs=args.runs,
        seed=args.campaign_seed,
        out_dir=out_dir,
        run_timeout=args.run_timeout,
        launch=launch,
    )
