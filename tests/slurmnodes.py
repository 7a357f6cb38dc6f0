"""A multi-node SLURM on this machine, for tests (issue 36).

``SlurmNodes(statedir, nodes=3)`` starts ``scripts/slurm-local.sh start STATEDIR --nodes K``
on free ports and stops it on exit: slurmctld and munged here, and node1..nodeK, each a
slurmd in a network namespace and a UTS namespace of its own (hostname = node name), joined
to a bridge with private addresses (10.232.<s>.0/24; the controller is .1, node i is .i+1;
the interface inside every node is ``eth0``). ``lose(node)`` is a node failure: every process
in the node's namespace (its slurmd, slurmstepds, ranks) is SIGKILLed at once and its link
taken down; the node stays lost (SLURM marks it DOWN after SlurmdTimeout, 5 s).

What is not like real nodes: one kernel (pids are global) and one file system (the spool
folders are per node, everything else is shared, as on a cluster with a shared home).
Needs root, ``ip``, ``nsenter`` and ``unshare``, and SLURM (scripts/install-slurm.sh).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from slurmharness import TERMINAL  # the job states after which SLURM runs it no more

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
BINARIES = (
    "sbatch",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
    "srun",
    "slurmctld",
    "slurmd",
    "munged",
    "mungekey",
    "ip",
    "nsenter",
    "unshare",
)


def available() -> str:
    """Why a multi-node SLURM cannot be made here, or "" when it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "a multi-node SLURM needs root (network namespaces)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"missing {', '.join(missing)} (scripts/install-slurm.sh installs SLURM)"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmNodes:
    """A SLURM cluster of ``nodes`` nodes on this machine, as a context manager."""

    def __init__(
        self, statedir: Path, nodes: int = 3, env: dict | None = None, deadline: float = 60
    ) -> None:
        self.dir = Path(statedir)
        self.count = nodes
        self.deadline = deadline
        self.env = dict(os.environ, **(env or {}))
        self.env.update(
            SLURM_CONF=str(self.dir / "slurm.conf"),
            SLURM_LOCAL_CTLD_PORT=str(free_port()),
            SLURM_LOCAL_SLURMD_PORT=str(free_port()),
        )
        for var in (
            "SLURM_JOB_ID",
            "SLURM_JOBID",
            "SLURM_NODELIST",
            "SLURM_JOB_NODELIST",
            "SLURM_NNODES",
            "SLURM_JOB_NUM_NODES",
            "MIXLE_MPI_FAULT_PLAN",
        ):
            self.env.pop(var, None)
        self.info: dict[str, str] = {}
        self.nodes: dict[str, dict] = {}  # name -> {"ns", "veth", "addr"}
        self.lost: set[str] = set()

    # -- life cycle --
    def __enter__(self) -> "SlurmNodes":
        up = subprocess.run(
            ["bash", str(SCRIPT), "start", str(self.dir), "--nodes", str(self.count)],
            capture_output=True,
            text=True,
            timeout=self.deadline + 30,
            env=self.env,
        )
        self._read_nodes()
        if up.returncode != 0:
            self.__exit__(None, None, None)
            raise RuntimeError(
                f"could not start a {self.count}-node SLURM:\n{up.stdout}\n{up.stderr}"
            )
        return self

    def __exit__(self, *exc) -> None:
        down = subprocess.run(
            ["bash", str(SCRIPT), "stop", str(self.dir)],
            capture_output=True,
            text=True,
            timeout=self.deadline + 60,
            env=self.env,
        )
        if down.returncode != 0:
            raise RuntimeError(f"could not stop SLURM:\n{down.stdout}\n{down.stderr}")

    def _read_nodes(self) -> None:
        path = self.dir / "nodes.env"
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if re.fullmatch(r"NODE\d+", key):
                name, ns, veth, addr = value.split()
                self.nodes[name] = {"ns": ns, "veth": veth, "addr": addr}
            else:
                self.info[key] = value

    @property
    def subnet(self) -> str:
        return self.info["SUBNET"]

    @property
    def iface(self) -> str:
        return self.info.get("IFACE", "eth0")

    def leftovers(self) -> list[str]:
        """What of this cluster is still there (should be nothing after exit): namespaces,
        links, /etc/netns folders, daemons whose pid files remain."""
        tag = self.info.get("TAG", "")
        found: list[str] = []
        if tag:
            ns = subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True, timeout=30
            ).stdout
            found += [f"netns {line.split()[0]}" for line in ns.splitlines() if tag in line]
            links = subprocess.run(
                ["ip", "-o", "link"], capture_output=True, text=True, timeout=30
            ).stdout
            found += [
                f"link {line.split(':')[1].strip()}" for line in links.splitlines() if tag in line
            ]
            found += (
                [f"/etc/netns/{p.name}" for p in Path("/etc/netns").glob(f"*{tag}*")]
                if Path("/etc/netns").exists()
                else []
            )
        for pidfile in [*self.dir.glob("slurm*.pid"), self.dir / "munge" / "munged.pid"]:
            if pidfile.exists():
                found.append(f"pid file {pidfile}")
        ps = subprocess.run(
            ["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=30
        ).stdout
        found += [
            f"process {line.strip()}"
            for line in ps.splitlines()
            if str(self.dir) in line and "ps -eo" not in line
        ]
        return found

    # -- clients --
    def run(
        self, *args: str, timeout: float = 30, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}
        )

    def node_states(self) -> dict[str, str]:
        """``sinfo -N``: node name -> state (idle, alloc, mix, down*, ...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def submit(
        self, text: str, folder: Path, name: str, *args: str, env: dict | None = None
    ) -> str:
        """sbatch the script (extra sbatch ``args``) from ``folder``; the job inherits ``env``."""
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / f"{name}.sbatch"
        script.write_text(text)
        out = subprocess.run(
            ["sbatch", "--parsable", *args, str(script)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**self.env, **(env or {})},
            cwd=str(folder),
        )
        if out.returncode != 0:
            raise RuntimeError(f"sbatch: {out.stderr}")
        return out.stdout.strip().split(";")[0]

    def job(self, job: str) -> dict:
        """``scontrol -o show job`` as a dict ({} once SLURM forgot the job)."""
        out = self.run("scontrol", "-o", "show", "job", job).stdout
        lines = [line for line in out.splitlines() if line.strip()]
        return dict(re.findall(r"(\w+)=(\S*)", lines[0])) if lines else {}

    def wait(self, predicate, deadline: float, what: str, period: float = 0.2):
        """Poll ``predicate()`` until it returns something true, or raise after ``deadline`` s."""
        end = time.monotonic() + deadline
        last = None
        while time.monotonic() < end:
            last = predicate()
            if last:
                return last
            time.sleep(period)
        raise TimeoutError(f"gave up after {deadline:.0f} s waiting for {what}; last seen {last!r}")

    def wait_done(self, job: str, deadline: float = 180) -> dict:
        def done():
            rec = self.job(job)
            queued = self.run("squeue", "-h", "-j", job, "-o", "%i").stdout.strip()
            return rec if rec and not queued and rec.get("JobState") in TERMINAL else None

        return self.wait(done, deadline, f"the end of job {job}")

    # -- node failure --
    def _node(self, node: str | int) -> tuple[str, dict]:
        name = f"node{node}" if isinstance(node, int) else node
        return name, self.nodes[name]

    def pids(self, node: str | int) -> list[int]:
        """Every process on ``node`` (its slurmd, slurmstepds and tasks)."""
        _, n = self._node(node)
        out = subprocess.run(
            ["ip", "netns", "pids", n["ns"]], capture_output=True, text=True, timeout=30
        ).stdout
        return [int(p) for p in out.split()]

    def lose(self, node: str | int) -> list[int]:
        """The node fails and stays lost: its link goes down, then every process on it is
        SIGKILLed at once (again until none is left, for any forked in between). The link
        goes first so that no FIN or reset leaves the node: its peers' connections to it
        just go silent, as when a real node loses power."""
        name, n = self._node(node)
        self.lost.add(name)
        subprocess.run(["ip", "link", "set", n["veth"], "down"], capture_output=True, timeout=30)
        subprocess.run(
            ["ip", "-n", n["ns"], "link", "set", "eth0", "down"], capture_output=True, timeout=30
        )
        victims: list[int] = []
        for _ in range(50):
            pids = self.pids(name)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            victims += pids
            time.sleep(0.05)
        return sorted(set(victims))
