#!/usr/bin/env bash
# The gate's false-alarm and detection rates, measured (issue: "a gate people can trust").
#
#   [GATE_COMPARE=raw|relative] [PAIRS=60] [CAP=1.5] [ACCEPTS=1] scripts/gate-experiment.sh [N] [SPEC]
#
# 1. Accepts a baseline of SPEC (default: a 2048x1024 bias+GELU chain) in a temp store.
# 2. A/A: runs the unchanged gate N times (default 100) against it and counts FAIL decisions.
# The spec gates at max_regression 0.05: a 10% slowdown lies clearly beyond it.
# 3. Slowdown: rescales the baseline's samples to be 10% faster than what was measured (the same
#    as the code under test being 10% slower than its baseline) and runs the gate N times again.
# Each gate decision is a full `opledger run` (probe, up to PAIRS pairs or CAP s of sampling,
# bootstrap, and the re-measure of a
# FAIL or INCONCLUSIVE). Prints both rates; the machine should be otherwise idle. Needs a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-100}"
BIN=./target/release/opledger
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SPEC="${2:-$WORK/gate-exp.yaml}"
if [ -z "${2:-}" ]; then
  cat > "$SPEC" <<'YAML'
name: gate-exp
title: Gate experiment workload
workload: {kind: elementwise, ops: [bias_add, gelu], rows: 2048, cols: 1024}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth, tolerance: {rtol: 1.0e-5, atol: 1.0e-6}}
gate: {max_regression: 0.05, compare: GATE_COMPARE}
YAML
  sed -i "s/GATE_COMPARE/${GATE_COMPARE:-raw}/" "$SPEC"
fi
PAIRS="${PAIRS:-60}"
CAP="${CAP:-1.5}"
ACCEPTS="${ACCEPTS:-1}"
FAST=(--backend cpu --probe-mib 64 --flush-mib 64 --max-pairs "$PAIRS" --time-cap-secs "$CAP" --baselines "$WORK/baselines" --runs-dir "$WORK/runs")
# The baseline: accepted ACCEPTS times, as a user builds its history (and with it the spread
# the threshold respects).
for _ in $(seq 1 "$ACCEPTS"); do
  "$BIN" run "$SPEC" "${FAST[@]}" --accept > /dev/null 2>&1
done
rm -rf "$WORK/runs"
decide() { # prints the regression state of the last run
  python3 - "$WORK/runs" <<'PY'
import json, os, sys
root = sys.argv[1]
last = sorted(os.listdir(root))[-1]
r = json.load(open(os.path.join(root, last, "results.json")))
print(r["specs"][0]["baseline"].get("state") or r["specs"][0]["baseline"]["status"])
PY
}
run_many() {
  local fails=0 counts=""
  for i in $(seq 1 "$N"); do
    "$BIN" run "$SPEC" "${FAST[@]}" > /dev/null 2>&1 || true
    s=$(decide); counts="$counts $s"
    [ "$s" = "fail" ] && fails=$((fails + 1))
    rm -rf "$WORK/runs"
  done
  echo "$fails $(echo $counts | tr ' ' '\n' | sort | uniq -c | tr '\n' ' ')"
}
read -r aa_fail aa_detail <<< "$(run_many)"
python3 - "$WORK/baselines" <<'PY'
import json, glob, sys
for f in glob.glob(sys.argv[1] + "/*/*.json"):
    b = json.load(open(f))
    b["after_samples_secs"] = [t / 1.10 for t in b["after_samples_secs"]]
    for h in b.get("history", []):
        h["after_median_secs"] /= 1.10
        if h.get("relative_median"):
            h["relative_median"] /= 1.10
    json.dump(b, open(f, "w"))
PY
read -r slow_fail slow_detail <<< "$(run_many)"
echo "A/A:      $aa_fail FAIL of $N decisions ($(python3 -c "print(f'{100*$aa_fail/$N:.1f}')")%)  states: $aa_detail"
echo "10% slow: $slow_fail FAIL of $N decisions ($(python3 -c "print(f'{100*$slow_fail/$N:.1f}')")%)  states: $slow_detail"
