#!/usr/bin/env bash
# The counts gate tried as a team would, on a chain that is not shipped (2048 x 4096 f32,
# scale -> add -> relu, default cache model): a baseline accepted under load, then 10 unchanged
# runs on an idle machine, 10 runs with a real 2% slowdown of the fused kernel, and 5 unchanged
# runs beside two busy processes. Prints each run's exit code and the after side's metric.
# Usage: scripts/counts-gate-trial.sh [OPLEDGER_BINARY]
set -euo pipefail
bin=$(realpath "${1:-target/release/opledger}")
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$dir"
cat > chain.yaml <<'YAML'
name: trial-chain
title: a held-out chain, counted
checklist: [fusion]
workload: {kind: elementwise, ops: [scale, add, relu], rows: 2048, cols: 4096}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth}
measure: {mode: counts}
YAML
run() { "$bin" run chain.yaml --backend cpu --no-store "$@" > out.txt 2>&1; }
after() {
  python3 -c "import json,glob; s=json.load(open(sorted(glob.glob('runs/*/results.json'))[-1]))['specs'][0]; c=s['counts']; print(s['counts_gate']['state'], 'cycles before', c['before']['counts']['estimated_cycles'], 'after', c['after']['counts']['estimated_cycles'], 'instructions after', c['after']['counts']['instructions'], 'DRAM after', c['after']['counts']['dram_read_bytes'] + c['after']['counts']['dram_write_bytes'])"
}
busy() { for _ in 1 2; do (while :; do :; done) & done; }
busy
run --accept && rc=0 || rc=$?; echo "accepted under load: exit $rc $(after)"
kill $(jobs -p); wait 2>/dev/null || true
for i in $(seq 10); do run && rc=0 || rc=$?; echo "unchanged $i: exit $rc $(after)"; done
for i in $(seq 10); do OPLEDGER_EXPERIMENT_SLOWDOWN=0.02 run && rc=0 || rc=$?; echo "slowdown 2% $i: exit $rc $(after)"; done
busy
for i in $(seq 5); do run && rc=0 || rc=$?; echo "unchanged under load $i: exit $rc $(after)"; done
