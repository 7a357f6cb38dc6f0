"""The time a lost host costs (issue 36): from the loss to the first iteration after it.

Three fake hosts (``tests/fakehosts.py``): the driver on A, two workers each on B and C.
Once the checkpoint holds iteration 3, host C goes down for good (every process on it
SIGKILLed at once, ssh to it refused). The launcher probes the hosts, leaves C out and
launches the job again on A and B, which resumes from the checkpoint. The time is split
from the records the job leaves (events.jsonl, the launcher's relaunch record):

- detection: loss -> the first sign of it (the driver's failure_detected, else mpiexec's end)
- teardown: that sign -> every process of the failed launch gone (the launcher waits for
  the ranks that outlive mpiexec, and ends them after a grace period)
- probe: torn down -> the launcher decided (every host probed at once)
- relaunch: decided -> the new driver's start event (MPI up on every rank)
- reload: start -> the first iteration after the loss finished (shards loaded, the
  checkpoint read, one iteration)

Every run must end with exit 0 and the bits of a failure-free fit on one host (measured in
the same run, which also gives the iteration time the total is compared with).

    python bench/host_loss.py [--reps 3] [--libraries openmpi,mpich] [--out bench/results/host_loss.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fakehosts import FakeHosts, available  # noqa: E402

SLOTS = [1, 2, 2]
N, SHARDS, ITS, LOSE_AT = 200_000, 4, 30, 3
PARTS = ("detection", "teardown", "probe", "relaunch", "reload")


def _python(library: str) -> str:
    return str(REPO / (".venv-mpich" if library == "mpich" else ".venv") / "bin" / "python")


def _fit(
    python: str, ranks: int, folder: Path, env: dict, timeout: float = 300
) -> tuple[int, dict, list, str]:
    folder.mkdir(parents=True, exist_ok=True)
    events = folder / "events.jsonl"
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(ranks),
        "--timeout",
        str(timeout),
        "--",
        python,
        "-m",
        "mixle_mpi.fitjob",
        "--model",
        "gmm1d",
        "--n",
        str(N),
        "--num-shards",
        str(SHARDS),
        "--max-its",
        str(ITS),
        "--seed",
        "7",
        "--quiet",
        "--workdir",
        str(folder / "work"),
        "--out",
        str(folder / "result.json"),
        "--checkpoint",
        str(folder / "ck.h5"),
    ]
    full = {
        **os.environ,
        "MIXLE_MPI_EVENT_LOG": str(events),
        "MIXLE_MPI_HEARTBEAT_PERIOD": "0.1",
        "MIXLE_MPI_HEARTBEAT_TIMEOUT": "1.0",
        "PYTHONWARNINGS": "ignore",
        **env,
    }
    full.pop("MIXLE_MPI_FAULT_PLAN", None)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=full, cwd=str(folder), timeout=timeout + 60
    )
    result = (
        json.loads((folder / "result.json").read_text())
        if (folder / "result.json").exists()
        else {}
    )
    evs = (
        [json.loads(x) for x in events.read_text().splitlines() if x.strip()]
        if events.exists()
        else []
    )
    return proc.returncode, result, evs, proc.stderr


def _lose_at(hosts: FakeHosts, ck: Path, lost: list) -> threading.Thread:
    from mixle_mpi.storage import checkpoint as ckpt

    def watch():
        end = time.monotonic() + 240
        while time.monotonic() < end:
            try:
                state = ckpt.read(str(ck))
            except ckpt.CheckpointError:
                state = None
            if state is not None and state.iteration >= LOSE_AT:
                lost.append(time.time())
                hosts.lose(2, down=True)
                return
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def split(events: list[dict], lost_at: float) -> dict:
    """The parts of one host loss from its events (pure): seconds each, and the total."""
    relaunched = next(e for e in events if e["event"] == "relaunched")
    detected = [
        e["time"] for e in events if e["event"] == "failure_detected" and e["time"] >= lost_at
    ]
    ended, decided = relaunched["ended_at"], relaunched["decided_at"]
    sign = min(detected[0], ended) if detected else ended
    start = max(
        e["time"] for e in events if e["event"] == "start" and e["time"] <= relaunched["time"]
    )
    resumed = next(e for e in events if e["event"] == "resumed" and e["time"] >= start)
    first = next(
        e["time"]
        for e in events
        if e["event"] == "checkpoint"
        and e["time"] >= start
        and e.get("iteration", 0) > resumed["iteration"]
    )
    parts = {
        "detection": sign - lost_at,
        "teardown": ended - sign,
        "probe": decided - ended,
        "relaunch": start - decided,
        "reload": first - start,
    }
    return {
        **{k: round(v, 3) for k, v in parts.items()},
        "total": round(first - lost_at, 3),
        "lost_iterations": LOSE_AT + 1 - resumed["iteration"]
        if resumed["iteration"] < LOSE_AT + 1
        else 0,
    }


def one_run(library: str, folder: Path) -> dict:
    python = _python(library)
    folder.mkdir(parents=True)
    with FakeHosts(folder, SLOTS) as hosts:
        env = (
            {"MIXLE_MPI_MPIEXEC_ARGS": hosts.mpich_args(), **hosts.mpich_env()}
            if library == "mpich"
            else {"MIXLE_MPI_MPIEXEC_ARGS": hosts.mpiexec_args()}
        )
        lost: list = []
        killer = _lose_at(hosts, folder / "run" / "ck.h5", lost)
        rc, result, events, stderr = _fit(python, sum(SLOTS), folder / "run", env)
        killer.join(5)
    if not lost:
        return {
            "library": library,
            "ok": False,
            "why": "the host was never lost",
            "rc": rc,
            "stderr": stderr[-3000:],
        }
    try:
        parts = split(events, lost[0])
    except (StopIteration, ValueError, KeyError) as exc:
        return {
            "library": library,
            "ok": False,
            "why": f"no relaunch in the events ({exc!r})",
            "rc": rc,
            "stderr": stderr[-3000:],
        }
    return {"library": library, "ok": rc == 0, "rc": rc, "result": result, **parts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--libraries", default="openmpi,mpich")
    ap.add_argument("--out", default=None, help="write the figures here (JSON; a .md beside it)")
    args = ap.parse_args(argv)
    if why := available():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    libraries = args.libraries.split(",")
    rows, baseline = [], {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_host_loss_") as tmp:
        rc, whole, events, stderr = _fit(_python("openmpi"), 3, Path(tmp) / "whole", {})
        if rc != 0:
            print(f"the failure-free fit failed (exit {rc}):\n{stderr[-3000:]}", file=sys.stderr)
            return 1
        stamps = sorted(e["time"] for e in events if e["event"] == "checkpoint")
        baseline = {
            "seconds_per_iteration": round(
                statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)), 4
            )
        }
        for rep in range(args.reps):
            for library in libraries:  # interleaved: a slow minute of the machine hits both
                row = one_run(library, Path(tmp) / f"{library}-{rep}")
                row["identical"] = (
                    bool(row.get("result"))
                    and row["result"].get("model") == whole["model"]
                    and row["result"].get("ll") == whole["ll"]
                )
                row.pop("result", None)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    report = {"rows": rows, "baseline": baseline, "summary": summarize(rows, libraries, baseline)}
    text = render(report)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        Path(args.out).with_suffix(".md").write_text(text + "\n")
    return 0 if all(r["ok"] and r["identical"] for r in rows) else 1


def summarize(rows: list[dict], libraries: list[str], baseline: dict) -> dict:
    out = {}
    for lib in libraries:
        good = [r for r in rows if r["library"] == lib and r.get("ok")]
        if good:
            out[lib] = {
                k: round(statistics.median(r[k] for r in good), 3) for k in (*PARTS, "total")
            }
            out[lib]["total_in_iterations"] = round(
                out[lib]["total"] / baseline["seconds_per_iteration"], 1
            )
            out[lib]["runs"] = len(good)
    return out


def render(report: dict) -> str:
    spi = report["baseline"]["seconds_per_iteration"]
    lines = [
        "# The time a lost host costs (fake hosts, relaunch without it)",
        "",
        f"Driver on host A, workers 1-2 on B and 3-4 on C; C goes down for good once the checkpoint holds "
        f"iteration {LOSE_AT} (gmm1d, {N} rows, {SHARDS} shards, {ITS} iterations). A failure-free fit on one "
        f"host, measured in the same run: {spi:.3f} s per iteration. `python bench/host_loss.py`.",
        "",
        "| MPI | runs | detection | teardown | probe | relaunch | reload (+1 iteration) | total s | exit 0 and same bits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        if "total" in r:
            lines.append(
                f"| {r['library']} | 1 | {r['detection']:.2f} | {r['teardown']:.2f} | {r['probe']:.2f} | "
                f"{r['relaunch']:.2f} | {r['reload']:.2f} | {r['total']:.2f} | {r['ok'] and r['identical']} |"
            )
        else:
            lines.append(f"| {r['library']} | 1 | - | - | - | - | - | - | no: {r.get('why')} |")
    for lib, s in report["summary"].items():
        lines.append(
            f"| **{lib} median** | {s['runs']} | {s['detection']:.2f} | {s['teardown']:.2f} | "
            f"{s['probe']:.2f} | {s['relaunch']:.2f} | {s['reload']:.2f} | **{s['total']:.2f}** "
            f"({s['total_in_iterations']:g} iterations) | |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
