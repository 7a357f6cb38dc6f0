"""A multi-node SLURM on this machine (tests/slurmnodes.py, issue 36): it comes up with 3
idle nodes, a fit across the 3 nodes equals a one-host fit bit for bit, and teardown leaves
no namespace, link or daemon behind. About 30 s."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from mpiharness import OMPI_PYTHON, REPO, fit_args, mpich_python, run_job, same_fit
from slurmnodes import SlurmNodes, available

pytestmark = [pytest.mark.mpijob, pytest.mark.skipif(bool(available()), reason=available() or "ok")]

ARGS = fit_args("gmm1d", 20000, 4, max_its=10)

SCRIPT = """#!/bin/bash
#SBATCH --output=%x-%j.out
echo "nodes $SLURM_JOB_NODELIST"
"{py}" -m mixle_mpi run -n "$SLURM_NTASKS" --timeout 120 -- "{py}" -m mixle_mpi.fitting.fitjob {args} \\
  --workdir "$PWD/work" --out "$PWD/result.json"
"""


def test_three_nodes_fit_like_one_host_and_leave_nothing(tmp_path):
    env = {
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cluster = SlurmNodes(tmp_path / "slurm", nodes=3, env=env)
    with cluster:
        assert cluster.node_states() == {"node1": "idle", "node2": "idle", "node3": "idle"}
        job = cluster.submit(
            SCRIPT.format(py=OMPI_PYTHON, args=" ".join(ARGS)),
            tmp_path / "job",
            "fit",
            "-N",
            "3",
            "--ntasks-per-node=2",
        )
        rec = cluster.wait_done(job, deadline=150)
        log = "\n".join(p.read_text() for p in (tmp_path / "job").glob("*.out"))
        assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
        assert "nodes node[1-3]" in log and all(f"node{i}:" in log for i in (1, 2, 3)), (
            log
        )  # ranks on each node
        spread = json.loads((tmp_path / "job" / "result.json").read_text())
    assert cluster.leftovers() == []
    one_host = run_job(OMPI_PYTHON, 4, ARGS, tmp_path / "one", timeout=120)
    assert one_host.rc == 0, one_host.describe()
    assert same_fit(spread, one_host.result)


# -- a node lost mid-fit ---------------------------------------------------------------------------
LOST_N, LOST_ITS = 200_000, 60
LOST_FIT = (
    '"$PY" -m mixle_mpi.fitjob --model gmm1d --n {n} --max-its {its} --num-shards 4 --seed 7 --quiet '
    '--workdir "$OUT_DIR/work" --checkpoint "$OUT_DIR/fit.ckpt.h5" --out "$OUT_DIR/result.json"'
)
# MPICH: UCX takes the nodes for one machine; over libfabric's tcp a killed peer's reset can
# block the driver's library (user guide, "Across hosts"), over sockets it does not
MPICH_OFI = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "sockets", "FI_SOCKETS_IFACE": "eth0"}


@pytest.fixture(scope="module")
def one_host_fit(tmp_path_factory):
    """The same fit on one host without failure: the bits a lost node must not change."""
    job = run_job(
        OMPI_PYTHON,
        4,
        fit_args("gmm1d", LOST_N, 4, max_its=LOST_ITS),
        tmp_path_factory.mktemp("one"),
        timeout=240,
    )
    assert job.rc == 0, job.describe()
    return job.result


def _env() -> dict:
    return {
        "PYTHONWARNINGS": "ignore",
        "MIXLE_MPI_HEARTBEAT_PERIOD": "0.1",
        "MIXLE_MPI_HEARTBEAT_TIMEOUT": "1.0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def _lose_node2_mid_fit(cluster: SlurmNodes, job: str, ck: Path, folder: Path) -> None:
    """Once the checkpoint holds iteration 3, node2 fails: its link goes down and every
    process on it is SIGKILLed, and it stays lost. SLURM would mark it DOWN after its
    timeouts (about 15 s here); the test marks it DOWN at once, as a health check does."""
    from mixle_mpi.storage import checkpoint as ckpt

    def at_three():
        try:
            state = ckpt.read(str(ck))
        except ckpt.CheckpointError:
            state = None
        done = cluster.job(job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED")
        assert not done, "the fit ended before node2 was lost:\n" + _log(folder)
        return state is not None and state.iteration >= 3

    cluster.wait(at_three, 180, "checkpoint 3", period=0.05)
    assert cluster.lose("node2"), "nothing ran on node2"
    cluster.run("scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=lost-in-test")


def _log(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(folder.glob("*.out")))


def _events(out: Path) -> list[dict]:
    path = out / "work" / "events.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )


@pytest.mark.parametrize(
    "kind, library", [("ft", "openmpi"), ("ft", "mpich"), ("srun", "openmpi"), ("srun", "mpich")]
)
def test_a_node_lost_mid_fit_ends_with_exit_0_and_the_same_bits(
    kind, library, tmp_path, one_host_fit
):
    """The recommended template over 3 nodes (2 ranks each), node2 lost mid-fit, no user
    action. Under `ft` (mpiexec in the allocation) the MPI runtime ends the job when SLURM
    ends its daemon on the lost node; the allocation lives on (--no-kill), and the launcher
    probes the nodes and launches again without node2, which resumes from the checkpoint.
    Under `srun` (--no-kill on the step) the step outlives the node: its two ranks are
    failed and recovered in the job. Either way: COMPLETED 0:0 and the one-host bits."""
    from mixle_mpi.cli import slurm

    python = OMPI_PYTHON if library == "openmpi" else mpich_python()
    if python is None:
        pytest.skip("no MPICH environment (.venv-mpich)")
    env = {**_env(), **(MPICH_OFI if library == "mpich" else {})}
    out = tmp_path / "out"
    text = slurm.render(
        kind,
        job_name=f"lose-{kind}",
        ntasks=6,
        time="10",
        signal_margin=60,
        max_requeues=1,
        python=python,
        out_dir=str(out),
        fit_cmd=LOST_FIT.format(n=LOST_N, its=LOST_ITS),
        sbatch=["--nodes=3", "--ntasks-per-node=2"],
    )
    # a short state folder: PMIx's socket paths under it must fit a socket address (108 bytes)
    with (
        tempfile.TemporaryDirectory(prefix="mmsn", dir="/tmp") as state,
        SlurmNodes(Path(state), nodes=3, env=env) as cluster,
    ):
        job = cluster.submit(text, tmp_path / "job", "fit", env=env)
        _lose_node2_mid_fit(cluster, job, out / "fit.ckpt.h5", tmp_path / "job")
        rec = cluster.wait_done(job, deadline=240)
        log = _log(tmp_path / "job")
        assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert cluster.leftovers() == []
    assert same_fit(json.loads((out / "result.json").read_text()), one_host_fit), log
    events = _events(out)
    places = next(e["ranks"] for e in events if e["event"] == "ranks")
    on_node2 = {int(r) for r, where in places.items() if where.startswith("node2:")}
    lost = {
        e["worker"] for e in events if e["event"] == "failure_detected" and e.get("host") == "node2"
    }
    relaunched = [e for e in events if e["event"] == "relaunched"]
    if kind == "srun":  # survived online: no relaunch, node2's ranks failed in the job
        assert not relaunched and lost == on_node2 and len(on_node2) == 2, log
    else:
        assert [e["lost_hosts"] for e in relaunched] == [["node2"]], log
        assert "launching again without node2" in log, log
        loaded = [e for e in events if e["event"] == "loaded"]
        assert "node2" not in loaded[-1]["hosts"].values(), loaded[-1]


KILL_FIT = LOST_FIT.replace(
    "--num-shards 4", "--num-shards 10"
)  # every worker holds shards: no spare to adopt


@pytest.mark.parametrize("library", ["openmpi", "mpich"])
def test_a_worker_killed_under_the_ft_template_is_respawned_to_the_same_bits(library, tmp_path):
    """Worker 2 (on node2) is SIGKILLed before E-step 2 under `ft` (mpiexec in a 3-node
    allocation): it is replaced in the job and the fit ends COMPLETED 0:0 with the one-host
    bits. Under MPICH the replacement's proxy is a new srun step, which waited for good for
    the job's first one to end (every worker death then ended the job with exit 74) until
    the launcher let the steps overlap (HYDRA_LAUNCHER_EXTRA_ARGS=--overlap)."""
    from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired
    from mixle_mpi.cli import slurm

    python = OMPI_PYTHON if library == "openmpi" else mpich_python()
    if python is None:
        pytest.skip("no MPICH environment (.venv-mpich)")
    fired = tmp_path / "fired.jsonl"
    env = {
        **_env(),
        **(MPICH_OFI if library == "mpich" else {}),
        "MIXLE_MPI_FAULT_PLAN": "2:kill:estep_before:2",
        FIRED_ENV: str(fired),
        "MIXLE_MPI_RESPAWN_WAIT": "1",
        "MIXLE_MPI_RECONFIGURE_TIMEOUT": "30",
    }
    out = tmp_path / "out"
    text = slurm.render(
        "ft",
        job_name=f"kill-{library}",
        ntasks=6,
        time="10",
        signal_margin=60,
        max_requeues=0,
        python=python,
        out_dir=str(out),
        fit_cmd=KILL_FIT.format(n=20000, its=8),
        sbatch=["--nodes=3", "--ntasks-per-node=2"],
    )
    with (
        tempfile.TemporaryDirectory(prefix="mmsn", dir="/tmp") as state,
        SlurmNodes(Path(state), nodes=3, env=env) as cluster,
    ):
        job = cluster.submit(text, tmp_path / "job", "fit", env=env)
        rec = cluster.wait_done(job, deadline=240)
        log = _log(tmp_path / "job")
        assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert [f["worker"] for f in read_fired(str(fired))] == [2], log
    one_host = run_job(
        OMPI_PYTHON, 4, fit_args("gmm1d", 20000, 10, max_its=8), tmp_path / "one", timeout=120
    )
    assert one_host.rc == 0 and same_fit(
        json.loads((out / "result.json").read_text()), one_host.result
    ), log
    events = _events(out)
    assert [e["worker"] for e in events if e["event"] == "respawned"] == [2], log
    assert not [e for e in events if e["event"] == "relaunched"], log
