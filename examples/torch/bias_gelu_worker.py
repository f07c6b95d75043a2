"""Bias + GELU (tanh form) on a GPU with PyTorch: eager (an add kernel, then a GELU kernel: every
intermediate through device memory) against torch.compile (one generated, fused kernel)."""

import torch
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

worker = Worker(device="cuda")


def to_gpu(**tensors):
    return {k: torch.from_numpy(v).cuda() for k, v in tensors.items()}


def bias_gelu(x, bias):
    return torch.nn.functional.gelu(x + bias, approximate="tanh")


compiled = torch.compile(bias_gelu)

worker.function("eager", prepare=to_gpu)(bias_gelu)


@worker.function("compiled", prepare=to_gpu)
def fused(x, bias):
    return compiled(x, bias)


if __name__ == "__main__":
    worker.serve()
