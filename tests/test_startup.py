"""A rank that dies while the job starts never hangs it, and a killed launcher takes its
whole job with it. Real jobs under mpiexec, real deaths, deadlines on everything.

- ``startup``: a worker dies right after MPI init, before it says hello: the driver leaves
  it out at once (ULFM tells; under MPICH the driver sees its process gone on its host),
  the fit goes on and the rank is respawned: same bits as mixle's reference.
- ``handshake``: a worker dies after the driver's go, inside the communicator's creation:
  the fit goes on, or the job ends as "never started" (exit 73) and the launcher starts
  it again; either way the same bits.
- MPI init: a rank that dies before MPI_Init finished leaves the others blocked inside it;
  the launcher ends the job as soon as it has seen that rank's process gone, or, for one
  of our fit's ranks on one host that died before the launcher's first look, once it has
  not appeared 5 s after another began MPI init (elsewhere their alarm at the startup
  deadline does), and the job exits 73.
- The launcher SIGKILLed with its process group: no process of the job survives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES, with_libraries
from mpiharness import fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import read_fired, unfired
from mixle_mpi.core import exitcodes

pytestmark = pytest.mark.mpijob
JOBS = Path(__file__).resolve().parent / "jobs"
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 3, 1, 5
STARTUP_TIMEOUT = "15"


@pytest.mark.parametrize(
    "library, phase",
    [
        pytest.param(lib.values[0], phase, marks=lib.marks, id=f"{phase}-{lib.id}")
        for phase in ("startup", "handshake")
        for lib in LIBRARIES
    ],
)
def test_worker_dying_while_the_job_starts_gives_the_same_bits(library, phase, tmp_path, reference):
    name, python = library
    plan = f"2:kill:{phase}"
    fault_log = tmp_path / "fired.jsonl"
    job = run_job(
        python,
        4,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        timeout=240,
        env={"MIXLE_MPI_FAULT_LOG": str(fault_log), "MIXLE_MPI_STARTUP_TIMEOUT": STARTUP_TIMEOUT},
    )
    assert unfired(plan, read_fired(str(fault_log))) == [], (
        "the planned fault did not fire\n" + job.describe()
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    retried = "starting it again" in job.stderr
    if not retried:  # recovered in place: the dead rank failed at startup and came back
        assert job.result["failures"].get("2") == 1, job.describe()
    # seen at once on this host (its process gone, or ULFM's error), not at the startup deadline
    assert "did not report within startup_timeout" not in job.stderr, job.describe()
    assert "did not finish within" not in job.stderr, job.describe()
    if name == "mpich":  # MPI itself says nothing of the death: the driver's host sees it
        assert "its process (pid " in job.stderr and "while the job started" in job.stderr, (
            job.describe()
        )
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_rank_that_runs_a_child_while_it_starts_is_not_taken_for_lost(
    library, tmp_path, reference
):
    """Rank 1 runs a 4 s child process before its MPI initialisation (as a script that asks
    git something would): the child carries the rank's environment, so the launcher's looks
    take it for rank 1 while it runs, and its end once ended the start as a lost rank
    (exit 73, "ended before MPI was up"). The job starts once, with the reference's bits."""
    _, python = library
    log = tmp_path / "child.txt"
    job = run_job(
        python,
        3,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        env={
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(JOBS / "startchild"), os.environ.get("PYTHONPATH")) if p
            ),
            "MIXLE_MPI_TEST_CHILD_RANK": "1",
            "MIXLE_MPI_TEST_CHILD_LOG": str(log),
        },
    )
    assert log.exists() and len(log.read_text().split()) == 1, job.describe()  # it ran, once
    assert job.rc == 0, job.describe()
    assert "ended before MPI was up" not in job.stderr, job.describe()
    assert "starting it again" not in job.stderr, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()


INIT_DEATH = """
import os, signal, sys, time
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK")
if rank == "2":
    os.kill(os.getpid(), signal.SIGKILL)   # dies before MPI_Init: the others block inside it
from mixle_mpi import is_driver
is_driver()
print("UNEXPECTED: MPI came up without rank 2", flush=True)
"""


def _start_losing_a_rank(
    python: str, tmp_path, cmd: list[str], alarm: int
) -> tuple[subprocess.CompletedProcess, float]:
    """``mixle-mpi run -n 4 -- cmd`` with no second attempt and the ranks' alarm at
    ``alarm`` s; the finished launcher and how long it took."""
    env = dict(os.environ, MIXLE_MPI_STARTUP_TIMEOUT=str(alarm), PYTHONWARNINGS="ignore")
    t0 = time.monotonic()
    proc = subprocess.run(
        [python, "-m", "mixle_mpi", "run", "-n", "4", "--start-retries", "0", "--", *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env=env,
    )
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("library", LIBRARIES)
def test_rank_dying_in_mpi_init_ends_the_job_as_never_started(library, tmp_path):
    _, python = library
    script = tmp_path / "init_death.py"
    script.write_text(INIT_DEATH)
    proc, took = _start_losing_a_rank(python, tmp_path, [python, str(script)], alarm=8)
    assert proc.returncode == exitcodes.NEVER_STARTED, proc.stderr[-3000:]
    assert "the job never started" in proc.stderr and "MIXLE_MPI_STARTUP_TIMEOUT=8" in proc.stderr
    assert "UNEXPECTED" not in proc.stdout
    assert took < 100, f"ended only after {took:.0f} s"  # a hang would have run into the timeout
    assert no_leftover_processes(str(tmp_path)) == []


LATE_INIT_DEATH = """
import os, signal, sys, time
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK")
if rank == "2":
    time.sleep(3)                          # seen running by the launcher while the others wait in MPI_Init
    os.kill(os.getpid(), signal.SIGKILL)
from mixle_mpi import is_driver
is_driver()
print("UNEXPECTED: MPI came up without rank 2", flush=True)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_rank_lost_before_mpi_is_up_ends_the_start_at_once_not_at_the_startup_deadline(
    library, tmp_path
):
    """The others would wait inside MPI_Init until MIXLE_MPI_STARTUP_TIMEOUT (60 s here, 120 s
    by default): the launcher sees the rank process gone and ends the attempt within seconds."""
    _, python = library
    script = tmp_path / "late_init_death.py"
    script.write_text(LATE_INIT_DEATH)
    proc, took = _start_losing_a_rank(python, tmp_path, [python, str(script)], alarm=60)
    assert proc.returncode == exitcodes.NEVER_STARTED, proc.stderr[-3000:]
    assert "the job never started: rank 2 (pid " in proc.stderr, proc.stderr[-3000:]
    assert "ended before MPI was up on every rank (before its MPI initialisation)" in proc.stderr
    assert "instead of at MIXLE_MPI_STARTUP_TIMEOUT=60 s" in proc.stderr
    assert "UNEXPECTED" not in proc.stdout
    assert took < 40, f"ended only after {took:.0f} s"  # not at the ranks' 60 s alarm
    assert no_leftover_processes(str(tmp_path)) == []


# Rank 2 SIGKILLs itself as it starts, before it is a Python process (a real signal death of
# a real rank, earlier than any look of the launcher); the others exec our fit.
DIES_AT_BIRTH = (
    'r="${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"; if [ "$r" = 2 ]; then kill -9 $$; fi; exec "$@"'
)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_rank_killed_before_any_look_saw_it_ends_the_start_once_it_has_not_appeared(
    library, tmp_path
):
    """An external campaign killed ranks 0.3 s after the launch: no look had seen them, so
    the others waited for their 20 s alarm. On one host the launcher knows how many ranks
    must appear, and ends the attempt 5 s after another began MPI init."""
    _, python = library
    fit = [
        python,
        "-m",
        "mixle_mpi",
        "fit",
        "--data",
        "builtin:iris",
        "--columns",
        "0:4",
        "--model",
        "gmm:k=3",
        "--max-its",
        "5",
        "--out-dir",
        str(tmp_path / "out"),
        "--no-plot",
        "--progress",
        "off",
    ]
    proc, took = _start_losing_a_rank(
        python, tmp_path, ["sh", "-c", DIES_AT_BIRTH, "sh", *fit], alarm=60
    )
    assert proc.returncode == exitcodes.NEVER_STARTED, proc.stderr[-3000:]
    assert (
        "the job never started: rank 2 never appeared on this host, 5 s after another rank began MPI "
        "initialisation" in proc.stderr
    ), proc.stderr[-3000:]
    assert "instead of at MIXLE_MPI_STARTUP_TIMEOUT=60 s" in proc.stderr
    assert not (tmp_path / "out" / "model.json").exists()
    assert took < 40, f"ended only after {took:.0f} s"  # not at the ranks' 60 s alarm
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library, delay", with_libraries([(1.0,), (6.0,)]))
def test_killing_the_launcher_kills_the_whole_job(library, delay, tmp_path):
    """SIGKILL of the launcher's process group, during startup (1 s) or the fit (6 s)."""
    _, python = library
    mixle = os.path.join(os.path.dirname(python), "mixle-mpi")
    out = tmp_path / "out"
    cmd = [
        mixle,
        "fit",
        "-n",
        "4",
        "--data",
        "builtin:iris",
        "--columns",
        "0:4",
        "--model",
        "gmm:k=3",
        "--max-its",
        "100000",
        "--delta",
        "none",
        "--out-dir",
        str(out),
    ]
    launcher = subprocess.Popen(
        cmd,
        cwd=str(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(delay)
    assert launcher.poll() is None, "the job ended before the launcher could be killed"
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 10
    while no_leftover_processes(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert no_leftover_processes(str(out)) == []


def test_bad_startup_timeout_is_refused_before_launch(tmp_path):
    env = dict(os.environ, MIXLE_MPI_STARTUP_TIMEOUT="soon")
    proc = subprocess.run(
        [sys.executable, "-m", "mixle_mpi", "run", "-n", "3", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 2
    assert "MIXLE_MPI_STARTUP_TIMEOUT='soon' must be a number of seconds > 0" in proc.stderr
