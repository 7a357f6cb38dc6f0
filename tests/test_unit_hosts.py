"""Which hosts a launch runs on, the same launch without some, and what the launcher decides
after a lost host (launch/hostlist.py, launch/host_plan.py, launch/hostprobe.py's command)."""

from __future__ import annotations

import pytest

from mixle_mpi.core import exitcodes
from mixle_mpi.launch import contract, host_plan, hostlist, hostprobe
from mixle_mpi.launch.host_plan import HostBook


def test_host_flags_and_hostfiles_of_either_launcher_are_read_with_their_slots(tmp_path):
    assert hostlist.parse_host_flag("a:2,b,c:1") == [("a", 2), ("b", 1), ("c", 1)]
    assert hostlist.parse_host_flag("a,a,b:3") == [("a", 2), ("b", 3)]  # named twice: two slots
    f = tmp_path / "hosts"
    f.write_text("# cluster\nnode1 slots=4\nnode2:2  # Hydra's form\nnode3\n\n")
    assert hostlist.parse_hostfile(f.read_text()) == [("node1", 4), ("node2", 2), ("node3", 1)]
    got = hostlist.from_args(["--prtemca", "x", "y", "--hostfile", str(f), "--map-by", "slot"])
    assert got.slots == (("node1", 4), ("node2", 2), ("node3", 1)) and got.source == "--hostfile"
    assert hostlist.from_args(["--host=a:1,b:2"]).slots == (("a", 1), ("b", 2))
    assert hostlist.from_args(["-hosts", "a:1,b:2"]).total() == 3
    assert hostlist.from_args(["--map-by", "slot"]) is None
    with pytest.raises(ValueError, match="whole number"):
        hostlist.parse_host_flag("a:two")
    with pytest.raises(ValueError, match="needs a value"):
        hostlist.from_args(["--host"])


def test_a_launch_on_one_host_has_no_host_list_to_shorten():
    assert hostlist.of_launch(["--host", "a:4"], {}) is None
    assert hostlist.of_launch([], {}) is None
    assert hostlist.of_launch(["--host", "a:2,b:2"], {}).names == ["a", "b"]


def test_a_slurm_allocation_of_several_nodes_gives_its_nodes_and_tasks():
    env = {
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_TASKS_PER_NODE": "2(x2),1",
    }
    got = hostlist.of_launch([], env, expand=lambda text: ["n1", "n2", "n3"])
    assert got.slots == (("n1", 2), ("n2", 2), ("n3", 1)) and got.source == "slurm"
    assert hostlist.from_slurm({**env, "SLURM_JOB_NUM_NODES": "1"}, expand=lambda t: ["n1"]) is None
    assert hostlist.tasks_per_node("4(x3)") == [4, 4, 4]
    with pytest.raises(ValueError, match="N or N"):
        hostlist.tasks_per_node("4x3")


def test_without_rewrites_the_host_flag_a_hostfile_or_the_allocation(tmp_path):
    extra = ["--prtemca", "plm_ssh_agent", "/x", "--host", "a:1,b:2,c:2", "--map-by", "slot"]
    hosts = hostlist.from_args(extra)
    assert hostlist.without(extra, hosts, {"c"}, "openmpi") == [
        "--prtemca",
        "plm_ssh_agent",
        "/x",
        "--host",
        "a:1,b:2",
        "--map-by",
        "slot",
    ]
    f = tmp_path / "hosts"
    f.write_text("a slots=1\nb slots=2\nc slots=2\n")
    extra = ["--hostfile", str(f)]
    out = hostlist.without(extra, hostlist.from_args(extra), {"b"}, "openmpi", str(tmp_path))
    assert out[0] == "--hostfile" and out[1] != str(f)
    assert hostlist.parse_hostfile(open(out[1]).read()) == [("a", 1), ("c", 2)]
    assert f.read_text() == "a slots=1\nb slots=2\nc slots=2\n"  # the user's file is left as it was
    extra = ["-f", str(f)]
    out = hostlist.without(extra, hostlist.from_args(extra), {"a"}, "mpich", str(tmp_path))
    assert open(out[1]).read() == "b:2\nc:2\n"
    slurm = hostlist.Hosts((("n1", 2), ("n2", 2), ("n3", 2)), "slurm")
    assert hostlist.without(["-K0"], slurm, {"n2"}, "srun") == ["-K0", "--exclude=n2"]
    assert hostlist.without([], slurm, {"n2"}, "openmpi") == ["--host", "n1:2,n3:2"]
    assert hostlist.without([], slurm, {"n2"}, "mpich") == ["-hosts", "n1:2,n3:2"]


def test_a_probe_runs_true_on_one_host_through_the_jobs_own_flags():
    extra = ["--prtemca", "plm_ssh_agent", "/x", "--host", "a:1,b:2"]
    one = hostlist.only(extra, hostlist.from_args(extra), "b", "openmpi")
    assert one == ["--prtemca", "plm_ssh_agent", "/x", "--host", "b:1"]
    cmd = hostprobe.probe_command("mpiexec", "mpich", ["-hosts", "b:1"])
    assert cmd == ["mpiexec", "-hosts", "b:1", "-n", "1", "true"]
    slurm = hostlist.Hosts((("n1", 2), ("n2", 2)), "slurm")
    assert hostlist.only([], slurm, "n2", "srun") == ["--nodelist=n2", "-N", "1"]


def test_a_probe_of_a_host_that_cannot_run_anything_says_why(tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text(
        "#!/bin/sh\ncase \"$*\" in *down*) echo 'ssh: connect to host down: No route to host' >&2; "
        "exit 255;; *slow*) sleep 30;; esac\nexit 0\n"
    )
    fake.chmod(0o755)
    hosts = hostlist.Hosts((("up", 1), ("down", 1), ("slow", 1)), "-hosts")
    got = hostprobe.probe(
        str(fake), "mpich", ["-hosts", "up,down,slow"], hosts, ["up", "down", "slow"], {}, timeout=1
    )
    assert got["up"][0] is True
    assert got["down"] == (False, "exit 255: ssh: connect to host down: No route to host", True)
    assert got["slow"] == (False, "no answer within 1 s", True)


def test_a_probe_tells_a_host_without_the_launchs_folder_from_a_lost_one(tmp_path):
    """mpiexec starts every rank in the folder it was started from: a host without it (its
    own /tmp) fails the launch as if lost. A probe that did not see the folder there runs
    again from / and looks for it; a host up with the folder answers the first probe."""
    cmd = hostprobe.probe_command("mpiexec", "mpich", ["-hosts", "b:1"], "/x y")
    assert (
        cmd[:5] == ["mpiexec", "-hosts", "b:1", "-n", "1"]
        and cmd[5:7] == ["sh", "-c"]
        and cmd[-1] == "/x y"
    )
    # a stand-in: "lacking" fails from any folder but / (as Hydra's proxy does), "quiet"
    # ends 0 without running anything but from / (as Open MPI's job does); each call logs its folder
    fake = tmp_path / "mpiexec"
    fake.write_text(
        '#!/bin/sh\necho "$*" "$(pwd)" >> "$0.calls"\ncase "$*" in\n'
        '  *lacking*) [ "$(pwd)" = / ] || exit 255; echo "%s";;\n'
        '  *quiet*) [ "$(pwd)" = / ] && echo "%s";;\n'
        '  *) shift 4; "$@";;\nesac\nexit 0\n' % (hostprobe.NO_FOLDER, hostprobe.NO_FOLDER)
    )
    fake.chmod(0o755)
    names = ["up", "lacking", "quiet"]
    hosts = hostlist.Hosts(tuple((h, 1) for h in names), "-hosts")
    got = hostprobe.probe(
        str(fake),
        "mpich",
        ["-hosts", ",".join(names)],
        hosts,
        names,
        {},
        timeout=5,
        folder=str(tmp_path),
    )
    assert got["up"] == (True, got["up"].how, True)
    assert got["lacking"] == (True, got["lacking"].how, False) and got["quiet"] == (
        True,
        got["quiet"].how,
        False,
    )
    calls = (tmp_path / "mpiexec.calls").read_text().splitlines()
    assert sum(" up:1 " in c for c in calls) == 1 and sum(" lacking:1 " in c for c in calls) == 2
    said = hostprobe.missing_folder(str(tmp_path), got)
    assert said.startswith(
        f"the folder this job was launched from, {tmp_path}, is not on host(s) lacking, quiet: "
    )
    assert hostprobe.missing_folder(str(tmp_path), {"up": got["up"]}) is None


def test_which_exits_may_have_lost_a_host():
    assert host_plan.worth_probing(exitcodes.RERUN_TO_RESUME, False)
    assert host_plan.worth_probing(255, False) and host_plan.worth_probing(
        exitcodes.NEVER_STARTED, False
    )
    assert not host_plan.worth_probing(
        exitcodes.RERUN_TO_RESUME, True
    )  # past --timeout: never again
    for code in (exitcodes.OK, exitcodes.BAD_INPUT, exitcodes.CHECKPOINTED, exitcodes.INTERRUPTED):
        assert not host_plan.worth_probing(code, False)
    # Open MPI's job ends with a bad input (too few ranks) when a host lacks the launch's folder
    assert host_plan.worth_looking_for_the_folder(exitcodes.BAD_INPUT, False)
    assert host_plan.worth_looking_for_the_folder(exitcodes.RERUN_TO_RESUME, False)
    assert not host_plan.worth_looking_for_the_folder(exitcodes.BAD_INPUT, True)
    assert not host_plan.worth_looking_for_the_folder(exitcodes.OK, False)


SLOTS = {"a": 1, "b": 2, "c": 2}


def test_a_host_that_does_not_answer_is_left_out_and_the_job_fits_the_slots_left():
    book = HostBook(max_failures=2, cooldown=600)
    nxt = book.decide(
        list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=100.0, why="exit 74"
    )
    assert nxt.relaunch and nxt.left_out == {"c"} and nxt.ranks == 3 and nxt.lost_now == ("c",)
    assert "without c on 3 ranks (was 5); host loss 1 of at most 2" in nxt.message
    # every host answers next time, c still cooling down (not probed): nothing new is lost
    assert book.to_probe(list(SLOTS), 200.0) == ["a", "b"]
    again = book.decide(list(SLOTS), SLOTS, {"a": True, "b": True}, 5, now=200.0, why="exit 74")
    assert (
        not again.relaunch and again.lost_now == () and again.left_out == {"c"} and again.ranks == 3
    )


def test_a_host_comes_back_after_its_cooldown_if_it_answers_and_losing_it_again_costs_budget():
    book = HostBook(max_failures=2, cooldown=60)
    book.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=0.0, why="x")
    assert book.to_probe(list(SLOTS), 59.0) == ["a", "b"] and book.to_probe(list(SLOTS), 60.0) == [
        "a",
        "b",
        "c",
    ]
    back = book.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": True}, 5, now=61.0, why="x")
    assert back.left_out == frozenset() and back.ranks == 5 and not back.lost_now
    lost = book.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=70.0, why="x")
    assert lost.relaunch and "host loss 2 of at most 2" in lost.message
    still_out = book.decide(
        list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=200.0, why="x"
    )
    assert still_out.lost_now == () and still_out.left_out == {
        "c"
    }  # down after its cooldown: no new loss


def test_the_failure_budget_and_too_few_slots_end_the_job_with_a_clear_message():
    book = HostBook(max_failures=0, cooldown=600)
    nxt = book.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=0.0, why="x")
    assert not nxt.relaunch and nxt.lost_now == ("c",)
    assert "more than --max-host-failures=0" in nxt.message and "checkpoint is kept" in nxt.message
    book = HostBook(max_failures=5, cooldown=600)
    book.decide(list(SLOTS), SLOTS, {"a": True, "b": False, "c": False}, 5, now=0.0, why="x")
    nxt = book.decide(list(SLOTS), SLOTS, {"a": True, "b": False, "c": False}, 5, now=9.0, why="x")
    assert not nxt.relaunch and nxt.ranks == 1
    assert (
        "the hosts left (a:1) have 1 slot(s)" in nxt.message and "at least 2 ranks" in nxt.message
    )
    spares = HostBook(max_failures=5, cooldown=600, fewest=4)  # a fit with 2 hot spares
    nxt = spares.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, now=0.0, why="x")
    assert not nxt.relaunch and nxt.ranks == 3
    assert "at least 4 ranks (a driver, a worker and its spares" in nxt.message


def test_every_host_but_one_silent_at_once_is_doubted_until_a_second_probe_says_so_again():
    """Seen once under MPICH on a loaded machine: right after a failed start, neither worker
    host answered within 20 s, and the job ended with 74 on the one host left."""
    book = HostBook(max_failures=5, cooldown=600)
    first = book.decide(list(SLOTS), SLOTS, {"a": True, "b": False, "c": False}, 5, 0.0, "x")
    assert not first.relaunch and first.lost_now == () and first.left_out == frozenset()
    assert "every host probed but one was silent at once (b, c)" in first.message
    assert first.ranks == 5 and book.losses == []
    back = book.decide(list(SLOTS), SLOTS, {"a": True, "b": True, "c": False}, 5, 5.0, "x")
    assert back.relaunch and back.lost_now == ("c",)  # one silent host is lost at once


def test_when_no_host_answers_the_probe_is_at_fault_and_none_is_left_out():
    book = HostBook()
    nxt = book.decide(list(SLOTS), SLOTS, {"a": False, "b": False, "c": False}, 5, now=0.0, why="x")
    assert (
        not nxt.relaunch and nxt.lost_now == () and nxt.left_out == frozenset() and nxt.ranks == 5
    )
    assert "no host answered" in nxt.message and book.losses == []


def test_the_relaunch_record_reaches_the_ranks_and_an_outer_one_never_does(monkeypatch):
    records = [{"attempt": 2, "lost_hosts": ["c"], "left_out": ["c"], "ranks": 3, "was_ranks": 5}]
    env = contract.relaunches_env(records)
    monkeypatch.setenv(contract.RELAUNCHES_ENV, env[contract.RELAUNCHES_ENV])
    assert contract.relaunches() == records
    assert contract.RELAUNCHES_ENV not in contract.outer_vars_removed(dict(env))
    assert contract.relaunches_env([]) == {}
    monkeypatch.setenv(contract.RELAUNCHES_ENV, "not json")
    assert contract.relaunches() == []


def test_the_start_says_what_a_lost_host_costs_under_each_runtime():
    assert "ends a job that lost a daemon" in hostprobe.node_loss_text("openmpi", "3.0.14")
    assert "PRRTE 3.0.14" in hostprobe.node_loss_text("openmpi", "3.0.14")
    assert "may run through a lost daemon" in hostprobe.node_loss_text("openmpi", "4.1.0")
    assert "version unknown" in hostprobe.node_loss_text("openmpi", None)
    assert "Hydra" in hostprobe.node_loss_text("mpich", None)
    assert "srun --no-kill keeps the step" in hostprobe.node_loss_text("srun", None)


def test_the_prrte_version_is_read_beside_mpiexec(tmp_path):
    (tmp_path / "prte_info").write_text("#!/bin/sh\necho '                    PRTE: 3.0.14'\n")
    (tmp_path / "prte_info").chmod(0o755)
    assert hostprobe.prrte_version(str(tmp_path / "mpiexec")) == "3.0.14"
    assert hostprobe.prrte_version(str(tmp_path / "nowhere" / "mpiexec")) is None


def test_status_inspect_and_the_event_line_say_which_host_was_lost():
    from mixle_mpi.cli.inspector import summarize_events, summarize_summary
    from mixle_mpi.cli.status import FitFiles, report
    from mixle_mpi.storage.events import describe

    rec = {
        "time": 10.0,
        "event": "relaunched",
        "attempt": 2,
        "lost_hosts": ["hostc"],
        "left_out": ["hostc"],
        "ranks": 3,
        "was_ranks": 5,
        "exit": 74,
        "ended_at": 9.0,
        "decided_at": 9.5,
        "probe_seconds": 0.4,
    }
    assert (
        describe(rec)
        == "relaunched without lost host(s) hostc (attempt 2, 3 ranks, was 5; left out: hostc)"
    )
    files = FitFiles(
        "out", None, None, None, None, [{"time": 9.9, "event": "start", "workers": 2}, rec]
    )
    assert "hosts lost: hostc; launched again without them 1 time(s), now on 3 ranks" in report(
        files, True, 11.0
    )
    assert any(
        "relaunched without lost host(s) hostc" in line for line in summarize_events(files.events)
    )
    lines = summarize_summary(
        {
            "relaunches": [
                {
                    "attempt": 2,
                    "lost_hosts": ["hostc"],
                    "left_out": ["hostc"],
                    "ranks": 3,
                    "was_ranks": 5,
                }
            ]
        }
    )
    assert "host(s) hostc lost: launched again without them on 3 ranks (was 5)" in lines


def test_a_relaunch_leaves_out_the_host_that_did_not_answer_and_records_it(monkeypatch, tmp_path):
    """HostRelaunch carries out host_plan's decision: the host flag rewritten, fewer ranks,
    the record the next launch's ranks get; a host that answers without the launch's folder
    ends the command (exit 2) instead."""
    from types import SimpleNamespace

    from mixle_mpi.core.errors import ConfigError
    from mixle_mpi.launch.hostrelaunch import HostRelaunch

    extra = ["--host", "a:1,b:2,c:2", "--map-by", "slot"]
    answers = {
        "a": hostprobe.Answer(True, "ok"),
        "b": hostprobe.Answer(True, "ok"),
        "c": hostprobe.Answer(False, "exit 255: ssh: connect to host c port 22: No route to host"),
    }
    monkeypatch.setattr(hostprobe, "probe", lambda *a, **k: {h: answers[h] for h in a[4]})
    monkeypatch.chdir(tmp_path)
    relaunch = HostRelaunch(
        "mpiexec", "openmpi", 5, extra, hostlist.from_args(extra), HostBook(), {}
    )
    failed = SimpleNamespace(code=exitcodes.RERUN_TO_RESUME, timed_out=False, ended_at=12.5)
    assert relaunch.after(failed, 2) is True
    assert relaunch.extra == ["--host", "a:1,b:2", "--map-by", "slot"] and relaunch.ranks == 3
    (record,) = relaunch.records
    assert (record["attempt"], record["lost_hosts"], record["ranks"], record["was_ranks"]) == (
        2,
        ["c"],
        3,
        5,
    )
    assert contract.RELAUNCHES_ENV in relaunch.env()
    assert (
        relaunch.after(SimpleNamespace(code=exitcodes.OK, timed_out=False, ended_at=0), 3) is None
    )  # finished
    answers["b"] = hostprobe.Answer(True, "ok", has_folder=False)
    with pytest.raises(ConfigError, match="is not on host\\(s\\) b"):
        relaunch.after(failed, 3)


def test_under_slurm_a_node_slurm_knows_is_lost_is_not_launched_on(tmp_path):
    """A probe under SLURM asks sinfo first: a node it has down, drained or not responding
    (state ending in *) is lost without a launch there (srun would wait for it)."""
    for state in ("down*", "down", "idle*", "mixed*", "drained", "draining", "fail"):
        assert hostprobe.slurm_says_lost(state), state
    for state in ("idle", "mixed", "allocated", "completing"):
        assert not hostprobe.slurm_says_lost(state), state
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sinfo").write_text("#!/bin/sh\nprintf 'n1 mixed\\nn2 down*\\n'\n")
    (fake / "mpiexec").write_text(
        '#!/bin/sh\necho "$@" >> ' + str(tmp_path / "launched") + "\nexit 0\n"
    )
    for f in fake.iterdir():
        f.chmod(0o755)
    hosts = hostlist.Hosts((("n1", 2), ("n2", 2)), "slurm")
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    got = hostprobe.probe(str(fake / "mpiexec"), "mpich", [], hosts, ["n1", "n2"], env)
    assert got["n1"].answered and got["n2"] == hostprobe.Answer(False, "SLURM has it down*")
    assert "n2" not in (tmp_path / "launched").read_text()  # never launched on


def test_a_host_list_that_cannot_be_read_only_costs_the_relaunch(tmp_path, caplog):
    from mixle_mpi.launch.launcher import launch_hosts

    assert launch_hosts(["--hostfile", str(tmp_path / "missing")], {}) is None
    assert launch_hosts(["--host", "a:two,b"], {}) is None
    assert "a lost host will not be left out by itself" in caplog.text
    assert launch_hosts(["--host", "a:1,b:2"], {}).total() == 3
