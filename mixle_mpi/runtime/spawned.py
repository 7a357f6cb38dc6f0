"""A replacement worker's own entry: join the driver first, import the heavy rest after.

``MPI_Comm_spawn`` blocks the driver until the new process has initialised MPI. Started as
the user's whole script, a replacement first re-runs the script's imports and data loading
(seconds); started here, it initialises MPI at once and imports mixle only when the
driver's ``Setup`` arrives, while the fit goes on (policy/joining.py). The driver uses the
script instead when its pickles name ``__main__`` (classes defined in the script itself).

    python -m mixle_mpi.runtime.spawned [--path DIR]   # DIR: the script's folder, for its imports
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--path" and argv[1] not in sys.path:
        sys.path.insert(0, argv[1])
    from mixle_mpi.runtime import exiting, startup

    MPI = startup.init_mpi()
    exiting.install("worker")
    from mixle_mpi.runtime.worker import serve_spawned

    serve_spawned(MPI.Comm.Get_parent())


if __name__ == "__main__":
    main()
