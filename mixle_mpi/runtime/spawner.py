"""Getting a replacement process connected with MPI ``Spawn``, or saying why it could not be.

The driver decides that a place gets a replacement (``policy/reconfig.py``) and joins it
(``policy/joining.py``); this only starts the process: which command, on which host, in
which thread and within which deadline. Where Spawn may run beside the fit (Open MPI) it
runs in a helper thread that the driver polls (``finished``); under MPICH it blocks the
caller (its global lock: a stuck Spawn must stay bounded there).
"""

from __future__ import annotations

import time

from mpi4py import MPI

from mixle_mpi.core.deadlines import Background, run_with_deadline
from mixle_mpi.core.errors import RERUN_ADVICE, ReconfigurationTimeout
from mixle_mpi.core.reaper import not_reaped
from mixle_mpi.policy.config import Settings
from mixle_mpi.policy.reconfig import replacement_command, spawn_timeout_is_fatal
from mixle_mpi.runtime.rankwrapper import wrapper_of
from mixle_mpi.runtime.transport import Link

SPAWN_CHECK_TIMEOUT = 5.0  # after a spawn timed out: seconds MPI gets to prove it still answers
FENCE_GONE_WAIT = 5.0      # seconds a respawn waits for a fenced worker's MPICH rank wrapper to be reaped
FENCE_SETTLE = 0.25        # then seconds for Hydra to act on that death before a replacement is forked
# At exit, the most seconds a Spawn under way may still take. A normal one connects in about a
# second; one whose process died as it started never returns under Open MPI (an external
# campaign run: the driver sat out the rest of reconfigure_timeout after the fit, until the
# launcher killed the job); and the launcher kills ranks still running 30 s after the
# driver's verdict (policy/jobwatch.py, FINISH_GRACE).
EXIT_WAIT = 10.0


class SpawnUnavailable(Exception):
    """Spawning cannot work here, or just failed: the place's shards migrate. Its text is why."""


def spawn_on(host: str | None, exe: str, args: list[str]):
    """``Spawn`` one replacement, on ``host`` when one is named (the "host" info key, which
    Open MPI and MPICH read); where the library refuses that host, wherever it maps it."""
    if host:
        info = MPI.Info.Create()
        info.Set("host", host)
        try:
            return MPI.COMM_SELF.Spawn(exe, args=args, maxprocs=1, info=info, root=0)
        except MPI.Exception:
            pass
        finally:
            info.Free()
    return MPI.COMM_SELF.Spawn(exe, args=args, maxprocs=1, root=0)


def check_mpi_answers(what: str) -> None:
    """After a blocking call was abandoned in its thread (a Spawn that timed out): go on
    only if MPI still answers. Under MPICH's global lock a stuck call could otherwise
    freeze every later MPI call of this process, an unbounded wait."""
    try:
        run_with_deadline(MPI.COMM_SELF.Iprobe, SPAWN_CHECK_TIMEOUT, "MPI check")
    except TimeoutError:
        raise ReconfigurationTimeout(
            f"{what}, and MPI no longer answers (the abandoned call holds it); this run cannot go on. "
            f"{RERUN_ADVICE}") from None
    except MPI.Exception:
        pass  # it answered


class Spawner:
    def __init__(self, settings: Settings, command: list[str] | None, fast_command: list[str] | None,
                 unavailable: str | None) -> None:
        self.command, self.fast_command = command, fast_command
        self.unavailable = unavailable  # why Spawn must not be tried here (srun), or None
        self.timeout = settings.reconfigure_timeout
        self.vendor = MPI.get_vendor()[0]
        self.background = not settings.respawn_wait and not spawn_timeout_is_fatal(self.vendor)
        self.running: dict[int, tuple[Background, float]] = {}  # place -> its background Spawn, when it began
        self.fenced_wrappers: dict[int, tuple] = {}             # worker -> its MPICH rank wrapper, when fenced

    def fenced(self, worker: int, pid: int) -> None:
        """``worker``'s process (``pid``, on this host) is being killed: remember its MPICH
        rank wrapper, if it has one, so that the next Spawn waits until it is reaped."""
        wrapper = wrapper_of(pid)
        if wrapper is not None:
            self.fenced_wrappers[worker] = wrapper

    def start(self, worker: int, host: str | None, pickled: tuple[bytes, ...]) -> Link | None:
        """Start ``worker``'s replacement on ``host`` (``pickled``: what it will unpickle).
        Returns its link once connected, or None while the Spawn runs in the background
        (``finished`` hands it over). Raises ``SpawnUnavailable`` where it cannot be done."""
        if self.unavailable:  # never tried where it cannot work (srun)
            raise SpawnUnavailable(self.unavailable)
        exe, *args = replacement_command(self.command, self.fast_command, pickled)
        self._wait_fenced_gone()

        def spawn() -> Link:
            inter = spawn_on(host, exe, args)
            pair = inter.Merge(high=False)
            return Link(pair, pair.Dup(), 1, inter=inter)

        if self.background:
            self.running[worker] = (Background(spawn, "spawn"), time.monotonic())
            return None
        try:
            return run_with_deadline(spawn, self.timeout, "spawn")
        except TimeoutError as exc:
            if spawn_timeout_is_fatal(self.vendor):
                raise ReconfigurationTimeout(
                    f"respawning rank {worker} failed: {exc}; under {self.vendor} the abandoned spawn holds MPI, "
                    f"so this run cannot go on. {RERUN_ADVICE}") from None
            check_mpi_answers(str(exc))
            raise SpawnUnavailable(str(exc)) from None
        except (MPI.Exception, NotImplementedError) as exc:
            raise SpawnUnavailable(str(exc)) from None

    def finished(self, now: float) -> list[tuple[int, Link | str]]:
        """The background Spawns that ended: each place with its replacement's link, or with
        why it failed (an error, or no end within ``reconfigure_timeout``)."""
        ended: list[tuple[int, Link | str]] = []
        for w in list(self.running):
            call, since = self.running[w]
            if call.done():
                del self.running[w]
                try:
                    ended.append((w, call.result()))
                except (MPI.Exception, NotImplementedError) as exc:
                    ended.append((w, str(exc)))
            elif now - since > self.timeout:
                del self.running[w]
                why = f"spawn did not finish within {self.timeout:g} s"
                check_mpi_answers(why)
                ended.append((w, why))
        return ended

    def settle(self) -> None:
        """At exit: give each background Spawn the rest of its deadline, at most ``EXIT_WAIT``,
        to end, so that its process can be stopped too (``finished`` then hands it over).
        One still under way after that is abandoned with this process."""
        end = time.monotonic() + EXIT_WAIT
        for call, since in list(self.running.values()):
            call.thread.join(max(0.0, min(since + self.timeout, end) - time.monotonic()))

    def _wait_fenced_gone(self) -> None:
        """Under MPICH, before forking a replacement: let Hydra see the fenced workers die
        first. When a rank's PMI socket closes, hydra_pmi_proxy sends SIGUSR1 to the process
        group of every process it started, a replacement's too if it was just forked; one
        still between its exec and the wrapper's ``trap '' USR1`` dies of it, and a process
        of the proxy's dying of a signal makes the proxy SIGKILL every rank (campaign run 69,
        "Killed (signal 9)"). So wait, bounded, until each fenced worker's wrapper is reaped,
        then a moment for the proxy to act on the closed socket (it can reap first)."""
        if not self.fenced_wrappers:
            return
        deadline = time.monotonic() + FENCE_GONE_WAIT
        for wrapper in self.fenced_wrappers.values():
            while not_reaped(wrapper) and time.monotonic() < deadline:
                time.sleep(0.005)
        self.fenced_wrappers.clear()
        time.sleep(FENCE_SETTLE)
