#!/usr/bin/env bash
# A chaos campaign: the same fit once without faults, then RUNS times while real worker
# processes are SIGKILLed or SIGSTOPped at random points (during recovery and respawn too).
# Exits nonzero if any run is not bit-identical to the reference, fails or hangs, or if a
# planned fault did not fire (the victim records it in run-NNN/faults.jsonl before it acts).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ -z "${DATA:-}" ]; then example_data "$WORK/example.h5" "${N:-20000}"; DATA="$WORK/example.h5:/measurements/X"; fi
"$MIXLE_MPI" chaos -n "$RANKS" --runs "${RUNS:-10}" --campaign-seed "${CAMPAIGN_SEED:-0}" \
  --data "$DATA" --model "${MODEL:-gmm:k=4,cov=diag}" --num-shards "${SHARDS:-12}" --max-its "${MAX_ITS:-15}" \
  --out-dir "$WORK/chaos"
