#!/usr/bin/env python3
"""Between-run drift of a spec's medians: what the gate's spread-implied threshold follows.

    python3 scripts/drift.py SPEC [RUNS=10] [PAIRS=60] [CAP_SECS=3] [BIN=target/release/opledger]

Runs `opledger run SPEC` RUNS times (scratch run and baseline folders, CPU backend, 64 MiB
probe and flush) and prints, per run, the median after/before ratio of the interleaved pairs and
both medians, then the log standard deviation (in %) of each across runs. A compared value
whose sd is above ~2.5% cannot give both <= 1% false alarms and >= 95% detection of a 10%
slowdown (see docs/gate-reliability.md).
"""
import json
import math
import os
import statistics as st
import subprocess
import sys
import tempfile

if len(sys.argv) < 2:
    sys.exit(__doc__)
spec = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
pairs = sys.argv[3] if len(sys.argv) > 3 else "60"
cap = sys.argv[4] if len(sys.argv) > 4 else "3"
binary = sys.argv[5] if len(sys.argv) > 5 else "target/release/opledger"
rel, aft, bef = [], [], []
for i in range(runs):
    with tempfile.TemporaryDirectory() as d:
        cmd = [binary, "run", spec, "--backend", "cpu", "--probe-mib", "64", "--flush-mib", "64",
               "--max-pairs", pairs, "--time-cap-secs", cap, "--runs-dir", os.path.join(d, "runs"),
               "--baselines", os.path.join(d, "baselines")]
        subprocess.run(cmd, capture_output=True, check=False)
        runs_dir = os.path.join(d, "runs")
        # The run's folder, not the history store beside it.
        found = sorted(n for n in os.listdir(runs_dir)
                       if os.path.isdir(os.path.join(runs_dir, n))) if os.path.isdir(runs_dir) else []
        if not found:
            sys.exit(f"run {i}: no run directory (is {binary} built? try the command by hand: {' '.join(cmd)})")
        run = os.path.join(runs_dir, found[0])
        r = json.load(open(os.path.join(run, "results.json")))
    s = r["specs"][0].get("samples")
    if not s:
        sys.exit(f"run {i}: the spec has no samples ({r['specs'][0].get('error')})")
    b, a = s["before_secs"], s["after_secs"]
    rel.append(st.median(x / y for x, y in zip(a, b)))
    aft.append(st.median(a))
    bef.append(st.median(b))
    print(f"run {i}: {len(a)} pairs, after/before {rel[-1]:.4f}, after {aft[-1] * 1e3:.3f} ms, "
          f"before {bef[-1] * 1e3:.3f} ms", flush=True)


def sd(v):
    return 100 * st.stdev(math.log(x) for x in v) if len(v) > 1 else float("nan")


print(f"log-sd between runs: after/before {sd(rel):.2f}%, after {sd(aft):.2f}%, before {sd(bef):.2f}%")
