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
