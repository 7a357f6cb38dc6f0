"""Probe: a mixle_mpi fit across the nodes of a multi-node local SLURM, optionally losing a
node mid-fit (issue 36; facts in bench/results/slurm_nodes_facts.md).

    python bench/slurm_nodes_probe.py --state STATEDIR --launch ompi|ompi-srun|mpich|mpich-srun \
        --out DIR [--lose node2] [--at 3] [--sbatch-args '--no-kill'] [--ref result.json]

STATEDIR is a cluster started with ``scripts/slurm-local.sh start STATEDIR --nodes 3``. One
batch job (``-N 2-3 --ntasks-per-node=2`` unless --sbatch-args says otherwise) runs
``mixle-mpi run -n $SLURM_NTASKS`` over the built-in gmm1d fit. The probe polls (every
0.2 s, bounded by --deadline) the checkpoint, the job and the nodes, loses the node once
the checkpoint holds iteration >= --at, and prints a timeline (seconds since submission) and
a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slurmnodes import TERMINAL, SlurmNodes  # noqa: E402

WT = Path(__file__).resolve().parents[1]
LAUNCH = {  # venv, mixle-mpi run flags
    "ompi": (".venv", ""),
    "ompi-srun": (".venv", "--launcher srun"),
    "mpich": (".venv-mpich", ""),
    "mpich-srun": (".venv-mpich", "--launcher srun"),
}

SCRIPT = """#!/bin/bash
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
export PYTHONPATH={wt} PYTHONWARNINGS=ignore
{exports}
echo "[probe] start $(date +%s.%N) on $(hostname) nodes $SLURM_JOB_NODELIST ntasks $SLURM_NTASKS restart ${{SLURM_RESTART_COUNT:-0}}"
timeout {timeout} {venv}/bin/mixle-mpi run -n $SLURM_NTASKS --timeout {timeout} {flags} -- \\
  {venv}/bin/python -m mixle_mpi.fitjob --model gmm1d --n {n} --max-its {its} --num-shards 4 \\
  --workdir $PWD/work --checkpoint $PWD/fit.ckpt.h5 --out $PWD/result.json
rc=$?
echo "[probe] rc=$rc end $(date +%s.%N)"
if [ -n "${{PROBE_EXCLUDE:-}}" ]; then  # a new step on the nodes that are left
  timeout 60 srun --exclude="$PROBE_EXCLUDE" -N 2 -n 2 hostname
  echo "[probe] srun --exclude=$PROBE_EXCLUDE step rc=$? at $(date +%s.%N)"
fi
exit $rc
"""


def ck_iteration(path: Path):
    from mixle_mpi.storage import checkpoint as ckpt

    try:
        return ckpt.read(str(path)).iteration
    except Exception:
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    ap.add_argument("--launch", choices=list(LAUNCH), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lose", default="")
    ap.add_argument("--at", type=int, default=3)
    ap.add_argument("--sbatch-args", default="-N 2-3 --ntasks-per-node=2")
    ap.add_argument("--export", action="append", default=[], help="VAR=VALUE exported in the job")
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--its", type=int, default=40)
    ap.add_argument("--deadline", type=float, default=240)
    ap.add_argument("--ref", default="")
    ap.add_argument(
        "--flags",
        default="",
        help="more `mixle-mpi run` flags, e.g. \"--mpiexec-args='--no-kill'\"",
    )
    a = ap.parse_args()

    c = SlurmNodes(Path(a.state))
    c._read_nodes()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    venv, flags = LAUNCH[a.launch]
    flags = f"{flags} {a.flags}".strip()
    text = SCRIPT.format(
        wt=WT,
        venv=WT / venv,
        flags=flags,
        n=a.n,
        its=a.its,
        timeout=int(a.deadline),
        exports="\n".join(f"export {e}" for e in a.export),
    )
    t0 = time.monotonic()
    job = c.submit(text, out, a.launch, *a.sbatch_args.split())
    timeline: list[tuple[float, str]] = []

    def note(what: str) -> None:
        timeline.append((round(time.monotonic() - t0, 2), what))
        print(f"{timeline[-1][0]:7.2f}  {what}", flush=True)

    note(f"submitted job {job}: sbatch {a.sbatch_args}, launch {a.launch}")
    last_job = last_nodes = None
    lost_at = None
    end = t0 + a.deadline
    rec: dict = {}
    while time.monotonic() < end:
        rec = c.job(job)
        state = (rec.get("JobState"), rec.get("Reason"), rec.get("Restarts"), rec.get("NodeList"))
        if state != last_job:
            note(f"job {' '.join(map(str, state))}")
            last_job = state
        nodes = c.node_states()
        if nodes != last_nodes:
            note("nodes " + " ".join(f"{k}={v}" for k, v in sorted(nodes.items())))
            last_nodes = nodes
        if a.lose and lost_at is None:
            it = ck_iteration(out / "fit.ckpt.h5")
            if it is not None and it >= a.at:
                victims = c.lose(a.lose)
                lost_at = time.monotonic() - t0
                note(
                    f"lost {a.lose} at checkpoint iteration {it}: SIGKILLed {len(victims)} processes, link down"
                )
        queued = c.run("squeue", "-h", "-j", job, "-o", "%i").stdout.strip()
        if rec.get("JobState") in TERMINAL and not queued:
            break
        time.sleep(0.2)
    else:
        note("deadline reached: cancelling")
        c.run("scancel", job)
    summary = {
        "job": job,
        "launch": a.launch,
        "sbatch": a.sbatch_args,
        "lose": a.lose,
        "lost_at": lost_at,
        "state": rec.get("JobState"),
        "exit": rec.get("ExitCode"),
        "restarts": rec.get("Restarts"),
        "elapsed": round(time.monotonic() - t0, 2),
    }
    res = out / "result.json"
    if res.exists():
        r = json.loads(res.read_text())
        summary["iterations"] = r.get("iterations")
        if a.ref:
            ref = json.loads(Path(a.ref).read_text())
            summary["same_as_ref"] = (
                r["model"] == ref["model"]
                and r["ll"] == ref["ll"]
                and r["iterations"] == ref["iterations"]
            )
    (out / "timeline.json").write_text(
        json.dumps({"summary": summary, "timeline": timeline}, indent=1)
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
