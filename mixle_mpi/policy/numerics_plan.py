"""Which ranks share the driver's numerics, and so may be given shards (pure).

Every rank hashes a fixed probe (``core/numerics.probe``). The driver's hash is the job's:
the driver folds every result, runs the M-step and computes its own share, and its hash is
what a checkpoint records. A worker (first rank, replacement or spare) whose hash differs
would change the model's bits with every shard it computed, so it gets none, with a reason
that names it, its host and what differs.
"""

from __future__ import annotations

from mixle_mpi.core.numerics import Numerics


def difference(mine: Numerics, theirs: Numerics) -> str:
    """What differs between two ranks' numerics, for a message (pure)."""
    parts = [f"probe {theirs.probe or 'missing'} (driver {mine.probe})"]
    for field, label in (("baseline", "baseline"), ("cpu", "CPU"), ("blas", "BLAS core")):
        a, b = getattr(mine, field), getattr(theirs, field)
        if a != b:
            parts.append(f"{label} {b!r} (driver {a!r})")
    if tuple(mine.dispatch) != tuple(theirs.dispatch):
        parts.append(
            f"numpy dispatch {' '.join(theirs.dispatch) or 'baseline only'} "
            f"(driver {' '.join(mine.dispatch) or 'baseline only'})"
        )
    if bool(mine.compiled) != bool(theirs.compiled):
        parts.append(
            f"numba kernels compiled in the process, not loaded from the cache: "
            f"{len(theirs.compiled)} (driver {len(mine.compiled)})"
        )
    return ", ".join(parts)


def refusal(rank: int, host: str, mine: Numerics, theirs: Numerics) -> str | None:
    """Why rank ``rank`` on ``host`` gets no shard, or None when its numerics are the
    driver's (pure)."""
    if theirs.probe and theirs.probe == mine.probe:
        return None
    if theirs.baseline != mine.baseline:
        fix = "start it under the job's baseline (mixle-mpi run/fit set it on every rank)"
    elif bool(theirs.compiled) != bool(mine.compiled):
        fix = "start the job with mixle-mpi run, which fills numba's cache before the ranks start"
    else:
        fix = "its CPU cannot reach the baseline: leave the host out of the job"
    return (
        f"rank {rank} on {host} computes other bits than the driver: "
        f"{difference(mine, theirs)}; it gets no shard ({fix})"
    )


def odd_ranks(mine: Numerics, reports: dict[int, tuple[str, Numerics]]) -> dict[int, str]:
    """rank -> why, for every reporting rank (rank -> (host, numerics)) whose numerics are
    not the driver's (pure)."""
    out = {}
    for rank, (host, theirs) in sorted(reports.items()):
        why = refusal(rank, host, mine, theirs)
        if why:
            out[rank] = why
    return out


def at_startup(mine: Numerics, reports: dict[int, tuple]) -> tuple[str | None, dict[int, str]]:
    """What the driver does with the workers' numerics at startup (rank -> (host, numerics
    as sent)): (why the job starts again under the baseline, or None; rank -> why it gets no
    shard). Under ``auto`` (nothing pinned yet) any difference relaunches the job pinned,
    since nothing was computed yet; pinned or ``native``, the odd ranks are left out (pure)."""
    found = {r: (host, Numerics(*n) if n else Numerics("")) for r, (host, n) in reports.items()}
    odd = odd_ranks(mine, found)
    if odd and mine.baseline == "auto":
        return (
            "numerics auto: the ranks' probes differ ("
            + "; ".join(odd.values())
            + "); starting the job again under the common baseline",
            {},
        )
    return None, odd


def too_few(left: int, needed: int, refused: dict[int, str]) -> str | None:
    """The message of a job left with fewer than ``needed`` workers once the ranks of other
    numerics are refused, with the fix; None if enough are left (pure)."""
    if left >= needed or not refused:
        return None
    return (
        f"{len(refused)} rank(s) compute other bits than the driver and get no shard, leaving "
        f"{left} worker(s), but the job needs {needed}: "
        + "; ".join(refused.values())
        + ". Run on nodes of one CPU generation, or under the common baseline: "
        "`mixle-mpi run`/`fit` with --numerics auto or baseline (not native)"
    )
