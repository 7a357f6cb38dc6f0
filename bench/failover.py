"""Issue 12: what a dead driver costs with failover, against a rerun that resumes.

The built-in fit job runs on W + 1 ranks with a checkpoint after every iteration, and the
chaos hook SIGKILLs the driver (rank 0) before E-step call K. With ``failover`` on, the
lowest surviving rank takes over in the same job; the takeover is split from the victim's
own kill stamp and the event log:

- detection: the kill to the moment the successor saw the death (``driver_failed.seen_at``);
- agreement: revoke + shrink (``driver_elected.agreed_seconds``);
- rebuild: the startup handshake over the survivors, reopening the shard store, until the
  successor's ``start`` event;
- setup + reload: Setup and shard loads on the survivors, and reading the checkpoint, until
  ``resumed``; split into setup (Setup sent, every Ready back), shard reload (the ``loaded``
  event) and checkpoint load (the rest: the program building its fit, reading the checkpoint);
- first iteration: the successor's first E-step, M-step and checkpoint.

The baseline is the same kill without failover: the job ends (the workers see the death and
exit), and the same command is run again at once and resumes: kill -> job end, plus launch ->
``resumed``, plus its first iteration. That is a requeue with no wait in the queue, the
cheapest one a cluster can give (the queue wait, often minutes to hours, comes on top).
Both runs' models are compared with a failure-free run, bit for bit.

    python bench/failover.py [--quick] [--reps 3] [--n 400000] [--workers 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from mixle_mpi.chaos.fault_plan import read_fired  # noqa: E402
from mixle_mpi.storage.events import read_events  # noqa: E402


def fit_cmd(
    python: str, ranks: int, n: int, shards: int, its: int, tmp: str, tag: str
) -> list[str]:
    return common.launcher(
        python,
        ranks,
        [
            python,
            "-m",
            "mixle_mpi.fitting.fitjob",
            "--model",
            "gmm1d",
            "--n",
            str(n),
            "--num-shards",
            str(shards),
            "--max-its",
            str(its),
            "--seed",
            "7",
            "--checkpoint",
            os.path.join(tmp, f"{tag}.ck.h5"),
            "--workdir",
            os.path.join(tmp, f"{tag}.work"),
            "--out",
            os.path.join(tmp, f"{tag}.json"),
            "--quiet",
        ],
    )


def launch(cmd: list[str], tmp: str, tag: str, extra: dict) -> dict:
    events = os.path.join(tmp, f"{tag}.events.jsonl")
    env = common.job_env({"MIXLE_MPI_EVENT_LOG": events, **extra})
    t0 = time.time()
    rc, out, wall = common.run(cmd, env)
    result_path = os.path.join(tmp, f"{tag}.json")
    result = None
    if os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as fh:
            result = json.load(fh)
    return {
        "rc": rc,
        "log": out,
        "launched": t0,
        "ended": t0 + wall,
        "wall": wall,
        "result": result,
        "events": read_events(events) if os.path.exists(events) else [],
    }


def first(events: list[dict], name: str, after: float = 0.0) -> dict | None:
    return next((e for e in events if e["event"] == name and e["time"] >= after), None)


def same(a: dict | None, b: dict | None) -> bool:
    return (
        bool(a and b)
        and a["model"] == b["model"]
        and a["ll"] == b["ll"]
        and a["iterations"] == b["iterations"]
    )


def one_rep(
    python: str, tmp: str, rep: int, n: int, workers: int, shards: int, its: int, call: int
) -> dict:
    ranks = workers + 1
    plan = {"MIXLE_MPI_FAULT_PLAN": f"0:kill:estep_before:{call}"}
    ref = launch(fit_cmd(python, ranks, n, shards, its, tmp, f"ref{rep}"), tmp, f"ref{rep}", {})
    normal = [r["seconds"] for r in ref["result"]["rounds"] if r["kind"] == "estep"][1:]

    fired = os.path.join(tmp, f"fo{rep}.fired.jsonl")
    fo = launch(
        fit_cmd(python, ranks, n, shards, its, tmp, f"fo{rep}"),
        tmp,
        f"fo{rep}",
        {**plan, "MIXLE_MPI_FAILOVER": "1", "MIXLE_MPI_FAULT_LOG": fired},
    )
    kill = read_fired(fired)[0]["time"]
    ev = fo["events"]
    failed, elected = first(ev, "driver_failed"), first(ev, "driver_elected")
    start = first(ev, "start", after=elected["time"] - 1.0)
    loaded = first(ev, "loaded", after=start["time"])
    resumed = first(ev, "resumed", after=kill)
    step = first(ev, "checkpoint", after=resumed["time"])
    takeover = {
        "detection": failed["seen_at"] - kill,
        "agreement": elected["agreed_seconds"],
        "rebuild": start["time"] - failed["seen_at"] - elected["agreed_seconds"],
        "setup_and_reload": resumed["time"] - start["time"],
        "setup": loaded["setup_seconds"],
        "shard_reload": loaded["load_seconds"],
        "checkpoint_load": resumed["time"] - loaded["time"],
        "to_resumed": resumed["time"] - kill,
        "first_iteration": step["time"] - resumed["time"],
        "to_first_iteration_done": step["time"] - kill,
    }

    fired2 = os.path.join(tmp, f"rq{rep}.fired.jsonl")
    cmd = fit_cmd(python, ranks, n, shards, its, tmp, f"rq{rep}")
    dead = launch(cmd, tmp, f"rq{rep}a", {**plan, "MIXLE_MPI_FAULT_LOG": fired2})
    kill2 = read_fired(fired2)[0]["time"]
    again = launch(cmd, tmp, f"rq{rep}", {})
    resumed2 = first(again["events"], "resumed")
    step2 = first(again["events"], "checkpoint", after=resumed2["time"])
    requeue = {
        "job_end_after_kill": dead["ended"] - kill2,
        "relaunch_to_resumed": resumed2["time"] - again["launched"],
        "to_resumed": (dead["ended"] - kill2) + (resumed2["time"] - again["launched"]),
        "first_iteration": step2["time"] - resumed2["time"],
    }
    requeue["to_first_iteration_done"] = requeue["to_resumed"] + requeue["first_iteration"]
    return {
        "normal_estep": statistics.median(normal),
        "takeover": takeover,
        "requeue": requeue,
        "failover_rc": fo["rc"],
        "failover_identical": same(fo["result"], ref["result"]),
        "dead_rc": dead["rc"],
        "rerun_rc": again["rc"],
        "rerun_identical": same(again["result"], ref["result"]),
        "heartbeat_timeout": 1.0,
    }


def job_arguments(ap: argparse.ArgumentParser) -> None:
    """The job both failover benchmarks run, and where its driver dies."""
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--its", type=int, default=10)
    ap.add_argument(
        "--call", type=int, default=5, help="the driver dies before E-step call K (from 0)"
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", default=None, help="write every measurement here")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="one repetition on 100,000 rows")
    job_arguments(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.n = 1, 100_000
    reps = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_failover_") as tmp:
        for rep in range(args.reps):
            common.log(f"repetition {rep + 1}/{args.reps}: reference, failover, kill + rerun")
            reps.append(
                one_rep(
                    args.python, tmp, rep, args.n, args.workers, args.shards, args.its, args.call
                )
            )
    med = lambda key, part: statistics.median(r[key][part] for r in reps)  # noqa: E731
    print(
        f"driver SIGKILLed before E-step call {args.call}; gmm1d N={args.n}, W={args.workers}, S={args.shards}, "
        f"{args.reps} repetition(s); medians in seconds (normal E-step {statistics.median(r['normal_estep'] for r in reps):.3f} s)"
    )
    print("| failover part | s |\n|---|---:|")
    for part in (
        "detection",
        "agreement",
        "rebuild",
        "setup_and_reload",
        "setup",
        "shard_reload",
        "checkpoint_load",
        "to_resumed",
        "first_iteration",
        "to_first_iteration_done",
    ):
        print(f"| {part} | {med('takeover', part):.3f} |")
    print("| rerun (requeue, no queue wait) part | s |\n|---|---:|")
    for part in (
        "job_end_after_kill",
        "relaunch_to_resumed",
        "to_resumed",
        "first_iteration",
        "to_first_iteration_done",
    ):
        print(f"| {part} | {med('requeue', part):.3f} |")
    ratio = med("takeover", "to_resumed") / med("requeue", "to_resumed")
    bound = 2 * reps[0]["heartbeat_timeout"] + med("takeover", "setup_and_reload")
    print(f"failover / rerun, death -> resumed: {ratio:.3f}")
    print(
        f"takeover (death -> resumed) {med('takeover', 'to_resumed'):.3f} s against the target 2 x heartbeat timeout + "
        f"setup and reload = {bound:.3f} s: {'met' if med('takeover', 'to_resumed') <= bound else 'NOT met'}"
    )
    ok = all(
        r["failover_rc"] == 0
        and r["failover_identical"]
        and r["rerun_rc"] == 0
        and r["rerun_identical"]
        for r in reps
    )
    print(f"bits: failover and rerun identical to the failure-free run in every repetition: {ok}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"args": vars(args), "reps": reps, "ratio": ratio, "bound": bound, "identical": ok},
                fh,
                indent=1,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
