"""Exact fit checkpoints: one HDF5 file, safe JSON inside, a checksum, atomic writes.

Only the driver writes. A write goes to ``<path>.tmp``, is fsynced, and is renamed over
``<path>`` after the previous good checkpoint was moved to ``<path>.prev``. Reading checks
the sha256 of the stored state and falls back to ``.prev`` when the newest file is
truncated or corrupt. Nothing in the file is pickled: the model is mixle's safe JSON, so
loading a checkpoint never executes code.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

import h5py
import numpy as np

from mixle_mpi.core.atomicfile import commit, discard
from mixle_mpi.core.errors import ConfigError, MixleMPIError
from mixle_mpi.core.privatefile import new_private_temp
from mixle_mpi.core.validate import sha256_text

FORMAT, VERSION = "mixle_mpi.checkpoint", 1
VERSION_FIELDS = ("mixle", "numpy", "mpi", "blas_threads")


class CheckpointError(MixleMPIError):
    """A checkpoint is unreadable, corrupt, or from a different fit."""


class CheckpointTimeout(MixleMPIError):
    """A checkpoint write did not finish in time: its file system may hang, not the input
    be wrong. The last checkpoint is intact, so a rerun resumes (exit CHECKPOINT_TIMEOUT)."""


@dataclass
class FitState:
    """Everything needed to continue a fit to the same bits."""

    iteration: int  # EM iterations completed
    model: str  # mixle safe JSON of the current model
    ll: list[float]  # log-likelihood after each iteration
    finished: bool = False  # optimize returned; ``model`` is the final one
    converged: bool = False
    layout: dict = field(default_factory=dict)  # num_shards, sub_chunks
    fingerprint: dict = field(default_factory=dict)  # data, estimator, config
    versions: dict = field(default_factory=dict)  # what the bits depend on
    failures: dict = field(default_factory=dict)  # worker -> failure count
    blacklist: list = field(default_factory=list)
    config: dict = field(
        default_factory=dict
    )  # seed, init_p, delta in plain (what to pass to resume)
    wall_seconds: float = 0.0  # the fit's wall time up to this write, over every job segment
    segments: int = 0  # job segments (first run, then each resume) up to this write
    stopped: str = ""  # once finished: converged, max_its or unchanged (progress.stop_reason)


def check_writable(path: str) -> None:
    """Fail before any work if the checkpoint's directory is missing or not writable."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(parent):
        raise ConfigError(
            f"the checkpoint directory {parent!r} does not exist (checkpoint path {path!r})"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"the checkpoint directory {parent!r} is not writable (checkpoint path {path!r})"
        )


def write(path: str, state: FitState, before_rename=None) -> None:
    """Atomically replace the checkpoint at ``path``, keeping the previous one as ``.prev``
    only if it is good: a damaged file (the reason a resume fell back to ``.prev``) never
    replaces a good ``.prev``, it is dropped instead."""
    text = json.dumps(asdict(state), sort_keys=True)
    tmp = new_private_temp(path)  # a name of its own: never another writer's file
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = VERSION
            f.attrs["sha256"] = sha256_text(text)
            f.create_dataset("state", data=np.frombuffer(text.encode("utf-8"), dtype=np.uint8))
            f.flush()
            os.fsync(f.id.get_vfd_handle())
        if before_rename is not None:
            before_rename(tmp)
    except BaseException:
        discard(tmp)
        raise
    if _good(path):
        os.replace(path, path + ".prev")
    commit(tmp, path)


def _good(path: str) -> bool:
    """A checkpoint at ``path`` that reads back whole (a link is never one)."""
    if os.path.islink(path) or not os.path.exists(path):
        return False
    try:
        read_file(path)
    except CheckpointError:
        return False
    return True


def read_file(path: str) -> FitState:
    """Exactly the checkpoint file at ``path``, checked (no fallback to ``.prev``); raises
    CheckpointError saying what is wrong with it."""
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise CheckpointError(
                    f"{path}: not a mixle_mpi checkpoint (format={f.attrs.get('format')!r})"
                )
            if int(f.attrs.get("version", -1)) != VERSION:
                raise CheckpointError(
                    f"{path}: checkpoint version {f.attrs.get('version')!r}, this mixle_mpi reads {VERSION}"
                )
            text = bytes(f["state"][()]).decode("utf-8")
            want = f.attrs.get("sha256")
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{path}: unreadable or truncated checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    got = sha256_text(text)
    if got != want:
        raise CheckpointError(
            f"{path}: checksum mismatch (stored {str(want)[:16]}..., computed {got[:16]}...): the file is corrupt"
        )
    try:
        state = json.loads(text)
        state.pop("rng_state", None)  # written (always null) by versions before 0.1.1; never read
        return FitState(**state)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the checkpoint's state does not parse ({exc})") from None


def read(path: str, on_fallback=None) -> FitState | None:
    """The newest good checkpoint at ``path`` (or ``path.prev``); None if there is none.

    A corrupt newest file falls back to ``.prev`` (``on_fallback(path, reason)`` is told);
    if no good checkpoint remains, the error names every file and what is wrong with it.
    """
    candidates = [p for p in (path, path + ".prev") if os.path.exists(p)]
    if not candidates:
        return None
    problems = []
    for p in candidates:
        try:
            state = read_file(p)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        if problems and on_fallback is not None:
            on_fallback(p, "; ".join(problems))
        return state
    raise CheckpointError("no usable checkpoint: " + " | ".join(problems))


def differences(
    saved: FitState, current: FitState, allow_version_change: bool = False
) -> list[str]:
    """Every field by which ``saved`` is not a checkpoint of the ``current`` fit."""
    out = []
    for group in ("layout", "fingerprint"):
        a, b = getattr(saved, group), getattr(current, group)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(
                    f"{group}.{key}: checkpoint has {a.get(key)!r}, this run has {b.get(key)!r}"
                )
    if not allow_version_change:
        for key in sorted(set(saved.versions) | set(current.versions)):
            if saved.versions.get(key) != current.versions.get(key):
                out.append(
                    f"versions.{key}: checkpoint has {saved.versions.get(key)!r}, this run has "
                    f"{current.versions.get(key)!r} (override with allow_version_change=True)"
                )
    return out


# The flag and the Python API argument that set each field a resume must match.
REMEDY = {
    "num_shards": ("--num-shards", "num_shards"),
    "sub_chunks": ("--sub-chunks", "sub_chunks"),
    "seed": ("--seed", "seed"),
    "init_p": ("--init-p", "init_p"),
    "delta": ("--delta", "delta"),
}
WHAT_FITS = {
    "data": "the data it was made from (--data and --columns as then)",
    "estimator": "the model it was made with (--model as then)",
    "config": "the --seed, --init-p and --delta it was made with",
}


def _pass(name: str, value) -> str:
    """``--num-shards 3 (num_shards=3 in the Python API)`` (pure)."""
    flag, arg = REMEDY[name]
    return f"{flag} {'none' if value is None else value} ({arg}={value!r} in the Python API)"


def remedies(saved: FitState, current: FitState, allow_version_change: bool = False) -> list[str]:
    """What to pass so that this run resumes ``saved``, one item per difference (pure).
    The data's fingerprint is taken over the shards, so it differs whenever the layout
    does: it is only blamed once the layout matches."""
    out = [
        _pass(k, saved.layout[k])
        for k in ("num_shards", "sub_chunks")
        if k in saved.layout and saved.layout.get(k) != current.layout.get(k)
    ]
    for key in ("data", "estimator", "config"):
        if saved.fingerprint.get(key) == current.fingerprint.get(key) or (key == "data" and out):
            continue
        plain = [
            _pass(k, saved.config[k])
            for k in ("seed", "init_p", "delta")
            if key == "config" and k in saved.config and saved.config[k] != current.config.get(k)
        ]
        out += plain or [WHAT_FITS[key]]
    if not allow_version_change and saved.versions != current.versions:
        out.append(
            "--allow-version-change (allow_version_change=True in the Python API) to accept other versions"
        )
    return out


def refusal(
    path: str, saved: FitState, current: FitState, allow_version_change: bool = False
) -> str | None:
    """Why this run may not resume the checkpoint ``saved`` read from ``path``, and exactly
    what to pass so that it does; None when it may (pure)."""
    diff = differences(saved, current, allow_version_change)
    if not diff:
        return None
    layout_differs = any(d.startswith("layout.") for d in diff)
    shown = [
        d
        if not (layout_differs and d.startswith("fingerprint.data"))
        else "fingerprint.data: not compared while the layout differs (it is taken over the shards)"
        for d in diff
    ]
    return (
        f"{path} is a checkpoint of a different fit; refusing to resume:\n  "
        + "\n  ".join(shown)
        + "\nTo resume it, pass "
        + " and ".join(remedies(saved, current, allow_version_change))
        + " (any number of ranks will do). To start afresh instead: --resume no (overwrites it) "
        "or another --checkpoint path."
    )
