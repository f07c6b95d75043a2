#!/usr/bin/env bash
# A history store of real runs for the dashboard, and the time `opledger site` takes over it:
# RUNS runs (default 60) of the small example specs across commits of a scratch git repository,
# every tenth commit a little slower (the experiment's slowdown of the fused variants), the first
# run accepted as the baseline; then `opledger site` over the store, timed three times.
#   scripts/site-demo.sh [WORK_DIR] [RUNS=60] [BIN=target/release/opledger]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/opledger-site-demo.XXXXXX)}"
RUNS="${RUNS:-60}"
BIN="$(cd "$ROOT" && realpath "${BIN:-target/release/opledger}")"
mkdir -p "$WORK/repo"
cd "$WORK/repo"
g() { git -c user.name=demo -c user.email=demo@example.com "$@"; }
[ -d .git ] || { git init -q -b main; cp "$ROOT"/tests/fixtures/good/tiny-chain.yaml "$ROOT"/tests/fixtures/good/tiny-sweep.yaml .; g add .; g commit -qm specs; }
slow=0
for i in $(seq 1 "$RUNS"); do
  if [ $((i % 5)) = 1 ]; then echo "$i" > commit; g add commit; g commit -qm "commit $i"; fi
  if [ $((i % 20)) = 0 ]; then slow=$(python3 -c "print(round($slow + 0.3, 2))"); fi
  extra=()
  [ "$i" = 1 ] && extra=(--accept)
  OPLEDGER_EXPERIMENT_SLOWDOWN="$slow" "$BIN" run tiny-chain.yaml tiny-sweep.yaml --backend cpu --default-branch main \
    --probe-mib 8 --flush-mib 8 --min-pairs 15 --max-pairs 15 --time-cap-secs 2 "${extra[@]}" >/dev/null 2>&1 || true
done
"$BIN" history --changes | head -40
for k in 1 2 3; do
  /usr/bin/time -f "site: %e s wall, %M KiB max RSS" "$BIN" site --out "$WORK/site" \
    --commit-url 'https://github.com/OWNER/REPO/commit/{sha}'
done
echo "site: $WORK/site/index.html"
