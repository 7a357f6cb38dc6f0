#!/usr/bin/env bash
# Best of R random restarts in one job: restart r uses seed SEED+r and its own checkpoint,
# the highest final log-likelihood wins (summary.json lists every restart).
# For restarts as separate SLURM jobs, use the job-array template in slurm/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ -z "${DATA:-}" ]; then example_data "$WORK/example.h5" "${N:-100000}"; DATA="$WORK/example.h5:/measurements/X"; fi
"$MIXLE_MPI" fit -n "$RANKS" --data "$DATA" --model "${MODEL:-gmm:k=4,cov=diag}" \
  --restarts "${RESTARTS:-4}" --num-shards "${SHARDS:-12}" --max-its "${MAX_ITS:-50}" --seed "${SEED:-1}" \
  --checkpoint "$WORK/best_of/checkpoint.h5" --out-dir "$WORK/best_of"
"$MIXLE_MPI" inspect "$WORK/best_of/summary.json"
