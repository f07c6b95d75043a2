#!/usr/bin/env python3
"""How far each counts metric moves when what opledger holds fixed is changed on purpose.

For each spec file given (a spec without a sweep), each side is counted the way `opledger
counts` counts it (the same Valgrind arguments, the same `count-side` process, a cleared
environment, a work folder under /tmp), then again with one thing changed at a time:

  aslr-off   address-space randomisation off (`setarch -R`)
  env+50k    a 50 KB variable added to the counted process's environment
  deep-dir   the work folder nested 12 levels deeper (longer paths)
  jemalloc   another allocator (LD_PRELOAD of libjemalloc.so.2, where installed)
  tunables   glibc's malloc tunables changed (mmap threshold 128 KiB, no arena trimming)

and prints, per metric (instructions, DRAM bytes read + written, estimated cycles), the
largest relative change from the plain counting over every side of every spec.

Usage: scripts/counts-robustness.py OPLEDGER_BINARY SPEC.yaml... [--ll BYTES,WAYS,LINE]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def totals(path):
    names = values = None
    for line in open(path):
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("totals:") or (line.startswith("summary:") and values is None):
            values = [int(v) for v in line.split()[1:]]
    ev = dict.fromkeys(names, 0)
    ev.update(zip(names, values))
    return ev


def metrics(call, flush, line_bytes):
    e = call.get
    l1 = e("I1mr") + e("D1mr") + e("D1mw")
    ll = e("ILmr") + e("DLmr") + e("DLmw")
    acc = e("Ir") + e("Dr") + e("Dw")
    dirty = lambda ev: ev.get("ILdmr", 0) + ev.get("DLdmr", 0) + ev.get("DLdmw", 0)
    return {
        "instructions": e("Ir"),
        "dram_bytes": (e("ILmr") + e("DLmr") + dirty(call) + dirty(flush)) * line_bytes,
        "cycles": (acc - l1) + 5 * (l1 - ll) + 35 * ll,
    }


def count(exe, spec_text, name, side, ll, variation):
    ll_bytes, _, line = (int(x) for x in ll.split(","))
    base = tempfile.mkdtemp(prefix="opledger-counts-", dir="/tmp")
    work = base
    if variation == "deep-dir":
        work = os.path.join(base, *["nested-folder"] * 12)
        os.makedirs(work)
    try:
        os.symlink(exe, os.path.join(work, "opledger"))
        open(os.path.join(work, "spec.yaml"), "w").write(spec_text)
        out = os.path.join(work, "callgrind.out")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "OPLEDGER_SIMD": "avx2", "RAYON_NUM_THREADS": "1"}
        if variation == "env+50k":
            env["PADDING"] = "x" * 50_000
        if variation == "jemalloc":
            env["LD_PRELOAD"] = JEMALLOC
        if variation == "tunables":
            env["GLIBC_TUNABLES"] = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=0"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes",
               "--simulate-wb=yes", "--I1=32768,8,64", "--D1=32768,8,64", f"--LL={ll}",
               "--dump-instr=no", "--dump-line=no", "--compress-strings=no", "--compress-pos=no",
               f"--callgrind-out-file={out}", "--quiet",
               os.path.join(work, "opledger"), "count-side", "spec.yaml", name, side, "2021",
               str(ll_bytes)]
        if variation == "aslr-off":
            cmd = ["setarch", "x86_64", "-R"] + cmd
        subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)
        return metrics(totals(out + ".1"), totals(out + ".2"), line)
    finally:
        shutil.rmtree(base)


def main():
    args = sys.argv[1:]
    ll = "8388608,16,64"
    if "--ll" in args:
        i = args.index("--ll")
        ll = args[i + 1]
        del args[i:i + 2]
    exe, specs = os.path.realpath(args[0]), args[1:]
    variations = ["aslr-off", "env+50k", "deep-dir", "tunables"]
    if os.path.exists(JEMALLOC):
        variations.append("jemalloc")
    worst = {v: {m: 0.0 for m in ("instructions", "dram_bytes", "cycles")} for v in variations}
    for spec in specs:
        text = open(spec).read()
        name = re.search(r"^name:\s*(\S+)", text, re.M).group(1)
        for side in ("before", "after"):
            plain = count(exe, text, name, side, ll, "plain")
            again = count(exe, text, name, side, ll, "plain")
            assert plain == again, f"{name} {side}: two plain countings differ: {plain} {again}"
            row = [f"{name} {side}"]
            for v in variations:
                m = count(exe, text, name, side, ll, v)
                for k in m:
                    d = abs(m[k] / plain[k] - 1) if plain[k] else 0.0
                    worst[v][k] = max(worst[v][k], d)
                row.append(" ".join(f"{k}={m[k] / plain[k] - 1:+.5%}" for k in m))
            print(" | ".join(row), flush=True)
    print("\nlargest change from the plain counting, every side of every spec:")
    print("| changed | instructions | DRAM bytes | estimated cycles |\n|---|--:|--:|--:|")
    for v in variations:
        w = worst[v]
        print(f"| {v} | {w['instructions']:.4%} | {w['dram_bytes']:.4%} | {w['cycles']:.4%} |")


if __name__ == "__main__":
    main()
