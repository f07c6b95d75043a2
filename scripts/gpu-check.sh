#!/usr/bin/env bash
# The GPU check: run opledger's CUDA backend on a GPU machine, in one call.
#
# Here (no GPU needed):   cargo build --release && mkdir -p .gpu && cp target/release/opledger .gpu/
#                         (`.gpu/` is git-ignored; carry it with the call)
#   and, with nvcc here:  nvcc -O2 -std=c++11 -Iinclude examples/c/bias_gelu_worker.cu \
#                           -o .gpu/bias_gelu_worker_cuda   (the C kit's CUDA worker; nvcc there
#                         is used instead when the machine has one)
# There (device tool):    run(command="bash scripts/gpu-check.sh", carry=[".gpu"], timeout_s=540)
#
# Every step has a time limit, so that a kernel that hangs ends its step, not the check; without
# Nsight Compute and PyTorch the limits add up to 7.5 minutes. Builds nothing but the C kit's
# CUDA worker (when nvcc is there). Records the GPU as found (clocks are never changed),
# compiles every kernel for the device with NVRTC, runs the tiny test specs (correctness of every kind against the
# f64 reference), then the default suite, then the bf16 tensor-core attention specs in specs/gpu/,
# on --backend cuda; with Nsight Compute present, the tiny specs and flash attention at N = 32768
# under `run --ncu` (their exports kept), and a fusion chain counted twice in counts mode. Everything lands in $OUT (log, steps, results, reports,
# the roofline, the ncu exports); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-check-out}"
mkdir -p "$OUT"
BIN="${BIN:-.gpu/opledger}"
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }

[ -x "$BIN" ] || { say "no binary at $BIN: build here and carry .gpu/"; exit 2; }

# NVRTC: the toolkit's, or PyTorch's wheel's; cudarc loads libnvrtc.so by name.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt /root -name 'libnvrtc.so*' 2>/dev/null | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
fi

ENV_TXT=$(mktemp)
{
  echo "# GPU as found"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldconfig -p 2>/dev/null | grep -E 'libnvrtc|libcuda\.so' || true
} > "$ENV_TXT" 2>&1
cat "$ENV_TXT" >> "$LOG"
rm -f "$ENV_TXT"

step() { # name, a time limit in seconds, then the command; records the exit code
  # (124: the limit was hit — a kernel that hangs on the hardware must not eat the whole loan)
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  printf '%-28s exit %-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT/steps.txt"
  return $rc
}
: > "$OUT/steps.txt"

step cuda-compile 30 "$BIN" cuda-compile --arch 90
WORK=$(mktemp -d)
# Tiny specs: every kind the CUDA backend runs (bf16 attention too; not the CPU-only probe
# kind), small sizes; correctness against the f64 reference on the GPU.
KINDS=$(ls tests/fixtures/kinds/*.yaml | grep -v probe)
# shellcheck disable=SC2086
step tiny-kinds 60 "$BIN" run $KINDS tests/fixtures/good/tiny-chain.yaml \
  tests/fixtures/cudasim/ \
  --backend cuda --min-pairs 5 --max-pairs 20 --time-cap-secs 2 \
  --baselines "$WORK/b" --runs-dir "$WORK/tiny"
tiny=$(ls -d "$WORK"/tiny/* 2>/dev/null | head -1)
[ -n "$tiny" ] && cp "$tiny/results.json" "$OUT/tiny-results.json" && cp "$tiny/report.md" "$OUT/tiny-report.md"
# Hardware counters (Nsight Compute, where the machine has it): the tiny specs' marked pass and
# flash attention at N = 32768 under `ncu`, reconciled with the ledger; the exports come back
# (the first real ones, to replace the documented-format fixtures in tests/fixtures/ncu/).
if command -v ncu >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  step ncu-tiny 120 "$BIN" run $KINDS tests/fixtures/good/tiny-chain.yaml --backend cuda --ncu \
    --min-pairs 3 --max-pairs 5 --time-cap-secs 2 --baselines "$WORK/b" --runs-dir "$WORK/ncu-tiny"
  d=$(ls -d "$WORK"/ncu-tiny/* 2>/dev/null | head -1)
  [ -n "$d" ] && cp "$d/ncu.csv" "$OUT/ncu-tiny.csv" 2>/dev/null && cp "$d/results.json" "$OUT/ncu-tiny-results.json"
  step ncu-flash-32k 150 "$BIN" run specs/counters/ --backend cuda --ncu \
    --baselines "$WORK/b" --runs-dir "$WORK/ncu-flash"
  d=$(ls -d "$WORK"/ncu-flash/* 2>/dev/null | head -1)
  [ -n "$d" ] && cp "$d/ncu.csv" "$OUT/ncu-flash-32k.csv" 2>/dev/null && cp "$d/results.json" "$OUT/ncu-flash-results.json"
  # Counts mode on the GPU: the fusion chain counted twice (accepted, then gated), so that how
  # far the hardware's counts repeat between runs comes back in the two results.
  for k in 1 2; do
    accept=""; [ "$k" = 1 ] && accept="--accept"
    step counts-chain-$k 120 "$BIN" run specs/fuse-scale-add-relu-mul.yaml --backend cuda \
      --measure counts $accept --no-store --baselines "$WORK/b" --runs-dir "$WORK/counts-$k"
    d=$(ls -d "$WORK"/counts-$k/* 2>/dev/null | head -1)
    [ -n "$d" ] && cp "$d/results.json" "$OUT/counts-chain-$k-results.json"
  done
else
  echo "ncu: skipped (Nsight Compute not on PATH)" >> "$OUT/steps.txt"
fi
# QUICK=1 stops here (a dry run of this script on tests/cudasim, the CPU stand-in for the driver:
# LD_LIBRARY_PATH=<folder of its libcuda.so>:<NVRTC lib> QUICK=1 BIN=target/release/opledger).
if [ "${QUICK:-0}" != 1 ]; then
# The default suite on the GPU (first GPU baselines are recorded in the run's own store).
step suite 120 "$BIN" run specs/ --backend cuda --baselines "$WORK/b" --runs-dir "$WORK/suite" --accept
suite=$(ls -d "$WORK"/suite/* 2>/dev/null | head -1)
if [ -n "$suite" ]; then
  cp "$suite/results.json" "$OUT/suite-results.json"
  cp "$suite/report.md" "$OUT/suite-report.md"
  cp "$suite/roofline.svg" "$OUT/roofline.svg" 2>/dev/null
fi

# bf16 attention on tensor cores (specs/gpu/: a ragged causal correctness case and the
# d = 128, N = 8192 size of the 300 TFLOP/s target).
step bf16-attention 90 "$BIN" run specs/gpu/ --backend cuda --baselines "$WORK/b" --runs-dir "$WORK/bf16"
bf16=$(ls -d "$WORK"/bf16/* 2>/dev/null | head -1)
[ -n "$bf16" ] && cp "$bf16/results.json" "$OUT/bf16-results.json"

# The C kit's CUDA path (include/opledger_worker.h under nvcc): the example worker, built there
# when nvcc is on PATH, else the one carried in .gpu/; its conformance check, then its spec.
CUDA_WORKER=examples/c/bias_gelu_worker_cuda
if command -v nvcc >/dev/null 2>&1; then
  step cuda-worker-build 90 nvcc -O2 -std=c++11 -Iinclude examples/c/bias_gelu_worker.cu -o "$CUDA_WORKER"
elif [ -x .gpu/bias_gelu_worker_cuda ]; then
  cp .gpu/bias_gelu_worker_cuda "$CUDA_WORKER"
fi
if [ -x "$CUDA_WORKER" ]; then
  step cuda-worker-test 60 "$BIN" worker-test examples/c/bias-gelu-cuda.yaml
  step cuda-worker-run 90 "$BIN" run examples/c/bias-gelu-cuda.yaml --backend cuda \
    --baselines "$WORK/b" --runs-dir "$WORK/cworker"
  d=$(ls -d "$WORK"/cworker/* 2>/dev/null | head -1)
  [ -n "$d" ] && cp "$d/results.json" "$OUT/cuda-worker-results.json"
else
  echo "cuda worker: skipped (no nvcc there, none carried in .gpu/)" >> "$OUT/steps.txt"
fi

# Users' kernels through workers (examples/): PyTorch eager against torch.compile, and a Triton
# kernel, judged on the GPU's ceilings.
if python3 -c "import torch, triton, numpy" >/dev/null 2>&1; then
  step workers 300 "$BIN" run examples/torch/ examples/triton/ --backend cuda \
    --baselines "$WORK/b" --runs-dir "$WORK/workers"
  workers=$(ls -d "$WORK"/workers/* 2>/dev/null | head -1)
  [ -n "$workers" ] && cp "$workers/results.json" "$OUT/workers-results.json"
else
  echo "workers: skipped (python3 lacks torch, triton or numpy)" >> "$OUT/steps.txt"
fi
fi

cat "$OUT/steps.txt"
for f in "$OUT/tiny-results.json" "$OUT/suite-results.json" "$OUT/bf16-results.json" "$OUT/cuda-worker-results.json" "$OUT/workers-results.json" "$OUT/ncu-flash-results.json"; do
  [ -f "$f" ] || continue
  python3 - "$f" <<'PY'
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
rm -rf "$WORK"
