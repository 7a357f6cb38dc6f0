"""``fit``: mixle's optimize with exact checkpoints, resume and preemption.

mixle's EM loop reports every accepted iteration to ``on_step`` and resumes from
``prev_estimate``; the E-step is deterministic, so a fit resumed from the model after
iteration k replays iterations k+1.. to the same bits. Checkpoints are written by the
driver only (see :mod:`mixle_mpi.storage.checkpoint`). SIGTERM (and SIGUSR1, unless it is ignored
as under MPICH's rank wrapper) asks the driver to checkpoint at the end of the current
iteration and exit with code 75, "checkpointed, please requeue"; SIGINT (Ctrl-C, which
``mixle-mpi run`` passes on to the driver) does the same and exits 130.

A fit may span several job segments (a first run, then a resume after each requeue);
each checkpoint keeps the wall time of every segment so far, so the summary can report
the whole fit's time as well as the last segment's (:class:`Segments`).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import signal
import socket
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle_mpi.core import exitcodes, liveness, logs
from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.errors import Interrupted, Preempted, PreemptedUnsaved  # noqa: F401 - public here too (fitloop.Preempted)
from mixle_mpi.core.options import AUTO
from mixle_mpi.core.validate import sha256_text
from mixle_mpi.fitting.cadence import CHECKPOINT_NAME, Cadence
from mixle_mpi.fitting.progress import may_end_em, stop_reason
from mixle_mpi.launch import contract
from mixle_mpi.storage import checkpoint as ckpt

# mixle's notes on how a run stopped: the fit's own final line says it, in our words.
MIXLE_STOP_NOTES = (".*max_its cap.*", ".*called with delta=None.*")


@dataclass
class Segments:
    """The wall time of a fit that may span several job segments (requeues): the seconds
    of the earlier segments, as their last checkpoint recorded them, plus this one's."""

    started: float = field(default_factory=time.monotonic)  # this segment's start
    before: float = 0.0  # earlier segments, in seconds
    count: int = 1  # segments so far, this one included

    def resumed(self, state: ckpt.FitState) -> None:
        """Take the earlier segments from a checkpoint (the latest of several restarts wins)."""
        self.before = max(self.before, float(state.wall_seconds))
        self.count = max(self.count, int(state.segments) + 1)

    def this_segment(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.started

    def total(self, now: float | None = None) -> float:
        return self.before + self.this_segment(now)


class _StopFlag:
    def __init__(self) -> None:
        self.signal: int | None = None

    def install(self) -> None:
        sigs = [signal.SIGTERM, signal.SIGINT]
        if signal.getsignal(signal.SIGUSR1) != signal.SIG_IGN:
            sigs.append(signal.SIGUSR1)
        for s in sigs:
            signal.signal(s, self._handler)
        from mixle_mpi.runtime.exiting import write_driver_pid

        write_driver_pid()  # from now on the launcher may forward SIGTERM/SIGUSR1 here

    def _handler(self, signum, frame) -> None:
        self.signal = signum

    def asked(self) -> int | None:
        """The signal to act on: one received, or one the launcher asked for through the run
        folder (it cannot signal a driver on another host: ``contract.request_stop``)."""
        return self.signal if self.signal is not None else contract.stop_requested()


def write_within(path: str, state, before_rename, seconds: float) -> None:
    """``checkpoint.write`` in a helper thread, waited for at most ``seconds``: a write to a
    hung file system would stop the driver's main thread for good while its heartbeat
    thread went on, so nothing would ever end the job. Past the deadline the fit ends with
    ``CheckpointTimeout`` (exit CHECKPOINT_TIMEOUT, which the launcher runs again to resume);
    the previous checkpoint is intact (the write goes to a temporary name first)."""
    try:
        run_with_deadline(
            lambda: ckpt.write(path, state, before_rename=before_rename),
            seconds,
            "the checkpoint write",
        )
    except TimeoutError as exc:
        raise ckpt.CheckpointTimeout(
            f"{exc} (checkpoint {path}): its file system may hang; the previous checkpoint "
            f"is intact, and a rerun resumes from it"
        ) from None


def versions(blas_threads: int) -> dict:
    """The versions that the fitted bits depend on."""
    from mixle_mpi.runtime.startup import mpi_text

    return {
        "mixle": md.version("mixle"),
        "numpy": np.__version__,
        "mpi": mpi_text(),
        "blas_threads": int(blas_threads),
    }


def _whole_fit_provenance(model, iterations: int, max_its: int) -> None:
    """optimize's fit receipt describes only the resumed part; make it describe the whole
    fit, as the uninterrupted run's does (it is part of the model's JSON)."""
    import dataclasses

    prov = model.fit_provenance() if hasattr(model, "fit_provenance") else None
    if prov is not None:
        model._fit_provenance = dataclasses.replace(
            prov, iterations=iterations, max_iterations=max_its
        )


def stopped(signum: int, iteration: int, checkpoint: str | None) -> Preempted:
    """The error that ends a fit stopped by a signal: what happened and what to do (pure)."""
    name, interrupted = signal.Signals(signum).name, signum == signal.SIGINT
    saved = (
        f"checkpoint written to {checkpoint}{'' if interrupted else ', ready for a requeue'}: rerun the same "
        "command to resume"
        if checkpoint
        else "no checkpoint path was given (--checkpoint), so nothing was saved"
    )
    if interrupted:
        return Interrupted(f"interrupted (Ctrl-C, {name}) after iteration {iteration}; {saved}")
    if (
        not checkpoint
    ):  # never claim a checkpoint: exit 76, which the SLURM templates do not requeue
        return PreemptedUnsaved(
            f"preempted: received {name} after iteration {iteration}; {saved}; a rerun starts "
            f"over (exit {exitcodes.PREEMPTED_UNSAVED}, not requeued)"
        )
    return Preempted(f"preempted: received {name} after iteration {iteration}; {saved}")


def _resume_state(checkpoint: str, resume: str, current: ckpt.FitState, allow_version_change: bool):
    """The checkpoint to resume (or None), with the file actually read and why the newest
    one was not (a fallback to ``.prev``); a refusal says what to pass to resume it."""
    fallback: list[tuple[str, str]] = []
    state = ckpt.read(checkpoint, on_fallback=lambda p, why: fallback.append((p, why)))
    if state is None:
        if resume == "yes":
            raise ckpt.CheckpointError(f"resume='yes' but there is no checkpoint at {checkpoint!r}")
        return None, fallback
    refused = ckpt.refusal(
        fallback[0][0] if fallback else checkpoint, state, current, allow_version_change
    )
    if refused:
        raise ckpt.CheckpointError(refused)
    return state, fallback


def _say_starting_over_after_a_lost_host(checkpoint: str) -> None:
    """A launch after a lost host that finds no checkpoint starts over: said, with the path
    and this host, since the driver may now run on another host than before, and a
    checkpoint in a folder only the lost host saw (its own /tmp, a local disk) is gone with it."""
    lost = [h for r in contract.relaunches() for h in r.get("lost_hosts", [])]
    if lost:
        logs.get("fit").warning(
            f"launched again without lost host(s) {', '.join(map(str, lost))}, this job finds no checkpoint at "
            f"{checkpoint} on this host ({socket.gethostname()}): the fit starts over. For a relaunch to resume "
            "wherever its driver runs, the checkpoint must be in a folder every host sees (a shared file system)"
        )


def fit(
    enc,
    estimator,
    *,
    max_its: int = 100,
    delta: float | None = 1e-9,
    init_p: float = 0.1,
    seed: int = 1,
    checkpoint: str | None = "auto",
    every: int | None = None,
    seconds: float | None = None,
    resume: str = "auto",
    allow_version_change: bool = False,
    journal: bool = False,
    out=None,
    on_iteration=None,
    segments: Segments | None = None,
    on_finish=None,
) -> tuple[Any, list[float]]:
    """Fit with ``optimize`` on the driver; returns (model, log-likelihood per iteration).

    ``checkpoint`` is an HDF5 path ("auto", the default: ``checkpoint.h5`` in the handle's
    work folder, so the same script run again resumes; None: no checkpoint); a checkpoint is
    written every ``every`` iterations and/or every ``seconds`` seconds, and once at the end
    (the step that ends EM gets only that one, see
    :func:`~mixle_mpi.fitting.progress.may_end_em`). Neither given: after the first iteration,
    then every 60 s, at most 2 % of the wall time (:mod:`mixle_mpi.fitting.cadence`). The
    scoring round of an iteration whose checkpoint is due computes no E-step ahead
    (policy/lookahead.py); the others do. ``resume``: "auto" resumes when a checkpoint exists,
    "yes" requires one, "no" starts afresh (overwriting).
    ``journal`` also persists each E-step round's received shard payloads to
    ``<checkpoint>.round.h5``, so a driver killed mid-round recomputes only the missing
    shards after resuming (off by default: one small HDF5 write per shard and round).
    ``on_iteration(iteration, ll, checkpointed)`` is called after each accepted iteration,
    once its checkpoint (if one was due) is on disk; ``checkpointed`` is its path or None.
    ``segments`` keeps the wall time over job segments (a new one starts now by default).
    ``on_finish(reason)`` is told how EM stopped ("converged", "max_its" or "unchanged",
    see :func:`~mixle_mpi.fitting.progress.stop_reason`); for a checkpoint that holds a finished fit,
    as that fit stopped, whatever ``max_its`` is now.
    """
    from mixle.utils.serialization import from_json

    if resume not in ("auto", "yes", "no"):
        raise ckpt.ConfigError(f"resume must be 'auto', 'yes' or 'no'; found {resume!r}")
    segments = segments or Segments()
    config = {"delta": delta, "init_p": init_p, "seed": seed}
    current = _fresh_state(enc, estimator, config)
    checkpoint = _checkpoint_path(enc, checkpoint)
    state = _resumed(enc, checkpoint, resume, current, allow_version_change, segments)
    if state is not None and state.finished:
        if on_finish is not None:
            on_finish(state.stopped or ("converged" if state.converged else "max_its"))
        return from_json(state.model), list(state.ll)
    if checkpoint and journal:
        from mixle_mpi.storage.journal import FoldJournal

        enc.journal = FoldJournal(checkpoint + ".round.h5", current.fingerprint["data"])
    stop = _StopFlag()
    steps = _Steps(
        enc,
        checkpoint,
        current,
        state,
        segments,
        stop,
        max_its,
        delta,
        on_iteration,
        Cadence(every, seconds, written=state is not None),
    )
    if (
        checkpoint
    ):  # the scoring round of an iteration whose checkpoint is due computes no E-step ahead
        enc.checkpoint_due = lambda: steps.cadence.due(len(steps.history) + 1)
    enc.note_resumed(steps.start)  # after a takeover only
    stop.install()
    with liveness.watched():  # a main thread blocked for good ends the fit (runtime/watchdog)
        model = _optimize(enc, estimator, state, steps, out, max_its, delta, init_p, seed)
        if state is not None:
            _whole_fit_provenance(model, len(steps.history), max_its)
        reason = stop_reason(steps.history, max_its, delta)
        if checkpoint:
            steps.save(model, len(steps.history), finished=True, stopped=reason)
        steps.report(checkpoint)
        if on_finish is not None:
            on_finish(reason)
        return model, steps.history


def _fresh_state(enc, estimator, config: dict) -> ckpt.FitState:
    """What a checkpoint of this fit must match (data, estimator, configuration, layout,
    versions), before any iteration."""
    from mixle.utils.serialization import to_json

    return ckpt.FitState(
        iteration=0,
        model="",
        ll=[],
        layout={"num_shards": enc.num_shards, "sub_chunks": enc.sub_chunks},
        fingerprint={
            "data": enc.store.fingerprint(),
            "estimator": sha256_text(to_json(estimator)),
            "config": sha256_text(json.dumps(config)),
        },
        versions=versions(enc.settings.blas_threads),
        config=config,
    )


def _checkpoint_path(enc, checkpoint: str | None) -> str | None:
    """The checkpoint's path ("auto": in the handle's work folder), checked writable; failover
    arms now, if asked for and there is a checkpoint."""
    if checkpoint == AUTO:
        checkpoint = os.path.join(enc.workdir, CHECKPOINT_NAME)
    if checkpoint:
        ckpt.check_writable(checkpoint)
        enc.claim_checkpoint(checkpoint)  # a second job on it is refused, exit 2
    enc.check_failover_reach(checkpoint)
    return checkpoint


def _resumed(
    enc,
    checkpoint: str | None,
    resume: str,
    current: ckpt.FitState,
    allow_version_change: bool,
    segments: Segments,
) -> ckpt.FitState | None:
    """The checkpoint this fit resumes from, if any, with its events (a fallback to ``.prev``
    and the resume itself)."""
    if not checkpoint or resume == "no":
        return None
    state, fallback = _resume_state(checkpoint, resume, current, allow_version_change)
    for path, why in fallback:
        enc.events.emit("checkpoint_fallback", path=path, cause=why)
    if state is None:
        _say_starting_over_after_a_lost_host(checkpoint)
        return None
    segments.resumed(state)
    where = (
        {
            "source": fallback[0][0],
            "fallback": f"{checkpoint} is damaged ({fallback[0][1].removeprefix(checkpoint + ': ')})",
        }
        if fallback
        else {}
    )
    enc.events.emit(
        "resumed", path=checkpoint, iteration=state.iteration, finished=state.finished, **where
    )
    return state


def _optimize(
    enc, estimator, state, steps: "_Steps", out, max_its: int, delta, init_p: float, seed: int
):
    """mixle's EM loop: from the seed, or from the resumed model for the iterations left."""
    from mixle.inference.estimation import optimize
    from mixle.utils.serialization import from_json

    print_iter = 1 if out is not None else None  # mixle prints to stdout when out is None
    with warnings.catch_warnings():
        for note in MIXLE_STOP_NOTES:
            warnings.filterwarnings("ignore", message=note)
        if state is None:
            return optimize(
                None,
                estimator,
                enc_data=enc,
                max_its=max_its,
                delta=delta,
                init_p=init_p,
                rng=np.random.RandomState(seed),
                on_step=steps.on_step,
                out=out,
                print_iter=print_iter,
            )
        return optimize(
            None,
            estimator,
            enc_data=enc,
            prev_estimate=from_json(state.model),
            max_its=max(0, max_its - steps.start),
            delta=delta,
            on_step=steps.on_step,
            out=out,
            print_iter=print_iter,
        )


class _Steps:
    """What happens after each accepted iteration: the history, a checkpoint when the cadence
    (or a stop signal) asks for one, the caller's ``on_iteration``, and the stop itself."""

    def __init__(
        self,
        enc,
        checkpoint: str | None,
        current: ckpt.FitState,
        state,
        segments: Segments,
        stop: _StopFlag,
        max_its: int,
        delta,
        on_iteration,
        cadence: Cadence,
    ) -> None:
        self.enc, self.checkpoint, self.current, self.segments = enc, checkpoint, current, segments
        self.stop, self.max_its, self.delta, self.on_iteration = stop, max_its, delta, on_iteration
        self.history: list[float] = list(state.ll) if state else []
        self.start = state.iteration if state else 0
        self.cadence = cadence
        self.held: list = []  # the step that may end EM: reported once the finished checkpoint is on disk

    def save(self, model, iteration: int, finished: bool = False, stopped: str = "") -> None:
        enc, t0 = self.enc, time.perf_counter()
        s = ckpt.FitState(
            **{
                **self.current.__dict__,
                "iteration": iteration,
                "model": model.to_json(),
                "ll": list(self.history),
                "finished": finished,
                "converged": stopped == "converged",
                "stopped": stopped,
                "failures": {str(k): v for k, v in enc.failures.items()},
                "blacklist": enc.blacklist,
                "wall_seconds": self.segments.total(),
                "segments": self.segments.count,
            }
        )
        write_within(
            self.checkpoint,
            s,
            lambda tmp: enc.fault_point("checkpoint_write", iteration),
            enc.settings.reconfigure_timeout,
        )
        self.cadence.wrote(time.perf_counter() - t0)
        enc.events.emit(
            "checkpoint",
            path=self.checkpoint,
            iteration=iteration,
            finished=finished,
            seconds=round(time.perf_counter() - t0, 6),
        )

    def report(self, saved: str | None) -> None:
        if self.held and self.on_iteration is not None:
            self.on_iteration(*self.held.pop(), saved)
        self.held.clear()

    def on_step(self, step) -> None:
        self.report(
            None
        )  # a held step that did not end EM after all (delta none, a step that changed nothing)
        self.history.append(float(step.log_density))
        i = self.start + step.iter
        if may_end_em(
            i, float(step.delta), self.max_its, self.delta
        ):  # the finished checkpoint follows at once
            self.held.append((i, self.history[-1]))
            return
        # read the flag once: a signal landing after the save was decided would otherwise end
        # the fit claiming a checkpoint that was never written (it is handled at the next step)
        signum, checkpoint = self.stop.asked(), self.checkpoint
        saved = checkpoint if checkpoint and (self.cadence.due(i) or signum is not None) else None
        if saved:
            self.save(step.model, i)
        if self.on_iteration is not None:
            self.on_iteration(i, self.history[-1], saved)
        if signum is not None:
            self.enc.events.emit(
                "preempted", signal=signal.Signals(signum).name, iteration=i, checkpoint=checkpoint
            )
            raise stopped(signum, i, checkpoint)
