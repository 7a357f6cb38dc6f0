"""core/jitcache: a process started after ``prime`` loads every parallel kernel from numba's
cache, so two such processes compute the same bits; the marker makes a warm prime cheap, the
lock lets one of two concurrent primes compile; a process on a cold cache says it compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from mixle_mpi.core import jitcache

PROBE = (
    "import json; from mixle_mpi.core import jitcache, numerics; "
    "print(json.dumps([numerics.probe(), jitcache.compiled_here()]))"
)


def _probe_in(env: dict) -> tuple[str, list]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return tuple(json.loads(out.stdout.splitlines()[-1]))


def _cold(tmp_path, name: str) -> dict:
    return {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / name)}


def test_the_key_follows_the_jit_target_and_the_marker_sits_in_the_cache(tmp_path):
    env = _cold(tmp_path, "c")
    assert jitcache.key(env) == jitcache.key(dict(env))
    assert jitcache.key({**env, "NUMBA_CPU_NAME": "haswell"}) != jitcache.key(env)
    assert jitcache.marker(env).startswith(str(tmp_path / "c") + os.sep)
    assert jitcache.cache_home({}) is not None  # mixle is installed: its cache folder


def test_primed_processes_load_every_kernel_and_agree(tmp_path):
    """Two primes at once on a cold cache: one compiles (in a child), the other waits for
    the lock and finds it warm. Then two processes load every parallel kernel (none compiled
    here) and their probes agree. A process on another cold cache, never primed, compiles
    them itself, and says so."""
    env = _cold(tmp_path, "primed")
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(jitcache.prime(env))) for _ in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    assert sorted(results) == ["primed", "warm"], results
    assert jitcache.prime(env) == "warm"
    first, second = _probe_in(env), _probe_in(env)
    assert first == second and first[1] == [], (first, second)
    probe, compiled = _probe_in(_cold(tmp_path, "never-primed"))
    assert compiled and all(name.startswith("mixle.") for name in compiled), compiled


def test_a_prime_that_cannot_write_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    what = jitcache.prime({**os.environ, "NUMBA_CACHE_DIR": str(blocker / "cache")})
    assert what.startswith("failed:"), what


def test_the_launcher_primes_the_ranks_interpreter_when_it_is_another(tmp_path):
    """``mixle-mpi run -- OTHER_PYTHON ...``: the cache of OTHER_PYTHON's install is filled,
    by OTHER_PYTHON (here the MPICH environment's), then found warm."""
    from mpiharness import mpich_python

    from mixle_mpi.launch.launcher import ranks_python

    assert ranks_python(["/x/bin/python3.11", "-m", "m"]) == "/x/bin/python3.11"
    assert ranks_python(["./job.sh"]) == sys.executable
    other = mpich_python()
    assert other is not None, "setup makes .venv-mpich"
    env = _cold(tmp_path, "other")
    assert jitcache.prime_for(other, env) == "primed"
    assert jitcache.prime_for(other, env) == "warm"
    assert jitcache.prime_for("/nonexistent/python", env).startswith("failed:")


def test_a_priming_child_killed_from_outside_leaves_no_marker_and_the_next_prime_fills(tmp_path):
    """SIGKILL to the child mid-compile: the prime says it failed (the launcher warns and the
    ranks report what they compiled), no marker claims a full cache, and the next prime
    fills it."""
    import signal
    import time

    import psutil

    env = _cold(tmp_path, "killed")
    results: list[str] = []
    runner = threading.Thread(target=lambda: results.append(jitcache.prime(env)))
    runner.start()
    deadline = time.monotonic() + 60
    child = None
    while child is None and time.monotonic() < deadline:
        for p in psutil.Process().children(recursive=True):
            try:
                if "mixle_mpi.core.jitwarm" in p.cmdline():
                    child = p
            except psutil.Error:  # a process that ended meanwhile
                pass
        time.sleep(0.05)
    assert child is not None, "the priming child never started"
    time.sleep(1.0)  # mid-compile: a cold compile takes several seconds
    child.send_signal(signal.SIGKILL)
    runner.join(timeout=120)
    assert results and results[0].startswith("failed: the child exited -9"), results
    assert not os.path.exists(jitcache.marker(env))
    assert jitcache.prime(env) == "primed"
