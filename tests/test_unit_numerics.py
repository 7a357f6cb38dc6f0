"""The numeric baseline's variables and the decision which ranks share the driver's numerics."""

from __future__ import annotations

from mixle_mpi.core import numerics
from mixle_mpi.core.numerics import Numerics
from mixle_mpi.launch.launcher import launch_env
from mixle_mpi.policy import numerics_plan

DISPATCH = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]


def test_the_x86_baseline_turns_off_only_targets_above_v3_that_this_numpy_knows():
    env = numerics.baseline_env("x86_64", dispatch=DISPATCH)
    assert env["NPY_DISABLE_CPU_FEATURES"] == "X86_V4 AVX512_ICL AVX512_SPR"
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["NUMBA_CPU_NAME"] == "haswell"
    assert "-avx512f" not in env["NUMBA_CPU_FEATURES"] and "+fma" in env["NUMBA_CPU_FEATURES"]
    assert env[numerics.BASELINE_MARK] == "x86-64-v3"
    old = numerics.baseline_env("AMD64", dispatch=["AVX512F", "AVX512_SKX", "AVX2"])
    assert old["NPY_DISABLE_CPU_FEATURES"] == "AVX512F AVX512_SKX"


def test_auto_native_and_unknown_architectures_pin_nothing():
    assert numerics.baseline_env("x86_64", "native") == {numerics.BASELINE_MARK: "native"}
    assert numerics.baseline_env("x86_64", "auto") == {numerics.BASELINE_MARK: "auto"}
    assert numerics.baseline_env("riscv64") == {numerics.BASELINE_MARK: "native"}
    env = numerics.with_baseline({numerics.MODE_ENV: "native", "OPENBLAS_CORETYPE": "Zen"})
    assert env["OPENBLAS_CORETYPE"] == "Zen"


def test_the_launcher_pins_every_rank_in_mode_baseline_only():
    env = launch_env(1, base={"PATH": "/bin"})
    assert env[numerics.BASELINE_MARK] == "auto" and "NUMBA_CPU_NAME" not in env
    pinned = launch_env(1, base={"PATH": "/bin"}, overrides={numerics.MODE_ENV: "baseline"})
    if numerics.arch() in numerics.BASELINES:
        assert pinned[numerics.BASELINE_MARK] == numerics.BASELINES[numerics.arch()]["name"]
        assert pinned["NUMBA_CPU_NAME"] and "OPENBLAS_CORETYPE" in pinned


def test_the_probe_is_stable_within_a_process_and_reported_with_its_cpu():
    me = numerics.report()
    assert me.probe == numerics.probe() and len(me.probe) == 16
    assert numerics.signature().endswith(me.probe)


MINE = Numerics("aaaa", "x86-64-v3", "EPYC", ("X86_V3",), "Haswell")


def test_a_worker_of_the_drivers_probe_is_taken_whatever_its_cpu():
    same = MINE._replace(cpu="Xeon E5")
    assert numerics_plan.refusal(3, "n1", MINE, same) is None


def test_a_worker_of_another_probe_is_refused_with_its_rank_host_and_difference():
    odd = MINE._replace(probe="bbbb", dispatch=(), baseline="x86-64-v3")
    why = numerics_plan.refusal(3, "n7", MINE, odd)
    assert why.startswith("rank 3 on n7 computes other bits than the driver")
    assert "probe bbbb (driver aaaa)" in why and "numpy dispatch baseline only" in why
    assert "leave the host out" in why
    unpinned = MINE._replace(probe="cccc", baseline="native")
    assert "start it under the job's baseline" in numerics_plan.refusal(2, "n2", MINE, unpinned)
    assert numerics_plan.refusal(2, "n2", MINE, MINE._replace(probe="")) is not None


def test_odd_ranks_and_too_few_left():
    reports = {1: ("n1", MINE), 2: ("n2", MINE._replace(probe="x")), 3: ("n3", MINE)}
    odd = numerics_plan.odd_ranks(MINE, reports)
    assert list(odd) == [2]
    assert numerics_plan.too_few(2, 1, odd) is None
    msg = numerics_plan.too_few(0, 1, odd)
    assert "leaving 0 worker(s), but the job needs 1" in msg and "rank 2 on n2" in msg


def test_a_resume_under_other_numerics_is_refused_like_a_version_change():
    from mixle_mpi.storage import checkpoint as ckpt

    def state(sig):
        return ckpt.FitState(1, "{}", [0.0], versions={"numpy": "2.4", "numerics": sig})

    saved, now = state("auto 7e91ac427636cd0d"), state("x86-64-v3 c413237d514753c5")
    why = ckpt.refusal("ck.h5", saved, now)
    assert "versions.numerics: checkpoint has 'auto 7e91ac427636cd0d', this run has" in why
    assert "another CPU generation, or another --numerics" in why
    assert "--allow-version-change" in why
    assert ckpt.refusal("ck.h5", saved, now, allow_version_change=True) is None


def test_fit_takes_allow_version_change_and_numerics():
    from mixle_mpi.cli.commands import build_parser
    from mixle_mpi.cli.jobconfig import from_args, to_argv

    args = build_parser().parse_args(
        ["fit", "--data", "builtin:iris", "--model", "gmm:k=2", "--allow-version-change"]
        + ["--numerics", "baseline"]
    )
    cfg = from_args(args)
    assert cfg.allow_version_change is True and args.numerics == "baseline"
    assert "--allow-version-change" in to_argv(cfg)


def test_the_launcher_launches_an_auto_job_again_pinned_only_after_its_probes_differed():
    from mixle_mpi.core import exitcodes
    from mixle_mpi.launch.launcher import pin_after

    again = pin_after(exitcodes.NUMERICS_DIFFER, {"X": "1"}, base={})
    assert again == {"X": "1", numerics.MODE_ENV: "baseline"}
    assert pin_after(exitcodes.NUMERICS_DIFFER, again, base={}) is None  # pinned already
    assert pin_after(exitcodes.FAILED, {}, base={}) is None
    assert pin_after(exitcodes.NUMERICS_DIFFER, {numerics.MODE_ENV: "native"}, base={}) is None


def test_at_startup_auto_relaunches_and_pinned_refuses():
    auto = MINE._replace(baseline="auto")
    odd = {1: ("n1", tuple(auto)), 2: ("n2", tuple(auto._replace(probe="x")))}
    why, refused = numerics_plan.at_startup(auto, odd)
    assert why.startswith("numerics auto: the ranks' probes differ") and refused == {}
    why, refused = numerics_plan.at_startup(MINE, {1: ("n1", tuple(MINE._replace(probe="x")))})
    assert why is None and list(refused) == [1]
    assert numerics_plan.at_startup(auto, {1: ("n1", tuple(auto))}) == (None, {})


def test_a_bad_numerics_mode_is_refused_with_the_choices():
    import pytest

    from mixle_mpi.core.errors import ConfigError

    with pytest.raises(ConfigError, match="MIXLE_MPI_NUMERICS='fast' must be one of auto"):
        numerics.mode({numerics.MODE_ENV: "fast"})


def test_a_worker_that_compiled_its_kernels_is_told_how_to_load_them():
    """A rank whose numba cache was cold compiled mixle's parallel kernels itself (other
    bits than loaded ones: core/jitcache): the reason says so and how to avoid it."""
    compiled = MINE._replace(probe="0" * 16, compiled=("mixle.stats.latent.x.numba_baum_welch2",))
    why = numerics_plan.refusal(1, "n1", MINE, compiled)
    assert "compiled in the process, not loaded from the cache: 1 (driver 0)" in why, why
    assert "mixle-mpi run, which fills numba's cache" in why, why


def test_the_cpu_is_read_once_for_the_report_and_for_the_caches_key():
    """core/cpuinfo: one reading of /proc/cpuinfo gives the model a rank reports and the
    model and flags the numba cache's key depends on."""
    from mixle_mpi.core import cpuinfo, jitcache

    cpu = cpuinfo.first_cpu()
    assert cpuinfo.first_cpu() is cpu  # read once per process
    if "model name" in cpu:
        assert numerics.describe()["cpu"] == cpu["model name"]
        assert f"model name: {cpu['model name']}" in cpuinfo.target_text()
    assert jitcache.key() == jitcache.key()
