"""SLURM templates, the collector and the signal plumbing, without SLURM or MPI."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mixle_mpi.cli import collect, slurm
from mixle_mpi.cli import commands as cli
from mixle_mpi.core import exitcodes, procs
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import contract
from mixle_mpi.launch.launcher import SRUN, SignalForwarder, build_command, judge
from mixle_mpi.runtime import exiting

REPO = Path(__file__).resolve().parents[1]


# -- render ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", slurm.KINDS)
def test_golden_files_are_the_rendered_defaults(kind):
    """slurm/*.sbatch are render(kind) with the documented defaults; regenerate them with
    `mixle-mpi slurm --write slurm/` (see slurm/README.md)."""
    golden = (REPO / "slurm" / slurm.GOLDEN[kind]).read_text()
    assert golden == slurm.render(kind)


def test_write_golden_writes_every_kind(tmp_path):
    paths = slurm.write_golden(str(tmp_path))
    expected = [*slurm.GOLDEN.values(), *slurm.EXAMPLES]
    assert sorted(os.path.basename(p) for p in paths) == sorted(expected)
    for kind, name in slurm.GOLDEN.items():
        assert (tmp_path / name).read_text() == slurm.render(kind)


def test_the_modules_example_is_pinned_and_its_prologue_comes_before_the_launch():
    """slurm/fit-ft-modules.sbatch: a site's MPI module and environment, loaded first."""
    text = (REPO / "slurm" / "fit-ft-modules.sbatch").read_text()
    assert text == slurm.golden_files()["fit-ft-modules.sbatch"]
    lines = text.splitlines()
    load = lines.index("module load openmpi")
    assert (
        lines.index(
            "trap '' USR1 TERM  # until the launcher is up: a signal now must not end this script"
        )
        < load
    )
    assert (
        load
        < lines.index("set -u")
        < next(i for i, line in enumerate(lines) if "mixle_mpi run" in line)
    )
    assert slurm.render("ft", prologue="") == slurm.render("ft")  # no prologue: the defaults


def test_a_prologue_is_lines_or_a_file(tmp_path):
    f = tmp_path / "site.sh"
    f.write_text("module load mpich/4.0\nsource ~/env/bin/activate\n\n")
    by_file = slurm.render("ft", prologue=slurm.read_prologue(str(f)))
    by_lines = slurm.render("ft", prologue=["module load mpich/4.0", "source ~/env/bin/activate"])
    assert by_file == by_lines and "module load mpich/4.0\nsource ~/env/bin/activate\n" in by_file
    assert slurm.read_prologue("module load x") == "module load x"
    with pytest.raises(ConfigError, match="--sbatch"):
        slurm.render("ft", prologue=["#SBATCH --partition=x"])


def test_the_cli_takes_prologue_files_and_lines(tmp_path, capsys):
    f = tmp_path / "site.sh"
    f.write_text("module load openmpi\n")
    assert (
        cli.main(["slurm", "ft", "--prologue", str(f), "--prologue", "source e/bin/activate"]) == 0
    )
    assert "module load openmpi\nsource e/bin/activate\n" in capsys.readouterr().out


def _sbatch(text: str) -> list[str]:
    return [line[len("#SBATCH ") :] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_ft_directives():
    text = slurm.render(
        "ft", job_name="j1", ntasks=6, time="2:00:00", signal_margin=120, max_requeues=5
    )
    assert _sbatch(text) == [
        "--job-name=j1",
        "--ntasks=6",
        "--time=2:00:00",
        "--no-kill",
        "--requeue",
        "--signal=B:USR1@120",
        "--open-mode=append",
        "--output=%x-%j.out",
    ]
    assert text.startswith("#!/bin/bash\n")
    assert "MAX_RESTARTS=5" in text and "RESTARTS=${SLURM_RESTART_COUNT:-0}" in text
    assert '"$PY" -m mixle_mpi run -n "${SLURM_NTASKS:-6}" -- ' in text
    assert (
        "--with-ft ulfm" in text
        and "not supported when ranks are launched directly by srun" in text
    )
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text


def test_exit_code_branches_use_the_project_codes():
    text = slurm.render("ft")
    assert f"  {exitcodes.OK})" in text and f"  {exitcodes.CHECKPOINTED})" in text
    assert f"exit {exitcodes.CHECKPOINTED} ;;" in text and 'exit "$rc" ;;' in text
    # the USR1 of --signal=B: is taken by the shell and sent on to the launcher only
    assert "trap '' USR1 TERM" in text.split("set -u")[0]
    assert """trap 'kill -s USR1 "$launcher" 2>/dev/null' USR1""" in text


def test_srun_kind_launches_with_srun_and_states_the_tradeoffs():
    text = slurm.render("srun")
    assert '"$PY" -m mixle_mpi run --launcher srun -n' in text
    for phrase in (
        "heartbeats only",
        "--kill-on-bad-exit=0 --wait=0",
        "--mpi=pmi2",
        "no respawn",
        'continuation method "keep"',
        "bit-identical",
    ):
        assert phrase in text


def test_array_kind_seeds_and_folders_per_task():
    text = slurm.render("array", array="0-15%4", base_seed=100, out_dir="runs")
    assert "--array=0-15%4" in _sbatch(text) and "--output=%x-%A_%a.out" in _sbatch(text)
    assert (
        "BASE_SEED=100\nSEED=$((BASE_SEED + SLURM_ARRAY_TASK_ID))\nOUT_DIR=runs/task-$SLURM_ARRAY_TASK_ID"
        in text
    )
    assert '--seed "$SEED"' in text and "mixle_mpi collect" in text


def test_options_are_quoted_and_extra_directives_appended():
    text = slurm.render(
        "ft", python="/opt/my env/bin/python", out_dir="out dir", sbatch=("--partition=debug",)
    )
    assert "PY='/opt/my env/bin/python'" in text and "OUT_DIR='out dir'" in text
    assert _sbatch(text)[-1] == "--partition=debug"


def test_fit_cmd_is_inserted_verbatim():
    cmd = '"$PY" -m mixle_mpi.fitjob --model hmm --out "$OUT_DIR/r.json" {braces}'
    assert f"-- {cmd} &\n" in slurm.render("ft", fit_cmd=cmd)


def test_render_depends_on_its_arguments_only(monkeypatch, tmp_path):
    """Pure: the environment (SLURM's own variables included), the working directory and
    earlier calls change nothing; neither the caller's options nor DEFAULTS are mutated."""
    golden = {kind: (REPO / "slurm" / slurm.GOLDEN[kind]).read_text() for kind in slurm.KINDS}
    opts = {"ntasks": 6, "sbatch": ("--partition=x",)}
    before, defaults = dict(opts), dict(slurm.DEFAULTS)
    custom = slurm.render("ft", **opts)
    assert (
        "--ntasks=6" in _sbatch(custom)
        and _sbatch(custom)[-1] == "--partition=x"
        and custom != golden["ft"]
    )
    monkeypatch.chdir(tmp_path)
    for var in (
        "SLURM_NTASKS",
        "SLURM_JOB_ID",
        "SLURM_ARRAY_TASK_ID",
        "PY",
        "OUT_DIR",
        "SEED",
        "MIXLE_MPI_WORKDIR",
    ):
        monkeypatch.setenv(var, "from-the-environment")
    for kind in slurm.KINDS:
        assert slurm.render(kind) == golden[kind], kind
    assert slurm.render("ft", **opts) == custom
    assert opts == before and slurm.DEFAULTS == defaults and slurm.DEFAULTS["sbatch"] == ()


@pytest.mark.parametrize(
    "limit,seconds",
    [
        ("90", 5400),
        ("5:30", 330),
        ("01:00:00", 3600),
        ("1-0", 86400),
        ("2-03:04", 183840),
        ("1-00:00:10", 86410),
    ],
)
def test_time_limit_seconds(limit, seconds):
    assert slurm.time_limit_seconds(limit) == seconds


def test_unknown_kind_lists_the_valid_ones():
    with pytest.raises(
        ConfigError, match=r"unknown template kind 'mpich'; valid kinds are ft, srun, array"
    ):
        slurm.render("mpich")


@pytest.mark.parametrize(
    "opts,message",
    [
        ({"ntasks": 1}, "ntasks must be an integer >= 2; found 1"),
        ({"ntasks": "four"}, "ntasks must be an integer >= 2; found 'four'"),
        ({"ntasks": True}, "ntasks must be an integer >= 2; found True"),
        ({"time": "1h"}, "time limit '1h' is not a SLURM time"),
        (
            {"time": "5", "signal_margin": 300},
            r"signal_margin \(300 s\) must be shorter than the time limit '5' \(300 s\)",
        ),
        ({"signal_margin": 0}, "signal_margin must be an integer between 1 and 65535; found 0"),
        ({"max_requeues": -1}, "--max-requeues must be an integer >= 0; found -1"),
        ({"job_name": "a b"}, "job_name must be letters"),
        ({"array": "0-"}, "array must be a SLURM index list"),
        ({"fit_cmd": "a\nb"}, "fit_cmd must be one non-empty line"),
        ({"fit_cmd": " "}, "fit_cmd must be one non-empty line"),
        ({"colour": "red"}, "unknown option.*colour.*valid options are job_name"),
    ],
)
def test_bad_values_say_what_was_found_and_needed(opts, message):
    with pytest.raises(ConfigError, match=message):
        slurm.render("ft", **opts)


@pytest.mark.parametrize("var", ["SEED", "OUT_DIR"])
def test_array_fit_cmd_must_vary_per_task(var):
    cmd = slurm.DEFAULT_ARRAY_FIT.replace(f'"${var}', '"fixed')
    with pytest.raises(ConfigError, match=rf"must use \${var}"):
        slurm.render("array", fit_cmd=cmd)
    slurm.render("array", fit_cmd=cmd.replace('"fixed', '"${' + var + "}"))  # braces are fine


def test_rendered_scripts_are_valid_bash(tmp_path):
    for kind in slurm.KINDS:
        path = tmp_path / f"{kind}.sbatch"
        path.write_text(slurm.render(kind))
        check = subprocess.run(
            ["bash", "-n", str(path)], capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0, check.stderr


# -- the CLI ---------------------------------------------------------------------------------
def test_cli_renders_to_stdout(capsys):
    assert cli.main(["slurm", "ft", "--ntasks", "8", "--time", "30", "--signal-margin", "120"]) == 0
    assert capsys.readouterr().out == slurm.render(
        "ft", ntasks="8", time="30", signal_margin="120", python=sys.executable
    )  # --python defaults to the interpreter running the command


def test_cli_writes_a_file(tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    assert (
        cli.main(
            [
                "slurm",
                "array",
                "--array",
                "0-3",
                "--base-seed",
                "5",
                "--sbatch=--partition=x",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_text() == slurm.render(
        "array", array="0-3", base_seed="5", sbatch=("--partition=x",), python=sys.executable
    )
    assert f"sbatch {out}" in capsys.readouterr().err


def test_cli_bad_kind_exits_2_with_the_valid_ones(capsys):
    assert cli.main(["slurm", "pbs"]) == 2
    assert "valid kinds are ft, srun, array" in capsys.readouterr().err
    assert cli.main(["slurm"]) == 2
    assert "no template kind given" in capsys.readouterr().err


def test_module_write_regenerates_the_golden_files(tmp_path, capsys):
    assert slurm.main(["--write", str(tmp_path)]) == 0
    assert (tmp_path / "fit-ft.sbatch").read_text() == (
        REPO / "slurm" / "fit-ft.sbatch"
    ).read_text()


# -- collect ---------------------------------------------------------------------------------
def test_pick_best_takes_the_highest_final_ll():
    s = [
        {"path": "a", "ll": [-5.0, -3.0]},
        {"path": "b", "ll": [-9.0, -2.5]},
        {"path": "c", "final_ll": -2.9},
    ]
    assert collect.pick_best(s)["path"] == "b"


def test_pick_best_ties_go_to_the_first_and_nan_never_wins():
    s = [
        {"path": "a", "ll": [float("nan")]},
        {"path": "b", "ll": [-1.0]},
        {"path": "c", "ll": [-1.0]},
    ]
    assert collect.pick_best(s)["path"] == "b"
    with pytest.raises(ConfigError, match="NaN"):
        collect.pick_best([{"path": "a", "final_ll": math.nan}])


def test_pick_best_errors():
    with pytest.raises(ConfigError, match="no summaries"):
        collect.pick_best([])
    with pytest.raises(ConfigError, match="has no final log-likelihood"):
        collect.pick_best([{"path": "a", "ll": []}])
    with pytest.raises(ConfigError, match="is not a number"):
        collect.pick_best([{"path": "a", "final_ll": "high"}])


def _task(root: Path, name: str, ll: list[float] | None, file: str = "result.json") -> Path:
    d = root / name
    d.mkdir(parents=True)
    if ll is not None:
        (d / file).write_text(json.dumps({"model": f"model-{name}", "ll": ll}))
    return d


def test_collect_an_array_folder(tmp_path, capsys):
    _task(tmp_path, "task-0", [-10.0, -4.0])
    _task(tmp_path, "task-1", [-10.0, -3.0], file="summary.json")
    _task(tmp_path, "task-2", None)  # failed: no summary
    (tmp_path / "task-2" / "fit.ckpt.h5").write_text("x")
    report = collect.collect([str(tmp_path)])
    assert report["best"] == str(tmp_path / "task-1" / "summary.json")
    assert report["final_ll"] == -3.0 and report["summary"]["model"] == "model-task-1"
    assert [c["final_ll"] for c in report["candidates"]] == [-4.0, -3.0]
    assert any("task-2: no summary (holds: fit.ckpt.h5)" in s for s in report["skipped"])
    out = tmp_path / "best.json"
    assert cli.main(["collect", str(tmp_path), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["best"] == report["best"]
    assert "best of 2 is" in capsys.readouterr().err


def test_collect_task_folders_given_one_by_one(tmp_path):
    a, b = _task(tmp_path, "x", [-2.0]), _task(tmp_path, "y", [-1.0])
    assert collect.collect([str(b), str(a)])["best"] == str(b / "result.json")


def test_collect_without_any_summary_lists_what_it_found(tmp_path, capsys):
    _task(tmp_path, "task-0", None)
    (tmp_path / "task-0" / "slurm.out").write_text("")
    with pytest.raises(ConfigError) as exc:
        collect.collect([str(tmp_path), str(tmp_path / "nope")])
    msg = str(exc.value)
    assert "no task produced a summary" in msg and "task-0: no summary (holds: slurm.out)" in msg
    assert "nope: not a folder" in msg
    assert cli.main(["collect", str(tmp_path)]) == 2
    assert "no task produced a summary" in capsys.readouterr().err


def test_collect_skips_a_corrupt_summary(tmp_path):
    _task(tmp_path, "a", [-1.0])
    bad = _task(tmp_path, "b", None)
    (bad / "result.json").write_text("{not json")
    report = collect.collect([str(tmp_path)])
    assert report["best"].endswith("a/result.json")
    assert any("unreadable summary" in s for s in report["skipped"])


# -- signal plumbing -------------------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.kills, self.logs, self.terminated = [], [], 0

    def kill(self, ident, sig):
        self.kills.append((ident[0], sig))
        return True

    def terminate(self):
        self.terminated += 1


def _forwarder(tmp_path, host="h1"):
    rec = Recorder()
    fw = SignalForwarder(
        str(tmp_path / "driver.json"),
        kill=rec.kill,
        host=host,
        log=rec.logs.append,
        terminate=rec.terminate,
    )
    return fw, rec


def _ready(tmp_path, pid=4242, host="h1", start="12.34"):
    (tmp_path / "driver.json").write_text(
        json.dumps({"pid": pid, "host": host, "start": start, "space": procs.pid_space()})
    )


def test_forwarder_sends_to_the_driver_only(tmp_path):
    fw, rec = _forwarder(tmp_path)
    _ready(tmp_path)
    fw.receive(signal.SIGUSR1)
    fw.receive(signal.SIGTERM)
    assert rec.kills == [(4242, signal.SIGUSR1), (4242, signal.SIGTERM)]
    assert fw.pending == [] and rec.terminated == 0


def test_under_mpich_a_usr1_reaches_the_driver_as_sigterm(tmp_path):
    """MPICH's ranks ignore SIGUSR1 (Hydra sends it to every rank at any rank's death), the
    driver too: SLURM's time-limit USR1 is passed on as SIGTERM, which means the same to it."""
    rec = Recorder()
    fw = SignalForwarder(
        str(tmp_path / "driver.json"),
        kill=rec.kill,
        host="h1",
        log=rec.logs.append,
        terminate=rec.terminate,
        usr1_as_term=True,
    )
    _ready(tmp_path)
    fw.receive(signal.SIGUSR1)
    assert rec.kills == [(4242, signal.SIGTERM)] and fw.delivered == [(4242, signal.SIGUSR1)]
    assert "as SIGTERM (its MPI's ranks ignore SIGUSR1)" in rec.logs[-1]


def test_a_second_sigterm_inside_the_handling_of_the_first_is_no_crash(tmp_path):
    """SLURM cancelling a job for a node failure sends SIGTERM twice: the second one's handler
    runs inside the first's and delivers both. The first then finds nothing left to do (it
    once crashed with ValueError: list.remove(x)), and the job is not ended before the
    driver could checkpoint."""
    rec = Recorder()

    class Nested(SignalForwarder):
        entered = 0

        def deliver(self):
            Nested.entered += 1
            if Nested.entered == 1:
                self.receive(signal.SIGTERM)  # the second SIGTERM lands here
            return super().deliver()

    fw = Nested(
        str(tmp_path / "driver.json"),
        kill=rec.kill,
        host="h1",
        log=rec.logs.append,
        terminate=rec.terminate,
    )
    _ready(tmp_path)
    fw.receive(signal.SIGTERM)
    assert rec.kills == [(4242, signal.SIGTERM), (4242, signal.SIGTERM)]
    assert fw.pending == [] and not fw.terminated and rec.terminated == 0


def test_forwarder_holds_usr1_until_the_driver_is_ready(tmp_path):
    fw, rec = _forwarder(tmp_path)
    fw.receive(signal.SIGUSR1)
    assert rec.kills == [] and fw.pending == [signal.SIGUSR1]
    assert "holding it" in rec.logs[-1]
    assert fw.deliver() == []  # still not ready
    _ready(tmp_path)
    assert fw.deliver() == [signal.SIGUSR1]
    assert rec.kills == [(4242, signal.SIGUSR1)] and fw.pending == []
    assert fw.deliver() == []  # delivered once


def test_forwarder_ends_the_job_on_an_early_sigterm(tmp_path):
    fw, rec = _forwarder(tmp_path)
    fw.receive(signal.SIGTERM)
    assert rec.terminated == 1 and fw.terminated and fw.pending == [] and rec.kills == []


def test_forwarder_ignores_a_half_written_or_foreign_pid_file(tmp_path):
    fw, rec = _forwarder(tmp_path)
    (tmp_path / "driver.json").write_text('{"pid": ')
    assert fw.driver() is None
    (tmp_path / "driver.json").write_text(
        '{"pid": 4242, "host": "h1"}'
    )  # no start time: no identity
    assert fw.driver() is None
    _ready(tmp_path, host="elsewhere")
    assert fw.driver() is None and "not on this host h1" in rec.logs[-1]
    (tmp_path / "driver.json").write_text(
        json.dumps({"pid": 4242, "host": "h1", "start": "1.00", "space": "x:1"})
    )
    assert fw.driver() is None and "another pid space" in rec.logs[-1]


def test_forwarder_survives_a_vanished_driver(tmp_path):
    rec = Recorder()

    def gone(ident, sig):
        return None

    fw = SignalForwarder(str(tmp_path / "driver.json"), kill=gone, host="h1", log=rec.logs.append)
    _ready(tmp_path)
    fw.receive(signal.SIGUSR1)
    assert fw.delivered == [] and "is gone" in rec.logs[-1] and fw.pending == [signal.SIGUSR1]
    fw.deliver()
    assert sum("is gone" in line for line in rec.logs) == 1  # said once


def test_a_signal_for_a_dead_driver_goes_to_the_one_that_takes_over(tmp_path):
    rec = Recorder()

    def kill(ident, sig):
        if ident[0] == 4242:
            return None
        return rec.kill(ident, sig)

    fw = SignalForwarder(
        str(tmp_path / "driver.json"),
        kill=kill,
        host="h1",
        log=rec.logs.append,
        terminate=rec.terminate,
    )
    _ready(tmp_path)  # the first driver, dead by now
    fw.receive(signal.SIGTERM)
    assert rec.kills == [] and fw.pending == [signal.SIGTERM] and rec.terminated == 0
    _ready(tmp_path, pid=4243)  # failover: its successor wrote its pid
    assert fw.deliver() == [signal.SIGTERM]
    assert rec.kills == [(4243, signal.SIGTERM)] and fw.pending == []


def test_ctrl_c_goes_to_the_driver_and_a_second_one_ends_the_job(tmp_path):
    fw, rec = _forwarder(tmp_path)
    _ready(tmp_path)
    fw.receive(signal.SIGINT)
    assert rec.kills == [(4242, signal.SIGINT)] and rec.terminated == 0 and fw.interrupted
    fw.receive(signal.SIGINT)  # Ctrl-C again: at once
    assert rec.kills == [(4242, signal.SIGINT)] and rec.terminated == 1 and fw.terminated


def test_ctrl_c_before_the_driver_is_ready_ends_the_job(tmp_path):
    fw, rec = _forwarder(tmp_path)
    fw.receive(signal.SIGINT)
    assert (
        rec.terminated == 1
        and fw.terminated
        and fw.interrupted
        and fw.pending == []
        and rec.kills == []
    )


def test_judge_ctrl_c_exits_130_whatever_the_driver_managed():
    assert (
        judge(None, {"status": "error", "exit_code": 130, "reported": True}, interrupted=True)[0]
        == 130
    )
    code, note = judge(143, None, terminated=True, interrupted=True)
    assert (
        code == exitcodes.INTERRUPTED == 130 and "interrupted (Ctrl-C)" in note and "rerun" in note
    )
    assert (
        judge(143, {"status": "error", "exit_code": 75}, terminated=True, interrupted=True)[0]
        == 130
    )
    assert judge(0, {"status": "ok", "exit_code": 0}, interrupted=True)[0] == 0  # it had finished


def test_judge_early_sigterm_asks_for_requeue():
    code, note = judge(143, None, terminated=True)
    assert code == exitcodes.CHECKPOINTED and "rerun" in note
    assert (
        judge(0, {"status": "ok", "exit_code": 0}, terminated=True)[0] == 0
    )  # the driver's word wins


def test_srun_flavor_command():
    argv = build_command("/usr/bin/srun", SRUN, 4, ["python", "job.py"], extra=["--cpu-bind=none"])
    # -K0 against a site's KillOnBadExit=1, --wait=0 against its WaitTime: the survivors live on
    assert argv == [
        "/usr/bin/srun",
        "--mpi=pmix",
        "--kill-on-bad-exit=0",
        "--wait=0",
        "--no-kill",
        "--cpu-bind=none",
        "-n",
        "4",
        "python",
        "job.py",
    ]
    assert build_command("srun", SRUN, 3, ["python"], srun_mpi="pmi2")[1] == "--mpi=pmi2"


def test_srun_plugin_follows_the_mpi_beside_the_python(tmp_path):
    from mixle_mpi.launch.launcher import srun_mpi_plugin

    assert (
        srun_mpi_plugin(str(tmp_path / "python"), environ={}) == "pmix"
    )  # nothing beside it: Open MPI's
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'HYDRA build details:'\n")
    fake.chmod(0o755)
    assert srun_mpi_plugin(str(tmp_path / "python"), environ={}) == "pmi2"  # MPICH: no PMIx client
    assert (
        srun_mpi_plugin(str(tmp_path / "python"), environ={"MIXLE_MPI_SRUN_MPI": "pmix"}) == "pmix"
    )


def test_driver_writes_its_pid_where_the_launcher_said(tmp_path, monkeypatch):
    path = tmp_path / "driver.json"
    monkeypatch.setenv(contract.DRIVER_PID_ENV, str(path))
    exiting.write_driver_pid()
    record = json.loads(path.read_text())
    assert record["pid"] == os.getpid() and record["host"] and record["space"] == procs.pid_space()
    fw = SignalForwarder(str(path), kill=lambda p, s: None)
    assert fw.driver() == procs.identity(os.getpid())


def test_default_fit_takes_out_dir_and_checkpoint_from_the_job_file():
    text = slurm.render("ft")
    assert (
        '-- "$PY" -m mixle_mpi fit --config job.toml &' in text
    )  # the job file's out_dir and checkpoint win
    assert "OUT_DIR" not in text.split("set -u", 1)[1]
    given = slurm.render("srun", out_dir="runs/a b")
    assert (
        "OUT_DIR='runs/a b'" in given and '--config job.toml --out-dir "$OUT_DIR" &' in given
    )  # asked for: passed
    array = slurm.render("array")
    assert array.count('--seed "$SEED"') == 1
    assert (
        '--out-dir "$OUT_DIR" --checkpoint "$OUT_DIR/checkpoint.h5"' in array
    )  # each task its own folder
    assert "OUT_DIR=mixle-out/task-$SLURM_ARRAY_TASK_ID" in array


def test_collect_reads_mixle_mpi_fit_summaries(tmp_path):
    for name, final in (("task-0", -7.5), ("task-1", -7.25), ("task-2", None)):
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"final_ll": final, "iterations": 3}))
        (d / "model.json").write_text("{}")
    report = collect.collect([str(tmp_path)])
    assert report["best"] == str(tmp_path / "task-1" / "summary.json")
    assert report["model"] == str(tmp_path / "task-1" / "model.json")
    assert any("task-2" in s and "is not a number" in s for s in report["skipped"])


def test_mpich_in_a_slurm_allocation_lets_a_replacements_step_overlap():
    """Hydra starts a Spawn's proxy with srun: since SLURM 20.11 that step waited for the
    job's first step to end, for good (every worker death ended the job with exit 74)."""
    from mixle_mpi.launch.launcher import HYDRA_EXTRA_ENV, MPICH, OPENMPI, hydra_overlap

    job = {"SLURM_JOB_ID": "42"}
    assert hydra_overlap(MPICH, job, "slurm 22.05.8\n") == {HYDRA_EXTRA_ENV: "--overlap"}
    assert hydra_overlap(MPICH, job, "slurm 20.11.0") == {HYDRA_EXTRA_ENV: "--overlap"}
    assert hydra_overlap(MPICH, job, "slurm 20.02.7") == {}  # no --overlap there
    assert hydra_overlap(MPICH, job, None) == {}  # no srun answer
    assert hydra_overlap(MPICH, {}, "slurm 22.05.8") == {}  # not in an allocation
    assert hydra_overlap(OPENMPI, job, "slurm 22.05.8") == {}  # PRRTE's daemons spawn in place
    assert (
        hydra_overlap(MPICH, {**job, HYDRA_EXTRA_ENV: "--mpi=none"}, "slurm 22.05.8") == {}
    )  # the user's


def test_a_signal_for_a_driver_on_another_host_reaches_it_through_the_run_folder(monkeypatch):
    """Before, SLURM's time-limit USR1 was held for good when the driver ran on another host
    (after a failover): no signal of the launcher's host reaches it, so the job was killed at
    the limit without a checkpoint. The launcher now asks it through the run folder, which
    the driver reads after each iteration (fitloop), as if it had received the signal."""
    files = contract.RunFiles()
    try:
        rec = Recorder()
        fw = SignalForwarder(
            files.driver, kill=rec.kill, host="h1", log=rec.logs.append, stop_file=files.stop
        )
        with open(files.driver, "w") as fh:
            json.dump({"pid": 4242, "host": "h2", "start": "1.00", "space": "b:2"}, fh)
        monkeypatch.setenv(contract.STOP_ENV, files.stop)
        assert contract.stop_requested() is None
        fw.receive(signal.SIGUSR1)
        assert rec.kills == [] and fw.pending == [] and "through the run folder" in rec.logs[-1]
        assert contract.stop_requested() == signal.SIGUSR1  # what the remote driver reads
        monkeypatch.setenv(contract.STOP_ENV, files.stop + ".other")
        assert contract.stop_requested() is None
    finally:
        files.remove()
