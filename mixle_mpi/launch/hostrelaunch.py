"""After a failed launch over several hosts: probe them, leave out those that do not
answer, and keep the record of each such relaunch for the next launch's ranks. The
decisions are ``host_plan``'s; ``hostprobe`` asks the hosts, ``hostlist`` rewrites the
flags, and ``launcher.run`` launches again."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time

from mixle_mpi.core import logs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import contract, host_plan, hostlist, hostprobe

log = logs.get("launcher")


class HostRelaunch:
    """After a failed attempt of a launch over several hosts: probe them, and leave out
    those that do not answer (``host_plan`` decides; ``hostlist`` rewrites the flags). Keeps
    the record of each such relaunch, which the next attempt's ranks get (``contract``)."""

    def __init__(
        self,
        exe: str,
        flavor: str,
        n: int,
        extra: list[str],
        hosts: hostlist.Hosts | None,
        book: host_plan.HostBook,
        probe_env: dict,
    ) -> None:
        self.exe, self.flavor, self.n, self.base_extra, self.hosts, self.book = (
            exe,
            flavor,
            n,
            extra,
            hosts,
            book,
        )
        self.probe_env = probe_env
        self.ranks, self.extra, self.left_out = n, list(extra), frozenset()
        self.records: list[dict] = []
        self.folder: str | None = None  # private, for the hostfiles it rewrites (close)

    def close(self) -> None:
        """Remove the hostfiles it wrote (the launcher calls it however the launch ends)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def env(self) -> dict:
        return contract.relaunches_env(self.records)

    def after(self, a, next_attempt: int) -> bool | None:
        """After attempt ``a`` (a ``launcher.Attempt``: its code, whether it timed out, when it
        ended). True: launch again without a lost host; False: a host was lost and there is no
        launch left (said why); None: no host was lost (the other rules decide). A host that
        answers without the folder the job was launched from is a ConfigError: no launch can
        work there, and the failure only looked like a lost host."""
        if self.hosts is None or not host_plan.worth_looking_for_the_folder(a.code, a.timed_out):
            return None
        now = time.monotonic()
        names = self.book.to_probe(self.hosts.names, now)
        folder = os.getcwd()
        answers = hostprobe.probe(
            self.exe, self.flavor, self.base_extra, self.hosts, names, self.probe_env, folder=folder
        )
        for host, (ok, how, _) in answers.items():
            log.log(
                logging.DEBUG if ok else logging.WARNING,
                f"host {host}: {'answers' if ok else 'lost'} ({how})",
            )
        needs = hostprobe.missing_folder(folder, answers)
        if needs:
            raise ConfigError(needs)
        if not host_plan.worth_probing(a.code, a.timed_out):
            return None
        nxt = self.book.decide(
            self.hosts.names,
            dict(self.hosts.slots),
            {h: ans.answered for h, ans in answers.items()},
            self.n,
            time.monotonic(),
            f"exit {a.code}",
        )
        if nxt.message and not nxt.lost_now:
            log.warning(nxt.message)
        if nxt.lost_now and not nxt.relaunch:
            log.error(nxt.message)
            return False
        if nxt.left_out != self.left_out and nxt.ranks >= self.book.fewest:
            self.left_out, self.ranks = nxt.left_out, nxt.ranks
            self.folder = self.folder or tempfile.mkdtemp(prefix="mixle_mpi_hosts_")
            self.extra = hostlist.without(
                self.base_extra, self.hosts, set(nxt.left_out), self.flavor, self.folder
            )
        if not nxt.lost_now:
            return None
        log.warning(nxt.message)
        self.records.append(
            {
                "attempt": next_attempt,
                "lost_hosts": list(nxt.lost_now),
                "left_out": sorted(nxt.left_out),
                "ranks": nxt.ranks,
                "was_ranks": self.n,
                "exit": a.code,
                "ended_at": a.ended_at,
                "decided_at": time.time(),
                "probe_seconds": round(time.monotonic() - now, 3),
            }
        )
        return True
