"""Jobs across fake hosts (tests/fakehosts.py): the paths that differ from one host (issue 13).

The driver runs on host A; workers on hosts B and C, each a network namespace with its own
address and hostname, reached by Open MPI's launcher through a stand-in for ssh. Ranks on
different hosts talk TCP, ranks on one host shared memory. Open MPI, and MPICH for what
differs there (its ofi network layer; a dead peer on another host blocks its library).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES, OMPI_PYTHON
from fakehosts import FakeHosts, available
from mpiharness import (
    fit_args,
    mpich_python,
    no_leftover_processes,
    run_job,
    same_fit,
    wait_for_checkpoint,
)

from mixle_mpi.chaos.fault_plan import read_fired, unfired
from mixle_mpi.core import exitcodes

pytestmark = [pytest.mark.mpijob, pytest.mark.skipif(bool(available()), reason=available() or "ok")]
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 1, 5
SLOTS = [1, 2, 2]  # ranks: 0 on A (the driver), 1-2 on B, 3-4 on C
# Open MPI's own runtime (PRRTE's spawn server) sometimes fails a Spawn with a PMIx error and a
# heap-corruption report: 1 full run in 6 here, and twice in a row in one CI run. The fit still
# ends with the right bits, without a replacement; the same job is then run again.
SPAWN_TRIES = 3


def prrte_spawn_failed(joined: list, stderr: str, attempt: int) -> bool:
    """Whether a job whose replacement never joined is to be run once more: PRRTE's spawn
    server failed it (its error is on stderr) and tries are left."""
    return not joined and attempt < SPAWN_TRIES and "pmix_server_dyn" in stderr


@pytest.fixture
def hosts(tmp_path):
    with FakeHosts(tmp_path, SLOTS) as h:
        yield h


def test_sets_of_fake_hosts_made_one_after_another_leave_nothing_behind(tmp_path):
    """Each test makes its own hosts right after the last test's went: the names must not
    collide with interfaces the kernel has yet to remove (CI once failed on exactly that)."""
    tags = []
    for _ in range(6):
        with FakeHosts(tmp_path, SLOTS) as made:
            tags.append(made.tag)
            assert (
                len(made.pids(1)) == 0
                and made.bridge
                in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
            )
    assert len(set(tags)) == len(tags)
    left = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(t in left or t in spaces for t in tags), (left, spaces)


def _job(hosts, tmp_path, plan=None, env=None, timeout=240, slots=None):
    env = {"MIXLE_MPI_MPIEXEC_ARGS": hosts.mpiexec_args(slots), **(env or {})}
    return run_job(
        OMPI_PYTHON,
        sum(slots or SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        env=env,
        timeout=timeout,
    )


def _hosts_of(job) -> dict:
    loaded = [e for e in job.events if e["event"] == "loaded"]
    assert loaded, job.describe()
    return {int(w): h for w, h in loaded[0]["hosts"].items()}


def test_a_fit_across_three_hosts_gives_the_same_bits(hosts, tmp_path, reference):
    job = _job(hosts, tmp_path)
    assert job.rc == 0, job.describe()
    assert _hosts_of(job) == {1: "hostb", 2: "hostb", 3: "hostc", 4: "hostc"}, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()


@pytest.mark.parametrize("action", ["stop", "kill"])
def test_a_worker_on_another_host_that_hangs_or_dies_is_fenced_there_and_recovered(
    action, hosts, tmp_path, reference
):
    """Worker 2 on host B is SIGSTOPped (or SIGKILLed). The driver on host A cannot signal
    it; worker 1, also on host B, kills it for the driver (a stopped process is not dead to
    MPI, and Open MPI's shrink would wait for it). Its replacement starts on host B again.
    The fit ends with the reference's bits."""
    plan = f"2:{action}:estep_before:2"
    for attempt in range(1, SPAWN_TRIES + 1):
        run_dir = tmp_path / f"attempt{attempt}"
        run_dir.mkdir()
        fault_log = run_dir / "fired.jsonl"
        # respawn_wait: the fit waits for the replacement, so that it joins before the fit ends
        job = _job(
            hosts,
            run_dir,
            plan=plan,
            env={"MIXLE_MPI_FAULT_LOG": str(fault_log), "MIXLE_MPI_RESPAWN_WAIT": "1"},
        )
        assert unfired(plan, read_fired(str(fault_log))) == [], job.describe()
        assert job.rc == 0, job.describe()
        assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
        assert _hosts_of(job) == {1: "hostb", 2: "hostb", 3: "hostc", 4: "hostc"}, job.describe()
        if (
            action == "stop"
        ):  # worker 1 killed it on host B (a killed one is gone already: nothing to signal)
            assert "fenced failed worker 2" in job.stderr, job.describe()
        assert [e["method"] for e in job.events if e["event"] == "shrink"] == ["ulfm"], (
            job.describe()
        )  # known dead
        detected = [e for e in job.events if e["event"] == "failure_detected"]
        assert [(e["worker"], e["host"]) for e in detected] == [(2, "hostb")], job.describe()
        assert detected[0].get("fenced_by") == 1 and not detected[0]["fenced"], detected
        joined = [e for e in job.events if e["event"] == "respawned"]
        if not prrte_spawn_failed(joined, job.stderr, attempt):
            break
    # host B is up (worker 1 lives there): the replacement starts there, not on the driver's host
    assert [(e["worker"], e["host"]) for e in joined] == [(2, "hostb")], job.describe()
    assert (
        no_leftover_processes(str(tmp_path)) == [] and hosts.pids(1) == [] and hosts.pids(2) == []
    )


LOST_N, LOST_ITS = 200_000, 40


@pytest.fixture(scope="module")
def whole_fit(tmp_path_factory):
    """The same fit on one host, no failure, 3 ranks: the bits a relaunch must give. (At this
    size mixle's own multiprocessing fit differs from ours in the last bits, for a reason
    not found yet: see the notes; the tests at small sizes compare with mixle's.)"""
    job = run_job(
        OMPI_PYTHON,
        3,
        fit_args(MODEL, LOST_N, SHARDS, SUB, LOST_ITS),
        tmp_path_factory.mktemp("whole"),
    )
    assert job.rc == 0, job.describe()
    return job.result


def _lose_host_at(hosts, ck, iteration: int, lost: list, host: int = 2) -> threading.Thread:
    """Host C (or ``host``) goes down for good once the checkpoint ``ck`` holds ``iteration``:
    every process on it (its MPI daemon or proxy, workers 3 and 4) SIGKILLed at once, and
    nothing can be started there again (its ssh answers "No route to host")."""
    from mixle_mpi.storage import checkpoint as ckpt

    def watch():
        end = time.monotonic() + 180
        while time.monotonic() < end:
            try:
                state = ckpt.read(str(ck))  # None until the first one is written
            except ckpt.CheckpointError:
                state = None
            if state is not None and state.iteration >= iteration:
                lost.append(time.time())
                lost.extend(hosts.lose(host, down=True))
                return
            time.sleep(0.05)

    killer = threading.Thread(target=watch, daemon=True)
    killer.start()
    return killer


def _flags(hosts, library: str, slots=None) -> dict:
    if library == "mpich":
        return {"MIXLE_MPI_MPIEXEC_ARGS": hosts.mpich_args(slots), **hosts.mpich_env()}
    return {"MIXLE_MPI_MPIEXEC_ARGS": hosts.mpiexec_args(slots)}


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_lost_host_is_left_out_and_the_job_resumes_on_the_rest_to_the_same_bits(
    lib, hosts, tmp_path, whole_fit
):
    """Host C goes down mid-fit for good. Open MPI 5.0's runtime ends a job that lost a
    daemon (exit 74), MPICH's Hydra ends at once when a proxy's link drops (exit 255, no
    status): either way the launcher probes each host, finds C does not answer, leaves it
    out and launches the job again on hosts A and B (3 ranks), which resumes from the
    checkpoint. Exit 0, the bits of a fit on one host, no user action; the relaunch is recorded."""
    job = _host_c_lost_mid_fit(lib, hosts, tmp_path, whole_fit)
    c = hosts.addresses[2]
    assert (
        f"host {c}: lost" in job.stderr
        and f"launching again without {c} on 3 ranks (was 5)" in job.stderr
    ), job.describe()
    relaunched = [e for e in job.events if e["event"] == "relaunched"]
    assert [(e["lost_hosts"], e["ranks"], e["attempt"]) for e in relaunched] == [([c], 3, 2)], (
        job.describe()
    )
    resumed = [e for e in job.events if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["iteration"] >= 3, job.describe()
    assert set(_hosts_of_last(job).values()) == {"hostb"}, (
        job.describe()
    )  # the workers of the relaunch
    assert no_leftover_processes(str(tmp_path)) == [] and hosts.pids(1) == []


def _host_c_lost_mid_fit(lib, hosts, folder: Path, whole_fit):
    """The fit over ``hosts`` with its checkpoint in ``folder``, host C lost at iteration 3:
    it ended with exit 0 and the bits of a fit on one host."""
    library, python = lib
    ck = folder / "ck.h5"
    args = fit_args(MODEL, LOST_N, SHARDS, SUB, LOST_ITS) + ["--checkpoint", str(ck)]
    lost: list = []
    killer = _lose_host_at(hosts, ck, 3, lost)
    job = run_job(python, sum(SLOTS), args, folder / "a", env=_flags(hosts, library), timeout=240)
    killer.join(5)
    assert lost, "host C was never lost: the fit ended first\n" + job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, whole_fit), job.describe()
    return job


def _hosts_of_last(job) -> dict:
    loaded = [e for e in job.events if e["event"] == "loaded"]
    assert loaded, job.describe()
    return {int(w): h for w, h in loaded[-1]["hosts"].items()}


def test_a_host_down_at_launch_is_left_out_and_the_budget_ends_a_job_that_loses_more(
    hosts, tmp_path, reference
):
    """Host C is down before the job starts: the launch cannot reach it, the probe says so,
    and the job runs on hosts A and B to the reference's bits. With --max-host-failures 0
    the same loss ends the command with exit 74 and says which host and which budget."""
    hosts.lose(2, down=True)
    job = run_job(
        OMPI_PYTHON,
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path / "a",
        env=_flags(hosts, "openmpi"),
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert [e["lost_hosts"] for e in job.events if e["event"] == "relaunched"] == [
        [hosts.addresses[2]]
    ], job.describe()
    capped = run_job(
        OMPI_PYTHON,
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path / "b",
        env=_flags(hosts, "openmpi"),
        launch=("--max-host-failures", "0"),
    )
    assert capped.rc == exitcodes.RERUN_TO_RESUME, capped.describe()
    assert (
        f"host(s) {hosts.addresses[2]} lost: 1 host losses in this job, more than --max-host-failures=0"
        in capped.stderr
    )
    assert not [e for e in capped.events if e["event"] == "relaunched"], capped.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.skipif(mpich_python() is None, reason="no MPICH environment (.venv-mpich)")
def test_under_mpich_a_dead_worker_on_another_host_ends_the_job_in_bounded_time(
    hosts, tmp_path, reference
):
    """MPICH over libfabric's tcp provider (the sockets provider: the test below): after worker 2 on host B is SIGKILLed, a call into
    the driver's MPI library may block for good (holding MPICH's global lock, so the heartbeat
    thread blocks too). The driver's watchdog then ends it with exit 74 and says why, after
    reconfigure_timeout + 30 s, and the launcher's resume meets the same planned fault again:
    seen there by heartbeats, it is recovered (its replacement starts on host B) to the
    reference's bits; met blocked again, the command ends with exit 74. Either way it ends
    within its bound and says what happened."""
    plan = "2:kill:estep_before:2"
    env = {
        "MIXLE_MPI_MPIEXEC_ARGS": hosts.mpich_args(),
        **hosts.mpich_env("tcp"),
        "MIXLE_MPI_RECONFIGURE_TIMEOUT": "10",
        "MIXLE_MPI_DRIVER_TIMEOUT": "30",
    }
    t0 = time.monotonic()
    job = run_job(
        mpich_python(),
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        env=env,
        timeout=600,
    )
    assert time.monotonic() - t0 < 400, job.describe()
    assert job.rc in (0, 74), job.describe()
    assert "worker 2 kill at estep_before" in job.stderr, job.describe()  # the planned fault fired
    if job.rc == 74 or "attempt 2" in job.stderr:  # a blocked library: the watchdog said why
        assert "the driver's MPI library made no progress for" in job.stderr, job.describe()
    if job.rc == 0:
        assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.skipif(mpich_python() is None, reason="no MPICH environment (.venv-mpich)")
def test_under_mpich_over_libfabric_sockets_a_dead_worker_on_another_host_is_recovered_in_the_job(
    hosts, tmp_path, reference
):
    """The same kill over libfabric's sockets provider (FI_PROVIDER=sockets, the fake hosts'
    default): the driver's library does not block; heartbeats see worker 2 silent, the
    emulated shrink goes on with workers 1, 3 and 4, in the same job (no relaunch, no
    watchdog), to the reference's bits (bench/results/mpich_hosts_facts.md: 9 of 9)."""
    plan = "2:kill:estep_before:2"
    env = {
        "MIXLE_MPI_MPIEXEC_ARGS": hosts.mpich_args(),
        **hosts.mpich_env("sockets"),
        "MIXLE_MPI_RECONFIGURE_TIMEOUT": "10",
        "MIXLE_MPI_DRIVER_TIMEOUT": "30",
    }
    t0 = time.monotonic()
    job = run_job(
        mpich_python(),
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        env=env,
        timeout=300,
        launch=("--max-restarts", "0"),
    )
    assert time.monotonic() - t0 < 120, job.describe()
    assert job.rc == 0, job.describe()
    assert "worker 2 kill at estep_before" in job.stderr, job.describe()
    assert "made no progress" not in job.stderr and "attempt 2" not in job.stderr, job.describe()
    detected = [e for e in job.events if e["event"] == "failure_detected"]
    assert [(e["worker"], e["host"]) for e in detected] == [(2, "hostb")], job.describe()
    assert [e["method"] for e in job.events if e["event"] == "shrink"] == ["emulated"], (
        job.describe()
    )
    assert [e for e in job.events if e["event"] == "recovery"], job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_dead_driver_on_host_a_is_followed_by_a_worker_on_another_host(
    hosts, tmp_path, reference
):
    """The driver (alone on host A) is SIGKILLed before E-step 3; with failover on, worker 1
    on host B takes over in the same job, resumes from the checkpoint (on the one shared file
    system) and ends with mixle's reference bits."""
    plan = "0:kill:estep_before:3"
    log = tmp_path / "fired.jsonl"
    args = fit_args(MODEL, N, SHARDS, SUB, ITS) + ["--checkpoint", str(tmp_path / "ck.h5")]
    job = run_job(
        OMPI_PYTHON,
        sum(SLOTS),
        args,
        tmp_path / "job",
        plan=plan,
        env={
            **_flags(hosts, "openmpi"),
            "MIXLE_MPI_FAILOVER": "1",
            "MIXLE_MPI_FAULT_LOG": str(log),
        },
    )
    assert unfired(plan, read_fired(str(log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    (elected,) = [e for e in job.events if e["event"] == "driver_elected"]
    assert elected["rank"] == 1 and elected["host"] == "hostb", elected
    assert [e["iteration"] for e in job.events if e["event"] == "resumed"] == [3], job.describe()
    assert (
        no_leftover_processes(str(tmp_path)) == [] and hosts.pids(1) == [] and hosts.pids(2) == []
    )


def test_mixle_mpi_fit_tells_the_user_of_a_lost_host_in_status_inspect_and_summary(hosts, tmp_path):
    """What a user sees: `mixle-mpi fit` across the hosts, host C lost mid-fit; the fit ends
    with exit 0 and its summary.json, `status` and `inspect` say which host was lost and on
    how many ranks the fit went on."""
    import numpy as np

    rng = np.random.RandomState(0)
    np.save(
        tmp_path / "x.npy",
        np.concatenate([rng.normal(m, 1.0, 70_000) for m in (-4, 0, 4)])[:, None],
    )
    out = tmp_path / "out"
    lost: list = []
    killer = _lose_host_at(hosts, out / "checkpoint.h5", 3, lost)
    env = {**os.environ, **_flags(hosts, "openmpi"), "PYTHONWARNINGS": "ignore"}
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    fit = subprocess.run(
        [
            OMPI_PYTHON,
            "-m",
            "mixle_mpi",
            "fit",
            "-n",
            str(sum(SLOTS)),
            "--timeout",
            "240",
            "--data",
            str(tmp_path / "x.npy"),
            "--model",
            "gmm:k=3,cov=diag",
            "--num-shards",
            "4",
            "--max-its",
            "60",
            "--checkpoint-every",
            "1",
            "--out-dir",
            str(out),
            "--progress",
            "off",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=400,
    )
    killer.join(5)
    assert lost and fit.returncode == 0, fit.stdout[-3000:] + fit.stderr[-6000:]
    c = hosts.addresses[2]
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["lost_hosts"], r["ranks"], r["was_ranks"]) for r in summary["relaunches"]] == [
        ([c], 3, 5)
    ], summary
    status = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "status", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        f"hosts lost: {c}; launched again without them 1 time(s), now on 3 ranks" in status.stdout
    ), status.stdout
    inspect = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "inspect", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"host(s) {c} lost: launched again without them on 3 ranks (was 5)" in inspect.stdout, (
        inspect.stdout
    )
    assert no_leftover_processes(str(tmp_path)) == []


# -- separate file systems: each host its own /tmp, only the out-dir shared (issue 36) -----------
@pytest.fixture
def shared():
    """A folder every fake host sees, not under /tmp (each host's own there): the job's
    folder, out-dir, checkpoint, event log and fault log."""
    folder = Path(tempfile.mkdtemp(prefix="mixle_mpi_shared_", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def private_hosts(tmp_path):
    with FakeHosts(tmp_path, SLOTS, private_tmp=True) as h:
        yield h


def test_with_private_tmp_a_file_in_one_hosts_tmp_is_seen_by_no_other_host(private_hosts, shared):
    """The fake hosts' /tmp is private: made on B, it is seen neither on A nor on C, and B sees
    it again in a later session (a host's /tmp outlives one ssh); a folder outside /tmp is shared."""
    name = f"mixle_mpi_private_{private_hosts.tag}"

    def on(host: str, command: str) -> int:
        return subprocess.run(
            [str(private_hosts.agent), host, command], capture_output=True, timeout=30
        ).returncode

    assert on("hostb", f"touch /tmp/{name} {shared}/{name}") == 0
    assert not (Path("/tmp") / name).exists() and (shared / name).exists()
    assert on("hostc", f"test -e /tmp/{name}") == 1 and on("hostc", f"test -e {shared}/{name}") == 0
    assert on("hostb", f"test -e /tmp/{name}") == 0


@pytest.mark.parametrize("lib", LIBRARIES)
def test_with_a_tmp_per_host_a_fit_across_hosts_gives_the_same_bits(
    lib, private_hosts, shared, reference
):
    """Only the job's folder is shared; the launcher's run folder is in it (hidden), not in
    host A's /tmp, which the workers' hosts cannot see. Every worker reads its own shards
    from the shared store (``own_read_min_bytes`` 0), to the reference's bits."""
    library, python = lib
    job = run_job(
        python,
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        shared,
        env={**_flags(private_hosts, library), "MIXLE_MPI_OWN_READ_MIN_BYTES": "0"},
    )
    assert job.rc == 0, job.describe()
    assert _hosts_of(job) == {1: "hostb", 2: "hostb", 3: "hostc", 4: "hostc"}, job.describe()
    assert [e["read_by_workers"] for e in job.events if e["event"] == "loaded"] == [[1, 2, 3, 4]], (
        job.describe()
    )
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert (
        no_leftover_processes(str(shared)) == []
        and private_hosts.pids(1) == private_hosts.pids(2) == []
    )


@pytest.mark.parametrize("lib", LIBRARIES)
def test_with_a_tmp_per_host_a_worker_killed_on_host_b_is_replaced_there_to_the_same_bits(
    lib, private_hosts, shared, tmp_path, reference
):
    """Worker 2 on host B is SIGKILLed; its replacement starts on host B and writes its birth
    record into the run folder, which is in the shared launch folder. The work folder, with
    the shard store, is in host A's own /tmp: no worker can open the store, so the driver
    streams every shard, the replacement's too. The fault log is in the shared folder, as
    the rank that fires it writes it: under MPICH the driver's library may block after the
    kill (see the MPICH test above), and the launcher's resume then does not fire it again."""
    library, python = lib
    plan = "2:kill:estep_before:2"
    for attempt in range(1, SPAWN_TRIES + 1):
        run_dir = shared / f"attempt{attempt}"
        fault_log = run_dir / "fired.jsonl"
        job = run_job(
            python,
            sum(SLOTS),
            fit_args(MODEL, N, SHARDS, SUB, ITS),
            run_dir,
            plan=plan,
            workdir=tmp_path / f"work{attempt}",
            env={
                **_flags(private_hosts, library),
                "MIXLE_MPI_FAULT_LOG": str(fault_log),
                "MIXLE_MPI_RESPAWN_WAIT": "1",
                "MIXLE_MPI_OWN_READ_MIN_BYTES": "0",
                "MIXLE_MPI_RECONFIGURE_TIMEOUT": "10",
            },
        )
        assert [f["worker"] for f in read_fired(str(fault_log))] == [2], (
            job.describe()
        )  # once, resumed or not
        assert job.rc == 0, job.describe()
        assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
        loads = [e["read_by_workers"] for e in job.events if e["event"] == "loaded"]
        assert loads and not any(loads), job.describe()
        joined = [e for e in job.events if e["event"] == "respawned"]
        if not prrte_spawn_failed(joined, job.stderr, attempt):
            break
    blocked = library == "mpich" and "the driver's MPI library made no progress" in job.stderr
    assert blocked or [(e["worker"], e["host"]) for e in joined] == [(2, "hostb")], job.describe()
    assert "no birth record at" not in job.stderr and "going on without it" not in job.stderr, (
        job.describe()
    )
    assert (
        no_leftover_processes(str(shared)) == []
        and private_hosts.pids(1) == private_hosts.pids(2) == []
    )


@pytest.mark.parametrize("lib", LIBRARIES)
def test_with_a_tmp_per_host_a_lost_host_is_left_out_and_the_job_resumes_to_the_same_bits(
    lib, private_hosts, shared, whole_fit
):
    """Host C goes down for good mid-fit, as in the test with one /tmp; the checkpoint is in
    the shared folder. The probes find B up, with the job's folder; the relaunch on A and B
    resumes to the bits of a fit on one host."""
    job = _host_c_lost_mid_fit(lib, private_hosts, shared, whole_fit)
    c = private_hosts.addresses[2]
    relaunched = [e for e in job.events if e["event"] == "relaunched"]
    assert [(e["lost_hosts"], e["ranks"]) for e in relaunched] == [([c], 3)], job.describe()
    assert [e["iteration"] >= 3 for e in job.events if e["event"] == "resumed"] == [True], (
        job.describe()
    )
    assert no_leftover_processes(str(shared)) == [] and private_hosts.pids(1) == []


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_job_launched_from_a_folder_its_other_hosts_do_not_have_ends_saying_so(
    lib, private_hosts, tmp_path
):
    """Launched from a folder in host A's own /tmp: mpiexec starts every rank there, and B and
    C do not have it (Hydra's proxy cannot change into it; Open MPI's daemons there die and
    the driver finds itself alone). Not a lost host: the probes, run again from / as nothing
    ran in the folder, find B and C up without it, and the command ends with exit 2 naming
    the folder and the hosts."""
    library, python = lib
    t0 = time.monotonic()
    job = run_job(
        python,
        sum(SLOTS),
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path / "job",
        env=_flags(private_hosts, library),
        timeout=120,
    )
    assert time.monotonic() - t0 < 60, job.describe()
    assert job.rc == exitcodes.BAD_INPUT, job.describe()
    b, c = private_hosts.addresses[1:]
    assert (
        f"error: the folder this job was launched from, {tmp_path / 'job'}, is not on host(s) {b}, {c}: "
        "mpiexec starts every rank in it"
    ) in job.stderr, job.describe()
    assert "lost (" not in job.stderr and "launching again" not in job.stderr and not job.events, (
        job.describe()
    )
    # no rank of the job is left. (Hydra, ending at one proxy's error, can leave another
    # proxy waiting for good: the fake ssh has no client on host A to hang up on it, so
    # the hosts' processes are not checked here; leaving the fake hosts kills it.)
    assert no_leftover_processes(str(tmp_path / "job")) == []


@pytest.mark.parametrize(
    "lib", LIBRARIES[:1]
)  # the launcher's and the driver's part: one MPI is enough
def test_with_a_tmp_per_host_a_lost_drivers_host_with_the_checkpoint_in_its_tmp_starts_over_saying_so(
    lib, tmp_path, shared, whole_fit
):
    """The driver runs on host B (host A only launches), with the checkpoint in B's own /tmp.
    B goes down mid-fit: the relaunch runs on host C alone, whose driver finds no checkpoint
    there. It says so, naming the path and the host, and the fit starts over, to the bits of
    a fit on one host."""
    library, python = lib
    slots = [0, 2, 2]
    with FakeHosts(tmp_path, slots, private_tmp=True) as hosts:
        ck = f"/tmp/mixle_mpi_ck_{hosts.tag}.h5"  # each host's own
        args = fit_args(MODEL, LOST_N, SHARDS, SUB, LOST_ITS) + ["--checkpoint", ck]
        lost: list = []
        killer = _lose_host_at(hosts, hosts.tmps[1] / Path(ck).name, 3, lost, host=1)
        job = run_job(
            python, sum(slots), args, shared, env=_flags(hosts, library, slots), timeout=240
        )
        killer.join(5)
        assert lost, "host B was never lost: the fit ended first\n" + job.describe()
        assert job.rc == 0, job.describe()
        assert same_fit(job.result, whole_fit), job.describe()
        b = hosts.addresses[1]
        assert [e["lost_hosts"] for e in job.events if e["event"] == "relaunched"] == [[b]], (
            job.describe()
        )
        assert (
            f"launched again without lost host(s) {b}, this job finds no checkpoint at {ck} on this host "
            "(hostc): the fit starts over"
        ) in job.stderr, job.describe()
        assert not [e for e in job.events if e["event"] == "resumed"], job.describe()
        assert (hosts.tmps[2] / Path(ck).name).exists() and not Path(
            ck
        ).exists()  # C's own, written afresh
        assert no_leftover_processes(str(shared)) == [] and hosts.pids(2) == []


def test_fake_hosts_that_fail_to_start_leave_nothing_behind(tmp_path):
    """A set of hosts whose start fails after its namespaces were made (here: the folder for
    its ssh stand-in is missing) removes them again (two once outlived a bench run)."""
    made = FakeHosts(tmp_path / "missing" / "deeper", SLOTS)
    with pytest.raises(OSError):
        made.__enter__()
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert made.tag not in spaces and made.bridge not in links, (spaces, links)


def test_a_time_limit_signal_across_hosts_checkpoints_and_the_rerun_resumes_to_the_same_bits(
    hosts, tmp_path, whole_fit
):
    """SIGUSR1 to `mixle-mpi run` (as a batch script passes SLURM's time-limit signal on):
    the launcher forwards it to the driver on host A alone, which checkpoints and exits 75
    (its workers on B and C end too); the same command resumes to a one-host fit's bits."""
    from mixle_mpi.storage import checkpoint as ckpt

    ck = tmp_path / "ck.h5"
    env = {
        **os.environ,
        **_flags(hosts, "openmpi"),
        "PYTHONWARNINGS": "ignore",
        "MIXLE_MPI_FAULT_PLAN": "",
    }
    cmd = [
        OMPI_PYTHON,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(sum(SLOTS)),
        "--timeout",
        "200",
        "--",
        OMPI_PYTHON,
        "-m",
        "mixle_mpi.fitting.fitjob",
        *fit_args(MODEL, LOST_N, SHARDS, SUB, LOST_ITS),
        "--checkpoint",
        str(ck),
        "--workdir",
        str(tmp_path / "work"),
        "--quiet",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=str(tmp_path),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_checkpoint(ck, 2, proc)
    os.kill(proc.pid, signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75 and "received SIGUSR1: passed it to the driver" in err, err[-4000:]
    assert not ckpt.read(str(ck)).finished and hosts.pids(1) == [] and hosts.pids(2) == []
    again = run_job(
        OMPI_PYTHON,
        sum(SLOTS),
        fit_args(MODEL, LOST_N, SHARDS, SUB, LOST_ITS) + ["--checkpoint", str(ck)],
        tmp_path / "again",
        env=_flags(hosts, "openmpi"),
    )
    assert again.rc == 0 and [e["event"] for e in again.events].count("resumed") == 1, (
        again.describe()
    )
    assert same_fit(again.result, whole_fit), again.describe()
    assert no_leftover_processes(str(tmp_path)) == []
