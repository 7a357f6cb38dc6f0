"""Named points the runtime reports to whoever listens: how benchmarks see inside a fit.

The benchmarks (bench/_job.py, bench/_scale_job.py) time a worker's E-step, a round on the
driver, a heartbeat pass, ... without patching the package: the runtime reports those
points here, and a benchmark registers a listener with :func:`listen`. Nobody listening
(every fit outside a benchmark) costs one ``if`` on a module-level list per point.

Two kinds of point:

- a *span*, a function decorated with :func:`spanned`: listeners hear ``"begin"`` before
  the call and ``"end"`` after it (also when it raised), with the call's arguments
  (``self`` first for a method) and, at the end, its result and length;
- a *mark*, a :func:`mark` call: one ``"mark"`` event with the caller's arguments.

Listeners run inline, on the thread that reports (a worker's main thread, the driver's
heartbeat thread, ...): they should be quick and must not change what they are handed.
One may *delay* the thread on purpose, which is the supported way for a benchmark to slow
a worker's E-step (bench/_scale_job.py's ``--estep-sleep`` sleeps at the ``worker_task``
span's begin). A listener that raises never breaks the fit: it is removed at once and
the error is logged as a warning with its traceback (logger ``mixle_mpi.probes``).

The points (name: kind, arguments) are listed in :data:`POINTS` and docs/developer.md.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from mixle_mpi.core import logs

POINTS = {
    "estep_shard": "span (estimator, model, chunks, on_chunk): one shard's E-step, wherever it is computed",
    "score_shard": "span (model, chunks, on_chunk): one shard's log-density sum, wherever it is computed",
    "worker_recv": "span (worker): a worker waits for and receives its next command",
    "worker_body": "span (worker, task_id, body_pickled): a worker has a task's model (unpickled once per task)",
    "worker_task": "span (worker, task): a worker computes a task and replies (task.kind: estep, init, llsum)",
    "driver_setup": "span (driver, workers): the driver sets workers up and waits for them to be ready",
    "shard_load": "span (driver, plan): the driver makes shards resident on workers",
    "round": "span (driver, kind, body, ...; kwargs as called): one round on the driver, result = its results",
    "estep_call": "span (handle, estimator, prev_estimate): the handle's pysp_seq_estimate",
    "llsum_call": "span (handle, estimate): the handle's pysp_seq_log_density_sum",
    "store_create": "span (cls, path, ...): a shard store is written",
    "workers_rung": "span (mailroom, workers): the driver rings the doorbells of workers just sent to",
    "driver_poll": "mark (): one pass of the driver's wait loop",
    "message_posted": "mark (tag, obj): a message is posted on a link (either side)",
    "message_polled": "span (link, tag, comm): one poll of a link for a message; result = it, or None",
    "reply_taken": "span (mailroom, worker, msg): a worker's reply reaches the driver",
    "heartbeats_heard": "span (monitor, results): the driver's heartbeat thread records one pass's beats",
}


class Event(NamedTuple):
    """What a listener is handed. ``at`` is ``time.monotonic()`` (one clock for every
    process of a host); ``seconds`` is a span's length at its end, else 0.0."""

    name: str
    phase: str  # "begin", "end" or "mark"
    at: float
    seconds: float = 0.0
    args: tuple = ()
    kwargs: dict = {}  # never mutated: each event that has kwargs gets the call's own dict
    result: Any = None  # a span's "end": what the call returned (None if it raised)
    error: BaseException | None = None  # a span's "end": what the call raised, if it did


Listener = Callable[[Event], None]

LISTENERS: list[Listener] = []  # checked with one ``if`` at every point: empty costs nothing
_changing = threading.Lock()


def listen(listener: Listener) -> Listener:
    """Hear every point from now on, in this process (returns ``listener``)."""
    with _changing:
        LISTENERS.append(listener)
    return listener


def unlisten(listener: Listener) -> None:
    """Stop hearing (nothing happens if ``listener`` was not listening)."""
    with _changing:
        if listener in LISTENERS:
            LISTENERS.remove(listener)


def emit(event: Event) -> None:
    """Hand ``event`` to every listener; one that raises is removed and logged."""
    for listener in tuple(LISTENERS):
        try:
            listener(event)
        except Exception:  # noqa: BLE001 - a benchmark's bug must not end a fit
            unlisten(listener)
            logs.get("probes").warning(
                f"probe listener {listener!r} raised at {event.name!r} ({event.phase}) "
                f"and was removed:\n{traceback.format_exc()}"
            )


def mark(name: str, *args: Any) -> None:
    """Report the point ``name`` with ``args``, if anyone listens."""
    if LISTENERS:
        emit(Event(name, "mark", time.monotonic(), 0.0, args))


def spanned(name: str) -> Callable:
    """Decorate a function so that every call of it is the span ``name``."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def span(*args: Any, **kwargs: Any) -> Any:
            if not LISTENERS:
                return fn(*args, **kwargs)
            t0 = time.monotonic()
            emit(Event(name, "begin", t0, 0.0, args, kwargs))
            result, error = None, None
            try:
                result = fn(*args, **kwargs)
                return result
            except BaseException as exc:
                error = exc
                raise
            finally:
                t1 = time.monotonic()
                emit(Event(name, "end", t1, t1 - t0, args, kwargs, result, error))

        return span

    return decorate
