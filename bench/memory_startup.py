"""Items 4 and 5: the driver's peak memory and the startup time, against N.

The data come from an HDF5 file written beforehand (in blocks, by this process), and the
job hands the handle an ``h5py.Dataset``, so rank 0 never holds the data: the store is
streamed in and the shards are streamed out to the workers in blocks. Peak RSS of rank 0
is its VmHWM (/proc) at the end of the fit; the baseline is the same figure at the
smallest N of the same run. Startup is the time from starting the launcher to the driver's
first round (the E-step initialization), split into its phases; its baseline is one EM
iteration of the same job.

    python bench/memory_startup.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

BLOCK = 1_000_000
PHASES = ("launch_to_script", "imports_mpi_init", "store_write", "worker_setup", "shard_load", "other_handle")


def write_h5(path: str, n: int, seed: int = 1) -> None:
    """1-D GMM data (K=3) written block by block: this process never holds all of it."""
    import h5py

    from mixle_mpi.fitting import models

    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", shape=(n,), dtype="f8")
        for i, a in enumerate(range(0, n, BLOCK)):
            b = min(a + BLOCK, n)
            ds[a:b] = models._gmm1d_data(b - a, seed + i)


def job_command(python: str, h5: str, workers: int, its: int, out: str) -> list[str]:
    return common.launcher(python, workers + 1, [python, common.JOB, "--backend", "resilient", "--model", "gmm1d",
                                                 "--h5", h5, "--its", str(its), "--out", out,
                                                 "--launched-at", "{now}"])


def phases(rec: dict) -> dict:
    s = rec["startup"]
    handle = s["handle_done"] - s["handle_start"]
    known = s.get("store_write", 0.0) + s.get("worker_setup", 0.0) + s.get("shard_load", 0.0)
    return {
        "launch_to_script": s["script_started_at"] - rec["launched_at"],      # mpiexec, interpreter, numpy
        "imports_mpi_init": s["handle_start"] - s["script_started_at"],      # mixle import, MPI init, barrier
        "store_write": s.get("store_write", 0.0),
        "worker_setup": s.get("worker_setup", 0.0),
        "shard_load": s.get("shard_load", 0.0),
        "other_handle": handle - known + (s["first_round_started_at"] - s["handle_done"]),
    }


def measure(python: str, quick: bool, workers: int = 2, reps: int | None = None) -> dict:
    sizes = [10_000, 1_000_000] if quick else [100_000, 1_000_000, 10_000_000]
    reps = reps or (1 if quick else 2)
    its = 3
    recs: dict[int, list] = {n: [] for n in sizes}
    commands = {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_mem_") as tmp:
        for n in sizes:
            write_h5(os.path.join(tmp, f"data_{n}.h5"), n)
        for rep in range(reps):
            for n in sizes:  # interleaved over repetitions
                out = os.path.join(tmp, f"r_{n}_{rep}.json")
                template = job_command(python, os.path.join(tmp, f"data_{n}.h5"), workers, its, out)
                commands[n] = (common.show([c.replace("{now}", "$(date +%s.%N)") for c in template], tmp=tmp)
                               + f"  # $TMPDIR/data_{n}.h5 from bench.memory_startup.write_h5(path, {n})")
                cmd = [c.replace("{now}", f"{time.time():.6f}") for c in template]
                rec = common.run_record(cmd, out, f"memory/startup N={n:,} rep {rep + 1}")
                if rec is not None:
                    recs[n].append(rec)
                    common.log(f"memory/startup N={n:,} rep {rep + 1}: driver peak {rec['startup']['vmhwm_end'] / 2**20:.0f} MiB, "
                               f"first round after {rec['startup']['first_round_started_at'] - rec['launched_at']:.1f} s")
    base = sizes[0]
    figures = []
    peak = {n: [r["startup"]["vmhwm_end"] for r in recs[n]] for n in sizes}
    for n in sizes[1:]:
        ratios = [a / b for a, b in zip(peak[n], peak[base])]
        med = statistics.median(ratios) if ratios else None
        figures.append(common.figure(
            "4", f"driver peak RSS at N={n:,} / at N={base:,} (1-D GMM, data from an h5py.Dataset)", ratios,
            baseline=f"rank 0's VmHWM at N={base:,} in the same repetition", target="< 1.10",
            met=None if med is None else med < 1.10, command=commands.get(n, ""),
            why="" if med is None or med < 1.10 else "rank 0 held more than a block of the data",
            peak_mib={m: common.spread([x / 2**20 for x in peak[m]]) for m in (base, n)}))
    for n in sizes:
        totals = [sum(phases(r).values()) for r in recs[n]]
        its_s = [r["median"] for r in recs[n]]
        parts = {p: common.spread([phases(r)[p] for r in recs[n]]) for p in PHASES}
        top = max(parts, key=lambda p: parts[p]["median"] or 0.0) if recs[n] else None
        figures.append(common.figure(
            "5", f"launch to first E-step / one EM iteration (N={n:,}, 1-D GMM, W={workers})",
            [t / i for t, i in zip(totals, its_s)], baseline="median EM iteration of the same job",
            target=None, met=None, command=commands.get(n, ""),
            why=f"dominated by {top}" if top else "", startup_seconds=common.spread(totals),
            iteration_seconds=common.spread(its_s), phases_seconds=parts, dominant=top))
    return {"figures": figures, "raw": {n: [{"startup": r["startup"], "launched_at": r["launched_at"],
                                              "median": r["median"]} for r in recs[n]] for n in sizes}}


def main(argv=None) -> int:
    return common.script_main(measure, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
