/* A worker in CUDA C++ for examples/c/bias-gelu-cuda.yaml: bias-add and GELU (tanh form) fused
 * into one kernel, against opledger's own unfused GPU kernels. Under nvcc, opledger_worker.h
 * keeps the tensors on the GPU, times each run with CUDA events by opledger's rule for GPU
 * samples (behind a hold kernel, the device synchronised before the end event) and reads the L2
 * through before a cold run; this file is the kernel and its launch.
 *
 *     nvcc -O2 -std=c++11 -I../../include bias_gelu_worker.cu -o bias_gelu_worker_cuda
 */
#include "opledger_worker.h" /* first: it asks for POSIX's clock */

__global__ void bias_gelu(float *__restrict__ y, const float *__restrict__ x,
                          const float *__restrict__ bias, size_t n, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i] + bias[i % cols];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

static int fused(olw_call *c) {
    const olw_tensor *x = olw_input(c, "x"), *bias = olw_input(c, "bias");
    if (!x || !bias || x->ndim != 2) return olw_fail(c, "needs x [rows, cols] and bias [cols]");
    size_t cols = (size_t)x->shape[1];
    if (bias->count != cols || c->output->count != x->count)
        return olw_fail(c, "bias or the output does not match x's shape");
    /* Grid-stride: enough blocks to fill any GPU, each thread a few elements. */
    size_t blocks = (x->count + 255) / 256;
    bias_gelu<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256>>>(c->output->data, x->data,
                                                                   bias->data, x->count, cols);
    return 0; /* a launch error is the kit's to report: it checks after every run */
}

int main(void) {
    olw_function fns[] = {{"cuda_fused", fused, NULL}};
    return olw_serve("bias_gelu_worker.cu", fns, 1);
}
