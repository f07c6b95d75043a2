#!/usr/bin/env python3
"""The GPU's bf16 peers, for the GPU check: PyTorch's bf16 matmul (cuBLAS, `wgmma` on Hopper: the
matmul roof the `mma.sync` probe sits below) and its scaled-dot-product attention on the shape of
specs/gpu/flash-attention-bf16.yaml, timed as opledger times a sample (CUDA events behind a hold,
the device synchronised before the end event), best and median of 20 after a warm-up. Prints one
line each and writes them to the JSON file given as the first argument. Needs torch with CUDA."""

import json
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    secs = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        a.record()
        fn()
        torch.cuda.synchronize()
        b.record()
        b.synchronize()
        secs.append(a.elapsed_time(b) / 1e3)
    secs.sort()
    return secs[0], secs[len(secs) // 2]


def main():
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    best, median = timed(lambda: x @ y)
    flops = 2.0 * n * n * n
    out["matmul_bf16_8192"] = {"best_secs": best, "median_secs": median, "tflops": flops / best / 1e12}
    # The flash spec's shape: batch 2, 16 heads, N = 8192, d = 128, not causal.
    b, h, s, d = 2, 16, 8192, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    best, median = timed(lambda: F.scaled_dot_product_attention(q, k, v))
    flops = 4.0 * b * h * s * s * d
    out["sdpa_bf16_b2_h16_n8192_d128"] = {"best_secs": best, "median_secs": median, "tflops": flops / best / 1e12}
    for key, v in out.items():
        if isinstance(v, dict):
            print(f"{key}: {v['tflops']:.1f} TFLOP/s (best {v['best_secs'] * 1e3:.3f} ms, median {v['median_secs'] * 1e3:.3f} ms)")
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
