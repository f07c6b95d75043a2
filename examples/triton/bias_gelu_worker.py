"""Bias + GELU (tanh form) on a GPU: a Triton kernel (one pass: fused) against PyTorch eager
(an add kernel and a GELU kernel: unfused)."""

import torch
import triton
import triton.language as tl
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

worker = Worker(device="cuda")


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask) + tl.load(b_ptr + offs % cols, mask=mask)
    inner = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    tl.store(y_ptr + offs, 0.5 * v * (1.0 + tanh), mask=mask)


def to_gpu(**tensors):
    return {k: torch.from_numpy(v).cuda() for k, v in tensors.items()}


@worker.function("eager", prepare=to_gpu)
def eager(x, bias):
    return torch.nn.functional.gelu(x + bias, approximate="tanh")


@worker.function("triton", prepare=to_gpu)
def fused(x, bias):
    y = torch.empty_like(x)
    n = x.numel()
    bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, y, n, x.shape[1], BLOCK=1024)
    return y


if __name__ == "__main__":
    worker.serve()
