"""Issue 12 on a real SLURM: a dead driver with failover, against a requeue that resumes.

Starts the local single-node SLURM (scripts/slurm-local.sh) and submits the rendered
template of ``--kind`` (``ft``: mpiexec inside the allocation; ``srun``: ranks started by
srun) running the built-in fit with a checkpoint after every iteration. Per repetition:

- a failure-free job (the bits to match);
- the same job with ``failover`` on and the driver SIGKILLed before E-step call K: the
  lowest surviving rank takes over inside the job; death -> ``driver_resumed``;
- the same kill without failover: the job fails, ``scontrol requeue`` puts it back, and
  the requeued run resumes from the checkpoint; death -> its ``resumed``, split into the
  job's end, SLURM's restart of the requeued job (its ``start`` event) and the resume.

The requeue here meets an idle cluster; on a shared one the queue wait comes on top.

    python bench/failover_slurm.py [--kind ft|srun] [--reps 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from bench.failover import first, job_arguments, same  # noqa: E402
from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired  # noqa: E402
from mixle_mpi.cli import slurm  # noqa: E402
from mixle_mpi.storage.events import read_events  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
}
FIT = (
    '"$PY" -m mixle_mpi.fitjob --model gmm1d --n {n} --max-its {its} --num-shards {shards} --quiet '
    '--workdir "$OUT_DIR/work" --checkpoint "$OUT_DIR/fit.ckpt.h5" --out "$OUT_DIR/result.json"'
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    """The local cluster's lifetime and the few client calls the benchmark needs; every
    wait has a deadline."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.env = dict(
            os.environ,
            SLURM_CONF=os.path.join(state, "slurm.conf"),
            PYTHONWARNINGS="ignore",
            SLURM_LOCAL_CTLD_PORT=str(_free_port()),
            SLURM_LOCAL_SLURMD_PORT=str(_free_port()),
            PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
        )
        self.env.pop("MIXLE_MPI_FAULT_PLAN", None)

    def _script(self, action: str) -> None:
        done = subprocess.run(
            ["bash", os.path.join(REPO, "scripts", "slurm-local.sh"), action, self.state],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"slurm-local.sh {action} failed:\n{done.stdout}\n{done.stderr}")

    def __enter__(self) -> "LocalSlurm":
        self._script("start")
        return self

    def __exit__(self, *exc) -> None:
        self._script("stop")

    def call(self, *args: str) -> str:
        return subprocess.run(args, capture_output=True, text=True, timeout=30, env=self.env).stdout

    def submit(self, text: str, folder: str, env: dict) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "job.sbatch")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        out = subprocess.run(
            ["sbatch", "--parsable", path],
            capture_output=True,
            text=True,
            timeout=30,
            env={**self.env, **env},
            cwd=folder,
        )
        if out.returncode != 0:
            raise RuntimeError(f"sbatch failed: {out.stderr}")
        return out.stdout.strip().split(";")[0]

    def state_of(self, job: str) -> dict:
        line = self.call("scontrol", "-o", "show", "job", job).strip()
        return dict(re.findall(r"(\w+)=(\S*)", line))

    def wait_terminal(self, job: str, deadline: float = 300.0) -> tuple[dict, float]:
        """The job's record once it ended (and left the queue), and when this saw it."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            rec = self.state_of(job)
            if (
                rec.get("JobState") in TERMINAL
                and not self.call("squeue", "-h", "-j", job, "-o", "%i").strip()
            ):
                return rec, time.time()
            time.sleep(0.1)
        raise TimeoutError(f"job {job} did not end within {deadline:g} s")


def result_of(folder: str) -> dict | None:
    path = os.path.join(folder, "out", "result.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def events_of(folder: str) -> list[dict]:
    return read_events(os.path.join(folder, "out", "work", "events.jsonl"))


def render(kind: str, folder: str, python: str, args) -> str:
    return slurm.render(
        kind,
        job_name=f"bench-{kind}",
        ntasks=args.workers + 1,
        time="10",
        signal_margin=60,
        max_requeues=1,
        python=python,
        out_dir=os.path.join(folder, "out"),
        fit_cmd=FIT.format(n=args.n, its=args.its, shards=args.shards),
    )


def one_rep(cluster: LocalSlurm, tmp: str, rep: int, args) -> dict:
    plan = {"MIXLE_MPI_FAULT_PLAN": f"0:kill:estep_before:{args.call}"}
    folders = {k: os.path.join(tmp, f"{k}{rep}") for k in ("ref", "fo", "rq")}
    ref_job = cluster.submit(
        render(args.kind, folders["ref"], args.python, args), folders["ref"], {}
    )
    cluster.wait_terminal(ref_job)
    ref = result_of(folders["ref"])

    fired = os.path.join(tmp, f"fo{rep}.fired.jsonl")
    fo_job = cluster.submit(
        render(args.kind, folders["fo"], args.python, args),
        folders["fo"],
        {**plan, "MIXLE_MPI_FAILOVER": "1", FIRED_ENV: fired},
    )
    fo_rec, _ = cluster.wait_terminal(fo_job)
    kill = read_fired(fired)[0]["time"]
    ev = events_of(folders["fo"])
    back = first(ev, "driver_resumed", after=kill)
    failover = {
        "to_resumed": back["time"] - kill,
        "state": fo_rec.get("JobState"),
        "restarts": int(fo_rec.get("Restarts", "0")),
        "identical": same(result_of(folders["fo"]), ref),
    }

    fired2 = os.path.join(tmp, f"rq{rep}.fired.jsonl")
    rq_job = cluster.submit(
        render(args.kind, folders["rq"], args.python, args),
        folders["rq"],
        {**plan, FIRED_ENV: fired2},
    )
    dead_rec, ended = cluster.wait_terminal(rq_job)
    kill2 = read_fired(fired2)[0]["time"]
    asked = time.time()
    cluster.call("scontrol", "requeue", rq_job)
    rq_rec, _ = cluster.wait_terminal(rq_job)
    ev2 = events_of(folders["rq"])
    restart = first(ev2, "start", after=asked)
    resumed = first(ev2, "resumed", after=asked)
    requeue = {
        "job_end_after_kill": ended - kill2,
        "requeue_to_start": restart["time"] - asked,
        "start_to_resumed": resumed["time"] - restart["time"],
        "to_resumed": resumed["time"] - kill2,
        "first_state": dead_rec.get("JobState"),
        "state": rq_rec.get("JobState"),
        "identical": same(result_of(folders["rq"]), ref),
    }
    return {"failover": failover, "requeue": requeue}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kind", choices=("ft", "srun"), default="ft")
    job_arguments(ap)
    args = ap.parse_args(argv)
    reps = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_failover_slurm_") as tmp:
        with LocalSlurm(os.path.join(tmp, "slurm")) as cluster:
            for rep in range(args.reps):
                common.log(
                    f"repetition {rep + 1}/{args.reps} ({args.kind}): reference, failover, kill + requeue"
                )
                reps.append(one_rep(cluster, tmp, rep, args))
    med = lambda key, part: statistics.median(r[key][part] for r in reps)  # noqa: E731
    print(
        f"kind {args.kind}; driver SIGKILLed before E-step call {args.call}; gmm1d N={args.n}, W={args.workers}, "
        f"S={args.shards}, {args.reps} repetition(s); medians in seconds"
    )
    print(f"| failover: death -> driver_resumed | {med('failover', 'to_resumed'):.3f} |")
    for part in ("job_end_after_kill", "requeue_to_start", "start_to_resumed", "to_resumed"):
        print(f"| requeue: {part.replace('_', ' ')} | {med('requeue', part):.3f} |")
    ratio = med("failover", "to_resumed") / med("requeue", "to_resumed")
    print(f"failover / requeue, death -> resumed: {ratio:.3f}")
    ok = all(
        r["failover"]["identical"]
        and r["failover"]["state"] == "COMPLETED"
        and r["failover"]["restarts"] == 0
        and r["requeue"]["identical"]
        and r["requeue"]["state"] == "COMPLETED"
        for r in reps
    )
    print(
        f"every failover job completed in one run, and both ways gave the failure-free bits: {ok}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"args": vars(args), "reps": reps, "ratio": ratio, "ok": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
