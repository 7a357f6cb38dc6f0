#!/usr/bin/env bash
# A plain resilient fit of your HDF5 data. Edit DATA and MODEL (or use jobs/job.toml).
#   bash jobs/fit.sh                       # example data, 4 ranks
#   DATA=my.h5:/X MODEL=gmm:k=8,cov=diag RANKS=9 bash jobs/fit.sh
# Under SLURM use the templates in slurm/ instead (they add requeue and time-limit checkpoints).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ -z "${DATA:-}" ]; then example_data "$WORK/example.h5" "${N:-100000}"; DATA="$WORK/example.h5:/measurements/X"; fi
PLOT=$("$PYTHON" -c "import matplotlib" 2>/dev/null && echo --plot || true)  # fit.png when matplotlib is there
"$MIXLE_MPI" fit -n "$RANKS" --data "$DATA" --model "${MODEL:-gmm:k=4,cov=diag}" \
  --num-shards "${SHARDS:-12}" --max-its "${MAX_ITS:-50}" --seed "${SEED:-1}" \
  --checkpoint "$WORK/fit/checkpoint.h5" --out-dir "$WORK/fit" $PLOT
"$MIXLE_MPI" inspect "$WORK/fit"
