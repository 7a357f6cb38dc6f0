"""``mixle-mpi inspect``: a shard store, checkpoint, event log, fitted model or fit output,
for a human.

The event log answers "what happened to which rank, when, and what did it cost": one line
per rank with its failures, how each was detected, where its shards were recomputed, how
long the reconfiguration took, and whether it came back or was blacklisted. A model.json is
shown as parameters (:mod:`mixle_mpi.cli.modelview`); a damaged HDF5 file is said to be damaged.
``ck.h5`` stands for every restart's checkpoint (``ck.r0.h5``, ``ck.r1.h5``, ...) when the fit
had restarts. The summaries are pure functions of the parsed files and unit-tested.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import IO

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.storage.events import describe, read_events, skipped_text

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def restart_siblings(path: str) -> list[str]:
    """``ck.r0.h5``, ``ck.r1.h5``, ... that exist for a base checkpoint name ``ck.h5``."""
    from mixle_mpi.cli.restartpaths import restart_checkpoint

    found: list[str] = []
    # restart r's name does not depend on the number of restarts, as long as it is above 1
    while os.path.exists(p := restart_checkpoint(path, len(found), 2 + len(found))):
        found.append(p)
    return found


def _looks_like_hdf5(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE


def _json_kind(path: str) -> str:
    """'model' (mixle's safe JSON), 'progress' (progress.json) or 'summary'."""
    from mixle_mpi.cli.modelview import is_model_json
    from mixle_mpi.fitting.progress import RECORD_FORMAT

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    if is_model_json(doc):
        return "model"
    return "progress" if isinstance(doc, dict) and doc.get("format") == RECORD_FORMAT else "summary"


def kind_of(path: str) -> str:
    """'outdir', 'events', 'summary', 'model', 'progress', 'store', 'checkpoint', 'restarts'
    (a base checkpoint name) or 'damaged' (an HDF5 file that does not open)."""
    if os.path.isdir(path):
        return "outdir"
    if not os.path.exists(path):
        if restart_siblings(path):
            return "restarts"
        raise ConfigError(f"no such file or folder {path!r}")
    if path.endswith(".jsonl"):
        return "events"
    if path.endswith(".json"):
        return _json_kind(path)
    import h5py

    from mixle_mpi.storage import checkpoint, store

    try:
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
    except OSError:
        if _looks_like_hdf5(path) or path.endswith(".prev"):
            return "damaged"
        raise ConfigError(
            f"{path} is not an event log (.jsonl), a summary or model (.json) or an HDF5 file "
            "(shard store or checkpoint)"
        ) from None
    if fmt == store.FORMAT:
        return "store"
    if fmt == checkpoint.FORMAT:
        return "checkpoint"
    raise ConfigError(
        f"{path} is HDF5 but neither a mixle_mpi shard store nor a checkpoint (format={fmt!r})"
    )


def _speed_story(stories: dict, e: dict, t: float) -> None:
    """A slow worker's part in a round's copies or a move of shards between rounds."""
    if e["event"] == "speculated":
        typical = e.get("typical") or 0.0
        for w, pace in e.get("stragglers", {}).items():
            onto = ", ".join(f"rank {h}: {ss}" for h, ss in e.get("copies", {}).items())
            stories[int(w)].append(
                f"t+{t:.2f}s slow ({pace:.4f} s a shard, the idle ranks {typical:.4f}): "
                f"copies of its shards on {onto} ({e.get('kind')} round {e.get('call')})"
            )
        return
    for shard, (src, dst) in e.get("moves", {}).items():
        stories[int(src)].append(
            f"t+{t:.2f}s gave shard {shard} to rank {dst} (paces {e.get('paces')})"
        )
        stories[int(dst)].append(f"t+{t:.2f}s took shard {shard} from slower rank {src}")


def rank_stories(events: list[dict]) -> dict[int, list[str]]:
    """Per worker rank, what happened to it, in order, with times relative to the start (pure)."""
    t0 = next(
        (e["time"] for e in events if e.get("event") == "start"),
        events[0]["time"] if events else 0.0,
    )
    stories: dict[int, list[str]] = defaultdict(list)
    last_fail: dict[int, float] = {}
    for e in events:
        ev, w, t = e.get("event"), e.get("worker"), e.get("time", t0) - t0
        if (
            ev == "kept"
        ):  # continuation "keep": no shrink; the dead ranks are left out of every message
            for d in e.get("dropped", []):
                stories[d].append(
                    f"t+{t:.2f}s dropped from the kept communicator (never addressed again; "
                    f"survivors {e.get('survivors')} keep their ranks)"
                )
            continue
        if ev in ("speculated", "rebalanced"):
            _speed_story(stories, e, t)
            continue
        if w is None:
            continue
        if ev == "failure_detected":
            last_fail[w] = e["time"]
            cause = str(e.get("cause", "?")).split(":")[0]
            stories[w].append(
                f"t+{t:.2f}s failed (pid {e.get('pid')} on {e.get('host')}, incarnation "
                f"{e.get('incarnation')}, failure #{e.get('failures')}), detected by {cause}"
                + (", fenced" if e.get("fenced") else "")
            )
        elif ev == "recovery":
            stories[w].append(
                f"t+{t:.2f}s recomputed shards {e.get('shards')} of a failed rank ({e.get('kind')} round "
                f"{e.get('call')})"
            )
        elif ev == "respawn_started":
            stories[w].append(
                f"t+{t:.2f}s a replacement is starting (incarnation {e.get('incarnation')}); "
                f"survivors carry shards {e.get('shards')} meanwhile"
            )
        elif ev == "respawn_ready":
            stories[w].append(
                f"t+{t:.2f}s respawned as pid {e.get('pid')} on {e.get('host')} (incarnation "
                f"{e.get('incarnation')}), loading its shards in the background"
            )
        elif ev == "respawned" and e.get("background"):
            took = e["time"] - last_fail[w] if w in last_fail else None
            stories[w].append(
                f"t+{t:.2f}s took back shards {e.get('shards')} ({e.get('seconds', 0):.2f}s after it "
                "was started"
                + (f", {took:.2f}s after its failure" if took is not None else "")
                + ")"
            )
        elif ev == "respawned":
            took = e["time"] - last_fail[w] if w in last_fail else None
            stories[w].append(
                f"t+{t:.2f}s respawned as pid {e.get('pid')} on {e.get('host')} (incarnation "
                f"{e.get('incarnation')}, spawn {e.get('seconds', 0):.2f}s"
                + (f", {took:.2f}s after its failure" if took is not None else "")
                + f"), got back shards {e.get('shards')}"
            )
        elif ev == "blacklisted":
            stories[w].append(
                f"t+{t:.2f}s blacklisted ({e.get('cause')}); its shards move for good"
            )
        elif ev == "migrated":
            stories[w].append(f"t+{t:.2f}s took over shards {e.get('shards')} for good")
        elif ev == "spawn_unavailable":
            stories[w].append(f"t+{t:.2f}s could not be respawned: {e.get('cause')}")
    return dict(stories)


def driver_story(events: list[dict], t0: float) -> list[str]:
    """What happened to the driver: each death, who saw it, who took over and resumed (pure)."""
    out = []
    for e in events:
        ev, t = e.get("event"), e.get("time", t0) - t0
        if ev == "driver_failed":
            out.append(
                f"t+{t:.2f}s the driver (pid {e.get('pid')} on {e.get('host')}) died: {e.get('cause')}"
            )
        elif ev == "driver_elected":
            out.append(f"t+{t:.2f}s {describe(e)}")
        elif ev == "driver_resumed":
            out.append(f"t+{t:.2f}s {describe(e)}")
    return out


def summarize_events(events: list[dict]) -> list[str]:
    if not events:
        return ["empty event log"]
    start = next((e for e in events if e.get("event") == "start"), {})
    t0 = start.get("time", events[0]["time"])
    lines = []
    if start:
        lines.append(
            f"job: {start.get('workers')} workers, {start.get('num_shards')} shards, shrink by "
            f"{start.get('shrink')}, MPI {start.get('mpi')}, driver pid {start.get('driver_pid')} on "
            f"{start.get('driver_host')}"
        )
    counts = defaultdict(int)
    for e in events:
        counts[e.get("event")] += 1
    span = events[-1]["time"] - t0
    lines.append(
        f"{len(events)} events over {span:.1f}s: "
        + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    )
    shrinks = [e for e in events if e.get("event") == "shrink"]
    if shrinks:
        lines.append(
            f"shrinks: {len(shrinks)}, {sum(e.get('seconds', 0) for e in shrinks):.3f}s in all "
            f"({', '.join(str(e.get('method')) for e in shrinks)})"
        )
    stories = rank_stories(events)
    driver = driver_story(events, t0)
    if not stories and not driver:
        lines.append("no rank failed")
    if driver:
        lines.append("driver:")
        lines.extend("  " + s for s in driver)
    for w in sorted(stories):
        lines.append(f"rank {w}:")
        lines.extend("  " + s for s in stories[w])
    for e in events:
        if e.get("event") in ("preempted", "resumed", "checkpoint_fallback", "relaunched"):
            lines.append(f"t+{e['time'] - t0:.2f}s {describe(e)}")
    closed = next((e for e in reversed(events) if e.get("event") == "closed"), None)
    lines.append(
        f"ended: live {closed.get('live')}, blacklisted {closed.get('blacklisted')}"
        if closed
        else "no 'closed' event: the job did not end cleanly (killed, preempted or still running)"
    )
    return lines


def summarize_summary(s: dict) -> list[str]:
    from mixle_mpi.fitting.progress import summary_stop_text, summary_wall_text

    lines = [
        f"fit of {s.get('model_spec')} on {s.get('data')}: final ll {s.get('final_ll')!r} after "
        f"{s.get('iterations')} iterations ({summary_stop_text(s)}), {summary_wall_text(s)}",
        f"failures survived {s.get('failures_survived')} {s.get('failures')}, blacklisted {s.get('blacklisted')}, "
        f"shards recomputed {s.get('recovered_shards')}; {s.get('workers')} workers, {s.get('num_shards')} shards",
    ]
    if len(s.get("restarts", [])) > 1:
        lines.append(
            "restarts: "
            + ", ".join(f"seed {r['seed']}: {r['final_ll']!r}" for r in s["restarts"])
            + f"; best is restart {s.get('best_restart', 0) + 1}"
        )
    spec = s.get("speculation") or {}
    if spec.get("copies") or spec.get("rebalanced"):
        lines.append(
            f"slow workers: {spec.get('copies')} shard copies started, {spec.get('won')} won, about "
            f"{spec.get('saved_seconds', 0):.2f}s saved; shards moved {spec.get('rebalanced')} time(s)"
        )
    for r in s.get("relaunches") or []:
        lines.append(
            f"host(s) {', '.join(r.get('lost_hosts') or [])} lost: launched again without them on "
            f"{r.get('ranks')} ranks (was {r.get('was_ranks')})"
        )
    if s.get("peak_rss_mb"):
        lines.append(
            "peak RSS: "
            + ", ".join(
                f"{'driver' if r == '0' else f'rank {r}'} {mb:.0f} MB"
                for r, mb in s["peak_rss_mb"].items()
            )
        )
    if s.get("versions"):
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in s["versions"].items()))
    return lines


def summarize_store(path: str) -> list[str]:
    from mixle_mpi.storage.store import ShardStore

    with ShardStore.open(path) as st:
        sizes = [st.shard_size(i) for i in range(st.num_shards)]
        return [
            f"shard store: {st.num_rows} rows of kind {st.row_kind!r} in {st.num_shards} shards "
            f"(sizes {min(sizes)}..{max(sizes)}), {os.path.getsize(path) / 1e6:.1f} MB",
            f"sha256 {st.fingerprint()}",
        ]


def _previous(path: str) -> list[str]:
    """What a resume falls back to when ``path`` is damaged: its ``.prev``, if good."""
    prev = path + ".prev"
    if path.endswith(".prev") or not os.path.exists(prev):
        return ["no previous checkpoint (.prev) to fall back to: a resume would fail"]
    return ["previous checkpoint (.prev), which a resume uses instead:"] + [
        "  " + x for x in summarize_checkpoint(prev)
    ]


def summarize_damaged(path: str, why: str) -> list[str]:
    """A checkpoint that fails its checks, and what a resume would do instead."""
    return [f"DAMAGED: {path} is not a usable checkpoint: {why}"] + _previous(path)


def summarize_unreadable_hdf5(path: str) -> list[str]:
    """An HDF5 file that does not open: its kind is unknown, so the .prev is only named if
    there is one (a checkpoint's fallback)."""
    lines = [f"DAMAGED: {path} is an HDF5 file that does not open (truncated or corrupt)"]
    if os.path.exists(path + ".prev") and not path.endswith(".prev"):
        lines += _previous(path)
    return lines


def summarize_checkpoint(path: str) -> list[str]:
    from mixle_mpi.storage import checkpoint

    try:
        state = checkpoint.read_file(path)
    except checkpoint.CheckpointError as exc:
        return summarize_damaged(path, str(exc).removeprefix(f"{path}: "))
    tail = ", ".join(f"{x:.10g}" for x in state.ll[-3:])
    return [
        f"checkpoint after iteration {state.iteration} ({'finished' if state.finished else 'in progress'}"
        f"{', converged' if state.converged else ''}), checksum ok",
        f"log-likelihood: last {tail}" if state.ll else "no iteration completed yet",
        f"layout {state.layout}; failures {state.failures}; blacklisted {state.blacklist}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in state.versions.items()),
    ] + (
        [f"wall time so far {state.wall_seconds:.1f}s over {state.segments} job segment(s)"]
        if state.segments
        else []
    )


def summarize_model(path: str) -> list[str]:
    from mixle_mpi.cli.modelview import describe_model_json

    with open(path, encoding="utf-8") as fh:
        return describe_model_json(fh.read(), path)


def summarize_restarts(path: str) -> list[str]:
    """Every restart's checkpoint for a base name, each summarized."""
    siblings = restart_siblings(path)
    lines = [f"{path} is the base name of {len(siblings)} restart checkpoints"]
    for r, p in enumerate(siblings):
        lines += [f"restart {r + 1}: {p}"] + ["  " + x for x in summarize_checkpoint(p)]
    return lines


def summarize_progress(path: str) -> list[str]:
    from mixle_mpi.cli.status import status_lines

    return status_lines(os.path.dirname(os.path.abspath(path)))


OUTDIR_FILES = ("summary.json", "model.json", "events.jsonl")


def summarize(path: str) -> list[str]:
    kind = kind_of(path)
    if kind == "outdir":
        return _summarize_outdir(path)
    if kind == "events":
        events = read_events(path)
        if events.skipped and not events:
            raise ConfigError(f"{path} is not a JSON-lines event log: no line of it is an event")
        return [line for line in (skipped_text(events),) if line] + summarize_events(events)
    if kind == "summary":
        with open(path, encoding="utf-8") as fh:
            return summarize_summary(json.load(fh))
    readers = {
        "model": summarize_model,
        "progress": summarize_progress,
        "store": summarize_store,
        "restarts": summarize_restarts,
        "checkpoint": summarize_checkpoint,
        "damaged": summarize_unreadable_hdf5,
    }
    return readers[kind](path)


def _summarize_outdir(path: str) -> list[str]:
    """A fit's out_dir: its summary, model and events; a live fit's status when it has no
    summary yet."""
    from mixle_mpi.fitting.progress import PROGRESS_FILE

    lines = []
    if not os.path.exists(os.path.join(path, "summary.json")) and os.path.exists(
        os.path.join(path, PROGRESS_FILE)
    ):
        lines += [
            f"== {os.path.join(path, PROGRESS_FILE)} (no summary.json yet: the fit is running or was stopped)"
        ]
        lines += summarize(os.path.join(path, PROGRESS_FILE))
    for name in OUTDIR_FILES:
        p = os.path.join(path, name)
        if os.path.exists(p):
            lines += [f"== {p}"] + summarize(p)
    if not lines:
        raise ConfigError(
            f"{path} holds no summary.json, model.json or events.jsonl; is it a `mixle-mpi fit` out_dir?"
        )
    return lines


def inspect_paths(paths: list[str], out: IO[str]) -> int:
    for i, path in enumerate(paths):
        if len(paths) > 1:
            out.write(("\n" if i else "") + f"# {path}\n")
        out.write("\n".join(summarize(path)) + "\n")
    return 0
