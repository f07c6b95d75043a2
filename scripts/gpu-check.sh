#!/usr/bin/env bash
# The GPU check: run opledger's CUDA backend on a GPU machine, in one call that fits its budget
# (one command of at most 10 minutes, 64 MiB carried, at most 8 files back).
#
# Here (no GPU needed):   bash scripts/gpu-check.sh prepare
#                         (builds the release binary into `.gpu/`, git-ignored, with the C kit's
#                         CUDA worker when nvcc is here, and checks that `.gpu/` fits 64 MiB)
# There (device tool):    run(command="bash scripts/gpu-check.sh", carry=[".gpu"], timeout_s=570)
#
# One deadline for the whole check (DEADLINE_SECS, 510 s: under 9 minutes), and every step's
# limit cut to what is left of it, so that a kernel that hangs ends its step, not the check.
# What comes back is three files in $OUT, whatever happens: `summary.txt` (the machine as found
# and every step's exit and time, with the results' table), rewritten after every step so that
# a check killed midway keeps what it did; `log.txt`; and `results.tar.gz` (results, reports,
# Nsight Compute exports, the clocks logged by `nvidia-smi dmon`), also rewritten after every
# step. Records the GPU as found (clocks are never changed); compiles every kernel for the
# device with NVRTC; runs the tiny test specs (correctness of every kind against the f64
# reference); with Nsight Compute, the tiny specs and attention over N up to 32768 under
# `run --ncu` (the raw exports kept whatever their import says) and a fusion chain counted
# twice; then the default suite, the bf16 tensor-core attention specs, the C kit's CUDA worker
# (built with -arch=sm_90 there) and the PyTorch/Triton workers. QUICK=1 runs one kind besides
# the chains, with the fewest pairs, and stops after the Nsight Compute steps (the dry run on
# tests/cudasim, the CPU stand-in for the driver, in CI).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = prepare ]; then
  set -e
  cargo build --release
  mkdir -p .gpu
  cp target/release/opledger .gpu/
  if command -v nvcc >/dev/null 2>&1; then
    nvcc -O2 -std=c++11 -arch=sm_90 -Iinclude examples/c/bias_gelu_worker.cu -o .gpu/bias_gelu_worker_cuda
  fi
  bytes=$(du -sb .gpu | cut -f1)
  limit=$((64 << 20))
  echo ".gpu/: $bytes bytes (the limit carried: $limit)"
  [ "$bytes" -le "$limit" ] || { echo "error: .gpu/ is over the 64 MiB a GPU check may carry" >&2; exit 2; }
  exit 0
fi

START=$SECONDS
DEADLINE=${DEADLINE_SECS:-510}
OUT="${OUT:-/tmp/gpu-check-out}"
mkdir -p "$OUT"
BIN="${BIN:-.gpu/opledger}"
LOG="$OUT/log.txt"
: > "$LOG"
WORK=$(mktemp -d)
KEEP="$WORK/keep"
mkdir -p "$KEEP"
STEPS="$WORK/steps.txt"
: > "$STEPS"
FACTS="$WORK/facts.txt"
DMON=""
cleanup() {
  [ -n "$DMON" ] && kill "$DMON" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# The table of the results kept so far (one line a spec: status, times, rate, correctness).
table() {
  for f in "$KEEP"/*results.json; do
    [ -f "$f" ] || continue
    python3 - "$f" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
c = r["ceilings"]
print(f"\n{sys.argv[1].rsplit('/', 1)[-1]}: {r['verdict']['status']} on {r['device']['name']} [{r['backend']}]; "
      f"copy {c['copy_bytes_per_sec']/1e9:.0f} GB/s, FMA {c['fma_flops_per_sec']/1e12:.1f} TFLOP/s, "
      f"tensor (bf16 mma.sync) {(c.get('tensor_flops_per_sec') or 0)/1e12:.0f} TFLOP/s")
for s in r["specs"]:
    b, a = s["before"].get("summary"), s["after"].get("summary")
    corr = next((c["status"] for c in s.get("checks", []) if c["name"] == "correctness"), "—")
    err = s["correctness"]["after_vs_reference"]["max_abs"] if s.get("correctness") else None
    t = lambda x: f"{x['median_secs']*1e3:9.3f} ms" if x else "        —"
    ach = s["after"].get("achieved") or {}
    rate = f"after {ach['flops_per_sec']/1e12:6.1f} TFLOP/s {ach['bytes_per_sec']/1e9:6.0f} GB/s" if ach else ""
    print(f"{s['status']:5s} {s['name'][:34]:34s} {t(b)} -> {t(a)}  {rate}  correctness {corr} (max abs err {f'{err:.1e}' if err is not None else '—'})  {s.get('error') or ''}")
    for side in ("before", "after"):
        v = (s.get("counters") or {}).get(side)
        if v:
            print(f"      counters {side}: DRAM read {v['dram_read_bytes']} B vs ledger {v['ledger_read_bytes']} B, ratio {v['read_ratio']}, L2 {v['l2_bytes']} B  {v['finding'] or ''}")
PY
  done
}

# summary.txt and results.tar.gz as they stand: written to a temporary name and moved, so that
# a check killed while writing leaves the previous whole file.
save() {
  { cat "$FACTS"; echo; echo "# steps (deadline ${DEADLINE} s, $((SECONDS - START)) s used)"; cat "$STEPS"; table; } > "$OUT/.summary.tmp"
  mv -f "$OUT/.summary.tmp" "$OUT/summary.txt"
  tar -czf "$OUT/.results.tmp" -C "$KEEP" . 2>/dev/null && mv -f "$OUT/.results.tmp" "$OUT/results.tar.gz"
}

step() { # name, a time limit in seconds, then the command; records the exit code
  # (124: the limit was hit — a kernel that hangs on the hardware must not eat the whole loan)
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - (SECONDS - START) - 15))
  if [ "$left" -lt 5 ]; then
    printf '%-28s skipped: the deadline\n' "$name" >> "$STEPS"
    save
    return 125
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  printf '%-28s exit %-3s %4ss (limit %s s)\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >> "$STEPS"
  # A run's files kept under the step's name, before the summary and archive are written.
  local prev="" a
  for a in "$@"; do
    [ "$prev" = --runs-dir ] && keep "$a" "$name"
    prev=$a
  done
  save
  [ "${STOP_AFTER:-}" != "$name" ] || kill -KILL $$
  return $rc
}

# The last run folder under $1, its files kept under the name $2 (`$2-results.json`, …).
keep() {
  local d
  d=$(ls -d "$1"/* 2>/dev/null | grep -v 'history.sqlite' | head -1)
  [ -n "$d" ] || return 0
  cp "$d/results.json" "$KEEP/$2-results.json" 2>/dev/null
  cp "$d/report.md" "$KEEP/$2-report.md" 2>/dev/null
  cp "$d/ncu.csv" "$KEEP/$2-ncu.csv" 2>/dev/null
  cp "$d/roofline.svg" "$KEEP/$2-roofline.svg" 2>/dev/null
  return 0
}

[ -x "$BIN" ] || { echo "no binary at $BIN: run \`bash scripts/gpu-check.sh prepare\` here and carry .gpu/" | tee "$OUT/summary.txt"; exit 2; }

# NVRTC: the toolkit's, or PyTorch's wheel's; cudarc loads libnvrtc.so by name.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt /root -name 'libnvrtc.so*' 2>/dev/null | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
fi

# The machine as found, first: kernel (the runtime), driver, clocks, Nsight Compute.
{
  echo "# GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ), $("$BIN" --version 2>&1)"
  echo "kernel $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv 2>&1 || echo "nvidia-smi: not found"
  if command -v ncu >/dev/null 2>&1; then ncu --version 2>&1 | tail -1; else echo "ncu: not on PATH"; fi
  if command -v nvcc >/dev/null 2>&1; then nvcc --version 2>&1 | tail -1; else echo "nvcc: not on PATH"; fi
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldconfig -p 2>/dev/null | grep -E 'libnvrtc|libcuda\.so' || true
} > "$FACTS" 2>&1
cat "$FACTS" >> "$LOG"
# The clocks, power and throttling through the whole check, a line a second.
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi dmon -s pucv -d 1 > "$KEEP/dmon.txt" 2>&1 &
  DMON=$!
fi
save

step cuda-compile 30 "$BIN" cuda-compile --arch 90
# Tiny specs: every kind the CUDA backend runs (bf16 attention too; not the CPU-only probe
# kind), small sizes; correctness against the f64 reference on the GPU.
KINDS=$(ls tests/fixtures/kinds/*.yaml | grep -v probe)
# The user `cuda:` example too: a kernel of the user's, compiled by NVRTC for this GPU.
USER_CUDA=examples/cuda/
PAIRS="--min-pairs 5 --max-pairs 20 --time-cap-secs 2"
# QUICK=1 checks that every step runs and reports, not the kernels (the simulator's timings are
# meaningless, and its test of every kind is tests/cudasim's own): one kind besides the chains,
# the fewest pairs, small probe arrays.
if [ "${QUICK:-0}" = 1 ]; then
  KINDS=tests/fixtures/kinds/tiny-launch.yaml
  USER_CUDA=""
  PAIRS="--min-pairs 3 --max-pairs 3 --time-cap-secs 1 --probe-mib 8"
fi
# shellcheck disable=SC2086
step tiny-kinds 60 "$BIN" run $KINDS tests/fixtures/good/tiny-chain.yaml \
  tests/fixtures/cudasim/ $USER_CUDA \
  --backend cuda $PAIRS \
  --baselines "$WORK/b" --runs-dir "$WORK/tiny"
save
# Hardware counters (Nsight Compute, where the machine has it and can read the counters: a
# five-second smoke test first): the tiny specs' marked pass and standard vs flash attention over N
# under `ncu`, reconciled with the ledger; the raw exports are kept whatever the import says.
if command -v ncu >/dev/null 2>&1 && step ncu-smoke 20 "$BIN" run tests/fixtures/good/tiny-chain.yaml \
  --backend cuda --ncu --min-pairs 3 --max-pairs 3 --baselines "$WORK/b" --runs-dir "$WORK/ncu-smoke"; then
  # shellcheck disable=SC2086
  step ncu-tiny 100 "$BIN" run $KINDS tests/fixtures/good/tiny-chain.yaml --backend cuda --ncu \
    --min-pairs 3 --max-pairs 5 --time-cap-secs 2 --baselines "$WORK/b" --runs-dir "$WORK/ncu-tiny"
  step ncu-attention-over-n 150 "$BIN" run specs/counters/ --backend cuda --ncu \
    --baselines "$WORK/b" --runs-dir "$WORK/ncu-flash"
  # Counts mode on the GPU: the fusion chain counted twice (accepted, then gated), so that how
  # far the hardware's counts repeat between runs comes back in the two results.
  for k in 1 2; do
    accept=""; [ "$k" = 1 ] && accept="--accept"
    step counts-chain-$k 60 "$BIN" run specs/fuse-scale-add-relu-mul.yaml --backend cuda \
      --measure counts $accept --no-store --baselines "$WORK/b" --runs-dir "$WORK/counts-$k"
  done
  save
else
  echo "ncu: not run (not on PATH, or its smoke test failed: see log.txt)" >> "$STEPS"
  save
fi

if [ "${QUICK:-0}" != 1 ]; then
  # The default suite on the GPU (first GPU baselines are recorded in the run's own store).
  step suite 100 "$BIN" run specs/ --backend cuda --baselines "$WORK/b" --runs-dir "$WORK/suite" --accept
  # bf16 attention on tensor cores (specs/gpu/: a ragged causal correctness case and the
  # d = 128, N = 8192 size of the 300 TFLOP/s target).
  step bf16-attention 60 "$BIN" run specs/gpu/ --backend cuda --baselines "$WORK/b" --runs-dir "$WORK/bf16"
  # Its peers on the same GPU: PyTorch's bf16 matmul (the matmul roof beside the mma.sync probe)
  # and scaled-dot-product attention on the flash spec's shape, timed by opledger's rule.
  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    step bf16-peers 60 python3 scripts/gpu-peers.py "$KEEP/peers.json"
  else
    echo "bf16-peers: not run (python3 lacks torch with CUDA)" >> "$STEPS"
  fi
  # The C kit's CUDA path (include/opledger_worker.h under nvcc, for sm_90: with no -arch nvcc
  # embeds sm_75 code and the driver JIT-compiles it), else the one carried in .gpu/.
  CUDA_WORKER=examples/c/bias_gelu_worker_cuda
  if command -v nvcc >/dev/null 2>&1; then
    step cuda-worker-build 60 nvcc -O2 -std=c++11 -arch=sm_90 -Iinclude examples/c/bias_gelu_worker.cu -o "$CUDA_WORKER"
  elif [ -x .gpu/bias_gelu_worker_cuda ]; then
    cp .gpu/bias_gelu_worker_cuda "$CUDA_WORKER"
  fi
  if [ -x "$CUDA_WORKER" ]; then
    step cuda-worker-test 40 "$BIN" worker-test examples/c/bias-gelu-cuda.yaml
    step cuda-worker-run 60 "$BIN" run examples/c/bias-gelu-cuda.yaml --backend cuda \
      --baselines "$WORK/b" --runs-dir "$WORK/cworker"
  else
    echo "cuda worker: not run (no nvcc there, none carried in .gpu/)" >> "$STEPS"
  fi
  # Users' kernels through workers (examples/): PyTorch eager against torch.compile, and a
  # Triton kernel, judged on the GPU's ceilings.
  if python3 -c "import torch, triton, numpy" >/dev/null 2>&1; then
    step workers 150 "$BIN" run examples/torch/ examples/triton/ --backend cuda \
      --baselines "$WORK/b" --runs-dir "$WORK/workers"
  else
    echo "workers: not run (python3 lacks torch, triton or numpy)" >> "$STEPS"
  fi
fi

save
cat "$OUT/summary.txt"
