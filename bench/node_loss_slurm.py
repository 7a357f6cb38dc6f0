"""The time a lost node costs under SLURM (issue 36): a 3-node local SLURM
(``scripts/slurm-local.sh start DIR --nodes 3``, ``tests/slurmnodes.py``), the recommended
template over 3 nodes with 2 ranks each, node2 lost once the checkpoint holds iteration 3
(its link down, every process on it SIGKILLed; SLURM finds out by itself: no node is
marked DOWN by hand here).

- ``ft`` (mpiexec in the allocation): heartbeats fail node2's ranks and the fit goes on
  without them until SLURM declares the node DOWN and ends the runtime's daemon step there;
  the job then ends, and the launcher probes the nodes and relaunches without node2.
- ``srun`` (``--no-kill`` on the step): the step outlives the node; its ranks are
  recovered in the job and nothing else happens.

For each case the same job runs once without a loss (same cluster shape, measured in the
same run); the cost of the loss is the difference of the fits' wall times (the first
``start`` event to ``closed``). Parts: detection (loss -> failure_detected), recovery (loss
-> the first checkpoint after that), and for a relaunch: loss -> the job ended (SLURM's
DOWN), the probe, the relaunch (-> the new driver's start) and the reload (-> its first
iteration). Every run must end COMPLETED 0:0 with the clean run's bits.

    python bench/node_loss_slurm.py [--cases ft-openmpi,srun-openmpi,ft-mpich,srun-mpich] [--its 300] [--rows 500000]
        [--out bench/results/node_loss_slurm.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from slurmnodes import SlurmNodes, available  # noqa: E402

N, LOSE_AT = 500_000, 3  # rows: a fit that runs past SLURM's DOWN (about 15 s after the loss here)
FIT = (
    '"$PY" -m mixle_mpi.fitjob --model gmm1d --n {n} --max-its {its} --num-shards 4 --seed 7 --quiet '
    '--workdir "$OUT_DIR/work" --checkpoint "$OUT_DIR/fit.ckpt.h5" --out "$OUT_DIR/result.json"'
)


def _python(library: str) -> str:
    return str(REPO / (".venv-mpich" if library == "mpich" else ".venv") / "bin" / "python")


def _env(library: str) -> dict:
    env = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}
    if (
        library == "mpich"
    ):  # UCX takes the nodes for one machine; over tcp a peer's reset may block the library
        env.update(MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="sockets", FI_SOCKETS_IFACE="eth0")
    return env


def _events(out: Path) -> list[dict]:
    path = out / "work" / "events.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )


def one_job(kind: str, library: str, its: int, folder: Path, lose: bool, rows: int = N) -> dict:
    """One job on a fresh 3-node cluster; with ``lose``, node2 is lost at checkpoint 3."""
    from mixle_mpi.cli import slurm
    from mixle_mpi.storage import checkpoint as ckpt

    out = folder / "out"
    text = slurm.render(
        kind,
        job_name=f"{kind}-{library}",
        ntasks=6,
        time="20",
        signal_margin=60,
        max_requeues=1,
        python=_python(library),
        out_dir=str(out),
        fit_cmd=FIT.format(n=rows, its=its),
        nodes="3",
        ntasks_per_node=2,
    )
    lost: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="mmsn", dir="/tmp") as state,
        SlurmNodes(Path(state), nodes=3, env=_env(library)) as cluster,
    ):
        job = cluster.submit(text, folder / "job", "fit", env=_env(library))

        def watch():
            end = time.monotonic() + 300
            while lose and time.monotonic() < end:
                try:
                    state_ = ckpt.read(str(out / "fit.ckpt.h5"))
                except ckpt.CheckpointError:
                    state_ = None
                if state_ is not None and state_.iteration >= LOSE_AT:
                    lost.append(time.time())
                    cluster.lose("node2")
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rec = cluster.wait_done(job, deadline=600)
        watcher.join(5)
        down = cluster.node_states().get("node2")
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    return {
        "state": rec.get("JobState"),
        "exit": rec.get("ExitCode"),
        "events": _events(out),
        "result": result,
        "lost_at": lost[0] if lost else None,
        "node2": down,
        "log": "\n".join(p.read_text() for p in (folder / "job").glob("*.out"))[-4000:],
    }


def fit_seconds(events: list[dict]) -> float:
    start = min(e["time"] for e in events if e["event"] == "start")
    return max(e["time"] for e in events if e["event"] == "closed") - start


def parts(events: list[dict], lost_at: float) -> dict:
    """The parts of one node loss from its events (pure)."""
    detected = [
        e["time"] for e in events if e["event"] == "failure_detected" and e["time"] >= lost_at
    ]
    after = [
        e["time"]
        for e in events
        if e["event"] == "checkpoint" and detected and e["time"] > detected[0]
    ]
    out = {
        "detection": detected[0] - lost_at if detected else None,
        "recovery": after[0] - lost_at if after else None,
    }
    relaunched = [e for e in events if e["event"] == "relaunched"]
    if relaunched:
        r = relaunched[0]
        start = max(e["time"] for e in events if e["event"] == "start" and e["time"] <= r["time"])
        resumed = next(e for e in events if e["event"] == "resumed" and e["time"] >= start)
        first = next(
            e["time"]
            for e in events
            if e["event"] == "checkpoint"
            and e["time"] >= start
            and e.get("iteration", 0) > resumed["iteration"]
        )
        out.update(
            {
                "job_ended": r["ended_at"] - lost_at,
                "probe": r["decided_at"] - r["ended_at"],
                "relaunch": start - r["decided_at"],
                "reload": first - start,
            }
        )
    return {k: (round(v, 3) if v is not None else None) for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cases", default="ft-openmpi,srun-openmpi,ft-mpich,srun-mpich")
    ap.add_argument("--its", type=int, default=300)
    ap.add_argument("--rows", type=int, default=N)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if why := available():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_node_loss_") as tmp:
        for case in args.cases.split(","):
            kind, library = case.split("-")
            clean = one_job(
                kind, library, args.its, Path(tmp) / f"{case}-clean", lose=False, rows=args.rows
            )
            hit = one_job(
                kind, library, args.its, Path(tmp) / f"{case}-lost", lose=True, rows=args.rows
            )
            ok = (clean["state"], clean["exit"], hit["state"], hit["exit"]) == (
                "COMPLETED",
                "0:0",
            ) * 2
            row = {
                "case": case,
                "ok": ok and hit["lost_at"] is not None,
                "identical": bool(hit["result"])
                and hit["result"].get("model") == clean["result"].get("model")
                and hit["result"].get("ll") == clean["result"].get("ll"),
                "relaunched": any(e["event"] == "relaunched" for e in hit["events"]),
                "node2": hit["node2"],
            }
            if row["ok"]:
                row.update(
                    clean_seconds=round(fit_seconds(clean["events"]), 2),
                    lost_seconds=round(
                        fit_seconds(hit["events"]) - fit_seconds(clean["events"]), 2
                    ),
                    **parts(hit["events"], hit["lost_at"]),
                )
            else:
                row["log"] = hit["log"]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    text = render(rows, args.its, args.rows)
    print(text)
    if args.out:
        Path(args.out).write_text(
            json.dumps({"rows": rows, "its": args.its, "n": args.rows}, indent=1) + "\n"
        )
        Path(args.out).with_suffix(".md").write_text(text + "\n")
    return 0 if all(r["ok"] and r["identical"] for r in rows) else 1


def render(rows: list[dict], its: int, n: int = N) -> str:
    def f(v):
        return "-" if v is None else f"{v:.2f}"

    lines = [
        "# The time a lost node costs under SLURM (3-node local SLURM)",
        "",
        f"The ft template with `--nodes=3 --ntasks-per-node=2` (the shape measured here; for your jobs the user guide recommends `--nodes 2-3 --ntasks 6`, which a requeue after a node loss can start on fewer nodes), gmm1d with {n} rows, up to {its} iterations; "
        f"node2 lost at checkpoint {LOSE_AT}, found by SLURM itself (SlurmdTimeout 5 s, MessageTimeout 5 s: "
        "DOWN about 15 s after the loss here; SLURM's defaults are 300 s and 10 s). Seconds. "
        "`python bench/node_loss_slurm.py`.",
        "",
        "| case | what happened | detection | recovered in the job | job ended (DOWN) | probe | relaunch | "
        "reload | fit without loss | cost of the loss | COMPLETED, same bits |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        what = "relaunched without node2" if r.get("relaunched") else "survived in the job"
        if not r["ok"]:
            lines.append(f"| {r['case']} | failed | | | | | | | | | no |")
            continue
        lines.append(
            f"| {r['case']} | {what} | {f(r.get('detection'))} | {f(r.get('recovery'))} | "
            f"{f(r.get('job_ended'))} | {f(r.get('probe'))} | {f(r.get('relaunch'))} | {f(r.get('reload'))} | "
            f"{f(r.get('clean_seconds'))} | **{f(r.get('lost_seconds'))}** | {r['identical']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.pop("MIXLE_MPI_FAULT_PLAN", None)
    sys.exit(main())
