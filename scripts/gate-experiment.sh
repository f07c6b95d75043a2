#!/usr/bin/env bash
# The gate's false-alarm and detection rates, measured (issue: "a gate people can trust").
#
#   [GATE_COMPARE=raw|relative|both] [PAIRS=60] [CAP=1.5] [ACCEPTS=1 | CALIBRATE=RUNS]
#   [SLOWDOWN=0.10] [AA_N=N] [BIN=...]
#     scripts/gate-experiment.sh [N] [SPEC]
#
# 1. Accepts a baseline of SPEC (default: a 2048x1024 bias+GELU chain) in a temp store:
#    ACCEPTS runs with `run --accept`, or, with CALIBRATE=RUNS, one `opledger calibrate --runs
#    RUNS --accept` (its table, the smallest slowdown this machine can gate, is printed).
# 2. A/A: runs the unchanged gate AA_N times (default N, 100) against it and counts FAIL decisions.
# The spec gates at max_regression 0.05: a 10% slowdown lies clearly beyond it.
# 3. Slowdown: runs the gate N times again with OPLEDGER_EXPERIMENT_SLOWDOWN=$SLOWDOWN (default
#    0.10): the fused kernel really computes the first 10% of its output twice, a genuine ~10%
#    slowdown of the code under test (both the raw and the relative comparison see it; a baseline
#    of a smaller problem would cancel out of the relative one). The script also reports the
#    slowdown it actually caused: the median of the slowed runs' after/before ratios over the
#    A/A runs' (in relative mode; the after medians' ratio in raw mode).
# Each gate decision is a full `opledger run` (probe, up to PAIRS pairs or CAP s of sampling,
# bootstrap, and the re-measure of a
# FAIL or INCONCLUSIVE). Prints both rates; the machine should be otherwise idle. Needs a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-100}"
BIN="${BIN:-./target/release/opledger}"
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
if [ -n "${CALIBRATE:-}" ]; then
  "$BIN" calibrate "$SPEC" "${FAST[@]}" --runs "$CALIBRATE" --accept 2> /dev/null | grep '^|' || true
else
  for _ in $(seq 1 "$ACCEPTS"); do
    "$BIN" run "$SPEC" "${FAST[@]}" --accept > /dev/null 2>&1
  done
fi
rm -rf "$WORK/runs"
# What the accepted runs give the gate: its reference and its threshold (the detection rate
# depends on them as much as on the slowdown).
BASE_INFO=$(python3 - "$WORK/baselines" "$SPEC" <<'PY'
import glob, json, math, re, statistics, sys
f = glob.glob(sys.argv[1] + "/*/*.json")[0]
b = json.load(open(f))
text = open(sys.argv[2]).read()
# `both` (the default) fails only on the relative comparison: report that one.
rel = re.search(r"compare:\s*raw", text) is None
v = [(h.get("relative_median") or h["after_median_secs"] / h["before_median_secs"]) if rel
     else h["after_median_secs"] for h in b["history"]]
logs = [math.log(x) for x in v]
k = len(v)
sd = statistics.stdev(logs) if k > 1 else 0.0
print(f"{k} accepted runs, reference {math.exp(sum(logs) / k):.4g}, log-sd {100 * sd:.2f}% ({'after/before' if rel else 'after time'}); the runs' reports give the thresholds")
PY
)
echo "baseline: $BASE_INFO"
SLOWDOWN="${SLOWDOWN:-0.10}"
decide() { # prints the regression state of the last run; appends its compared value to $1
  python3 - "$WORK/runs" "$1" <<'PY'
import json, os, statistics, sys
root, log = sys.argv[1], sys.argv[2]
last = sorted(os.listdir(root))[-1]
r = json.load(open(os.path.join(root, last, "results.json")))
s = r["specs"][0]
smp = s.get("samples") or {}
a, b = smp.get("after_secs") or [], smp.get("before_secs") or []
if a and b:
    rel = statistics.median(x / y for x, y in zip(a, b))
    with open(log, "a") as f:
        f.write(f"{rel} {statistics.median(a)}\n")
print(s["baseline"].get("state") or s["baseline"]["status"])
PY
}
run_many() { # run_many LOG COUNT: COUNT gate decisions
  local fails=0 counts=""
  for i in $(seq 1 "$2"); do
    "$BIN" run "$SPEC" "${FAST[@]}" > /dev/null 2>&1 || true
    s=$(decide "$1"); counts="$counts $s"
    [ "$s" = "fail" ] && fails=$((fails + 1))
    rm -rf "$WORK/runs"
  done
  echo "$fails $(echo $counts | tr ' ' '\n' | sort | uniq -c | tr '\n' ' ')"
}
AA_N="${AA_N:-$N}"
read -r aa_fail aa_detail <<< "$(run_many "$WORK/aa.txt" "$AA_N")"
export OPLEDGER_EXPERIMENT_SLOWDOWN="$SLOWDOWN"
read -r slow_fail slow_detail <<< "$(run_many "$WORK/slow.txt" "$N")"
unset OPLEDGER_EXPERIMENT_SLOWDOWN
caused=$(python3 - "$WORK/aa.txt" "$WORK/slow.txt" "$(grep -o 'compare: *[a-z]*' "$SPEC" | awk '{print $2}')" <<'PY'
import statistics, sys
col = 0 if sys.argv[3] in ("relative", "both") else 1
med = lambda p: statistics.median(float(l.split()[col]) for l in open(p))
print(f"{100 * (med(sys.argv[2]) / med(sys.argv[1]) - 1):+.1f}%")
PY
)
# The states of every decision (pass / inconclusive / fail / improved) are listed: a slowdown
# that PASSES is the outcome a gate must avoid; INCONCLUSIVE is honest.
echo "A/A:      $aa_fail FAIL of $AA_N decisions ($(python3 -c "print(f'{100*$aa_fail/$AA_N:.1f}')")%)  states: $aa_detail"
echo "slowdown $SLOWDOWN (measured $caused): $slow_fail FAIL of $N decisions ($(python3 -c "print(f'{100*$slow_fail/$N:.1f}')")%)  states: $slow_detail"
