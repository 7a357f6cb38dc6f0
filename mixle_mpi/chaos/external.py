"""``mixle-mpi chaos --external``: kill real processes of a running job from outside.

No hook: the campaign watches the launcher's process tree through ``/proc`` and sends
SIGKILL or SIGSTOP to a rank at a seeded random time. ``T_ref`` is the wall time of a
failure-free reference run of the same fit and ``t_started`` the moment its launcher's
"started" marker appeared (every worker holds its shards; the campaign watches the reference
like any run). Three draws in four (``--fit-share``) are fit draws: the first kill comes at a
time uniform over ``[0, T_ref x window - t_started]`` seconds after the run's own started
marker, i.e. over the reference's fit ``[t_started, t_end]``. The others come at a time
uniform over ``[0, T_ref x window]`` seconds after the launch. A kill therefore lands in any
phase, mostly in the fit: process start, MPI initialisation, the
startup handshake, shard load, an E-step, a log-density pass, a recovery, a shrink, a
respawn, a checkpoint write or the close. Where a kind kills the driver, every run has a
checkpoint in its own folder, so a killed driver is followed by the same command, which must
resume to the reference's bits; a campaign of worker kills runs without checkpoints, as a
fit does by default (``external_plan.checkpoints``).

Each run records its kills (victim pid, role, rank, whether respawned, planned and actual
time after the launch), the exit code, the wall time, bit-identity of model and
log-likelihood trace, the recovery time seen in the event log, and the job's processes
still alive ``leftover_seconds`` after the launcher exited (found by the run's folder in
their command line and by the ``MIXLE_MPI_JOB_TAG`` that ``mixle-mpi run`` puts into the
environment of everything it starts). The decisions (plans, which process is which,
outcomes, the report's figures) are pure functions in :mod:`mixle_mpi.chaos.external_plan`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace

from mixle_mpi.chaos import external_plan as cp
from mixle_mpi.chaos.campaign import (
    compare,
    fit_command,
    fit_env,
    prepare_run_dir,
    read_output,
    recovery_seconds,
    reference_problem,
    seconds_from_kill,
)
from mixle_mpi.chaos.fault_plan import read_fired
from mixle_mpi.cli.jobconfig import FitConfig, moved_to
from mixle_mpi.core import procs
from mixle_mpi.core.atomicfile import write_json
from mixle_mpi.core.exitcodes import NEVER_STARTED
from mixle_mpi.launch.contract import MPI_UP_ENV, STARTED_ENV, STARTUP_TIMEOUT_ENV, TAG_ENV
from mixle_mpi.launch.ranks import RANK_VARS
from mixle_mpi.storage.events import TOOK_OVER, read_events

kinds_from_text = cp.kinds_from_text

CAMPAIGN_ENV = {STARTUP_TIMEOUT_ENV: "20"}  # a startup death resolves in 20 s, not 120 (unless set)
ENV_KEYS = (*RANK_VARS, *cp.RESPAWN_ENV, TAG_ENV, "PMIX_NAMESPACE", MPI_UP_ENV, STARTED_ENV)
POLL = 0.02  # seconds between looks at the launcher while a kill is due
SCAN = 0.5  # seconds between looks at the process tree otherwise (job tags, ranks)
FIRST_KILL_GRACE = 5.0  # a first kill waits this long for a candidate (ranks still starting)
LATER_KILL_GRACE = 1.0  # a later kill, this long after its time
KILL_GRACE = 30.0  # seconds past the launcher's own --timeout before the campaign kills it
MAX_DRAWS = 3  # draws per run slot when kills keep missing (the job had ended)


# -- the process table (core/procs) -------------------------------------------------------------
def _keys(env: dict | None, keys=ENV_KEYS) -> dict:
    return {k: v for k, v in (env or {}).items() if k in keys}


def proc_table() -> dict[int, cp.Proc]:
    """This host's processes as ``pid -> Proc``, with the environment keys that tell ranks
    apart (only this user's processes have one to read)."""
    return {
        pid: cp.Proc(pid, r.ppid, r.state, r.argv, _keys(r.env)) for pid, r in procs.table().items()
    }


def job_processes(tags, exclude=()) -> list[dict]:
    """Live processes of a job: one of its ``tags`` in their ``MIXLE_MPI_JOB_TAG`` or in their
    command line (the reaper), each with its identity (pid, start time). A process that only
    names the job's folder (a user's ``tail -f`` of its log) is not the job's."""
    tags = [t for t in tags if t]
    skip = {os.getpid(), *exclude}
    found = []
    if not tags:
        return found
    for pid, r in procs.table().items():
        if pid in skip or not r.argv or r.state in procs.GONE or r.start is None:
            continue
        if any(t in a for a in r.argv for t in tags) or r.env.get(TAG_ENV) in tags:
            found.append(
                {"pid": pid, "start": r.start, "state": r.state, "argv": " ".join(r.argv)[:300]}
            )
    return found


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        pid = procs.parent(pid) or 0
        out.add(pid)
    return out


def wait_gone(tags, seconds: float) -> list[dict]:
    """Wait up to ``seconds`` for the job's processes to end; those still alive then are
    leftovers: they are returned, then SIGKILLed, each only if its pid still names that
    process (``procs.kill_same``)."""
    end = time.monotonic() + seconds
    skip = _ancestors()
    while True:
        alive = job_processes(tags, skip)
        if not alive or time.monotonic() >= end:
            break
        time.sleep(0.25)
    for p in alive:
        procs.kill_same((p["pid"], p["start"]), why="a leftover of the campaign's job")
    return alive


# -- one launch, watched and hit from outside --------------------------------------------------
@dataclass
class LaunchRecord:
    """What the campaign saw of one launch of the job."""

    code: int | None = None
    seconds: float = 0.0
    hung: bool = False
    kills: list = field(default_factory=list)
    tags: list = field(
        default_factory=list
    )  # job tags in the order they appeared (one per attempt)
    ranks: dict = field(default_factory=dict)  # pid -> RankProc, every rank process seen
    leftovers: list = field(default_factory=list)
    started_files: list = field(
        default_factory=list
    )  # the launcher's started marker(s), from the ranks' env
    started_at: float | None = None  # seconds after the launch when a started marker was seen


def _note_tree(seen: LaunchRecord, table: dict, root: int) -> list[cp.RankProc]:
    for pid in cp.descendants(table, root):
        tag = table[pid].env.get(TAG_ENV)
        if tag and tag not in seen.tags:
            seen.tags.append(tag)
        marker = table[pid].env.get(STARTED_ENV)
        if marker and marker not in seen.started_files:
            seen.started_files.append(marker)
    ranks = cp.classify(table, root, set(seen.tags))
    for r in ranks:
        seen.ranks.setdefault(r.pid, r)
    return ranks


def _markers(env: dict) -> dict:
    """The launcher's startup markers (files it shares with the ranks), as they are now."""
    return {
        name: (os.path.exists(env[var]) if env.get(var) else None)
        for name, var in (("mpi_up", MPI_UP_ENV), ("started", STARTED_ENV))
    }


class DutyCycle(threading.Thread):
    """The slow kind: SIGSTOP and SIGCONT one rank in turn from outside (its identity checked
    at each signal), so it runs DUTY_RUN of every DUTY_STOP + DUTY_RUN seconds, until
    ``halt`` or its process is gone; it is never left stopped."""

    def __init__(self, ident: tuple, record: dict) -> None:
        super().__init__(name="chaos-duty-cycle", daemon=True)
        self.victim, self.record = ident, record
        self.halted = threading.Event()
        self.cycles = 0

    def run(self) -> None:
        while not self.halted.is_set():
            if not procs.kill_same(self.victim, signal.SIGSTOP, why="the campaign's slow worker"):
                break
            self.halted.wait(cp.DUTY_STOP)
            if not procs.kill_same(self.victim, signal.SIGCONT, why="the campaign's slow worker"):
                break
            self.cycles += 1
            self.halted.wait(cp.DUTY_RUN)
        procs.kill_same(self.victim, signal.SIGCONT, why="the campaign's slow worker, at its end")

    def halt(self) -> None:
        self.halted.set()
        self.join(timeout=cp.DUTY_STOP + 5.0)
        self.record["cycles"] = self.cycles


def _kill(
    victim: cp.RankProc,
    spec: cp.KillSpec,
    planned: float,
    t0: float,
    env: dict,
    cycles: list | None = None,
) -> dict:
    slow = spec.signal == cp.SLOW
    sig = signal.SIGSTOP if slow else getattr(signal, spec.signal)
    record = {
        "signal": spec.signal,
        "target": spec.target,
        "after": spec.after,
        "planned_at": round(planned, 4),
        "pid": victim.pid,
        "role": victim.role,
        "rank": victim.rank,
        "respawned": victim.respawned,
        "tag": victim.tag,
        "state_before": victim.state,
        **_markers(env),
    }
    ident = procs.identity(
        victim.pid
    )  # only a process of this job (its tag), and only that process
    ours = ident is not None and (procs.environ(victim.pid) or {}).get(TAG_ENV) == victim.tag
    if slow and ours:  # the duty cycle sends its own signals, from now until the job ends
        cycle = DutyCycle(ident, record)
        cycle.start()
        cycles.append(cycle)
        sent = True
    else:
        sent = procs.kill_same(ident, sig, why="the campaign's planned fault") if ours else None
    record["delivered"] = bool(sent)
    if not sent:
        record["error"] = (
            "gone, or no longer this job's process" if sent is None else "refused (pid reused)"
        )
    record["at"] = round(time.monotonic() - t0, 4)
    record["wall_time"] = time.time()
    return record


def _missed(spec, planned: float | None, why: str, now: float | None = None) -> dict:
    """The record of a planned kill that did not happen, and why."""
    record = {
        "signal": spec.signal,
        "target": spec.target,
        "planned_at": None if planned is None else round(planned, 4),
        "missed": True,
        "why": why,
    }
    if now is not None:
        record["at"] = round(now, 4)
    return record


def _fire_due(seen, pending: list, done: set, cycles: list, proc, t0: float, now: float, due):
    """Carry out the first pending kill, due now; returns when the next one is due. A kill
    that finds no live candidate past its grace is recorded as missed."""
    spec = pending[0]
    table = proc_table()
    ranks = _note_tree(seen, table, proc.pid)
    # a kill that targets the replacement waits for it until the end of the recovery window
    hold_until = (
        seen.kills[-1]["at"] + cp.RECOVERY_GAP[1]
        if spec.prefer_replacement and seen.kills and "at" in seen.kills[-1]
        else due
    )
    if spec.target == "host":  # every worker of one simulated host, at once
        victims = cp.choose_host(ranks, spec, done)
    else:
        victim = cp.choose_victim(ranks, spec, done, hold_for_replacement=now < hold_until)
        victims = [] if victim is None else [victim]
    if victims and proc.poll() is None:
        records = [_kill(v, spec, due, t0, table[v.pid].env, cycles) for v in victims]
        seen.kills.extend(records)
        done.update(v.pid for v in victims)
        pending.pop(0)
        return records[-1]["at"] + pending[0].delay if pending else None
    if now >= max(due, hold_until) + (FIRST_KILL_GRACE if not seen.kills else LATER_KILL_GRACE):
        seen.kills.append(_missed(spec, due, "no live candidate", now))
        pending.pop(0)
        return now + pending[0].delay if pending else None
    return due


def watch(
    cmd: list[str], env: dict, log_path: str, kills: tuple, timeout: float, attempts: int
) -> LaunchRecord:
    """Launch ``cmd`` (the launcher), carry out ``kills`` on its ranks, wait for it to end.
    A first kill ``after="started"`` is due ``delay`` seconds after the launcher's started
    marker is first seen (its path is in the ranks' environment; ``seen.started_at`` records
    when, for any launch). Past ``attempts x timeout + KILL_GRACE`` seconds the launcher's
    session is SIGKILLed (its reaper then ends the job) and the launch counts as hung."""
    seen = LaunchRecord()
    deadline = attempts * timeout + KILL_GRACE
    pending = list(kills)
    done: set[int] = set()
    due = pending[0].delay if pending and pending[0].after != cp.STARTED else None
    last_scan = -SCAN
    cycles: list[DutyCycle] = []
    with open(log_path, "w", encoding="utf-8") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            while proc.poll() is None:
                now = time.monotonic() - t0
                if now >= deadline:
                    seen.hung = True
                    os.killpg(proc.pid, signal.SIGKILL)  # the session this call started
                    break
                if seen.started_at is None and any(os.path.exists(f) for f in seen.started_files):
                    seen.started_at = round(now, 4)
                    if pending and not seen.kills and pending[0].after == cp.STARTED:
                        due = now + pending[0].delay
                if due is not None and now >= due:
                    due = _fire_due(seen, pending, done, cycles, proc, t0, now, due)
                    last_scan = now
                elif now - last_scan >= SCAN:
                    _note_tree(seen, proc_table(), proc.pid)
                    last_scan = now
                wait = POLL if due is None else min(max(due - (time.monotonic() - t0), 0.0), POLL)
                try:
                    proc.wait(timeout=wait if due is not None else SCAN / 5)
                except subprocess.TimeoutExpired:
                    pass
            seen.code = proc.wait()
        except BaseException:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
        finally:
            for cycle in cycles:
                cycle.halt()
        seen.seconds = time.monotonic() - t0
    for i, spec in enumerate(pending):  # the job ended before these kills were due
        never_started = i == 0 and due is None and spec.after == cp.STARTED and not seen.kills
        why = "the job ended before its started marker" if never_started else "the job had ended"
        seen.kills.append(_missed(spec, due if i == 0 else None, why))
    # past the hang deadline is a hang, even when the launcher's own --timeout then ended the
    # job and it reported the driver's status (mpiexec stuck after the fit finished)
    seen.hung = seen.hung or seen.seconds >= timeout
    return seen


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


LAUNCHING = re.compile(r"^\[mixle_mpi\][^\n]*?\blaunching: ", re.M)  # with or without a time stamp


RETRY, RESUME_AGAIN = (
    "starting it again",
    "running it again to resume",
)  # the launcher's relaunch lines


def _attempts(log_text: str) -> int:
    """How many times the launcher started mpiexec, from its log: each start says
    ``launching:`` and each relaunch one of its relaunch lines."""
    return max(
        1,
        len(LAUNCHING.findall(log_text)),
        log_text.count(RETRY) + log_text.count(RESUME_AGAIN) + 1,
    )


# -- one run ---------------------------------------------------------------------------------
@dataclass
class Context:
    cfg: FitConfig
    n: int
    out_dir: str
    reference: dict
    timeout: float
    launch: list
    env: dict
    leftover_seconds: float
    attempts: int = (
        3  # the launcher's first try, its one retry of a never-started job, its one resume
    )
    checkpoints: bool = True  # external_plan.checkpoints: the runs write checkpoints


def _launch(
    ctx: Context, rdir: str, log_name: str, kills: tuple
) -> tuple[LaunchRecord, cp.Launch, list]:
    cfg = replace(
        ctx.cfg, out_dir=rdir, checkpoint=os.path.join(rdir, "ckpt.h5") if ctx.checkpoints else None
    )
    cmd = fit_command(cfg, ctx.n, ctx.timeout, ctx.launch)
    fault_log = os.path.abspath(os.path.join(rdir, "faults.jsonl"))
    env = fit_env("", fault_log, ctx.env)
    log_path = os.path.join(rdir, log_name)
    seen = watch(cmd, env, log_path, kills, ctx.timeout, ctx.attempts)
    seen.leftovers = wait_gone(seen.tags, ctx.leftover_seconds)
    result = read_output(rdir)
    diffs = compare(ctx.reference, result) if (seen.code == 0 and result is not None) else []
    text = _text(log_path)
    launch = cp.Launch(
        seen.code,
        seen.seconds,
        seen.hung,
        result is not None,
        diffs,
        seen.leftovers,
        retried=RETRY in text,
        relaunched=RESUME_AGAIN in text,
        taken_over=TOOK_OVER in text,
    )
    return seen, launch, read_fired(fault_log)


def _events(rdir: str) -> list[dict]:
    """The run's event log (a line cut short by a SIGKILLed driver is skipped: the one reader)."""
    return read_events(os.path.join(rdir, "events.jsonl"))


def _annotate_kills(kills: list, events: list, checkpoints: bool = True) -> None:
    """Add what the event log says about each victim: its worker id (for a respawned
    process) and how long the driver took to declare it failed."""
    respawned = {
        e.get("pid"): e.get("worker")
        for e in events
        if e.get("event") in ("respawned", "respawn_ready")
    }
    for k in kills:
        if k.get("missed"):
            continue
        if k.get("respawned") and k["pid"] in respawned:
            k["worker"] = respawned[k["pid"]]
        elif k.get("role") == "worker":
            k["worker"] = k.get("rank")
        k["phase"] = cp.phase_at(
            k["wall_time"], events, k.get("mpi_up"), k.get("started"), checkpoints
        )
        hit = [
            e
            for e in events
            if e.get("event") in ("failure_detected", "driver_failed") and e.get("pid") == k["pid"]
        ]
        k["detected"] = bool(hit)
        if hit:  # a dead driver is seen by a survivor (failover), at seen_at
            k["detected_after"] = round(hit[0].get("seen_at", hit[0]["time"]) - k["wall_time"], 4)


def run_one(ctx: Context, plan: cp.ExternalPlan) -> dict:
    """Carry out one plan: launch, kill, judge (rerun the same command when the kills
    explain a nonzero exit), and return the run's row for the report."""
    rdir = os.path.join(
        ctx.out_dir, f"run-{plan.index:03d}" + (f"-d{plan.draw}" if plan.draw else "")
    )
    prepare_run_dir(rdir)
    seen, first, fired = _launch(ctx, rdir, "job.log", plan.kills)
    events = _events(rdir)
    missed = any(k.get("missed") or not k.get("delivered") for k in seen.kills)
    attempts = _attempts(_text(os.path.join(rdir, "job.log")))
    explained = cp.never_started_explained(
        [k.get("tag") for k in seen.kills if k.get("delivered")], attempts
    )
    rerun = None
    resumed = None
    if cp.needs_rerun(plan.kind, first, explained):
        before = len(events)
        for name in (
            "model.json",
            "summary.json",
        ):  # a rerun that writes nothing must not look finished
            if os.path.exists(os.path.join(rdir, name)):
                os.replace(
                    os.path.join(rdir, name),
                    os.path.join(rdir, name.replace(".json", ".first.json")),
                )
        _, rerun, fired2 = _launch(ctx, rdir, "rerun.log", ())
        fired += fired2
        later = _events(rdir)[before:]
        resumed = next((e.get("iteration") for e in later if e.get("event") == "resumed"), None)
    failed_places = sum(1 for e in events if e.get("event") == "failure_detected")
    killed = sum(
        1 for k in seen.kills if k.get("delivered") and k["signal"] != cp.SLOW
    )  # a slow one lives
    verdict = cp.judge(
        plan.kind,
        first,
        missed=missed,
        explained_73=explained,
        rerun=rerun,
        failed_places=failed_places,
        killed=killed,
    )
    if fired:  # no fault plan was given: a hook that fired means the run was not external only
        verdict = verdict if not cp.passed(verdict) else f"{cp.FAILED}(hook fired)"
    _annotate_kills(seen.kills, events, ctx.checkpoints)
    final = rerun if rerun is not None else first
    return {
        "index": plan.index,
        "draw": plan.draw,
        "kind": plan.kind,
        "plan": plan.describe(),
        "kills": seen.kills,
        "outcome": verdict,
        "exit_code": first.code,
        "wall_seconds": round(first.seconds, 3),
        "identical": final.identical,
        "diffs": final.diffs,
        "recovery_seconds": recovery_seconds(events),
        "seconds_from_kill": seconds_from_kill(
            events, next((k["wall_time"] for k in seen.kills if k.get("delivered")), None)
        ),
        "attempts": attempts,
        "launcher_retried": first.retried,
        "failed_places": failed_places,
        "processes_killed": killed,
        "never_started_explained": explained if first.code == NEVER_STARTED else None,
        "leftovers": first.leftovers,
        "job_tags": seen.tags,
        "rerun": None
        if rerun is None
        else {
            "exit_code": rerun.code,
            "wall_seconds": round(rerun.seconds, 3),
            "identical": rerun.identical,
            "diffs": rerun.diffs,
            "resumed_from_iteration": resumed,
            "leftovers": rerun.leftovers,
            "hung": rerun.hung,
        },
        "ended_after_last_kill": _ended_after(seen),
        "hung": first.hung,
        "out_dir": rdir,
    }


def _ended_after(seen: LaunchRecord) -> float | None:
    hits = [k["at"] for k in seen.kills if not k.get("missed")]
    return round(seen.seconds - max(hits), 3) if hits else None


# -- the table and the campaign ---------------------------------------------------------------
def _victims(row: dict) -> str:
    parts = []
    for k in row["kills"]:
        sig = {"SIGSTOP": "STOP", cp.SLOW: "SLOW"}.get(k["signal"], "KILL")
        if k.get("missed"):
            parts.append(f"{sig} missed ({k.get('why', '')})")
            continue
        who = (
            "driver"
            if k["role"] == "driver"
            else (f"w{k.get('worker', '?')}*" if k["respawned"] else f"w{k['rank']}")
        )
        parts.append(f"{sig} {who} @{k['at']:.2f}s ({k.get('phase', '?')})")
    return "; ".join(parts)


HEADER = (
    f"{'run':>5}  {'kind':<15} {'victims':<60} {'exit':>4}  {'outcome':<21} {'identical':<9} "
    f"{'recovery s':>10} {'wall s':>7} {'left':>4}"
)


def table_row(row: dict) -> str:
    run = f"{row['index']}" + (f".{row['draw']}" if row["draw"] else "")
    rec = row.get("recovery_seconds")
    ident = "yes" if row["identical"] else ("NO" if row["diffs"] else "-")
    code = "-" if row["exit_code"] is None else str(row["exit_code"])
    if row.get("rerun"):
        code += f"/{row['rerun']['exit_code']}"
    left = len(row["leftovers"]) + (len(row["rerun"]["leftovers"]) if row.get("rerun") else 0)
    return (
        f"{run:>5}  {row['kind']:<15} {_victims(row):<60} {code:>4}  {row['outcome']:<21} {ident:<9} "
        f"{'-' if rec is None else f'{rec:.2f}':>10} {row['wall_seconds']:>7.1f} {left:>4}"
    )


def watched_reference(
    cfg: FitConfig, n: int, ref_dir: str, timeout: float, launch: list[str], stream, env: dict
) -> tuple[dict, float, float | None] | None:
    """The failure-free reference fit into ``ref_dir``, watched like a run (no kills): (its
    output, its wall seconds, the seconds after the launch when its started marker appeared,
    None if it was not seen), or None after saying on ``stream`` why it cannot serve."""
    fault_log = prepare_run_dir(ref_dir)
    cmd = fit_command(moved_to(cfg, ref_dir), n, timeout, launch)
    log_path = os.path.join(ref_dir, "job.log")
    seen = watch(cmd, fit_env("", fault_log, env), log_path, (), timeout, 2)
    result = read_output(ref_dir)
    problem = reference_problem(seen.code, seen.hung, result, ref_dir)
    if problem:
        stream.write(problem)
        return None
    return result, seen.seconds, seen.started_at


def external_campaign(
    cfg: FitConfig,
    *,
    n: int,
    runs: int,
    seed: int,
    out_dir: str,
    run_timeout: float | None = None,
    launch: list[str] | None = None,
    kinds: tuple = cp.KINDS,
    window: float = 1.0,
    leftover_seconds: float = 10.0,
    env: dict | None = None,
    window_seconds: float | None = None,
    fit_share: float = cp.FIT_SHARE,
    fit_window_seconds: float | None = None,
    window_from: float = 0.0,
    replay: list[tuple[int, int]] | None = None,
    stream=sys.stdout,
) -> int:
    """Run the external campaign; print the table; write ``campaign.json`` (after every run,
    marked ``partial`` until the last); 0 when every counted run passed and none failed, else 1.

    First kills: ``fit_share`` of the draws are uniform over [0, F] seconds after the run's
    own started marker, where F is ``fit_window_seconds`` or, by default, the reference's span
    minus the moment its started marker appeared (its fit); the rest are uniform over [0, T_ref
    x ``window``] seconds after the launch, or over [``window_from``, ``window_seconds``] when
    given (``window="start"``: the reference's handshake and shard load, ``external_plan.start_span``).
    ``replay`` runs only those (run, draw) slots, with the kills they had in the campaign of
    the same seed, kinds, windows and share (see each failed run's ``replay`` in the report)."""
    cp.check_campaign(
        n - 1,
        runs if not replay else len(replay),
        window if window_seconds is None else window_seconds,
        kinds,
        fit_share,
    )
    launch = list(launch or [])
    extra = {k: v for k, v in CAMPAIGN_ENV.items() if k not in os.environ}
    extra.update(env or {})
    cfg = replace(cfg, plot=False, progress="off", restarts=1, resume="auto")
    w = stream.write
    out_dir = os.path.abspath(out_dir)
    saving = cp.checkpoints(kinds)
    w(
        f"chaos --external: reference run (no kills, "
        f"{'checkpoint every iteration' if saving else 'no checkpoint: no kind kills the driver'}), "
        f"{n} ranks, out_dir {out_dir}\n"
    )
    stream.flush()
    ref_dir = os.path.join(out_dir, "reference")
    ref_cfg = replace(cfg, checkpoint=os.path.join(ref_dir, "ckpt.h5") if saving else None)
    ref = watched_reference(ref_cfg, n, ref_dir, run_timeout or 600, launch, stream, extra)
    if ref is None:
        return 1
    reference_out, t_ref, t_started = ref
    timeout = run_timeout or (10 * t_ref + 60)
    ctx = Context(
        cfg, n, out_dir, reference_out, timeout, launch, extra, leftover_seconds, checkpoints=saving
    )
    if (
        window == cp.START_WINDOW and window_seconds is None
    ):  # every first kill in the start and shard load
        (window_from, window_seconds), fit_share = cp.start_span(t_started), 0.0
    span = t_ref * window if window_seconds is None else window_seconds
    fit_span = (
        fit_window_seconds
        if fit_window_seconds is not None
        else (max(0.0, span - t_started) if t_started is not None else None)
    )
    what = (
        f"{runs} runs"
        if not replay
        else "replay of run(s) " + ", ".join(f"{r}.{d}" if d else str(r) for r, d in replay)
    )
    w(
        f"chaos --external: reference took {t_ref:.1f}s, {reference_out['summary']['iterations']} iterations; {what} "
        f"(seed {seed}; kinds {', '.join(kinds)}; {_kill_times(fit_share, fit_span, span, window_from, t_started)}; "
        f"hang deadline {timeout:.0f}s; leftover check {leftover_seconds:g}s after the launcher exits; "
        f"{' '.join(f'{k}={v}' for k, v in extra.items())})\n"
    )
    w(HEADER + "\n" + "-" * len(HEADER) + "\n")
    stream.flush()
    rows: list[dict] = []
    replay_args = (
        f"--campaign-seed {seed} --kinds {','.join(kinds)} --kill-window-seconds {span:.6g} "
        f"--fit-share {fit_share:g}"
        + (f" --fit-window-seconds {fit_span:.6g}" if fit_span else "")
        + (f" --kill-window-from {window_from:.6g}" if window_from else "")
    )
    slots = (
        [[p] for p in cp.replay_plans(seed, replay, span, kinds, fit_span, fit_share, window_from)]
        if replay
        else [
            [p]
            + [
                cp.external_plan(seed, p.index, d, p.kind, span, fit_span, fit_share, window_from)
                for d in range(1, MAX_DRAWS)
            ]
            for p in cp.campaign_plans(seed, runs, span, kinds, fit_span, fit_share, window_from)
        ]
    )
    head = {
        "external": True,
        "n": n,
        "seed": seed,
        "kinds": list(kinds),
        "window": window,
        "reference_seconds": t_ref,
        "reference_started_seconds": t_started,
        "reference_iterations": reference_out["summary"]["iterations"],
        "kill_window_seconds": span,
        "kill_window_from": window_from,
        "fit_share": fit_share,
        "fit_window_seconds": fit_span,
        "run_timeout": timeout,
        "replay": replay or None,
        "leftover_seconds": leftover_seconds,
        "env": extra,
        "command": [sys.executable, *sys.argv] if sys.argv else [],
        "config": asdict(cfg),
        "slots_planned": len(slots),
    }
    for draws in slots:
        for plan in draws:
            row = run_one(ctx, plan)
            row["replay"] = f"{replay_args} --replay {plan.index}" + (
                f".{plan.draw}" if plan.draw else ""
            )
            rows.append(row)
            w(table_row(row) + "\n")
            stream.flush()
            _write_report(
                out_dir, head, rows, kinds, partial=True
            )  # a campaign stopped midway keeps every finished row
            if row["outcome"] != cp.MISSED:
                break
    summary = _write_report(out_dir, head, rows, kinds, partial=False)["summary"]
    _closing_lines(w, summary, rows, out_dir)
    stream.flush()
    return 0 if summary["ok"] else 1


def _kill_times(
    fit_share: float,
    fit_span: float | None,
    span: float,
    window_from: float,
    t_started: float | None,
) -> str:
    """How the first kills' times are drawn, in words."""
    if fit_span and fit_share > 0:
        return (
            f"{fit_share:g} of the first kills uniform over [0, {fit_span:.6g}] s after the run's started marker "
            f"(the reference's fit: its marker came {'-' if t_started is None else f'{t_started:.1f}'} s after the "
            f"launch), the others over [0, {span:.6g}] s after the launch"
        )
    return f"kills at uniform times over [{window_from:.6g}, {span:.6g}] s after the launch" + (
        "" if t_started is not None else " (the reference's started marker was not seen)"
    )


def _write_report(out_dir: str, head: dict, rows: list[dict], kinds: tuple, partial: bool) -> dict:
    """``campaign.json``: the campaign's settings, its summary so far and every run's row."""
    summary = cp.summarize(rows, kinds)
    done = len(
        {r["index"] for r in rows if r["outcome"] != cp.MISSED or r["draw"] == MAX_DRAWS - 1}
    )
    out = {
        **head,
        "partial": partial,
        "slots_done": done,
        "summary": summary,
        "runs": rows,
        "ok": summary["ok"] and not partial,
    }
    write_json(os.path.join(out_dir, "campaign.json"), out, indent=1)
    return out


def _closing_lines(w, summary: dict, rows: list[dict], out_dir: str) -> None:
    """The campaign's verdict in one line, then each failed run with how to replay it."""
    rec = summary["recovery_seconds"]
    failing = {k: v for k, v in summary["outcomes"].items() if not cp.passed(k)}
    w(
        f"chaos --external: {summary['runs'] - summary['failures']}/{summary['runs']} runs passed"
        f" ({', '.join(f'{k} {v}' for k, v in summary['outcomes'].items())})"
        + (f"; {summary['missed']} missed draw(s) not counted" if summary["missed"] else "")
        + (
            ""
            if not failing
            else "; FAILED: "
            + ", ".join(f"{k} {v}" for k, v in failing.items())
            + "; see job.log in their folders"
        )
        + (
            f"; recovery s p50 {rec['p50']:.2f} p90 {rec['p90']:.2f} max {rec['max']:.2f}"
            if rec["n"]
            else ""
        )
        + (
            f"; kill to recovered s max {summary['seconds_from_kill']['max']:.2f}"
            if summary["seconds_from_kill"]["n"]
            else ""
        )
        + f"; report in {out_dir}/campaign.json\n"
    )
    for row in rows:
        if not cp.passed(row["outcome"]):
            w(
                f"  run {row['index']}"
                + (f".{row['draw']}" if row["draw"] else "")
                + f" ({row['kind']}, "
                f"{row['outcome']}): {row['out_dir']}/job.log; replay its kills with the same job flags and "
                f"{row['replay']}\n"
            )


def campaign_from_args(args) -> int:
    """``mixle-mpi chaos --external``: the same job resolution as the fault-plan campaign."""
    from mixle_mpi.chaos.campaign import resolve_args

    cfg, n, out_dir, launch = resolve_args(args)
    return external_campaign(
        cfg,
        n=n,
        runs=args.runs,
        seed=args.campaign_seed,
        out_dir=out_dir,
        run_timeout=args.run_timeout,
        launch=launch,
        kinds=kinds_from_text(args.kinds),
        window=args.kill_window,
        leftover_seconds=args.leftover_seconds,
        window_seconds=args.kill_window_seconds,
        fit_share=args.fit_share,
        fit_window_seconds=args.fit_window_seconds,
        window_from=args.kill_window_from,
        replay=cp.parse_replay(args.replay),
    )
