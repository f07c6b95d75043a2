// Row-wise operators over rows×cols: RMSNorm, LayerNorm, softmax. Unfused kernels are one
// launch per step with intermediates in global memory; fused kernels use one block per row and
// keep the row's statistics on chip. Launch fused/row kernels with blockDim.x a multiple of 32.

// --- per-element steps (grid-stride) ---
extern "C" __global__ void row_square(float* y, const float* x, long long n) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] * x[i];
}
extern "C" __global__ void row_scale_by(float* y, const float* x, const float* per_row,
                                        long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] * per_row[i / cols];
}
extern "C" __global__ void row_sub(float* y, const float* x, const float* per_row,
                                   long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] - per_row[i / cols];
}
extern "C" __global__ void row_exp_sub(float* y, const float* x, const float* per_row,
                                       long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = __expf(x[i] - per_row[i / cols]);
}
extern "C" __global__ void row_div(float* y, const float* x, const float* per_row,
                                   long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] / per_row[i / cols];
}
extern "C" __global__ void row_mul_weight(float* y, const float* x, const float* w,
                                          long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] * w[i % cols];
}
extern "C" __global__ void row_affine(float* y, const float* x, const float* w, const float* b,
                                      long long n, long long cols) {
    OPL_GRID_STRIDE(i, n) y[i] = x[i] * w[i % cols] + b[i % cols];
}

// --- per-row reductions: one block per row ---
extern "C" __global__ void row_mean(float* out, const float* x, long long cols) {
    __shared__ float scratch[32];
    const float* r = x + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += r[j];
    s = opl_block_sum(s, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = s / (float)cols;
}
// Mean of squares per row: LayerNorm's variance of the centered rows in one pass (as the CPU
// kernel and the ledger count it), with no squared tensor in memory.
extern "C" __global__ void row_mean_sq(float* out, const float* x, long long cols) {
    __shared__ float scratch[32];
    const float* r = x + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += r[j] * r[j];
    s = opl_block_sum(s, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = s / (float)cols;
}
extern "C" __global__ void row_sum(float* out, const float* x, long long cols) {
    __shared__ float scratch[32];
    const float* r = x + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += r[j];
    s = opl_block_sum(s, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
extern "C" __global__ void row_max(float* out, const float* x, long long cols) {
    __shared__ float scratch[32];
    const float* r = x + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, r[j]);
    m = opl_block_max(m, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}
extern "C" __global__ void row_rsqrt(float* out, const float* in, float eps, long long rows) {
    OPL_GRID_STRIDE(i, rows) out[i] = rsqrtf(in[i] + eps);
}

// --- fused: one block per row ---
extern "C" __global__ void rmsnorm_fused(float* y, const float* x, const float* w, float eps,
                                         long long cols) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += x[base + j] * x[base + j];
    float r = rsqrtf(opl_block_sum(s, scratch) / (float)cols + eps);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) y[base + j] = x[base + j] * r * w[j];
}

extern "C" __global__ void layernorm_fused(float* y, const float* x, const float* w,
                                           const float* b, float eps, long long cols) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += x[base + j];
    float mean = opl_block_sum(s, scratch) / (float)cols;
    float v = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float d = x[base + j] - mean;
        v += d * d;
    }
    float r = rsqrtf(opl_block_sum(v, scratch) / (float)cols + eps);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x)
        y[base + j] = (x[base + j] - mean) * r * w[j] + b[j];
}

// Online softmax: each thread keeps a running max and a sum rescaled when the max grows, so the
// row is read once for the statistics; the second sweep hits L1/L2 (the row is ≤ a few KiB).
extern "C" __global__ void softmax_fused(float* y, const float* x, long long cols) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * cols;
    float m = -INFINITY, s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = x[base + j];
        if (v > m) {
            s = s * __expf(m - v) + 1.0f;
            m = v;
        } else {
            s += __expf(v - m);
        }
    }
    float gm = opl_block_max(m, scratch);
    float gs = opl_block_sum(m == -INFINITY ? 0.0f : s * __expf(m - gm), scratch);
    float inv = 1.0f / gs;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) y[base + j] = __expf(x[base + j] - gm) * inv;
}
