"""Does a host still run processes? Launch ``true`` there, one rank, through the job's own
launcher and flags, with a deadline: the same path the job's next launch would take (ssh or
its stand-in, the runtime's daemon, srun in an allocation). Every host is probed at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time

from mixle_mpi.launch import hostlist

PROBE_TIMEOUT = 20.0  # seconds a probe may take before its host counts as lost
# The first PRRTE (Open MPI's runtime) major version that may run through a lost daemon:
# tolerance was merged after 3.0.x (openpmix/prrte#2443, 2026), in no release tested here.
PRRTE_TOLERANT_MAJOR = 4


def probe_command(mpiexec: str, flavor: str, extra_one: list[str]) -> list[str]:
    """The command that runs ``true`` on the one host ``extra_one`` names (pure)."""
    if flavor == "srun":
        return [mpiexec, *extra_one, "-n", "1", "true"]
    flags = ["--allow-run-as-root"] if flavor == "openmpi" and hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return [mpiexec, *flags, *extra_one, "-n", "1", "true"]


def _run_one(argv: list[str], env: dict, timeout: float) -> tuple[bool, str]:
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return False, f"could not start {argv[0]}: {exc}"
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return False, f"no answer within {timeout:g} s"
    if proc.returncode == 0:
        return True, f"answered in {time.monotonic() - t0:.1f} s"
    lines = [ln.strip() for ln in (err or b"").decode(errors="replace").splitlines() if ln.strip()]
    return False, f"exit {proc.returncode}" + (f": {lines[0][:200]}" if lines else "")  # the first says why


def probe(mpiexec: str, flavor: str, extra: list[str], hosts: hostlist.Hosts, names: list[str], env: dict,
          timeout: float = PROBE_TIMEOUT) -> dict[str, tuple[bool, str]]:
    """host -> (answered, how) for each of ``names``, probed at once, each within ``timeout``."""
    results: dict[str, tuple[bool, str]] = {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_probe_") as folder:
        def one(host: str) -> None:
            argv = probe_command(mpiexec, flavor, hostlist.only(extra, hosts, host, flavor, folder))
            results[host] = _run_one(argv, env, timeout)

        threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 30)
    return {h: results.get(h, (False, "the probe did not end")) for h in names}


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
            return (f"a lost host: Open MPI's runtime (PRRTE {prrte}) may run through a lost daemon; if it does, "
                    "its ranks are recovered in the job, else the job is launched again without it")
        return (f"a lost host costs a relaunch without it: Open MPI's runtime (PRRTE {prrte or 'version unknown'}) "
                "ends a job that lost a daemon")
    if flavor == "mpich":
        return "a lost host costs a relaunch without it: MPICH's Hydra ends a job that lost a proxy"
    return ("a lost node is survived in the job: srun --no-kill keeps the step, and the node's ranks are "
            "recovered like any dead worker (else the job is launched again without it: srun --exclude)")
