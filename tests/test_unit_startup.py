"""The pure parts of starting a job and of ending it with its launcher: the startup deadline,
the launcher's verdict on a job that never started, the job tag and the reaper's search."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from mixle_mpi.core import exitcodes, procs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import contract, launcher, reaper
from mixle_mpi.runtime import startup


def test_startup_timeout_default_and_environment():
    assert contract.startup_timeout({}) == contract.DEFAULT_STARTUP_TIMEOUT
    assert contract.startup_timeout({contract.STARTUP_TIMEOUT_ENV: " 7.5 "}) == 7.5


@pytest.mark.parametrize("raw", ["soon", "0", "-3", "nan", "inf"])
def test_startup_timeout_refuses_bad_values(raw):
    with pytest.raises(
        ConfigError, match=f"MIXLE_MPI_STARTUP_TIMEOUT='{raw}' must be a number of seconds > 0"
    ):
        contract.startup_timeout({contract.STARTUP_TIMEOUT_ENV: raw})


def test_never_started_says_why_only_when_the_job_did_not_start():
    assert launcher.never_started(mpi_up=True, started=True, seconds=500, limit=10) is None
    assert "startup handshake" in launcher.never_started(
        mpi_up=True, started=False, seconds=1, limit=10
    )
    assert "MIXLE_MPI_STARTUP_TIMEOUT=10" in launcher.never_started(
        mpi_up=False, started=False, seconds=11, limit=10
    )
    # a script that failed fast before MPI (a typo) is a plain failure, not "never started"
    assert launcher.never_started(mpi_up=False, started=False, seconds=2, limit=10) is None
    assert (
        launcher.never_started(mpi_up=False, started=False, seconds=2, limit=10, mpiexec_rc=1)
        is None
    )


def test_a_job_that_ended_fast_inside_mpi_init_never_started():
    """Campaign finding: a rank killed inside MPI_Init made the others' MPI_Init fail at once,
    before the startup deadline; some rank had begun MPI initialisation, so it never started."""
    why = launcher.never_started(
        mpi_up=False, started=False, seconds=2.5, limit=20, init_begun=True, mpiexec_rc=14
    )
    assert "MPI initialisation failed after 2.5 s" in why and "mpiexec exited 14" in why
    # mixle_mpi's own fit: mpiexec failing before any rank began MPI init did not start it either
    why = launcher.never_started(
        mpi_up=False, started=False, seconds=0.6, limit=20, own_job=True, mpiexec_rc=213
    )
    assert "mpiexec exited 213" in why and "before any rank began MPI initialisation" in why
    assert (
        launcher.never_started(
            mpi_up=False, started=False, seconds=0.6, limit=20, own_job=True, mpiexec_rc=0
        )
        is None
    )
    assert (
        launcher.never_started(
            mpi_up=True,
            started=True,
            seconds=1,
            limit=20,
            init_begun=True,
            own_job=True,
            mpiexec_rc=1,
        )
        is None
    )


def test_every_rank_marks_the_start_of_its_mpi_init(tmp_path, monkeypatch):
    marker = tmp_path / "init_begun.txt"
    monkeypatch.setenv(contract.INIT_BEGUN_ENV, str(marker))
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_RANK", "3")
    contract.mark_init_begun()
    monkeypatch.delenv("PMI_RANK")
    contract.mark_init_begun()  # no rank in its environment (not started by a launcher)
    host = socket.gethostname()
    me = procs.identity(os.getpid())
    tail = f"{host} {me[1]} {procs.pid_space() or '-'}"
    assert marker.read_text().splitlines() == [f"{me[0]} 3 {tail}", f"{me[0]} - {tail}"]
    assert contract.init_begun_pids(str(marker)) == [os.getpid()] * 2
    assert contract.init_begun_here(str(marker), host) == {3: me}
    monkeypatch.setenv(contract.INIT_BEGUN_ENV, str(tmp_path / "missing" / "x"))
    contract.mark_init_begun()  # cannot be written: the launcher only loses that knowledge


def test_a_rank_whose_process_ended_on_this_host_is_named_at_once_and_others_are_not(tmp_path):
    """The handshake leaves out (or gives up a collective waiting for) a rank whose process
    is gone, from the records of this host only: a pid of another host means nothing here."""
    records = tmp_path / "init_begun.txt"
    space = procs.pid_space()
    records.write_text(
        "".join(
            f"{pid} {rank} {host} 1.00 {space if host == 'here' else 'other-space'}\n"
            for pid, rank, host in (
                (101, 0, "here"),
                (102, 1, "here"),
                (103, 2, "there"),
                (104, "-", "here"),
                (105, 3, "here"),
            )
        )
        + "nonsense\n106 4 here\n"  # no identity recorded: never judged
    )
    clock = [0.0]
    dead = {102, 103, 104, 106}
    gone = startup.RanksGone(
        str(records),
        "here",
        gone=lambda ident: ident[0] in dead,
        every=0.25,
        clock=lambda: clock[0],
    )
    assert gone([1, 2, 3]) == {1: "its process (pid 102) ended on here while the job started"}
    assert (
        gone.give_up((0, 1, 2))
        == "rank 1: its process (pid 102) ended on here while the job started"
    )
    assert gone.give_up((0, 2, 3, 4)) is None  # rank 2's pid is of another pid space; 3 lives
    dead.add(105)
    assert gone([3]) == {}  # the file is read again only after `every`
    clock[0] = 0.3
    assert gone([3]) == {3: "its process (pid 105) ended on here while the job started"}
    assert gone.give_up((0, 1, 3)) == (
        "rank 1: its process (pid 102) ended on here while the job started; "
        "rank 3: its process (pid 105) ended on here while the job started"
    )


def test_without_the_launchers_records_no_rank_is_called_gone(tmp_path):
    assert startup.RanksGone("", "here", gone=lambda pid: True)([1, 2]) == {}
    assert startup.RanksGone(str(tmp_path / "none"), "here", gone=lambda pid: True)([1, 2]) == {}


def test_the_launcher_runs_a_job_again_for_73_and_74_within_their_budgets():
    left = {exitcodes.NEVER_STARTED: 1, exitcodes.RERUN_TO_RESUME: 2}
    assert launcher.relaunch_note(exitcodes.NEVER_STARTED, left) == "starting it again"
    assert launcher.relaunch_note(exitcodes.NEVER_STARTED, left) is None
    assert launcher.relaunch_note(exitcodes.RERUN_TO_RESUME, left).startswith(
        "running it again to resume"
    )
    assert launcher.relaunch_note(exitcodes.RERUN_TO_RESUME, left) is not None
    assert launcher.relaunch_note(exitcodes.RERUN_TO_RESUME, left) is None
    for code in (0, 1, 2, 70, 75, 130):  # only 73 and 74 have a budget
        assert (
            launcher.relaunch_note(code, {exitcodes.NEVER_STARTED: 5, exitcodes.RERUN_TO_RESUME: 5})
            is None
        )


def test_own_fit_is_known_from_its_command():
    assert launcher.is_own_fit(["/py", "-m", "mixle_mpi", "fit", "--config", "job.toml"])
    assert launcher.is_own_fit(["/py", "-m", "mixle_mpi.fitting.fitjob", "--model", "gmm1d"])
    assert not launcher.is_own_fit(["/py", "-m", "mixle_mpi.cli", "fitjob"])
    assert not launcher.is_own_fit(["/py", "script.py", "-m", "mixle_mpi"])


def test_a_driver_that_could_not_reconfigure_asks_for_a_rerun():
    from mixle_mpi.core.errors import ReconfigurationTimeout
    from mixle_mpi.runtime import exiting

    assert (
        exiting.exit_code_for(ReconfigurationTimeout("spawn stuck"))
        == exitcodes.RERUN_TO_RESUME
        == 74
    )


def test_judge_never_started():
    code, note = launcher.judge(0, None, never_started="a rank died")
    assert (
        code == exitcodes.NEVER_STARTED
        and "never started: a rank died" in note
        and "loses nothing" in note
    )
    code, note = launcher.judge(
        1, {"exit_code": exitcodes.NEVER_STARTED, "status": "error", "message": "X"}
    )
    assert code == exitcodes.NEVER_STARTED and note == "the job never started: X"
    # a driver's own status wins over the launcher's guess
    assert launcher.judge(0, {"exit_code": 0, "status": "ok"}, never_started="x")[0] == 0


def test_launch_env_sets_this_launch_markers_and_drops_an_outer_launchers():
    outer = {
        contract.MPI_UP_ENV: "/outer/up",
        contract.STARTED_ENV: "/outer/s",
        contract.TAG_ENV: "outer",
        contract.STATUS_ENV: "/outer/status",
        contract.DRIVER_PID_ENV: "/outer/d",
        "MIXLE_MPI_RUN_DIR": "/outer",
    }
    files = contract.RunFiles()
    try:
        env = launcher.launch_env(1, files.env("t1"), base=outer)
        assert (env[contract.MPI_UP_ENV], env[contract.STARTED_ENV], env[contract.TAG_ENV]) == (
            files.mpi_up,
            files.started,
            "t1",
        )
        assert (
            env["MIXLE_MPI_RUN_DIR"] == files.dir and env[contract.DRIVER_PID_ENV] == files.driver
        )
        assert all(os.path.dirname(env[v]) == files.dir for v in contract.FILE_VARS)
        assert contract.DRIVER_PID_ENV not in launcher.launch_env(
            1, files.env("t1", signals=False), base=outer
        )
    finally:
        files.remove()
    bare = launcher.launch_env(1, base=outer)
    assert not {*contract.FILE_VARS, contract.TAG_ENV, "MIXLE_MPI_RUN_DIR"} & set(
        bare
    )  # never an outer launcher's


def test_run_files_are_private_and_removed():
    files = contract.RunFiles()
    try:
        assert os.stat(files.dir).st_mode & 0o777 == 0o700
        assert os.path.dirname(files.status) == files.dir
    finally:
        files.remove()
    assert not os.path.exists(files.dir)


def test_the_run_folder_of_a_launch_over_several_hosts_is_in_the_shared_launch_folder(tmp_path):
    """Hosts do not share their temp folders: a driver on another host than the launcher's
    must still write its status, so the run folder goes where every host must look anyway
    (hidden, private); where it cannot be made there, in this host's temp folder."""
    files = contract.RunFiles(str(tmp_path))
    try:
        assert os.path.dirname(files.dir) == str(tmp_path) and os.path.basename(
            files.dir
        ).startswith(".mixle_mpi_run_")
        assert os.stat(files.dir).st_mode & 0o777 == 0o700
    finally:
        files.remove()
    assert os.listdir(tmp_path) == []
    fallback = contract.RunFiles(str(tmp_path / "no such folder"))
    try:
        assert os.path.dirname(fallback.dir) == tempfile.gettempdir()
    finally:
        fallback.remove()


def test_reaper_finds_processes_by_their_tag_only(tmp_path):
    env = dict(os.environ, **{contract.TAG_ENV: "tag-under-test"})
    tagged = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=dict(os.environ, **{contract.TAG_ENV: "tag-under-test-2"}),
    )
    try:
        assert reaper.tagged_pids("tag-under-test") == [tagged.pid]
        assert reaper.sweep("tag-under-test", grace=0.2) == [tagged.pid]
        assert tagged.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for p in (tagged, other):
            p.kill()
            p.wait()


def test_reaper_leaves_the_job_alone_when_the_launcher_says_done():
    env = dict(os.environ, **{contract.TAG_ENV: "tag-done"})
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "mixle_mpi.launch.reaper", "tag-done"],
            input=reaper.DONE,
            timeout=30,
        )
        assert r.returncode == 0 and victim.poll() is None
        r = subprocess.run(
            [sys.executable, "-m", "mixle_mpi.launch.reaper", "tag-done"],
            input=b"",
            timeout=30,
            capture_output=True,
        )
        assert victim.wait(timeout=10) == -9
        assert b"killed the job's 1 remaining processes" in r.stderr
    finally:
        victim.kill()
        victim.wait()


# -- a job mpiexec keeps alive for a stopped rank ----------------------------------------------
from fakeclock import FakeClock  # noqa: E402

from mixle_mpi.launch.jobchecks import StuckJobCheck  # noqa: E402


def test_a_job_whose_only_remaining_rank_is_stopped_is_killed_after_the_grace():
    clock = FakeClock(0.0)
    watch = StuckJobCheck(finish_grace=30, stuck_grace=10, clock=clock)
    assert watch.observe(False, {}) is None  # ranks not started yet: never stuck
    clock.now = 100
    assert watch.observe(False, {}) is None
    assert watch.observe(False, {11: "R", 12: "S", 13: "T"}) is None
    clock.now = 105
    assert watch.observe(False, {11: "Z", 13: "T"}) is None  # the others ended; 13 stays stopped
    clock.now = 116
    assert "every remaining rank process is stopped ([13])" in watch.observe(False, {13: "T"})


def test_a_stop_that_is_resumed_or_a_running_rank_is_not_stuck():
    clock = FakeClock(0.0)
    watch = StuckJobCheck(stuck_grace=10, clock=clock)
    watch.observe(False, {11: "T", 12: "T"})
    clock.now = 8
    assert watch.observe(False, {11: "S", 12: "T"}) is None  # 11 runs again
    clock.now = 30
    assert watch.observe(False, {11: "R", 12: "T"}) is None


def test_ranks_that_outlive_the_drivers_verdict_are_killed_after_the_finish_grace():
    clock = FakeClock(0.0)
    watch = StuckJobCheck(finish_grace=30, clock=clock)
    assert watch.observe(True, {11: "S"}) is None
    clock.now = 29
    assert watch.observe(True, {11: "S"}) is None
    clock.now = 31
    assert "the driver finished 31 s ago" in watch.observe(True, {11: "S"})
    assert StuckJobCheck(clock=clock).observe(True, {}) is None  # nothing left: mpiexec is ending


def test_rank_states_sees_a_stopped_python_rank_of_the_job(tmp_path):
    import signal
    import time

    env = dict(os.environ, **{contract.TAG_ENV: "tag-states", "PMI_RANK": "1"})
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=dict(os.environ, **{contract.TAG_ENV: "tag-states"}),
    )  # tagged, no rank: not a rank
    try:
        time.sleep(0.3)
        assert reaper.rank_states("tag-states") == {rank.pid: "S"}
        os.kill(rank.pid, signal.SIGSTOP)
        time.sleep(0.2)
        assert reaper.rank_states("tag-states") == {rank.pid: "T"}
    finally:
        for p in (rank, other):
            p.kill()
            p.wait()


def test_process_gone_sees_exited_and_zombie_processes():
    """A worker on the driver's host asks this about the driver: a zombie (killed, not yet
    reaped by mpiexec) is gone too."""
    import os
    import time

    assert not procs.gone(os.getpid())
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 10
    while procs.state(pid) not in ("Z", None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert procs.gone(pid)  # a zombie: ended, not yet reaped
    os.waitpid(pid, 0)
    assert procs.gone(pid) and procs.state(pid) is None


def test_mpich_shm_names_are_read_from_the_maps_of_the_process():
    from mixle_mpi.runtime.startup import mpich_shm_names

    maps = (
        "7f10 rw-s 00000000 00:1a 5 /dev/shm/mpich_shm_4871a0ef_0\n"
        "7f20 rw-s 00001000 00:1a 5 /dev/shm/mpich_shm_4871a0ef_0\n"
        "7f30 rw-s 00000000 00:1a 6 /dev/shm/mpich_vci_4871a0ef_0 (deleted)\n"
        "7f40 rw-s 00000000 00:1a 7 /dev/shm/sm_segment.vm.0.114e0001.0\n"
        "7f50 r-xp 00000000 08:01 8 /usr/lib/libc.so.6\n"
    )
    assert mpich_shm_names(maps) == [
        "/dev/shm/mpich_shm_4871a0ef_0"
    ]  # once; not one already unlinked


def test_a_fenced_workers_mpich_wrapper_is_found_and_seen_reaped(tmp_path):
    """Campaign run 69: before forking a replacement under MPICH the driver waits until the
    fenced worker's rank wrapper is reaped (see spawner.Spawner, its wait for fenced wrappers). Real processes:
    the wrapper, its Python child, a fence, and the wrapper's end."""
    import signal
    import time

    from mixle_mpi.launch.rankwrapper import wrapper_of, wrapper_path

    wrapper = subprocess.Popen(
        ["sh", wrapper_path(), sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "PMI_RANK": "1"},
    )
    try:
        deadline = time.monotonic() + 30
        child = None
        while child is None and time.monotonic() < deadline:
            kids = [pid for pid in procs.pids() if procs.parent(pid) == wrapper.pid]
            child = next(
                (k for k in kids if "time.sleep" in " ".join(procs.cmdline(k) or ())), None
            )
            time.sleep(0.01)
        assert child is not None, "the wrapper's Python child did not start"
        ident = wrapper_of(child)
        assert ident is not None and ident[0] == wrapper.pid and procs.not_reaped(ident)
        assert wrapper_of(wrapper.pid) is None  # the wrapper's own parent is no wrapper
        os.kill(child, signal.SIGKILL)  # the fence
        assert wrapper.wait(timeout=30) == 0  # a worker's signal death ends its wrapper with 0
        assert not procs.not_reaped(ident)  # reaped: Hydra has seen it go
        assert procs.identity(999_999_999) is None
    finally:
        wrapper.kill()


# -- a rank lost before MPI is up ------------------------------------------------------------
from mixle_mpi.launch.jobchecks import LostStartCheck  # noqa: E402


def test_a_rank_lost_before_mpi_is_up_ends_the_start_at_the_second_look():
    watch = LostStartCheck()
    assert watch.observe(False, [], {11: "S", 12: "R"}) is None  # nobody began MPI init yet
    assert watch.observe(False, [11], {11: "S", 12: "R", 13: "R"}) is None
    assert watch.observe(False, [11], {11: "S", 13: "R"}) is None  # 12 missing once: look again
    why = watch.observe(False, [11], {11: "S", 13: "R"})
    assert why.startswith(
        "rank process 12 ended before MPI was up on every rank (before its MPI initialisation)"
    )


def test_a_rank_that_began_mpi_init_and_died_is_named_so_and_a_zombie_counts_as_gone():
    watch = LostStartCheck()
    watch.observe(False, [11, 12], {11: "S", 12: "Z"})
    assert (
        "rank 2 (pid 12) ended before MPI was up on every rank (inside MPI initialisation)"
        in watch.observe(False, [11, 12], {11: "S"}, {11: 1, 12: 2})
    )


def test_a_rank_processs_mpi_rank_is_read_from_its_environment():
    env = dict(os.environ, PMI_RANK="3")
    env.pop("OMPI_COMM_WORLD_RANK", None)
    env.pop("PMIX_RANK", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == b"up\n"  # exec'd: /proc shows its own environment now
        assert reaper.rank_number(proc.pid) == 3
    finally:
        proc.kill()
        proc.wait()
    assert reaper.rank_number(proc.pid) is None  # gone


def test_a_child_a_starting_rank_ran_is_no_loss_when_it_ends():
    """A rank (pid 12, rank 1) runs a short child (pid 13) as it starts: the child carries the
    rank's environment and is taken for the rank while it runs (its parent is then a
    wrapper). Its end is not the rank's: the rank's own process is there again. Were the rank
    itself to end, it would be lost."""
    rank_of = {11: 0, 12: 1, 13: 1}
    watch = LostStartCheck()
    assert watch.observe(False, [11], {11: "S", 12: "R"}, rank_of) is None
    assert watch.observe(False, [11], {11: "S", 13: "R"}, rank_of) is None  # the child runs
    for _ in range(3):  # the child ended, its rank lives on
        assert watch.observe(False, [11], {11: "S", 12: "R"}, rank_of) is None
    watch.observe(False, [11], {11: "S"}, rank_of)
    assert watch.observe(False, [11], {11: "S"}, rank_of).startswith("rank 1 (pid 1")


def test_a_rank_missing_once_or_after_mpi_is_up_is_no_verdict():
    watch = LostStartCheck()
    watch.observe(False, [11], {11: "S", 12: "S"})
    assert watch.observe(False, [11], {11: "S"}) is None  # a look that missed it
    assert watch.observe(False, [11], {11: "S", 12: "S"}) is None  # there again
    assert watch.observe(False, [11], {11: "S"}) is None
    assert watch.observe(True, [11], {11: "S"}) is None  # MPI is up: the driver handles deaths


def test_a_rank_no_look_ever_saw_is_lost_once_another_began_mpi_init_long_enough_ago():
    """Killed before the launcher's first look (an external campaign killed ranks 0.3 s after
    the launch): on a one-host launch of our fit, the rank numbers never seen are lost."""
    clock = [0.0]
    watch = LostStartCheck(expect_here=4, appear_within=5.0, clock=lambda: clock[0])
    seen = {11: 0, 12: 2}
    assert watch.observe(False, [], {11: "R", 12: "R"}, seen) is None  # no MPI init begun yet
    clock[0] = 1.0
    assert watch.observe(False, [11], {11: "S", 12: "R"}, seen) is None  # the window starts here
    clock[0] = 5.9
    assert watch.observe(False, [11, 12], {11: "S", 12: "S"}, seen) is None
    clock[0] = 6.0
    why = watch.observe(False, [11, 12], {11: "S", 12: "S"}, seen)
    assert why.startswith(
        "ranks 1, 3 never appeared on this host, 5 s after another rank began MPI initialisation"
    )
    assert watch.observe(True, [11, 12], {11: "S", 12: "S"}, seen) is None  # MPI up: no verdict


@pytest.mark.parametrize(
    "expect_here, rank_of",
    [
        (None, {11: 0}),  # ranks on other hosts too, or not our fit: nothing to count
        (2, {}),  # no rank recognised at all: the looks cannot see this job's ranks
        (2, {11: 0, 12: 1}),
    ],
)
def test_ranks_not_seen_are_no_verdict_unless_counted_and_some_were_seen(expect_here, rank_of):
    clock = [0.0]
    watch = LostStartCheck(expect_here=expect_here, appear_within=5.0, clock=lambda: clock[0])
    ranks = {11: "S", 12: "S"}
    watch.observe(False, [11], ranks, rank_of)
    clock[0] = 100.0
    assert watch.observe(False, [11], ranks, rank_of) is None


def test_never_started_names_the_lost_rank_and_how_much_sooner_it_ended():
    why = launcher.never_started(
        mpi_up=False,
        started=False,
        seconds=4.2,
        limit=120,
        init_begun=True,
        lost="rank process 12 ended before MPI was up on every rank",
    )
    assert why == (
        "rank process 12 ended before MPI was up on every rank; ended after 4.2 s instead of at "
        "MIXLE_MPI_STARTUP_TIMEOUT=120 s"
    )


def test_init_begun_pids_are_read_back_as_written(tmp_path, monkeypatch):
    path = tmp_path / "begun"
    monkeypatch.setenv(contract.INIT_BEGUN_ENV, str(path))
    contract.mark_init_begun()
    assert contract.init_begun_pids(str(path)) == [os.getpid()]
    assert contract.init_begun_pids(str(tmp_path / "none")) == []
    # a shared run folder holds every host's ranks: the launcher looks only for its own host's
    with open(path, "a") as fh:
        fh.write("4242 3 elsewhere 1.00 another-space\n")
    assert contract.init_begun_pids(str(path)) == [os.getpid(), 4242]
    assert contract.init_begun_pids(str(path), socket.gethostname()) == [os.getpid()]


def test_a_rank_stopped_while_the_job_starts_is_fenced_and_left_out_after_a_second(tmp_path):
    """Before its hello a rank has no heartbeats: a SIGSTOPped one held the handshake for the
    whole startup_timeout (external campaign, MPICH seed 3711 run 28: 21.7 s). It is now
    named, and fenced, once it stayed stopped at every look for over a second."""
    records = tmp_path / "init_begun.txt"
    space = procs.pid_space()
    records.write_text("".join(f"{101 + r} {r} here 1.00 {space}\n" for r in (0, 1, 2)))
    clock, states, fenced = [0.0], {101: "S", 102: "T", 103: "t"}, []
    gone = startup.RanksGone(
        str(records),
        "here",
        gone=lambda ident: False,
        every=0.25,
        clock=lambda: clock[0],
        state=states.get,
        fence=lambda ident: fenced.append(ident[0]) or True,
    )
    assert gone([1, 2]) == {}
    clock[0] = 0.6
    states[102] = "S"  # it ran again: its clock starts over
    assert gone([1, 2]) == {}
    states[102] = "T"
    for t in (0.9, 1.5):
        clock[0] = t
        assert gone([1, 2]) == {}
    clock[0] = 2.0
    assert gone([1, 2]) == {
        1: "its process (pid 102) on here stayed stopped for over 1 s while the job started; fenced"
    }
    assert fenced == [102]  # a tracer's stop ("t", a debugger) is never judged


def test_stopped_watch_counts_only_an_unbroken_stop():
    from mixle_mpi.launch.jobchecks import StoppedAtStartCheck

    clock = [0.0]
    watch = StoppedAtStartCheck(1.0, clock=lambda: clock[0])
    assert not watch.too_long(1, "T")
    clock[0] = 1.0
    assert not watch.too_long(1, "T")  # exactly the limit: not over it
    clock[0] = 1.01
    assert watch.too_long(1, "T")
    assert not watch.too_long(1, "R") and not watch.too_long(1, "T")  # started over
    assert not watch.too_long(2, None)  # gone or unreadable: the gone check decides


def test_startup_fencing_never_signals_a_pid_reused_since_the_rank_was_born(tmp_path):
    """Before, init_begun.txt held bare "pid rank host" and the identity was read only at kill
    time: a rank's pid reused by another stopped process was SIGKILLed. The record now holds
    the rank's identity at its birth (pid, start time, pid space): a process that is not the
    one born there is never signalled, and the rank it replaced is named as ended."""
    impostor = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(impostor.pid, signal.SIGSTOP)
        for _ in range(200):
            if procs.state(impostor.pid) == "T":
                break
            time.sleep(0.01)
        born = float(procs.identity(impostor.pid)[1]) - 5.0  # the rank, born before it
        records = tmp_path / "init_begun.txt"
        records.write_text(f"{impostor.pid} 1 here {born:.2f} {procs.pid_space() or '-'}\n")
        clock = [0.0]
        gone = startup.RanksGone(str(records), "here", every=0.0, clock=lambda: clock[0])
        found = gone([1])
        for t in (0.5, 1.2, 2.5):  # past the stopped-rank limit (1 s)
            clock[0] = t
            found = found or gone([1])
        assert found == {1: f"its process (pid {impostor.pid}) ended on here while the job started"}
        assert procs.state(impostor.pid) == "T"  # alive and never signalled
    finally:
        impostor.kill()
        impostor.wait()
