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

``ring_all`` rings several bells in one ``sendmmsg`` system call. On an oversubscribed node
the first process a ring wakes may take the ringer's core at once; ringing the others one
by one then waited for that core (measured: the second worker of a round started 1-5 ms
late in about half the rounds), ringing them in one call wakes them all before that.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import secrets
import select
import socket

_PREFIX = "mixle-mpi-bell"
_MSG_DONTWAIT = 0x40
_RING = b"!"


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


class _SockaddrUn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("path", ctypes.c_char * 108)]


def _libc_sendmmsg():
    """libc's ``sendmmsg``, or None (not Linux, or no such symbol)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sendmmsg
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_sendmmsg = _libc_sendmmsg()


def _batch(names: list[bytes]) -> tuple:
    """``sendmmsg``'s message array ringing each abstract socket in ``names``, with what it
    points into (kept together so that none is freed while the array is in use)."""
    iov = _Iovec(ctypes.cast(ctypes.c_char_p(_RING), ctypes.c_void_p), len(_RING))
    addrs = (_SockaddrUn * len(names))()
    msgs = (_Mmsghdr * len(names))()
    for i, name in enumerate(names):
        addrs[i].family = socket.AF_UNIX
        ctypes.memmove(ctypes.addressof(addrs[i]) + _SockaddrUn.path.offset, name, len(name))
        msgs[i].hdr.name = ctypes.addressof(addrs[i])
        msgs[i].hdr.namelen = _SockaddrUn.path.offset + len(name)
        msgs[i].hdr.iov = ctypes.pointer(iov)
        msgs[i].hdr.iovlen = 1
    return msgs, addrs, iov


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
        self._batch: tuple | None = None  # (addresses, what _batch built for them)

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

    def ring_all(self, addresses: list[str]) -> list[bool]:
        """``ring`` each of ``addresses``, all in one system call where the platform has
        ``sendmmsg`` (see the module's docstring); each entry as ``ring`` would say it."""
        if _sendmmsg is None or len(addresses) < 2:
            return [self.ring(a) for a in addresses]
        key = tuple(addresses)
        if self._batch is None or self._batch[0] != key:  # built once per set of bells
            names = [("\0" + a).encode() for a in addresses]
            if any(len(n) > 108 for n in names):
                return [self.ring(a) for a in addresses]
            self._batch = (key, _batch(names))
        msgs = self._batch[1][0]
        out: list[bool] = []
        fd = self.sock.fileno()
        while len(out) < len(key):
            rest = len(key) - len(out)
            sent = _sendmmsg(fd, ctypes.addressof(msgs[len(out)]), rest, _MSG_DONTWAIT)
            if sent > 0:
                out += [True] * sent
                continue
            code = ctypes.get_errno()  # the first message of the rest failed: judge it alone
            out.append(
                code in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)
                and self.ring(addresses[len(out)])
            )
        return out

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
