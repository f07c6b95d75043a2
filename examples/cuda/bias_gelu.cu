// A user's fused bias + GELU (tanh form) kernel, gated by opledger against its built-in unfused
// variant (examples/cuda/bias-gelu.yaml): y[r, c] = gelu(x[r, c] + bias[c]), one thread per four
// elements of a row (float4 loads and stores), rows of a multiple of 4 columns.
extern "C" __global__ void bias_gelu_fused(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ bias, long long rows,
                                           long long cols) {
    long long quads = rows * cols / 4;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < quads;
         q += (long long)gridDim.x * blockDim.x) {
        long long i = q * 4;
        long long c = i % cols;
        float4 v = reinterpret_cast<const float4*>(x)[q];
        float in[4] = {v.x + bias[c], v.y + bias[c + 1], v.z + bias[c + 2], v.w + bias[c + 3]};
        float out[4];
        for (int k = 0; k < 4; ++k) {
            float u = 0.7978845608f * (in[k] + 0.044715f * in[k] * in[k] * in[k]);
            // 0.5·v·(1 + tanh(u)) = v / (1 + e^(-2u))
            out[k] = in[k] / (1.0f + __expf(-2.0f * u));
        }
        reinterpret_cast<float4*>(y)[q] = make_float4(out[0], out[1], out[2], out[3]);
    }
}
