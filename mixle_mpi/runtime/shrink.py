"""ULFM-style shrinking of the original workers' communicator, and the probe that picks how
the job continues after a failure.

Real ``Comm.Shrink`` exists only under Open MPI started with ``--with-ft ulfm``. mpi4py
exposes ``Shrink`` on MPICH too, but there it blocks forever, so the path is chosen by a
probe, never by ``hasattr``. Elsewhere the shrink is emulated with
``Intracomm.Create_from_group`` over the agreed survivors, which needs no failed member.
Where that fails too (ranks started by ``srun --mpi=pmix``: SLURM's plugin has no PMIx
groups), the communicator is kept (:data:`~mixle_mpi.policy.reconfig_plan.KEEP`).
"""

from __future__ import annotations

import os
import threading

from mpi4py import MPI

from mixle_mpi.policy.reconfig_plan import (
    EMULATED,
    ULFM,
    choose_method,
    detach_from_pmix,
    requested_method,
    srun_plugin,
    without_ulfm,
)


def ulfm_enabled_by_launcher(environ=None) -> bool:
    """Open MPI exports this when mpiexec was given ``--with-ft ulfm``."""
    environ = os.environ if environ is None else environ
    return environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() in ("1", "true", "yes")


def recovery_enabled_by_launcher(environ=None) -> bool:
    """Open MPI 4's mpiexec exports this when given ``--enable-recovery``."""
    environ = os.environ if environ is None else environ
    return environ.get("OMPI_MCA_orte_enable_recovery", "").strip().lower() in ("1", "true", "yes")


def probe_shrink_method(timeout: float = 5.0) -> tuple[str, str]:
    """Return (method, reason): ULFM only when the library is Open MPI, FT is on and a
    one-process ``Shrink`` of COMM_SELF really returns (in a thread, under a deadline)."""
    vendor, version = MPI.get_vendor()
    if vendor != "Open MPI":
        return (
            EMULATED,
            f"{vendor} {'.'.join(map(str, version))} has no working ULFM (mpi4py stubs it)",
        )
    if not ulfm_enabled_by_launcher():
        return EMULATED, without_ulfm(version, recovery_enabled_by_launcher())
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


def probe_group(timeout: float = 5.0) -> tuple[bool, str]:
    """(works, detail): a one-process ``Create_from_group`` over this rank alone, in a thread
    under a deadline. Under srun --mpi=pmix it fails at once with MPI_ERR_UNSUPPORTED_OPERATION."""
    box: dict = {}

    def attempt() -> None:
        group = MPI.COMM_SELF.Get_group()
        try:
            comm = MPI.Intracomm.Create_from_group(group, stringtag="mixle_mpi.probe")
            comm.Free()
            box["ok"] = True
        except (MPI.Exception, NotImplementedError) as exc:
            box["error"] = exc
        finally:
            group.Free()

    t = threading.Thread(target=attempt, daemon=True, name="mixle-mpi-group-probe")
    t.start()
    t.join(timeout)
    if box.get("ok"):
        return True, "Create_from_group works"
    return False, f"Create_from_group fails ({box.get('error', 'timed out')})"


def probe_continuation(environ=None) -> tuple[str, str]:
    """(method, reason): how the job continues after a failure, from probes on this rank
    (the driver) and the launch (see :func:`mixle_mpi.policy.reconfig_plan.choose_method`).

    Under srun --mpi=pmix with Open MPI every rank leaves PMIx after the start (see
    :func:`mixle_mpi.runtime.startup.detach_from_slurm_pmix`), so ``Create_from_group``,
    which needs PMIx groups, is not even tried there."""
    environ = os.environ if environ is None else environ
    requested = requested_method(environ)
    vendor = MPI.get_vendor()[0]
    plugin = srun_plugin(environ)
    ulfm, ulfm_why = probe_shrink_method()
    if plugin is not None:
        ulfm_why = "no ULFM under a direct srun launch"
    if detach_from_pmix(vendor, plugin):
        group, group_why = (
            False,
            "Create_from_group needs PMIx groups, which SLURM's pmix plugin lacks",
        )
    elif ulfm == ULFM and requested == "auto":
        group, group_why = False, "not probed"
    else:
        group, group_why = probe_group()
    method, why = choose_method(requested, ulfm == ULFM, group)
    launch = f"srun --mpi={plugin}" if plugin else "mpiexec"
    detail = ulfm_why if method == ULFM else f"{ulfm_why}; {group_why}"
    return method, f"{why}; launched by {launch}: {detail}"


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
