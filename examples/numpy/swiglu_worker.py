"""SwiGLU, silu(a) * b, two ways: NumPy step by step (silu(a) written to memory, then read back
for the product: unfused) and numexpr in one blocked pass (fused)."""

import numexpr
import numpy as np
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

ONE = np.float32(1.0)

worker = Worker(device="cpu")


@worker.function("numpy_unfused")
def unfused(a, b):
    s = a / (ONE + np.exp(-a))
    return s * b


@worker.function("numexpr_fused")
def fused(a, b):
    return numexpr.evaluate("a / (o + exp(-a)) * b", local_dict={"a": a, "b": b, "o": ONE})


if __name__ == "__main__":
    worker.serve()
