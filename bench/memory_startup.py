"""Items 4 and 5: the driver's peak memory and the startup time, against N.

The data come from an HDF5 file written beforehand (in blocks, by this process), and the
job hands the handle an ``h5py.Dataset``, so rank 0 never holds the data: the store is
streamed in and the shards are streamed out to the workers in blocks. Peak RSS of rank 0
is its VmHWM (/proc) at the end of the fit; the baseline is the same figure at the
smallest N of the same run. Startup is the time from starting the launcher to the driver's
first round (the E-step initialization), split into its phases; its baseline is one EM
iteration of the same job. Issue 15's two startup targets are checked against the floor
measured in the same run: launch to the first E-step at N = 1e5 (<= 3 s) beside a bare job
(the same launcher and ranks, numpy and MPI up, one barrier), and a worker's import time
(<= 1.5 s): every module a worker had loaded by its first E-step, imported in a fresh
interpreter with MPI not initialised, beside numpy and mpi4py.MPI alone.

    python bench/memory_startup.py [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

BLOCK = 1_000_000
PHASES = (
    "launch_to_script",
    "imports_mpi_init",
    "store_write",
    "worker_setup",
    "shard_load",
    "other_handle",
)
STARTUP_TARGET_N, STARTUP_TARGET_S, IMPORT_TARGET_S = 100_000, 3.0, 1.5
FLOOR_MODULES = ["numpy", "mpi4py.MPI"]
IMPORT_TRIES = 5
# Times importing a module list (argv[1], JSON) in this fresh interpreter, MPI not initialised.
_IMPORT_TIMER = """import importlib, json, sys, time
import mpi4py
mpi4py.rc.initialize = False
names = json.loads(sys.argv[1])
t0 = time.perf_counter()
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        pass
print(time.perf_counter() - t0)
"""


def write_h5(path: str, n: int, seed: int = 1) -> None:
    """1-D GMM data (K=3) written block by block: this process never holds all of it."""
    import h5py

    from mixle_mpi.fitting import models

    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", shape=(n,), dtype="f8")
        for i, a in enumerate(range(0, n, BLOCK)):
            b = min(a + BLOCK, n)
            ds[a:b] = models.get_model("gmm1d").sample(b - a, seed + i)


def job_command(python: str, h5: str, workers: int, its: int, out: str) -> list[str]:
    return common.launcher(
        python,
        workers + 1,
        [
            python,
            common.JOB,
            "--backend",
            "resilient",
            "--model",
            "gmm1d",
            "--h5",
            h5,
            "--its",
            str(its),
            "--out",
            out,
            "--launched-at",
            "{now}",
        ],
    )


def bare_command(python: str, workers: int, out: str) -> list[str]:
    return common.launcher(
        python,
        workers + 1,
        [
            python,
            common.JOB,
            "--backend",
            "bare",
            "--model",
            "gmm1d",
            "--out",
            out,
            "--launched-at",
            "{now}",
        ],
    )


def importable(modules: list[str]) -> list[str]:
    """A worker's modules, parents before children, without __main__ and the editable
    install's finder (the bench imports the tree from the repository root)."""
    return [
        m
        for m in sorted(modules, key=lambda m: (m.count("."), m))
        if m != "__main__" and not m.startswith("__editable__")
    ]


def import_seconds(python: str, modules: list[str]) -> float | None:
    """Seconds to import ``modules`` in a fresh interpreter (its own start not counted)."""
    rc, out, _ = common.run([python, "-c", _IMPORT_TIMER, json.dumps(modules)], timeout=120)
    try:
        return float(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        common.log(f"import timing failed rc={rc}: {out[-500:]}")
        return None


def phases(rec: dict) -> dict:
    s = rec["startup"]
    handle = s["handle_done"] - s["handle_start"]
    known = s.get("store_write", 0.0) + s.get("worker_setup", 0.0) + s.get("shard_load", 0.0)
    return {
        "launch_to_script": s["script_started_at"]
        - rec["launched_at"],  # mpiexec, interpreter, numpy
        "imports_mpi_init": s["handle_start"]
        - s["script_started_at"],  # mixle import, MPI init, barrier
        "store_write": s.get("store_write", 0.0),
        "worker_setup": s.get("worker_setup", 0.0),
        "shard_load": s.get("shard_load", 0.0),
        "other_handle": handle - known + (s["first_round_started_at"] - s["handle_done"]),
    }


def measure(python: str, quick: bool, workers: int = 2, reps: int | None = None) -> dict:
    sizes = [STARTUP_TARGET_N, 1_000_000] if quick else [STARTUP_TARGET_N, 1_000_000, 10_000_000]
    reps = reps or (1 if quick else 2)
    its = 3
    recs: dict[int, list] = {n: [] for n in sizes}
    commands = {}
    bare: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_mem_") as tmp:
        for n in sizes:
            write_h5(os.path.join(tmp, f"data_{n}.h5"), n)
        for rep in range(reps):
            out = os.path.join(tmp, f"bare_{rep}.json")
            template = bare_command(python, workers, out)
            commands["bare"] = common.show(
                [c.replace("{now}", "$(date +%s.%N)") for c in template], tmp=tmp
            )
            rec = common.run_record(
                [c.replace("{now}", f"{time.time():.6f}") for c in template],
                out,
                f"startup floor rep {rep + 1}",
            )
            if rec is not None:
                bare.append(rec["barrier_done_at"] - rec["launched_at"])
            for n in sizes:  # interleaved over repetitions
                out = os.path.join(tmp, f"r_{n}_{rep}.json")
                template = job_command(python, os.path.join(tmp, f"data_{n}.h5"), workers, its, out)
                commands[n] = (
                    common.show([c.replace("{now}", "$(date +%s.%N)") for c in template], tmp=tmp)
                    + f"  # $TMPDIR/data_{n}.h5 from bench.memory_startup.write_h5(path, {n})"
                )
                cmd = [c.replace("{now}", f"{time.time():.6f}") for c in template]
                rec = common.run_record(cmd, out, f"memory/startup N={n:,} rep {rep + 1}")
                if rec is not None:
                    recs[n].append(rec)
                    common.log(
                        f"memory/startup N={n:,} rep {rep + 1}: driver peak {rec['startup']['vmhwm_end'] / 2**20:.0f} MiB, "
                        f"first round after {rec['startup']['first_round_started_at'] - rec['launched_at']:.1f} s"
                    )
    base = sizes[0]
    figures = []
    peak = {n: [r["startup"]["vmhwm_end"] for r in recs[n]] for n in sizes}
    for n in sizes[1:]:
        ratios = [a / b for a, b in zip(peak[n], peak[base], strict=False)]
        med = statistics.median(ratios) if ratios else None
        figures.append(
            common.figure(
                "4",
                f"driver peak RSS at N={n:,} / at N={base:,} (1-D GMM, data from an h5py.Dataset)",
                ratios,
                baseline=f"rank 0's VmHWM at N={base:,} in the same repetition",
                target="< 1.10",
                met=None if med is None else med < 1.10,
                command=commands.get(n, ""),
                why=""
                if med is None or med < 1.10
                else "rank 0 held more than a block of the data",
                peak_mib={m: common.spread([x / 2**20 for x in peak[m]]) for m in (base, n)},
            )
        )
    for n in sizes:
        totals = [sum(phases(r).values()) for r in recs[n]]
        its_s = [r["median"] for r in recs[n]]
        parts = {p: common.spread([phases(r)[p] for r in recs[n]]) for p in PHASES}
        top = max(parts, key=lambda p: parts[p]["median"] or 0.0) if recs[n] else None
        figures.append(
            common.figure(
                "5",
                f"launch to first E-step / one EM iteration (N={n:,}, 1-D GMM, W={workers})",
                [t / i for t, i in zip(totals, its_s, strict=False)],
                baseline="median EM iteration of the same job",
                target=None,
                met=None,
                command=commands.get(n, ""),
                why=f"dominated by {top}" if top else "",
                startup_seconds=common.spread(totals),
                iteration_seconds=common.spread(its_s),
                phases_seconds=parts,
                dominant=top,
            )
        )
    figures += startup_targets(python, recs[STARTUP_TARGET_N], bare, commands, workers)
    return {
        "figures": figures,
        "raw": {
            n: [
                {
                    "startup": {k: v for k, v in r["startup"].items() if k != "worker_modules"},
                    "launched_at": r["launched_at"],
                    "median": r["median"],
                }
                for r in recs[n]
            ]
            for n in sizes
        },
    }


def startup_targets(python: str, recs: list, bare: list, commands: dict, workers: int) -> list:
    """Issue 15's startup targets, in seconds, each beside its floor from the same run."""
    totals = [sum(phases(r).values()) for r in recs]
    med = statistics.median(totals) if totals else None
    floor = statistics.median(bare) if bare else None
    out = [
        common.figure(
            "5",
            f"launch to first E-step, s (N={STARTUP_TARGET_N:,}, 1-D GMM, W={workers})",
            totals,
            unit="s",
            baseline=f"a bare job in the same run (launcher, numpy, MPI up, one barrier): {common.fmt(floor)} s",
            target=f"<= {STARTUP_TARGET_S:g} s",
            met=None if med is None else med <= STARTUP_TARGET_S,
            command=commands.get(STARTUP_TARGET_N, "") + " ; floor: " + commands.get("bare", ""),
            floor_seconds=common.spread(bare),
            over_floor=None if med is None or not floor else med / floor,
        )
    ]
    modules = next(
        (r["startup"].get("worker_modules") for r in recs if r["startup"].get("worker_modules")),
        None,
    )
    if modules:
        names = importable(modules)
        ours, base = [], []
        for _ in range(IMPORT_TRIES):  # interleaved with the floor
            ours.append(import_seconds(python, names))
            base.append(import_seconds(python, FLOOR_MODULES))
        ours = [x for x in ours if x is not None]
        base = [x for x in base if x is not None]
        med = statistics.median(ours) if ours else None
        floor = statistics.median(base) if base else None
        top = heaviest(python, names)
        out.append(
            common.figure(
                "5",
                f"a worker's import time, s ({len(names)} modules loaded by its first E-step, MPI init not counted)",
                ours,
                unit="s",
                target=f"<= {IMPORT_TARGET_S:g} s",
                met=None if med is None else med <= IMPORT_TARGET_S,
                baseline=f"numpy and mpi4py.MPI alone in a fresh interpreter, interleaved: {common.fmt(floor)} s",
                command=f"{python} -c '<bench.memory_startup._IMPORT_TIMER>' '<the worker's modules, JSON>'",
                floor_seconds=common.spread(base),
                over_floor=None if med is None or not floor else med / floor,
                heaviest=top,
                why="the costliest packages to import (-X importtime, cumulative): "
                + ", ".join(f"{name} {sec:.2f} s" for name, sec in top),
            )
        )
    return out


def heaviest(python: str, names: list[str], top: int = 5) -> list:
    """The top-level packages that cost most to import, from -X importtime (cumulative us)."""
    rc, out, _ = common.run(
        [python, "-X", "importtime", "-c", _IMPORT_TIMER, json.dumps(names)], timeout=120
    )
    costs = {}
    for line in out.splitlines():
        parts = line.split("|")
        outermost = len(parts) == 3 and parts[2].startswith(" ") and not parts[2].startswith("   ")
        if line.startswith("import time:") and outermost and parts[1].strip().isdigit():
            name = parts[2].strip().split(".")[0]
            costs[name] = costs.get(name, 0) + int(parts[1])
    return (
        sorted(((k, v / 1e6) for k, v in costs.items()), key=lambda kv: -kv[1])[:top]
        if rc == 0
        else []
    )


def main(argv=None) -> int:
    return common.script_main(measure, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
