"""``mixle-mpi status`` and ``inspect`` for a person: progress.json kept by the driver, the
state of a running, finished, preempted or dead fit, fitted models in human terms,
restart checkpoints by their base name and damaged checkpoints."""

from __future__ import annotations

import io
import json
import os
import socket

import mixle.stats as st
import numpy as np
import pytest

from mixle_mpi.cli import inspector, modelview, status
from mixle_mpi.cli.commands import main
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.fitting import progress
from mixle_mpi.policy.membership import Membership
from mixle_mpi.storage import checkpoint

HOST = socket.gethostname()


def step(p: progress.Progress, i: int, ll: float, prev: float | None, ranks=None):
    return p.step(
        iteration=i,
        max_its=50,
        ll=ll,
        prev_ll=prev,
        live=3,
        blacklisted=0,
        recovered=2,
        ranks=ranks,
    )


def test_membership_becomes_ranks_by_state():
    m = Membership([1, 2, 3, 4], max_retries=2)
    m.mark_failed(2)
    m.revive(2)
    m.mark_failed(4)
    m.blacklist(4)
    assert progress.ranks_of(m) == {
        "live": [1, 2, 3],
        "failures": {"2": 1, "4": 1},
        "blacklisted": [4],
        "driver_takeovers": 0,
    }


def test_each_iteration_replaces_progress_json(tmp_path):
    path = tmp_path / progress.PROGRESS_FILE
    p = progress.Progress(
        io.StringIO(), "off", record=str(path), meta={"model": "gmm:k=2", "data": "x.h5:/X"}
    )
    ranks = {"live": [1, 3], "failures": {"2": 2}, "blacklisted": [2]}
    step(p, 1, -10.0, None, ranks)
    first = json.loads(path.read_text())
    assert first["iteration"] == 1 and first["dll"] is None and first["ranks"] == ranks
    step(p, 2, -9.5, -10.0, ranks)
    rec = json.loads(path.read_text())
    assert (
        rec["format"] == progress.RECORD_FORMAT and rec["iteration"] == 2 and rec["max_its"] == 50
    )
    assert rec["ll"] == -9.5 and rec["dll"] == pytest.approx(0.5) and rec["model"] == "gmm:k=2"
    assert (
        rec["seconds_per_iteration"] >= 0
        and rec["eta_seconds"] is None
        and rec["recovered_shards"] == 2
    )
    step(p, 3, -9.4, -9.5, ranks)  # an ETA from the third iteration of a segment on
    assert json.loads(path.read_text())["eta_seconds"] is not None
    assert rec["pid"] == os.getpid() and rec["host"] == HOST
    assert sorted(os.listdir(tmp_path)) == [progress.PROGRESS_FILE]  # written through .tmp + rename


def write_fit(out, *, progress_at: float | None = None, summary_at: float | None = None, events=()):
    out.mkdir(exist_ok=True)
    if progress_at is not None:
        rec = progress.record(
            progress.Status(7, 50, -123.25, -124.0, 0.5, (0.4, 0.5, 0.6), 2, 1, 3, "1/2"),
            {"live": [1, 3], "failures": {"2": 2}, "blacklisted": [2]},
            {"pid": 999_999_999, "host": HOST, "model": "gmm:k=3", "data": "d.csv"},
            progress_at,
        )
        (out / "progress.json").write_text(json.dumps(rec))
        os.utime(out / "progress.json", (progress_at, progress_at))
    if summary_at is not None:
        (out / "summary.json").write_text(
            json.dumps(
                {
                    "model_spec": "gmm:k=3",
                    "data": "d.csv",
                    "final_ll": -120.5,
                    "iterations": 9,
                    "converged": True,
                    "wall_seconds": 4.5,
                    "failures_survived": 2,
                    "failures": {"2": 2},
                    "blacklisted": [2],
                    "recovered_shards": 3,
                    "workers": 3,
                }
            )
        )
        os.utime(out / "summary.json", (summary_at, summary_at))
    with open(out / "events.jsonl", "w") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
        fh.write('{"time": 1e9, "event": "cut off by a wri')  # an append in progress


def test_status_of_a_running_fit(tmp_path):
    events = [{"time": 1000.0 + i, "event": "heartbeat_late", "worker": 1} for i in range(8)]
    events.append(
        {
            "time": 1010.0,
            "event": "failure_detected",
            "worker": 2,
            "pid": 5,
            "host": "n1",
            "cause": "ulfm",
        }
    )
    write_fit(tmp_path / "out", progress_at=1009.0, events=events)
    files = status.read_fit_files(str(tmp_path / "out"))
    text = "\n".join(status.report(files, True, now=1012.0, n_events=3))
    for needle in (
        "out: running, driver pid 999999999 on",
        "fit: gmm:k=3 on d.csv",
        "restart 1/2, iteration 7/50: ll -123.25, dll +7.500e-01, 0.500 s/iteration, eta <= 0:00:22",
        "updated 3s ago",
        "ranks: 2 live [1, 3]; 1 failed (rank 2 x2); 1 blacklisted [2]; shards recomputed 3",
        "last 3 events:",
        "failure_detected rank 2 (pid 5 on n1) cause=ulfm",
    ):
        assert needle in text, (needle, text)
    assert text.count("heartbeat_late") == 2 and "cut off" not in text
    assert "slow workers" not in text


def test_status_names_the_slow_workers(tmp_path):
    write_fit(tmp_path / "out", progress_at=1009.0, events=[])
    path = tmp_path / "out" / "progress.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "slow": {"3": 4.2, "10": 2.0}}))
    text = "\n".join(status.report(status.read_fit_files(str(tmp_path / "out")), True, now=1012.0))
    assert (
        "slow workers (times the median's seconds per shard; their shards are copied or moved): "
        "rank 3 x4.2, rank 10 x2" in text
    ), text


def test_status_says_when_the_driver_is_gone_preempted_or_finished(tmp_path):
    write_fit(tmp_path / "gone", progress_at=1009.0)
    files = status.read_fit_files(str(tmp_path / "gone"))
    assert status.driver_alive(files.progress) is False  # pid 999999999 does not exist here
    assert "not running: the driver is gone" in status.report(files, False, 1010.0)[0]
    write_fit(
        tmp_path / "pre",
        progress_at=1009.0,
        events=[{"time": 1009.5, "event": "preempted", "signal": "SIGTERM"}],
    )
    assert (
        "preempted: checkpointed; rerun"
        in status.report(status.read_fit_files(str(tmp_path / "pre")), None, 1010.0)[0]
    )
    write_fit(tmp_path / "done", progress_at=1009.0, summary_at=1011.0)
    text = "\n".join(status.report(status.read_fit_files(str(tmp_path / "done")), False, 1012.0))
    assert ": finished" in text and "9 iterations (converged), final ll -120.5" in text
    assert "failures survived 2 (rank 2 x2); blacklisted [2]" in text
    write_fit(
        tmp_path / "rerun", progress_at=1013.0, summary_at=1011.0
    )  # a resumed fit over an old summary
    assert status.report(status.read_fit_files(str(tmp_path / "rerun")), True, 1014.0)[0].endswith(
        f"running, driver pid 999999999 on {HOST}"
    )


def test_status_command(tmp_path, capsys):
    write_fit(tmp_path / "out", progress_at=1009.0)
    assert main(["status", str(tmp_path / "out"), "--events", "0"]) == 0
    out = capsys.readouterr().out
    assert "iteration 7/50" in out and "not running" in out and "last" not in out
    (tmp_path / "empty").mkdir()
    assert main(["status", str(tmp_path / "empty")]) == 2
    assert "holds no progress.json, summary.json or events.jsonl" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "nope")]) == 2


def test_tail_reads_only_the_end_of_a_long_log(tmp_path):
    path = tmp_path / "events.jsonl"
    with open(path, "w") as fh:
        for i in range(5000):
            fh.write(json.dumps({"time": float(i), "event": "tick", "n": i}) + "\n")
    assert os.path.getsize(path) > status.TAIL_BYTES
    assert [e["n"] for e in status.tail_events(str(path), 3)] == [4997, 4998, 4999]
    assert status.tail_events(str(tmp_path / "missing.jsonl"), 3) == []


MODELS = {
    "gmm1d": (
        st.MixtureDistribution(
            [st.GaussianDistribution(-1.5, 0.25), st.GaussianDistribution(2.0, 4.0)], [0.3, 0.7]
        ),
        [
            "mixture of 2 components, weights [0.3, 0.7]",
            "component 2 (weight 0.7):",
            "Gaussian: mean -1.5, variance 0.25",
        ],
    ),
    "diag": (
        st.MixtureDistribution(
            [st.DiagonalGaussianDistribution(np.array([1.0, 2.0]), np.array([0.5, 3.0]))] * 2,
            [0.5, 0.5],
        ),
        ["diagonal Gaussian (2-D): mean [1, 2]", "variances [0.5, 3]"],
    ),
    "full": (
        st.MixtureDistribution(
            [st.MultivariateGaussianDistribution(np.zeros(2), np.array([[2.0, 0.5], [0.5, 1.0]]))],
            [1.0],
        ),
        [
            "mixture of 1 component, weights [1]",
            "Gaussian (2-D): mean [0, 0]",
            "covariance:",
            "[  2, 0.5]",
            "[0.5,   1]",
        ],
    ),
    "poisson": (
        st.MixtureDistribution(
            [st.PoissonDistribution(3.5), st.PoissonDistribution(0.25)], [0.6, 0.4]
        ),
        ["Poisson: rate 3.5", "Poisson: rate 0.25", "weights [0.6, 0.4]"],
    ),
    "hmm": (
        st.HiddenMarkovModelDistribution(
            [st.GaussianDistribution(0.0, 1.0), st.GaussianDistribution(5.0, 2.0)],
            [0.4, 0.6],
            [[0.9, 0.1], [0.2, 0.8]],
        ),
        [
            "hidden Markov model with 2 states",
            "initial state probabilities [0.4, 0.6]",
            "transition matrix (row: from state, column: to state):",
            "[0.9, 0.1]",
            "[0.2, 0.8]",
            "state 2 emits:",
            "Gaussian: mean 5, variance 2",
        ],
    ),
    "composite": (
        st.MixtureDistribution(
            [
                st.CompositeDistribution(
                    (
                        st.GaussianDistribution(0.0, 1.0),
                        st.CategoricalDistribution({"red": 0.25, "blue": 0.75}),
                    )
                )
            ],
            [1.0],
        ),
        ["tuple of 2 parts:", "categorical: {'blue': 0.75, 'red': 0.25}"],
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inspect_shows_a_fitted_model_in_human_terms(name, tmp_path, capsys):
    model, needles = MODELS[name]
    path = tmp_path / "model.json"
    path.write_text(model.to_json())
    assert inspector.kind_of(str(path)) == "model"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model (") and "fit of None" not in out
    for needle in needles:
        assert needle in out, (needle, out)


def test_an_unknown_family_falls_back_to_its_repr():
    assert modelview.describe_model(st.ExponentialDistribution(2.0)) == [
        "ExponentialDistribution(2.0, name=None, keys=None)"
    ]


def test_an_out_dir_shows_its_model_and_a_live_fit(tmp_path):
    out = tmp_path / "out"
    write_fit(out, progress_at=1009.0)
    (out / "model.json").write_text(MODELS["poisson"][0].to_json())
    text = "\n".join(inspector.summarize(str(out)))
    assert (
        "no summary.json yet" in text and "iteration 7/50" in text and "Poisson: rate 3.5" in text
    )


def state(iteration: int, ll: list[float], finished=False) -> checkpoint.FitState:
    return checkpoint.FitState(
        iteration=iteration,
        model="{}",
        ll=ll,
        finished=finished,
        layout={"num_shards": 4, "sub_chunks": 1},
        versions={"mixle": "0.8.2"},
    )


def test_inspect_takes_the_base_name_of_restart_checkpoints(tmp_path, capsys):
    checkpoint.write(str(tmp_path / "ck.r0.h5"), state(5, [-3.0, -2.5], finished=True))
    checkpoint.write(str(tmp_path / "ck.r1.h5"), state(2, [-4.0, -3.75]))
    assert main(["inspect", str(tmp_path / "ck.h5")]) == 0
    out = capsys.readouterr().out
    assert "ck.h5 is the base name of 2 restart checkpoints" in out
    assert "restart 1: " in out and "checkpoint after iteration 5 (finished)" in out
    assert "restart 2: " in out and "checkpoint after iteration 2 (in progress)" in out
    assert main(["inspect", str(tmp_path / "other.h5")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_inspect_says_a_checkpoint_is_damaged(damage, tmp_path, capsys):
    path = tmp_path / "ck.h5"
    checkpoint.write(str(path), state(3, [-5.0, -4.0, -3.5]))
    checkpoint.write(
        str(path), state(4, [-5.0, -4.0, -3.5, -3.25])
    )  # the first one becomes ck.h5.prev
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 3]
    else:
        pos = data.index(b'"iteration": 4')
        data[pos + 13] = ord("5")  # a flipped digit inside the stored state
    path.write_bytes(bytes(data))
    assert main(["inspect", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "Traceback" not in captured.out
    first, *rest = captured.out.splitlines()
    assert first.startswith(f"DAMAGED: {path} ")
    assert ("truncated" in first) if damage == "truncate" else ("checksum mismatch" in first)
    assert "previous checkpoint (.prev), which a resume uses instead:" in rest[0]
    assert "checkpoint after iteration 3 (in progress), checksum ok" in rest[1]


def test_a_damaged_file_without_prev_says_a_resume_would_fail(tmp_path):
    path = tmp_path / "ck.h5"
    checkpoint.write(str(path), state(1, [-1.0]))
    data = path.read_bytes()
    path.write_bytes(data[:200])  # does not open as HDF5: its kind is unknown
    assert inspector.summarize(str(path)) == [
        f"DAMAGED: {path} is an HDF5 file that does not open (truncated or corrupt)"
    ]
    pos = data.index(b'"iteration": 1')
    path.write_bytes(data[: pos + 13] + b"7" + data[pos + 14 :])  # opens, but fails its checksum
    lines = inspector.summarize(str(path))
    assert (
        lines[0].startswith(f"DAMAGED: {path} is not a usable checkpoint: ")
        and "a resume would fail" in lines[1]
    )


def test_a_non_json_file_is_refused_clearly(tmp_path):
    bad = tmp_path / "model.json"
    bad.write_text("{oops")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        inspector.summarize(str(bad))


def test_inspect_shows_a_checkpoints_wall_time_over_segments(tmp_path):
    path = tmp_path / "ck.h5"
    checkpoint.write(
        str(path),
        checkpoint.FitState(
            **{**state(6, [-2.0, -1.5]).__dict__, "wall_seconds": 75.25, "segments": 3}
        ),
    )
    assert "wall time so far 75.2s over 3 job segment(s)" in inspector.summarize(str(path))
    checkpoint.write(
        str(path), state(6, [-2.0, -1.5])
    )  # from before segments were kept: nothing made up
    assert not any("wall time" in line for line in inspector.summarize(str(path)))
