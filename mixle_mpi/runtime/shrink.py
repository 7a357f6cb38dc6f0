"""ULFM-style shrinking of the original workers' communicator.

Real ``Comm.Shrink`` exists only under Open MPI started with ``--with-ft ulfm``. mpi4py
exposes ``Shrink`` on MPICH too, but there it blocks forever, so the path is chosen by a
probe, never by ``hasattr``. Elsewhere the shrink is emulated with
``Intracomm.Create_from_group`` over the agreed survivors, which needs no failed member.
"""

from __future__ import annotations

import os
import threading

from mpi4py import MPI

from mixle_mpi.policy.reconfig import EMULATED, ULFM




def ulfm_enabled_by_launcher(environ=None) -> bool:
    """Open MPI exports this when mpiexec was given ``--with-ft ulfm``."""
    environ = os.environ if environ is None else environ
    return environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() in ("1", "true", "yes")


def probe_shrink_method(timeout: float = 5.0) -> tuple[str, str]:
    """Return (method, reason): ULFM only when the library is Open MPI, FT is on and a
    one-process ``Shrink`` of COMM_SELF really returns (in a thread, under a deadline)."""
    vendor, version = MPI.get_vendor()
    if vendor != "Open MPI":
        return EMULATED, f"{vendor} {'.'.join(map(str, version))} has no working ULFM (mpi4py stubs it)"
    if not ulfm_enabled_by_launcher():
        return EMULATED, "Open MPI without --with-ft ulfm: a rank death ends the job; use `mixle-mpi run`"
    box: dict = {}

    def attempt() -> None:
        try:
            comm = MPI.COMM_SELF.Shrink()
            comm.Free()
            box["ok"] = True
        except (MPI.Exception, NotImplementedError) as exc:
            box["error"] = exc

    t = threading.Thread(target=attempt, daemon=True, name="mixle-mpi-ulfm-probe")
    t.start()
    t.join(timeout)
    if box.get("ok"):
        return ULFM, f"Open MPI {'.'.join(map(str, version))} with ULFM: Comm.Shrink works"
    return EMULATED, f"Comm.Shrink probe failed ({box.get('error', 'timed out')})"


def shrink(comm, survivor_ranks: list[int], method: str, epoch: int):
    """Collective over the survivors: a new communicator holding exactly ``survivor_ranks``
    (ranks of ``comm``, ascending; ranks keep their relative order)."""
    if method == ULFM:
        return comm.Shrink()
    group = comm.Get_group().Incl(sorted(survivor_ranks))
    try:
        return MPI.Intracomm.Create_from_group(group, stringtag=f"mixle_mpi.shrink.{epoch}")
    finally:
        group.Free()
