"""The peers of opledger's CPU kernels, served to opledger as worker functions, so that a peer
and opledger's own kernel are timed by the same loop: interleaved pairs in random order, caches
flushed before every sample (scripts/bench-peers.py writes the specs).

  numpy_matmul     A @ B through NumPy (OpenBLAS, or whichever BLAS NumPy was built with)
  numpy_attention  softmax(Q Kᵀ / √d) V, one array operation at a time, as NumPy writes it
  torch_matmul     A @ B through PyTorch on the CPU (its BLAS: MKL or OpenBLAS as built)
  torch_attention  torch.nn.functional.scaled_dot_product_attention on the CPU (PyTorch's
                   fused flash kernel where it picks one)

PyTorch is imported only where installed; the NumPy peers need nothing else.
"""

import numpy as np
from opledger_worker import Worker  # opledger puts its worker module on PYTHONPATH

try:
    import torch
except ImportError:
    torch = None

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


if torch is not None:

    @worker.function("torch_matmul")
    def torch_matmul(A, B):
        # from_numpy shares the arrays' memory: no copy is timed, only the product.
        return (torch.from_numpy(A) @ torch.from_numpy(B)).numpy()

    @worker.function("torch_attention")
    def torch_attention(Q, K, V, workload):
        q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
        with torch.inference_mode():
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=bool(workload.get("causal"))
            )
        return o.numpy()


if __name__ == "__main__":
    worker.serve()
