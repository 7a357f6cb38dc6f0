"""The chaos campaign of issue 10, item 5: external kills and fault plans under both MPIs.

    python bench/chaos_campaign.py                        # 200 external runs + 20 fault-plan runs per MPI
    python bench/chaos_campaign.py --runs 6 --plan-runs 3 # a smoke run (labelled as such)
    python bench/chaos_campaign.py --libs mpich --seed 7  # one library, another seed
    python bench/chaos_campaign.py --collect --work-dir W  # only the report, from the runs in W

For each MPI library (Open MPI ULFM from ``.venv``, MPICH from ``.venv-mpich``) it runs

- ``mixle-mpi chaos``: ``--plan-runs`` jobs under random fault plans (hooks at fixed phases); and
- ``mixle-mpi chaos --external``: ``--runs`` jobs, each hit from outside by SIGKILL or SIGSTOP
  at a random time (one worker, two workers within 300 ms, a second worker during the
  recovery, a stopped worker, or the driver followed by a resuming rerun). Three first kills
  in four, chosen by the seeded rng, come at a time uniform over the reference run's fit (from
  its started marker to its end), counted from the run's own started marker; the others at a
  time uniform over the whole reference run after the launch, startup included,

both against a failure-free reference of the same fit, then writes
``bench/results/chaos_<lib>.json`` (every run) and ``bench/results/chaos_campaign.md`` (the
exact commands, the seed, counts per kind and outcome, where the kills landed, and the
recovery-time percentiles). Every run's folder (job.log, events.jsonl, the checkpoint) stays
in the work directory printed at the start. Exits 1 if any campaign failed.

The fault plans run first (a few minutes), then the external campaign. The external campaign
rewrites its campaign.json after every run, so ``--collect`` reports a campaign stopped midway
(labelled PARTIAL with the runs done). Two libraries can run as two processes with the same
``--work-dir`` (each writes its own subfolder) and their own ``--results``; ``--collect``
then reports both.

Runs are sequential (one job at a time): a campaign of 200 external runs takes about 1-2
hours per library on 2 cores. A run that fails can be replayed alone: its plan depends only
on (seed, run, draw), see ``mixle_mpi/chaos/external_plan.py``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from mixle_mpi.chaos import external_plan as cp  # noqa: E402

RESULTS = os.path.join(common.BENCH, "results")
LIBS = {
    "openmpi": os.path.join(common.ROOT, ".venv", "bin", "python"),
    "mpich": os.path.join(common.ROOT, ".venv-mpich", "bin", "python"),
}
FULL_RUNS = 200


def commands(python: str, work: str, args) -> dict:
    """The two campaign commands for one library (pure)."""
    job = ["-n", str(args.ranks), "--campaign-seed", str(args.seed), "--max-its", str(args.max_its)]
    return {
        "external": [
            python,
            "-m",
            "mixle_mpi",
            "chaos",
            "--external",
            "--runs",
            str(args.runs),
            *job,
            *(["--kinds", args.kinds] if args.kinds else []),
            "--out-dir",
            os.path.join(work, "external"),
        ],
        "fault_plans": [
            python,
            "-m",
            "mixle_mpi",
            "chaos",
            "--runs",
            str(args.plan_runs),
            *job,
            "--out-dir",
            os.path.join(work, "plans"),
        ],
    }


def _run(cmd: list[str], log_path: str, timeout: float) -> tuple[int | None, float]:
    common.log("running: " + shlex.join(cmd))
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=common.ROOT,
            env=common.job_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the session this call started
            proc.wait()
            rc = None
    return rc, time.monotonic() - t0


def tree_version() -> str:
    """The commit the campaign ran on, and whether the tree had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=common.ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=common.ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + (" with uncommitted changes" if dirty else "")


def _load(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def plan_summary(report: dict | None) -> dict | None:
    """Counts and recovery times of a fault-plan campaign's campaign.json (pure)."""
    if report is None:
        return None
    runs = report["runs"]
    per_kind: dict = {}
    outcomes: dict = {}
    for r in runs:
        per_kind.setdefault(r["kind"], {})
        per_kind[r["kind"]][r["outcome"]] = per_kind[r["kind"]].get(r["outcome"], 0) + 1
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    return {
        "runs": len(runs),
        "outcomes": outcomes,
        "per_kind": per_kind,
        "planned_faults": report.get("planned_faults"),
        "fired_faults": report.get("fired_faults"),
        "failures": sum(1 for r in runs if r["outcome"] != "ok"),
        "recovery_seconds": cp.distribution([r.get("recovery_seconds") for r in runs]),
        "ok": report.get("ok"),
    }


def _compact(row: dict) -> dict:
    """An external run without what only made sense on the machine that ran it."""
    out = {k: v for k, v in row.items() if k not in ("out_dir", "job_tags")}
    out["kills"] = [
        {k: v for k, v in kill.items() if k not in ("tag", "wall_time")} for kill in row["kills"]
    ]
    return out


def _fmt(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def kill_times(ext: dict) -> str:
    """When the first kills came, as the campaign drew them (pure)."""
    share, fit = ext.get("fit_share") or 0, ext.get("fit_window_seconds")
    whole = f"[0, {ext['kill_window_seconds']:.1f}] s after the launch"
    if not (share and fit):
        return f"kill times uniform over {whole}"
    started = ext.get("reference_started_seconds")
    return (
        f"first kills: {share:.0%} of the draws (seeded) uniform over the fit, [0, {fit:.1f}] s after the run's "
        f"own started marker (the reference's fit: from its marker at {_fmt(started, 1)} s to its end), the "
        f"others uniform over {whole}"
    )


def render(results: dict) -> str:
    """The markdown report from every library's results (pure)."""
    smoke = results["smoke"]
    partial = {
        lib: res["external"]
        for lib, res in results["libraries"].items()
        if res.get("external") and res["external"].get("partial")
    }
    out = [
        f"# Chaos campaign{' (SMOKE RUN)' if smoke else ''}{' (PARTIAL)' if partial else ''}: "
        "external kills and fault plans",
        "",
    ]
    if partial:
        out += [
            "**Partial campaign**: stopped before every external run slot was done ("
            + ", ".join(
                f"{lib}: {ext.get('slots_done', '?')} of {ext.get('slots_planned', '?')} slots"
                for lib, ext in partial.items()
            )
            + "); the figures cover only the runs done.",
            "",
        ]
    if smoke:
        out += [
            f"**This is a smoke run** ({results['runs']} external runs per MPI, not the {FULL_RUNS} of issue 10): "
            "it shows that the campaign and its report work, not that the runtime is reliable. "
            "Run `python bench/chaos_campaign.py` for the full campaign.",
            "",
        ]
    out += [
        f"Date {results['date']}, commit {results.get('tree', 'unknown')}, host {results['host']} "
        f"({results['cpus']} CPUs, shared), seed {results['seed']}, "
        f"job: the demo fit (Iris, gmm:k=3,cov=full, 6 shards) with --max-its {results['max_its']}, "
        f"{results['ranks']} ranks (1 driver + {results['ranks'] - 1} workers).",
        "",
        f"Command: `{results['command']}`",
        "",
    ]
    for lib, res in results["libraries"].items():
        ext, plans = res.get("external"), res.get("fault_plans")
        out += [f"## {lib}", ""]
        if res.get("command") and res["command"] != results["command"]:
            out += [
                f"Campaign command: `{res['command']}` (started {res.get('date', '?')}, commit "
                f"{res.get('tree', '?')})",
                "",
            ]
        out += ["Commands:", ""]
        out += [f"    {res['commands_shown'][k]}" for k in ("external", "fault_plans")]
        out += [""]
        if ext is None:
            out += [
                f"External campaign: no report (exit {res['external_exit']}); see {res['work']}",
                "",
            ]
        else:
            s = ext["summary"]
            if ext.get("partial"):
                out += [
                    f"**PARTIAL**: the external campaign was stopped after {ext.get('slots_done', '?')} of its "
                    f"{ext.get('slots_planned', '?')} run slots; the figures below cover only the runs done.",
                    "",
                ]
            out += [
                f"**External kills**: {s['runs']} runs counted ({s['missed']} missed draws not counted: the job "
                f"had ended before the kill), {s['failures']} failed, campaign exit {res['external_exit']}; "
                f"reference {ext['reference_seconds']:.1f} s, {kill_times(ext)}, "
                f"hang deadline {ext['run_timeout']:.0f} s, "
                f"leftover check {ext['leftover_seconds']:g} s after the launcher exits, "
                + ", ".join(f"{k}={v}" for k, v in ext.get("env", {}).items())
                + ".",
                "",
            ]
            outcomes = sorted({o for counts in s["per_kind"].values() for o in counts})
            out += [
                "| kind | runs | " + " | ".join(outcomes) + " |",
                "|---|---:|" + "---:|" * len(outcomes),
            ]
            for kind, counts in s["per_kind"].items():
                out.append(
                    f"| {kind} | {s['runs_per_kind'].get(kind, 0)} | "
                    + " | ".join(str(counts.get(o, 0)) for o in outcomes)
                    + " |"
                )
            out += [
                "",
                "Where the kills landed (from each run's event log): "
                + ", ".join(f"{k} {v}" for k, v in s["kills_per_phase"].items())
                + ".",
                "",
            ]
            out += [
                "| recovery seconds | n | p50 | p90 | p99 | max |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            rows = [("all kinds", s["recovery_seconds"])] + list(
                s["recovery_seconds_per_kind"].items()
            )
            for name, d in rows:
                out.append(
                    f"| {name} | {d['n']} | {_fmt(d['p50'])} | {_fmt(d['p90'])} | {_fmt(d['p99'])} | {_fmt(d['max'])} |"
                )
            bad = [r for r in ext["runs"] if not cp.passed(r["outcome"])]
            if bad:
                out += [
                    "",
                    "Failed runs (their folders under the work directory hold job.log and events.jsonl; "
                    "replay one: the external command above with its replay flags instead of --runs):",
                    "",
                    "| run | kind | plan | outcome | exit | wall s | leftovers | replay flags |",
                    "|---:|---|---|---|---:|---:|---:|---|",
                ]
                for r in bad:
                    out.append(
                        f"| {r['index']}.{r['draw']} | {r['kind']} | {r['plan']} | {r['outcome']} | "
                        f"{r['exit_code']} | {r['wall_seconds']:.1f} | {len(r['leftovers'])} | "
                        f"`{r.get('replay', '')}` |"
                    )
            out.append("")
        if plans is None:
            out += [
                f"Fault-plan campaign: no report (exit {res['fault_plans_exit']}); see {res['work']}",
                "",
            ]
        else:
            d = plans["recovery_seconds"]
            out += [
                f"**Fault plans**: {plans['runs']} runs, {plans['failures']} failed "
                f"({', '.join(f'{k} {v}' for k, v in sorted(plans['outcomes'].items()))}), "
                f"{plans['fired_faults']}/{plans['planned_faults']} planned faults fired, campaign exit "
                f"{res['fault_plans_exit']}; recovery seconds p50 {_fmt(d['p50'])}, p90 {_fmt(d['p90'])}, "
                f"max {_fmt(d['max'])} (n {d['n']}).",
                "",
            ]
    out += [
        "Outcomes: `ok` (exit 0, bit-identical model and log-likelihood trace), `resumed-ok` (driver killed, the "
        "same command rerun resumed from the checkpoint to the same bits), `never-started-retried` (a rank died "
        "while the job started: exit 73, started again by the launcher or the campaign, same bits); failures: "
        "`DIVERGED`, `FAILED(code)`, `HUNG` (past the hang deadline), `LEFTOVER` (a process of the job alive "
        "after the leftover check).",
        "",
    ]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=FULL_RUNS, help="external runs per MPI library")
    ap.add_argument("--plan-runs", type=int, default=20, help="fault-plan runs per MPI library")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument(
        "--max-its",
        type=int,
        default=300,
        help="iterations of the demo fit: it runs them all (no convergence at delta 1e-9), 300 make a "
        "fit of about 10 s on a busy 2-core host (200: about 6 s, after about 10 s of startup)",
    )
    ap.add_argument("--kinds", default=None, help="external kinds (default: all)")
    ap.add_argument("--libs", default="openmpi,mpich")
    ap.add_argument("--openmpi-python", default=LIBS["openmpi"])
    ap.add_argument("--mpich-python", default=LIBS["mpich"])
    ap.add_argument(
        "--work-dir",
        default=None,
        help="where the runs' folders go (default: a new temporary folder)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help=f"label the report a smoke run (implied by --runs < {FULL_RUNS})",
    )
    ap.add_argument(
        "--results", default=RESULTS, help="where chaos_<lib>.json and chaos_campaign.md go"
    )
    ap.add_argument(
        "--collect",
        action="store_true",
        help="run nothing: write the report from the campaigns already in --work-dir",
    )
    args = ap.parse_args(argv)
    pythons = {"openmpi": args.openmpi_python, "mpich": args.mpich_python}
    libs = [x.strip() for x in args.libs.split(",") if x.strip()]
    missing = [
        lib
        for lib in libs
        if lib not in pythons or not (args.collect or os.path.exists(pythons[lib]))
    ]
    if missing:
        sys.stderr.write(
            f"chaos_campaign: no Python for {missing} (valid: openmpi, mpich; "
            f"set --openmpi-python/--mpich-python or run scripts/setup.sh)\n"
        )
        return 2
    if args.collect and not args.work_dir:
        sys.stderr.write("chaos_campaign: --collect needs the --work-dir of the campaigns\n")
        return 2
    work = os.path.abspath(args.work_dir or tempfile.mkdtemp(prefix="mixle_mpi_chaos_campaign_"))
    common.log(f"work directory {work}")
    smoke = args.smoke or args.runs < FULL_RUNS
    results = {
        "smoke": smoke,
        "runs": args.runs,
        "plan_runs": args.plan_runs,
        "seed": args.seed,
        "ranks": args.ranks,
        "max_its": args.max_its,
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "tree": tree_version(),
        "command": "python bench/chaos_campaign.py "
        + shlex.join(argv if argv is not None else sys.argv[1:]),
        "libraries": {},
    }
    os.makedirs(args.results, exist_ok=True)
    failed = False
    for lib in libs:
        lwork = os.path.join(work, lib)
        os.makedirs(lwork, exist_ok=True)
        meta_path = os.path.join(lwork, "meta.json")
        if args.collect:
            res = _load(meta_path)
            if res is None:
                common.log(f"{lib}: no campaign in {lwork}")
                continue
            for key in ("fault_plans", "external"):
                failed |= res.get(f"{key}_exit") != 0
            # the campaign's own settings, not this call's
            results["smoke"] = any(r.get("smoke") for r in [res, *results["libraries"].values()])
            results["runs"] = max(r.get("runs", 0) for r in [res, *results["libraries"].values()])
            for key in ("date", "tree", "seed", "max_its", "ranks"):
                results[key] = res.get(key, results[key])
        else:
            cmds = commands(pythons[lib], lwork, args)
            venv = os.path.dirname(
                os.path.dirname(os.path.dirname(pythons[lib]))
            )  # .../.venv/bin/python -> ...
            res = {
                "work": lwork,
                "commands": cmds,
                "command": results["command"],
                "date": results["date"],
                "tree": results["tree"],
                "runs": args.runs,
                "smoke": smoke,
                "seed": args.seed,
                "max_its": args.max_its,
                "ranks": args.ranks,
                "commands_shown": {
                    k: common.show(v, tmp=work).replace(venv + os.sep, "") for k, v in cmds.items()
                },
            }
            for key, budget in (
                ("fault_plans", 600.0 * max(1, args.plan_runs)),
                ("external", 600.0 * max(1, args.runs)),
            ):
                res[f"{key}_exit"] = "running"
                with open(meta_path, "w", encoding="utf-8") as fh:
                    json.dump(res, fh, indent=1)
                rc, seconds = _run(cmds[key], os.path.join(lwork, f"{key}.log"), budget)
                res[f"{key}_exit"], res[f"{key}_seconds"] = rc, round(seconds, 1)
                failed |= rc != 0
                common.log(f"{lib} {key}: exit {rc} after {seconds:.0f} s")
            with open(meta_path, "w", encoding="utf-8") as fh:
                json.dump(res, fh, indent=1)
        ext = _load(os.path.join(lwork, "external", "campaign.json"))
        if ext is not None:
            ext = {**ext, "runs": [_compact(r) for r in ext["runs"]]}
        res["external"] = ext
        res["fault_plans"] = plan_summary(_load(os.path.join(lwork, "plans", "campaign.json")))
        fp = _load(os.path.join(lwork, "plans", "campaign.json"))
        res["fault_plan_runs"] = [
            {k: v for k, v in r.items() if k not in ("out_dir", "fired_records")}
            for r in (fp or {}).get("runs", [])
        ]
        results["libraries"][lib] = res
        with open(os.path.join(args.results, f"chaos_{lib}.json"), "w", encoding="utf-8") as fh:
            json.dump(
                {k: v for k, v in results.items() if k != "libraries"} | {"library": lib, **res},
                fh,
                indent=1,
            )
    text = render(results)
    with open(os.path.join(args.results, "chaos_campaign.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
