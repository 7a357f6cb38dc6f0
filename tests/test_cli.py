"""The ``mixle-mpi`` subcommands as a user runs them: real mpiexec jobs, real SIGKILLs."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import LIBRARIES
from mpiharness import OMPI_PYTHON, no_leftover_processes, wait_for_checkpoint

from mixle_mpi.chaos.campaign import FAULT_LOG
from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired
from mixle_mpi.fitting.models import get_model
from mixle_mpi.storage import checkpoint as ckpt

pytestmark = pytest.mark.mpijob
ENV = {
    "PYTHONWARNINGS": "ignore",
    "MIXLE_MPI_DRIVER_TIMEOUT": "30",
    "MIXLE_MPI_RECONFIGURE_TIMEOUT": "20",
}


def cli(
    python: str,
    *args: str,
    cwd: Path,
    plan: str | None = None,
    timeout: float = 240,
    env: dict | None = None,
):
    """Run ``python -m mixle_mpi ARGS``; under a fault plan, victims record in ``cwd/faults.jsonl``
    (check it with :func:`all_fired`). ``env`` adds to (or, with None values, removes from)
    the environment."""
    env = {k: v for k, v in {**os.environ, **ENV, **(env or {})}.items() if v is not None}
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    env.pop(FIRED_ENV, None)
    if plan:
        env["MIXLE_MPI_FAULT_PLAN"] = plan
        env[FIRED_ENV] = str(cwd / FAULT_LOG)
    return subprocess.run(
        [python, "-m", "mixle_mpi", *args],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=env,
        timeout=timeout,
    )


def all_fired(plan: str, log: Path) -> list[dict]:
    """The records of ``plan``'s faults in ``log``; fails the test if a planned fault did not fire."""
    records = read_fired(str(log))
    assert unfired(plan, records) == [], (
        f"planned faults that did not fire: {unfired(plan, records)}; records {records}"
    )
    return records


def outputs(out_dir: Path) -> tuple[dict, dict]:
    return json.loads((out_dir / "model.json").read_text()), json.loads(
        (out_dir / "summary.json").read_text()
    )


@pytest.fixture(scope="module")
def diag_h5(tmp_path_factory):
    """The built-in diagonal-GMM data in an HDF5 file, as a user would bring it."""
    path = tmp_path_factory.mktemp("data") / "measurements.h5"
    with h5py.File(path, "w") as f:
        f["/run1/X"] = np.asarray(get_model("diag").sample(3000, 1))
        f["/run1/notes"] = np.arange(5)
    return path


@pytest.mark.parametrize("library", LIBRARIES)
def test_fit_on_hdf5_equals_mixle_through_a_kill(library, diag_h5, reference, tmp_path):
    name, python = library
    out = tmp_path / "out"
    plan = "2:kill:estep_mid:3"
    proc = cli(
        python,
        "fit",
        "-n",
        "4",
        "--timeout",
        "180",
        "--data",
        f"{diag_h5}:/run1/X",
        "--model",
        "gmm:k=3,cov=diag",
        "--num-shards",
        "5",
        "--max-its",
        "8",
        "--seed",
        "7",
        "--out-dir",
        str(out),
        "--checkpoint",
        str(tmp_path / "ck.h5"),
        "--keep-store",
        "--respawn-wait",
        cwd=tmp_path,
        plan=plan,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (fired,) = all_fired(plan, tmp_path / FAULT_LOG)
    model, summary = outputs(out)
    ref = reference("diag", 3000, 5, 1, 8, 7)
    told = model["fit_provenance"].pop(
        "seed"
    )  # the CLI's receipt names the seed; mixle's (given an rng) cannot
    expected = json.loads(ref["model"])
    assert told == 7 and expected["fit_provenance"].pop("seed", None) is None
    assert model == expected and summary["ll"] == ref["ll"]  # exact floats
    its = ref["iterations"]  # converged (delta 1e-9) before the cap
    assert (
        summary["failures_survived"] == 1
        and summary["iterations"] == its
        and summary["recovered_shards"] >= 1
    )
    assert summary["final_ll"] == ref["ll"][-1] and summary["converged"]
    assert [(f["worker"], f["phase"]) for f in summary["fault_plan"]] == [
        (2, "estep_mid")
    ]  # a run under chaos says so
    assert "planned fault(s) from MIXLE_MPI_FAULT_PLAN will kill or stop" in proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[fit] it ")]
    assert (
        len(lines) == its
        and f"it {its}/8" in lines[-1]
        and "3 workers (1 failed, 0 blacklisted)" in lines[-1]
    )
    # the default cadence: the first iteration, then every 60 s, and the finished fit; no stderr line per checkpoint
    assert lines[0].endswith(" checkpointed") and lines[-1].endswith(" checkpointed"), lines
    assert "checkpoint path=" not in proc.stderr
    assert sorted(summary["peak_rss_mb"]) == ["0", "1", "2", "3"] and all(
        v > 0 for v in summary["peak_rss_mb"].values()
    )
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert [e["worker"] for e in events if e["event"] == "failure_detected"] == [2]
    assert [e["pid"] for e in events if e["event"] == "failure_detected"] == [
        fired["pid"]
    ]  # the victim's death
    for private in (
        out / "work" / "shards.h5",
        tmp_path / "ck.h5",
    ):  # the data and the model: owner-only
        assert private.stat().st_mode & 0o777 == 0o600, private
    report = cli(
        python,
        "inspect",
        str(out),
        str(tmp_path / "ck.h5"),
        str(out / "work" / "shards.h5"),
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    for needle in (
        "failures survived 1",
        "rank 2:",
        "failed (pid",
        "respawned as pid",
        "recomputed shards",
        "(finished, converged), checksum ok",
        "checksum ok",
        "shard store: 3000 rows",
    ):
        assert needle in report.stdout, report.stdout
    assert not no_leftover_processes(str(out))


def test_fit_from_a_job_file_with_restarts_and_plot(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(
        '[fit]\ndata = "builtin:iris"\ncolumns = "0:4"\nmodel = "gmm:k=3,cov=full"\nmax_its = 99\n'
        'init_p = 0.5\nrestarts = 2\nnum_shards = 4\nplot = true\nprogress = "line"\n'
    )
    out = tmp_path / "out"
    proc = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "3",
        "--timeout",
        "180",
        "--config",
        str(job),
        "--max-its",
        "6",
        "--out-dir",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    model, summary = outputs(out)
    assert [r["seed"] for r in summary["restarts"]] == [1, 2] and summary["config"]["max_its"] == 6
    finals = [r["final_ll"] for r in summary["restarts"]]
    assert summary["final_ll"] == max(finals) and summary["best_restart"] == finals.index(
        max(finals)
    )
    assert "restart 2/2 it 6/6" in proc.stdout
    assert (out / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert model["__pysp_type__"] == "object"


@pytest.mark.parametrize(
    "spec, data",
    [
        ("hmm:states=2", "seqs"),
        ("composite:k=2,parts=gaussian+categorical+poisson", "table"),
        pytest.param("poisson:k=2", "counts"),
    ],
)
def test_fit_other_families(spec, data, tmp_path):
    rng = np.random.RandomState(3)
    if data == "seqs":
        path = tmp_path / "seqs.h5"
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("seqs", (60,), dtype=h5py.vlen_dtype(np.float64))
            for i in range(60):
                ds[i] = rng.normal(size=4 + i % 5) + (3 if i % 2 else 0)
        source = f"{path}:/seqs"
    elif data == "table":
        path = tmp_path / "table.csv"
        lines = ["x,colour,n"] + [
            f"{rng.normal() + 3 * (i % 2):.4f},{'ab'[i % 2]},{rng.poisson(2 + 5 * (i % 2))}"
            for i in range(200)
        ]
        path.write_text("\n".join(lines) + "\n")
        source = str(path)
    else:
        path = tmp_path / "counts.npy"
        np.save(path, rng.poisson(4.0, size=300))
        source = str(path)
    out = tmp_path / "out"
    proc = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "3",
        "--timeout",
        "120",
        "--data",
        source,
        "--model",
        spec,
        "--max-its",
        "4",
        "--out-dir",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    _, summary = outputs(out)
    assert summary["iterations"] == 4 and np.isfinite(summary["final_ll"])


@pytest.mark.parametrize(
    "args, needle, code",
    [
        (
            ["--data", "{h5}:/run1/Y", "--model", "gmm:k=2"],
            "its datasets are: /run1/X (3000, 4) float64, /run1/notes (5,) int64",
            2,
        ),
        (
            ["--data", "builtin:iris", "--model", "gmm:k=2"],
            "found 'Iris-setosa', needs a finite number",
            2,
        ),
        pytest.param(
            ["--data", "{h5}:/run1/X", "--model", "gmm:k=2", "--num-shards", "5000"],
            "num_shards=5000",
            2,
        ),
    ],
)
def test_fit_errors_under_mpi_end_the_job_fast_and_clearly(args, needle, code, diag_h5, tmp_path):
    args = [a.replace("{h5}", str(diag_h5)) for a in args]
    proc = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "3",
        "--timeout",
        "90",
        *args,
        "--out-dir",
        str(tmp_path / "o"),
        cwd=tmp_path,
        timeout=150,
    )
    assert proc.returncode == code, proc.stderr[-3000:]
    assert needle in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["fit", "-n", "3", "--data", "x.csv", "--model", "kmeans:k=3"],
            "valid specs are: Gaussian mixture: gmm:k=K",
        ),
        (
            ["fit", "-n", "3", "--data", "builtin:iris", "--model", "gmm:k=2", "--max-its", "0"],
            "--max-its must be an integer >= 1; found 0",
        ),
        (["fit", "--data", "builtin:iris", "--model", "gmm:k=2"], "give -n N"),
        (
            ["fit", "-n", "1", "--data", "builtin:iris", "--columns", "0", "--model", "gmm:k=2"],
            "needs at least 2 ranks",
        ),
        (["fit", "-n", "3", "--config", "missing.toml"], "cannot read the job file 'missing.toml'"),
        (["inspect", "nothing-here"], "no such file or folder 'nothing-here'"),
        (["chaos", "-n", "2", "--runs", "1"], "needs -n 3 or more"),
    ],
)
def test_command_line_errors_before_launch(args, needle, tmp_path):
    proc = cli(OMPI_PYTHON, *args, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr


@pytest.mark.parametrize(
    "library",
    [pytest.param(lib.values[0], marks=lib.marks, id=f"campaign-{lib.id}") for lib in LIBRARIES],
)
def test_chaos_campaign_is_bit_identical(library, tmp_path):
    """The fault-plan campaign of three runs (jobs/chaos.sh runs one, in test_jobs)."""
    name, python = library
    out = tmp_path / "campaign"
    proc = cli(
        python,
        "chaos",
        "-n",
        "4",
        "--runs",
        "3",
        "--campaign-seed",
        "2",
        "--max-its",
        "6",
        "--out-dir",
        str(out),
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "campaign.json").read_text())
    runs = report["runs"]
    assert report["ok"] and [r["kind"] for r in runs] == ["single", "repeat", "respawn"]
    planned = sum(r["faults"] for r in runs)
    assert (
        "3/3 runs passed" in proc.stdout
        and f"{planned}/{planned} planned faults fired" in proc.stdout
    )
    assert report["planned_faults"] == report["fired_faults"] == planned == 5
    assert not (out / "reference" / FAULT_LOG).exists()  # the reference ran with no fault
    for r in runs:  # every run, the first one too: each planned fault fired in a real process
        assert (
            r["outcome"] == "ok"
            and r["identical"]
            and r["fired"] == r["faults"]
            and r["unfired"] == []
        ), r
        records = all_fired(r["plan"], Path(r["out_dir"]) / FAULT_LOG)
        assert len(records) == r["faults"] and len({x["pid"] for x in records}) == r["faults"], (
            records
        )
        detected = [
            e["worker"]
            for e in map(json.loads, (Path(r["out_dir"]) / "events.jsonl").read_text().splitlines())
            if e["event"] == "failure_detected"
        ]
        assert sorted(detected) == sorted(x["worker"] for x in records), (
            detected,
            records,
        )  # and each was seen


def test_chaos_campaign_fails_a_run_whose_fault_never_fires(tmp_path, monkeypatch):
    """The campaign's own check, on a real fit: a plan whose fault can never fire (E-step call 99
    of a 3-iteration fit) is UNFIRED and fails the campaign, although the bits match."""
    from mixle_mpi.chaos import campaign as chaos
    from mixle_mpi.cli.jobconfig import resolve

    monkeypatch.setattr(
        chaos,
        "random_plans",
        lambda *a, **k: [chaos.ChaosRun(1, "single", "2:kill:estep_before:99", 1)],
    )
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    cfg = resolve(
        None,
        {
            "data": "builtin:iris",
            "columns": "0:4",
            "model": "gmm:k=3,cov=full",
            "max_its": "3",
            "init_p": "0.5",
            "num_shards": "6",
            "seed": "3",
        },
    )
    stream = io.StringIO()
    code = chaos.campaign(
        cfg, n=3, runs=1, seed=0, out_dir=str(tmp_path / "c"), run_timeout=180, stream=stream
    )
    text = stream.getvalue()
    assert code == 1, text
    assert "UNFIRED" in text and "not fired: 2:kill:estep_before:99:0:any" in text, text
    assert (
        "0/1 runs passed" in text
        and "0/1 planned faults fired" in text
        and "FAILED: UNFIRED 1" in text
    ), text
    (row,) = json.loads((tmp_path / "c" / "campaign.json").read_text())["runs"]
    assert (
        row["outcome"] == "UNFIRED"
        and row["identical"]
        and row["exit_code"] == 0
        and row["fired"] == 0
    )


def test_demo_kills_a_worker_and_matches(tmp_path):
    proc = cli(OMPI_PYTHON, "demo", "--out-dir", str(tmp_path / "demo"), cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "bit-identical to the failure-free fit: yes" in proc.stdout
    assert "failure_detected rank 2" in proc.stdout and "failures survived: 1" in proc.stdout
    from mixle_mpi.cli.demo import KILL_ROUND

    all_fired(f"2:kill:estep_mid:{KILL_ROUND}", tmp_path / "demo" / "chaos" / FAULT_LOG)
    # its advice runs as printed, from another folder and with no venv on PATH
    advice = proc.stdout.strip().splitlines()[-1].strip()
    assert " inspect " in advice, proc.stdout
    shown = subprocess.run(
        shlex.split(advice),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={
            "PATH": "/usr/bin:/bin",
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
        },
    )
    assert shown.returncode == 0 and "failures survived 1" in shown.stdout, shown.stderr


def test_module_entry_lists_every_subcommand(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mixle_mpi", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    for sub in ("fit", "run", "chaos", "inspect", "demo"):
        assert sub in proc.stdout


IRIS = [
    "--data",
    "builtin:iris",
    "--columns",
    "0:4",
    "--model",
    "gmm:k=3,cov=full",
    "--init-p",
    "0.5",
]


def test_resume_on_fewer_ranks_says_what_to_pass_then_reports_every_segment(tmp_path):
    """-n 4 with S = 3, driver killed; rerun with -n 3 and S = 2 is refused once, naming the flag;
    with it the fit resumes, and summary.json adds up both segments and every rank's peak RSS."""
    ck, out = tmp_path / "ck.h5", tmp_path / "out"
    # failover off (on by default: a survivor would take over) and a checkpoint every iteration
    args = [
        *IRIS,
        "--max-its",
        "8",
        "--delta",
        "none",
        "--checkpoint",
        str(ck),
        "--out-dir",
        str(out),
        "--checkpoint-every",
        "1",
        "--no-failover",
    ]
    first = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "4",
        "--timeout",
        "180",
        "-v",
        "--num-shards",
        "3",
        *args,
        cwd=tmp_path,
        plan="0:kill:estep_before:3",
    )
    assert first.returncode != 0 and ckpt.read(str(ck)).iteration == 3, first.stderr[-3000:]
    assert "checkpoint path=" in first.stderr  # -v shows each checkpoint
    refused = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "3",
        "--timeout",
        "180",
        "-q",
        "--num-shards",
        "2",
        *args,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.count("refusing to resume") == 1, (
        refused.stderr
    )  # said once, not again by the launcher
    assert "layout.num_shards: checkpoint has 3, this run has 2" in refused.stderr
    assert "To resume it, pass --num-shards 3 (num_shards=3 in the Python API)" in refused.stderr
    assert (
        " start: " not in refused.stderr and "launching:" not in refused.stderr
    )  # -q: warnings and errors only
    assert "Traceback" not in refused.stderr
    again = cli(
        OMPI_PYTHON,
        "fit",
        "-n",
        "3",
        "--timeout",
        "180",
        "--num-shards",
        "3",
        *args,
        cwd=tmp_path,
        env={"PYTHONWARNINGS": None},
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed {ck} after iteration 3" in again.stderr
    assert (
        "\x00" not in again.stderr
        and ".py:" not in again.stderr
        and "warnings.warn" not in again.stderr
    )
    assert "{'internal_api'" not in again.stderr and " start: 2 workers, 3 shards" in again.stderr
    _, summary = outputs(out)
    assert summary["segments"] == 2 and summary["wall_seconds_total"] > summary["wall_seconds"] > 0
    assert (
        sorted(summary["peak_rss_mb"]) == ["0", "1", "2"]
        and min(summary["peak_rss_mb"].values()) > 0
    )
    done = again.stdout.strip().splitlines()[-1]
    assert done.startswith("[fit] done after 8 iterations: stopped at the iteration cap"), done
    assert "over 2 segments" in done


def test_ctrl_c_checkpoints_ends_every_rank_and_exits_130(tmp_path):
    ck, out = tmp_path / "ck.h5", tmp_path / "out"
    env = {**os.environ, **ENV}
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    proc = subprocess.Popen(
        [
            OMPI_PYTHON,
            "-m",
            "mixle_mpi",
            "fit",
            "-n",
            "3",
            "--timeout",
            "200",
            *IRIS,
            "--max-its",
            "100000",
            "--delta",
            "none",
            "--checkpoint",
            str(ck),
            "--out-dir",
            str(out),
        ],
        cwd=str(tmp_path),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_checkpoint(
            ck, 1, proc
        )  # the default cadence: the first iteration, then every 60 s
        proc.send_signal(
            signal.SIGINT
        )  # what Ctrl-C sends to the launcher (the ranks have their own session)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert (
        len(lines) == 1
        and f"checkpoint written to {ck}: rerun the same command to resume" in lines[0]
    ), err
    assert (
        "Traceback" not in err and "KeyboardInterrupt" not in err and "exiting with code" not in err
    ), err
    saved = ckpt.read(
        str(ck)
    )  # written at the signal, due or not; no survivor took over (failover is armed)
    assert (
        saved.iteration >= 1
        and not saved.finished
        and f"after iteration {saved.iteration};" in lines[0]
    ), err
    assert "taking over" not in err and "lost the driver" not in err, err
    time.sleep(1.0)
    assert no_leftover_processes(str(out)) == []


def test_far_more_ranks_than_cores_is_refused_before_launching(tmp_path):
    proc = cli(
        OMPI_PYTHON,
        "run",
        "-n",
        "400",
        "--",
        OMPI_PYTHON,
        "-c",
        "print('UNEXPECTED')",
        cwd=tmp_path,
        env={"MIXLE_MPI_ALLOW_MANY_RANKS": None, "SLURM_JOB_ID": None},
    )
    assert proc.returncode == 2 and "UNEXPECTED" not in proc.stdout
    assert (
        "found -n 400 but this machine has" in proc.stderr and "--allow-many-ranks" in proc.stderr
    )
