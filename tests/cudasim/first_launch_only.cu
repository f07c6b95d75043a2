// A cheating `cuda:` kernel for the tests: bias + GELU that skips every element already written,
// so that after its first launch it writes nothing and leaves that launch's result in place —
// fast, and right only if the output is never cleared between runs. opledger fills the checked
// run's output with NaN before it, so the check sees what this launch wrote: nothing.
extern "C" __global__ void bias_gelu_first_launch_only(float* __restrict__ y, const float* __restrict__ x,
                                                       const float* __restrict__ bias, long long rows,
                                                       long long cols) {
    long long n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (y[i] != 0.0f) continue;  // written before (or anything but zero): skip
        float v = x[i] + bias[i % cols];
        float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        y[i] = v / (1.0f + __expf(-2.0f * u));
    }
}
