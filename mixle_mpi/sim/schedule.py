"""One seeded scenario for the simulation: the job's layout, its settings and its faults."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

STALL = 2.0  # simulated stall timeout: a hang this long is a failure
RECONFIGURE = 4.0  # simulated reconfigure_timeout (control replies, joins, Spawns)


@dataclass
class Schedule:
    """Everything one run draws from ``seed``; ``faults`` are (time, place, kind, seconds):
    ``die``; ``hang`` for ``seconds`` (at least STALL: the process is failed and fenced, and
    answers late); ``pause`` for ``seconds`` (under STALL: its replies are late but good);
    ``slow`` to ``seconds`` times its speed from then on (heartbeats go on: never a failure)."""

    seed: int
    workers: int
    spares: int
    shards: int
    rounds: int
    max_retries: int
    respawn: bool
    background: bool  # replacements join in the background (else respawn_wait)
    driver_computes: bool
    read_store: bool  # workers read their own shards from the store
    scores: bool  # rounds also score, E-step statistics sent ahead
    dup: float  # chance that a Result is delivered twice
    ulfm: bool  # a send to a dead process may fail at once
    speeds: dict = field(default_factory=dict)  # place -> its first process's speed
    faults: list = field(default_factory=list)

    @classmethod
    def draw(cls, seed: int) -> "Schedule":
        rng = random.Random(seed)
        workers = rng.randint(1, 6)
        spares = rng.randint(0, min(2, workers - 1)) if rng.random() < 0.3 else 0
        rounds = rng.randint(1, 4)
        speeds = {w: rng.choice([0.25, 0.5]) for w in range(1, workers + 1) if rng.random() < 0.15}
        horizon = 0.1 + 0.15 * rounds
        faults = []
        for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
            kind = rng.choice(["die", "die", "hang", "pause", "slow"])
            seconds = {
                "die": 0.0,
                "hang": rng.uniform(STALL, 3 * STALL),
                "pause": rng.uniform(0.05, 0.8 * STALL),
                "slow": rng.choice([0.25, 0.5]),
            }[kind]
            faults.append((rng.uniform(0.0, horizon), rng.randint(1, workers), kind, seconds))
        return cls(
            seed,
            workers,
            spares,
            rng.randint(1, 3 * (workers - spares) + 2),
            rounds,
            rng.randint(1, 3),
            rng.random() < 0.8,
            rng.random() < 0.8,
            rng.random() < 0.5,
            rng.random() < 0.5,
            rng.random() < 0.3,
            rng.choice([0.0, 0.0, 0.05, 0.3]),
            rng.random() < 0.5,
            speeds,
            sorted(faults),
        )
