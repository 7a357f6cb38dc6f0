"""The driver's heartbeat thread: hears workers, beats back, and names the silent ones.

It runs beside the driver's main thread (MPI_THREAD_MULTIPLE) on the dedicated heartbeat
communicators, so detection keeps working while the driver folds, runs the M-step or sits
in user code. It only reports suspects; the main thread decides what happens to them.
"""

from __future__ import annotations

import threading
import time

from mpi4py import MPI

from mixle_mpi.heartbeat import HeartbeatTracker
from mixle_mpi.transport import TAG_HB, Link, PeerFailed

MAX_PENDING_BEATS = 64


class Monitor:
    def __init__(self, period: float, timeout: float) -> None:
        self.period = period
        self.tracker = HeartbeatTracker(timeout)
        self.lock = threading.Lock()
        self._links: dict[int, Link] = {}
        self._suspects: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mixle-mpi-monitor")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.period + 1.0)

    def watch(self, worker: int, link: Link) -> None:
        """Follow ``worker`` on ``link`` with a fresh grace period."""
        with self.lock:
            self._links[worker] = link
            self._suspects.pop(worker, None)
            self.tracker.watch([worker])

    def forget(self, worker: int) -> None:
        with self.lock:
            self._links.pop(worker, None)
            self.tracker.forget(worker)

    def grace(self, worker: int, seconds: float) -> None:
        """Allow ``worker`` up to ``seconds`` of silence (0 restores the normal timeout): a
        shard load unpickles and encodes in long calls that hold the GIL, so the worker's
        heartbeat thread may not run. ULFM still reports a real death at once."""
        with self.lock:
            self.tracker.set_grace(worker, seconds)

    def suspect(self, worker: int, cause: str) -> None:
        with self.lock:
            self._suspects.setdefault(worker, (cause, time.time()))

    def take_suspects(self) -> dict[int, tuple[str, float]]:
        """Workers reported failed since the last call, with (cause, wall time of detection)."""
        with self.lock:
            out, self._suspects = self._suspects, {}
            return {w: v for w, v in out.items() if w in self._links}

    def _beat(self, worker: int, link: Link) -> None:
        while link.poll(TAG_HB, comm=link.hb) is not None:
            self.tracker.heard(worker)
        link.hb_sends = [r for r in link.hb_sends if not r.Test()]
        if len(link.hb_sends) < MAX_PENDING_BEATS:
            link.hb_sends.append(link.hb.isend(None, dest=link.peer, tag=TAG_HB))

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            with self.lock:
                for worker, link in list(self._links.items()):
                    if worker in self._suspects:
                        continue
                    try:
                        self._beat(worker, link)
                    except (PeerFailed, MPI.Exception) as exc:
                        self._suspects[worker] = (f"ulfm: {exc}", time.time())
                now = time.monotonic()
                if now - last > self.tracker.timeout / 2:
                    # This thread could not listen (the process was descheduled, or MPICH's
                    # global lock was held by a blocking Spawn): blame no worker for it.
                    self.tracker.watch(self.tracker.watched)
                last = now
                for worker in self.tracker.overdue():
                    if worker not in self._suspects:
                        silent = self.tracker.silence(worker)
                        self._suspects[worker] = (
                            f"heartbeat: silent for {silent:.2f} s (limit {self.tracker.limit(worker):g} s)",
                            time.time(),
                        )
            self._stop.wait(self.period / 2)
