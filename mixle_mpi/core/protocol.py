"""Every message the ranks exchange, in one place: named types, their tags and the protocol
version.

Messages are NamedTuples (pickled by mpi4py); a rank reads them by field name and tells them
apart by type, never by position. ``PROTOCOL`` changes whenever a message changes: a worker
started from a different mixle_mpi install says so in its ``Hello`` and is left out with a
clear reason instead of failing on a message it cannot read.
"""

from __future__ import annotations

from typing import Any, NamedTuple

PROTOCOL = 8

# tags: the startup handshake on COMM_WORLD; then commands, replies and heartbeats on the
# job's communicators (heartbeats on their own duplicate, so they never queue behind data)
TAG_START, TAG_CMD, TAG_REPLY, TAG_HB, TAG_ELECT = 10, 11, 12, 13, 14


# -- startup (TAG_START, COMM_WORLD) ------------------------------------------------------
class Hello(NamedTuple):
    """Worker -> driver: this rank finished MPI init and waits for the driver."""

    rank: int
    host: str
    pid: int
    protocol: int = PROTOCOL
    numerics: tuple = ()  # its core.numerics.report(): the driver compares it with its own


class Beacon(NamedTuple):
    """Driver -> worker: still preparing (reading data); keep waiting."""

    seq: int


class Go(NamedTuple):
    """Driver -> worker: build the job's communicators over ``members`` (world ranks, 0 first)."""

    members: tuple
    heartbeat_period: float
    driver_timeout: float


# -- driver -> worker commands (TAG_CMD) --------------------------------------------------
class Setup(NamedTuple):
    """Become worker ``worker`` (this process is its ``incarnation``) and start heartbeats."""

    worker: int
    incarnation: int
    encoder: bytes  # the pickled mixle encoder
    sub_chunks: int
    heartbeat_period: float
    driver_timeout: float
    reconfigure_timeout: float
    blas_threads: int
    fault_plan: str  # JSON, as faults.parse_plan reads it
    driver_host: str = ""  # where the driver runs, and its pid: a worker on the same host
    driver_pid: int = 0  # tells a dead driver from a silent one at once
    driver_start: str = ""  # with driver_pid, its identity (procs.identity): never a reused pid
    failover: str = (
        ""  # how the survivors of a dead driver agree: "" (they do not), "ulfm", "messages", ...
    )
    store_path: str = (
        ""  # the shard store a successor reopens: a worker that cannot read it drops out
    )
    own_store: str = ""  # the store's id (with ``store_path``): a worker that opens the same store reads its shards itself
    armed: bool = (
        False  # failover is on already (a checkpoint is being written), not only asked for
    )
    driver_bell: str = ""  # the driver's doorbell (runtime/doorbell.py), "" if it rings no one
    driver_space: str = (
        ""  # the driver's pid space (procs.pid_space): its pid means something here only if equal
    )
    engine: str = "seq"  # which code computes the E-step and score (core/engine.py)


class Load(NamedTuple):
    """One block of a shard's raw rows; encode and keep the shard once ``last`` arrives."""

    shard: int
    packed: Any
    last: bool


class Fence(NamedTuple):
    """Driver -> a worker, on the heartbeat channel: SIGKILL process ``pid`` of your host if it
    is still the one that started at ``started`` (a failed worker on another host than the
    driver's, which the driver cannot signal itself)."""

    pid: int
    started: str
    worker: int


class Quiet(NamedTuple):
    """Driver -> a worker, on the heartbeat channel: my heartbeats may stop for up to
    ``seconds`` (a blocking call holds the MPI library, as MPICH's Spawn does); wait that
    much longer before taking me for gone (``heartbeat.driver_silence_limit``)."""

    seconds: float


class ReadOwn(NamedTuple):
    """Read these shards from the shard store yourself, encode and keep them (one Loaded each)."""

    shards: tuple


class Task(NamedTuple):
    """Compute ``kind`` (estep, init, llsum) of call ``call`` for ``items``: a list of
    (shard, raw rows or None for a resident shard, per-shard extra such as a seed)."""

    task_id: int
    kind: str
    call: int
    body: bytes  # pickled once per round, shared by every task of the round
    items: list
    keep: bool = (
        False  # keep shards sent with their rows encoded: a recovery that may be needed again
    )
    score_call: int = (
        -1
    )  # an E-step task that also scores its shards for this scoring call (policy/lookahead.py)


class Skip(NamedTuple):
    """Leave out ``shards`` of task ``task_id`` if not started yet: a speculative copy of them
    won elsewhere (policy/speculation_plan.py). Read by a busy worker between shards."""

    task_id: int
    shards: tuple


class Release(NamedTuple):
    """Drop the kept copies of ``shards``: their owner holds them again."""

    shards: tuple


class Reach(NamedTuple):
    """Failover: can this worker read ``path``, a file the driver just wrote beside the
    checkpoint? One that can is armed: from now on it follows a dead driver; one that cannot
    stays out (``what`` names the folder in its why)."""

    path: str
    what: str


class Shrink(NamedTuple):
    """Get ready to rebuild the communicator over ``ranks`` with ``method`` (epoch ``epoch``)."""

    epoch: int
    ranks: list
    method: str


class ShrinkGo(NamedTuple):
    """Every survivor is ready: rebuild now."""

    epoch: int


class Stop(NamedTuple):
    """The fit is over: exit 0."""


class Abort(NamedTuple):
    """The driver ends the job (before or after startup): exit with ``code`` at once. The
    driver has said why itself, so the worker stays silent."""

    code: int
    message: str = ""


# -- worker -> driver replies (TAG_REPLY) -------------------------------------------------
class Ready(NamedTuple):
    """Set up and beating; ``no_failover`` says why this worker cannot take over (failover on)."""

    worker: int
    host: str
    pid: int
    no_failover: str = ""
    reads_store: bool = False  # it opened the driver's store (Setup.own_store): it can ReadOwn
    started: str = ""  # its process's start time: with ``pid``, names it for good (a fence)
    bell: str = ""  # its doorbell, given only on the driver's host: ring it after each command
    space: str = (
        ""  # its pid space (procs.pid_space): the driver signals it only if equal to its own
    )
    numerics: tuple = ()  # its core.numerics.report(): a worker of other bits gets no shard

    @property
    def key(self) -> tuple:
        return (Ready, self.worker)


class Reached(NamedTuple):
    """The answer to ``Reach``: why this worker cannot take over, or "" (armed)."""

    worker: int
    no_failover: str

    @property
    def key(self) -> tuple:
        return (Reached, self.worker)


class Loaded(NamedTuple):
    """Shard ``shard`` is resident (``rows`` rows), or, after a ReadOwn, ``unread`` says why
    this worker could not read it (the driver then sends it)."""

    shard: int
    rows: int
    unread: str = ""

    @property
    def key(self) -> tuple:
        return (Loaded, self.shard)


class Result(NamedTuple):
    """Results of task ``task_id``: ``results`` is a list of (shard, payload), in the order
    computed, with the worker's peak RSS so far. A worker sends what it has at least every
    ``REPLY_BATCH_SECONDS`` and at the end of the task: one message per task when shards are
    quick (the fixed cost of a round), one per shard when they are slow (what a death loses)."""

    task_id: int
    results: list
    peak_rss_mb: float
    seconds: tuple = ()  # each result's compute seconds on this worker, in order: its pace


REPLY_BATCH_SECONDS = 0.05


class Stats(NamedTuple):
    """A shard's E-step payload sent ahead of its ``Result``, in a task that also scores
    (``Task.score_call``): the driver folds it while the worker computes the scores, so the
    fold is off the round's critical path. The ``Result`` that follows carries ``None`` in
    its place. Only payloads of at most ``STATS_AHEAD_MAX_BYTES`` go ahead (see there)."""

    task_id: int
    shard: int
    payload: bytes


# A message this small is delivered whole without its sender's help on every transport
# here (MPICH's shared-memory cells are 8 KiB; Open MPI's first fragment is 32 KiB, its
# eager TCP limit 64 KiB), so the driver's receive never waits on a worker that is busy
# computing its scores. A larger payload rides in the Result, as before.
STATS_AHEAD_MAX_BYTES = 4096


class ShrinkReady(NamedTuple):
    epoch: int
    worker: int

    @property
    def key(self) -> tuple:
        return (ShrinkReady, self.epoch)


class Shrunk(NamedTuple):
    epoch: int
    worker: int

    @property
    def key(self) -> tuple:
        return (Shrunk, self.epoch)


class TaskError(NamedTuple):
    """A command raised on the worker: the driver ends the job with this traceback."""

    task_id: int | None
    text: str
    host: str
    pid: int


# -- heartbeats (TAG_HB) -------------------------------------------------------------------
class Beat(NamedTuple):
    """Worker -> driver heartbeat. ``progress`` counts the main thread's steps (sub-chunks,
    shards, commands); ``busy`` is True while it holds a task. The heartbeat thread sends
    it, so a worker whose main thread is stuck still beats, but its progress stands still.
    The driver answers with ``None`` (it is alive), or with a new role (policy/fanin_plan.py).
    A relay's beat also carries its members' lines (``members``)."""

    worker: int
    incarnation: int
    seq: int
    progress: int
    busy: bool
    members: tuple = ()


# -- failover among workers, without ULFM (TAG_ELECT, the job's communicator) ----------------
class Elect(NamedTuple):
    """Worker -> every other worker: the driver is dead and ``rank`` is alive (policy/failover_plan.py)."""

    rank: int


class Survivors(NamedTuple):
    """Coordinator -> each survivor: build a communicator over ``ranks`` (``tag`` names it);
    its rank 0, the coordinator, drives."""

    ranks: tuple
    tag: str
