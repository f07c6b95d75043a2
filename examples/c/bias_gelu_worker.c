/* A worker in C for examples/c/bias-gelu.yaml: bias-add and GELU (tanh form) fused into one pass
 * over x, against opledger's own unfused kernels. The protocol, .npy, timing and the cache flush
 * are opledger_worker.h's; this file is the kernel.
 *
 *     cc -O2 -std=c99 -I../../include bias_gelu_worker.c -lm -o bias_gelu_worker
 */
#include "opledger_worker.h" /* first: it asks for POSIX's clock */

#include <math.h>

static int fused(olw_call *c) {
    const olw_tensor *x = olw_input(c, "x"), *bias = olw_input(c, "bias");
    size_t rows, cols, i, j;
    if (!x || !bias || x->ndim != 2) return olw_fail(c, "needs x [rows, cols] and bias [cols]");
    rows = (size_t)x->shape[0];
    cols = (size_t)x->shape[1];
    if (bias->count != cols || c->output->count != rows * cols)
        return olw_fail(c, "bias or the output does not match x's shape");
    for (i = 0; i < rows; i++) {
        const float *xr = x->data + i * cols;
        float *yr = c->output->data + i * cols;
        for (j = 0; j < cols; j++) {
            float v = xr[j] + bias->data[j];
            yr[j] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        }
    }
    return 0;
}

int main(void) {
    olw_function fns[] = {{"c_fused", fused, NULL}};
    return olw_serve("bias_gelu_worker.c", fns, 1);
}
