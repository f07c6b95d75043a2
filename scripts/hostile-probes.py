#!/usr/bin/env python3
"""Hostile-input probes (tampered archives, workers that do not end, ledgers, counters, cuda: sides,
report strings) run against one opledger binary: one line per probe, to set one build beside
another. Usage: python3 scripts/hostile-probes.py target/release/opledger"""
import hashlib, json, os, shutil, subprocess, sys, tempfile, time

B = os.path.abspath(sys.argv[1])
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
QUICK = ["--backend", "cpu", "--probe-mib", "8", "--flush-mib", "8", "--min-pairs", "3",
         "--max-pairs", "5", "--time-cap-secs", "2"]
root = tempfile.mkdtemp(prefix="probes-")
os.chdir(root)


def sh(args, cwd=None, env=None, timeout=120):
    t = time.time()
    try:
        p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.time() - t
    except subprocess.TimeoutExpired:
        return "timeout", "", time.time() - t


def first_line(text, *keys):
    for l in text.splitlines():
        if any(k in l for k in keys):
            return l.strip()[:220]
    lines = [l for l in text.splitlines() if l.strip()]
    return (lines[-1] if lines else "").strip()[:220]


def reseal(d):
    m = os.path.join(d, "manifest.json")
    if not os.path.exists(m):
        return
    man = json.load(open(m))
    files = {}
    for base, _, names in os.walk(d):
        for n in names:
            p = os.path.join(base, n)
            rel = os.path.relpath(p, d)
            if rel == "manifest.json":
                continue
            data = open(p, "rb").read()
            files[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    man["files"] = files
    json.dump(man, open(m, "w"), indent=2)


def make_run(name, spec=FIX + "/good/tiny-chain.yaml"):
    d = os.path.join(root, name)
    os.makedirs(d)
    sh([B, "run", spec, *QUICK], cwd=d)
    return run_dirs(os.path.join(d, "runs"))[-1]


def run_dirs(runs):
    """The run folders of a runs folder, oldest first (the history store beside them is not one)."""
    return sorted(os.path.join(runs, n) for n in os.listdir(runs)
                  if os.path.isdir(os.path.join(runs, n)))


def edit(run, f):
    p = os.path.join(run, "results.json")
    r = json.load(open(p))
    f(r)
    json.dump(r, open(p, "w"), indent=1)
    reseal(run)


def report(n, text):
    print(f"{n:>3}: {text}", flush=True)


base = make_run("base")

# 1. merge with a device key that leaves --out.
s1 = shutil.copytree(base, root + "/p1/s1")
s2 = shutil.copytree(make_run("base-sweep", FIX + "/good/tiny-sweep.yaml"), root + "/p1/s2")
edit(s2, lambda r: r["device"].__setitem__("key", "../../vdir"))
os.makedirs(root + "/p1/mout")
code, out, _ = sh([B, "merge", s1, s2, "--out", root + "/p1/mout/dev2"])
report(1, f"exit {code}; vdir written: {os.path.exists(root + '/p1/vdir')}; {first_line(out, 'error')}")

# 2. accept with a device key / spec name that leaves the store.
r2 = shutil.copytree(base, root + "/p2/store/runs/r")
edit(r2, lambda r: r["device"].__setitem__("key", "../acc-escape"))
code, out, _ = sh([B, "accept", r2, "--baselines", root + "/p2/store/b"])
report("2a", f"exit {code}; acc-escape written: {os.path.exists(root + '/p2/store/acc-escape')}; {first_line(out, 'error')}")
r2b = shutil.copytree(base, root + "/p2b/a/b/c/r")
edit(r2b, lambda r: r["specs"][0].__setitem__("name", "../../../name-escape"))
code, out, _ = sh([B, "accept", r2b, "--baselines", root + "/p2b/a/b/c/store"])
hits = [os.path.join(b, f) for b, _, fs in os.walk(root + "/p2b") for f in fs if f == "name-escape.json"]
report("2b", f"exit {code}; name-escape.json written: {hits}; {first_line(out, 'error')}")

# 3. accept of a failed run with its statuses edited to pass.
spec3 = root + "/claims.yaml"
open(spec3, "w").write(open(FIX + "/good/tiny-chain.yaml").read().replace(
    "name: tiny-chain", "name: claims-too-much").replace(
    "io_saving: {min: 0.5}", "io_saving: {min: 0.5}\n  time_saving: {min: 0.995}"))
r3 = make_run("p3", spec3)
def pass_it(r):
    r["specs"][0]["status"] = "pass"
    r["verdict"].update(status="PASS", specs_passed=1, specs_failed=0, checks_failed=0)
edit(r3, pass_it)
code, out, _ = sh([B, "accept", r3, "--baselines", root + "/p3/b"])
recorded = [f for _, _, fs in os.walk(root + "/p3/b") for f in fs if f.endswith(".json")]
report(3, f"exit {code}; baselines recorded: {recorded}; {first_line(out, 'error', 'accepted')}")

# 4. tamper evidence: report.md edited.
r4 = shutil.copytree(base, root + "/p4/r")
open(r4 + "/report.md", "a").write("all green\n")
code, out, _ = sh([B, "report", r4])
vcode, vout, _ = sh([B, "verify", r4])
report(4, f"report exit {code}; verify exit {vcode}: {first_line(vout, 'edited', 'error', 'unrecognized')}")

# 5. merge --out into an input.
s51 = shutil.copytree(base, root + "/p5/s1")
s52 = make_run("p5b", FIX + "/good/tiny-sweep.yaml")
before = open(s52 + "/results.json", "rb").read()
code, out, _ = sh([B, "merge", s51, s52, "--out", s52])
report(5, f"exit {code}; input overwritten: {open(s52 + '/results.json','rb').read() != before}; {first_line(out, 'error')}")

# 6-9. workers.
def worker_dir(n, mode, timeout=2):
    d = root + f"/p{n}"
    os.makedirs(d)
    shutil.copy(FIX + "/workers/fake_worker.py", d)
    open(d + "/good.yaml", "w").write(
        f"name: worker-{n}\ntitle: t\nworkload: {{kind: elementwise, ops: [relu], rows: 8, cols: 16}}\n"
        f"variants:\n  before: unfused\n  after: {{implements: fused, command: [python3, fake_worker.py, {mode}], function: relu, timeout_secs: {timeout}}}\n"
        "expect: {bound: bandwidth}\n")
    return d

def descendant_survived(d):
    """Whether the process the worker left (its pid in descendant.pid) still runs; ends it if so."""
    pid = int(open(d + "/descendant.pid").read())
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state in "ZX":
        return False
    os.kill(pid, 9)
    return True


d6 = worker_dir(6, "ok")
code, out, _ = sh([B, "run", "good.yaml", *QUICK], cwd=d6)
report(6, f"exit {code}; {first_line(out, 'cannot start', 'PASS', 'FAIL')}")

d7 = worker_dir(7, "fork-and-exit", timeout=3)
code, out, secs = sh([B, "run", "./good.yaml", *QUICK], cwd=d7)
alive = descendant_survived(d7)
report(7, f"exit {code} after {secs:.1f} s; child alive after: {alive}; {first_line(out, 'worker `')}")

d8 = worker_dir(8, "setsid-escape")
code, out, _ = sh([B, "run", "./good.yaml", *QUICK], cwd=d8)
time.sleep(0.5)
report(8, f"exit {code}; setsid grandchild alive after opledger exited: {descendant_survived(d8)}")

d9 = worker_dir(9, "flood")
tmp9 = d9 + "/tmp"
os.makedirs(tmp9)
env = dict(os.environ, TMPDIR=tmp9, FLOOD_MIB="600")
p = subprocess.Popen([B, "run", "./good.yaml", *QUICK], cwd=d9, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
largest = 0
while p.poll() is None:
    for b, _, fs in os.walk(tmp9):
        for f in fs:
            try:
                largest = max(largest, os.path.getsize(os.path.join(b, f)))
            except OSError:
                pass
    time.sleep(0.02)
out = (p.stdout.read() + p.stderr.read()).decode(errors="replace")
report(9, f"exit {p.returncode}; largest temporary file {largest/1e6:.1f} MB; last line quoted: {'flood: the last line' in out}")

# 10. custom ledger overflow.
for count in ["1125899906842624", "9223372036854775807"]:
    d = root + f"/p10-{count[:4]}"
    os.makedirs(d)
    open(d + "/c.yaml", "w").write(
        "name: c\ntitle: t\nworkload:\n  kind: custom\n  sizes: {n: 4096}\n  tensors: {a: {shape: [n]}, y: {shape: [n]}}\n"
        f"  inputs: [a]\n  output: y\n  ledger:\n    unfused:\n      reads:\n        a: {count}\n      writes: {{y: 1}}\n      flops: n\n"
        "    fused: {reads: {a: 1}, writes: {y: 1}, flops: n}\nvariants:\n  before: {implements: unfused, command: [python3, w.py]}\n"
        "  after: {implements: fused, command: [python3, w.py]}\nexpect: {bound: bandwidth}\n")
    code, out, _ = sh([B, "check", d + "/c.yaml"])
    lcode, lout, _ = sh([B, "ledger", d + "/c.yaml"])
    report(f"10 {count}", f"check exit {code} ({first_line(out, 'error:', 'ok')}); ledger exit {lcode}: {first_line(lout, 'unfused ', 'error:')} / {first_line(lout, 'saving', 'error:')}")

# 11. counters: a 136 MB export under ulimit -v 1500000; bad rows.
csv = root + "/big.csv"
with open(csv, "w") as f:
    f.write('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","lts__t_bytes.sum"\n')
    f.write('"","","","","","","","","","","","byte","byte","nsecond","byte"\n')
    i = 0
    for marker in (1, 2):
        f.write(f'"{i}","1","opledger","h","opledger_marker","1","7","(1, 1, 1)","({marker}, 1, 1)","0","9.0","0","0","1","0"\n'); i += 1
        row = '"1","opledger","gpu-node","ew_chain","1","7","(256, 1, 1)","(270, 1, 1)","0","9.0","1,915.00","1,000.00","3,104","2,000.00"\n'
        for _ in range(650_000):
            f.write(f'"{i}",{row}'); i += 1
size = os.path.getsize(csv)
r11 = shutil.copytree(base, root + "/p11/r")
code, out, _ = sh(["bash", "-c", f'ulimit -v 1500000; /usr/bin/time -f "maxrss_kb=%M" "{B}" counters "{r11}" "{csv}"'], timeout=300)
rss = first_line(out, "maxrss_kb")
report(11, f"{size/1e6:.0f} MB, 1.3 M rows, ulimit -v 1500000: exit {code}; {rss}; {first_line(out, 'error', 'FINDING', 'ok ')}")
for bad, how in [("negative", lambda l: l.replace('"1,915.00"', '"-1,915.00"')),
                 ("open quote", lambda l: l.replace('"ew_chain","1"', '"ew_chain,"1"')),
                 ("no DRAM read column", None)]:
    text = open(FIX + "/ncu/raw.csv").read()
    lines = text.split("\n")
    if how:
        lines[6] = how(lines[6]).replace('"280.40"', '"-280.40"') if bad == "negative" else how(lines[6])
    else:
        lines[2] = lines[2].replace("dram__bytes_read.sum", "dram__sectors_read.sum")
    p = root + f"/bad-{bad.replace(' ', '-')}.csv"
    open(p, "w").write("\n".join(lines))
    rr = shutil.copytree(base, root + f"/p11-{bad.replace(' ', '-')}")
    code, out, _ = sh([B, "counters", rr, p])
    report(f"11 {bad}", f"exit {code}; {first_line(out, 'error', 'FINDING', 'ok ')}")

# 12-14. cuda: sides.
KERNEL = 'extern "C" __global__ void bias_gelu_fused(float* y, const float* x, const float* bias, int rows, int cols) {}\n'
def cuda_check(n, cuda, extra_workload="", extra=()):
    d = root + f"/p{n}"
    os.makedirs(d, exist_ok=True)
    open(d + "/k.cu", "w").write(KERNEL)
    open(d + "/s.yaml", "w").write(
        f"name: k\ntitle: t\nworkload: {{kind: elementwise, ops: [bias_add, gelu], rows: 64, cols: 64{extra_workload}}}\n"
        "variants:\n  before: unfused\n  after:\n    implements: fused\n    cuda:\n      source: k.cu\n      entry: bias_gelu_fused\n"
        f"{cuda}expect: {{bound: bandwidth}}\n")
    code, out, _ = sh([B, "check", "s.yaml", *extra], cwd=d)
    return code, first_line(out, "error:", "ok")
args = "      args: [y, x, bias, rows, cols]\n"
for label, cuda in [("block [4096]", "      block: [4096]\n      grid: [16]\n" + args),
                    ("block [1024,1024,64]", "      block: [1024, 1024, 64]\n      grid: [16]\n" + args),
                    ("grid y 70000", "      block: [256]\n      grid: [16, 70000]\n" + args),
                    ("smem 1 GB", "      block: [256]\n      grid: [16]\n" + args + "      smem_bytes: 1073741824\n")]:
    code, line = cuda_check("12-" + label.split()[0] + label.split()[1][:4], cuda)
    report(f"12 {label}", f"exit {code}; {line}")
code, line = cuda_check(13, "      block: [256]\n      grid: [16]\n      args: [y, x, bias, rows, scale]\n", ", scale: 0.5")
report(13, f"exit {code}; {line}")
code, line = cuda_check("14a", "      block: [256]\n      grid: [16, nosuch]\n" + args)
report("14 unknown name", f"exit {code}; {line}")
code, line = cuda_check("14b", "      block: [256]\n      grid: [\"nofn(rows)\"]\n" + args)
report("14 unknown fn", f"exit {code}; {line}")
code, line = cuda_check("14c", "      block: [256]\n      grid: [16]\n" + args, extra=("--backend", "cpu"))
report("14 --backend cpu", f"exit {code}; {line}")

# 15. bidi controls in a title.
d15 = root + "/p15"
os.makedirs(d15)
open(d15 + "/s.yaml", "w").write(open(FIX + "/good/tiny-chain.yaml").read().replace(
    "title: Tiny fused chain for tests", 'title: "Tiny \\u202Eevil\\u2066 chain\\u2069"'))
sh([B, "run", "s.yaml", *QUICK], cwd=d15)
rep = open(os.path.join(run_dirs(d15 + "/runs")[0], "report.md"), encoding="utf-8").read()
report(15, f"raw U+202E in report.md: {chr(0x202E) in rep}; shown as [U+202E]: {'[U+202E]' in rep}")
shutil.rmtree(root, ignore_errors=True)
