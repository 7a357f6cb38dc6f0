"""Getting a replacement process connected with MPI ``Spawn``, or saying why it could not be.

The driver decides that a place gets a replacement (``policy/reconfig_plan.py``) and joins it
(``policy/join_plan.py``); this only starts the process: which command, on which host, in
which thread and within which deadline. Where Spawn may run beside the fit (Open MPI) it
runs in a helper thread that the driver polls (``finished``); under MPICH it blocks the
caller (its global lock: a stuck Spawn must stay bounded there).
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from typing import NamedTuple

from mpi4py import MPI

from mixle_mpi.core import numerics, procs, rundir
from mixle_mpi.core.deadlines import Background, run_with_deadline
from mixle_mpi.core.errors import RERUN_ADVICE, ReconfigurationTimeout
from mixle_mpi.core.settings import Settings
from mixle_mpi.launch.rankwrapper import wrapper_of
from mixle_mpi.policy.reconfig_plan import replacement_command, spawn_timeout_is_fatal
from mixle_mpi.runtime import birth
from mixle_mpi.runtime.transport import Link

SPAWN_CHECK_TIMEOUT = 5.0  # after a spawn timed out: seconds MPI gets to prove it still answers
FENCE_GONE_WAIT = (
    5.0  # seconds a respawn waits for a fenced worker's MPICH rank wrapper to be reaped
)
FENCE_SETTLE = 0.25  # then seconds for Hydra to act on that death before a replacement is forked
# At exit, the most seconds a Spawn under way may still take. A normal one connects in about a
# second; one whose process died as it started never returns under Open MPI (an external
# campaign run: the driver sat out the rest of reconfigure_timeout after the fit, until the
# launcher killed the job); and the launcher kills ranks still running 30 s after the
# driver's verdict (launch/jobchecks.py, FINISH_GRACE).
EXIT_WAIT = 10.0


class Underway(NamedTuple):
    """A background Spawn: the call, when it began, and the watch on its process
    (runtime/birth.py; None when it runs the user's script, which writes no birth record)."""

    call: Background
    since: float
    watch: birth.SpawnDeathCheck | None = None


class SpawnFailed(NamedTuple):
    """Why a background Spawn ended without a replacement. ``died``: its process died before
    joining (runtime/birth.py; ``pid`` if it was seen); spawning itself still works then, so
    the place may get another replacement. Otherwise (an error, an overrun) spawning is not
    tried again."""

    why: str
    died: bool = False
    pid: int | None = None


class SpawnUnavailable(Exception):
    """Spawning cannot work here, or just failed: the place's shards migrate. Its text is why."""


def with_bits_env(exe: str, args: list[str], environ=None) -> tuple[str, list[str]]:
    """``exe args`` run through ``env`` with the variables the replacement's bits depend on,
    as this process has them (``numerics.BITS_VARS``): a Spawn on another host starts from
    that host's daemon's environment (Open MPI), where they are missing, and a replacement
    without the job's baseline or BLAS settings computes other bits (and is refused)."""
    environ = os.environ if environ is None else environ
    sets = [f"{var}={value}" for var, value in numerics.bits_env(environ).items()]
    return ("/usr/bin/env", [*sets, exe, *args]) if sets else (exe, list(args))


def spawn_on(host: str | None, exe: str, args: list[str]):
    """``Spawn`` one replacement, on ``host`` when one is named (the "host" info key, which
    Open MPI and MPICH read); where the library refuses that host, wherever it maps it."""
    exe, args = with_bits_env(exe, args)
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
            f"{RERUN_ADVICE}",
            mpi_held=True,
        ) from None
    except MPI.Exception:
        pass  # it answered


def _why_dead(watch: birth.SpawnDeathCheck) -> str | None:
    died = watch.dead()
    return died[1] if died else None


class Spawner:
    def __init__(
        self,
        settings: Settings,
        command: list[str] | None,
        fast_command: list[str] | None,
        unavailable: str | None,
    ) -> None:
        self.command, self.fast_command = command, fast_command
        self.unavailable = unavailable  # why Spawn must not be tried here (srun), or None
        self.timeout = settings.reconfigure_timeout
        self.vendor = MPI.get_vendor()[0]
        self.background = not settings.respawn_wait and not spawn_timeout_is_fatal(self.vendor)
        self.running: dict[int, Underway] = {}  # place -> its background Spawn
        self.fenced_wrappers: dict[int, tuple] = {}  # worker -> its MPICH rank wrapper, when fenced
        self._births = itertools.count()
        self.born: dict[
            int, tuple[int, str]
        ] = {}  # place -> its connected replacement's (pid, start), from its birth record (this host)

    def fenced(self, worker: int, pid: int) -> None:
        """``worker``'s process (``pid``, on this host) is being killed: remember its MPICH
        rank wrapper, if it has one, so that the next Spawn waits until it is reaped."""
        wrapper = wrapper_of(pid)
        if wrapper is not None:
            self.fenced_wrappers[worker] = wrapper

    def start(
        self, worker: int, host: str | None, pickled: tuple[bytes, ...], here: bool = False
    ) -> Link | None:
        """Start ``worker``'s replacement on ``host`` (``pickled``: what it will unpickle;
        ``here``: it surely starts on this host, ``placement.replacement_here``).
        Returns its link once connected, or None while the Spawn runs in the background
        (``finished`` hands it over). Raises ``SpawnUnavailable`` where it cannot be done."""
        if self.unavailable:  # never tried where it cannot work (srun)
            raise SpawnUnavailable(self.unavailable)
        command = replacement_command(self.command, self.fast_command, pickled)
        record = self._birth_path(worker) if command is self.fast_command else None
        exe, *args = command + (
            [birth.ARG, record, birth.DRIVER_ARG, birth.driver_arg()] if record else []
        )
        self._wait_fenced_gone()
        watch = (
            birth.SpawnDeathCheck(record, here) if record else None
        )  # before the Spawn: it knows the older processes

        def spawn() -> Link:
            inter = spawn_on(host, exe, args)
            pair = inter.Merge(high=False)
            return Link(pair, pair.Dup(), 1, inter=inter)

        if self.background:
            self.running[worker] = Underway(Background(spawn, "spawn"), time.monotonic(), watch)
            return None
        try:
            link = run_with_deadline(
                spawn, self.timeout, "spawn", (lambda: _why_dead(watch)) if watch else None
            )
            self._note_born(worker, watch)
            return link
        except TimeoutError as exc:  # or GaveUp: its process died
            if spawn_timeout_is_fatal(self.vendor):
                raise ReconfigurationTimeout(
                    f"respawning rank {worker} failed: {exc}; under {self.vendor} the abandoned spawn holds MPI, "
                    f"so this run cannot go on. {RERUN_ADVICE}",
                    mpi_held=True,
                ) from None
            check_mpi_answers(str(exc))
            raise SpawnUnavailable(str(exc)) from None
        except (MPI.Exception, NotImplementedError) as exc:
            raise SpawnUnavailable(str(exc)) from None
        finally:
            if record:
                birth.remove(record)

    def finished(self, now: float) -> list[tuple[int, Link | SpawnFailed]]:
        """The background Spawns that ended: each place with its replacement's link, or with
        why it failed: an error, its process died (runtime/birth.py), or no end within
        ``reconfigure_timeout``."""
        ended: list[tuple[int, Link | SpawnFailed]] = []
        for w in list(self.running):
            call, since, watch = self.running[w]
            done = call.done()
            died = None if done or not watch else watch.dead()
            if done:
                try:
                    ended.append((w, call.result()))
                    self._note_born(w, watch)
                except (MPI.Exception, NotImplementedError) as exc:
                    ended.append((w, SpawnFailed(str(exc))))
            elif died or now - since > self.timeout:
                why = (
                    f"spawn given up: {died[1]}"
                    if died
                    else f"spawn did not finish within {self.timeout:g} s"
                )
                check_mpi_answers(why)  # the abandoned call must not hold MPI
                ended.append((w, SpawnFailed(why, True, died[0]) if died else SpawnFailed(why)))
            else:
                continue
            del self.running[w]
            if watch:
                birth.remove(watch.path)
        return ended

    def settle(self) -> None:
        """At exit: give each background Spawn the rest of its deadline, at most ``EXIT_WAIT``,
        to end, so that its process can be stopped too (``finished`` then hands it over).
        One still under way after that is abandoned with this process."""
        end = time.monotonic() + EXIT_WAIT
        for call, since, watch in list(self.running.values()):
            if not (watch and watch.dead()):  # one whose process died never ends
                call.thread.join(max(0.0, min(since + self.timeout, end) - time.monotonic()))
        for underway in self.running.values():
            if underway.watch and not underway.call.done():
                birth.remove(
                    underway.watch.path
                )  # abandoned with this process: nobody reads it now

    def _note_born(self, worker: int, watch: birth.SpawnDeathCheck | None) -> None:
        """A Spawn returned: its process's pid, if its record is of this host (``born``)."""
        ident = birth.identity_here(watch.path) if watch else None
        if ident is not None:
            self.born[worker] = ident
        else:
            self.born.pop(worker, None)

    def _birth_path(self, worker: int) -> str:
        """Where this Spawn's replacement writes its birth record: a name of its own, random,
        in the job's private run folder (``core/rundir.py``). The driver removes it when the
        Spawn ends (having read the pid), the replacement at its Setup (the driver cannot, on
        another host)."""
        return os.path.join(
            rundir.own(), f"birth_{worker}_{next(self._births)}_{secrets.token_hex(8)}"
        )

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
            while procs.not_reaped(wrapper) and time.monotonic() < deadline:
                time.sleep(0.005)
        self.fenced_wrappers.clear()
        time.sleep(FENCE_SETTLE)
