"""The decisions of ``mixle-mpi chaos --external``, as pure functions over plain data.

An external campaign kills real processes of a running job from outside, with no hook, at
seeded random times: most first kills (``FIT_SHARE``, 3 in 4) land in the fit, the others
anywhere in the whole run, startup included (see :func:`external_plan`). Everything that decides is here and is tested
without MPI or processes (:mod:`mixle_mpi.chaos.external` only reads the process table, sends the
signals and launches the jobs):

- :func:`external_plan`: what one run does (which kind, when, which signal, how the victim is
  picked), from ``(campaign seed, run, draw)`` alone, so any run can be replayed;
- :func:`classify`: which processes of a process table are the job's ranks, which one is
  the driver (world rank 0 of the original job) and which ones were respawned;
- :func:`choose_victim`: the victim of one kill among the ranks alive at that moment;
- :func:`judge`: one run's outcome from what was observed;
- :func:`summarize`: counts per kind and outcome, and the recovery-time distribution.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from mixle_mpi.chaos.fault_plan import SPAWNED_ENV
from mixle_mpi.core import procs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.exitcodes import NEVER_STARTED
from mixle_mpi.launch import ranks
from mixle_mpi.launch.contract import TAG_ENV

# kind: what is killed. "worker": SIGKILL of one worker at a random time (see external_plan); "two_workers": a second worker SIGKILLed 0-300 ms after the first;
# "during_recovery": a second SIGKILL 0.2-2 s after the first, while the job recovers (half of
# the draws prefer the first victim's replacement, when one is up by then); "stop": SIGSTOP
# of one worker, never resumed; "driver": SIGKILL of the driver (the job has a checkpoint),
# then the same command is run again and must resume to the reference's bits.
KINDS = ("worker", "two_workers", "during_recovery", "stop", "driver")
TWO_KILL_KINDS = ("two_workers", "during_recovery")
# Opt-in kinds (``--kinds``; not in the default cycle, so older campaigns replay as they ran).
# "host": a simulated host is lost: every worker of one of them SIGKILLed at once. All ranks
# run on one machine here, so a host is HOST_SIZE consecutive world ranks: the driver alone
# on host 0, ranks 1..HOST_SIZE on host 1, and so on (a respawned process is on none of them).
# "slow": one worker is stopped and continued from outside in a duty cycle (SIGSTOP for
# DUTY_STOP s, SIGCONT for DUTY_RUN s: a quarter of its speed), each stop well under the
# heartbeat timeout, until the job ends: alive and slow, never to be taken for dead.
EXTRA_KINDS = ("host", "slow")
DUTY_STOP, DUTY_RUN = 0.3, 0.1
ALL_KINDS = KINDS + EXTRA_KINDS
HOST_SIZE = 2
TWO_WORKERS_GAP = (0.0, 0.3)
RECOVERY_GAP = (0.2, 2.0)

# When the first kill is due. A kill "after launch" comes ``delay`` seconds after the launch;
# one "after started" comes ``delay`` seconds after this run's launcher marker says the job
# started (every live worker holds its shards: the fit is on). FIT_SHARE of the draws (when a
# fit window is known) are of the second sort, uniform over the reference run's fit
# [t_started, t_end]; the rest are uniform over the whole reference run [0, t_end]. Anchoring
# on the run's own marker, not on the reference's t_started after the launch, keeps fit draws
# in the fit although startup on a shared host takes anywhere from 1 s to 16 s.
LAUNCH, STARTED = "launch", "started"
FIT_SHARE = 0.75

# outcomes: the passing ones, then the failing ones (FAILED carries the exit code)
OK, RESUMED_OK, RETRIED_OK, MISSED = "ok", "resumed-ok", "never-started-retried", "missed"
RELAUNCHED_OK = (
    "relaunched-resumed"  # the driver could not reconfigure (exit 74); the launcher's rerun resumed
)
DIVERGED, HUNG, LEFTOVER, FAILED = "DIVERGED", "HUNG", "LEFTOVER", "FAILED"
EXTRA = "EXTRA-FAILURES"  # the job failed more places than the kills took processes (a live one taken for dead)
TAKEN_OVER_OK = "taken-over"  # the driver died and a survivor took over in the same job (failover)
PASSING = (OK, RESUMED_OK, RETRIED_OK, RELAUNCHED_OK, TAKEN_OVER_OK)

RESPAWN_ENV = SPAWNED_ENV  # Open MPI / MPICH: started by MPI_Comm_spawn
STOPPED_STATES = ("T", "t")
SLOW = "SLOW"  # a KillSpec's "signal" for the slow kind: the duty cycle, not one signal


# -- plans ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KillSpec:
    """One kill: ``delay`` seconds after the launch (the first kill; after the job's
    started marker when ``after`` is ``started``) or after the previous kill (the others); ``signal`` ``SIGKILL``, ``SIGSTOP``
    or ``SLOW`` (the duty cycle of the slow kind); ``target`` ``worker`` or
    ``driver``; ``pick`` in [0, 1) chooses among the candidates alive at that moment."""

    delay: float
    signal: str
    target: str
    pick: float
    prefer_replacement: bool = False
    after: str = LAUNCH


@dataclass(frozen=True)
class ExternalPlan:
    index: int  # the run slot, from 1
    draw: int  # 0, or the redraw after ``draw`` missed attempts of this slot
    kind: str
    kills: tuple

    def describe(self) -> str:
        """A compact form: ``SIGKILL worker @3.12s, SIGKILL worker +0.15s``; a first kill timed
        from the started marker is ``@started+3.12s`` (pure)."""
        out = []
        for i, k in enumerate(self.kills):
            when = (
                (f"@started+{k.delay:.2f}s" if k.after == STARTED else f"@{k.delay:.2f}s")
                if i == 0
                else f"+{k.delay:.2f}s"
            )
            out.append(
                f"{k.signal} {k.target}{' (replacement)' if k.prefer_replacement else ''} {when}"
            )
        return ", ".join(out)


def checkpoints(kinds) -> bool:
    """Whether a campaign's runs write checkpoints: only where a kind kills the driver, whose
    run must resume. A campaign of worker kills runs as a fit does by default, without one,
    so the E-step computed ahead in the scoring round (off while checkpoints are written)
    and its statistics sent ahead of the scores are in the line of fire too."""
    return "driver" in kinds


def kinds_from_text(text: str | None) -> tuple[str, ...]:
    """``--kinds a,b`` as a tuple of kinds (None or empty: all of them)."""
    if not text:
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad or not kinds:
        raise ConfigError(
            f"--kinds: unknown kind(s) {bad or [text]}; valid kinds are {', '.join(ALL_KINDS)}"
        )
    return kinds


START_WINDOW = "start"  # --kill-window start: first kills over the job's handshake and shard load
START_BEFORE = (
    1.5  # seconds before the reference's started marker that window begins (the handshake)
)
START_PAST = (
    0.5  # seconds past the reference's started marker that window reaches (the first round)
)


def window_from_text(text: str) -> float | str:
    """``--kill-window``: a factor > 0 of the reference run's wall time, or ``start``."""
    if text.strip().lower() == START_WINDOW:
        return START_WINDOW
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(
            f"--kill-window must be a factor > 0 of the reference run's wall time, or "
            f"'{START_WINDOW}' (the job's start and shard load); found {text!r}"
        )
    return value


def start_span(t_started: float | None) -> tuple[float, float]:
    """The kill window of ``--kill-window start``, in seconds after the launch: from
    ``START_BEFORE`` before the moment the reference run's started marker appeared (every
    worker held its shards) to ``START_PAST`` after it, so that first kills land in the end
    of MPI init, the handshake, the setup and the shard load, and the first round (pure)."""
    if t_started is None:
        raise ConfigError(
            "--kill-window start needs the reference run's started marker, and it was not seen; "
            "give --kill-window-seconds instead"
        )
    return max(0.0, t_started - START_BEFORE), t_started + START_PAST


def check_campaign(
    workers: int, runs: int, window: float, kinds: tuple, fit_share: float = FIT_SHARE
) -> None:
    """Refuse a campaign that cannot run as asked, saying what was found and what is needed."""
    if not 0.0 <= fit_share <= 1.0:
        raise ConfigError(
            f"--fit-share must be a fraction in [0, 1] of the first kills; found {fit_share}"
        )
    if runs < 1:
        raise ConfigError(f"--runs must be >= 1; found {runs}")
    if window != START_WINDOW and not (window > 0 and math.isfinite(window)):
        raise ConfigError(
            f"--kill-window must be a factor > 0 of the reference run's wall time; found {window}"
        )
    need = 3 if any(k in TWO_KILL_KINDS for k in kinds) else 2
    if "host" in kinds:  # a whole host lost, and a worker on another one left
        need = max(need, HOST_SIZE + 1)
    if workers < need:
        raise ConfigError(
            f"an external campaign with kinds {', '.join(kinds)} needs at least {need} workers "
            f"(-n {need + 1} or more); found {workers} (-n {workers + 1})"
        )


def external_plan(
    seed: int,
    index: int,
    draw: int,
    kind: str,
    window: float,
    fit_window: float | None = None,
    fit_share: float = FIT_SHARE,
    window_from: float = 0.0,
) -> ExternalPlan:
    """Run ``index``'s plan (its ``draw``-th draw) of kind ``kind`` (pure; one run is replayed
    from ``(seed, index, draw)`` and the windows alone, whatever the other runs did).

    The first kill: with a ``fit_window`` (seconds from the reference run's started marker to
    its end) and ``fit_share`` > 0, the rng first decides whether this draw is a fit draw
    (probability ``fit_share``); a fit draw comes at a time uniform over [0, fit_window]
    seconds after this run's started marker (``after="started"``), any other at a time
    uniform over [``window_from``, window] seconds after the launch. Without a fit window (or
    with ``fit_share`` 0) no choice is drawn and every first kill is uniform over that."""
    if kind not in ALL_KINDS:
        raise ConfigError(f"unknown external kind {kind!r}; valid kinds are {', '.join(ALL_KINDS)}")
    rng = random.Random(f"mixle-mpi chaos --external/{seed}/{index}/{draw}")
    in_fit = (
        fit_window is not None and fit_window > 0 and fit_share > 0 and rng.random() < fit_share
    )
    first = rng.uniform(0.0, fit_window) if in_fit else rng.uniform(window_from, window)
    after = STARTED if in_fit else LAUNCH
    if kind == "driver":
        kills = (KillSpec(first, "SIGKILL", "driver", 0.0, after=after),)
    elif kind == "stop":
        kills = (KillSpec(first, "SIGSTOP", "worker", rng.random(), after=after),)
    elif kind == "host":
        kills = (KillSpec(first, "SIGKILL", "host", rng.random(), after=after),)
    elif kind == "slow":
        kills = (KillSpec(first, SLOW, "worker", rng.random(), after=after),)
    else:
        kills = (KillSpec(first, "SIGKILL", "worker", rng.random(), after=after),)
        if kind == "two_workers":
            kills += (KillSpec(rng.uniform(*TWO_WORKERS_GAP), "SIGKILL", "worker", rng.random()),)
        elif kind == "during_recovery":
            gap, pick, prefer = rng.uniform(*RECOVERY_GAP), rng.random(), rng.random() < 0.5
            kills += (KillSpec(gap, "SIGKILL", "worker", pick, prefer),)
    return ExternalPlan(index, draw, kind, kills)


def campaign_plans(
    seed: int,
    runs: int,
    window: float,
    kinds: tuple = KINDS,
    fit_window: float | None = None,
    fit_share: float = FIT_SHARE,
    window_from: float = 0.0,
) -> list[ExternalPlan]:
    """The first draw of every run slot; kinds cycle so that every kind appears early (pure)."""
    return [
        external_plan(
            seed, i + 1, 0, kinds[i % len(kinds)], window, fit_window, fit_share, window_from
        )
        for i in range(runs)
    ]


def parse_replay(text: str | None) -> list[tuple[int, int]]:
    """``--replay 4,7.1`` as [(run, draw)]: run 4's first draw, run 7's second (pure)."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        run, _, draw = item.partition(".")
        if not run.isdigit() or int(run) < 1 or (draw and not draw.isdigit()):
            raise ConfigError(
                f"--replay takes runs as RUN or RUN.DRAW (e.g. 4,7.1), as the table numbers them; "
                f"found {item!r}"
            )
        out.append((int(run), int(draw or 0)))
    return out


def replay_plans(
    seed: int,
    slots: list[tuple[int, int]],
    window: float,
    kinds: tuple = KINDS,
    fit_window: float | None = None,
    fit_share: float = FIT_SHARE,
    window_from: float = 0.0,
) -> list[ExternalPlan]:
    """The plans of the given (run, draw) slots of a campaign with this seed, windows, share
    and kinds: the same kills as in that campaign (pure)."""
    return [
        external_plan(
            seed,
            run,
            draw,
            kinds[(run - 1) % len(kinds)],
            window,
            fit_window,
            fit_share,
            window_from,
        )
        for run, draw in slots
    ]


# -- the process table ------------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    """One row of a process table (what ``/proc`` says about a process)."""

    pid: int
    ppid: int
    state: str
    argv: tuple
    env: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class RankProc:
    """A rank's Python process: ``rank`` is its world rank (0 for a respawned one, which is
    rank 0 of a world of its own); ``role`` is ``driver`` or ``worker``."""

    pid: int
    role: str
    rank: int
    respawned: bool
    state: str
    tag: str | None = None
    wrapper: int | None = None  # pid of the MPICH rank wrapper (sh rankwrap.sh) around it

    @property
    def alive(self) -> bool:
        return self.state not in procs.GONE

    def label(self) -> str:
        who = (
            "driver"
            if self.role == "driver"
            else ("respawned worker" if self.respawned else f"worker {self.rank}")
        )
        return f"{who} pid {self.pid}"


def descendants(table: dict, root: int) -> list[int]:
    """Pids under ``root`` in ``table`` (pid -> Proc), root excluded, parents first (pure)."""
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, stack = [], sorted(children.get(root, []), reverse=True)
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(sorted(children.get(pid, []), reverse=True))
    return out


def classify(table: dict, root: int, tags: frozenset | set = frozenset()) -> list[RankProc]:
    """The job's rank processes in ``table`` (pid -> Proc): processes under ``root`` (the
    launcher), or anywhere when they carry one of the job's ``tags``, that have an MPI rank
    in their environment and wrap no other process of the same rank
    (``ranks.rank_processes``, whatever the interpreter is called). A rank started by ``MPI_Comm_spawn`` (Open MPI sets
    ``OMPI_PARENT_PORT``, MPICH ``PMI_SPAWNED=1``; our MPICH wrapper gets ``--worker``) is a
    respawned worker; the driver is world rank 0 of an original job. Under MPICH the rank
    is the wrapper's Python child, never the ``sh`` wrapper itself (pure)."""
    under = set(descendants(table, root))
    candidates = [
        pid
        for pid, p in table.items()
        if pid != root
        and (pid in under or (p.env.get(TAG_ENV) is not None and p.env.get(TAG_ENV) in tags))
    ]
    out = []
    for pid in ranks.rank_processes(table, candidates):
        p = table[pid]
        rank = ranks.world_rank(p.env)
        parent = table.get(p.ppid)
        wrapper = parent.pid if parent is not None and ranks.is_rank_wrapper(parent.argv) else None
        respawned = any(var in p.env for var in RESPAWN_ENV) or (
            wrapper is not None and "--worker" in parent.argv[2:3]
        )
        role = "driver" if rank == 0 and not respawned else "worker"
        out.append(RankProc(pid, role, rank, respawned, p.state, p.env.get(TAG_ENV), wrapper))
    return out


def choose_victim(
    ranks: list[RankProc],
    spec: KillSpec,
    done: set | frozenset = frozenset(),
    hold_for_replacement: bool = False,
) -> RankProc | None:
    """The victim of ``spec`` among ``ranks`` (pure): a live rank of the target role that
    this run has not signalled yet (a SIGSTOP never picks a stopped rank); with
    ``prefer_replacement``, a respawned worker when one is there, and none at all while
    ``hold_for_replacement`` (the replacement may still appear: the executor then kills it
    the moment it does, inside its spawn). Candidates are ordered by (respawned, rank, pid)
    and ``spec.pick`` indexes them, so a replay with the same table picks the same process.
    None when there is no candidate."""
    cands = [
        r
        for r in ranks
        if r.role == spec.target
        and r.alive
        and r.pid not in done
        and not (spec.signal in ("SIGSTOP", SLOW) and r.state in STOPPED_STATES)
    ]
    if spec.prefer_replacement:
        if any(r.respawned for r in cands):
            cands = [r for r in cands if r.respawned]
        elif hold_for_replacement:
            return None
    if not cands:
        return None
    cands.sort(key=lambda r: (r.respawned, r.rank, r.pid))
    return cands[min(len(cands) - 1, int(spec.pick * len(cands)))]


def host_of(rank: int) -> int:
    """The simulated host of world rank ``rank`` (pure): 0 for the driver, then HOST_SIZE
    consecutive ranks per host."""
    return 0 if rank <= 0 else 1 + (rank - 1) // HOST_SIZE


def choose_host(
    ranks: list[RankProc], spec: KillSpec, done: set | frozenset = frozenset()
) -> list[RankProc]:
    """The victims of a lost host (pure): every live original worker of the host that
    ``spec.pick`` indexes among the hosts that have one, the driver's host never (its loss is
    the kind ``driver``). Empty when no worker host is left."""
    cands = [
        r for r in ranks if r.role == "worker" and r.alive and not r.respawned and r.pid not in done
    ]
    hosts = sorted({host_of(r.rank) for r in cands} - {0})
    if not hosts:
        return []
    host = hosts[min(len(hosts) - 1, int(spec.pick * len(hosts)))]
    return sorted((r for r in cands if host_of(r.rank) == host), key=lambda r: (r.rank, r.pid))


def never_started_explained(victim_tags: list, attempts: int) -> bool:
    """A final exit 73 ("never started") is explained only if each of the launcher's
    ``attempts`` (one job tag each) lost a rank to this run's kills; otherwise the launcher
    gave up on a start that nothing disturbed (pure)."""
    return attempts >= 1 and len({t for t in victim_tags if t is not None}) >= attempts


def phase_at(
    wall: float,
    events: list[dict],
    mpi_up: bool | None = None,
    started: bool | None = None,
    checkpoints: bool = True,
) -> str:
    """Where the job was at wall-clock time ``wall`` (pure), from its event log and the
    launcher's startup markers as they were at that moment (``mpi_up``: MPI initialisation
    had finished on rank 0; ``started``: every live worker held its shards):

    ``start/init`` (process start, imports and MPI initialisation), ``handshake`` (the driver prepares
    the data, gathers the workers and writes the shard store; ``startup`` when the markers
    are unknown), ``shard load`` (the workers are set up and get their shards), ``it N``
    (iteration N: after checkpoint N-1; ``fit`` in a run without ``checkpoints``, which logs
    no iteration), ``close`` (after the final checkpoint, or the handle closed)."""
    before = [e for e in events if e.get("time", float("inf")) <= wall]
    if not any(e.get("event") == "start" for e in before):
        return "startup" if mpi_up is None else ("handshake" if mpi_up else "start/init")
    last_start = max(i for i, e in enumerate(before) if e.get("event") == "start")
    since = before[last_start:]
    if any(
        e.get("event") == "closed" or (e.get("event") == "checkpoint" and e.get("finished"))
        for e in since
    ):
        return "close"
    its = [e.get("iteration") or 0 for e in since if e.get("event") in ("checkpoint", "resumed")]
    if its:
        return f"it {max(its) + 1}"
    if started is None:
        return "setup"
    return ("it 1" if checkpoints else "fit") if started else "shard load"


def phase_group(phase: str | None) -> str:
    """``it N`` counts as ``fit`` in the report's histogram (pure)."""
    return "fit" if phase and phase.startswith("it ") else (phase or "unknown")


# -- judging ---------------------------------------------------------------------------------
@dataclass
class Launch:
    """What one launch of the job did, as observed from outside."""

    code: int | None
    seconds: float
    hung: bool = False
    has_result: bool = False
    diffs: list = field(default_factory=list)
    leftovers: list = field(default_factory=list)
    retried: bool = False  # the launcher itself started the job again (exit 73 on its first try)
    relaunched: bool = (
        False  # the launcher ran it again to resume (exit 74: the driver could not reconfigure)
    )
    taken_over: bool = False  # a survivor took over from a dead driver in the same job (failover)

    @property
    def identical(self) -> bool:
        return self.code == 0 and self.has_result and not self.diffs


def judge(
    kind: str,
    first: Launch,
    *,
    missed: bool,
    explained_73: bool,
    rerun: Launch | None = None,
    failed_places: int = 0,
    killed: int = 0,
) -> str:
    """One run's outcome (pure). Failing outcomes win over passing ones, so a run whose kill
    missed but whose job went wrong still fails the campaign:

    - ``HUNG``: a launch overran its deadline; ``DIVERGED``: it finished with other bits;
    - ``FAILED(code)``: an exit that the kills do not explain (only a driver kill, and a
      never-started exit whose every attempt lost a rank, are explained: both are run again
      and the rerun must give the reference's bits), or exit 0 without a result;
    - ``LEFTOVER``: a process of the job outlived the launcher by the grace period;
    - ``EXTRA-FAILURES``: the job counted more failed places (``failed_places``) than the
      kills took processes (``killed``): a live worker was taken for dead;
    - ``missed``: a planned kill found no victim (the job had ended): not a run of its kind;
    - ``resumed-ok`` (driver killed, the rerun resumed to the same bits),
      ``never-started-retried`` (a startup death, and the launcher or the campaign started it
      again, to the same bits), ``relaunched-resumed`` (the driver could not reconfigure,
      exit 74, and the launcher ran the job again, which resumed to the same bits),
      ``taken-over`` (the driver died and a survivor took over, failover), ``ok``.
    """
    launches = [first] + ([rerun] if rerun is not None else [])
    if any(x.hung for x in launches):
        return HUNG
    if first.code == 0:
        final, verdict = (
            first,
            (
                RELAUNCHED_OK
                if first.relaunched
                else RETRIED_OK
                if first.retried
                else TAKEN_OVER_OK
                if first.taken_over
                else OK
            ),
        )
    elif needs_rerun(kind, first, explained_73) and rerun is not None:
        final, verdict = rerun, (RETRIED_OK if first.code == NEVER_STARTED else RESUMED_OK)
    else:
        return f"{FAILED}({first.code})"
    if final.code == 0 and final.has_result and final.diffs:
        return DIVERGED
    if not final.identical:
        return f"{FAILED}({final.code})"
    if any(x.leftovers for x in launches):
        return LEFTOVER
    if failed_places > killed:
        return EXTRA
    return MISSED if missed else verdict


def needs_rerun(kind: str, first: Launch, explained_73: bool) -> bool:
    """Whether the same command must be run again to judge the run (pure): after a driver
    kill that ended the job, or an explained never-started exit."""
    if first.hung or first.code == 0:
        return False
    if first.code == NEVER_STARTED:
        return explained_73
    return kind == "driver"


def passed(outcome: str) -> bool:
    return outcome in PASSING or outcome == MISSED


# -- the report ------------------------------------------------------------------------------
def percentile(xs: list, p: float) -> float | None:
    """The ``p``-th percentile of ``xs`` by linear interpolation between closest ranks (pure)."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def distribution(xs: list) -> dict:
    xs = [x for x in xs if x is not None]
    return {
        "n": len(xs),
        "min": min(xs) if xs else None,
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs) if xs else None,
    }


def summarize(rows: list[dict], kinds: tuple = KINDS) -> dict:
    """Counts per kind and outcome, runs per kind (missed draws not counted), failures, and
    the recovery-time distribution overall and per kind, from the runs' rows (pure)."""
    per_kind = {k: {} for k in kinds}
    for r in rows:
        per_kind.setdefault(r["kind"], {})
        per_kind[r["kind"]][r["outcome"]] = per_kind[r["kind"]].get(r["outcome"], 0) + 1
    counted = [r for r in rows if r["outcome"] != MISSED]
    failures = [r for r in rows if not passed(r["outcome"])]
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    rec = [r.get("recovery_seconds") for r in counted]
    phases: dict[str, int] = {}
    for r in counted:
        for k in r.get("kills", []):
            if k.get("delivered"):
                g = phase_group(k.get("phase"))
                phases[g] = phases.get(g, 0) + 1
    return {
        "runs": len(counted),
        "missed": len(rows) - len(counted),
        "runs_per_kind": {k: sum(1 for r in counted if r["kind"] == k) for k in per_kind},
        "outcomes": dict(sorted(outcomes.items())),
        "per_kind": per_kind,
        "failures": len(failures),
        "kills_per_phase": dict(sorted(phases.items())),
        "recovery_seconds": distribution(rec),
        "seconds_from_kill": distribution([r.get("seconds_from_kill") for r in counted]),
        "recovery_seconds_per_kind": {
            k: distribution([r.get("recovery_seconds") for r in counted if r["kind"] == k])
            for k in per_kind
        },
        "ok": not failures and len(counted) > 0,
    }
