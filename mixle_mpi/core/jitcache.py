"""numba's on-disk cache, filled before a process computes, so that every process loads its
compiled kernels from it and none computes with kernels it compiled itself.

mixle's HMM kernels are numba functions with ``parallel=True`` and fastmath reassociation,
cached on disk (``cache=True``). Such a function compiled in the process that runs it gives
other bits than the same function loaded from the cache (measured: the probe's HMM E-step
differs in the last bits, for the native target and for the baseline alike; numba issue
10617 reports that the two are optimized differently). Ranks that start on a cold cache
compile, while a replacement, a resumed job or the reference started later load: the same
job would mix two sets of bits. So the launcher, the built-in job's ranks and each
replacement call :func:`prime` before they import mixle: a child process compiles (or
loads) every kernel into the cache, and the caller then loads them all.

A marker beside the cache, named by what the compiled code depends on (Python, numba, mixle
and where it is installed, this package, the JIT target and the CPU), makes a warm prime cost one ``stat``; a lock
keeps the ranks of one host from compiling at once. :func:`compiled_here` names the parallel
kernels this process compiled itself (a cache it could not write): ``core.numerics`` reports
it, and the probe differs from the driver's when it matters.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time

from mixle_mpi.core import cpuinfo
from mixle_mpi.core.importmemo import until_next_import

PRIME_TIMEOUT = 900.0  # a cold compile of every kernel: about 9 s alone, minutes on a loaded node
LOCK_NAME = "mixle_mpi-jit.lock"
# the modules whose import compiles mixle's parallel kernels (eager signatures)
KERNEL_MODULES = ("mixle.stats", "mixle.stats.latent._hidden_markov_numba_kernels")
TARGET_VARS = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT", "NUMBA_CACHE_DIR")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def key(environ=None) -> str:
    """What the compiled kernels depend on, hashed (16 hex digits)."""
    environ = os.environ if environ is None else environ
    spec = importlib.util.find_spec("mixle")
    where = spec.origin if spec is not None else ""  # each install has its own cache entries
    parts = [
        sys.version,
        _version("numba"),
        _version("mixle"),
        _version("mixle-mpi"),
        cpuinfo.target_text(),
    ]
    parts.append(str(where))
    parts += [f"{var}={environ.get(var, '')}" for var in TARGET_VARS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def cache_home(environ=None) -> str | None:
    """Where numba caches mixle's kernels, as numba chooses it: ``NUMBA_CACHE_DIR``, else
    ``__pycache__`` beside mixle's sources when writable, else the user's cache folder.
    None without mixle."""
    environ = os.environ if environ is None else environ
    if environ.get("NUMBA_CACHE_DIR"):
        return environ["NUMBA_CACHE_DIR"]
    spec = importlib.util.find_spec("mixle")
    if spec is None or not spec.submodule_search_locations:
        return None
    tree = os.path.join(list(spec.submodule_search_locations)[0], "stats", "latent")
    pycache = os.path.join(tree, "__pycache__")
    if _writable(pycache) or (not os.path.exists(pycache) and _writable(tree)):
        return pycache
    home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "numba")


def marker(environ=None) -> str | None:
    home = cache_home(environ)
    return None if home is None else os.path.join(home, f"mixle_mpi-primed-{key(environ)}")


@contextlib.contextmanager
def _locked(folder: str, deadline: float):
    """An exclusive lock on ``folder``'s lock file, waited for until ``deadline``."""
    fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process held {folder}/{LOCK_NAME}") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def _exited(child: subprocess.CompletedProcess) -> str:
    """How a child ended, for a message: its code and the last line it wrote on stderr."""
    tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
    return f"exited {child.returncode}: {tail}"


def prime_for(python: str, environ, timeout: float = PRIME_TIMEOUT) -> str:
    """:func:`prime` for the install of another interpreter ``python`` (the ranks' own,
    when the launcher runs from another), run by that interpreter."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not resolved: venvs link one
        return prime(environ, timeout)
    try:
        child = subprocess.run(
            [python, "-m", "mixle_mpi.core.jitcache"],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed: {exc}"
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        return f"failed: {python} {_exited(child)}"
    return lines[-1]


def prime(environ=None, timeout: float = PRIME_TIMEOUT) -> str:
    """Fill numba's cache with every kernel for ``environ``'s target (default: this
    process's), in a child process, unless the marker says it is full. Returns what was
    done: ``warm``, ``primed`` or why it could not (the caller logs it and goes on: its
    process then compiles, and its probe says so)."""
    environ = dict(os.environ if environ is None else environ)
    path = marker(environ)
    if path is None:
        return "no mixle"
    if os.path.exists(path):
        return "warm"
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        deadline = time.monotonic() + timeout
        with _locked(folder, deadline):
            if os.path.exists(path):
                return "warm"
            child = subprocess.run(
                [sys.executable, "-m", "mixle_mpi.core.jitwarm"],
                env=environ,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
            if child.returncode != 0:
                return f"failed: the child {_exited(child)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            with os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8") as f:
                f.write(child.stdout)  # never written through a link planted there
            return "primed"
    except (OSError, TimeoutError, subprocess.TimeoutExpired) as exc:
        return f"failed: {exc}"


@until_next_import
def parallel_dispatchers() -> list:
    """Every parallel numba function that a loaded mixle or mixle_mpi module holds, as
    (name, dispatcher) pairs (none before numba is imported)."""
    dispatcher = sys.modules.get("numba.core.dispatcher")
    if dispatcher is None:
        return []
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("mixle.", "mixle_mpi.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, dispatcher.Dispatcher) and value.targetoptions.get("parallel"):
                found.append((f"{name}.{value.__name__}", value))
    return found


def compiled_here() -> list[str]:
    """The parallel kernels this process compiled rather than loaded from the cache."""
    return sorted(name for name, d in parallel_dispatchers() if sum(d.stats.cache_misses.values()))


if __name__ == "__main__":  # prime_for: this interpreter's install
    print(prime())
