#!/usr/bin/env python3
"""opledger's CPU kernels side by side with NumPy (and the BLAS under it), in one run.

For each SIMD level asked for (OPLEDGER_SIMD=avx2 and the native level), runs the release
binary on the benchmark workloads -- GEMM 1024^3 f32 tiled, attention N=4096 d=128 one head
(standard and flash), fused bias+GELU 8192^2, fused RMSNorm, LayerNorm and softmax 16384x4096 --
as the gate measures them (caches flushed before every sample), and NumPy on the same shapes in a
separate process, timed the same way (a buffer twice the last-level cache streamed before every
sample), then prints the ratios and the targets:

  GEMM tiled        >= 60% of the FMA peak probe, time <= 1.11x OpenBLAS's (>= 0.9x its speed)
  attention flash   >= 1.5x faster than NumPy's standard attention, >= 50% of the FMA peak
  fused streaming   >= 80% of the triad probe

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, where the environment sets them, are unset for the peer
alone (the binary never reads them); the script prints which kernel OpenBLAS runs
(threadpoolctl). Under the avx2 level the peer also runs with OPENBLAS_CORETYPE=Haswell, the
AVX2 kernels, so the comparison is like for like.

Usage: python3 scripts/bench-peers.py [--opledger target/release/opledger] [--simd avx2,native]
Needs numpy and threadpoolctl (pip install numpy threadpoolctl).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

SPECS = {
    "gemm": """name: peer-gemm
title: GEMM 1024^3 f32
workload: {kind: gemm, m: 1024, n: 1024, k: 1024}
variants: {before: naive, after: tiled}
expect: {bound: compute}
measure: {min_pairs: 3, max_pairs: 5, time_cap_secs: 3}
""",
    "attention": """name: peer-attention
title: attention N=4096 d=128, one head
workload: {kind: attention, batch: 1, heads: 1, seq_len: 4096, head_dim: 128, causal: false}
variants: {before: standard, after: flash}
expect: {bound: compute}
measure: {min_pairs: 5, max_pairs: 9, time_cap_secs: 6}
""",
    "bias_gelu": """name: peer-bias-gelu
title: bias+GELU 8192^2
workload: {kind: elementwise, ops: [bias_add, gelu], rows: 8192, cols: 8192}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth}
measure: {min_pairs: 5, max_pairs: 9, time_cap_secs: 4}
""",
    "rmsnorm": """name: peer-rmsnorm
title: RMSNorm 16384x4096
workload: {kind: rmsnorm, rows: 16384, cols: 4096, eps: 1.0e-5}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth}
measure: {min_pairs: 5, max_pairs: 9, time_cap_secs: 4}
""",
    "layernorm": """name: peer-layernorm
title: LayerNorm 16384x4096
workload: {kind: layernorm, rows: 16384, cols: 4096, eps: 1.0e-5}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth}
measure: {min_pairs: 5, max_pairs: 9, time_cap_secs: 4}
""",
    "softmax": """name: peer-softmax
title: softmax 16384x4096
workload: {kind: softmax, rows: 16384, cols: 4096}
variants: {before: unfused, after: fused}
expect: {bound: bandwidth}
measure: {min_pairs: 5, max_pairs: 9, time_cap_secs: 4}
""",
}


def llc_bytes():
    """The last-level cache the OS reports (256 MiB when it reports none)."""
    best = 0
    for index in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        best = max(best, int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size))
    return best or 256 << 20


def median_secs(f, runs, flush=None):
    f()
    ts = []
    for _ in range(runs):
        if flush is not None:
            flush()
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def peer():
    """The NumPy side (run in a child process, so that its environment can differ)."""
    import numpy as np
    from threadpoolctl import threadpool_info

    blas = [
        f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture')}, {i.get('num_threads')} threads"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]
    rng = np.random.default_rng(0)
    out = {"blas": blas, "numpy": np.__version__}
    # Cold caches, as opledger's samples: stream a buffer twice the last-level cache.
    junk = np.ones(2 * llc_bytes() // 4, dtype=np.float32)

    def flush():
        junk.__iadd__(1.0)

    a = rng.random((1024, 1024), dtype=np.float32)
    b = rng.random((1024, 1024), dtype=np.float32)
    out["gemm"] = median_secs(lambda: a @ b, 15, flush)
    n, d = 4096, 128
    q, k, v = (rng.random((n, d), dtype=np.float32) for _ in range(3))

    def attention():
        s = (q @ k.T) * np.float32(1 / np.sqrt(d))
        s -= s.max(axis=1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=1, keepdims=True)
        return s @ v

    out["attention"] = median_secs(attention, 5, flush)
    return out


def run_opledger(binary, simd, workdir):
    env = dict(os.environ)
    if simd != "native":
        env["OPLEDGER_SIMD"] = simd
    specs = []
    for name, text in SPECS.items():
        p = workdir / f"{name}.yaml"
        p.write_text(text)
        specs.append(str(p))
    runs = workdir / f"runs-{simd}"
    cmd = [binary, "run", *specs, "--backend", "cpu", "--runs-dir", str(runs), "--baselines", str(workdir / "baselines")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr}")
    results = json.loads(next(runs.iterdir()).joinpath("results.json").read_text())
    return results


def by_name(results):
    return {s["name"].removeprefix("peer-").replace("-", "_"): s for s in results["specs"]}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        print(json.dumps(peer()))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--opledger", default="target/release/opledger")
    ap.add_argument("--simd", default="avx2,native", help="comma-separated: avx2, avx512, native")
    args = ap.parse_args()

    def peer_run(extra_env):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env.update(extra_env)
        done = subprocess.run([sys.executable, __file__, "--peer"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the NumPy peer failed:\n{done.stderr}")
        return json.loads(done.stdout)

    unset = [k for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ]
    if unset:
        print(f"unset for the peer: {', '.join(f'{k}={os.environ[k]}' for k in unset)}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} logical CPUs; {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for simd in args.simd.split(","):
            # The peer and the binary alternate within the same minutes: peer, binary, peer.
            p1 = peer_run({})
            res = run_opledger(args.opledger, simd, tmp)
            p2 = peer_run({})
            peers = {"as installed": p1, "as installed (again)": p2}
            if simd == "avx2":
                peers["OPENBLAS_CORETYPE=Haswell"] = peer_run({"OPENBLAS_CORETYPE": "Haswell"})
            report(simd, res, peers)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def report(simd, res, peers):
    c = res["ceilings"]
    dev = res["device"]
    s = by_name(res)
    print(f"\n## OPLEDGER_SIMD={simd}: {dev.get('simd')}, {c['threads']} threads; "
          f"triad {c['triad_bytes_per_sec'] / 1e9:.1f} GB/s, FMA peak {c['fma_flops_per_sec'] / 1e9:.0f} GFLOP/s")
    for label, p in peers.items():
        print(f"peer {label}: NumPy {p['numpy']}, {'; '.join(p['blas']) or 'no BLAS found'}")
    print("| work | opledger | peer | ratio | target | met |")
    print("|---|--:|--:|--:|---|---|")

    def med(spec, side):
        return spec[side]["summary"]["median_secs"]

    g = s["gemm"]
    t = med(g, "after")
    frac = g["after"]["achieved"]["frac_compute"]
    for label, p in peers.items():
        ratio = t / p["gemm"]
        ok = frac >= 0.6 and ratio <= 1.11
        print(f"| GEMM 1024³ tiled vs `a @ b` ({label}) | {t * 1e3:.2f} ms ({frac:.0%} of FMA peak) | "
              f"{p['gemm'] * 1e3:.2f} ms | {ratio:.2f}× the time | ≥ 60% peak, ≤ 1.11× | {'yes' if ok else 'no'} |")
    a = s["attention"]
    t = med(a, "after")
    frac = a["after"]["achieved"]["frac_compute"]
    for label, p in peers.items():
        speedup = p["attention"] / t
        ok = frac >= 0.5 and speedup >= 1.5
        print(f"| attention flash vs NumPy standard ({label}) | {t * 1e3:.1f} ms ({frac:.0%} of FMA peak) | "
              f"{p['attention'] * 1e3:.1f} ms | {speedup:.2f}× faster | ≥ 1.5×, ≥ 50% peak | {'yes' if ok else 'no'} |")
    print(f"| attention standard (opledger) | {med(a, 'before') * 1e3:.1f} ms "
          f"({a['before']['achieved']['frac_compute']:.0%} of FMA peak) | | | | |")
    for key, label in [("bias_gelu", "bias+GELU 8192² fused"), ("rmsnorm", "RMSNorm fused"),
                       ("layernorm", "LayerNorm fused"), ("softmax", "softmax fused")]:
        x = s[key]
        frac = x["after"]["achieved"]["frac_bandwidth"]
        print(f"| {label} | {med(x, 'after') * 1e3:.1f} ms = {frac:.0%} of triad | | | ≥ 80% of triad | "
              f"{'yes' if frac >= 0.8 else 'no'} |")


if __name__ == "__main__":
    main()
