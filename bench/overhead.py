"""Failure-free per-iteration overhead: mixle_mpi's ResilientMPIEncodedData vs mixle's MPIEncodedData.

Both fits use the same number of E-step processes W: ours runs ``-n W``, the driver computing
a share of the shards beside W - 1 workers (the default, setting ``driver_computes``; with
``--driver-idle`` the driver computes none and ours runs W workers + 1 driver, ``-n W+1``),
mixle's SPMD handle runs ``-n W`` ranks, where rank 0 computes as well as folds.
Every job is a real MPI job started through the same launcher (``python -m mixle_mpi run``), so
the mpiexec flags (``--with-ft ulfm --oversubscribe --bind-to none`` on Open MPI) are identical
for both; BLAS is pinned to one thread on every rank. Repetitions are interleaved per model
(ours, mixle, ours, mixle, ...). Each job runs exactly ``--its`` EM iterations (``delta=None``)
and reports the per-iteration times of iterations 2..its measured on rank 0 (see bench/_job.py).

Nothing here asserts a timing; it is a report. Output: a markdown table printed and written to
bench/results/overhead.md, everything (raw per-job records included) to bench/results/overhead.json.

    python bench/overhead.py --quick
    python bench/overhead.py --models gmm1d,diag,hmm --n gmm1d=1000000,diag=200000,hmm=20000 --its 6 --reps 3
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import (  # noqa: E402
    BENCH,
    FULL_N,
    JOB,
    QUICK_N,
    ROOT,
    children_cpu_seconds,
    host_busy_seconds,
    job_env,
    wait_for_quiet,
)

MODELS = ("gmm1d", "diag", "hmm")
DEFAULT_N = FULL_N
BACKENDS = ("resilient", "mixle")
LABEL = {"resilient": "ours", "mixle": "mixle"}
CLEAN = 0.3  # foreign cores below which a rep counts as undisturbed


def parse_n(text: str | None, models: list[str], defaults: dict) -> dict:
    """``--n 200000`` (every model) or ``--n gmm1d=1000000,hmm=20000`` (per model)."""
    sizes = {m: defaults[m] for m in models}
    if not text:
        return sizes
    if "=" not in text:
        return {m: int(float(text)) for m in models}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in MODELS:
            raise SystemExit(f"--n: unknown model {name!r}; valid: {', '.join(MODELS)}")
        sizes[name] = int(float(value))
    return sizes


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: gmm1d only, small N, 4 iterations (well under 2 minutes)",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="E-step processes W (ours and mixle: -n W)"
    )
    p.add_argument(
        "--driver-idle",
        action="store_true",
        help="ours with driver_computes off: the driver computes no shard, so ours runs W workers "
        "+ 1 driver, -n W+1 (write the results elsewhere with --results)",
    )
    p.add_argument(
        "--n",
        default=None,
        help="observations: one number for every model or model=N,... "
        f"(default {DEFAULT_N}; --quick {QUICK_N})",
    )
    p.add_argument(
        "--its",
        type=int,
        default=None,
        help="EM iterations per job (default 6; --quick 10); the first is discarded",
    )
    p.add_argument(
        "--reps", type=int, default=3, help="interleaved repetitions per backend and model"
    )
    p.add_argument(
        "--models",
        default=None,
        help=f"comma list from {','.join(MODELS)} (default all; --quick gmm1d)",
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter for the launcher and the ranks "
        "(default: this one; mpiexec is taken from beside it)",
    )
    p.add_argument(
        "--mixle-data",
        choices=["root", "all"],
        default="root",
        help="mixle baseline: data on rank 0 and scattered (root_only=True, default) or on every rank",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before one job is killed")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=None,
        help="before each job wait up to this many seconds for the host to be quiet "
        "(< 0.3 cores busy; default 30, --quick 5); 0 disables",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="also run one cProfile'd job per model and backend (rank 0 only; not timed)",
    )
    p.add_argument("--results", default=os.path.join(BENCH, "results"), help="output directory")
    args = p.parse_args(argv)
    if args.driver_idle:
        os.environ["MIXLE_MPI_DRIVER_COMPUTES"] = (
            "0"  # job_env() passes it to every rank (mixle's ignore it)
        )
    if args.workers < 2:
        raise SystemExit(
            "--workers must be >= 2: the baseline runs -n W and `mixle_mpi run` refuses -n 1"
        )
    if args.models:
        args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    else:
        args.models = ["gmm1d"] if args.quick else list(MODELS)
    for m in args.models:
        if m not in MODELS:
            raise SystemExit(f"--models: unknown model {m!r}; valid: {', '.join(MODELS)}")
    args.sizes = parse_n(args.n, args.models, QUICK_N if args.quick else DEFAULT_N)
    args.its = args.its if args.its is not None else (10 if args.quick else 6)
    if args.wait_idle is None:
        args.wait_idle = 5.0 if args.quick else 30.0
    if args.its < 2:
        raise SystemExit("--its must be >= 2 (the first iteration is discarded)")
    if args.reps < 1:
        raise SystemExit("--reps must be >= 1")
    return args


# -- other work on the host ------------------------------------------------------------------
# This box may be shared: a foreign MPI job on 2 cores doubles an iteration. Each job therefore
# waits (bounded) for a quiet CPU before it starts, and reports how many cores foreign processes
# used while it ran: host busy CPU time (/proc/stat) minus the CPU time of the job's own process
# tree (getrusage(RUSAGE_CHILDREN) covers every reaped descendant: launcher, mpiexec, ranks).


# -- running one job --------------------------------------------------------------------------
def job_command(args, backend: str, model: str, out: str, profile: str | None = None) -> list[str]:
    idle = getattr(args, "driver_idle", False) or model in getattr(args, "idle_models", ())
    ranks = args.workers + 1 if backend == "resilient" and idle else args.workers
    cmd = [
        args.python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(ranks),
        "--timeout",
        f"{args.timeout:g}",
        "--",
        args.python,
        JOB,
        "--backend",
        backend,
        "--model",
        model,
        "--n",
        str(args.sizes[model]),
        "--its",
        str(args.its),
        "--mixle-data",
        args.mixle_data,
        "--out",
        out,
    ]
    if backend == "resilient" and idle:
        # one shard per worker, as mixle's handle has one partition per rank: _job.py's own
        # count assumes the driver computes one too, and would give one worker two shards
        cmd += ["--num-shards", str(args.workers)]
    if profile:
        cmd += ["--profile", profile]
    return cmd


def run_job(
    args, backend: str, model: str, tmpdir: str, tag: str, profile: str | None = None
) -> dict:
    out = os.path.join(tmpdir, f"{tag}.json")
    cmd = job_command(args, backend, model, out, profile)
    waited, busy_before = wait_for_quiet(args.wait_idle) if args.wait_idle > 0 else (0.0, None)
    load_before = os.getloadavg()[0]
    host0, own0 = host_busy_seconds(), children_cpu_seconds()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(
            timeout=args.timeout + 60
        )  # the launcher kills the job at --timeout
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher we started, by its own process group
        log, _ = proc.communicate()
        rc = None
    wall = time.monotonic() - t0
    host1, own1 = host_busy_seconds(), children_cpu_seconds()
    foreign = (
        None if host0 is None or host1 is None else max(0.0, (host1 - host0) - (own1 - own0)) / wall
    )
    record = {
        "backend": backend,
        "model": model,
        "tag": tag,
        "launcher_rc": rc,
        "wall_seconds": wall,
        "waited_for_quiet_seconds": waited,
        "busy_cores_before": busy_before,
        "loadavg_before": load_before,
        "foreign_cores_during": foreign,
        "command": shlex.join(cmd),
    }
    if os.path.exists(out):
        with open(out, encoding="utf-8") as fh:
            record.update(json.load(fh))
        record["ok"] = rc == 0 and record.get("median") is not None
    else:
        record["ok"] = False
    if not record["ok"]:
        record["log_tail"] = (log or "")[-3000:]
    return record


# -- summarising ------------------------------------------------------------------------------
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def field(rec: dict, key: str):
    v = rec.get(key)
    return v.get("median") if isinstance(v, dict) else v


def summarise(args, jobs: list[dict]) -> dict:
    out = {}
    for model in args.models:
        per = {
            b: [j for j in jobs if j["model"] == model and j["backend"] == b and j["ok"]]
            for b in BACKENDS
        }
        s = {
            "n": args.sizes[model],
            "describe": next((j.get("describe") for b in BACKENDS for j in per[b]), model),
        }
        for b in BACKENDS:
            meds = [j["median"] for j in per[b]]
            pooled = [x for j in per[b] for x in j["per_iteration_seconds"]]
            s[b] = {
                "reps_ok": len(meds),
                "rep_medians": meds,
                "median": med(meds),  # median over reps of each rep's median s/it
                "min": min(meds) if meds else None,  # spread: the fastest and slowest rep
                "max": max(meds) if meds else None,
                "pooled_iterations": len(pooled),
                "pooled_median": med(pooled),
                "pooled_min": min(pooled) if pooled else None,
                "pooled_max": max(pooled) if pooled else None,
                "setup_seconds": med([j.get("setup_seconds") for j in per[b]]),
                "final_ll": [j.get("final_ll") for j in per[b]],
                "its_done": sorted({j.get("its_done") for j in per[b]}),
                # E-step processes: W for both, unless the cap on the driver's share kept it idle
                "compute_ranks": sorted({j.get("compute_ranks") for j in per[b]} - {None}),
                # reps during which foreign processes used < CLEAN cores (undisturbed runs)
                "clean_rep_medians": [
                    j["median"]
                    for j in per[b]
                    if j.get("foreign_cores_during") is not None
                    and j["foreign_cores_during"] < CLEAN
                ],
                "foreign_cores_max": max(
                    (
                        j["foreign_cores_during"]
                        for j in per[b]
                        if j.get("foreign_cores_during") is not None
                    ),
                    default=None,
                ),
            }
        # where the time goes (medians over reps of each job's per-iteration median)
        r, m = per["resilient"], per["mixle"]
        s["breakdown"] = {
            "resilient": {
                k: med([field(j, k) for j in r])
                for k in (
                    "rank0_estep_call",
                    "driver_estep_round",
                    "worker_estep_compute",
                    "rank0_llsum_call",
                    "driver_llsum_round",
                    "worker_llsum_compute",
                    "rank0_cpu_cores",
                    "round_beyond_compute",
                )
            },
            "mixle": {
                k: med([field(j, k) for j in m])
                for k in (
                    "rank0_estep_call",
                    "local_estep_compute",
                    "rank0_local_estep_compute",
                    "rank0_llsum_call",
                    "rank0_cpu_cores",
                    "round_beyond_compute",
                )
            },
        }
        s["breakdown"]["resilient"]["worker_cpu_cores"] = med(
            [med(j.get("worker_cpu_cores") or [None]) for j in r]
        )
        a, b = s["resilient"]["median"], s["mixle"]["median"]
        s["ratio"] = a / b if a and b else None
        # paired ratios: rep i of ours against rep i of mixle (they ran back to back)
        paired = [
            x / y
            for x, y in zip(s["resilient"]["rep_medians"], s["mixle"]["rep_medians"], strict=False)
            if y
        ]
        s["paired_ratios"] = paired
        # each rep's E-step round beyond its compute (bench/_job.py: ours per round, mixle's per
        # E-step call less its M-step), in the same pairs of jobs
        s["beyond_compute"] = {
            b: [field(j, "round_beyond_compute") for j in per[b]] for b in BACKENDS
        }
        starts = [j["round_start"] for j in r if j.get("round_start")]
        s["round_start"] = {
            k: med([x.get(k) for x in starts]) for k in (starts[0] if starts else ())
        }
        lo_a, lo_b = s["resilient"]["min"], s["mixle"]["min"]
        ca, cb = med(s["resilient"]["clean_rep_medians"]), med(s["mixle"]["clean_rep_medians"])
        s["clean_ratio"] = ca / cb if ca and cb else None
        s["best_rep_ratio"] = (
            lo_a / lo_b if lo_a and lo_b else None
        )  # least disturbed by foreign load
        s["paired_ratio_min"] = min(paired) if paired else None
        s["paired_ratio_max"] = max(paired) if paired else None
        lls = [ll for bk in BACKENDS for ll in s[bk]["final_ll"] if ll is not None]
        s["final_ll_identical"] = len(set(lls)) == 1 if lls else None
        out[model] = s
    return out


def ms(x) -> str:
    return "n/a" if x is None else f"{1000 * x:.1f}"


def cores(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def render(args, summary: dict, meta: dict) -> str:
    w = args.workers
    lines = [
        "# mixle_mpi failure-free overhead per EM iteration",
        "",
        (
            f"ours = `ResilientMPIEncodedData` with {w} workers + 1 driver computing no shard (`-n {w + 1}`, "
            "`MIXLE_MPI_DRIVER_COMPUTES=0`); "
            if getattr(args, "driver_idle", False)
            else f"ours = `ResilientMPIEncodedData` with the driver computing a share and {w - 1} worker(s) "
            f"(`-n {w}`, the default setting `driver_computes`); "
        )
        + f"mixle = `MPIEncodedData` on {w} ranks (`-n {w}`, rank 0 computes too, data "
        f"{'scattered from rank 0' if args.mixle_data == 'root' else 'on every rank'}). "
        f"Same launcher and mpiexec flags, BLAS 1 thread, {args.its} iterations per job "
        f"(first discarded, so {args.its - 1} timed), {args.reps} interleaved reps per backend."
        + (
            f" For {', '.join(sorted(args.idle_models))} the driver's share was over `driver_share_max_bytes`, so it "
            f"computed none and ours ran {w} workers + 1 driver (`-n {w + 1}`)."
            if getattr(args, "idle_models", None) and not getattr(args, "driver_idle", False)
            else ""
        ),
        "",
        f"Host: {meta['host']['cpus']} CPUs, {meta['host']['platform']}; MPI: {meta['mpi']}; "
        f"python: `{args.python}`; {meta['started']}.",
        "",
        "Times are ms per iteration: median over reps of each rep's median, [fastest rep, slowest rep]. "
        "Ratio = ours / mixle of those medians; paired = per-rep ratios (back-to-back runs), min-max; "
        "best = fastest ours rep / fastest mixle rep. Foreign = the most CPU cores that processes other "
        "than the job used during any of its reps (ours / mixle); on this 2-core host anything near "
        "1 means that rep was disturbed. Clean = ratio of medians over only the reps with foreign < "
        f"{CLEAN} cores (how many ours/mixle reps qualified).",
        "",
        "| model | N | ours ms/it [min, max] | mixle ms/it [min, max] | ours/mixle | paired min-max | best | "
        "clean (reps) | same final LL | foreign |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for model, s in summary.items():
        o, m = s["resilient"], s["mixle"]
        ratio = "n/a" if s["ratio"] is None else f"{s['ratio']:.2f}"
        paired = (
            "n/a"
            if s["paired_ratio_min"] is None
            else f"{s['paired_ratio_min']:.2f}-{s['paired_ratio_max']:.2f}"
        )
        same = {True: "yes", False: "no", None: "n/a"}[s["final_ll_identical"]]
        clean = (
            "n/a" if s["clean_ratio"] is None else f"{s['clean_ratio']:.2f}"
        ) + f" ({len(o['clean_rep_medians'])}/{len(m['clean_rep_medians'])})"
        best = "n/a" if s["best_rep_ratio"] is None else f"{s['best_rep_ratio']:.2f}"
        fo, fm = (
            ("?" if x is None else f"{x:.2f}")
            for x in (o["foreign_cores_max"], m["foreign_cores_max"])
        )
        lines.append(
            f"| {model} ({s['describe']}) | {s['n']:,} | {ms(o['median'])} [{ms(o['min'])}, {ms(o['max'])}] | "
            f"{ms(m['median'])} [{ms(m['min'])}, {ms(m['max'])}] | {ratio} | {paired} | {best} | {clean} | {same} | "
            f"{fo} / {fm} |"
        )
    lines += [
        "",
        "## Where an iteration's time goes (ms, medians)",
        "",
        "An iteration is one E-step+M-step call (`pysp_seq_estimate`) and one scoring call "
        "(`pysp_seq_log_density_sum`). For ours, *round* is the driver's dispatch-to-last-result time, "
        "*worker* the slowest worker's compute inside it (so round - worker = messaging, pickling of the "
        "model and results, polling latency), and call - round = the driver's fold + M-step. For mixle, "
        "*local* is the slowest rank's own accumulation; the rest of the call is the reduce tree, the "
        "M-step on rank 0 and the model broadcast. CPU = cores a process kept busy over the timed "
        "iterations (ours: driver / median worker; mixle: rank 0, which spins inside MPI collectives "
        "while it waits); a worker well below 1 core with a long round means it waited for messages "
        "or for a CPU.",
        "",
        "| model | ours estep call | ours estep round | ours estep worker | ours fold+M | ours llsum call | "
        "ours llsum worker | mixle estep call | mixle estep local | mixle llsum call | CPU ours drv / wrk | "
        "CPU mixle r0 | setup s ours / mixle |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, s in summary.items():
        r, m = s["breakdown"]["resilient"], s["breakdown"]["mixle"]
        fold = (
            r["rank0_estep_call"] - r["driver_estep_round"]
            if r["rank0_estep_call"] is not None and r["driver_estep_round"] is not None
            else None
        )
        so, sm = s["resilient"]["setup_seconds"], s["mixle"]["setup_seconds"]
        lines.append(
            f"| {model} | {ms(r['rank0_estep_call'])} | {ms(r['driver_estep_round'])} | "
            f"{ms(r['worker_estep_compute'])} | {ms(fold)} | {ms(r['rank0_llsum_call'])} | "
            f"{ms(r['worker_llsum_compute'])} | {ms(m['rank0_estep_call'])} | {ms(m['local_estep_compute'])} | "
            f"{ms(m['rank0_llsum_call'])} | {cores(r['rank0_cpu_cores'])} / {cores(r['worker_cpu_cores'])} | "
            f"{cores(m['rank0_cpu_cores'])} | "
            f"{'n/a' if so is None else f'{so:.2f}'} / {'n/a' if sm is None else f'{sm:.2f}'} |"
        )
    failed = meta.get("failed_jobs") or []
    short = [
        f"{s} ({model}): its_done {summary[model][b]['its_done']}"
        for model in summary
        for b, s in (("resilient", "ours"), ("mixle", "mixle"))
        if any(d is not None and d < args.its for d in summary[model][b]["its_done"])
    ]
    lines += ["", f"Command: `{meta['command']}`", ""]
    if failed:
        lines += [
            f"**{len(failed)} job(s) failed** (see overhead.json `jobs[*].log_tail`): "
            + ", ".join(f"{j['backend']}/{j['model']}/{j['tag']}" for j in failed),
            "",
        ]
    if short:
        lines += ["Fits ended early (a step was rejected as a decrease): " + "; ".join(short), ""]
    return "\n".join(lines)


def mpi_description(python: str) -> str:
    try:
        out = subprocess.run(
            [
                python,
                "-c",
                "import mpi4py; from mpi4py import MPI; "
                "print(MPI.Get_library_version().splitlines()[0].strip())",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=job_env(),
        )
        return out.stdout.strip() or out.stderr.strip()[-200:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"


def profile_report(args, tmpdir: str) -> str:
    import io
    import pstats

    parts = []
    for model in args.models:
        for backend in BACKENDS:
            path = os.path.join(args.results, f"overhead_profile_{model}_{backend}.pstats")
            rec = run_job(args, backend, model, tmpdir, f"profile-{model}-{backend}", profile=path)
            if not os.path.exists(path):
                parts.append(
                    f"## {model} / {LABEL[backend]}: profile failed (launcher rc {rec['launcher_rc']})\n"
                )
                continue
            for order in ("tottime", "cumulative"):
                buf = io.StringIO()
                pstats.Stats(path, stream=buf).strip_dirs().sort_stats(order).print_stats(18)
                parts.append(
                    f"## {model} / {LABEL[backend]} rank 0, optimize() call, sorted by {order}\n"
                    f"(profiled job's median {ms(rec.get('median'))} ms/it)\n\n{buf.getvalue()}"
                )
    text = "\n".join(parts)
    with open(os.path.join(args.results, "overhead_profile.txt"), "w", encoding="utf-8") as fh:
        fh.write(text)
    return text


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.results, exist_ok=True)
    meta = {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable] + sys.argv)
        if argv is None
        else shlex.join(["overhead.py", *argv]),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "node": platform.node()},
        "mpi": mpi_description(args.python),
        "example_job_commands": {
            b: shlex.join(job_command(args, b, args.models[0], "OUT.json")) for b in BACKENDS
        },
    }
    config = {k: v for k, v in vars(args).items()}
    t_start = time.monotonic()
    jobs, profile_text = collect(args)
    meta["total_seconds"] = time.monotonic() - t_start
    meta["failed_jobs"] = [
        {"backend": j["backend"], "model": j["model"], "tag": j["tag"]} for j in jobs if not j["ok"]
    ]
    summary = summarise(args, jobs)
    table = render(args, summary, meta)
    with open(os.path.join(args.results, "overhead.md"), "w", encoding="utf-8") as fh:
        fh.write(table + "\n")
    with open(os.path.join(args.results, "overhead.json"), "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "config": config, "summary": summary, "jobs": jobs}, fh, indent=1)
    print()
    print(table)
    if profile_text:
        print(f"\n[overhead] rank-0 profiles: {os.path.join(args.results, 'overhead_profile.txt')}")
    print(
        f"\n[overhead] wrote {os.path.join(args.results, 'overhead.md')} and overhead.json "
        f"({meta['total_seconds']:.0f} s)"
    )
    return 0


def collect(args) -> tuple[list[dict], str | None]:
    """Run every job (reps interleaved: ours, mixle, ours, ...); the raw per-job records."""
    jobs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_overhead_") as tmpdir:
        for rep in range(args.reps):
            for model in args.models:
                for backend in BACKENDS:  # interleaved: ours, mixle, ours, mixle, ...
                    tag = f"{model}-{backend}-rep{rep}"
                    rec = run_job(args, backend, model, tmpdir, tag)
                    if rec["ok"] and rec.get("compute_ranks", args.workers) < args.workers:
                        # the driver's share was over driver_share_max_bytes: it computed none, so
                        # ours had W - 1 E-step processes. Like for like: W workers + the driver.
                        args.idle_models = {*getattr(args, "idle_models", ()), model}
                        print(
                            f"[overhead] {model}: the driver computes no shard at this size (over "
                            f"driver_share_max_bytes); ours runs -n {args.workers + 1} from here on",
                            flush=True,
                        )
                        rec = run_job(args, backend, model, tmpdir, tag)
                    rec["rep"] = rep
                    jobs.append(rec)
                    status = (
                        f"{ms(rec['median'])} ms/it"
                        if rec["ok"]
                        else f"FAILED (launcher rc {rec['launcher_rc']})"
                    )
                    fc = rec["foreign_cores_during"]
                    print(
                        f"[overhead] rep {rep + 1}/{args.reps} {model:6s} {LABEL[backend]:5s} "
                        f"n={args.sizes[model]:,}: {status}  (job wall {rec['wall_seconds']:.1f} s, "
                        f"foreign load {'?' if fc is None else f'{fc:.2f}'} cores, "
                        f"waited {rec['waited_for_quiet_seconds']:.0f} s)",
                        flush=True,
                    )
                    if not rec["ok"]:
                        print(rec.get("log_tail", ""), file=sys.stderr, flush=True)
        profile_text = profile_report(args, tmpdir) if args.profile else None
    return jobs, profile_text


if __name__ == "__main__":
    sys.exit(main())
