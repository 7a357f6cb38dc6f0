"""Checkpoint files without MPI: atomic write, checksum, fallback, refusal of other fits."""

from __future__ import annotations

import os

import pytest

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.storage import checkpoint as ckpt


def _state(i: int, **kw) -> ckpt.FitState:
    base = dict(
        iteration=i,
        model='{"m": %d}' % i,
        ll=[-1.5 * k for k in range(i)],
        layout={"num_shards": 4, "sub_chunks": 1},
        fingerprint={"data": "d", "estimator": "e", "config": "c"},
        versions={"mixle": "0.8.2", "numpy": "2.4.6", "mpi": "Open MPI 5.0.11", "blas_threads": 1},
    )
    base.update(kw)
    return ckpt.FitState(**base)


def test_round_trip_and_previous_kept(tmp_path):
    p = str(tmp_path / "ck.h5")
    assert ckpt.read(p) is None
    ckpt.write(p, _state(1))
    ckpt.write(p, _state(2))
    assert ckpt.read(p) == _state(2)
    assert ckpt.read(p + ".prev") == _state(1)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def _flip_byte_in_state(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    i = data.find(b'"iteration"')
    assert i > 0
    data[i + 1] ^= 0x01
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_damaged_newest_falls_back_to_previous(tmp_path, damage):
    p = str(tmp_path / "ck.h5")
    ckpt.write(p, _state(1))
    ckpt.write(p, _state(2))
    if damage == "flip":
        _flip_byte_in_state(p)
    elif damage == "truncate":
        os.truncate(p, os.path.getsize(p) // 2)
    else:
        open(p, "wb").write(b"not hdf5 at all")
    seen = []
    assert ckpt.read(p, on_fallback=lambda path, why: seen.append((path, why))) == _state(1)
    assert seen and seen[0][0] == p + ".prev" and p in seen[0][1]


def test_no_good_checkpoint_names_every_file(tmp_path):
    p = str(tmp_path / "ck.h5")
    ckpt.write(p, _state(1))
    ckpt.write(p, _state(2))
    _flip_byte_in_state(p)
    _flip_byte_in_state(p + ".prev")
    with pytest.raises(ckpt.CheckpointError) as exc:
        ckpt.read(p)
    assert "checksum mismatch" in str(exc.value)
    assert p in str(exc.value) and p + ".prev" in str(exc.value)


def test_kill_before_rename_leaves_the_old_checkpoint(tmp_path):
    p = str(tmp_path / "ck.h5")
    ckpt.write(p, _state(1))

    class Killed(Exception):
        pass

    def die(tmp):
        raise Killed

    with pytest.raises(Killed):
        ckpt.write(p, _state(2), before_rename=die)
    assert ckpt.read(p) == _state(1)


def test_differences_list_every_field():
    saved = _state(3)
    other = _state(
        0,
        layout={"num_shards": 8, "sub_chunks": 2},
        fingerprint={"data": "X", "estimator": "e", "config": "c"},
        versions={**saved.versions, "numpy": "9.9"},
    )
    diff = ckpt.differences(saved, other)
    assert any(d.startswith("layout.num_shards") for d in diff)
    assert any(d.startswith("layout.sub_chunks") for d in diff)
    assert any(d.startswith("fingerprint.data") for d in diff)
    assert any(d.startswith("versions.numpy") for d in diff)
    assert len(diff) == 4
    relaxed = ckpt.differences(saved, other, allow_version_change=True)
    assert len(relaxed) == 3 and not any("versions" in d for d in relaxed)
    assert ckpt.differences(saved, _state(0)) == []


def test_unwritable_or_missing_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        ckpt.check_writable(str(tmp_path / "nope" / "ck.h5"))
    ckpt.check_writable(str(tmp_path / "ck.h5"))


def test_not_a_checkpoint(tmp_path):
    import h5py

    p = str(tmp_path / "other.h5")
    with h5py.File(p, "w") as f:
        f.attrs["format"] = "something else"
    with pytest.raises(ckpt.CheckpointError, match="not a mixle_mpi checkpoint"):
        ckpt.read(p)


def test_store_checkpoint_and_journal_are_owner_only_whatever_the_umask(tmp_path):
    """They hold a full copy of the user's data and the model: mode 0600 even under umask 0."""
    import os

    import numpy as np

    from mixle_mpi.storage import checkpoint as ck
    from mixle_mpi.storage.journal import FoldJournal
    from mixle_mpi.storage.store import ShardStore

    old = os.umask(0)
    try:
        (tmp_path / "ck.h5.tmp").write_text("left by a killed writer")
        os.chmod(tmp_path / "ck.h5.tmp", 0o666)
        with ShardStore.create(tmp_path / "shards.h5", np.arange(12.0), 3):
            pass
        ck.write(str(tmp_path / "ck.h5"), ck.FitState(iteration=1, model="{}", ll=[-1.0]))
        journal = FoldJournal(str(tmp_path / "fold.h5"), "data")
        journal.begin("round-key")
        journal.close()
    finally:
        os.umask(old)
    for name in ("shards.h5", "ck.h5", "fold.h5"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name


def test_refused_resume_says_exactly_what_to_pass_for_another_layout():
    """A -n 4 fit (S = 3 workers) rerun with -n 3 (S = 2): the data fingerprint, taken over
    the shards, differs too, but the layout is what to fix."""
    saved = _state(
        5,
        layout={"num_shards": 3, "sub_chunks": 1},
        config={"seed": 1, "init_p": 0.1, "delta": 1e-9},
    )
    rerun = _state(
        0,
        layout={"num_shards": 2, "sub_chunks": 1},
        fingerprint={**saved.fingerprint, "data": "other"},
        config=saved.config,
    )
    text = ckpt.refusal("out/ck.h5", saved, rerun)
    assert text.startswith("out/ck.h5 is a checkpoint of a different fit; refusing to resume:")
    assert "layout.num_shards: checkpoint has 3, this run has 2" in text
    assert "fingerprint.data: not compared while the layout differs" in text
    assert (
        "To resume it, pass --num-shards 3 (num_shards=3 in the Python API) (any number of ranks will do)"
        in text
    )
    assert "--resume no" in text
    assert ckpt.remedies(saved, rerun) == ["--num-shards 3 (num_shards=3 in the Python API)"]
    assert ckpt.refusal("ck.h5", saved, _state(0, config=saved.config, layout=saved.layout)) is None


def test_remedies_name_every_setting_to_pass():
    saved = _state(
        5,
        layout={"num_shards": 4, "sub_chunks": 2},
        config={"seed": 1, "init_p": 0.1, "delta": None},
        fingerprint={"data": "d", "estimator": "e", "config": "c1"},
    )
    rerun = _state(
        0,
        layout={"num_shards": 4, "sub_chunks": 1},
        config={"seed": 8, "init_p": 0.1, "delta": 1e-9},
        fingerprint={"data": "d", "estimator": "E", "config": "c2"},
        versions={**saved.versions, "numpy": "9.9"},
    )
    assert ckpt.remedies(saved, rerun) == [
        "--sub-chunks 2 (sub_chunks=2 in the Python API)",
        "the model it was made with (--model as then)",
        "--seed 1 (seed=1 in the Python API)",
        "--delta none (delta=None in the Python API)",
        "--allow-version-change (allow_version_change=True in the Python API) to accept other versions",
    ]
    assert ckpt.remedies(saved, rerun, allow_version_change=True)[-1].startswith("--delta none")
    same_layout = _state(0, fingerprint={"data": "X", "estimator": "e", "config": "c"})
    assert ckpt.remedies(_state(5), same_layout) == [
        "the data it was made from (--data and --columns as then)"
    ]
    # a checkpoint from before the plain config was kept: the flags are named, not their values
    old = _state(5)
    assert ckpt.remedies(
        old, _state(0, fingerprint={"data": "d", "estimator": "e", "config": "other"})
    ) == ["the --seed, --init-p and --delta it was made with"]


def test_wall_time_and_segments_survive_a_write(tmp_path):
    p = str(tmp_path / "ck.h5")
    ckpt.write(
        p,
        _state(3, wall_seconds=12.5, segments=2, config={"seed": 1, "init_p": 0.1, "delta": None}),
    )
    back = ckpt.read(p)
    assert back.wall_seconds == 12.5 and back.segments == 2 and back.config["delta"] is None


def test_segments_add_the_earlier_ones_from_the_checkpoint():
    from mixle_mpi.fitting.fitloop import Segments

    seg = Segments(started=100.0)
    assert seg.total(now=104.0) == 4.0 and seg.count == 1
    seg.resumed(_state(3, wall_seconds=30.0, segments=2))  # restart 0's checkpoint
    seg.resumed(_state(1, wall_seconds=20.0, segments=1))  # an earlier one does not lower it
    assert seg.total(now=104.0) == 34.0 and seg.this_segment(now=104.0) == 4.0 and seg.count == 3


def test_a_damaged_checkpoint_never_replaces_a_good_prev(tmp_path):
    """Issue 33: after a resume fell back to ``.prev`` (the newest file was damaged), the next
    checkpoint rotated the damaged file over the good ``.prev``. Now the damaged one is
    dropped, and ``.prev`` stays the last good state."""
    p = str(tmp_path / "ck.h5")
    ckpt.write(p, _state(1))
    ckpt.write(p, _state(2))
    os.truncate(p, os.path.getsize(p) // 2)  # damaged on disk (a torn copy, a full disk)
    fell = []
    assert ckpt.read(p, on_fallback=lambda path, why: fell.append(path)) == _state(1) and fell == [
        p + ".prev"
    ]
    ckpt.write(p, _state(3))
    assert ckpt.read_file(p) == _state(3)
    assert ckpt.read_file(p + ".prev") == _state(1)  # not the damaged file
    ckpt.write(p, _state(4))
    assert ckpt.read_file(p + ".prev") == _state(3)  # a good one rotates as before


def test_every_output_is_written_through_a_name_of_its_own_never_through_a_link(tmp_path):
    """Two writers of one file never share a temp name, and a link planted at the target or
    at an old fixed temp name is replaced or ignored, never written through."""
    from mixle_mpi.core.atomicfile import temp_path, write_json, write_text

    target = tmp_path / "model.json"
    assert temp_path(str(target)) != temp_path(str(target))
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (tmp_path / "model.json.tmp").symlink_to(outside)  # the old fixed temp name
    target.symlink_to(outside)
    write_json(str(target), {"a": 1})
    assert outside.read_text() == "keep me"
    assert not target.is_symlink() and target.read_text() == '{"a": 1}\n'
    write_text(str(target), "x" * (3 << 20))  # a large one is written whole
    assert target.stat().st_size == 3 << 20
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".tmp")) == [
        "model.json.tmp"
    ]  # only the planted one
    ck = tmp_path / "ck.h5"
    ck.symlink_to(outside)
    ckpt.write(str(ck), _state(1))
    assert (
        outside.read_text() == "keep me"
        and not ck.is_symlink()
        and ckpt.read_file(str(ck)) == _state(1)
    )
    assert not os.path.exists(str(ck) + ".prev")  # a link is no good checkpoint to keep


def test_outputs_are_owner_only_and_never_written_through_a_link(tmp_path):
    """model.json, summary.json, progress.json (write_json), events.jsonl (appended), fit.png
    and the checkpoint's reach marker: mode 0600 whatever the umask, and a link planted at
    the name is replaced or refused, never written through (issue 50)."""
    import errno

    from mixle_mpi.cli.plot import plot_fit
    from mixle_mpi.core.atomicfile import write_json
    from mixle_mpi.core.privatefile import new_private_file
    from mixle_mpi.storage.events import EventLog

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    old = os.umask(0)
    try:
        write_json(str(tmp_path / "summary.json"), {"a": 1})
        (tmp_path / "fit.png").symlink_to(outside)
        plot_fit(str(tmp_path / "fit.png"), [[-3.0, -2.0, -1.5]], [], None)
        (tmp_path / "old.jsonl").write_text("")
        os.chmod(tmp_path / "old.jsonl", 0o644)  # a log an older version left
        for name in ("events.jsonl", "old.jsonl"):
            log = EventLog(str(tmp_path / name), echo=None)
            log.emit("start")
            log.close()
        (tmp_path / "linked.jsonl").symlink_to(outside)
        with pytest.raises(OSError) as refused:
            EventLog(str(tmp_path / "linked.jsonl"), echo=None)
        assert refused.value.errno == errno.ELOOP
        new_private_file(str(tmp_path / "ck.h5.reach.1.ab"), "marker")
        (tmp_path / "ck.h5.reach.2.cd").symlink_to(outside)
        with pytest.raises(FileExistsError):
            new_private_file(str(tmp_path / "ck.h5.reach.2.cd"), "marker")
    finally:
        os.umask(old)
    assert outside.read_text() == "keep me" and not (tmp_path / "fit.png").is_symlink()
    for name in ("summary.json", "fit.png", "events.jsonl", "old.jsonl", "ck.h5.reach.1.ab"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name


def test_a_checkpoint_write_that_hangs_ends_the_fit_with_a_retryable_exit_not_a_silent_hang(
    tmp_path, monkeypatch
):
    """Issue 33: a write on a hung file system stopped the driver's main thread for good while
    its heartbeat thread went on, so nothing ended the job. It is now waited for within a
    deadline, and the error says what happened and that the previous checkpoint is intact."""
    import threading
    import time

    from mixle_mpi.fitting import fitloop

    stuck = threading.Event()
    monkeypatch.setattr(
        ckpt, "write", lambda *a, **k: stuck.wait(30)
    )  # the file system never answers
    t0 = time.monotonic()
    with pytest.raises(
        ckpt.CheckpointTimeout, match="did not finish within 0.3 s .*file system may hang.*intact"
    ) as caught:
        fitloop.write_within(str(tmp_path / "ck.h5"), _state(1), None, 0.3)
    assert time.monotonic() - t0 < 5
    stuck.set()
    # not "bad input" (exit 2): its own code, which the launcher runs again to resume
    from mixle_mpi.core import exitcodes
    from mixle_mpi.launch import launcher
    from mixle_mpi.runtime import exiting

    code = exiting.exit_code_for(caught.value)
    assert code == exitcodes.CHECKPOINT_TIMEOUT != exitcodes.BAD_INPUT
    left = launcher.retry_budget(start_retries=1, resume_retries=1)
    assert launcher.relaunch_note(code, left) == "running it again to resume from its checkpoint"
    assert launcher.relaunch_note(code, left) is None  # once, as --resume-retries says


def test_a_stop_signal_landing_mid_step_never_claims_a_checkpoint_that_was_not_written(tmp_path):
    """A Ctrl-C that arrives after the step decided not to save (here: inside the progress
    callback) is handled at the next step, which saves first: the message's iteration is
    always the checkpoint's (found by the CLI test under load)."""
    import signal
    from types import SimpleNamespace

    from mixle_mpi.fitting import fitloop
    from mixle_mpi.fitting.cadence import Cadence

    p = str(tmp_path / "ck.h5")
    model = SimpleNamespace(to_json=lambda: '{"m": 1}')
    enc = SimpleNamespace(
        failures={},
        blacklist=[],
        fault_point=lambda *a: None,
        settings=SimpleNamespace(reconfigure_timeout=30.0),
        events=SimpleNamespace(emit=lambda *a, **k: None),
    )
    stop = fitloop._StopFlag()
    steps = fitloop._Steps(
        enc,
        p,
        _state(0),
        None,
        fitloop.Segments(),
        stop,
        100,
        None,
        lambda i, ll, saved: setattr(stop, "signal", signal.SIGINT),
        Cadence(every=50, seconds=3600.0),  # exact: no first-iteration write
    )
    steps.on_step(
        SimpleNamespace(iter=1, log_density=-3.0, delta=1.0, model=model)
    )  # not due: no save
    assert ckpt.read(p) is None
    with pytest.raises(fitloop.Interrupted, match="after iteration 2; checkpoint written to"):
        steps.on_step(SimpleNamespace(iter=2, log_density=-2.0, delta=1.0, model=model))
    assert ckpt.read(p).iteration == 2
