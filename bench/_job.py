"""One benchmark fit under MPI, timed per EM iteration on rank 0 (used by bench/overhead.py).

    python -m mixle_mpi run -n W+1 -- python bench/_job.py --backend resilient --model gmm1d ...
    python -m mixle_mpi run -n W   -- python bench/_job.py --backend mixle     --model gmm1d ...

``resilient``: mixle_mpi's ResilientMPIEncodedData (rank 0 drives, ranks 1..W compute).
``mixle``: mixle's own MPIEncodedData (SPMD: every rank, rank 0 included, computes and every
rank calls optimize).

optimize runs with ``delta=None`` so it does exactly ``--its`` iterations (unless a step is
rejected as a decrease, which mixle ends the loop on; the count actually done is recorded).
Rank 0 timestamps the end of every iteration through optimize's ``on_step`` callback; the
differences of consecutive timestamps are the per-iteration times of iterations 2..its (the
first iteration is discarded). The handle's ``pysp_seq_estimate`` / ``pysp_seq_log_density_sum``
calls are also timed on rank 0, and the per-rank compute (E-step accumulation and scoring) is
timed where it runs, so the report can say where an iteration's time goes. No timing is
asserted anywhere; rank 0 writes a JSON record to ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import pickle
import resource
import shutil
import statistics
import sys
import threading
import time

import numpy as np

# The project root (parent of bench/) must be importable however this script is started.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


# -- models -----------------------------------------------------------------------------------
def model_spec(name: str):
    """(description, estimator factory, sampler(n, seed)) for a benchmark model."""
    from mixle_mpi.fitting import models

    if name == "gmm1d":
        m = models.get_model("gmm1d")
        return "1-D Gaussian mixture, K=3", m.estimator, m.sample
    if name == "diag":
        m = models.diag_mixture(dim=16, k=8)
        return "diagonal Gaussian mixture, K=8, D=16", m.estimator, m.sample
    if name == "hmm":
        m = models.get_model("hmm")
        return "2-state Gaussian HMM, Poisson(8) lengths (N = sequences)", m.estimator, m.sample
    raise SystemExit(f"unknown model {name!r}; valid: gmm1d, diag, hmm")


MODEL_NAMES = ("gmm1d", "diag", "hmm")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--backend", choices=["resilient", "mixle", "bare"], required=True)
    p.add_argument("--model", choices=MODEL_NAMES, default="gmm1d")
    p.add_argument("--n", type=int, default=100000)
    p.add_argument(
        "--its", type=int, default=6, help="EM iterations (delta=None: exactly this many)"
    )
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument("--seed", type=int, default=7, help="seed of the EM initialization")
    p.add_argument("--init-p", type=float, default=0.1)
    p.add_argument(
        "--mixle-data",
        choices=["root", "all"],
        default="root",
        help="mixle backend: data on rank 0 only (root_only=True, scattered) or on every rank",
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="resilient backend: shard store/event log dir (default: a temp dir)",
    )
    p.add_argument(
        "--profile", default=None, help="cProfile rank 0's optimize() call into this .pstats file"
    )
    p.add_argument(
        "--poll-cap",
        type=float,
        default=None,
        help="what-if (resilient only): set the ceiling of mixle_mpi's polling backoff to this "
        "many seconds on every rank (the library's own is 5 ms); a diagnostic, not a setting "
        "of the library",
    )
    p.add_argument(
        "--no-poll-windows",
        action="store_true",
        help="what-if (resilient only): no fine polling where a message is due (policy/pacing.py); "
        "every wait backs off to its ceiling as before",
    )
    p.add_argument(
        "--num-shards",
        type=int,
        default=None,
        help="resilient: shards S (default here: one per worker, like for like with mixle's MPI handle)",
    )
    p.add_argument(
        "--h5",
        default=None,
        help="resilient: read the data from this HDF5 file (dataset 'data'), "
        "handed to the handle as an h5py.Dataset; --n and --data-seed are then ignored",
    )
    p.add_argument(
        "--count-bytes",
        action="store_true",
        help="resilient: count the pickled bytes of every message the driver sends and receives",
    )
    p.add_argument(
        "--launched-at",
        type=float,
        default=None,
        help="wall time at which the launcher was started (for launch-to-first-E-step)",
    )
    p.add_argument("--out", required=True, help="rank 0 writes the JSON record here")
    return p.parse_args(argv)


# -- timing helpers -----------------------------------------------------------------------------
# time.monotonic() is CLOCK_MONOTONIC on Linux: one clock for every process on the host, so the
# workers' compute stamps can be placed on rank 0's iteration timeline.
now = time.monotonic


class StepClock:
    """optimize's on_step callback: a timestamp at the end of every iteration."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self.cpu: list[float] = []  # this process's CPU seconds (all threads) at each stamp
        self.lls: list[float] = []

    def __call__(self, step) -> None:
        self.stamps.append(now())
        self.cpu.append(time.process_time())
        self.lls.append(float(step.log_density))

    def cpu_cores(self) -> float | None:
        """Cores this process kept busy over iterations 2..its (polling and heartbeats included)."""
        if len(self.stamps) < 2:
            return None
        return (self.cpu[-1] - self.cpu[0]) / (self.stamps[-1] - self.stamps[0])

    def per_iteration(self) -> list[float]:
        # stamps[k] - stamps[k-1] is iteration k+1 (1-based); iteration 1 has no start stamp: discarded
        return [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]


def timed(fn, done):
    """``fn`` wrapped to call ``done(start, end)`` after every call, even a failing one."""

    @functools.wraps(fn)
    def wrapper(*a, **k):
        t0 = now()
        try:
            return fn(*a, **k)
        finally:
            done(t0, now())

    return wrapper


def time_method(obj, name: str, sink: list, label: str) -> None:
    """Shadow obj.name with a wrapper appending (label, end, seconds) per call (an instance
    attribute: mixle dispatches through hasattr/getattr on the handle, so the wrapper is what
    gets called)."""
    setattr(obj, name, timed(getattr(obj, name), lambda t0, t1: sink.append((label, t1, t1 - t0))))


def seconds_by_source(events, start: float, end: float, labels, by_source: bool = True) -> dict:
    """The summed seconds of the events labelled one of ``labels`` that end inside
    ``(start, end]``, per source (events are (label, end, seconds, source, ...)), or all under
    0 without ``by_source``."""
    per: dict = {}
    for ev in events:
        if ev[0] in labels and start < ev[1] <= end:
            src = ev[3] if by_source else 0
            per[src] = per.get(src, 0.0) + ev[2]
    return per


def per_iteration_totals(events, stamps, label, by_source=False) -> list[float]:
    """For iterations 2..its: the summed seconds of ``label`` events ending inside each iteration.
    With by_source, the slowest source counts (the workers compute in parallel)."""
    out = []
    for a, b in zip(stamps, stamps[1:], strict=False):
        per = seconds_by_source(events, a, b, (label,), by_source)
        out.append(max(per.values()) if per else 0.0)
    return out


COMPUTE = ("worker_estep", "worker_llsum")  # a rank's compute in a round (the driver's share too)


def rounds_beyond_compute(wev, estep_rounds, stamps, announces) -> list[dict]:
    """Per E-step round of iterations 2..: its time beyond the slowest E-step process's compute
    in it (each rank's E-step and scoring computes that end inside the round, summed), which
    rank computed longest (0: the driver's own share), and how a round starts, in seconds
    after it did: the driver has rung the workers (``rung``), a worker has its task
    (``received``), has unpickled its model (``model``), starts computing (``computing``).
    The round's own timings, so a round where the driver is last and one where a worker is
    are told apart."""
    out = []
    lo = stamps[0] if stamps else float("inf")
    for start, end, scored in estep_rounds:
        if start < lo:
            continue
        per = seconds_by_source(wev, start, end, COMPUTE)
        marks: dict = {}

        def first(label, at, start=start, marks=marks):
            if at - start < marks.get(label, float("inf")):
                marks[label] = at - start

        for ev in wev:
            if not start < ev[1] <= end:
                continue
            if ev[0] in COMPUTE and ev[3] != 0:
                first("computing", ev[1] - ev[2])
            elif ev[0] == "worker_recv":
                first("received", ev[1])
            elif ev[0] == "worker_body":
                first("model", ev[1])
        for _label, at, _dur in announces:
            if start < at <= end:
                first("rung", at)
        if per:
            slowest = max(per, key=per.get)
            out.append(
                {
                    "beyond": (end - start) - per[slowest],
                    "slowest": slowest,
                    "scored": scored,
                    **marks,
                }
            )
    return out


def round_start(per_round: list[dict]) -> dict:
    """Medians over rounds of ``rounds_beyond_compute``'s start marks, and of the time beyond
    compute where the driver (rank 0) computed longest and where a worker did."""
    out = {
        k: med([r.get(k) for r in per_round]) for k in ("rung", "received", "model", "computing")
    }
    for who, rows in (
        ("driver", [r for r in per_round if r["slowest"] == 0]),
        ("worker", [r for r in per_round if r["slowest"] != 0]),
    ):
        out[f"beyond_where_{who}_slowest"] = med([r["beyond"] for r in rows])
        out[f"rounds_{who}_slowest"] = len(rows)
    return out


def mixle_calls_beyond_compute(calls, computes, msteps, stamps) -> list[float]:
    """mixle's handle, per E-step call of iterations 2..: the call's time beyond the slowest
    rank's local E-step in it and the root's M-step (the same figure as
    ``rounds_beyond_compute`` for ours, whose round holds no M-step): the fixed cost of its
    model broadcast, reduction and fold."""
    lo = stamps[0] if stamps else float("inf")
    out = []
    for label, end, dur in calls:
        start = end - dur
        if label != "estep_call" or start < lo:
            continue
        per = seconds_by_source(computes, start, end, ("local_estep",))
        mstep = sum(seconds_by_source(msteps, start, end, ("mstep",), by_source=False).values())
        if per:
            out.append(dur - mstep - max(per.values()))
    return out


def summary(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def run_optimize(est, enc, args, clock, out_stream, profile_path):
    from mixle.inference.estimation import optimize

    kwargs = dict(
        enc_data=enc,
        max_its=args.its,
        delta=None,
        init_p=args.init_p,
        rng=np.random.RandomState(args.seed),
        on_step=clock,
        out=out_stream,
        print_iter=0,
    )
    if profile_path:
        import cProfile

        # MIXLE_MPI_PROFILE_CPU=1: CPU time, not wall time (on an oversubscribed machine wall
        # time charges a call for the time its process waited for a core)
        cpu = os.environ.get("MIXLE_MPI_PROFILE_CPU") == "1"
        prof = cProfile.Profile(time.thread_time) if cpu else cProfile.Profile()
        prof.enable()
        try:
            return optimize(None, est, **kwargs)
        finally:
            prof.disable()
            prof.dump_stats(profile_path)
    return optimize(None, est, **kwargs)


def write_json(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    os.replace(tmp, path)


def estep_work_calls(events, estep_rounds) -> list[float]:
    """Per E-step round, the seconds of the calls it served: its own E-step call, or, computed
    ahead in a scoring call (policy/lookahead.py), that scoring call plus the E-step call that
    took its results (fold end and M-step). What one E-step costs the fit either way."""

    def spans(label):
        return [(end - dur, end) for lab, end, dur, *_ in events if lab == label]

    estep, llsum, out = spans("estep_call"), spans("llsum_call"), []
    for start, _end, scored in estep_rounds:
        if scored:
            a, b = next(c for c in llsum if c[0] <= start <= c[1])
            e = next((c for c in estep if c[0] >= b), (b, b))
            out.append((b - a) + (e[1] - e[0]))
        else:
            a, b = next(c for c in estep if c[0] <= start <= c[1])
            out.append(b - a)
    return out


def base_record(args, describe, clock, t_setup, t_fit, events) -> dict:
    per_it = clock.per_iteration()
    st = clock.stamps
    return {
        "backend": args.backend,
        "model": args.model,
        "describe": describe,
        "n": args.n,
        "its_requested": args.its,
        "poll_cap": getattr(args, "poll_cap", None),
        "its_done": len(st),
        "per_iteration_seconds": per_it,
        "median": statistics.median(per_it) if per_it else None,
        "min": min(per_it) if per_it else None,
        "max": max(per_it) if per_it else None,
        "setup_seconds": t_setup,
        "fit_seconds": t_fit,
        "final_ll": clock.lls[-1] if clock.lls else None,
        "lls": list(clock.lls),  # every iteration's log likelihood: the bits, compared across runs
        "rank0_cpu_cores": clock.cpu_cores(),
        # rank 0's view of the two handle calls in each iteration 2..its
        "rank0_estep_call": summary(per_iteration_totals(events, st, "estep_call")),
        "rank0_llsum_call": summary(per_iteration_totals(events, st, "llsum_call")),
    }


# -- the resilient backend --------------------------------------------------------------------
# Everything below is heard through mixle_mpi.core.probes (the points the runtime reports):
# nothing of the package is patched, and no private name of it is used.
SHARD_COMPUTE = {"estep_shard": "worker_estep", "score_shard": "worker_llsum"}  # probe -> label


def _instrument_workers(timing_dir: str):
    """On every rank (before the handle is built): time the per-shard compute the workers run,
    one JSON line per call in timing_dir. Worker ranks never return from the handle's
    constructor, so a file is how their numbers reach rank 0."""
    from mpi4py import MPI

    from mixle_mpi.core import probes

    rank = MPI.COMM_WORLD.Get_rank()
    path = os.path.join(timing_dir, f"worker_{rank}_{os.getpid()}.jsonl")
    # one line per call: label, end, wall s, rank, process CPU s, this thread's CPU s, and its
    # minor page faults (fresh pages for temporaries made the workers' E-step slow once)

    # The lines are kept in memory and written when the worker next waits for a command (off
    # the round's critical path: a file append between a shard's E-step and its reply was
    # charged to ours and not to mixle's, whose timings stay in memory too).
    lines: list[str] = []
    started: dict = {}  # (probe, thread) -> (minor faults, wall, thread CPU) at its begin
    listed: list = []

    def list_modules() -> None:
        """At a worker's first E-step: the modules it has imported by then, for the startup
        item (bench/memory_startup.py times importing them in a fresh interpreter)."""
        if not listed and rank != 0:
            listed.append(True)
            with open(
                os.path.join(timing_dir, f"modules_{rank}.json"), "w", encoding="utf-8"
            ) as fh:
                json.dump(sorted(sys.modules), fh)

    def compute(ev) -> None:
        key = (ev.name, threading.get_ident())
        if ev.phase == "begin":
            if ev.name == "estep_shard":
                list_modules()
            started[key] = (
                resource.getrusage(resource.RUSAGE_THREAD).ru_minflt,
                now(),
                time.thread_time(),
            )
            return
        f0, t0, c0 = started.pop(key)
        t1, c1 = now(), time.thread_time()
        f1 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        lines.append(
            json.dumps(
                [SHARD_COMPUTE[ev.name], t1, t1 - t0, rank, time.process_time(), c1 - c0, f1 - f0]
            )
            + "\n"
        )

    def hear(ev) -> None:
        if ev.name in SHARD_COMPUTE:
            compute(ev)
        elif ev.name in ("worker_body", "worker_recv"):
            # when a worker has its task (the end of recv) and the task's model unpickled: the
            # start of a round on the worker's side (rounds_beyond_compute); only the span's
            # own end and length (no resource counters): this is on the round's critical path
            if ev.phase == "end":
                lines.append(f'["{ev.name}", {ev.at!r}, {ev.seconds!r}, {rank}]\n')
            elif ev.name == "worker_recv":
                flush()

    def flush() -> None:
        if lines:
            with open(path, "a", encoding="utf-8") as fh:
                fh.writelines(lines)
            lines.clear()

    probes.listen(hear)
    return flush  # the driver's own share (driver_computes) is written when it calls this


def _instrument_driver(
    events: list, estep_rounds: list, announces: list, payload: dict, count_bytes: bool
) -> dict:
    """Rank 0, once the handle is built: the handle's two calls and the driver's rounds into
    ``events``, every E-step round's (start, end, scored) into ``estep_rounds``, when the
    driver rings the workers into ``announces``. Returns what it saw of the driver's mailroom
    (``"mail"``, for the workers it rings at the end)."""
    from mixle_mpi.core import probes

    seen: dict = {}

    def hear(ev) -> None:
        if ev.phase != "end":
            return
        if ev.name in ("estep_call", "llsum_call"):
            events.append((ev.name, ev.at, ev.seconds))
        elif (
            ev.name == "round"
        ):  # the driver's round (dispatch -> last shard result; no fold, no M-step)
            kind = ev.args[1]
            events.append((f"{kind}_round", ev.at, ev.seconds))
            if kind == "estep":
                estep_rounds.append(
                    (ev.at - ev.seconds, ev.at, ev.kwargs.get("scores") is not None)
                )
                if count_bytes and "estep_result_bytes" not in payload and ev.result is not None:
                    payload["estep_result_bytes"] = sum(len(v) for v in ev.result.values())
                    payload["estep_stat_numeric_bytes"] = sum(
                        numeric_bytes(pickle.loads(v)) for v in ev.result.values()
                    )
        elif ev.name == "workers_rung":  # the driver has rung the workers a round was sent to
            announces.append(("announce", ev.at, ev.seconds))
            seen["mail"] = ev.args[0]

    probes.listen(hear)
    return seen


def run_resilient(args) -> None:
    from mpi4py import MPI

    from mixle_mpi import ResilientMPIEncodedData, is_driver

    describe, make_est, sample = model_spec(args.model)
    est = make_est()
    driver = is_driver()
    # every rank needs the workdir path before the handle is built: given, or derived from --out
    workdir = args.workdir or (args.out + ".work")
    timing_dir = os.path.join(workdir, "timing")
    if driver:
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(timing_dir, exist_ok=True)
    h5file = None
    if driver and args.h5:
        import h5py

        h5file = h5py.File(args.h5, "r")
        data = h5file["data"]  # an h5py.Dataset: the handle streams it into the shard store
    else:
        data = sample(args.n, args.data_seed) if driver else None
    MPI.COMM_WORLD.Barrier()  # the timing dir exists before any worker could write into it
    flush_timings = _instrument_workers(timing_dir)
    if args.poll_cap is not None or args.no_poll_windows:
        from mixle_mpi.policy import pacing

        pacing.what_if(ceiling=args.poll_cap, windows=not args.no_poll_windows)
    events: list = []
    startup: dict = {"script_started_at": args.script_started_at}
    if driver:
        _instrument_driver_startup(startup)
        if args.count_bytes:
            _count_bytes(events)
    t0 = now()
    startup["handle_start"] = time.time()
    # one shard per worker unless told: the comparison with mixle's MPIEncodedData (one
    # partition per process) is then like for like
    from mpi4py import MPI

    from mixle_mpi.core.settings import Settings

    here = 1 if Settings.resolve().driver_computes else 0  # the driver computes a share too
    shards = args.num_shards or max(1, MPI.COMM_WORLD.Get_size() - 1 + here)
    enc = ResilientMPIEncodedData(
        data, estimator=est, workdir=workdir, num_shards=shards
    )  # workers serve inside
    startup["handle_done"] = time.time()
    startup["vmhwm_after_setup"] = vm_hwm()
    t_setup = now() - t0
    del data
    estep_rounds: list = []  # (start, end, scored) of every E-step round
    payload: dict = {}
    announces: list = []  # the driver has rung the workers a round was sent to
    seen = _instrument_driver(events, estep_rounds, announces, payload, args.count_bytes)
    clock = StepClock()
    t1 = now()
    with enc:
        run_optimize(est, enc, args, clock, None, args.profile)
        t_fit = now() - t1
        num_shards = enc.num_shards
        failures = sum(enc.failures.values())
        rounds = enc.rounds
        driver_shards = list(enc.driver_shards)
        rung = sorted(seen["mail"].bells) if "mail" in seen else []
    if h5file is not None:
        h5file.close()
    st = clock.stamps
    record = base_record(args, describe, clock, t_setup, t_fit, events)
    record["driver_estep_round"] = summary(per_iteration_totals(events, st, "estep_round"))
    record["driver_llsum_round"] = summary(per_iteration_totals(events, st, "llsum_round"))
    flush_timings()
    wev = []
    for f in glob.glob(os.path.join(timing_dir, "worker_*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            wev.extend(tuple(json.loads(line)) for line in fh if line.strip())
    # per iteration, the slowest worker's compute (the workers run in parallel)
    record["worker_estep_compute"] = summary(
        per_iteration_totals(wev, st, "worker_estep", by_source=True)
    )
    record["worker_llsum_compute"] = summary(
        per_iteration_totals(wev, st, "worker_llsum", by_source=True)
    )
    per_round = rounds_beyond_compute(wev, estep_rounds, st, announces)
    record["round_beyond_compute"] = summary([r["beyond"] for r in per_round])
    record["round_start"] = round_start(per_round)
    record["round_beyond_compute_rounds"] = per_round
    # each worker's CPU use (all its threads) between its last events of iteration 1 and of its
    # final iteration, divided by the same wall span: compute + polling + heartbeat thread
    cores = []
    for src in sorted({ev[3] for ev in wev}):
        mine = sorted((ev for ev in wev if ev[3] == src and len(ev) > 4), key=lambda ev: ev[1])
        first = [ev for ev in mine if ev[1] <= st[0]] if st else []
        if first and mine[-1][1] > first[-1][1]:
            cores.append((mine[-1][4] - first[-1][4]) / (mine[-1][1] - first[-1][1]))
    record["worker_cpu_cores"] = cores
    record.update(
        ranks=MPI.COMM_WORLD.Get_size(),
        compute_ranks=MPI.COMM_WORLD.Get_size() - 1 + (1 if driver_shards else 0),
        driver_shards=driver_shards,
        num_shards=num_shards,
        failures=failures,
        rounds=rounds,
        estep_calls=[list(ev) for ev in events if ev[0] == "estep_call"],
        iteration_stamps=st,
        launched_at=args.launched_at,
        payload=payload,
        rung_workers=rung,
        estep_work_calls=estep_work_calls(events, estep_rounds),
    )
    startup["first_round_started_at"] = rounds[0]["started_at"] if rounds else None
    listed = sorted(glob.glob(os.path.join(timing_dir, "modules_*.json")))
    if listed:
        with open(listed[0], encoding="utf-8") as fh:
            startup["worker_modules"] = json.load(fh)
    startup["vmhwm_end"] = vm_hwm()
    record["startup"] = startup
    record["worker_page_faults_per_estep"] = med(
        [ev[6] for ev in wev if ev[0] == "worker_estep" and len(ev) > 6]
    )
    if args.count_bytes:
        for label in ("bytes_down", "bytes_up", "bytes_hb"):
            record[label] = summary(per_iteration_totals(events, st, label))
    evpath = os.path.join(workdir, "events.jsonl")
    if os.path.exists(evpath):
        with open(evpath, encoding="utf-8") as fh:
            record["events"] = [json.loads(line) for line in fh if line.strip()]
    write_json(args.out, record)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    # the driver's atexit hook closes up, writes the launcher's status file and exits 0


def run_bare(args) -> None:
    """The floor under any startup figure: the same launcher and interpreters, numpy and
    MPI initialised, every rank at one barrier; no mixle, no data, no handle."""
    from mpi4py import MPI

    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() == 0:
        write_json(
            args.out,
            {
                "launched_at": args.launched_at,
                "script_started_at": args.script_started_at,
                "barrier_done_at": time.time(),
            },
        )
        from mixle_mpi.runtime.exiting import write_status

        write_status(0, "finished (bare MPI startup benchmark job)")


def vm_hwm() -> int | None:
    """This process's peak resident set (VmHWM) in bytes, from /proc (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def numeric_bytes(obj) -> int:
    """Bytes of the numbers in a sufficient statistic (arrays' data, 8 per scalar): what a
    perfectly packed message would carry."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (tuple, list)):
        return sum(numeric_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(numeric_bytes(k) + numeric_bytes(v) for k, v in obj.items())
    if isinstance(obj, (int, float, np.generic)):
        return 8
    return 0


def _instrument_driver_startup(startup: dict) -> None:
    """Rank 0 only: time the setup phases (shard store write, worker setup, shard loading)."""
    from mixle_mpi.core import probes

    labels = {
        "store_create": "store_write",
        "driver_setup": "worker_setup",
        "shard_load": "shard_load",
    }

    def hear(ev) -> None:
        if ev.phase == "end" and ev.name in labels:
            startup[labels[ev.name]] = startup.get(labels[ev.name], 0.0) + ev.seconds

    probes.listen(hear)


def _count_bytes(events: list) -> None:
    """Rank 0 only: log the pickled size of every message the driver posts and receives
    (a second pickling, so only in jobs that are not timed). Replies are counted where every
    one of them passes (the ``reply_taken`` probe): a wildcard probe over several workers
    receives them without polling a link."""
    from mixle_mpi.core import probes
    from mixle_mpi.core.protocol import TAG_CMD, TAG_HB, TAG_REPLY

    label = {TAG_CMD: "bytes_down", TAG_REPLY: "bytes_up", TAG_HB: "bytes_hb"}

    def count(tag, obj):
        events.append(
            (
                label.get(tag, "bytes_other"),
                now(),
                len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
            )
        )

    def hear(ev) -> None:
        if ev.name == "message_posted":
            count(ev.args[0], ev.args[1])
        elif (
            ev.name == "message_polled"
            and ev.phase == "end"
            and ev.result is not None
            and ev.args[1] != TAG_REPLY
        ):
            count(ev.args[1], ev.result)
        elif ev.name == "reply_taken" and ev.phase == "begin":
            count(TAG_REPLY, ev.args[2])

    probes.listen(hear)


# -- mixle's own MPIEncodedData -----------------------------------------------------------------
def run_mixle(args) -> None:
    from mixle.utils.parallel.mpi import MPIEncodedData
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    describe, make_est, sample = model_spec(args.model)
    est = make_est()
    root_only = args.mixle_data == "root"
    data = sample(args.n, args.data_seed) if (rank == 0 or not root_only) else None
    comm.Barrier()
    t0 = now()
    enc = MPIEncodedData(data, estimator=est, root_only=root_only)
    comm.Barrier()
    t_setup = now() - t0
    del data
    events: list = []
    time_method(enc, "pysp_seq_estimate", events, "estep_call")
    time_method(enc, "pysp_seq_log_density_sum", events, "llsum_call")
    mine: list = []  # this rank's own E-step accumulation (the compute part of pysp_seq_estimate)
    time_method(enc, "_local_update", mine, "local_estep")
    msteps: list = []  # the root's M-step inside its E-step call (ours has it outside the round)
    time_method(est, "estimate", msteps, "mstep")
    clock = StepClock()
    t1 = now()
    run_optimize(est, enc, args, clock, None, args.profile if rank == 0 else None)  # every rank
    t_fit = now() - t1
    everyone = comm.gather([(*ev, rank) for ev in mine], root=0)
    if rank == 0:
        st = clock.stamps
        record = base_record(args, describe, clock, t_setup, t_fit, events)
        flat = [ev for evs in everyone for ev in evs]
        record["local_estep_compute"] = summary(
            per_iteration_totals(flat, st, "local_estep", by_source=True)
        )
        record["rank0_local_estep_compute"] = summary(per_iteration_totals(mine, st, "local_estep"))
        record["round_beyond_compute"] = summary(
            mixle_calls_beyond_compute(events, flat, msteps, st)
        )
        record.update(ranks=comm.Get_size(), compute_ranks=comm.Get_size(), root_only=root_only)
        write_json(args.out, record)
        # the launcher trusts the driver's status file over mpiexec's exit code; mixle's handle
        # does not write one, so say "finished" here (otherwise `mixle_mpi run` reports failure)
        from mixle_mpi.runtime.exiting import write_status

        write_status(0, "finished (mixle MPIEncodedData benchmark job)")


def main(argv=None) -> None:
    args = parse_args(argv)
    args.script_started_at = time.time()
    from threadpoolctl import threadpool_limits

    _blas = threadpool_limits(limits=1)  # noqa: F841 - keep alive: BLAS pinned to 1 thread on every rank
    if args.backend == "resilient":
        run_resilient(args)
    elif args.backend == "bare":
        run_bare(args)
    else:
        run_mixle(args)


if __name__ == "__main__":
    main()
