#!/usr/bin/env python3
"""Verdict probes (run against compare on the same evidence, a slower fusion, a located
correctness failure, calibrate archives, a claim across its bound, the PR comment, the report's
baseline table) run against one opledger binary, one line each, to set one build beside another.
Usage: python3 scripts/verdict-probes.py target/release/opledger"""
import json, os, shutil, subprocess, sys, tempfile

B = os.path.abspath(sys.argv[1])
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
Q = ["--backend", "cpu", "--probe-mib", "8", "--flush-mib", "8", "--min-pairs", "3",
     "--max-pairs", "5", "--time-cap-secs", "2"]
root = tempfile.mkdtemp(prefix="p25-")
os.chdir(root)


def sh(args, cwd=root, env=None):
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def runs(d):
    """The run folders under d/runs, oldest first: not calibrations' nor the history store."""
    return [r for r in run_folders(d) if "-calibrate-" not in os.path.basename(r)]


def run_folders(d):
    r = os.path.join(d, "runs")
    return sorted(os.path.join(r, n) for n in os.listdir(r) if os.path.isdir(os.path.join(r, n)))


def line(text, key):
    for l in text.splitlines():
        if key in l:
            return l.strip()[:400]
    return "(none)"


def rep(n, t):
    print(f"{n:>3}: {t}", flush=True)


# 1. run vs compare on the same evidence (history of 5, A accepted for run; B slowed 30%).
d = root + "/p1"
os.makedirs(d)
spec = FIX + "/good/tiny-chain.yaml"
sh([B, "calibrate", spec, "--runs", "5", "--accept", *Q], cwd=d)
sh([B, "run", spec, *Q, "--baselines", "none"], cwd=d)
A = runs(d)[-1]
shutil.copytree(d + "/baselines", d + "/without")
sh([B, "accept", A], cwd=d)
env = dict(os.environ, OPLEDGER_EXPERIMENT_SLOWDOWN="0.3")
code, out = sh([B, "run", spec, *Q], cwd=d, env=env)
rep("1 run", f"exit {code}: {line(out, 'tiny-chain  ')}")
Bd = runs(d)[-1]
code, out = sh([B, "compare", A, Bd, "--baselines", d + "/without"], cwd=d)
if "unexpected argument" in out:
    code, out = sh([B, "compare", A, Bd], cwd=d)
rep("1 compare", f"exit {code}: {line(out, '| tiny-chain |')}")

# 4. a slower 'fusion' with no time claim: the checklist mark.
d = root + "/p4"
os.makedirs(d)
shutil.copy(FIX + "/workers/fake_worker.py", d)
open(d + "/slower.yaml", "w").write(
    "name: slower\ntitle: a slower fusion\nchecklist: [fusion]\nworkload: {kind: elementwise, ops: [relu], rows: 8, cols: 16}\n"
    "variants:\n  before: unfused\n  after: {implements: fused, command: [python3, fake_worker.py, ok], function: relu}\n"
    "expect: {bound: bandwidth}\n")
code, out = sh([B, "run", "./slower.yaml", *Q], cwd=d)
r = json.load(open(runs(d)[-1] + "/results.json"))
mark = [c["mark"] for c in r["checklist"] if c["key"] == "fusion"]
rep(4, f"exit {code}; fusion item {mark}; {line(out, 'slower ')}")

# 5. a correctness failure in one column.
d = root + "/p5"
os.makedirs(d)
shutil.copy(FIX + "/workers/fake_worker.py", d)
open(d + "/col.yaml", "w").write(
    "name: col\ntitle: t\nworkload: {kind: elementwise, ops: [relu], rows: 8, cols: 16}\n"
    "variants:\n  before: unfused\n  after: {implements: fused, command: [python3, fake_worker.py, bad-column], function: relu}\n"
    "expect: {bound: bandwidth}\n")
code, out = sh([B, "run", "./col.yaml", *Q], cwd=d)
r = json.load(open(runs(d)[-1] + "/results.json"))
det = [c["detail"] for c in r["specs"][0]["checks"] if c["name"] == "correctness"][0]
rep(5, f"exit {code}; {det[:300]}")

# 6. calibrate: archives written.
d = root + "/p6"
os.makedirs(d)
code, out = sh([B, "calibrate", spec, "--runs", "3", *Q], cwd=d)
n = len(run_folders(d)) if os.path.isdir(d + "/runs") else 0
rep(6, f"exit {code}; run folders written: {n}")

# 7. a claim whose CI straddles its bound: claim the point a run measured.
d = root + "/p7"
os.makedirs(d)
sh([B, "run", spec, *Q], cwd=d)
pt = json.load(open(runs(d)[-1] + "/results.json"))["specs"][0]["time_saving"]["point"]
open(d + "/claim.yaml", "w").write(open(spec).read().replace("name: tiny-chain", "name: claim").replace(
    "io_saving: {min: 0.5}", f"io_saving: {{min: 0.5}}\n  time_saving: {{min: {pt:.4f}}}"))
outs = []
for _ in range(4):
    code, out = sh([B, "run", "claim.yaml", *Q], cwd=d)
    r = json.load(open(runs(d)[-1] + "/results.json"))
    ts = r["specs"][0]["time_saving"]
    st = [c["status"] for c in r["specs"][0]["checks"] if c["name"] == "time_saving"][0]
    outs.append(f"[{ts['lo']*100:.1f}, {ts['hi']*100:.1f}] vs >= {pt*100:.2f}: {st} (exit {code})")
rep(7, "; ".join(outs))

# 8/9. PR comment and the report's baseline paragraph.
d1 = root + "/p1"
code, out = sh([B, "compare", A, Bd, "--markdown", d1 + "/pr.md"], cwd=d1)
c = open(d1 + "/pr.md").read()
rep(8, " | ".join(l for l in c.splitlines()[1:4] if l.strip())[:400] + " … " + [l for l in c.splitlines() if "report" in l.lower()][-1][:200])
report = open(Bd + "/report.md").read()
para = [l for l in report.splitlines() if l.startswith("**Baseline")]
longest = max(len(l) for l in report.splitlines())
rep(9, f"baseline heading: {para[0][:80] if para else '-'}; longest report line {longest} chars")
shutil.rmtree(root, ignore_errors=True)
