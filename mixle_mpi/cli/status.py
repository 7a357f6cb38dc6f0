"""``mixle-mpi status OUT_DIR``: how a running (or finished) fit is doing, from its files.

A batch job's log may be on another node or buffered; the out_dir is not. The driver
replaces ``progress.json`` after every iteration (atomically: a reader sees the old record
or the new one, never half of one) and appends to ``events.jsonl``; ``summary.json``
appears when the fit ends. This reads those three files and nothing else, so it works
from a login node while the job runs, and never disturbs it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass

from mixle_mpi.core import procs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.logs import clock
from mixle_mpi.fitting.progress import PROGRESS_FILE, hms, summary_stop_text, summary_wall_text
from mixle_mpi.storage.events import describe, read_events

SUMMARY_FILE, EVENTS_FILE = "summary.json", "events.jsonl"
TAIL_BYTES = 1 << 16  # the last events are in the file's last 64 KiB
TAIL_EVENTS = 200  # read this many to tell the fit's state, whatever number is shown


@dataclass
class FitFiles:
    """What an out_dir holds: each file's content (None when absent) and modification time."""

    out_dir: str
    progress: dict | None
    progress_mtime: float | None
    summary: dict | None
    summary_mtime: float | None
    events: list[dict]


def _read_json(path: str) -> tuple[dict | None, float | None]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), os.path.getmtime(path)
    except FileNotFoundError:
        return None, None
    except ValueError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); was it written by another program?"
        ) from None


def tail_events(path: str, n: int) -> list[dict]:
    """The last ``n`` events of a JSON-lines log, reading only its end."""
    return read_events(path, TAIL_BYTES)[-n:] if n > 0 else []


def read_fit_files(out_dir: str) -> FitFiles:
    """Read an out_dir's progress, summary and last events; ConfigError if it holds none."""
    if not os.path.isdir(out_dir):
        raise ConfigError(f"no such folder {out_dir!r}; give the --out-dir of a `mixle-mpi fit`")
    progress, pm = _read_json(os.path.join(out_dir, PROGRESS_FILE))
    summary, sm = _read_json(os.path.join(out_dir, SUMMARY_FILE))
    events = tail_events(os.path.join(out_dir, EVENTS_FILE), TAIL_EVENTS)
    if progress is None and summary is None and not events:
        raise ConfigError(
            f"{out_dir} holds no {PROGRESS_FILE}, {SUMMARY_FILE} or {EVENTS_FILE}: it is not the "
            "out_dir of a `mixle-mpi fit`, or the fit has not reached its first iteration yet"
        )
    return FitFiles(out_dir, progress, pm, summary, sm, events)


def driver_alive(progress: dict, host: str | None = None) -> bool | None:
    """Whether the driver process still exists (by its identity: a pid reused since is not
    it): None when it runs on another host or in another pid space."""
    if progress.get("host") != (host or socket.gethostname()) or not progress.get("pid"):
        return None
    if progress.get("space") and progress["space"] != procs.pid_space():
        return None
    pid = int(progress["pid"])
    if progress.get("start"):
        return procs.running((pid, str(progress["start"])))
    return not procs.gone(pid)


def state(files: FitFiles, alive: bool | None) -> str:
    """One phrase for where the fit is (pure): finished, preempted, running, or ended without
    a summary."""
    if files.summary is not None and (
        files.progress_mtime is None or files.summary_mtime >= files.progress_mtime
    ):
        return "finished"
    since = files.progress.get("updated", 0.0) if files.progress else 0.0
    if any(e.get("event") == "preempted" and e.get("time", 0.0) >= since for e in files.events):
        return "preempted: checkpointed; rerun the same command to resume"
    if alive is False:
        return "not running: the driver is gone without writing summary.json (killed, failed or preempted)"
    if files.progress is None:
        return "starting: no iteration has finished yet"
    return "running"


def _ranks_line(live, failures: dict, blacklisted, recovered, driver_takeovers: int = 0) -> str:
    failed = [f"rank {w} x{n}" for w, n in sorted(failures.items(), key=lambda kv: int(kv[0]))]
    if driver_takeovers:
        failed.append(f"the driver x{driver_takeovers}, a survivor took over")
    return (
        f"ranks: {len(live)} live {list(live)}; {len(failures) + bool(driver_takeovers)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f"; {len(blacklisted)} blacklisted {list(blacklisted)}; shards recomputed {recovered}"
    )


def _progress_lines(p: dict, now: float) -> list[str]:
    dll = "-" if p.get("dll") is None else f"{p['dll']:+.3e}"
    spi = p.get("seconds_per_iteration")
    head = f"restart {p['restart']}, " if p.get("restart") else ""
    lines = [
        f"{head}iteration {p.get('iteration')}/{p.get('max_its')}: ll {p.get('ll'):.10g}, dll {dll}, "
        + (f"{spi:.3f} s/iteration" if spi is not None else "- s/iteration")
        + f", eta <= {hms(p.get('eta_seconds'))} (if it runs to max_its)"
        + f"; updated {now - p.get('updated', now):.0f}s ago"
    ]
    ranks = p.get("ranks") or {}
    if "live" in ranks:
        lines.append(
            _ranks_line(
                ranks["live"],
                ranks.get("failures", {}),
                ranks.get("blacklisted", []),
                p.get("recovered_shards", 0),
                ranks.get("driver_takeovers", 0),
            )
        )
    if p.get("slow"):
        lines.append(
            "slow workers (times the median's seconds per shard; their shards are copied or moved): "
            + ", ".join(
                f"rank {w} x{x:g}" for w, x in sorted(p["slow"].items(), key=lambda kv: int(kv[0]))
            )
        )
    return lines


def _summary_lines(s: dict) -> list[str]:
    ll = s.get("final_ll")
    failed = {w: n for w, n in (s.get("failures") or {}).items() if n}
    return [
        f"{s.get('iterations')} iterations ({summary_stop_text(s)}), final ll "
        f"{'-' if ll is None else f'{ll:.10g}'}, {summary_wall_text(s)}; model in model.json",
        f"ranks: {s.get('workers')} workers; failures survived {s.get('failures_survived')}"
        + (
            " ("
            + ", ".join(
                [
                    *(f"rank {w} x{n}" for w, n in failed.items()),
                    *([f"the driver x{t}"] if (t := s.get("driver_takeovers")) else []),
                ]
            )
            + ")"
            if failed or s.get("driver_takeovers")
            else ""
        )
        + f"; blacklisted {s.get('blacklisted')}; shards recomputed {s.get('recovered_shards')}",
    ]


def event_line(rec: dict) -> str:
    """An event with a wall-clock time a person reads (``12:03:07``), not an epoch float."""
    t = rec.get("time")
    return f"{clock(t) if isinstance(t, (int, float)) else '--:--:--'} {describe(rec)}"


def report(files: FitFiles, alive: bool | None, now: float, n_events: int = 5) -> list[str]:
    """The lines ``mixle-mpi status`` prints (pure: the clock and the driver's liveness are
    passed in)."""
    p, s = files.progress, files.summary
    where = f", driver pid {p.get('pid')} on {p.get('host')}" if p else ""
    what = p or s or {}
    spec = what.get("model") or what.get("model_spec")
    phase = state(files, alive)
    lines = [f"{files.out_dir}: {phase}{where}"]
    if spec:
        lines.append(f"fit: {spec} on {what.get('data')}")
    places = next((e for e in reversed(files.events) if e.get("event") == "ranks"), None)
    if places is not None:
        lines.append(describe(places))
    relaunched = [e for e in files.events if e.get("event") == "relaunched"]
    if relaunched:
        lost = [h for e in relaunched for h in e.get("lost_hosts") or []]
        lines.append(
            f"hosts lost: {', '.join(lost)}; launched again without them {len(relaunched)} time(s), now on "
            f"{relaunched[-1].get('ranks')} ranks"
        )
    if phase == "finished":
        lines += _summary_lines(s)
    elif p is not None:
        lines += _progress_lines(p, now)
    shown = files.events[-n_events:] if n_events > 0 else []
    if shown:
        lines.append(f"last {len(shown)} events:")
        lines += ["  " + event_line(e) for e in shown]
    return lines


def status_lines(out_dir: str, n_events: int = 5) -> list[str]:
    """``report`` for an out_dir as it is now."""
    files = read_fit_files(out_dir)
    alive = driver_alive(files.progress) if files.progress else None
    return report(files, alive, time.time(), n_events)


def cmd_status(args) -> int:
    sys.stdout.write("\n".join(status_lines(args.out_dir, args.events)) + "\n")
    return 0


def add_subcommand(subparsers) -> None:
    """Register ``mixle-mpi status``."""
    p = subparsers.add_parser(
        "status",
        help="show how a running or finished fit is doing (from its out_dir)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out_dir", help="the fit's --out-dir")
    p.add_argument("--events", type=int, default=5, help="how many of the last events to show")
    p.set_defaults(func=cmd_status)
