"""The driver's peak memory for a CSV input against the same data from HDF5.

What the driver does before the fit is measured: read ``--data`` (``datainput.load``) and
write the shard store (``ShardStore.create``). Each measurement runs in a fresh process
that first imports the same modules, so the figures differ only by the data path. Peak is
the process's VmHWM; "above baseline" subtracts its VmRSS after the imports. Sources are
interleaved over repetitions and the ratio is CSV / HDF5 within one run. ``--before REV``
adds the CSV reader of an older revision (loaded from ``git show REV:...``) for contrast.

    python bench/csv_memory.py [--rows 1000000] [--reps 3] [--before REV] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, ROOT)


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _datainput(module_file: str | None):
    """This tree's reader, or an older one from a file (it imports the rest from this tree)."""
    if module_file is None:
        from mixle_mpi.cli import datainput

        return datainput
    import importlib.util

    spec = importlib.util.spec_from_file_location("datainput_before", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def child(source: str, module_file: str | None, workdir: str) -> dict:
    """One measurement: load ``source`` and write it to a shard store; peak and baseline RSS."""
    import h5py  # noqa: F401 - the same imports on every path
    import numpy  # noqa: F401

    from mixle_mpi.storage.store import ShardStore

    datainput = _datainput(module_file)
    baseline = _status_kb("VmRSS")
    t0 = time.perf_counter()
    loaded = datainput.load(datainput.parse_source(source), "matrix")
    with ShardStore.create(os.path.join(workdir, "shards.h5"), loaded.data, 4):
        pass
    loaded.close()
    return {
        "peak_kb": _status_kb("VmHWM"),
        "baseline_kb": baseline,
        "seconds": time.perf_counter() - t0,
    }


def write_inputs(directory: str, rows: int, cols: int, seed: int = 1) -> tuple[str, str]:
    """The same rows as CSV (with a header, 6 decimals) and as an HDF5 dataset, in blocks."""
    import h5py
    import numpy as np

    csv_path, h5_path = os.path.join(directory, "data.csv"), os.path.join(directory, "data.h5")
    rng = np.random.RandomState(seed)
    with open(csv_path, "w", encoding="ascii") as fh, h5py.File(h5_path, "w") as f:
        fh.write(",".join(f"x{j}" for j in range(cols)) + "\n")
        ds = f.create_dataset("X", shape=(rows, cols), dtype="f8")
        for a in range(0, rows, 100_000):
            block = np.round(rng.normal(size=(min(100_000, rows - a), cols)), 6)
            np.savetxt(fh, block, delimiter=",", fmt="%.6f")
            ds[a : a + len(block)] = block
    return csv_path, f"{h5_path}:/X"


def measure(source: str, module_file: str | None, tmp: str) -> dict:
    with tempfile.TemporaryDirectory(dir=tmp) as work:
        out = subprocess.run(
            [sys.executable, __file__, "--child", source, "--workdir", work]
            + (["--module-file", module_file] if module_file else []),
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def before_module(rev: str, tmp: str) -> str:
    path = os.path.join(tmp, f"datainput_{rev}.py")
    text = subprocess.run(
        ["git", "show", f"{rev}:mixle_mpi/cli/datainput.py"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def table(results: dict[str, list[dict]], rows: int, csv_mb: float, command: str) -> str:
    def med(name, key):
        return statistics.median(r[key] for r in results[name]) / 1024

    base = "HDF5"
    h5_peak, h5_above = med(base, "peak_kb"), med(base, "peak_kb") - med(base, "baseline_kb")
    lines = [
        f"# Driver memory: CSV against HDF5 ({rows:,} rows, CSV file {csv_mb:.1f} MB)",
        "",
        "Reading `--data` and writing the shard store, each in a fresh process with the same imports; "
        f"medians of {len(results[base])} interleaved repetitions.",
        "",
        "| input | peak RSS MB | above baseline MB | peak / HDF5 peak | above baseline / HDF5's | seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in results:
        peak, above = med(name, "peak_kb"), med(name, "peak_kb") - med(name, "baseline_kb")
        secs = statistics.median(r["seconds"] for r in results[name])
        lines.append(
            f"| {name} | {peak:.1f} | {above:.1f} | {peak / h5_peak:.2f} | {above / h5_above:.2f} | {secs:.2f} |"
        )
    from mixle_mpi.cli.datainput import BLOCK_ROWS, SPILL_BYTES

    lines += [
        "",
        f"A numeric CSV is parsed {BLOCK_ROWS} records at a time; when its numbers take more than "
        f"{SPILL_BYTES >> 20} MiB they go to a temporary HDF5 file (unlinked at once) that the shard store "
        "is streamed from, as from an HDF5 input; a smaller one stays in memory as one float array. "
        '"Above baseline" is the peak minus the process\'s RSS after its imports: what the data path '
        "itself costs.",
        "",
        f"Command: `{command}`",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--before",
        default=None,
        metavar="REV",
        help="also measure the CSV reader of this git revision",
    )
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--module-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.module_file, args.workdir)))
        return 0
    with tempfile.TemporaryDirectory(prefix="csv_memory_") as tmp:
        csv_path, h5_source = write_inputs(tmp, args.rows, args.cols)
        sources = {"HDF5": (h5_source, None), "CSV": (csv_path, None)}
        if args.before:
            sources[f"CSV, reader of {args.before}"] = (csv_path, before_module(args.before, tmp))
        results: dict[str, list[dict]] = {name: [] for name in sources}
        for _ in range(args.reps):
            for name, (source, module_file) in sources.items():
                results[name].append(measure(source, module_file, tmp))
        command = "python bench/csv_memory.py " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        text = table(results, args.rows, os.path.getsize(csv_path) / 1e6, command.strip())
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
