"""A replacement worker's own entry: join the driver first, import the heavy rest after.

``MPI_Comm_spawn`` blocks the driver until the new process has initialised MPI. Started as
the user's whole script, a replacement first re-runs the script's imports and data loading
(seconds); started here, it initialises MPI at once and imports mixle only when the
driver's ``Setup`` arrives, while the fit goes on (policy/join_plan.py). The driver uses the
script instead when its pickles name ``__main__`` (classes defined in the script itself).
Before MPI it writes its birth record (runtime/birth.py), so that a death inside the Spawn
is seen at once.

    python -m mixle_mpi.runtime.replacement_entry [--path DIR] [--birth FILE] [--driver PID,START,SPACE]

DIR: the script's folder. The driver's identity (``procs.identity`` and ``pid_space``) lets a
replacement on the driver's host end at once if the driver dies before it sets it up.
"""

from __future__ import annotations

import sys

from mixle_mpi.runtime import birth


def options(argv: list[str]) -> dict[str, str]:
    """``--path DIR``, ``--birth FILE`` and ``--driver PID,START,SPACE``, each optional, in any
    order; others are ignored."""
    found = {}
    for i, arg in enumerate(argv[:-1]):
        if arg in ("--path", birth.ARG, birth.DRIVER_ARG):
            found[arg] = argv[i + 1]
    return found


def main(argv: list[str] | None = None) -> None:
    found = options(sys.argv[1:] if argv is None else argv)
    if birth.ARG in found:
        birth.write(found[birth.ARG])
    if "--path" in found and found["--path"] not in sys.path:
        sys.path.insert(0, found["--path"])
    from mixle_mpi.runtime import exiting, startup

    MPI = startup.init_mpi()  # first: the driver's Spawn waits for it
    exiting.install("worker")
    from mixle_mpi.core import jitcache

    jitcache.prime()  # before mixle is imported: load the kernels, never compile them here
    from mixle_mpi.runtime.worker import serve_spawned

    serve_spawned(
        MPI.Comm.Get_parent(), found.get(birth.ARG), birth.parse_driver(found.get(birth.DRIVER_ARG))
    )


if __name__ == "__main__":
    main()
