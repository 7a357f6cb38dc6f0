"""Starting a job so that no rank waits forever, and a dead rank does not stop the others.

Three phases, each bounded by ``startup_timeout`` (``MIXLE_MPI_STARTUP_TIMEOUT``, default
120 s, see docs/user-guide.md "Deadlines"):

1. **MPI initialisation** (:func:`init_mpi`). If a rank dies before it finished ``MPI_Init``,
   the others block inside it with the GIL held, so no Python thread can help: an alarm
   whose default action ends the process bounds it. Rank 0 then leaves a marker for the
   launcher (``MIXLE_MPI_MPI_UP_FILE``): MPI is up, the ranks' own deadlines take over.
2. **The driver prepares** (reads the data, validates). Workers wait for it with
   point-to-point polls, never in a collective, so a driver that fails here can tell them
   to end (:func:`abort_startup`) instead of calling ``MPI_Abort`` (which left ranks of
   Open MPI ULFM jobs at 4+ ranks stuck in ``world.Dup()``). While the driver prepares, a
   beacon thread (started by ``is_driver()``) tells the workers it is alive.
3. **The handshake**. Every worker says :class:`Hello`; the driver waits for them (a rank
   that ULFM reports dead, whose process :class:`RanksGone` saw end on the driver's host,
   or that is silent until the deadline, is left out), sends :class:`Go` with the members,
   and the members build the job's communicators over themselves only
   (``Create_from_group``), under a deadline that a member's death on the same host ends
   at once. A rank left out is then treated as a failed worker: its shards are placed as
   if it lived, then recovered.

A failure that cannot be gone around (the driver's handshake collective fails or overruns)
ends the job with :data:`~mixle_mpi.core.exitcodes.NEVER_STARTED`, which says "nothing was
computed: start it again". ``mixle-mpi run`` retries such a job by itself.
"""

from __future__ import annotations

import math
import os
import pickle
import signal
import socket
import sys
import threading
import time
from typing import Any

from mixle_mpi.core import procs
from mixle_mpi.core.errors import MixleMPIError
from mixle_mpi.core.protocol import PROTOCOL, TAG_START, Abort, Beacon, Go, Hello
from mixle_mpi.launch import contract
from mixle_mpi.launch.contract import startup_timeout
from mixle_mpi.launch.jobchecks import StoppedAtStartCheck

BEACON_PERIOD = 1.0  # seconds between the driver's "still preparing" beacons
MAX_PENDING_BEACONS = 8  # per worker: a dead rank's beacons never complete under MPICH


class StartupFailed(MixleMPIError):
    """The job could not start (a rank died inside the startup collective); nothing was
    computed, so starting it again loses nothing."""


class NumericsDiffer(MixleMPIError):
    """Numerics auto: the ranks' probes differ at startup; nothing was computed, and the
    launcher starts the job again under the common baseline (exit NUMERICS_DIFFER)."""


def mpi_text() -> str:
    """The MPI library this process runs, as a person reads it: ``Open MPI 5.0.11``."""
    from mpi4py import MPI

    vendor, version = MPI.get_vendor()
    return f"{vendor} {'.'.join(map(str, version))}"


# -- phase 1: MPI init -----------------------------------------------------------------------
def init_mpi():
    """``mpi4py.MPI``, initialising MPI under the startup deadline (see the module doc)."""
    if "mpi4py.MPI" not in sys.modules:
        from mixle_mpi.chaos.fault_actor import spawn_fault_check

        spawn_fault_check()  # a test's replacement that dies inside the driver's MPI_Comm_spawn
        contract.mark_init_begun()
    armed = (
        "mpi4py.MPI" not in sys.modules
        and threading.current_thread() is threading.main_thread()
        and hasattr(signal, "SIGALRM")
    )
    if armed:
        previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, math.ceil(startup_timeout())))
    try:
        from mpi4py import MPI
    finally:
        if armed:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    if MPI.COMM_WORLD.Get_rank() == 0 and MPI.Comm.Get_parent() == MPI.COMM_NULL:
        contract.mark_mpi_up()
    return MPI


class RanksGone:
    """Which ranks of the starting job died in this pid space (on this host), from their
    init records (each rank's identity, recorded at its birth) and their processes: the
    handshake then leaves them out (or gives up a collective that waits for them) at once,
    instead of at ``startup_timeout``. MPICH says nothing of a
    rank that died before its Hello or inside ``Create_from_group``; ULFM does, and then
    this only agrees. Without the launcher's record file (a plain mpiexec) it knows
    nothing, and the deadlines decide as before. Reads the file at most every ``every``
    seconds."""

    def __init__(
        self,
        path: str | None = None,
        host: str | None = None,
        gone=None,
        every: float = 0.25,
        clock=time.monotonic,
        state=procs.state,
        fence=None,
    ) -> None:
        self.path = contract.init_begun_path() if path is None else path
        self.host = host or socket.gethostname()
        self.gone, self.every, self.clock, self.state = gone or _ended, every, clock, state
        self.fence = fence or _fence_stopped
        self.stopped = StoppedAtStartCheck(clock=clock)
        self.next_look = 0.0
        self.found: dict[int, str] = {}

    def __call__(self, ranks) -> dict[int, str]:
        """Of world ``ranks``, those whose process ended, or stayed stopped too long (then it
        is SIGKILLed, as the driver fences a stopped worker): rank -> why."""
        if self.path and self.clock() >= self.next_look:
            self.next_look = self.clock() + self.every
            for rank, ident in contract.init_begun_here(self.path, self.host).items():
                pid = ident[0]
                if rank in self.found:
                    continue
                if self.gone(ident):
                    self.found[rank] = (
                        f"its process (pid {pid}) ended on {self.host} while the job started"
                    )
                elif self.stopped.too_long(rank, self.state(pid)) and self.fence(ident):
                    self.found[rank] = (
                        f"its process (pid {pid}) on {self.host} stayed stopped for over "
                        f"{self.stopped.limit:g} s while the job started; fenced"
                    )
        return {r: self.found[r] for r in sorted(ranks) if r in self.found}

    def give_up(self, ranks):
        """For ``run_with_deadline``: why a collective over ``ranks`` can no longer end, or
        None. Names every rank found gone: the first to die made the others give up too."""
        return "; ".join(f"rank {r}: {why}" for r, why in self(ranks).items()) or None


def _ended(ident: procs.Ident) -> bool:
    """The process born as ``ident`` has ended (its pid names nothing, or another process)."""
    return not procs.running(ident)


def _fence_stopped(ident: procs.Ident) -> bool:
    """SIGKILL a starting rank found stopped, if ``ident`` (its identity recorded at its
    birth) still names a stopped process: never one that started since under its pid. True
    once it is gone or killed."""
    return procs.state(ident[0]) == "T" and procs.kill_same(ident) is not False


# -- phase 2: the driver prepares ------------------------------------------------------------
class _BeaconThread:
    """Rank 0's "still preparing" messages to every worker, until the handshake."""

    def __init__(self, world) -> None:
        self.world = world
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="mixle-mpi-beacon")

    def _run(self) -> None:
        from mpi4py import MPI

        pending: dict[int, list] = {r: [] for r in range(1, self.world.Get_size())}
        seq = 0
        while not self.stop_event.is_set():
            for rank, reqs in pending.items():
                try:
                    reqs[:] = [r for r in reqs if not r.Test()]
                    if len(reqs) < MAX_PENDING_BEACONS:
                        reqs.append(self.world.isend(Beacon(seq), dest=rank, tag=TAG_START))
                except MPI.Exception:
                    reqs.clear()  # that rank is dead (ULFM); the handshake will leave it out
            seq += 1
            self.stop_event.wait(BEACON_PERIOD)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5.0)


_beacon: dict[str, Any] = {"thread": None}


def start_beacon(world) -> None:
    """On rank 0, once: tell the workers the driver lives while it prepares."""
    if _beacon["thread"] is None and world.Get_size() > 1:
        _beacon["thread"] = _BeaconThread(world)
        _beacon["thread"].thread.start()


def stop_beacon() -> None:
    """Before the handshake (so no beacon can follow a Go) or an abort."""
    beacon = _beacon["thread"]
    if beacon is not None and beacon.thread.is_alive():
        beacon.stop()


def abort_startup(world, code: int, message: str) -> None:
    """Driver, before the handshake: tell every worker to end with ``code``; bounded."""
    from mixle_mpi.runtime.transport import ABORT_SEND_WAIT, Link, PeerFailed, finish_sends

    stop_beacon()
    links = [Link(world, world, rank) for rank in range(1, world.Get_size())]
    for link in links:
        try:
            link.post(Abort(int(code), message), TAG_START)
        except PeerFailed:
            pass
    finish_sends(links, ABORT_SEND_WAIT)


# -- phase 3: the handshake ------------------------------------------------------------------
STARTUP_POLL = (0.0005, 0.05)  # backoff bounds (s) of the startup waits: they can last minutes


def gather_workers(
    world, timeout: float, log=None, gone: RanksGone | None = None, reports: dict | None = None
) -> tuple[list[int], dict[int, str]]:
    """Driver: wait for every worker's Hello. Returns (members, excluded rank -> why), and
    fills ``reports`` with each member's (host, numerics).

    A rank ULFM reports dead, or whose process ``gone`` saw end on this host, is left out
    at once; a silent one when ``timeout`` passes."""
    from mpi4py import MPI

    from mixle_mpi.runtime.transport import Backoff

    waiting = set(range(1, world.Get_size()))
    excluded: dict[int, str] = {}
    members: list[int] = []
    deadline = time.monotonic() + timeout
    backoff = Backoff(*STARTUP_POLL)
    while waiting:
        progressed = False
        for rank in sorted(waiting):
            try:
                msg = world.improbe(source=rank, tag=TAG_START)
                hello = None if msg is None else msg.recv()
            except MPI.Exception as exc:
                excluded[rank] = (
                    f"MPI reports it failed while starting (error class {exc.Get_error_class()})"
                )
                waiting.discard(rank)
                continue
            except (TypeError, AttributeError, ValueError, pickle.UnpicklingError) as exc:
                excluded[rank] = (
                    f"sent a message this driver cannot read ({type(exc).__name__}: {exc}): it runs "
                    f"another mixle_mpi version (install the same one on every node)"
                )
                waiting.discard(rank)
                continue
            if isinstance(hello, Hello) and hello.protocol != PROTOCOL:
                excluded[rank] = (
                    f"speaks message protocol {hello.protocol}, the driver {PROTOCOL}: it runs another "
                    f"mixle_mpi version (install the same one on every node)"
                )
                waiting.discard(rank)
                continue
            if isinstance(hello, Hello):
                if reports is not None:
                    reports[rank] = (hello.host, hello.numerics)
                members.append(rank)
                waiting.discard(rank)
                progressed = True
        for rank, why in (gone(waiting) if gone and waiting else {}).items():
            excluded[rank] = why
            waiting.discard(rank)
        if waiting and time.monotonic() > deadline:
            for rank in sorted(waiting):
                excluded[rank] = (
                    f"did not report within startup_timeout={timeout:g} s (dead or stuck while starting)"
                )
            break
        if progressed:
            backoff.reset()
        else:
            backoff.sleep()
    return sorted(members), excluded


def send_go(world, members: list[int], heartbeat_period: float, driver_timeout: float) -> None:
    """Driver: announce the members to every worker (a dead one simply never reads it)."""
    from mpi4py import MPI

    stop_beacon()
    go = Go(tuple([0] + list(members)), float(heartbeat_period), float(driver_timeout))
    for rank in range(1, world.Get_size()):
        try:
            world.isend(go, dest=rank, tag=TAG_START)
        except MPI.Exception:
            pass


def build_comms(world, members: tuple, timeout: float, gone: RanksGone | None = None):
    """Collective over ``members`` only: (data communicator, heartbeat communicator).

    Ranks keep their order, so world rank ``members[i]`` is rank ``i`` of both. When every
    rank is a member this is ``world.Dup()``, which srun-launched Open MPI supports and
    ``Create_from_group`` is not. ``gone`` (the startup world only): a member whose process
    ended on this host ends the wait at once; the collective could never finish."""
    from mpi4py import MPI

    from mixle_mpi.core.deadlines import run_with_deadline
    from mixle_mpi.runtime.keptcomm import KeptComm

    def create():
        if isinstance(
            world, KeptComm
        ):  # the survivors of a driver under srun: views, no collective
            return world.subset(members), world.subset(members)
        if len(members) == world.Get_size():  # everyone came: Dup works under every launcher
            return world.Dup(), world.Dup()
        group = world.Get_group().Incl(list(members))  # not under srun's pmix: StartupFailed
        try:
            comm = MPI.Intracomm.Create_from_group(group, stringtag="mixle_mpi.start")
        finally:
            group.Free()
        return comm, comm.Dup()

    try:
        return run_with_deadline(
            create,
            timeout,
            "startup communicator",
            give_up=None if gone is None else (lambda: gone.give_up(members)),
        )
    except (TimeoutError, MPI.Exception) as exc:
        raise StartupFailed(
            f"building the job's communicator over ranks {list(members)} failed ({exc}); a rank probably "
            "died while the job started. Nothing was computed: run the same command again "
            "(mixle-mpi run retries by itself)"
        ) from None


PMIX_DETACH_TIMEOUT = 10.0  # seconds for PMIx_Finalize (a local message to slurmstepd)
_pmix = {"detached": False}


def pmix_detached() -> bool:
    """True once this rank left SLURM's PMIx server (then ``MPI_Abort`` cannot reach the others)."""
    return _pmix["detached"]


def detach_from_slurm_pmix(environ=None) -> str | None:
    """Every rank, once the job's communicators exist, under srun --mpi=pmix with Open MPI:
    leave SLURM's PMIx server (``PMIx_Finalize`` in the libpmix this process loaded), so that
    a rank dying later does not make SLURM cancel the whole step (see
    :func:`mixle_mpi.policy.reconfig_plan.detach_from_pmix`). Returns what was done, or None when
    nothing was needed. MPI point-to-point goes on as before; what needs PMIx (``Spawn``,
    ``Create_from_group``, ``MPI_Finalize``) is never called afterwards: the job continues by
    keeping its communicator, and every rank ends with ``os._exit``.

    Measured with 4 tasks, one SIGKILLed: without this the step is cancelled within a second
    (``mpi/pmix_v4: _errhandler ... status = -61`` then ``STEP ... CANCELLED``); with it the
    survivors answered 40 of 40 messages and ended with exit 0."""
    import ctypes

    from mpi4py import MPI

    from mixle_mpi.core.deadlines import run_with_deadline
    from mixle_mpi.policy.reconfig_plan import detach_from_pmix, srun_plugin

    environ = os.environ if environ is None else environ
    if not detach_from_pmix(MPI.get_vendor()[0], srun_plugin(environ)):
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            libs = sorted({line.split()[-1] for line in fh if "/libpmix.so" in line})
    except OSError as exc:
        return f"could not leave PMIx (cannot read /proc/self/maps: {exc}); a rank death may end the step"
    if not libs:
        return "could not leave PMIx (no libpmix loaded); a rank death may end the step"
    lib = ctypes.CDLL(libs[0])
    lib.PMIx_Finalize.restype = ctypes.c_int
    lib.PMIx_Finalize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    try:
        rc = run_with_deadline(
            lambda: lib.PMIx_Finalize(None, 0), PMIX_DETACH_TIMEOUT, "PMIx_Finalize"
        )
    except TimeoutError as exc:
        return f"could not leave PMIx ({exc}); a rank death may end the step"
    if rc != 0:
        return f"could not leave PMIx (PMIx_Finalize returned {rc}); a rank death may end the step"
    _pmix["detached"] = True
    return "left SLURM's PMIx server after the start, so a rank death does not end the step"


def mpich_shm_names(maps_text: str) -> list[str]:
    """The /dev/shm files of MPICH mapped in ``maps_text`` (a /proc/PID/maps), still named (pure)."""
    return sorted(
        {
            line.split()[-1]
            for line in maps_text.splitlines()
            if "/dev/shm/mpich_" in line and not line.rstrip().endswith("(deleted)")
        }
    )


def release_mpich_shm(maps: str = "/proc/self/maps") -> list[str]:
    """Every rank, once the job's communicators exist, under MPICH: unlink the names of the
    shared-memory segments MPI_Init made (``/dev/shm/mpich_shm_<id>_<node>``, ``mpich_vci_...``).
    The memory stays mapped until each process exits; only the name goes.

    MPICH unlinks them in ``MPI_Finalize``, which a rank here never calls (it ends with
    ``os._exit``), so every job used to leave 1-8 MB in /dev/shm. Worse, under srun
    ``<id>`` is a hash of the SLURM job id: a later job with the same id (a fresh test
    cluster numbers its jobs from 1 again) opened the stale segment and ``MPI_Init`` hung or
    failed with ``**nomem`` (measured). By now every local rank has attached (``build_comms``
    is collective), so nobody needs the names. Returns the names unlinked by this rank."""
    from mpi4py import MPI

    if MPI.get_vendor()[0] != "MPICH":
        return []
    try:
        with open(maps, encoding="utf-8") as fh:
            paths = mpich_shm_names(fh.read())
    except OSError:
        return []
    gone = []
    for path in paths:
        try:
            os.unlink(path)
            gone.append(path)
        except OSError:
            pass  # another local rank unlinked it first
    return gone


def wait_for_go(world, timeout: float) -> Go | Abort | None:
    """Worker: say Hello, then wait for the driver's Go or Abort. None if the driver was
    silent (no beacon, no answer) for ``timeout`` seconds."""
    from mpi4py import MPI

    from mixle_mpi.core import numerics
    from mixle_mpi.runtime.transport import Backoff

    host, pid = MPI.Get_processor_name(), os.getpid()
    me = Hello(world.Get_rank(), host, pid, numerics=numerics.report())
    hello = world.isend(me, dest=0, tag=TAG_START)
    deadline = time.monotonic() + timeout
    backoff = Backoff(*STARTUP_POLL)
    while True:
        msg = world.improbe(source=0, tag=TAG_START)
        if msg is not None:
            obj = msg.recv()
            if isinstance(obj, (Go, Abort)):
                _complete(hello)
                return obj
            deadline = time.monotonic() + timeout  # a beacon: the driver lives
            backoff.reset()
            continue
        if time.monotonic() > deadline:
            return None
        hello.Test()
        backoff.sleep()


def _complete(req, wait: float = 1.0) -> None:
    end = time.monotonic() + wait
    while not req.Test() and time.monotonic() < end:
        time.sleep(0.001)
