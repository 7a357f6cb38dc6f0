"""Settings: argument > MIXLE_MPI_* environment variable > default, parsed strictly."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from numbers import Real

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.validate import check_int

ENV_PREFIX = "MIXLE_MPI_"


def _positive_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0; found {value!r}")
    return float(value)


MINIMUM = {"spares": 0, "heartbeat_fanin": 0, "own_read_min_bytes": 0, "driver_share_max_bytes": 0}  # integer settings that may be 0 (the others must be >= 1)


@dataclass(frozen=True)
class Settings:
    """Everything tunable about detection and recovery, validated once on the driver."""

    # Seconds between heartbeats, both directions. 0.4 s against the 1 s timeout: a silent
    # worker is declared failed after 2.5 missed beats (within 3 periods of its death, see
    # bench/results/report.md) while a stall of up to 0.6 s is still tolerated.
    heartbeat_period: float = 0.4
    heartbeat_timeout: float = 1.0     # silence after which a worker is declared failed
    driver_timeout: float = 60.0       # silence after which a worker gives the driver up
    reconfigure_timeout: float = 60.0  # deadline for one shrink, spawn, or control reply (shard load)
    blas_threads: int = 1              # BLAS threads on every rank (bits depend on it)
    respawn: bool = True               # respawn failed ranks below max_retries
    # A replacement joins in the background (it imports and loads its shards while the
    # survivors carry them; policy/joining.py). True: the next round waits for it instead,
    # as before (every place computes its own shards again at once; the fit pauses meanwhile).
    respawn_wait: bool = False
    # A busy worker whose main thread reports no progress (one sub-chunk, one shard) for this
    # long is stuck (a deadlock in a C extension, a livelock) and is failed like a dead one.
    # 600 s: far above any sub-chunk of the data sizes we see; raise it, or split shards
    # finer with sub_chunks, if a single sub-chunk legitimately computes longer.
    stall_timeout: float = 600.0
    # Ranks started beside the workers that hold no shards: set up, beating, idle. A failed
    # worker's place is taken by a spare at once (no Spawn, which srun often cannot do);
    # until then spares help recompute orphaned shards. The job needs 1 + workers + spares ranks.
    spares: int = 0
    # A dead driver is followed by the lowest surviving rank, which resumes the fit from its
    # checkpoint (policy/failover.py); under mpiexec (not srun), with the shard store and the
    # checkpoint where every rank can read them. Off: a dead driver ends the job.
    failover: bool = False
    # Most workers of one communicator the driver hears itself; above it, relay workers
    # gather the others' beats (policy/fanin.py), so the driver's load stays bounded and a
    # relayed worker's death is seen one heartbeat period later. 0: every worker beats directly.
    heartbeat_fanin: int = 16
    # Workers that can open the driver's shard store (the same file: a shared file system)
    # read their own shards at the start, in parallel; the driver streams the others'.
    # The rows are the same either way, and so are the bits.
    workers_read_store: bool = True
    own_read_min_bytes: int = 8 << 20  # ... when it has at least this much to load (less comes faster from the driver)
    # Ranks on the driver's host wake each other with a datagram beside each MPI message
    # (runtime/doorbell.py) instead of polling finely while one is due: a round's messages
    # arrive at once and a waiting rank takes no CPU. Off: every wait polls (policy/pacing.py).
    doorbells: bool = True
    # A scoring round also computes the E-step of the model it scores (policy/lookahead.py):
    # mixle's EM loop asks for that E-step next, which then needs no round of its own. One
    # round per EM iteration instead of two; the same bits. Off: a round per call.
    estep_ahead: bool = True
    # The driver computes a worker's share of the shards itself (policy/placement.py,
    # driver_share), as mixle's own MPI handle has every rank compute: a job of n ranks then
    # has n E-step processes, not n - 1, and on a node with as many ranks as cores the driver
    # no longer wakes a worker's core for each message. Costs: a failure seen during a round
    # is acted on once the driver's current shard is done, and the driver holds its share
    # encoded. The same bits either way.
    driver_computes: bool = True
    # ... only while that share is small: at most this many stored bytes. A round's fixed
    # cost weighs where rounds are short, that is where shards are small. An E-step's
    # temporaries are many times its data (a 1-D GMM share of 2.7 MB stored raised the
    # driver's peak by 63 MB), so above this the driver holds no data and its memory stays
    # flat in N (bench/results/report.md, item 4).
    driver_share_max_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be True or False; found {value!r}")
            elif isinstance(f.default, float):
                object.__setattr__(self, f.name, _positive_float(f.name, value))
            else:
                object.__setattr__(self, f.name, check_int(f.name, value, MINIMUM.get(f.name, 1)))
        if self.heartbeat_fanin == 1:
            raise ConfigError("heartbeat_fanin must be 0 (every worker beats to the driver) or at least 2; found 1")
        if self.heartbeat_timeout < 2 * self.heartbeat_period:
            raise ConfigError(
                f"heartbeat_timeout must be at least 2 x heartbeat_period; found timeout="
                f"{self.heartbeat_timeout:g}s with period={self.heartbeat_period:g}s"
            )

    @classmethod
    def resolve(cls, overrides: dict | None = None, environ=None) -> "Settings":
        """Build settings from explicit overrides, then MIXLE_MPI_<NAME> variables, then defaults."""
        environ = os.environ if environ is None else environ
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        values = {}
        for f in fields(cls):
            if f.name in overrides:
                values[f.name] = overrides[f.name]
                continue
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse_env(f.name, raw, f.default)
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {sorted(unknown)}; valid settings are {[f.name for f in fields(cls)]}"
            )
        try:
            return cls(**values)
        except ConfigError as exc:
            from_env = [ENV_PREFIX + k.upper() for k in values if k not in overrides]
            if from_env:
                raise ConfigError(f"{exc} (settings read from the environment: {', '.join(from_env)})") from None
            raise


def _parse_env(name: str, raw: str, default):
    var = ENV_PREFIX + name.upper()
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        return float(raw)
    except ValueError:
        kind = "boolean (1/0/true/false)" if isinstance(default, bool) else type(default).__name__
        raise ConfigError(f"{var}={raw!r} is not a valid {kind}") from None
