"""What the driver talks to, built in one place: its workers' links, the spawner of
replacements, its host name, its doorbell and how its one wait loop idles.

The handle wires the driver to MPI (``over_mpi``). ``mixle_mpi.sim`` wires the very same
driver, rounds, joins and reconfiguration to simulated links and a simulated clock, so the
code that runs a job is the code the simulation checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mixle_mpi.core.settings import Settings
from mixle_mpi.runtime import doorbell
from mixle_mpi.runtime.spawner import Spawner
from mixle_mpi.runtime.transport import Link


@dataclass
class Wiring:
    links: dict[int, Any]  # worker -> its Link (or a simulated one)
    spawner: Any  # starts replacements: spawner.Spawner, or a simulated one
    host: str  # the driver's host name
    bell: Any = None  # the driver's doorbell, or None
    idle: Callable[[], None] | None = (
        None  # the mailroom's pause between polls (None: sleep, transport.Backoff)
    )


def over_mpi(
    group_comm,
    group_beats,
    ranks: dict[int, int],
    settings: Settings,
    spawn_command: list[str] | None,
    fast_spawn_command: list[str] | None,
    spawn_unavailable: str | None,
) -> Wiring:
    """The driver's wiring in a job: a Link per worker over the group communicator and its
    heartbeat twin, MPI Spawn for replacements, this host's name and doorbell."""
    from mpi4py import MPI

    return Wiring(
        links={w: Link(group_comm, group_beats, r) for w, r in ranks.items()},
        spawner=Spawner(settings, spawn_command, fast_spawn_command, spawn_unavailable),
        host=MPI.Get_processor_name(),
        bell=doorbell.own() if settings.doorbells else None,
    )
