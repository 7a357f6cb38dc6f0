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


def test_native_numerics_and_unknown_architectures_set_no_baseline():
    assert numerics.baseline_env("x86_64", native=True) == {numerics.BASELINE_MARK: "native"}
    assert numerics.baseline_env("riscv64") == {numerics.BASELINE_MARK: "native"}
    env = numerics.with_baseline({numerics.NATIVE_ENV: "1", "OPENBLAS_CORETYPE": "Zen"})
    assert env["OPENBLAS_CORETYPE"] == "Zen"


def test_the_launcher_gives_every_rank_the_baseline_unless_asked_for_native():
    env = launch_env(1, base={"PATH": "/bin"})
    assert env[numerics.BASELINE_MARK] != "native" or numerics.arch() not in numerics.BASELINES
    native = launch_env(1, base={"PATH": "/bin"}, overrides={numerics.NATIVE_ENV: "1"})
    assert native[numerics.BASELINE_MARK] == "native" and "NUMBA_CPU_NAME" not in native


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
