#!/usr/bin/env bash
# `pip install opledger` is a complete install: builds the wheel with maturin (the binary and the
# opledger_worker module), installs it into a fresh virtual environment with nothing else but
# numexpr (NumPy comes as the wheel's dependency), and runs the NumPy example with that install
# alone on PATH, no PYTHONPATH, no cargo. Exit 0 when the example runs and its verdict is PASS or
# INCONCLUSIVE.
#   scripts/wheel-check.sh [WORK_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/opledger-wheel.XXXXXX)}"
mkdir -p "$WORK"
TOOLS="$WORK/tools"
[ -x "$TOOLS/bin/maturin" ] || { python3 -m venv "$TOOLS"; "$TOOLS/bin/pip" install --quiet maturin==1.16.0; }
(cd "$ROOT" && "$TOOLS/bin/maturin" build --release --quiet -o "$WORK/dist")
WHEEL="$(ls "$WORK"/dist/opledger-*.whl | head -1)"
echo "wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1))"
ENV="$WORK/env"
rm -rf "$ENV"
python3 -m venv "$ENV"
"$ENV/bin/pip" install --quiet "$WHEEL" numexpr==2.14.2
# Nothing of the build or the checkout: the environment's bin and the system's.
clean() { env -i HOME="$WORK" PATH="$ENV/bin:/usr/bin:/bin" "$@"; }
clean python3 -c 'import opledger_worker, sys; print("opledger_worker", opledger_worker.__version__, "from", opledger_worker.__file__)'
clean opledger --version
cd "$ROOT/examples/numpy"
clean opledger run . --backend cpu --probe-mib 8 --flush-mib 8 --min-pairs 5 --max-pairs 10 \
  --time-cap-secs 3 --no-store --runs-dir "$WORK/runs" --baselines "$WORK/baselines"
