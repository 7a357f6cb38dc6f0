"""Issue 13, first item: the driver's per-round cost against W, measured on real jobs.

    python bench/scale_real.py                                   # W = 2, 8, 32, 64 (the full run)
    python bench/scale_real.py --workers 2,4 --name scale_real_smoke   # smoke run

For each W one real MPI job is started through the project's launcher
(``python -m mixle_mpi run -n W+1``, oversubscribed: ``MIXLE_MPI_ALLOW_MANY_RANKS=1``) on tiny
shards (``--rows-per-shard`` rows of the 1-D Gaussian mixture each, S = W x
``--shards-per-worker``), so the E-step itself is negligible and what a round costs is the
driver's own work: dispatch, polling, receiving, and its heartbeat thread beside it. Every
rank runs ``bench/_job.py`` through ``bench/_scale_job.py``, which counts on the driver, per
round, its process CPU (all threads), its main thread's CPU, its heartbeat thread's CPU and
its poll passes, and per heartbeat-thread pass the beats received (see that file). Before
the first round the driver sits idle for ``--idle-seconds`` with every worker beating: the
heartbeat rate and the heartbeat thread's CPU are also measured over that window.

Per job (the timed window runs from the start of the second E-step round to the end of the
last round, i.e. iterations 2..its):

- driver CPU per round: the driver process's CPU (utime + stime of every thread, read as
  ``time.process_time``, the same clock as /proc/<pid>/stat) over the window / the rounds in
  it (an EM iteration is one E-step round and one scoring round, plus the fold and M-step);
- its split: the main thread's CPU inside rounds per round, the poll passes per round and
  the main thread's CPU per pass (O(W) each), and the heartbeat thread's CPU per second;
- round latency: the median wall seconds of the E-step rounds after the first;
- heartbeats per second received by the driver, counted (in the window and idle), against
  the nominal W / heartbeat_period.

Every figure is reported as a ratio to the W = 2 job (the smallest W of the run), against the
issue's target: driver CPU per round grows at most linearly in W (ratio <= W/2 x 1.2, i.e.
<= 38.4 at W = 64). Nothing is asserted; a failed or timed-out job is reported, not fatal.
Output: a table printed, ``bench/results/<name>.json`` and ``bench/results/<name>.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from bench.overhead import mpi_description  # noqa: E402

SCALE_JOB = os.path.join(common.BENCH, "_scale_job.py")
TARGET_SLACK = 1.2  # the "at most linearly in W" with 20 % slack
RANK_MB = 200  # memory one rank may take (measured ~100-150 MB); a job needing more than is free is skipped


# -- the machine -------------------------------------------------------------------------------
def loadavg() -> list[float] | None:
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return [float(x) for x in fh.read().split()[:3]]
    except (OSError, ValueError):
        return None


def meminfo_mb(key: str) -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


# -- one job -----------------------------------------------------------------------------------
def job_timeout(args, w: int) -> float:
    return args.timeout if args.timeout else 600.0 + 15.0 * w


def run_job(args, w: int, rep: int, tmp: str) -> dict:
    shards = w * args.shards_per_worker
    n = shards * args.rows_per_shard
    out = os.path.join(tmp, f"w{w}-rep{rep}.json")
    timeout = job_timeout(args, w)
    env_extra = {
        "MIXLE_MPI_ALLOW_MANY_RANKS": "1",
        # 65 Python ranks importing numpy on 2 loaded cores take a while to reach MPI init
        "MIXLE_MPI_STARTUP_TIMEOUT": f"{120.0 + 10.0 * (w + 1):g}",
    }
    rank_cmd = [
        args.python,
        SCALE_JOB,
        "--idle-seconds",
        f"{args.idle_seconds:g}",
        *(["--estep-sleep", f"{args.estep_sleep:g}"] if args.estep_sleep else []),
        "--backend",
        "resilient",
        "--model",
        args.model,
        "--n",
        str(n),
        "--its",
        str(args.its),
        "--num-shards",
        str(shards),
        "--launched-at",
        f"{time.time():.6f}",
        "--out",
        out,
    ]
    cmd = common.launcher(args.python, w + 1, rank_cmd, timeout=timeout)
    shown = common.show(cmd, env_extra, tmp)
    rec = {
        "workers": w,
        "ranks": w + 1,
        "num_shards": shards,
        "n": n,
        "rep": rep,
        "command": shown,
        "timeout_seconds": timeout,
        "loadavg_before": loadavg(),
        "mem_available_mb_before": meminfo_mb("MemAvailable"),
    }
    need = (w + 1) * RANK_MB
    if rec["mem_available_mb_before"] is not None and rec["mem_available_mb_before"] < need + 1024:
        rec.update(
            ok=False,
            skipped=f"{rec['mem_available_mb_before']:.0f} MB available, {need} MB + 1 GiB needed",
        )
        return rec
    rc, log, wall = common.run(cmd, common.job_env(env_extra), timeout=timeout + 90)
    rec.update(launcher_rc=rc, wall_seconds=wall, loadavg_after=loadavg())
    raw = None
    if os.path.exists(out):
        try:
            with open(out, encoding="utf-8") as fh:
                raw = json.load(fh)
        except (OSError, ValueError) as exc:
            rec["read_error"] = str(exc)
    if rc != 0 or raw is None or "scale" not in raw:
        rec.update(ok=False, log_tail=log[-3000:])
        if rc is None:
            rec["why"] = f"timed out after {timeout + 90:.0f} s"
        return rec
    try:
        rec.update(measures(raw, w))
        rec["ok"] = True
    except (KeyError, ValueError, ZeroDivisionError, IndexError, TypeError) as exc:
        rec.update(ok=False, why=f"could not read the record: {exc!r}", log_tail=log[-3000:])
    rec["its_done"] = raw.get("its_done")
    rec["driver_pid"] = raw["scale"].get("driver_pid")
    rec["failures"] = raw.get("failures")
    return rec


def measures(raw: dict, w: int) -> dict:
    """The figures of one job from its record (see the module doc for the window)."""
    sc = raw["scale"]
    T, PROC, MAIN, HB, PASSES = range(5)  # fields of one sample
    rounds = sc["rounds"]
    estep_idx = [i for i, r in enumerate(rounds) if r["kind"] == "estep"]
    if len(estep_idx) < 3:
        raise ValueError(f"only {len(estep_idx)} E-step rounds")
    win = rounds[estep_idx[1] :]
    t0, t1 = win[0]["start"][T], win[-1]["end"][T]
    span = t1 - t0
    proc_cpu = win[-1]["end"][PROC] - win[0]["start"][PROC]
    main_in = [r["end"][MAIN] - r["start"][MAIN] for r in win]
    passes = [r["end"][PASSES] - r["start"][PASSES] for r in win]
    hb0, hb1 = win[0]["start"][HB], win[-1]["end"][HB]
    estep_lat = [r["end"][T] - r["start"][T] for r in win if r["kind"] == "estep"]
    llsum_lat = [r["end"][T] - r["start"][T] for r in win if r["kind"] == "llsum"]
    drv = [r for r in raw["rounds"] if r["kind"] == "estep"][1:]  # the driver's own record
    beats_win = [b for b in sc["beats"] if t0 <= b[0] <= t1]
    period = sc.get("heartbeat_period") or 0.4
    m = {
        "rounds_timed": len(win),
        "window_seconds": span,
        "driver_cpu_per_round": proc_cpu / len(win),
        "driver_cores_in_window": proc_cpu / span if span > 0 else None,
        "main_cpu_in_round_per_round": statistics.median(main_in),
        "main_cpu_in_rounds_share": sum(main_in) / proc_cpu if proc_cpu > 0 else None,
        "poll_passes_per_round": statistics.median(passes),
        "main_cpu_per_poll_pass": sum(main_in) / sum(passes) if sum(passes) else None,
        "heartbeat_thread_cpu_per_s": (hb1 - hb0) / span
        if hb0 is not None and hb1 is not None and span > 0
        else None,
        "estep_round_latency": statistics.median(estep_lat),
        "estep_round_latency_driver_record": statistics.median(r["seconds"] for r in drv)
        if drv
        else None,
        "llsum_round_latency": statistics.median(llsum_lat) if llsum_lat else None,
        "heartbeat_period": period,
        "beats_nominal_per_s": w / period,
        "beats_per_s_window": (sum(b[1] for b in beats_win) / span) if span >= 2 * period else None,
        "heartbeat_passes_in_window": len(beats_win),
        "first_round_after_launch": None,
    }
    idle = sc.get("idle")
    if idle:
        i0, i1 = idle["start"][T], idle["end"][T]
        beats_idle = [b for b in sc["beats"] if i0 <= b[0] <= i1]
        m.update(
            idle_seconds=i1 - i0,
            beats_per_s_idle=sum(b[1] for b in beats_idle) / (i1 - i0),
            heartbeat_thread_cpu_per_s_idle=(
                (idle["end"][HB] - idle["start"][HB]) / (i1 - i0)
                if idle["end"][HB] is not None and idle["start"][HB] is not None
                else None
            ),
            driver_cores_idle=(idle["end"][PROC] - idle["start"][PROC]) / (i1 - i0),
        )
    st = raw.get("startup") or {}
    if raw.get("launched_at") and st.get("first_round_started_at"):
        m["first_round_after_launch"] = st["first_round_started_at"] - raw["launched_at"]
        if idle:
            m["first_round_after_launch"] -= m[
                "idle_seconds"
            ]  # the idle window is ours, not startup
    return m


# -- the report --------------------------------------------------------------------------------
RATIO_KEYS = (
    "driver_cpu_per_round",
    "main_cpu_in_round_per_round",
    "poll_passes_per_round",
    "main_cpu_per_poll_pass",
    "heartbeat_thread_cpu_per_s",
    "estep_round_latency",
    "beats_per_s_idle",
    "beats_per_s_window",
    "beats_nominal_per_s",
)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(args, jobs: list[dict]) -> tuple[dict, list[dict]]:
    per_w = {}
    for w in args.workers:
        ok = [j for j in jobs if j["workers"] == w and j.get("ok")]
        s = {"reps_ok": len(ok), "reps": sum(1 for j in jobs if j["workers"] == w)}
        for k in RATIO_KEYS + (
            "driver_cores_in_window",
            "driver_cores_idle",
            "heartbeat_thread_cpu_per_s_idle",
            "llsum_round_latency",
            "wall_seconds",
            "first_round_after_launch",
            "rounds_timed",
            "window_seconds",
            "main_cpu_in_rounds_share",
        ):
            s[k] = med([j.get(k) for j in ok])
        per_w[w] = s
    base_w = min(args.workers)
    base = per_w[base_w]
    for s in per_w.values():
        s["ratios"] = {
            k: (s[k] / base[k] if s[k] is not None and base[k] else None) for k in RATIO_KEYS
        }
    figures = []
    for w in args.workers:
        if w == base_w:
            continue
        limit = TARGET_SLACK * w / base_w
        # per-rep ratios, each against the base job of the same rep (they ran close together)
        ratios = []
        for rep in range(args.reps):
            a = next(
                (j for j in jobs if j["workers"] == w and j["rep"] == rep and j.get("ok")), None
            )
            b = next(
                (j for j in jobs if j["workers"] == base_w and j["rep"] == rep and j.get("ok")),
                None,
            )
            if a and b:
                ratios.append(a["driver_cpu_per_round"] / b["driver_cpu_per_round"])
        r = med(ratios)
        met = None if r is None else r <= limit
        cmd = next((j["command"] for j in jobs if j["workers"] == w), "")
        figures.append(
            common.figure(
                "13",
                f"driver CPU per round, W={w} / W={base_w} (real oversubscribed job, tiny shards)",
                ratios,
                baseline=f"the W={base_w} job of the same run and repetition",
                target=f"<= {w}/{base_w} x {TARGET_SLACK:g} = {limit:g} (at most linear in W)",
                met=met,
                why=""
                if met is not False
                else (
                    "the poll passes per round grow with the round's latency, which on an oversubscribed host "
                    "grows with W as well (see the split: CPU per pass against passes per round)"
                ),
                command=cmd,
                workers=w,
                split={k: per_w[w]["ratios"].get(k) for k in RATIO_KEYS},
            )
        )
    return per_w, figures


def ms(x, digits=2) -> str:
    return "n/a" if x is None else f"{1000 * x:.{digits}f}"


def rt(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def render(args, meta: dict, per_w: dict, figures: list, jobs: list) -> str:
    base_w = min(args.workers)
    smoke = args.label
    lines = [
        f"# Driver cost per round against W: real jobs{' (' + smoke + ')' if smoke else ''}",
        "",
    ]
    if smoke:
        lines += [
            f"**This is a {smoke}** (W = {', '.join(map(str, args.workers))}), not the issue's measurement: "
            "the full run is `python bench/scale_real.py` (W = 2, 8, 32, 64), "
            "whose results go to `bench/results/scale_real.md`.",
            "",
        ]
    la0, la1 = meta["loadavg_start"], meta["loadavg_end"]
    lines += [
        f"Issue 13, first item. One real job per W through `python -m mixle_mpi run -n W+1` (Open MPI flags "
        f"of the launcher: oversubscribed), {args.its} EM iterations (`delta=None`), S = {args.shards_per_worker} x W "
        f"shards of {args.rows_per_shard} rows of `{args.model}` each (the E-step is negligible), "
        f"{args.reps} repetition(s), W interleaved within a repetition. "
        f"Timed window: the second E-step round to the end of the last round (iterations 2..{args.its}).",
        "",
        f"Machine: `nproc` = {meta['nproc']}, {meta['platform']}, {meta['mem_total_gb']:.0f} GiB; MPI: {meta['mpi']}; "
        f"load average (1, 5, 15 min) at the start {la0} and at the end {la1}; this run's niceness "
        f"{meta.get('niceness')}; started {meta['started']}, "
        f"took {meta['total_seconds']:.0f} s.",
        "",
        f"**The machine was oversubscribed**: W + 1 ranks (up to {max(args.workers) + 1}) shared "
        f"{meta['nproc']} cores (see the load averages above for anything else that ran). Round latency and everything per second of wall time therefore mostly measure "
        "the scheduler (how long until each worker and the driver get a core), not mixle_mpi. Driver CPU per "
        "round is the meaningful figure: CPU time is charged only while the driver runs.",
        "",
        "| W | ranks | S | driver CPU / round ms | ratio | target | met | main thread in round ms | poll passes / round "
        "| main CPU / pass µs | heartbeat thread CPU ms/s | E-step round latency ms | latency ratio "
        "| beats/s idle (nominal) | beats/s ratio | job wall s |",
        "|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fig_by_w = {f["workers"]: f for f in figures}
    for w in args.workers:
        s = per_w[w]
        if not s["reps_ok"]:
            lines.append(
                f"| {w} | {w + 1} | {w * args.shards_per_worker} | job failed ({s['reps']} run) "
                "| | | | | | | | | | | | |"
            )
            continue
        f = fig_by_w.get(w)
        target = "baseline" if w == base_w else f"<= {TARGET_SLACK * w / base_w:g}"
        met = "" if f is None else {True: "yes", False: "**no**", None: "n/a"}[f["met"]]
        r = s["ratios"]
        pp, passes = s["main_cpu_per_poll_pass"], s["poll_passes_per_round"]
        hb = s["heartbeat_thread_cpu_per_s"]
        lines.append(
            f"| {w} | {w + 1} | {w * args.shards_per_worker} | {ms(s['driver_cpu_per_round'])} | "
            f"{rt(r['driver_cpu_per_round'])} | {target} | {met} | {ms(s['main_cpu_in_round_per_round'])} | "
            f"{'n/a' if passes is None else f'{passes:.0f}'} | "
            f"{'n/a' if pp is None else f'{1e6 * pp:.1f}'} | {'n/a' if hb is None else f'{1e3 * hb:.2f}'} | "
            f"{ms(s['estep_round_latency'], 1)} | {rt(r['estep_round_latency'])} | "
            f"{rt(s['beats_per_s_idle'])} ({s['beats_nominal_per_s']:g}) | {rt(r['beats_per_s_idle'])} | "
            f"{rt(s['wall_seconds'])} |"
        )
    lines += [
        "",
        "Columns: *driver CPU / round* = the driver process's CPU, every thread, over the timed window / "
        "its rounds (each EM iteration is an E-step round and a scoring round; the fold and M-step between "
        "them are in the window too); *ratio* = against W = "
        f'{base_w}; *target* = the issue\'s "at most linearly in W" with 20 % slack (W/{base_w} x 1.2). '
        "The split: *main thread in round* = the driver's main-thread CPU between dispatch and the last "
        "result (median round), made of *poll passes / round* (one pass drains every worker the round "
        "waits for; the backoff sleeps 0.1-1 ms between empty passes, so the passes grow with the round's "
        "wall latency) times *main CPU / pass* (O(W) work); *heartbeat thread CPU* per second of the window "
        "(one pass every heartbeat_period / 2 over all W links). *beats/s idle* = the beats the driver's "
        f"heartbeat thread received, counted, over {args.idle_seconds:g} s idle before the first round with "
        "every worker set up (nominal: W / heartbeat_period); in the timed window they are counted too "
        "(`beats_per_s_window` in the JSON, when the window is at least two periods long).",
        "",
    ]
    extra = []
    for w in args.workers:
        s = per_w[w]
        if s["reps_ok"]:
            extra.append(
                f"| {w} | {rt(s['driver_cores_in_window'])} | {ms(s['driver_cores_idle'])} | "
                f"{ms(s['heartbeat_thread_cpu_per_s_idle'])} | {rt(s['beats_per_s_window'])} ({s['beats_nominal_per_s']:g}) | "
                f"{ms(s['llsum_round_latency'], 1)} | {s['rounds_timed']:.0f} | {rt(s['window_seconds'])} | "
                f"{rt(s['first_round_after_launch'])} | {rt(s['main_cpu_in_rounds_share'])} |"
            )
    if extra:
        lines += [
            "| W | driver cores in window | driver CPU ms/s idle | heartbeat thread CPU ms/s idle | beats/s in window (nominal) "
            "| scoring round latency ms | rounds timed | window s | launch to first round s "
            "| main-thread-in-round share of driver CPU |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *extra,
            "",
        ]
    top = max(
        (f for f in figures if f["ratio"]["median"] is not None),
        key=lambda f: f["workers"],
        default=None,
    )
    if top is not None:
        verdict = {True: "met", False: "**not met**"}[top["met"]]
        lines += [
            f"**Verdict at the largest W measured (W = {top['workers']})**: driver CPU per round "
            f"{rt(top['ratio']['median'])} x that of W = {base_w}, target {top['target']}: {verdict}."
            + (
                " This run does not reach W = 64, so it says nothing about the issue's target at 64."
                if top["workers"] < 64
                else ""
            ),
            "",
        ]
    if args.estep_sleep:
        lines += [
            f"**E-step of {args.estep_sleep * 1000:g} ms** (each worker sleeps that long per E-step task: "
            "a core of its own). Overhead of the round beyond it = median E-step round latency / "
            f"{args.estep_sleep * 1000:g} ms - 1; the issue's target is <= 5 % at W = 64.",
            "",
            "| W | E-step round latency ms | overhead beyond the E-step |",
            "|---:|---:|---:|",
        ]
        for w in args.workers:
            lat = per_w[w].get("estep_round_latency")
            lines.append(
                f"| {w} | {ms(lat, 1)} | "
                + (f"{(lat / args.estep_sleep - 1) * 100:.1f} %" if lat is not None else "n/a")
                + " |"
            )
        lines.append("")
    failed = [j for j in jobs if not j.get("ok")]
    if failed:
        lines += [
            f"**{len(failed)} job(s) failed or were skipped**: "
            + "; ".join(
                f"W={j['workers']} rep {j['rep']}: "
                + (j.get("skipped") or j.get("why") or f"launcher rc {j.get('launcher_rc')}")
                for j in failed
            )
            + " (log tails in the JSON).",
            "",
        ]
    lines += [
        f"Command: `{meta['command']}`",
        "",
        f"One job (W = {max(args.workers)}): `{next((j['command'] for j in jobs if j['workers'] == max(args.workers)), '')}`",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workers",
        default="2,8,32,64",
        help="comma list of W (ranks: W+1 each); the smallest is "
        "the baseline of the ratios (default 2,8,32,64)",
    )
    p.add_argument(
        "--its", type=int, default=100, help="EM iterations per job (2 rounds each; default 100)"
    )
    p.add_argument(
        "--rows-per-shard", type=int, default=200, help="rows in each shard (default 200: tiny)"
    )
    p.add_argument("--shards-per-worker", type=int, default=1, help="S = this x W (default 1)")
    p.add_argument("--model", default="gmm1d", choices=("gmm1d", "diag", "hmm"))
    p.add_argument(
        "--estep-sleep",
        type=float,
        default=0.0,
        help="seconds each worker sleeps per E-step task (a model whose E-step takes that long on a "
        "core of its own); the report then gives the round's overhead beyond it",
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=4.0,
        help="the driver idles this long before the first round to count heartbeats (default 4)",
    )
    p.add_argument(
        "--reps", type=int, default=1, help="repetitions (W interleaved within each; default 1)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before one job is killed (default 600 + 15 x W)",
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter for the launcher and the ranks "
        "(default: this one; mpiexec is taken from beside it)",
    )
    p.add_argument(
        "--name", default="scale_real", help="results file stem in --results (default scale_real)"
    )
    p.add_argument(
        "--label", default=None, help="e.g. 'smoke run': said in the report's title and first line"
    )
    p.add_argument(
        "--results", default=os.path.join(common.BENCH, "results"), help="output directory"
    )
    args = p.parse_args(argv)
    try:
        args.workers = sorted({int(x) for x in args.workers.split(",") if x.strip()})
    except ValueError:
        p.error(f"--workers: a comma list of integers, found {args.workers!r}")
    if not args.workers or min(args.workers) < 1:
        p.error("--workers: at least one W >= 1")
    if args.its < 4:
        p.error("--its: at least 4 (the first E-step round is discarded)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.results, exist_ok=True)
    command = shlex.join(
        ["python", "bench/scale_real.py", *(sys.argv[1:] if argv is None else argv)]
    )
    meta = {
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "nproc": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "mem_total_gb": (meminfo_mb("MemTotal") or 0) / 1024,
        "loadavg_start": loadavg(),
        "niceness": os.nice(0),
        "mpi": mpi_description(args.python).replace("\x00", "").strip().rstrip(","),
        "python": args.python,
    }
    common.log(
        f"scale_real: W = {args.workers}, {args.its} its, {args.reps} rep(s); load {meta['loadavg_start']}"
    )
    t_start = time.monotonic()
    jobs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_scale_real_") as tmp:
        for rep in range(args.reps):
            for w in args.workers:
                common.log(
                    f"W={w} rep {rep + 1}: -n {w + 1}, timeout {job_timeout(args, w):.0f} s ..."
                )
                rec = run_job(args, w, rep, tmp)
                jobs.append(rec)
                if rec.get("ok"):
                    common.log(
                        f"W={w} rep {rep + 1}: driver CPU/round {ms(rec['driver_cpu_per_round'])} ms, "
                        f"E-step round {ms(rec['estep_round_latency'], 1)} ms, "
                        f"beats/s idle {rt(rec.get('beats_per_s_idle'))} (nominal {rec['beats_nominal_per_s']:g}), "
                        f"job wall {rec['wall_seconds']:.0f} s, load {rec['loadavg_after']}"
                    )
                else:
                    common.log(
                        f"W={w} rep {rep + 1}: FAILED ({rec.get('skipped') or rec.get('why') or 'rc ' + str(rec.get('launcher_rc'))})"
                    )
                    print(rec.get("log_tail", "")[-1500:], file=sys.stderr, flush=True)
    meta["total_seconds"] = time.monotonic() - t_start
    meta["loadavg_end"] = loadavg()
    per_w, figures = summarise(args, jobs)
    text = render(args, meta, per_w, figures, jobs)
    md, js = (os.path.join(args.results, f"{args.name}.{ext}") for ext in ("md", "json"))
    with open(md, "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(js, "w", encoding="utf-8") as fh:
        json.dump(
            {
                "meta": meta,
                "config": {k: v for k, v in vars(args).items()},
                "per_workers": per_w,
                "figures": figures,
                "jobs": jobs,
            },
            fh,
            indent=1,
        )
    print()
    print(text)
    common.log(f"wrote {md} and {js} ({meta['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
