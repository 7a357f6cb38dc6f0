"""Rank side of bench/scale_real.py: bench/_job.py with the driver's own costs counted.

    python -m mixle_mpi run -n W+1 -- python bench/_scale_job.py --backend resilient ... --out OUT.json

Every rank runs ``bench/_job.py``'s ``main`` unchanged; before that this wrapper listens to
the package's probes (``mixle_mpi.core.probes``: nothing of the package is patched) so that
rank 0 also records:

- per round (the ``round`` probe): its kind and wall span, this process's CPU
  (``time.process_time``: every thread, i.e. the same clock as utime + stime in
  /proc/<pid>/stat, at ns resolution), the main thread's CPU (``time.thread_time``), the
  heartbeat thread's CPU (its pthread CPU clock) and the number of poll passes (the
  ``driver_poll`` probe) the round made;
- per pass of the heartbeat thread (``heartbeats_heard``): when, and how many beats it
  received from workers (the real count, not the nominal W / heartbeat_period);
- with ``--estep-sleep S`` (taken off the command line like the next one): every worker
  sleeps S seconds at the start of each E-step task (at the ``worker_task`` probe's begin:
  a listener may delay its thread on purpose), a model whose E-step takes S on a core
  of its own (sleeping ranks do not compete for this box's 2 cores; the bits are unchanged);
- with ``--idle-seconds T`` (taken off the command line before _job's parser sees it): before the fit's first round the driver sleeps T seconds with
  every worker set up and beating, sampled at both ends, so the heartbeat rate and the
  heartbeat thread's CPU are also measured over a window of known length without rounds
  (a tiny fit's rounds may all fit inside one heartbeat period).

The lists are added to _job's JSON record under ``"scale"`` (by wrapping its
``write_json``). Workers listen too; of these probes only ``worker_task`` happens there.
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
from mixle_mpi.core import probes  # noqa: E402

STATE: dict = {
    "heartbeat_thread": None,
    "passes": 0,
    "rounds": [],
    "beats": [],
    "monitor_period": None,
    "idle_seconds": 0.0,
    "idle": None,
    "estep_sleep": 0.0,
    "round_start": None,
}


def _monitor_cpu() -> float | None:
    """CPU seconds of the driver's heartbeat thread so far (None before its first pass)."""
    ident = STATE["heartbeat_thread"]
    if ident is None:
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError):
        return None


def _sample() -> list:
    return [
        time.monotonic(),
        time.process_time(),
        time.thread_time(),
        _monitor_cpu(),
        STATE["passes"],
    ]


def _round(ev) -> None:
    """The driver's round: its samples at both ends, the idle window before the first."""
    if ev.phase == "begin":
        if STATE["idle_seconds"] and STATE["idle"] is None:
            i0 = _sample()
            time.sleep(STATE["idle_seconds"])
            STATE["idle"] = {"start": i0, "end": _sample()}
        STATE["round_start"] = _sample()
    else:
        STATE["rounds"].append(
            {"kind": ev.args[1], "start": STATE["round_start"], "end": _sample()}
        )


def _heartbeats(ev) -> None:
    """Heard on the heartbeat thread itself: its id (for its CPU clock) and one pass's beats."""
    monitor, results = ev.args
    STATE["heartbeat_thread"], STATE["monitor_period"] = threading.get_ident(), monitor.period
    got = sum(len(v[1]) for v in results.values() if isinstance(v[1], list))
    STATE["beats"].append((time.monotonic(), got, len(results)))


def hear(ev) -> None:
    if ev.name == "driver_poll":
        STATE["passes"] += 1
    elif ev.name == "round":
        _round(ev)
    elif ev.name == "heartbeats_heard" and ev.phase == "begin":
        _heartbeats(ev)
    elif (
        ev.name == "worker_task"
        and ev.phase == "begin"
        and STATE["estep_sleep"]
        and ev.args[1].kind == "estep"
    ):
        time.sleep(STATE["estep_sleep"])


def _listen() -> None:
    probes.listen(hear)
    write_json = _job.write_json

    def write_with_scale(path, record_):
        record_["scale"] = {
            "rounds": STATE["rounds"],
            "beats": STATE["beats"],
            "idle": STATE["idle"],
            "heartbeat_period": STATE["monitor_period"],
            "driver_pid": os.getpid(),
            "threads_at_end": threading.active_count(),
            "sample_fields": [
                "monotonic",
                "process_cpu",
                "main_thread_cpu",
                "heartbeat_thread_cpu",
                "poll_passes",
            ],
        }
        write_json(path, record_)

    _job.write_json = write_with_scale


def main(argv: list[str]) -> None:
    argv = list(argv)
    for flag, key in (("--idle-seconds", "idle_seconds"), ("--estep-sleep", "estep_sleep")):
        if flag in argv:
            i = argv.index(flag)
            STATE[key] = float(argv[i + 1])
            del argv[i : i + 2]
    _listen()
    _job.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
