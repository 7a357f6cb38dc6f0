"""The hosts a launch runs on, read from mpiexec's flags, and the same flags without some of
them (pure but for reading a hostfile and writing its shortened copy; unit-tested).

Open MPI names hosts with ``--host a:2,b:2`` (``-H``, ``-host``) or a hostfile (lines
``a slots=2``); MPICH's Hydra with ``-hosts a:2,b:2`` or ``-f FILE`` (lines ``a:2``). Under a
SLURM allocation of several nodes the hosts are the allocation's (``SLURM_JOB_NODELIST``) and
the launch leaves some out with ``srun --exclude`` (flavor ``srun``) or an explicit host list.
A host named without a count has one slot, as both launchers count it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

HOST_FLAGS = ("--host", "-H", "-host", "-hosts")
FILE_FLAGS = (
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "-f",
    "--default-hostfile",
)
# every flag that places ranks on named hosts: those read here, and Open MPI's others
PLACEMENT_FLAGS = (
    *HOST_FLAGS,
    *FILE_FLAGS,
    "--rankfile",
    "--dvm-hostfile",
    "--add-host",
    "--add-hostfile",
)


def names_hosts(extra: list[str]) -> bool:
    """Whether mpiexec's ``extra`` flags place ranks on named hosts (pure)."""
    return any(a.partition("=")[0] in PLACEMENT_FLAGS for a in extra)


@dataclass(frozen=True)
class Hosts:
    """Each host's name and slots, in the launch's order, and where they came from:
    ``flag`` (the host flag or file flag found in the arguments) or ``slurm``."""

    slots: tuple[tuple[str, int], ...]
    source: str

    @property
    def names(self) -> list[str]:
        return [h for h, _ in self.slots]

    def total(self, leaving_out: set[str] | frozenset = frozenset()) -> int:
        return sum(n for h, n in self.slots if h not in leaving_out)


def _split_host(item: str) -> tuple[str, int]:
    name, _, count = item.strip().partition(":")
    if count and not count.isdigit():
        raise ValueError(f"host {item!r}: the slot count after ':' must be a whole number")
    return name, int(count) if count else 1


def parse_host_flag(value: str) -> list[tuple[str, int]]:
    """``a:2,b,c:1`` -> [(a, 2), (b, 1), (c, 1)]; a host named twice adds its slots."""
    merged: dict[str, int] = {}
    for item in value.split(","):
        if item.strip():
            name, n = _split_host(item)
            merged[name] = merged.get(name, 0) + n
    return list(merged.items())


def parse_hostfile(text: str) -> list[tuple[str, int]]:
    """A hostfile of either launcher: ``a slots=2``, ``a:2`` or ``a``; ``#`` starts a comment."""
    merged: dict[str, int] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        first, *rest = line.split()
        name, n = _split_host(first)
        for word in rest:
            key, _, value = word.partition("=")
            if key == "slots" and value.isdigit():
                n = int(value)
        merged[name] = merged.get(name, 0) + n
    return list(merged.items())


def _flag_value(extra: list[str], i: int) -> tuple[str, str, int]:
    """The flag at ``extra[i]``, its value and how many items they take (``--host=a`` or ``--host a``)."""
    flag, eq, value = extra[i].partition("=")
    if eq:
        return flag, value, 1
    if i + 1 >= len(extra):
        raise ValueError(f"{flag} needs a value")
    return flag, extra[i + 1], 2


def from_args(extra: list[str]) -> Hosts | None:
    """The hosts named among mpiexec's ``extra`` flags, or None when they name none."""
    i = 0
    while i < len(extra):
        flag = extra[i].partition("=")[0]
        if flag in HOST_FLAGS or flag in FILE_FLAGS:
            flag, value, _ = _flag_value(extra, i)
            if flag in HOST_FLAGS:
                return Hosts(tuple(parse_host_flag(value)), flag)
            with open(value, encoding="utf-8") as fh:
                return Hosts(tuple(parse_hostfile(fh.read())), flag)
        i += 1
    return None


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compact node list (``n[1-3,5],m``) as names, by ``scontrol show hostnames``."""
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
    )
    if out.returncode != 0:
        raise ValueError(f"scontrol show hostnames {nodelist}: {out.stderr.strip()}")
    return out.stdout.split()


def tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE (``2(x3),1``) as one count per node (pure)."""
    counts: list[int] = []
    for item in filter(None, text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not m:
            raise ValueError(f"SLURM_TASKS_PER_NODE item {item!r} is not N or N(xK)")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def from_slurm(environ, expand=expand_nodelist) -> Hosts | None:
    """The nodes of a SLURM allocation of several nodes, or None outside one."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    if not nodelist or not nodes.isdigit() or int(nodes) < 2:
        return None
    names = expand(nodelist)
    counts = tasks_per_node(environ.get("SLURM_TASKS_PER_NODE", ""))
    if len(counts) != len(names):
        counts = [1] * len(names)
    return Hosts(tuple(zip(names, counts, strict=True)), "slurm")


def of_launch(extra: list[str], environ, expand=expand_nodelist) -> Hosts | None:
    """The hosts of a launch: named in its flags, else its SLURM allocation's; None on one host."""
    named = from_args(extra)
    if named is not None:
        return named if len(named.slots) > 1 else None
    return from_slurm(environ, expand)


def host_flag(slots: list[tuple[str, int]], flavor: str) -> list[str]:
    text = ",".join(f"{h}:{n}" for h, n in slots)
    return ["-hosts", text] if flavor == "mpich" else ["--host", text]


def without(
    extra: list[str], hosts: Hosts, leaving_out: set[str], flavor: str, folder: str | None = None
) -> list[str]:
    """``extra`` with the hosts ``leaving_out`` left out: the host flag rewritten, a hostfile
    copied without them into ``folder`` (a private temporary one by default), or under SLURM
    ``--exclude`` for srun and an explicit host list for mpiexec."""
    kept = [(h, n) for h, n in hosts.slots if h not in leaving_out]
    if hosts.source == "slurm":
        if flavor == "srun":
            return (
                [*extra, "--exclude=" + ",".join(sorted(leaving_out))]
                if leaving_out
                else list(extra)
            )
        return [*extra, *host_flag(kept, flavor)]
    out, i = [], 0
    while i < len(extra):
        flag = extra[i].partition("=")[0]
        if flag in HOST_FLAGS or flag in FILE_FLAGS:
            flag, _, taken = _flag_value(extra, i)
            if flag in HOST_FLAGS:
                out += [flag, ",".join(f"{h}:{n}" for h, n in kept)]
            else:
                fd, path = tempfile.mkstemp(prefix="mixle_mpi_hosts_", dir=folder, text=True)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(
                        "".join(
                            f"{h}:{n}\n" if flavor == "mpich" else f"{h} slots={n}\n"
                            for h, n in kept
                        )
                    )
                out += [flag, path]
            i += taken
            continue
        out.append(extra[i])
        i += 1
    return out


def only(
    extra: list[str], hosts: Hosts, host: str, flavor: str, folder: str | None = None
) -> list[str]:
    """``extra`` that names ``host`` alone, with one slot: a probe's launch there."""
    one = Hosts(((host, 1),), hosts.source)
    if hosts.source == "slurm":
        return (
            [*extra, f"--nodelist={host}", "-N", "1"]
            if flavor == "srun"
            else [*extra, *host_flag([(host, 1)], flavor)]
        )
    return without(extra, one, set(), flavor, folder)
