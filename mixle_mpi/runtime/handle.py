"""``ResilientMPIEncodedData``: the SPMD handle a user script builds on every rank.

On rank 0 it is an ordinary mixle encoded-data handle driving the fit. On every other rank
(and in a respawned process) the constructor serves the driver and never returns: the
process ends when the driver closes the handle. See docs/user-guide.md ("The Python API") for the script pattern.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import sys
import time
import warnings
from typing import Any

import numpy as np
from mixle.utils.parallel.planner import EncodedDataHandle
from mixle.utils.vector import (
    validate_initialization_probability,
    validated_initialized_observations,
)

from mixle_mpi.chaos.fault_plan import ENV_VAR as FAULT_ENV
from mixle_mpi.chaos.fault_plan import FIRED_ENV, parse_plan, plan_from_env, read_fired, unfired
from mixle_mpi.core import joblock, logs, numerics, probes
from mixle_mpi.core.errors import ConfigError, DataError, ReconfigurationTimeout
from mixle_mpi.core.estep import PROTO
from mixle_mpi.core.prefixfold import PrefixFold
from mixle_mpi.core.privatefile import new_private_file
from mixle_mpi.core.settings import Settings
from mixle_mpi.core.validate import check_int
from mixle_mpi.launch import contract
from mixle_mpi.policy import numerics_plan
from mixle_mpi.policy.lookahead import Lookahead
from mixle_mpi.policy.speculation_plan import slow_places
from mixle_mpi.runtime import exiting
from mixle_mpi.storage.events import EventLog

DEFAULT_WORKDIR = "mixle_mpi_run"
INIT_SAMPLE_NOTE = ".*with less data than they have parameters.*"


def is_driver() -> bool:
    """True only on rank 0 of the original job (a respawned process is never the driver)."""
    from mixle_mpi.runtime import startup

    MPI = startup.init_mpi()
    exiting.install_early()
    driver = MPI.Comm.Get_parent() == MPI.COMM_NULL and MPI.COMM_WORLD.Get_rank() == 0
    if driver:
        startup.start_beacon(MPI.COMM_WORLD)  # the workers wait while this rank prepares
    return driver


def _check_numerics(reports: dict, members: int) -> None:
    """Numerics auto and the workers' probes differ from the driver's: end the job before
    anything is computed, so that the launcher starts it again under the baseline. Too few
    workers of the driver's numerics: exit 2 with the fix. The others of other numerics are
    refused when they report ready (``Driver.note_ready``)."""
    from mixle_mpi.runtime import startup

    relaunch, refused = numerics_plan.at_startup(numerics.report(), reports)
    if relaunch:
        raise startup.NumericsDiffer(relaunch)
    too_few = numerics_plan.too_few(members - len(refused), 1, refused)
    if too_few:
        raise ConfigError(too_few)


def _warm_serialization() -> None:
    """Build mixle's serialization registry in the background (about 2 s of imports and class
    checks, once per process): the fit's first ``to_json`` (the checkpoint's estimator
    fingerprint) would otherwise pay it before the first E-step. Started once the workers
    answered (a job that fails on its input never pays it), it overlaps building the shard
    store and setting up and loading the workers. The registry builds under its own lock,
    so a ``to_json`` that comes first simply waits for it.

    Only on request (``warm_serialization=True``: the CLI and the fit job, which write JSON
    and checkpoints): while it runs it takes a core and, every few milliseconds, the
    interpreter from the driver's main thread, which delays the replies of the first rounds
    of a fit that may never need the registry."""
    from mixle.utils.serialization import ensure_pysp_serialization_registry

    from mixle_mpi.core.deadlines import Background

    Background(ensure_pysp_serialization_registry, "serialization-registry")


class ResilientMPIEncodedData(EncodedDataHandle):
    """Resilient MPI sibling of mixle's ``ResilientMPEncodedData``.

    Shards are the fixed ids ``0..S-1`` (shard i = ``data[i::S]``, sub-chunk j =
    ``shard[j::sub_chunks]``); results are folded in shard-id order, so a fit is
    bit-identical to ``ResilientMPEncodedData(num_workers=S, sub_chunks=k)`` whatever the
    number of ranks and whatever fails. ``data`` is needed on rank 0 only (an in-memory
    sequence, an ndarray or an ``h5py.Dataset``); it is written to an HDF5 shard store and
    not kept in memory.

    Keyword-only extras: ``workdir`` (store and event log; default ``$MIXLE_MPI_WORKDIR``
    or ``./mixle_mpi_run``), ``store_path``, ``event_log``, ``fault_plan`` (see
    :mod:`mixle_mpi.chaos.fault_plan`), ``keep_store`` (keep the shard store, a full owner-only copy
    of the data, after :meth:`close`; it is deleted by default), ``warm_serialization`` (build
    mixle's serialization registry in the background while the workers load: for fits that
    write checkpoints or JSON, which need it), and the
    :class:`~mixle_mpi.core.settings.Settings` fields ``heartbeat_period``, ``heartbeat_timeout``,
    ``driver_timeout``, ``reconfigure_timeout``, ``stall_timeout``, ``blas_threads`` and
    ``respawn``.
    """

    journal = None  # a FoldJournal while fitloop.fit(journal=True) runs
    checkpoint_due = (
        None  # fitloop.fit: is the checkpoint after the next scoring due? (policy/lookahead.py)
    )

    def __init__(
        self,
        data: Any,
        estimator: Any = None,
        encoder: Any = None,
        num_shards: int | None = None,
        sub_chunks: int = 1,
        max_retries: int = 2,
        *,
        workdir: str | None = None,
        store_path: str | None = None,
        event_log: str | None = None,
        fault_plan: Any = None,
        keep_store: bool = False,
        warm_serialization: bool = False,
        **settings: Any,
    ) -> None:
        from mixle_mpi.runtime import startup

        MPI = startup.init_mpi()
        self._driver = None
        self.keep_store = bool(keep_store)
        self.warm_serialization = bool(warm_serialization)
        self._group_comm = None
        self._aborted = False
        self.closed_cleanly = False
        if MPI.Comm.Get_parent() != MPI.COMM_NULL:  # a respawned worker: join the driver and serve
            exiting.install("worker")
            from mixle_mpi.runtime.worker import serve_spawned

            serve_spawned(MPI.Comm.Get_parent())
        world = MPI.COMM_WORLD
        self.took_over = None  # a Takeover: this rank drives after the first driver died
        if world.Get_rank() != 0:
            exiting.install("worker")
            from mixle_mpi.runtime.worker import serve_original

            self.took_over = serve_original(
                world
            )  # returns only with failover on, to the successor
            world = self.took_over.comm

        exiting.install("driver", self)
        try:
            self._start(
                data,
                estimator,
                encoder,
                num_shards,
                sub_chunks,
                max_retries,
                workdir,
                store_path,
                event_log,
                fault_plan,
                settings,
                world,
            )
        except BaseException as exc:
            self.abort_workers(exiting.exit_code_for(exc), f"{type(exc).__name__}: {exc}")
            raise

    # -- driver setup ------------------------------------------------------------
    def _start(
        self,
        data,
        estimator,
        encoder,
        num_shards,
        sub_chunks,
        max_retries,
        workdir,
        store_path,
        event_log,
        fault_plan,
        settings,
        world,
    ) -> None:
        """Check the configuration, hold the work folder, meet the workers, write the shard
        store and start the Driver; every problem of the user's input is found here."""
        from mpi4py import MPI

        from mixle_mpi.core.blas import pin_blas_threads
        from mixle_mpi.policy.failover_plan import failover_status
        from mixle_mpi.policy.reconfig_plan import spawn_unavailable, srun_plugin
        from mixle_mpi.runtime import startup
        from mixle_mpi.runtime.driver import Driver
        from mixle_mpi.runtime.shrink import probe_continuation
        from mixle_mpi.runtime.wiring import over_mpi

        workers, spares, num_shards = self._check_config(
            world.Get_size(), num_shards, sub_chunks, max_retries, settings
        )
        plan = self._fault_plan(fault_plan)
        encoder = self._encoder(data, estimator, encoder)
        store_path, event_log = self._work_paths(workdir, store_path, event_log)
        members, excluded, group_comm, group_beats = self._handshake(world)
        # How to continue after a failure: probed now, while PMIx is still there to answer.
        method, reason = probe_continuation()
        detached = (
            startup.detach_from_slurm_pmix()
        )  # srun --mpi=pmix: a death must not end the step
        startup.release_mpich_shm()  # MPICH: no /dev/shm segment outlives the job (no MPI_Finalize here)
        no_spawn = spawn_unavailable(MPI.get_vendor()[0], srun_plugin(os.environ))
        ranks = {
            w: i + 1 for i, w in enumerate(members)
        }  # worker id (world rank) -> rank in group_comm
        monitor = self._monitor(group_comm, group_beats, ranks)
        self._blas = pin_blas_threads(self.settings.blas_threads)
        self._open_store(data, num_shards, store_path, workers - spares, estimator, encoder)
        self.events = EventLog(event_log)
        self.shrink_method = method
        self._emit_start(workers, spares, method, reason, plan)
        failover, failover_why = failover_status(self.settings.failover, method)
        self.events.emit(
            "continuation",
            method=method,
            reason=reason,
            pmix=detached,
            failover=failover_why,
            respawn=("unavailable: " + no_spawn)
            if no_spawn
            else ("on" if self.settings.respawn else "off (respawn=False)"),
        )
        wiring = over_mpi(
            group_comm,
            group_beats,
            ranks,
            self.settings,
            _spawn_command(),
            _spawn_command(fast=True),
            no_spawn,
        )
        self._driver = Driver(
            group_comm,
            ranks,
            workers,
            monitor,
            self.store,
            pickle.dumps(encoder, protocol=PROTO),
            self.sub_chunks,
            self.max_retries,
            self.settings,
            self.events,
            plan,
            method,
            wiring,
            spares,
            failover=failover,
        )
        self._driver.start(excluded)
        self.events.emit(
            "ranks",
            ranks=rank_places(self._driver.membership),
            numerics={"driver": self._driver.numerics._asdict(), "workers": self._driver.probes},
        )
        self._estimator = (
            None  # the last E-step's or initialization's: a scoring round computes ahead with it
        )
        self._ahead = Lookahead(self.settings.estep_ahead)
        contract.mark_started()

    def _check_config(
        self, world_size: int, num_shards, sub_chunks, max_retries, settings
    ) -> tuple[int, int, int | None]:
        """(workers, spares, num_shards) of this job, its settings resolved; a world too small
        for them is a clear error."""
        if world_size < 2 and self.took_over is not None:
            raise ReconfigurationTimeout(
                f"the driver died and rank {self.took_over.previous} took over, but no other rank survived to "
                "compute: nothing saved is lost; run the same command again to resume from the checkpoint"
            )
        if world_size < 2:
            raise ConfigError(
                f"found {world_size} MPI rank but needs at least 2: rank 0 drives and ranks 1.. compute "
                "(launch with e.g. `mixle-mpi run -n 3 -- python script.py`)"
            )
        workers = world_size - 1
        num_shards = None if num_shards is None else check_int("num_shards", num_shards, 1)
        self.sub_chunks = check_int("sub_chunks", sub_chunks, 1)
        self.max_retries = check_int("max_retries", max_retries, 1)
        self.settings = Settings.resolve(settings)
        spares = self.settings.spares
        if self.took_over is not None:  # fewer ranks than at the start: spares are workers first
            spares = min(spares, workers - 1)
        if spares > workers - 1:
            raise ConfigError(
                f"found {world_size} MPI ranks but spares={spares} needs at least {spares + 2}: 1 driver, at least "
                f"1 worker and {spares} spare(s) (with -n N, mixle-mpi fit launches N + spares ranks)"
            )
        return workers, spares, num_shards

    def _fault_plan(self, fault_plan) -> tuple:
        """The faults still to fire: the ones given, or the environment's (said loudly). A fault
        fires once per job: one the fault log records (under an earlier driver, or before the
        launcher ran the job again) is spent."""
        plan = parse_plan(fault_plan) if fault_plan is not None else plan_from_env()
        self.fault_plan = [
            dict(f.__dict__) for f in plan
        ]  # summary.json says a run was under chaos
        if (
            plan and fault_plan is None
        ):  # a test setting left in the environment must never act unseen
            logs.get("driver").warning(
                f"chaos: {len(plan)} planned fault(s) from {FAULT_ENV} will kill or stop "
                f"processes of this job; unset it for a real fit"
            )
        return tuple(unfired(plan, read_fired(os.environ.get(FIRED_ENV))))

    def _encoder(self, data, estimator, encoder):
        """The encoder the workers use: given, the estimator's, or (after a takeover) the dead
        driver's."""
        if encoder is None and estimator is None and self.took_over is not None:
            encoder = pickle.loads(self.took_over.encoder)  # nosec B301 - this job's own driver sent it
        if encoder is None:
            if estimator is None:
                raise ConfigError(
                    "ResilientMPIEncodedData needs an estimator or an explicit encoder; found neither"
                )
            encoder = estimator.accumulator_factory().make().acc_to_encoder()
        if data is None and self.took_over is None:
            raise DataError(
                "data is None on the driver (rank 0): the driver needs the data; workers may pass None"
            )
        return encoder

    def _work_paths(self, workdir, store_path, event_log) -> tuple[str, str]:
        """The shard store's and the event log's paths; the work folder made and held by this
        job (a second job on it is refused)."""
        workdir = workdir or os.environ.get("MIXLE_MPI_WORKDIR") or DEFAULT_WORKDIR
        store_path = store_path or os.path.join(workdir, "shards.h5")
        event_log = (
            event_log
            or os.environ.get("MIXLE_MPI_EVENT_LOG")
            or os.path.join(workdir, "events.jsonl")
        )
        ensure_dir(os.path.dirname(os.path.abspath(store_path)), "shard store")
        hold_folder(
            os.path.dirname(os.path.abspath(store_path)), "work", strict=self.took_over is None
        )
        self.workdir = os.path.dirname(
            os.path.abspath(store_path)
        )  # this job's folder: fit's default checkpoint
        return store_path, event_log

    def _handshake(self, world) -> tuple[list[int], list, Any, Any]:
        """Meet the workers: from here on they wait on heartbeats, not on a fixed deadline.
        Returns the members, the ranks left out, and the job's communicators."""
        from mixle_mpi.runtime import startup

        timeout = contract.startup_timeout()
        # ranks of this host that die while the job starts (their records name world ranks:
        # not after a takeover, whose communicator numbers the survivors anew)
        gone = startup.RanksGone() if self.took_over is None else None
        reports: dict = {}
        members, excluded = startup.gather_workers(world, timeout, gone=gone, reports=reports)
        _check_numerics(reports, len(members))
        if self.warm_serialization:  # the input is valid and the workers are up: a fit follows
            _warm_serialization()
        startup.send_go(
            world, members, self.settings.heartbeat_period, self.settings.driver_timeout
        )
        group_comm, group_beats = startup.build_comms(world, tuple([0] + members), timeout, gone)
        self._group_comm = group_comm
        return members, excluded, group_comm, group_beats

    def _monitor(self, group_comm, group_beats, ranks: dict[int, int]):
        """Heartbeats and the main thread's watchdog, watching every worker from now on."""
        from mixle_mpi.policy.heartbeat import WATCHDOG_MARGIN
        from mixle_mpi.runtime.monitor import Monitor
        from mixle_mpi.runtime.transport import Link
        from mixle_mpi.runtime.watchdog import Watchdog

        st = self.settings
        monitor = Monitor(
            st.heartbeat_period, st.heartbeat_timeout, st.stall_timeout, st.heartbeat_fanin
        )
        monitor.watchdog = Watchdog(monitor, st.reconfigure_timeout + WATCHDOG_MARGIN)
        for w, r in ranks.items():
            monitor.watch(w, Link(group_comm, group_beats, r))
        monitor.start()
        return monitor

    def _open_store(
        self, data, num_shards, store_path: str, holders: int, estimator, encoder
    ) -> None:
        """The shard store: written from ``data``, or (after a takeover) the dead driver's, on
        a path every rank reads."""
        from mixle_mpi.storage.store import ShardStore

        self.store = (
            ShardStore.create(store_path, data, num_shards)
            if self.took_over is None
            else ShardStore.open(store_path)
        )
        self.num_shards = self.store.num_shards
        self.size = self.store.num_rows
        if self.num_shards < holders:
            logs.get("handle").warning(
                f"{self.num_shards} shards for {holders} workers: {holders - self.num_shards} worker(s) hold no "
                f"shard and serve as spares; pass --num-shards (num_shards=) >= {holders} to give every worker "
                "shards (S fixes the bits)"
            )
        _check_estimator_matches(self.store, estimator, encoder)

    def _emit_start(self, workers: int, spares: int, method: str, reason: str, plan: tuple) -> None:
        """The start event, and after a takeover the dead driver and its successor."""
        from mpi4py import MPI

        from mixle_mpi.core.blas import blas_description
        from mixle_mpi.runtime import startup

        self.events.emit(
            "start",
            driver_pid=os.getpid(),
            workers=workers - spares,
            spares=spares,
            num_shards=self.num_shards,
            sub_chunks=self.sub_chunks,
            max_retries=self.max_retries,
            shrink=method,
            shrink_reason=reason,
            mpi=startup.mpi_text(),
            blas=blas_description(),
            settings=self.settings.__dict__,
            fault_plan=[f.__dict__ for f in plan],
        )
        for r in contract.relaunches()[
            -1:
        ]:  # this launch is the relaunch the last record describes
            self.events.emit("relaunched", **r)
        if self.took_over is not None:
            t = self.took_over
            self.events.emit(
                "driver_failed",
                host=t.driver[0],
                pid=t.driver[1],
                cause=t.why,
                seen_at=t.lost_at,
                seen_by=t.previous,
            )
            self.events.emit(
                "driver_elected",
                rank=t.previous,
                pid=os.getpid(),
                host=MPI.Get_processor_name(),
                survivors=t.survivors,
                agreed_seconds=round(t.agreed_seconds, 4),
            )

    def abort_workers(self, code: int = 1, message: str = "") -> None:
        """Tell every worker to end now with ``code`` (the driver is failing); bounded, once."""
        from mixle_mpi.runtime import startup
        from mixle_mpi.runtime.transport import abort_peers

        if self._aborted:
            return
        self._aborted = True
        if self._driver is not None:
            if not self._driver.closed:
                self._driver.abort_workers(code)
                self._driver.closed = True
        elif self._group_comm is not None:
            abort_peers(self._group_comm, range(1, self._group_comm.Get_size()), code)
        else:
            from mpi4py import MPI

            startup.abort_startup(
                MPI.COMM_WORLD if self.took_over is None else self.took_over.comm, code, message
            )

    def claim_checkpoint(self, checkpoint: str) -> None:
        """This fit's checkpoint is this job's alone (``hold_checkpoint``; a successor that
        took over from a dead driver goes on whatever its lock says)."""
        hold_checkpoint(checkpoint, strict=self.took_over is None)

    # -- instrumentation -----------------------------------------------------------
    def check_failover_reach(self, checkpoint: str) -> None:
        """Failover arms here, when a fit with a ``checkpoint`` starts (without one there is
        nothing to resume from: a plain ``optimize`` ends with its driver, as without
        failover). A successor resumes from the checkpoint, so a worker that cannot read its
        folder (a node-local path) must not take over: it is asked about a file written there
        now, and one that cannot see it stays out (event ``failover_unavailable``, a warning)."""
        if not self._driver.failover:
            return
        if not checkpoint:
            logs.get("handle").warning(
                "failover stays off for this fit: it writes no checkpoint for a successor to "
                "resume from (pass a checkpoint); a dead driver ends the job"
            )
            return
        marker = f"{os.path.abspath(checkpoint)}.reach.{os.getpid()}.{secrets.token_hex(4)}"
        new_private_file(
            marker, "mixle_mpi: can every rank read the checkpoint's folder? (removed at once)\n"
        )
        try:
            self._driver.reach(marker, "the checkpoint's folder")
        finally:
            os.remove(marker)

    def note_resumed(self, iteration: int) -> None:
        """After a takeover: log that this rank drives the fit again from ``iteration`` (the
        checkpoint's, 0 if none was written), and how long after the old driver died."""
        t = self.took_over
        if t is None:
            return
        from mpi4py import MPI

        self.events.emit(
            "driver_resumed",
            rank=t.previous,
            pid=os.getpid(),
            host=MPI.Get_processor_name(),
            iteration=iteration,
            ranks=self._group_comm.Get_size(),
            since_death=round(time.time() - t.lost_at, 3),
        )

    @property
    def rounds(self) -> list[dict]:
        """Every round so far: kind, call, seconds, reused, recomputed, failed, blacklisted."""
        return list(self._driver.rounds)

    @property
    def driver_shards(self) -> list[int]:
        """The shards the driver computes itself (settings ``driver_computes`` and
        ``driver_share_max_bytes``); no worker holds them."""
        return list(self._driver.places.here)

    @property
    def slow_workers(self) -> dict[int, float]:
        """Live workers slower than ``speculation_multiplier`` times the median, each with how
        many times slower (policy/speculation_plan.py): for progress lines and ``status``."""
        d = self._driver
        return slow_places(d.paces, "estep", d.live(), self.settings.speculation_multiplier)

    @property
    def membership(self):
        """Who is live, failed or blacklisted (``policy.membership.Membership``), for reports
        and progress lines: read it, never change it (the driver decides)."""
        return self._driver.membership

    def fault_point(self, phase: str, call: int) -> None:
        """The driver's own chaos hook (``chaos/fault_actor.py``) at ``phase`` of ``call``: a fit
        loop's checkpoint write is one."""
        self._driver.faults.check(phase, call)

    @property
    def failures(self) -> dict[int, int]:
        return self._driver.membership.failures()

    @property
    def blacklist(self) -> list[int]:
        return self._driver.membership.blacklisted()

    @property
    def peak_rss_mb(self) -> dict[int, float]:
        """Peak resident memory in MiB per rank: 0 is the driver; a worker's is the highest
        its processes (a respawned one too) reported with their results."""
        from mixle_mpi.core.malloc import peak_rss_mb

        return {0: peak_rss_mb(), **dict(sorted(self._driver.mail.peak_rss_mb.items()))}

    # -- protocol recognized by mixle.stats dispatch -------------------------------
    def _folded(
        self, kind: str, estimator: Any, body: Any, extras: dict | None = None
    ) -> tuple[float, Any]:
        """One round of ``kind`` folded as its results arrive, in shard-id order (the bits of
        ``checkpointed_fold``); with the fold journal, results already journaled are reused."""
        if self.journal is None or kind != "estep":
            body_pickled = None
            if kind == "estep":
                body_pickled = pickle.dumps(body, protocol=PROTO)
                ahead = self._take_ahead(body_pickled)
                if ahead is not None:  # the scoring round computed this E-step already
                    return ahead.result()
            fold = PrefixFold(estimator, self.num_shards)
            self._driver.run_round(kind, body, extras, fold=fold.add, body_pickled=body_pickled)
            return fold.result()
        fold = PrefixFold(estimator, self.num_shards)
        found = self.journal.begin_round(*body)
        if found:
            self.events.emit("journal_reused", shards=sorted(found), path=self.journal.path)
        self._driver.run_round(
            kind, body, preloaded=found, record=self.journal.record, fold=fold.add
        )
        return fold.result()

    def _take_ahead(self, body_pickled: bytes) -> PrefixFold | None:
        """The E-step of ``body_pickled`` if the last scoring round computed it (policy/lookahead.py)."""
        was_on = self._ahead.on
        ahead = self._ahead.take(body_pickled)
        if was_on and not self._ahead.on:
            self.events.emit("estep_ahead_off", hits=self._ahead.hits, misses=self._ahead.misses)
        return ahead

    @probes.spanned("estep_call")
    def pysp_seq_estimate(self, estimator: Any, prev_estimate: Any) -> Any:
        """One resilient EM step: E-step on the workers, canonical fold and M-step here."""
        self._estimator = estimator
        nobs, value = self._folded("estep", estimator, (estimator, prev_estimate))
        return estimator.estimate(nobs, value)

    def pysp_stream_accumulate(self, estimator: Any, model: Any) -> tuple[float, Any]:
        """Folded, key-tied sufficient statistics for streaming EM."""
        self._estimator = estimator
        return self._folded("estep", estimator, (estimator, model))

    def pysp_seq_initialize(self, estimator: Any, rng: np.random.RandomState, p: float) -> Any:
        """Randomized initialization; each shard uses its own seed from ``rng``."""
        p = validate_initialization_probability(p)
        self._estimator = estimator
        seeds = rng.randint(2**31, size=self.num_shards)
        nobs, value = self._folded(
            "init",
            estimator,
            (estimator, float(p)),
            {s: int(seeds[s]) for s in range(self.num_shards)},
        )
        with warnings.catch_warnings():
            # The initial model is estimated from an init_p sample, so a component with fewer
            # rows than parameters is expected here: EM's first step re-estimates it from all
            # the data, and mixle says so again then if it still holds.
            warnings.filterwarnings("ignore", message=INIT_SAMPLE_NOTE)
            return estimator.estimate(validated_initialized_observations(nobs), value)

    @probes.spanned("llsum_call")
    def pysp_seq_log_density_sum(self, estimate: Any) -> tuple[float, float]:
        """(count, log density) summed per shard in shard-id order. The round also computes
        the E-step of ``estimate`` where the next call is likely to ask for it
        (policy/lookahead.py)."""
        saving = self.journal is not None or (
            self.checkpoint_due is not None and self.checkpoint_due()
        )
        if self._ahead.wanted(self._estimator is not None, saving):
            body = (self._estimator, estimate)
            body_pickled = pickle.dumps(body, protocol=PROTO)
            fold, results = PrefixFold(self._estimator, self.num_shards), {}
            self._driver.run_round(
                "estep", body, fold=fold.add, body_pickled=body_pickled, scores=results
            )
            self._ahead.computed(body_pickled, fold)
        else:
            results = self._driver.run_round("llsum", estimate)
        count, score = 0.0, 0.0
        for s in range(self.num_shards):
            c, ll = results[s]
            count += c
            score += ll
        return count, score

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Stop the workers (they exit) and release the store, then delete it (a full copy
        of the user's data) unless ``keep_store``. Idempotent. A fit that ends in an error
        or a preemption never gets here, so its store stays for inspection."""
        if self._driver is not None and not self._driver.closed:
            self._driver.close()
            self.store.close()
            if not self.keep_store:
                try:
                    os.remove(self.store.path)
                except OSError:
                    pass
            self.closed_cleanly = True

    def _finish(self) -> None:
        """Called once at process exit, after the status is written (see exiting.py)."""
        if self._driver is not None:
            self._driver.finish()
            self.events.close()

    def __len__(self) -> int:
        return int(self.size)

    def __enter__(self) -> "ResilientMPIEncodedData":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()


def hold_folder(folder: str, what: str, strict: bool = True) -> None:
    """One job per folder (``joblock.hold``): another live job's folder is refused with
    exit 2; a dead job's lock is taken over, with a line that says so. A survivor taking over
    from a dead driver (``strict`` False) goes on whatever the lock says: on a network file
    system the dead driver's lock may outlive it for a while, and ending the fit then loses
    more than the lock protects."""
    _hold(lambda: joblock.hold(folder, what), strict)


def hold_checkpoint(path: str, strict: bool = True) -> None:
    """One job per checkpoint (``joblock.hold_file``), as ``hold_folder`` is per folder:
    two fits with their own output folders and one ``--checkpoint`` would rotate each
    other's files."""
    _hold(lambda: joblock.hold_file(path, "checkpoint"), strict)


def _hold(take, strict: bool) -> None:
    try:
        note = take()
    except ConfigError as exc:
        if strict:
            raise
        logs.get("driver").warning(f"{exc}; going on: this process took over from the dead driver")
        return
    if note:
        logs.get("driver").warning(note)


def ensure_dir(path: str, what: str) -> None:
    """Create ``path`` if needed; a ConfigError that names ``what`` if it is not writable."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the {what} directory {path!r}: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"the {what} directory {path!r} is not writable")


def _spawn_command(fast: bool = False) -> list[str]:
    """How to start a replacement worker: this very script, as it was started, or (``fast``)
    mixle_mpi's own entry, which joins the driver before importing anything heavy (see
    replacement_entry.py). Under MPICH it runs inside the rank wrapper, or Hydra would end the job
    when it dies."""
    from mpi4py import MPI

    from mixle_mpi.launch.rankwrapper import wrapper_path

    if fast:
        command = [
            sys.executable,
            "-m",
            "mixle_mpi.runtime.replacement_entry",
            "--path",
            sys.path[0] or os.getcwd(),
        ]
    else:
        argv = list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
        command = [sys.executable] + argv[1:]
    if MPI.get_vendor()[0] == "MPICH":
        return ["sh", wrapper_path(), "--worker"] + command
    return command


def rank_places(membership) -> dict[str, str]:
    """Where each rank runs, "host:pid", the driver as "0" (for the log and ``status``)."""
    places = {"0": f"{socket.gethostname()}:{os.getpid()}"}
    for w, rec in sorted(membership.records.items()):
        if rec.pid is not None:
            places[str(w)] = f"{rec.host}:{rec.pid}"
    return places


def _check_estimator_matches(store, estimator, encoder) -> None:
    """Encode (and initialize on) the first rows, so a wrong estimator fails now, clearly."""
    from mixle_mpi.storage.store import rows_from_packed

    rows = rows_from_packed(store.read_packed(0, 0, 8))  # only the head: shard 0 may be huge
    try:
        x = encoder.seq_encode(rows)
        if estimator is not None:
            acc = estimator.accumulator_factory().make()
            acc.seq_initialize(x, np.ones(len(rows)), np.random.RandomState(0))
    except Exception as exc:  # noqa: BLE001 - any failure here means "does not match"
        name = type(estimator).__name__ if estimator is not None else type(encoder).__name__
        raise DataError(
            f"the estimator {name} does not match the data: encoding and initializing the first "
            f"rows failed with {type(exc).__name__}: {exc}. First row found: {rows[0]!r:.200}"
            + several_values_hint(rows[0])
        ) from None


def several_values_hint(row) -> str:
    """When each row holds several numbers, a 1-D estimator is the likely mistake: name the
    multivariate ones (mixle's own advice to flatten would silently mix the columns up)."""
    size = np.size(row) if isinstance(row, (np.ndarray, list, tuple)) else 1
    if size <= 1:
        return ""
    return (
        f". Each row holds {size} values, one per variable: do not flatten the rows (that would mix the "
        f"variables up); use a multivariate estimator instead, such as "
        f"DiagonalGaussianEstimator(dim={size}) or MultivariateGaussianEstimator(dim={size}) "
        "(see the user guide's table of models)"
    )
