#!/bin/bash
# Several GPUs in one machine: one shard of the suite per GPU, each process seeing only its own
# device (CUDA_VISIBLE_DEVICES), then one merged archive. No scheduler of opledger's own: the
# processes are started here and waited for.
#   NGPUS=8 examples/multi-gpu/run-per-gpu.sh specs/
set -euo pipefail

SPECS=${1:-specs/}
OPLEDGER=${OPLEDGER:-opledger}
NGPUS=${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
OUT=${OUT:-runs/per-gpu}
BACKEND=${BACKEND:-cuda}
shift || true
[ "$NGPUS" -ge 1 ] || { echo "no GPU found (set NGPUS)" >&2; exit 3; }

mkdir -p "$OUT"
pids=()
for ((i = 0; i < NGPUS; i++)); do
  CUDA_VISIBLE_DEVICES=$i "$OPLEDGER" run "$SPECS" --backend "$BACKEND" \
    --shard "hash:$((i + 1))/$NGPUS" --runs-dir "$OUT/gpu-$i" "$@" > "$OUT/gpu-$i.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
"$OPLEDGER" merge "$OUT"/gpu-*/*/ --out "$OUT/merged"
