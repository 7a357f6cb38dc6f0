"""Fake hosts on this machine for Open MPI jobs across "hosts" (issue 13).

Host A is this network namespace (the driver's, where mpiexec runs). Every other host is a
network namespace of its own, joined to a bridge with a veth pair and a private address,
and its processes get their own hostname (a UTS namespace): Open MPI tells hosts apart by
hostname, so ranks on different fake hosts talk TCP over the veths and ranks on one host
use shared memory. mpiexec reaches a host through a stand-in for ssh (``plm_ssh_agent``)
that runs the remote daemon inside that host's namespaces with a login-like environment,
as ssh would; the job's variables travel with ``-x``. The test creates everything and
removes it, with names and a subnet of its own.

Needs root and ``ip`` (iproute2). What is not like real hosts: one kernel (pids are
global, so a process could be signalled from any host; the code only ever signals on its
own host), and one file system, unless ``private_tmp``: then every host but A has a /tmp
of its own (a folder of the test's, mounted on /tmp in a mount namespace of the remote
command), which the other hosts cannot see; the rest of the file system stays shared, as
a cluster's home and project folders are. The checkout and its interpreters, when they
live under /tmp (a worktree), are mounted into each host's /tmp at the same path: software
is installed on every host.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

_INSTANCES = itertools.count()  # one run makes several sets of hosts: each gets names of its own

AGENT = """#!/bin/bash
# ssh stand-in for the fake hosts: run the command inside that host's namespaces
while [ $# -gt 0 ]; do
  case "$1" in
    -[oplicFJw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
case "$host" in
{cases}
  *) echo "fake ssh: unknown host $host" >&2; exit 255 ;;
esac
if [ -e "{down}/down-$ns" ]; then  # a host that went down: ssh gets no answer
  echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255
fi
exec ip netns exec "$ns" unshare --uts {unshare} env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/sh \\
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin {tmpdir}\\
  /bin/sh -c 'hostname "$0"; {mounts}exec /bin/sh -c "$1"' "$name" "$*" "$tmp" "{keep}"
"""
# private_tmp: the host's own folder becomes its /tmp, with the kept paths (under /tmp) in it
PRIVATE_TMP = (
    'for p in $3; do mkdir -p "$2${p#/tmp}" && mount --bind "$p" "$2${p#/tmp}" || exit 255; done; '
    'mount --rbind "$2" /tmp || exit 255; '
)


def available() -> str:
    """Why fake hosts cannot be made here, or "" when they can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "fake hosts need root (network namespaces)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "fake hosts need iproute2's ip and util-linux's unshare"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    return ""


def _kept_under_tmp(agent: Path) -> list[str]:
    """The agent's folder, and the checkout and the interpreters' environments that live under
    /tmp (a worktree there): every host has the software (and ssh), at the same path."""
    repo = Path(__file__).resolve().parents[1]
    mpich = os.environ.get("MIXLE_MPI_MPICH_PYTHON")
    found = {agent, repo, Path(sys.prefix), *([Path(mpich).parents[1]] if mpich else [])}
    under = sorted(str(p) for p in found if str(p).startswith("/tmp/"))
    return [p for p in under if not any(p.startswith(q + "/") for q in under)]


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class FakeHosts:
    """Hosts A (here) and ``others`` more, with ``slots`` ranks on each, as a context manager."""

    def __init__(self, workdir: Path, slots: list[int], private_tmp: bool = False) -> None:
        # names of this instance's own: the kernel removes a deleted namespace's interfaces
        # in the background, so the last set's names can outlive its __exit__ for a moment
        instance = next(_INSTANCES)
        self.tag = f"{os.getpid() % 100000:05d}{instance % 100:02d}"  # "mmbr" + 7: under 15 chars
        self.subnet = 100 + (os.getpid() + instance) % 150  # 10.231.<subnet>.0/24, this set's own
        self.bridge = f"mmbr{self.tag}"
        self.slots = slots
        self.names = ["A"] + [f"host{chr(ord('b') + i)}" for i in range(len(slots) - 1)]
        self.namespaces = [None] + [
            f"mm{self.tag}{chr(ord('b') + i)}" for i in range(len(slots) - 1)
        ]
        self.addresses = [f"10.231.{self.subnet}.{i + 1}" for i in range(len(slots))]
        # private_tmp: the agent in a folder of its own that every host sees (Open MPI's daemons
        # check the agent's path on their host, and may start the next hosts' daemons themselves)
        self.agent = (workdir / "agent" if private_tmp else workdir) / "fake-ssh.sh"
        # private_tmp: host i's /tmp is this folder (persistent across its ssh sessions, as a host's is)
        self.tmps = [Path("/tmp")] + [
            workdir / f"tmp-{n}" if private_tmp else Path("/tmp") for n in self.names[1:]
        ]
        self.private_tmp = private_tmp
        self._made: list[str] = []
        self._veths: list[str] = []

    def __enter__(self) -> "FakeHosts":
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append("bridge")
            _ip("addr", "add", f"{self.addresses[0]}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, ns in enumerate(self.namespaces[1:], start=1):
                veth = f"mmv{self.tag}{chr(ord('a') + i)}"
                _ip("netns", "add", ns)
                self._made.append(ns)
                # every host's end is named like the bridge: one interface name fits all hosts
                _ip("link", "add", veth, "type", "veth", "peer", "name", self.bridge, "netns", ns)
                self._veths.append(veth)
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", self.bridge)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", self.bridge, "up")
            self._write_agent()
        except BaseException:  # nothing made may outlive a failed start (namespaces once did)
            self.__exit__(None, None, None)
            raise
        return self

    def _write_agent(self) -> None:
        self.agent.parent.mkdir(exist_ok=True)
        for tmp in self.tmps[1:] if self.private_tmp else ():
            tmp.mkdir(exist_ok=True)
            tmp.chmod(0o1777)
        cases = "\n".join(
            f"  {addr}|{name}) ns={ns}; name={name}; tmp={tmp} ;;"
            for addr, ns, name, tmp in zip(
                self.addresses[1:], self.namespaces[1:], self.names[1:], self.tmps[1:], strict=False
            )
        )
        mounts = dict(unshare="", tmpdir="", mounts="", keep="")
        if self.private_tmp:
            mounts = dict(
                unshare="--mount --propagation private",
                tmpdir="TMPDIR=/tmp ",
                mounts=PRIVATE_TMP,
                keep=" ".join(_kept_under_tmp(self.agent.parent)),
            )
        self.agent.write_text(AGENT.format(cases=cases, down=self.agent.parent, **mounts))
        self.agent.chmod(0o755)

    def mpiexec_args(self, slots: list[int] | None = None) -> str:
        """Open MPI's flags for a job over these hosts (``slots`` per host; 0 leaves one out)."""
        slots = self.slots if slots is None else slots
        hosts = ",".join(f"{a}:{n}" for a, n in zip(self.addresses, slots, strict=False) if n)
        return (
            f"--prtemca plm_ssh_agent {self.agent} --prtemca oob_tcp_if_include 10.231.{self.subnet}.0/24 "
            f"--mca btl_tcp_if_include 10.231.{self.subnet}.0/24 --host {hosts} --map-by slot "
            "-x MIXLE_MPI_* -x PYTHONWARNINGS -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"
            + (" -x PYTHONPATH" if os.environ.get("PYTHONPATH") else "")
        )  # a checkout run from elsewhere

    def mpich_args(self, slots: list[int] | None = None) -> str:
        """MPICH Hydra's flags for the same hosts (its ofi network layer needs
        ``mpich_env()`` too)."""
        slots = self.slots if slots is None else slots
        hosts = ",".join(f"{a}:{n}" for a, n in zip(self.addresses, slots, strict=False) if n)
        return f"-launcher ssh -launcher-exec {self.agent} -localhost {self.addresses[0]} -hosts {hosts}"

    def mpich_env(self, provider: str = "sockets") -> dict:
        """MPICH's ofi network layer over the bridge. libfabric's ``sockets`` provider by
        default: with ``tcp`` a call into the driver's MPI library sometimes blocked for good
        after a worker on another host was SIGKILLed (1 run in 5 here), and a replacement
        spawned there stayed after the fit for 30 s; with ``sockets`` 9 of 9 recovered in the
        job (bench/results/mpich_hosts_facts.md)."""
        if provider == "tcp":
            return {
                "MPIR_CVAR_CH4_NETMOD": "ofi",
                "FI_PROVIDER": "tcp",
                "FI_TCP_IFACE": self.bridge,
            }
        return {
            "MPIR_CVAR_CH4_NETMOD": "ofi",
            "FI_PROVIDER": provider,
            "FI_SOCKETS_IFACE": self.bridge,
        }

    def pids(self, host: int) -> list[int]:
        """Every process in fake host ``host`` (1, 2, ...): its daemon and its ranks."""
        proc = subprocess.run(
            ["ip", "netns", "pids", self.namespaces[host]], capture_output=True, text=True
        )
        return [int(p) for p in proc.stdout.split()]

    def lose(self, host: int, down: bool = False) -> list[int]:
        """The host fails: SIGKILL every process on it at once; ``down``: and it stays down
        (the launcher cannot start anything there again)."""
        if down:
            (self.agent.parent / f"down-{self.namespaces[host]}").touch()
        victims = self.pids(host)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victims

    def __exit__(self, *exc) -> None:
        for host, ns in enumerate(self.namespaces[1:], start=1):
            if ns not in self._made:
                continue
            for _ in range(20):
                if not self.lose(host):
                    break
                time.sleep(0.1)
            # deleting our end of the veth takes its peer with it now; a deleted namespace's
            # interfaces go only when the kernel gets to them, and their names with them
            if host <= len(self._veths):
                subprocess.run(["ip", "link", "del", self._veths[host - 1]], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if "bridge" in self._made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
