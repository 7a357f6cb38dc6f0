"""A wake-up call beside MPI, for ranks on one host.

A waiting rank cannot block in MPI (a blocking MPI wait spins a core, which the workers need
on an oversubscribed node), so it polls and sleeps; a short sleep costs CPU, a long one adds
latency to every message of a round. A doorbell ends that trade: a rank sleeps in
``select`` on a datagram socket of its own, and whoever just posted it an MPI message rings
it. The message itself still travels over MPI, and a waiter still polls MPI after every
wake and at least every ``BELL_CAP`` seconds, so a ring that is lost, or never sent (a
peer on another host, a dead one), costs latency, never correctness.

Linux abstract-namespace sockets: no file to clean up, gone with the process. Where they
are unavailable, ``own()`` is None and ranks poll as before.
"""

from __future__ import annotations

import atexit
import os
import secrets
import select
import socket

_PREFIX = "mixle-mpi-bell"


class Doorbell:
    """This process's bell: ``wait`` sleeps until rung or timed out; ``ring`` rings another."""

    def __init__(self) -> None:
        self.address = f"{_PREFIX}-{os.getpid()}-{secrets.token_hex(6)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind("\0" + self.address)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if rung (every pending ring is consumed)."""
        try:
            readable, _, _ = select.select([self.sock], [], [], max(0.0, seconds))
        except (OSError, ValueError):  # closed under us (the process is ending)
            return False
        if not readable:
            return False
        self._drain()
        return True

    def _drain(self) -> None:
        try:
            while self.sock.recv(16):
                pass
        except OSError:  # BlockingIOError: drained
            pass

    def ring(self, address: str) -> bool:
        """Wake the process whose bell is ``address``. False if no such bell can be reached
        from here (the peer is gone, or in another network namespace under the same host
        name): stop ringing it, and poll for its messages instead. A full queue is True: it
        has rings pending already."""
        try:
            self.sock.sendto(b"!", "\0" + address)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()


_own: list[Doorbell | None] = []


def own() -> Doorbell | None:
    """This process's doorbell, made on first use; None where the platform has none."""
    if not _own:
        try:
            _own.append(Doorbell())
            atexit.register(_own[0].close)
        except (OSError, AttributeError):  # no AF_UNIX or no abstract namespace (not Linux)
            _own.append(None)
    return _own[0]
