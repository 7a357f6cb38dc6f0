"""Shared pieces of the benchmark suite: statistics, figures, jobs and the host's load.

Every figure in the report is a ratio of two quantities measured in the same run,
interleaved over repetitions, so a busy shared host inflates both sides alike; these
helpers keep that bookkeeping (median, spread, target, the command) in one place.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
JOB = os.path.join(BENCH, "_job.py")
# The sizes of report item 1: the full ones, and the quick ones the paired and smoke runs use.
FULL_N = {"gmm1d": 1_000_000, "diag": 200_000, "hmm": 20_000}
QUICK_N = {"gmm1d": 50_000, "diag": 10_000, "hmm": 2_000}
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- statistics and figures ----------------------------------------------------------------
def spread(xs) -> dict:
    """Median, min, max and quartiles of the non-None values (n = how many)."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None, "q1": None, "q3": None}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "q1": q[0],
        "q3": q[2],
    }


def figure(
    item: str,
    name: str,
    ratios,
    *,
    baseline: str,
    target: str | None,
    met: bool | None,
    command: str,
    why: str = "",
    unit: str = "ratio",
    **extra,
) -> dict:
    """One reported figure: per-rep ratios (each against a baseline from the same run)."""
    return {
        "item": item,
        "name": name,
        "unit": unit,
        "ratio": spread(ratios),
        "values": list(ratios),
        "baseline": baseline,
        "target": target,
        "met": met,
        "why": why,
        "command": command,
        **extra,
    }


def fmt(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


# -- jobs -----------------------------------------------------------------------------------
def job_env(extra: dict | None = None) -> dict:
    """The environment of every benchmark job: this tree first on the path of the launcher
    and of every rank, BLAS pinned to one thread, no inherited fault plan."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    for var in ("MIXLE_MPI_FAULT_PLAN", "MIXLE_MPI_EVENT_LOG"):
        env.pop(var, None)
    env.update(extra or {})
    return env


def launcher(python: str, ranks: int, cmd: list[str], timeout: float = 600.0) -> list[str]:
    """``python -m mixle_mpi run -n ranks -- cmd``: the same mpiexec flags for every job."""
    return [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(ranks),
        "--timeout",
        f"{timeout:g}",
        "--",
        *cmd,
    ]


def run(
    cmd: list[str], env: dict | None = None, timeout: float = 660.0
) -> tuple[int | None, str, float]:
    """Run one command in its own session; (exit code or None on timeout, output, wall s)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env or job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group this call started
        out, _ = proc.communicate()
        rc = None
    return rc, out or "", time.monotonic() - t0


def run_record(cmd: list[str], out: str, what: str, env: dict | None = None) -> dict | None:
    """Run one benchmark job that writes its JSON record to ``out``; the record, or None
    after a log line that says ``what`` failed and how (exit code, the output's tail)."""
    rc, log_text, _ = run(cmd, env)
    if rc != 0 or not os.path.exists(out):
        log(f"{what}: FAILED rc={rc}: {log_text[-1500:]}")
        return None
    with open(out, encoding="utf-8") as fh:
        return json.load(fh)


def write_rows(path: str | None, rows: list) -> None:
    """A script's figures as JSON (with the arguments it ran with), if it was given a path."""
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"argv": sys.argv[1:], "rows": rows}, fh, indent=1)


def show(cmd, env_extra: dict | None = None, tmp: str | None = None) -> str:
    """The exact command, with the environment variables it needs, for the report: paths
    relative to the repository root (jobs run there) and the run's temporary directory as
    ``$TMPDIR``."""
    prefix = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (env_extra or {}).items())
    text = (prefix + " " if prefix else "") + (cmd if isinstance(cmd, str) else shlex.join(cmd))
    if tmp:
        text = text.replace(tmp, "$TMPDIR")
    return text.replace(ROOT + os.sep, "").replace("'$(date +%s.%N)'", "$(date +%s.%N)")


# -- other work on the host ------------------------------------------------------------------
def host_busy_seconds() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / _HZ


def children_cpu_seconds() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wait_for_quiet(
    max_wait: float, threshold: float = 0.3, sample: float = 1.0
) -> tuple[float, float | None]:
    """Wait until the host used < threshold cores over a ``sample``-second window, at most
    max_wait seconds. Returns (seconds waited, cores busy in the last window)."""
    t0 = time.monotonic()
    busy = None
    while max_wait > 0:
        b0 = host_busy_seconds()
        time.sleep(sample)
        b1 = host_busy_seconds()
        if b0 is None or b1 is None:
            return time.monotonic() - t0, None
        busy = (b1 - b0) / sample
        if busy < threshold or time.monotonic() - t0 >= max_wait:
            break
    return time.monotonic() - t0, busy


def script_main(measure, doc: str, argv=None) -> int:
    """``main`` of a single-item benchmark: ``[--quick] [--python P]``, prints its figures."""
    import argparse
    import json

    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.python, args.quick)["figures"], indent=1))
    return 0


def log(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)
    sys.stdout.flush()
