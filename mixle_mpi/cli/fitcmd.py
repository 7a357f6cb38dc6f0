"""``mixle-mpi fit``: one resilient fit as an MPI job step.

Every rank runs this command (``mpiexec -n N mixle-mpi fit ...``, or ``mixle-mpi fit -n N
...`` which launches itself). Rank 0 reads the data, fits and writes the outputs; the other
ranks serve E-steps inside the handle and end when the fit ends. Outputs, in ``out_dir``:
``model.json`` (mixle's safe JSON), ``summary.json`` (final log-likelihood, iterations,
failures survived, wall time, per-restart traces), ``events.jsonl``, ``progress.json``
(replaced after every iteration, read by ``mixle-mpi status``) and, with ``plot``,
``fit.png``. Restart r uses seed + r and its own checkpoint, so a requeued job resumes
every restart exactly.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from mixle_mpi.cli import datainput, preflight
from mixle_mpi.cli.jobconfig import FitConfig, resolved_settings, settings_overrides
from mixle_mpi.cli.restartpaths import restart_checkpoint, restart_checkpoints
from mixle_mpi.core.atomicfile import write_json
from mixle_mpi.fitting import modelspec

MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS")


def under_mpi_launcher(environ=os.environ) -> bool:
    """True when an MPI launcher started this process (so it must not launch itself)."""
    return any(v in environ for v in MPI_ENV) or "MIXLE_MPI_STATUS_FILE" in environ


def prepare(cfg: FitConfig, successor: bool = False):
    """Driver-side checks and inputs, before any worker is busy: (spec, loaded data, estimator).
    ``successor``: this process took over from a dead driver (the folder lock is not strict)."""
    from mixle_mpi.runtime.handle import ensure_dir, hold_folder
    from mixle_mpi.storage.checkpoint import check_writable

    found = preflight.check(cfg)  # every problem at once, before any folder is made
    found.raise_any()
    spec, source = found.spec, found.source
    columns = datainput.parse_columns(cfg.columns)
    ensure_dir(cfg.out_dir, "output")
    hold_folder(
        cfg.out_dir, "output", strict=not successor
    )  # one fit per output folder: a second one exits 2
    if cfg.plot:
        from mixle_mpi.cli.plot import require_matplotlib

        require_matplotlib()
    if cfg.checkpoint:
        check_writable(cfg.checkpoint)
    if cfg.memory_check and not successor:
        check_memory(cfg, spec, found.shape)
    loaded = datainput.load(
        source, modelspec.row_shape_needed(spec), columns, spill_dir=cfg.out_dir
    )
    if spec.family == "composite":
        loaded.data = datainput.convert_table(loaded.data, spec.parts, source.path, loaded.lines)
    estimator = modelspec.build_estimator(spec, loaded.ncols)
    return spec, loaded, estimator


def check_memory(cfg: FitConfig, spec, shape) -> None:
    """Refuse a fit that cannot fit in memory before its data is read (exit 2 with the
    estimate): from the data's headers, the world's size and the model's parameters."""
    from mixle_mpi.cli import dryrun

    settings = resolved_settings(cfg)
    lay = dryrun.layout(
        shape.rows,
        cfg.num_shards,
        world_size(),
        bool(settings.driver_computes),
        int(shape.values * shape.value_bytes),
        settings.driver_share_max_bytes,
    )
    dryrun.check_memory(shape, lay, modelspec.model_bytes(spec, shape.ncols))


def world_size() -> int | None:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size() if MPI.Is_initialized() else None


def run(cfg: FitConfig) -> int:
    from mixle_mpi.fitting.fitloop import Segments
    from mixle_mpi.runtime.handle import ResilientMPIEncodedData, is_driver
    from mixle_mpi.runtime.watchdog import main_thread_watched

    segments = Segments()
    where = dict(
        num_shards=cfg.num_shards,
        sub_chunks=cfg.sub_chunks,
        max_retries=cfg.max_retries,
        workdir=os.path.join(cfg.out_dir, "work"),
        keep_store=cfg.keep_store,
        event_log=os.path.join(cfg.out_dir, "events.jsonl"),
        warm_serialization=True,  # model.json and the checkpoints need mixle's registry
        **settings_overrides(cfg),
    )
    # A worker serves inside this call until the driver is done and never returns, unless
    # the driver dies with failover on: then the successor returns here, as the driver.
    successor = None if is_driver() else ResilientMPIEncodedData(None, **where)
    with main_thread_watched(watch_limit(cfg)):  # from here to the exit (runtime/watchdog)
        return _drive(cfg, successor, where, segments)


def watch_limit(cfg: FitConfig) -> float:
    """Seconds the driver's main thread may block without computing before it is ended (74):
    the watchdog's limit, ``reconfigure_timeout`` + its margin."""
    from mixle_mpi.policy.heartbeat import WATCHDOG_MARGIN

    return resolved_settings(cfg).reconfigure_timeout + WATCHDOG_MARGIN


def _drive(cfg: FitConfig, successor, where: dict, segments) -> int:
    """The driver's part of ``run``: its input, the fit and its outputs (``successor``: the
    handle of a process that took over from a dead driver, else None)."""
    from mixle_mpi.runtime.handle import ResilientMPIEncodedData

    events_path = where["event_log"]
    spec, loaded, est = prepare(cfg, successor is not None)
    with successor or ResilientMPIEncodedData(loaded.data, estimator=est, **where) as enc:
        loaded.close()
        workers = len(enc.membership.live())
        print(
            f"[fit] {spec.text} on {loaded.describe}; {enc.num_shards} shard{'s' * (enc.num_shards != 1)} over "
            f"{workers} worker{'s' * (workers != 1)}; out_dir {cfg.out_dir}",
            flush=True,
        )
        if cfg.checkpoint and cfg.restarts > 1:
            print(
                f"[fit] {cfg.restarts} restarts, each with its own checkpoint: "
                + ", ".join(restart_checkpoints(cfg.checkpoint, cfg.restarts)),
                flush=True,
            )
        results, timeline = _fit_restarts(enc, est, cfg, segments)
        summary = _summary(enc, cfg, results, segments)
        # on disk before the handle's close removes the shard store
        best = results[summary["best_restart"]]
        write_json(
            os.path.join(cfg.out_dir, "model.json"),
            json.loads(_told_as_summary(best["model"], summary, cfg).to_json()),
            indent=1,
        )
        write_json(os.path.join(cfg.out_dir, "summary.json"), summary, indent=1)
    if cfg.plot:
        from mixle_mpi.cli.plot import plot_fit

        plot_fit(
            os.path.join(cfg.out_dir, "fit.png"), [r["ll"] for r in results], timeline, events_path
        )
    print("[fit] " + done_line(summary, os.path.join(cfg.out_dir, "model.json")), flush=True)
    return 0


def done_line(summary: dict, model_path: str) -> str:
    """The fit's last line: how it stopped, the result, and where it went (pure)."""
    from mixle_mpi.fitting.progress import summary_stop_text, summary_wall_text

    return (
        f"done after {summary['iterations']} iterations: {summary_stop_text(summary)}; final ll "
        f"{summary['final_ll']!r}, failures survived {summary['failures_survived']}"
        f"{_takeover_text(summary.get('driver_takeovers', 0))}, "
        f"{summary_wall_text(summary)}; model in {model_path}"
    )


def _told_as_summary(model, summary: dict, cfg: FitConfig):
    """The model whose fit receipt (its JSON's provenance) says what summary.json says: the
    restart's seed, whether it converged, its iterations and cap. mixle's receipt knows no
    seed (it is given an rng); the model itself is unchanged."""
    import copy
    import dataclasses

    prov = model.fit_provenance() if hasattr(model, "fit_provenance") else None
    if prov is None:
        return model
    told = copy.copy(model)
    run = summary["restarts"][summary["best_restart"]]
    return told.with_fit_provenance(
        dataclasses.replace(
            prov,
            seed=run["seed"],
            converged=run["converged"],
            iterations=run["iterations"],
            max_iterations=cfg.max_its,
        )
    )


def _takeover_text(n: int) -> str:
    return (
        f" (the driver's death {'once' if n == 1 else f'{n} times'} among them: a survivor took over)"
        if n
        else ""
    )


def _recovered(enc) -> int:
    return sum(len(r["recomputed"]) for r in enc.rounds)


def host_relaunches() -> list[dict]:
    """Each time the launcher launched this job again without a lost host: which hosts, on
    how many ranks (its record, passed to the ranks: launch.contract)."""
    from mixle_mpi.launch import contract

    return [
        {k: r.get(k) for k in ("attempt", "lost_hosts", "left_out", "ranks", "was_ranks")}
        for r in contract.relaunches()
    ]


def speculation_summary(rounds: list[dict]) -> dict:
    """What slow workers cost and what speculation saved: copies started and won, the
    seconds saved (each round's estimate from its stragglers' own pace), shard moves."""
    return {
        "copies": sum(len(r.get("speculated", ())) for r in rounds),
        "won": sum(len(r.get("speculation_won", ())) for r in rounds),
        "saved_seconds": round(sum(r.get("saved_seconds", 0.0) for r in rounds), 6),
        "rebalanced": sum(1 for r in rounds if r.get("rebalanced")),
    }


def _fit_restarts(enc, est, cfg: FitConfig, segments):
    from mixle_mpi.fitting.fitloop import fit
    from mixle_mpi.fitting.progress import PROGRESS_FILE, Progress, ranks_of

    progress = Progress(
        sys.stdout,
        cfg.progress,
        record=os.path.join(cfg.out_dir, PROGRESS_FILE),
        meta={"model": cfg.model, "data": cfg.data},
    )
    membership = enc.membership
    takeovers = _takeovers(
        os.path.join(cfg.out_dir, "events.jsonl")
    )  # a successor's: the deaths so far
    results, timeline = [], []  # timeline: (restart, iteration, wall time) per accepted iteration
    for r in range(cfg.restarts):
        label = f"{r + 1}/{cfg.restarts}" if cfg.restarts > 1 else ""
        trace: list[float] = []
        progress.start()

        def on_iteration(
            i: int, ll: float, saved: str | None, r=r, label=label, trace=trace
        ) -> None:
            timeline.append((r, i, time.time()))
            progress.step(
                iteration=i,
                max_its=cfg.max_its,
                ll=ll,
                prev_ll=trace[-1] if trace else None,
                live=len(membership.live()),
                blacklisted=len(membership.blacklisted()),
                recovered=_recovered(enc),
                restart=label,
                ranks=ranks_of(membership, takeovers),
                failed=sum(membership.failures().values()) + takeovers,
                checkpointed=saved is not None,
                slow=enc.slow_workers,
            )
            trace.append(ll)

        stopped: list[str] = []
        try:
            model, lls = fit(
                enc,
                est,
                max_its=cfg.max_its,
                delta=cfg.delta,
                init_p=cfg.init_p,
                seed=cfg.seed + r,
                checkpoint=restart_checkpoint(cfg.checkpoint, r, cfg.restarts),
                every=cfg.checkpoint_every,
                seconds=cfg.checkpoint_seconds,
                resume=cfg.resume,
                on_iteration=on_iteration,
                segments=segments,
                on_finish=stopped.append,
            )
        finally:
            progress.done()  # a live line is ended before anything else is printed
        results.append(
            {
                "model": model,
                "ll": lls,
                "seed": cfg.seed + r,
                "stopped": stopped[0],
                "converged": stopped[0] == "converged",
            }
        )
    return results, timeline


def best_restart(results: list[dict]) -> int:
    """Highest final log-likelihood; the earliest restart wins a tie; a NaN or infinite one
    never wins (NaN compares false both ways, so the first restart won when its was NaN) (pure)."""
    finals = [
        r["ll"][-1] if r["ll"] and math.isfinite(r["ll"][-1]) else float("-inf") for r in results
    ]
    return max(range(len(finals)), key=lambda i: (finals[i], -i))


def _takeovers(events_path: str) -> int:
    """How many times a surviving rank took over from a dead driver (failover), from the log."""
    from mixle_mpi.storage.events import read_events

    try:
        return sum(e.get("event") == "driver_elected" for e in read_events(events_path))
    except (OSError, ValueError):
        return 0


def _summary(enc, cfg: FitConfig, results: list[dict], segments) -> dict:
    from mixle_mpi.fitting.fitloop import versions

    b = best_restart(results)
    failures = enc.failures
    takeovers = _takeovers(os.path.join(cfg.out_dir, "events.jsonl"))
    peak_rss = enc.peak_rss_mb
    return {
        "final_ll": results[b]["ll"][-1] if results[b]["ll"] else None,
        "iterations": len(results[b]["ll"]),
        "converged": results[b]["converged"],
        "stopped": results[b]["stopped"],
        "ll": results[b]["ll"],
        "best_restart": b,
        "restarts": [
            {
                "seed": r["seed"],
                "final_ll": r["ll"][-1] if r["ll"] else None,
                "iterations": len(r["ll"]),
                "converged": r["converged"],
                "stopped": r["stopped"],
                "ll": r["ll"],
            }
            for r in results
        ],
        "failures_survived": sum(failures.values()) + takeovers,  # the driver's deaths count too
        "fault_plan": getattr(
            enc, "fault_plan", []
        ),  # a run under chaos (MIXLE_MPI_FAULT_PLAN) says so
        "driver_takeovers": takeovers,
        "failures": {str(k): v for k, v in failures.items()},
        "blacklisted": enc.blacklist,
        "recovered_shards": _recovered(enc),
        "speculation": speculation_summary(enc.rounds),
        "relaunches": host_relaunches(),  # launches of this job segment that lost a host
        "wall_seconds": segments.this_segment(),  # this job segment
        "wall_seconds_total": segments.total(),  # every segment, after requeues
        "segments": segments.count,
        "rows": len(enc),
        "driver_peak_rss_mb": peak_rss[0],
        "peak_rss_mb": {str(rank): mb for rank, mb in sorted(peak_rss.items())},
        "workers": len(enc.membership.records),
        "num_shards": enc.num_shards,
        "driver_shards": enc.driver_shards,
        "sub_chunks": enc.sub_chunks,
        "data": cfg.data,
        "model_spec": cfg.model,
        "config": {k: v for k, v in cfg.__dict__.items()},
        "versions": versions(enc.settings.blas_threads),
        "outputs": {
            "model": "model.json",
            "events": "events.jsonl",
            "plot": "fit.png" if cfg.plot else None,
        },
    }
