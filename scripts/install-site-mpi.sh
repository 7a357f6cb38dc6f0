#!/usr/bin/env bash
# A "site MPI" for tests/test_site_mpi.py: Debian's Open MPI 4.1 and MPICH 4.0 stand in for a
# cluster's modules. Installs them and Lmod, writes one modulefile per MPI (module use
# .site-mpi/modules; module load site-openmpi | site-mpich), and builds one venv per MPI
# (.venv-site-openmpi, .venv-site-mpich) with mpi4py compiled against it and this project
# installed without an MPI extra. Idempotent: what is there already is reused (the mpi4py
# builds are kept as wheels in .site-mpi/wheels). Debian's generic /usr/bin/mpiexec, mpirun
# and mpicc links are removed, as on a cluster where an MPI is reached only through its module
# (and so that nothing here finds one of these MPIs by accident).
# Without root or apt-get it says so and exits 0: the site MPI tests then skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ROOT=$PWD/.site-mpi
PACKAGES=(openmpi-bin libopenmpi-dev mpich libmpich-dev lmod)
MPI4PY='mpi4py>=4.1,<5'

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-site-mpi: cannot install ${missing[*]} (needs root and apt-get); the site MPI tests will be skipped" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  echo "install-site-mpi: installed ${missing[*]}"
fi
if [ "$(id -u)" = 0 ]; then  # only modules give an MPI (alternatives are Debian's, root's)
  for group in mpirun mpi; do update-alternatives --remove-all "$group" >/dev/null 2>&1 || true; done
fi

site() {  # site NAME MPIEXEC MPICC [HELPER...]: modulefile, bin folder and venv of one MPI
  # (a HELPER is a program of /usr/bin its mpiexec runs from its own folder)
  local name=$1 mpiexec=$2 mpicc=$3 venv=.venv-site-$1
  mkdir -p "$ROOT/$name/bin" "$ROOT/modules/site-$name" "$ROOT/wheels/$name"
  ln -sfn "$mpiexec" "$ROOT/$name/bin/mpiexec"
  ln -sfn "$mpicc" "$ROOT/$name/bin/mpicc"
  for helper in "${@:4}"; do ln -sfn "/usr/bin/$helper" "$ROOT/$name/bin/$helper"; done
  cat > "$ROOT/modules/site-$name/default.lua" <<EOF
-- written by scripts/install-site-mpi.sh: Debian's $name as a site's MPI module
whatis("$name for mixle_mpi's site MPI tests")
prepend_path("PATH", "$ROOT/$name/bin")
setenv("MPICC", "$ROOT/$name/bin/mpicc")
EOF
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mixle_mpi, h5py, mpi4py, numba" 2>/dev/null; then
    return
  fi
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  if ! ls "$ROOT/wheels/$name"/mpi4py-*.whl >/dev/null 2>&1; then
    # -O0: mpi4py's one big C file takes minutes at -O3, for glue these tests do not time
    MPICC="$mpicc" CFLAGS="-O0" "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check \
      --no-binary mpi4py --no-deps --no-cache-dir -w "$ROOT/wheels/$name" "$MPI4PY"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$ROOT/wheels/$name"/mpi4py-*.whl
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e .
}

site openmpi /usr/bin/mpiexec.openmpi /usr/bin/mpicc.openmpi &
openmpi=$!
site mpich /usr/bin/mpiexec.mpich /usr/bin/mpicc.mpich hydra_pmi_proxy &
mpich=$!
wait "$openmpi"
wait "$mpich"
echo "install-site-mpi: .venv-site-openmpi (Open MPI $(/usr/bin/mpiexec.openmpi --version 2>&1 | awk 'NR == 1 {print $NF}'))," \
     ".venv-site-mpich (MPICH $(/usr/bin/mpiexec.mpich --version 2>&1 | awk '/Version:/ {print $2; exit}')), modules in .site-mpi/modules"
