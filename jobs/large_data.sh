#!/usr/bin/env bash
# A data set larger than one rank should hold. The driver streams the HDF5 dataset into its
# shard store block by block and keeps none of it; each worker holds only its own shards
# (about 1/(RANKS-1) of the data, encoded). summary.json reports the driver's peak RSS.
#
# What is NOT supported: out-of-core EM on a worker. The shards a worker owns (and any it
# takes over after a failure) must fit in its memory, so the data must fit in the workers'
# combined RAM with room for one failed worker's share. More ranks (or nodes) is the remedy.
# summary.json's peak_rss_mb has every rank's peak (0 is the driver).
set -euo pipefail
source "$(dirname "$0")/common.sh"
N=${N:-4000000}                        # 4e6 x 8 doubles = 256 MB on disk
if [ -z "${DATA:-}" ]; then example_data "$WORK/large.h5" "$N"; DATA="$WORK/large.h5:/measurements/X"; fi
"$MIXLE_MPI" fit -n "$RANKS" --data "$DATA" --model "${MODEL:-gmm:k=4,cov=diag}" \
  --num-shards "${SHARDS:-24}" --max-its "${MAX_ITS:-10}" --out-dir "$WORK/large"
"$PYTHON" -c "import json,sys; s=json.load(open(sys.argv[1])); w=', '.join(f'rank {r} {mb:.0f} MB' for r, mb in s['peak_rss_mb'].items() if r != '0'); print(f\"driver peak RSS {s['driver_peak_rss_mb']:.0f} MB for {s['rows']} rows; workers: {w}\")" "$WORK/large/summary.json"
