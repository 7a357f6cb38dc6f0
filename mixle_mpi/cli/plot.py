"""``fit --plot``: log-likelihood per iteration with failures, recoveries, respawns and
checkpoints marked where they happened (matplotlib is an optional extra: ``[plot]``).

Events carry wall times; iterations are placed on the same clock by the driver's timeline,
so an event that happened during iteration i+1 is drawn between i and i+1.
"""

from __future__ import annotations

import bisect
import os

from mixle_mpi.core.atomicfile import replacing
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.storage.events import read_events

MARKS = {  # event -> (label, colour, line style)
    "failure_detected": ("failure", "tab:red", "-"),
    "recovery": ("recovery", "tab:orange", ":"),
    "respawned": ("respawn", "tab:green", "--"),
    "spare_adopted": ("spare adopted", "tab:olive", "--"),
    "blacklisted": ("blacklisted", "black", "-."),
    "checkpoint": ("checkpoint", "tab:blue", (0, (1, 4))),
}


def event_position(t: float, times: list[float], iterations: list[int]) -> float:
    """Fractional iteration at wall time ``t`` given the end time of each iteration (pure)."""
    if not times:
        return 0.0
    j = bisect.bisect_left(times, t)
    if j == 0:
        return iterations[0] - 1 + 0.5
    if j >= len(times):
        return float(iterations[-1])
    t0, t1 = times[j - 1], times[j]
    frac = 0.5 if t1 <= t0 else (t - t0) / (t1 - t0)
    return iterations[j - 1] + frac


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib, which is not installed: pip install 'mixle-mpi[plot]'"
        ) from None
    return plt


def plot_fit(
    path: str, traces: list[list[float]], timeline: list[tuple], events_path: str | None
) -> str:
    plt = require_matplotlib()
    events = read_events(events_path) if events_path and os.path.exists(events_path) else []
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for r, trace in enumerate(traces):
        label = f"restart {r + 1}" if len(traces) > 1 else "log-likelihood"
        ax.plot(range(1, len(trace) + 1), trace, marker="o", markersize=3, label=label)
    times = [t for _, _, t in timeline]
    its = [i for _, i, _ in timeline]
    seen = set()
    if len(traces) == 1:  # with restarts the iteration axis repeats, so events are not placed
        for e in events:
            mark = MARKS.get(e.get("event"))
            if mark is None:
                continue
            label, colour, style = mark
            # a checkpoint belongs to the iteration it saved; other events to when they happened
            x = (
                float(e["iteration"])
                if e.get("event") == "checkpoint"
                else event_position(e["time"], times, its)
            )
            ax.axvline(
                x,
                color=colour,
                linestyle=style,
                linewidth=1.2,
                label=None if label in seen else label,
                alpha=0.8,
            )
            seen.add(label)
    ax.set_xlabel("EM iteration")
    ax.set_ylabel("log-likelihood")
    ax.set_title(
        "mixle_mpi fit"
        + (
            f" ({sum(1 for e in events if e.get('event') == 'failure_detected')} failures survived)"
            if events
            else ""
        )
    )
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    with replacing(path) as fh:  # owner-only, never through a link
        fig.savefig(fh, format="png")
    plt.close(fig)
    return path
