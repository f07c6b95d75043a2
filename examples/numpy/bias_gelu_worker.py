"""Bias + GELU (tanh form) two ways, served to opledger: NumPy one array operation at a time (each
step a pass over memory: unfused) and numexpr, which evaluates the whole expression in one pass
over cache-sized blocks (fused)."""

import numexpr
import numpy as np
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

C = np.float32(np.sqrt(2.0 / np.pi))
K = np.float32(0.044715)
HALF, ONE = np.float32(0.5), np.float32(1.0)

worker = Worker(device="cpu")


@worker.function("numpy_unfused")
def unfused(x, bias):
    v = x + bias
    inner = C * (v + K * v * v * v)
    return HALF * v * (ONE + np.tanh(inner))


@worker.function("numexpr_fused")
def fused(x, bias):
    return numexpr.evaluate(
        "h * (x + b) * (o + tanh(c * ((x + b) + k * (x + b) ** 3)))",
        local_dict={"x": x, "b": bias, "c": C, "k": K, "h": HALF, "o": ONE},
    )


if __name__ == "__main__":
    worker.serve()
