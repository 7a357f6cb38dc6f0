"""Rank side of bench/scale_real.py: bench/_job.py with the driver's own costs counted.

    python -m mixle_mpi run -n W+1 -- python bench/_scale_job.py --backend resilient ... --out OUT.json

Every rank runs ``bench/_job.py``'s ``main`` unchanged; before that this wrapper patches,
in this process only (the package's code is not changed), four driver-side methods so that
rank 0 also records:

- per round (``Driver.run_round``, class level, under _job's own per-instance timer): its
  kind and wall span, this process's CPU (``time.process_time``: every thread, i.e. the
  same clock as utime + stime in /proc/<pid>/stat, at ns resolution), the main thread's
  CPU (``time.thread_time``), the heartbeat thread's CPU (its pthread CPU clock) and the
  number of poll passes (``Mailroom.wait``'s ``step`` calls) the round made;
- per pass of the heartbeat thread (``Monitor._record``): when, and how many beats it
  received from workers (the real count, not the nominal W / heartbeat_period);
- with ``--estep-sleep S`` (taken off the command line like the next one): every worker
  sleeps S seconds at the start of each E-step task, a model whose E-step takes S on a core
  of its own (sleeping ranks do not compete for this box's 2 cores; the bits are unchanged);
- with ``--idle-seconds T`` (taken off the command line before _job's parser sees it): before the fit's first round the driver sleeps T seconds with
  every worker set up and beating, sampled at both ends, so the heartbeat rate and the
  heartbeat thread's CPU are also measured over a window of known length without rounds
  (a tiny fit's rounds may all fit inside one heartbeat period).

The lists are added to _job's JSON record under ``"scale"`` (by wrapping its
``write_json``). Workers run the same patches, which they never call.
"""

from __future__ import annotations

import os
import sys
import threading
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import _job  # noqa: E402
from mixle_mpi.runtime import driver as _driver  # noqa: E402
from mixle_mpi.runtime import mailroom as _mailroom  # noqa: E402
from mixle_mpi.runtime import monitor as _monitor  # noqa: E402
from mixle_mpi.runtime import worker as _worker  # noqa: E402

STATE: dict = {"monitor": None, "passes": 0, "rounds": [], "beats": [], "monitor_period": None,
               "idle_seconds": 0.0, "idle": None, "estep_sleep": 0.0}


def _monitor_cpu() -> float | None:
    """CPU seconds of the driver's heartbeat thread so far (None before it runs / after it ended)."""
    mon = STATE["monitor"]
    ident = getattr(getattr(mon, "_thread", None), "ident", None)
    if ident is None:
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError):
        return None


def _sample() -> list:
    return [time.monotonic(), time.process_time(), time.thread_time(), _monitor_cpu(), STATE["passes"]]


def _patch() -> None:
    run_round = _driver.Driver.run_round
    wait = _mailroom.Mailroom.wait
    record = _monitor.Monitor._record
    start = _monitor.Monitor.start

    def counted_run_round(self, kind, *a, **k):
        if STATE["idle_seconds"] and STATE["idle"] is None:
            i0 = _sample()
            time.sleep(STATE["idle_seconds"])
            STATE["idle"] = {"start": i0, "end": _sample()}
        s0 = _sample()
        try:
            return run_round(self, kind, *a, **k)
        finally:
            STATE["rounds"].append({"kind": kind, "start": s0, "end": _sample()})

    def counted_wait(self, step, *args, **kwargs):
        def counted_step():
            STATE["passes"] += 1
            return step()
        return wait(self, counted_step, *args, **kwargs)

    def counted_record(self, results):
        got = sum(len(v[1]) for v in results.values() if isinstance(v[1], list))
        STATE["beats"].append((time.monotonic(), got, len(results)))
        return record(self, results)

    def remembered_start(self):
        STATE["monitor"], STATE["monitor_period"] = self, self.period
        return start(self)

    task = _worker.Worker.task

    def slow_task(self, t):
        if t.kind == "estep" and STATE["estep_sleep"]:
            time.sleep(STATE["estep_sleep"])
        return task(self, t)

    _worker.Worker.task = slow_task
    _driver.Driver.run_round = counted_run_round
    _mailroom.Mailroom.wait = counted_wait
    _monitor.Monitor._record = counted_record
    _monitor.Monitor.start = remembered_start

    write_json = _job.write_json

    def write_with_scale(path, record_):
        record_["scale"] = {"rounds": STATE["rounds"], "beats": STATE["beats"], "idle": STATE["idle"],
                            "heartbeat_period": STATE["monitor_period"], "driver_pid": os.getpid(),
                            "threads_at_end": threading.active_count(),
                            "sample_fields": ["monotonic", "process_cpu", "main_thread_cpu",
                                              "heartbeat_thread_cpu", "poll_passes"]}
        write_json(path, record_)

    _job.write_json = write_with_scale


def main(argv: list[str]) -> None:
    argv = list(argv)
    for flag, key in (("--idle-seconds", "idle_seconds"), ("--estep-sleep", "estep_sleep")):
        if flag in argv:
            i = argv.index(flag)
            STATE[key] = float(argv[i + 1])
            del argv[i:i + 2]
    _patch()
    _job.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
