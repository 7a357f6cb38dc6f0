"""Bounding a blocking call that has no timeout of its own (an MPI collective, Spawn,
Disconnect, Finalize): it runs in a helper thread and the caller stops waiting at a deadline.
"""

from __future__ import annotations

import threading


def run_with_deadline(fn, timeout: float, what: str):
    """Run a blocking MPI call in a helper thread; raise TimeoutError past the deadline.

    A collective that never returns (a member died inside it on a library without ULFM)
    must become a clear error, not a hung job. The stuck thread is abandoned; the caller
    ends the process.
    """
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True, name=f"mixle-mpi-{what}")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"{what} did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
