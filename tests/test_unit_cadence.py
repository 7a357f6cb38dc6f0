"""The default checkpoint cadence (fitting/cadence.py) and the CLI's resilient defaults."""

from __future__ import annotations

import os

from mixle_mpi.cli.jobconfig import FitConfig, failover_of, moved_to, resolve, to_argv
from mixle_mpi.fitting.cadence import DEFAULT_SECONDS, MAX_SHARE, Cadence


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_default_cadence_writes_the_first_iteration_then_by_the_clock():
    clock = Clock()
    c = Cadence(clock=clock)
    assert c.due(1)  # early: a death soon after the start loses only the start
    c.wrote(0.01)
    assert not c.due(2)
    clock.now += DEFAULT_SECONDS - 1
    assert not c.due(3)
    clock.now += 1
    assert c.due(4)


def test_default_cadence_keeps_writes_under_two_percent_of_the_time():
    clock = Clock()
    c = Cadence(clock=clock)
    c.wrote(5.0)  # a big model: 5 s a write
    clock.now += DEFAULT_SECONDS
    assert not c.due(2)
    clock.now += 5.0 / MAX_SHARE - DEFAULT_SECONDS
    assert c.due(3)


def test_a_resumed_fit_does_not_write_at_once():
    clock = Clock()
    c = Cadence(clock=clock, written=True)
    assert not c.due(7)
    clock.now += DEFAULT_SECONDS
    assert c.due(8)


def test_every_n_iterations_adds_to_the_default_protections():
    clock = Clock()
    every = Cadence(every=3, clock=clock)
    due = []
    for i in range(1, 10):
        if every.due(i):
            due.append(i)
            every.wrote(0.01)
    assert due == [1, 3, 6, 9]  # the early first write stays
    clock.now += DEFAULT_SECONDS
    assert every.due(10)  # and so does the clock


def test_an_explicit_clock_is_kept_exactly():
    clock = Clock()
    timed = Cadence(seconds=1.0, clock=clock)
    assert not timed.due(1)
    timed.wrote(30.0)  # no 2 % floor on a cadence the user chose
    clock.now += 1.0
    assert timed.due(2)


def _cfg(**values) -> FitConfig:
    return resolve(None, {"data": "builtin:iris", "model": "gmm:k=3", **values})


def test_the_cli_checkpoints_into_its_out_dir_and_arms_failover_by_default():
    cfg = _cfg(out_dir="runs/a")
    assert cfg.checkpoint == os.path.join("runs/a", "checkpoint.h5")
    assert failover_of(cfg, environ={}) is True
    assert "--checkpoint" in to_argv(cfg) and os.path.join("runs/a", "checkpoint.h5") in to_argv(
        cfg
    )


def test_a_fit_moved_to_another_folder_takes_its_default_checkpoint_along():
    """The demo and the campaigns run one job config in many folders: none resumes another's fit."""
    moved = moved_to(_cfg(out_dir="runs/a"), "runs/b")
    assert moved.out_dir == "runs/b" and moved.checkpoint == os.path.join("runs/b", "checkpoint.h5")
    chosen = moved_to(_cfg(out_dir="runs/a", checkpoint="/scratch/ck.h5"), "runs/b")
    assert chosen.checkpoint == "/scratch/ck.h5"  # a path the user chose stays
    assert moved_to(_cfg(checkpoint="none"), "runs/b").checkpoint is None


def test_no_checkpoint_and_no_failover_opt_out():
    off = _cfg(checkpoint="none")
    assert off.checkpoint is None and failover_of(off, environ={}) is False
    assert to_argv(off)[to_argv(off).index("--checkpoint") + 1] == "none"  # the ranks see the same
    assert failover_of(_cfg(failover=False), environ={}) is False
    assert (
        failover_of(_cfg(), environ={"MIXLE_MPI_FAILOVER": "0"}) is None
    )  # the environment decides


def test_the_flags_parse_to_the_same(tmp_path):
    from mixle_mpi.cli.commands import build_parser
    from mixle_mpi.cli.jobconfig import from_args

    args = build_parser().parse_args(
        ["fit", "--data", "builtin:iris", "--model", "gmm:k=3", "--no-checkpoint", "--no-failover"]
    )
    cfg = from_args(args)
    assert cfg.checkpoint is None and cfg.failover is False


def test_an_out_dir_flag_takes_the_job_files_default_checkpoint_along():
    """Two jobs of one job file in two folders never share a checkpoint (issue 48)."""
    file_values = {
        "data": "builtin:iris",
        "model": "gmm:k=3",
        "out_dir": "jobs/a",
        "checkpoint": "jobs/a/checkpoint.h5",
    }
    cfg = resolve(file_values, {"out_dir": "runs/b"})
    assert cfg.checkpoint == os.path.join("runs/b", "checkpoint.h5")
    chosen = resolve({**file_values, "checkpoint": "/scratch/ck.h5"}, {"out_dir": "runs/b"})
    assert chosen.checkpoint == "/scratch/ck.h5"  # a path of its own stays
