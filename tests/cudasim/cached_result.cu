// A cheating `cuda:` kernel for the tests: bias + GELU that keeps every result it computed in a
// device-side table and answers later launches from it. It writes every element on every launch
// (a poisoned output does not catch it) and is right only while its inputs never change.
// opledger runs the checked pair on inputs of another seed, where the table's answer is wrong.
#define OPL_CACHED_ELEMENTS (1 << 16)
__device__ float bias_gelu_table[OPL_CACHED_ELEMENTS];
__device__ int bias_gelu_tabled[OPL_CACHED_ELEMENTS];

extern "C" __global__ void bias_gelu_cached(float* __restrict__ y, const float* __restrict__ x,
                                            const float* __restrict__ bias, long long rows,
                                            long long cols) {
    long long n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (i < OPL_CACHED_ELEMENTS && bias_gelu_tabled[i]) {
            y[i] = bias_gelu_table[i];  // the answer of an earlier launch, whatever x is now
            continue;
        }
        float v = x[i] + bias[i % cols];
        float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        float r = v / (1.0f + __expf(-2.0f * u));
        y[i] = r;
        if (i < OPL_CACHED_ELEMENTS) {
            bias_gelu_table[i] = r;
            bias_gelu_tabled[i] = 1;
        }
    }
}
