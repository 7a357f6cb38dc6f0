#!/usr/bin/env bash
# Install Debian's SLURM and munge for tests/test_slurm.py (a real single-node SLURM, started
# by scripts/slurm-local.sh). Skips what is already installed. libpmix-dev comes before the
# first start of slurmd: srun --mpi=pmix needs it, and adding it later needs a clean restart.
# Without root or apt-get it says so and exits 0: tests/test_slurm.py then skips, naming the
# missing binaries.
set -euo pipefail
PACKAGES=(slurmctld slurmd slurm-client munge libpmix-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-slurm: already installed (${PACKAGES[*]})"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-slurm: cannot install ${missing[*]} (needs root and apt-get); the SLURM tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
echo "install-slurm: installed ${missing[*]}"
