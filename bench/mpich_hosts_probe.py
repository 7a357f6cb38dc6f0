"""MPICH across fake hosts: does some setting let the driver survive a remote worker's
SIGKILL in the job? (bench/results/mpich_hosts_facts.md)

One run: the built-in fit on hosts A (driver), B (workers 1-2), C (workers 3-4) under MPICH,
worker 2 on host B SIGKILLed before E-step 2 (plan "2:kill:estep_before:2"), or with
``--mode linkdown`` host B's link taken down first and then worker 2 SIGKILLed by us (its
peers see silence, not a reset, as on a lost SLURM node). The launcher does not rerun a
blocked job (--max-restarts 0), so each run shows the first attempt only. With --gdb the
driver's native stacks are taken once the fault is some seconds old and no recovery is in
the events: where it blocks.

    PYTHONPATH=. .venv-mpich/bin/python bench/mpich_hosts_probe.py --config base --runs 3 --gdb
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakehosts import FakeHosts  # noqa: E402
from mpiharness import fit_args, mpich_python, run_job  # noqa: E402

SLOTS = [1, 2, 2]
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 1, 5


def configs(h: FakeHosts) -> dict:
    tcp = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": h.bridge}
    sockets = {
        "MPIR_CVAR_CH4_NETMOD": "ofi",
        "FI_PROVIDER": "sockets",
        "FI_SOCKETS_IFACE": h.bridge,
    }
    return {
        "base": tcp,
        "sockets": sockets,
        "eagain": {
            **tcp,
            "MPIR_CVAR_CH4_OFI_MAX_EAGAIN_RETRY": os.environ.get("EAGAIN_RETRY", "200000"),
        },
        "async": {**tcp, "MPIR_CVAR_ASYNC_PROGRESS": "1"},
        "tcp_noauto": {**tcp, "FI_TCP_DISABLE_AUTO_PROGRESS": "1"},
        "ctrl_auto": {
            **tcp,
            "MPIR_CVAR_CH4_OFI_ENABLE_CONTROL_AUTO_PROGRESS": "1",
            "MPIR_CVAR_CH4_OFI_ENABLE_DATA_AUTO_PROGRESS": "1",
        },
        "ucx_tcp": {
            "MPIR_CVAR_CH4_NETMOD": "ucx",
            "UCX_TLS": "tcp,self,sm",
            "UCX_NET_DEVICES": h.bridge,
        },
        "ft": {**tcp, "MPIR_CVAR_ENABLE_FT": "1"},
        "vci": {**tcp, "MPIR_CVAR_CH4_NUM_VCIS": "2"},
    }


def _driver_pid(marker: str) -> int | None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            cmd
            and cmd[0].endswith(b"python")
            and any(marker.encode() in c for c in cmd)
            and b"mixle_mpi.fitting.fitjob" in cmd
            and b"PMI_RANK=0" in env
        ):
            return int(pid)
    return None


def _events(path: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def watch(
    h: FakeHosts, run_dir: Path, mode: str, gdb: bool, notes: dict, stop: threading.Event
) -> None:
    """linkdown: once E-step 1 is done (checkpoint or a "round"), take host B's link down and
    SIGKILL worker 2. gdb: 12 s after the fault with no recovery, the driver's stacks."""
    events = run_dir / "events.jsonl"
    fired = run_dir / "fired.jsonl"
    end = time.monotonic() + 200
    fault_at = None
    while not stop.is_set() and time.monotonic() < end:
        if mode == "linkdown" and fault_at is None:
            evs = _events(events)
            if any(e["event"] == "loaded" for e in evs):
                time.sleep(0.5)  # an iteration or two in
                victims = [p for p in h.pids(1) if _is_rank(p, 2)]
                subprocess.run(["ip", "link", "set", h._veths[0], "down"], timeout=10)
                time.sleep(0.3)
                for p in victims:
                    os.kill(p, 9)
                fault_at = time.monotonic()
                notes["linkdown_at"], notes["victims"] = time.time(), victims
        if mode == "plan" and fault_at is None and fired.exists() and fired.stat().st_size:
            fault_at = time.monotonic()
        if (
            fault_at is not None
            and gdb
            and "stacks" not in notes
            and time.monotonic() - fault_at > 12
        ):
            evs = _events(events)
            if not any(e["event"] == "recovery" for e in evs):
                pid = _driver_pid(str(run_dir))
                if pid:
                    notes["cpu"] = _cpu_share(pid)
                    out = subprocess.run(
                        ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"],
                        capture_output=True,
                        text=True,
                        timeout=90,
                    )
                    notes["stacks"] = out.stdout
            else:
                notes["stacks"] = "(recovered)"
        if (
            mode == "linkdown"
            and fault_at is not None
            and time.monotonic() - fault_at > 45
            and not notes.get("link_up")
        ):
            subprocess.run(["ip", "link", "set", h._veths[0], "up"], timeout=10)  # let Hydra finish
            notes["link_up"] = time.time()
        time.sleep(0.1)


def _cpu_share(pid: int, span: float = 2.0) -> float:
    """The driver's CPU share over ``span`` seconds (a spin in a retry loop shows ~1)."""

    def ticks():
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])

    a = ticks()
    time.sleep(span)
    return round((ticks() - a) / os.sysconf("SC_CLK_TCK") / span, 2)


def _is_rank(pid: int, rank: int) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return (
        f"PMI_RANK={rank}".encode() in env and b"fitjob" in cmd and b"python" in cmd.split(b"\0")[0]
    )


def one(config: str, mode: str, gdb: bool, base: Path, i: int) -> dict:
    run_dir = base / f"{config}-{mode}-{i}"
    run_dir.mkdir(parents=True)
    with FakeHosts(run_dir, SLOTS) as h:
        env = {
            "MIXLE_MPI_MPIEXEC_ARGS": h.mpich_args(),
            **configs(h)[config],
            "MIXLE_MPI_RECONFIGURE_TIMEOUT": "10",
            "MIXLE_MPI_DRIVER_TIMEOUT": "30",
            "MIXLE_MPI_FAULT_LOG": str(run_dir / "fired.jsonl"),
        }
        notes: dict = {}
        stop = threading.Event()
        t = threading.Thread(target=watch, args=(h, run_dir, mode, gdb, notes, stop), daemon=True)
        t.start()
        t0 = time.monotonic()
        job = run_job(
            mpich_python(),
            sum(SLOTS),
            fit_args(MODEL, N, SHARDS, SUB, 40, max_retries=1)
            if mode == "linkdown"
            else fit_args(MODEL, N, SHARDS, SUB, ITS),
            run_dir,
            plan="2:kill:estep_before:2" if mode == "plan" else None,
            env=env,
            timeout=150,
            launch=("--max-restarts", "0"),
        )
        took = time.monotonic() - t0
        stop.set()
        t.join(5)
    kinds = [e["event"] for e in job.events]
    row = {
        "config": config,
        "mode": mode,
        "run": i,
        "rc": job.rc,
        "seconds": round(took, 1),
        "result": job.result is not None,
        "failure_detected": [
            (e.get("worker"), e.get("host")) for e in job.events if e["event"] == "failure_detected"
        ],
        "recovery": kinds.count("recovery"),
        "shrink": [e.get("method") for e in job.events if e["event"] == "shrink"],
        "watchdog": "made no progress" in job.stderr,
        "attempt2": "attempt 2" in job.stderr,
    }
    row["in_job"] = bool(
        job.rc == 0
        and row["result"]
        and row["failure_detected"]
        and row["recovery"]
        and not row["watchdog"]
    )
    (run_dir / "stderr.txt").write_text(job.stderr)
    if "stacks" in notes:
        (run_dir / "stacks.txt").write_text(notes["stacks"])
        row["stacks"] = str(run_dir / "stacks.txt")
        row["driver_cpu"] = notes.get("cpu")
        row["blocked_in"] = _blocked_in(notes["stacks"])
    return row


def _blocked_in(stacks: str) -> str:
    """The MPI call and innermost libc call of each thread inside libmpi, e.g. 'PMPI_Isend_c<-__libc_connect'."""
    found = []
    for block in stacks.split("\nThread ")[1:]:
        frames = [ln for ln in block.splitlines() if ln.startswith("#")]
        mpi = [
            f.split(" in ")[1].split(" ")[0] for f in frames if " in PMPI_" in f or " in MPI_" in f
        ]
        if mpi:
            inner = (
                frames[0].split(" in ")[1].split(" ")[0] if " in " in frames[0] else frames[0][:40]
            )
            found.append(f"{mpi[0]}<-{inner}")
    return "; ".join(found)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="base")
    ap.add_argument("--mode", default="plan", choices=["plan", "linkdown"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gdb", action="store_true")
    ap.add_argument("--out", default="/tmp/mpich-probe")
    a = ap.parse_args()
    base = Path(a.out)
    base.mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(dir=base, prefix=f"{a.config}-"))
    for i in range(a.runs):
        row = one(a.config, a.mode, a.gdb and i == 0, base, i)
        print(json.dumps(row), flush=True)
        with open(Path(a.out) / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
