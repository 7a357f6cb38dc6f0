"""A multi-node SLURM on this machine (tests/slurmnodes.py, issue 36): it comes up with 3
idle nodes, a fit across the 3 nodes equals a one-host fit bit for bit, and teardown leaves
no namespace, link or daemon behind. About 30 s."""

from __future__ import annotations

import json
import os

import pytest
from mpiharness import OMPI_PYTHON, REPO, fit_args, run_job, same_fit
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
    env = {"PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cluster = SlurmNodes(tmp_path / "slurm", nodes=3, env=env)
    with cluster:
        assert cluster.node_states() == {"node1": "idle", "node2": "idle", "node3": "idle"}
        job = cluster.submit(SCRIPT.format(py=OMPI_PYTHON, args=" ".join(ARGS)), tmp_path / "job", "fit",
                             "-N", "3", "--ntasks-per-node=2")
        rec = cluster.wait_done(job, deadline=150)
        log = "\n".join(p.read_text() for p in (tmp_path / "job").glob("*.out"))
        assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
        assert "nodes node[1-3]" in log and all(f"node{i}:" in log for i in (1, 2, 3)), log  # ranks on each node
        spread = json.loads((tmp_path / "job" / "result.json").read_text())
    assert cluster.leftovers() == []
    one_host = run_job(OMPI_PYTHON, 4, ARGS, tmp_path / "one", timeout=120)
    assert one_host.rc == 0, one_host.describe()
    assert same_fit(spread, one_host.result)
