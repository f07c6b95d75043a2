"""The peers of opledger's CPU kernels, served to opledger as worker functions, so that a peer
and opledger's own kernel are timed by the same loop: interleaved pairs in random order, caches
flushed before every sample (scripts/bench-peers.py writes the specs).

  numpy_matmul     A @ B through NumPy (OpenBLAS, or whichever BLAS NumPy was built with)
  numpy_attention  softmax(Q Kᵀ / √d) V, one array operation at a time, as NumPy writes it
"""

import numpy as np
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

worker = Worker(device="cpu")


@worker.function("numpy_matmul")
def matmul(A, B):
    return A @ B


@worker.function("numpy_attention")
def attention(Q, K, V, workload):
    d = Q.shape[-1]
    s = np.matmul(Q, np.swapaxes(K, -1, -2)) * np.float32(1.0 / np.sqrt(d))
    if workload.get("causal"):
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, np.float32(-np.inf))
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, V)


if __name__ == "__main__":
    worker.serve()
