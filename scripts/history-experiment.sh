#!/usr/bin/env bash
# The gate against a branch's history, measured beside the gate against accepted baselines:
# false alarms on unchanged code (A/A) and detections of a real slowdown, same machine, same
# spec, decisions interleaved so that both references meet the same drift.
#
#   [HISTORY=20] [ACCEPTS=5] [PAIRS=60] [CAP=1.5] [SLOWDOWN=0.10] [BIN=...]
#     scripts/history-experiment.sh [N] [SPEC]
#
# 1. The reference: HISTORY runs of SPEC on branch `main` recorded in a temporary history store,
#    the first ACCEPTS of them also accepted as baselines (`run --accept`).
# 2. A/A: N pairs of decisions on unchanged code from branch `pr`: one `run --against
#    history:main` (the newest HISTORY runs of main), one against the accepted baselines.
# 3. Slowdown: N pairs again with OPLEDGER_EXPERIMENT_SLOWDOWN=$SLOWDOWN (the fused kernel
#    computes that fraction of its output twice: a real slowdown of the code under test).
# Prints, for each reference, the decisions' states (fail / inconclusive / pass / improved) and
# the smallest slowdown its threshold could flag (the median threshold). Runs `pr` never enter
# main's history. The machine should be otherwise idle; OPLEDGER_SIMD picks the SIMD path.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-50}"
SPEC="${2:-scripts/gate-exp-chain.yaml}"
BIN="${BIN:-./target/release/opledger}"
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HISTORY="${HISTORY:-20}"
ACCEPTS="${ACCEPTS:-5}"
PAIRS="${PAIRS:-60}"
CAP="${CAP:-1.5}"
SLOWDOWN="${SLOWDOWN:-0.10}"
COMMON=(--backend cpu --probe-mib 64 --flush-mib 64 --max-pairs "$PAIRS" --time-cap-secs "$CAP"
        --baselines "$WORK/baselines" --store "$WORK/history.sqlite" --default-branch none)
for i in $(seq 1 "$HISTORY"); do
  if [ "$i" -le "$ACCEPTS" ]; then accept=(--accept); else accept=(); fi
  "$BIN" run "$SPEC" "${COMMON[@]}" --runs-dir "$WORK/main" --branch main "${accept[@]}" > /dev/null 2>&1 || true
done
# One decision: the regression state and threshold of the run just written to $WORK/pr.
decide() {
  python3 - "$WORK/pr" "$1" <<'PY'
import json, os, sys
root, log = sys.argv[1], sys.argv[2]
last = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))][0]
b = json.load(open(os.path.join(root, last, "results.json")))["specs"][0]["baseline"]
with open(log, "a") as f:
    f.write(f"{b.get('state') or b['status']} {b.get('threshold') or 0}\n")
PY
  rm -rf "$WORK/pr"
}
pairs() { # pairs TAG: N decisions against each reference
  for _ in $(seq 1 "$N"); do
    "$BIN" run "$SPEC" "${COMMON[@]}" --runs-dir "$WORK/pr" --branch pr --against history:main > /dev/null 2>&1 || true
    decide "$WORK/$1-history.txt"
    "$BIN" run "$SPEC" "${COMMON[@]}" --runs-dir "$WORK/pr" --branch pr > /dev/null 2>&1 || true
    decide "$WORK/$1-baselines.txt"
  done
}
pairs aa
OPLEDGER_EXPERIMENT_SLOWDOWN="$SLOWDOWN" pairs slow
python3 - "$WORK" "$N" "$HISTORY" "$ACCEPTS" "$SLOWDOWN" <<'PY'
import collections, statistics, sys
work, n, hist, acc, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
print(f"| reference | A/A FAIL | A/A states | slowdown {slow:.0%}: FAIL | slowdown states | median threshold |")
print("|---|--:|---|--:|---|--:|")
for ref, label in (("history", f"{hist} runs of main (history)"), ("baselines", f"{acc} accepted runs")):
    rows = {}
    for tag in ("aa", "slow"):
        lines = [l.split() for l in open(f"{work}/{tag}-{ref}.txt")]
        rows[tag] = (collections.Counter(s for s, _ in lines), [float(t) for _, t in lines if float(t) > 0])
    states = lambda c: ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
    th = rows["aa"][1] + rows["slow"][1]
    print(f"| {label} | {rows['aa'][0]['fail']}/{n} | {states(rows['aa'][0])} | {rows['slow'][0]['fail']}/{n} | "
          f"{states(rows['slow'][0])} | {f'+{100 * statistics.median(th):.1f}%' if th else '—'} |")
PY
