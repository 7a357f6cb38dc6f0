"""A job's prologue for a launch from here (``mixle-mpi fit -n N`` with ``prologue`` in its
job file): shell lines such as ``module load openmpi`` run in bash before the launch, and
the environment they leave is the launch's, so that the MPI they load is the one chosen
(``mpicaps.choose``: the first mpiexec on PATH). A batch script runs its prologue itself
(``mixle-mpi slurm --prologue``)."""

from __future__ import annotations

import subprocess

from mixle_mpi.core.errors import ConfigError

MARK = b"\0mixle_mpi prologue environment\0"
TIMEOUT = 120.0  # seconds a prologue may take (a module system on a busy login node is slow)


def script(text: str) -> str:
    """The bash script that runs ``text`` and then prints its environment after ``MARK``."""
    return f"{text}\nprintf '\\0mixle_mpi prologue environment\\0'\nenv -0\n"


def parse(raw: bytes) -> dict[str, str]:
    """The environment printed after ``MARK`` (``env -0``: NAME=VALUE, NUL-separated); what
    the prologue itself printed before it is left out (pure)."""
    if MARK not in raw:
        raise ConfigError("the prologue ended before it printed its environment (did it exit?)")
    tail = raw.rsplit(MARK, 1)[1]
    env = {}
    for item in tail.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name and not name.startswith(b"BASH_FUNC_"):
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def environment(text: str, base: dict, timeout: float = TIMEOUT) -> dict[str, str]:
    """The environment after running the prologue ``text`` in bash from ``base``; a prologue
    that fails (nonzero exit, or past ``timeout``) is a ConfigError quoting its error output."""
    try:
        out = subprocess.run(
            ["bash", "-c", script(text)], env=base, capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the prologue ran past {timeout:g} s: {text!r}") from None
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace").strip()[-600:]
        raise ConfigError(f"the prologue failed (exit {out.returncode}): {err or text!r}")
    return parse(out.stdout)
