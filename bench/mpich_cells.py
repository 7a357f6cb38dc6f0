"""Under MPICH, how many messages to a dead rank on the same host can a process send before
it can send to nobody (``bench/results/mpich_cells.md``).

Rank 2 dies; rank 0 sends one small message to it and one to the live rank 1, again and
again, and reports the count at which its send to rank 1 stops completing. With MPICH's
default ``MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS=64`` that is 63: each message to the dead
rank keeps one of the sender's shared-memory cells for good. This is why the driver beats
back only to workers it heard (``policy/heartbeat.answer_due``).

    python bench/mpich_cells.py [--cells 64,256]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = r"""
import os, signal, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if rank == 2:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(1.0)
if rank == 0:
    limit = int(sys.argv[1])
    to_dead = []
    for i in range(limit):
        to_dead.append(comm.isend(None, dest=2, tag=1))
        req = comm.isend(None, dest=1, tag=1)
        start = time.monotonic()
        while not req.Test():
            if time.monotonic() - start > 2.0:
                print(f"STUCK {i}", flush=True)
                os._exit(0)
            time.sleep(0.001)
    print(f"FINE {limit}", flush=True)
    os._exit(0)
start = time.monotonic()
while time.monotonic() - start < 8.0:
    while comm.iprobe(source=0, tag=1):
        comm.recv(source=0, tag=1)
    time.sleep(0.001)
os._exit(0)
"""
WRAPPER = 'trap \'\' USR1\n"$@"\nrc=$?\nif [ "$rc" -gt 128 ] && [ "${PMI_RANK:-0}" != "0" ]; then exit 0; fi\nexit $rc\n'


def measure(python: str, cells: int | None, limit: int) -> str:
    mpiexec = str(Path(python).parent / "mpiexec")
    with tempfile.TemporaryDirectory() as tmp:
        probe, wrap = Path(tmp, "probe.py"), Path(tmp, "wrap.sh")
        probe.write_text(PROBE)
        wrap.write_text(WRAPPER)
        env = dict(os.environ)
        if cells is not None:
            env["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS"] = str(cells)
        out = subprocess.run(
            [
                mpiexec,
                "-disable-auto-cleanup",
                "-n",
                "3",
                "sh",
                str(wrap),
                python,
                str(probe),
                str(limit),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        ).stdout
    line = next((x for x in out.splitlines() if x.startswith(("STUCK", "FINE"))), "no answer")
    if line.startswith("STUCK"):
        return f"sends to the live rank stop completing after {line.split()[1]} messages to the dead rank"
    return f"every send completed ({line})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-mpich" / "bin" / "python"))
    ap.add_argument(
        "--cells", default="default,256", help="comma-separated cell counts ('default': unset)"
    )
    args = ap.parse_args()
    for text in args.cells.split(","):
        cells = None if text == "default" else int(text)
        limit = 4 * (cells or 64) + 100
        print(f"IQUEUE_NUM_CELLS={text}: {measure(args.python, cells, limit)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
