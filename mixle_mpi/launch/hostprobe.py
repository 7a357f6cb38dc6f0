"""Does a host still run processes? Launch ``true`` there, one rank, through the job's own
launcher and flags, with a deadline: the same path the job's next launch would take (ssh or
its stand-in, the runtime's daemon, srun in an allocation). Every host is probed at once.

mpiexec starts every rank in the folder it was started from; a host without that folder
(its own /tmp, a disk of its own) fails the launch in ways that look like a lost host
(Hydra's proxy cannot change into it; Open MPI 5's daemon there dies and the job runs
without that host's ranks). So a probe also looks for the launch's folder: one that did
not see it there runs again from ``/`` (a job's relative paths may not work from there,
so only then), and a host that answers without the folder is told apart from a lost one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from typing import NamedTuple

from mixle_mpi.launch import hostlist

PROBE_TIMEOUT = 20.0  # seconds a probe may take before its host counts as lost
# The first PRRTE (Open MPI's runtime) major version that may run through a lost daemon:
# tolerance was merged after 3.0.x (openpmix/prrte#2443, 2026), in no release tested here.
PRRTE_TOLERANT_MAJOR = 4
HERE, NO_FOLDER = (
    "mixle-mpi probe: folder here",
    "mixle-mpi probe: no such folder",
)  # what a probe prints


class Answer(NamedTuple):
    answered: bool
    how: str
    has_folder: bool = True  # no probe said the launch's folder is missing there


def probe_command(
    mpiexec: str, flavor: str, extra_one: list[str], folder: str | None = None
) -> list[str]:
    """The command that runs ``true`` on the one host ``extra_one`` names, or with ``folder``
    one that says whether that folder is there (pure)."""
    run = (
        ["sh", "-c", f'test -d "$0" && echo "{HERE}" || echo "{NO_FOLDER}"', folder]
        if folder
        else ["true"]
    )
    if flavor == "srun":
        return [mpiexec, *extra_one, "-n", "1", *run]
    flags = (
        ["--allow-run-as-root"]
        if flavor == "openmpi" and hasattr(os, "geteuid") and os.geteuid() == 0
        else []
    )
    return [mpiexec, *flags, *extra_one, "-n", "1", *run]


def _run_one(
    argv: list[str], env: dict, timeout: float, cwd: str | None = None
) -> tuple[Answer, bytes]:
    """The host's answer, and what the probe printed."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=cwd,
        )
    except OSError as exc:
        return Answer(False, f"could not start {argv[0]}: {exc}"), b""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Answer(False, f"no answer within {timeout:g} s"), b""
    out = out or b""
    if proc.returncode == 0:
        return Answer(
            True, f"answered in {time.monotonic() - t0:.1f} s", NO_FOLDER.encode() not in out
        ), out
    lines = [ln.strip() for ln in (err or b"").decode(errors="replace").splitlines() if ln.strip()]
    return Answer(
        False, f"exit {proc.returncode}" + (f": {lines[0][:200]}" if lines else "")
    ), out  # the first says why


def _probe_one(argv: list[str], env: dict, timeout: float, folder: str | None) -> Answer:
    """From the launch's folder, as the job ran; if nothing ran there (that host may lack the
    folder), once more from ``/``, whose answer counts if the host answers it."""
    first, out = _run_one(argv, env, timeout)
    if not folder or HERE.encode() in out or first.how.startswith("no answer"):
        return first
    second, _ = _run_one(argv, env, timeout, "/")
    return second if second.answered else first


def probe(
    mpiexec: str,
    flavor: str,
    extra: list[str],
    hosts: hostlist.Hosts,
    names: list[str],
    env: dict,
    timeout: float = PROBE_TIMEOUT,
    folder: str | None = None,
) -> dict[str, Answer]:
    """host -> its ``Answer`` for each of ``names``, probed at once, each within ``timeout``
    (twice that for a host without ``folder``, the launch's, looked for there when given)."""
    results: dict[str, Answer] = {}
    if (
        hosts.source == "slurm"
    ):  # what SLURM knows already needs no launch (which would wait for the node)
        results = {
            h: Answer(False, f"SLURM has it {state}")
            for h, state in slurm_states(names, env).items()
            if slurm_says_lost(state)
        }
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_probe_") as hostfiles:

        def one(host: str) -> None:
            argv = probe_command(
                mpiexec, flavor, hostlist.only(extra, hosts, host, flavor, hostfiles), folder
            )
            results[host] = _probe_one(argv, env, timeout, folder)

        threads = [
            threading.Thread(target=one, args=(h,), daemon=True) for h in names if h not in results
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(2 * timeout + 30)
    return {h: results.get(h, Answer(False, "the probe did not end")) for h in names}


def slurm_says_lost(state: str) -> bool:
    """Whether a node in this ``sinfo`` state (``%T``) is lost to the job (pure): down,
    drained or failing, or not responding (the ``*`` SLURM adds before it marks it DOWN)."""
    return state.endswith("*") or any(word in state for word in ("down", "drain", "fail"))


def slurm_states(names: list[str], env: dict) -> dict[str, str]:
    """node -> its state as ``sinfo`` sees it now ({} when sinfo does not answer)."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N %T"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env=env,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(line.split(None, 1) for line in out.splitlines() if len(line.split()) == 2)


def missing_folder(folder: str, answers: dict[str, Answer]) -> str | None:
    """What the job needs when hosts answered without the launch's ``folder``, or None (pure)."""
    without = [h for h, a in answers.items() if a.answered and not a.has_folder]
    if not without:
        return None
    return (
        f"the folder this job was launched from, {folder}, is not on host(s) {', '.join(without)}: mpiexec "
        "starts every rank in it. Launch from a folder every host sees (a shared file system, e.g. your home "
        "or project folder), not from one host's own /tmp or local disk"
    )


def prrte_version(mpiexec: str) -> str | None:
    """The PRRTE version of an Open MPI ``mpiexec`` (``prte_info`` beside it), or None."""
    info = os.path.join(os.path.dirname(os.path.realpath(mpiexec)), "prte_info")
    try:
        out = subprocess.run([info], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        key, _, value = line.strip().partition(":")
        if key.strip() == "PRTE" and value.strip():
            return value.strip()
    return None


def node_loss_text(flavor: str, prrte: str | None) -> str:
    """What a lost host costs under this launch, for the start of the log (pure): the runtime
    decides whether the job outlives it. Where it does, the ranks lost with the host are
    recovered in the job like any dead worker; where it does not, the launcher relaunches."""
    if flavor == "openmpi":
        major = int(prrte.split(".")[0]) if prrte and prrte.split(".")[0].isdigit() else None
        if major is not None and major >= PRRTE_TOLERANT_MAJOR:
            return (
                f"a lost host: Open MPI's runtime (PRRTE {prrte}) may run through a lost daemon; if it does, "
                "its ranks are recovered in the job, else the job is launched again without it"
            )
        return (
            f"a lost host costs a relaunch without it: Open MPI's runtime (PRRTE {prrte or 'version unknown'}) "
            "ends a job that lost a daemon"
        )
    if flavor == "mpich":
        return "a lost host costs a relaunch without it: MPICH's Hydra ends a job that lost a proxy"
    return (
        "a lost node is survived in the job: srun --no-kill keeps the step, and the node's ranks are "
        "recovered like any dead worker (else the job is launched again without it: srun --exclude)"
    )
