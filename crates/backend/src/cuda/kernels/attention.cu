// Attention forward, O = softmax(Q·Kᵀ·scale)·V per (batch·head), f32, tensors [bh][n][d].
//
// standard: three kernels with S and P materialized in global memory:
//   attn_scores (S = Q·Kᵀ·scale, −∞ above the diagonal when causal), attn_softmax_rows (P),
//   attn_pv (O = P·V).
// flash: flash_attn_f32, one block of 128 threads per (head, 32 query rows); K and V tiles of 16
//   rows staged in shared memory; scores and the online softmax stay on chip; each warp owns 8
//   query rows and keeps their output accumulators in registers. Requires d ≤ 128, d % 32 == 0.

extern "C" __global__ void attn_scores(float* S, const float* Q, const float* K, int n, int d,
                                       float scale, int causal, long long total) {
    OPL_GRID_STRIDE(e, total) {
        long long h = e / ((long long)n * n);
        int i = (int)((e / n) % n), j = (int)(e % n);
        if (causal && j > i) { S[e] = -INFINITY; continue; }
        const float* q = Q + (h * n + i) * d;
        const float* k = K + (h * n + j) * d;
        float s = 0.0f;
        for (int c = 0; c < d; ++c) s = fmaf(q[c], k[c], s);
        S[e] = s * scale;
    }
}

// One block per row of S (bh·n rows of n).
extern "C" __global__ void attn_softmax_rows(float* P, const float* S, int n) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * n;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, S[base + j]);
    m = opl_block_max(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += __expf(S[base + j] - m);
    float inv = 1.0f / opl_block_sum(s, scratch);
    for (int j = threadIdx.x; j < n; j += blockDim.x) P[base + j] = __expf(S[base + j] - m) * inv;
}

extern "C" __global__ void attn_pv(float* O, const float* P, const float* V, int n, int d,
                                   int causal, long long total) {
    OPL_GRID_STRIDE(e, total) {
        long long row = e / d;  // h·n + i
        int c = (int)(e % d);
        long long h = row / n;
        int i = (int)(row % n);
        int last = causal ? i + 1 : n;
        const float* p = P + row * n;
        float s = 0.0f;
        for (int j = 0; j < last; ++j) s = fmaf(p[j], V[(h * n + j) * d + c], s);
        O[e] = s;
    }
}

#define FA_BR 32
#define FA_BC 16
#define FA_DMAX 128
extern "C" __global__ void __launch_bounds__(128)
flash_attn_f32(float* O, const float* Q, const float* K, const float* V, int n, int d,
               float scale, int causal) {
    __shared__ float Qs[FA_BR][FA_DMAX];
    __shared__ float Ks[FA_BC][FA_DMAX + 1];
    __shared__ float Vs[FA_BC][FA_DMAX];
    __shared__ float Ss[FA_BR][FA_BC];
    const int tiles = (n + FA_BR - 1) / FA_BR;
    const long long h = blockIdx.x / tiles;
    const int i0 = (blockIdx.x % tiles) * FA_BR;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int e = threadIdx.x; e < FA_BR * d; e += blockDim.x) {
        int r = e / d, c = e % d;
        Qs[r][c] = (i0 + r < n) ? Q[(h * n + i0 + r) * d + c] : 0.0f;
    }
    // Each warp owns rows warp*8 .. warp*8+7; lane holds columns lane, lane+32, ... of them.
    // Every loop over these arrays is unrolled, so that their indices are constants and they
    // live in registers (a dynamic index puts an array in local memory: ptxas reported a
    // 192-byte stack frame before the pragmas).
    float acc[8][FA_DMAX / 32];
    float m[8], l[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int c = 0; c < FA_DMAX / 32; ++c) acc[r][c] = 0.0f;
    }
    const int kv_end = causal ? min(n, i0 + FA_BR) : n;
    for (int j0 = 0; j0 < kv_end; j0 += FA_BC) {
        __syncthreads();
        for (int e = threadIdx.x; e < FA_BC * d; e += blockDim.x) {
            int r = e / d, c = e % d;
            bool ok = j0 + r < n;
            Ks[r][c] = ok ? K[(h * n + j0 + r) * d + c] : 0.0f;
            Vs[r][c] = ok ? V[(h * n + j0 + r) * d + c] : 0.0f;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < FA_BR * FA_BC; e += blockDim.x) {
            int r = e / FA_BC, j = e % FA_BC;
            float s = 0.0f;
            for (int c = 0; c < d; ++c) s = fmaf(Qs[r][c], Ks[j][c], s);
            bool masked = (j0 + j >= n) || (causal && j0 + j > i0 + r);
            Ss[r][j] = masked ? -INFINITY : s * scale;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < 8; ++rr) {
            int r = warp * 8 + rr;
            float s = lane < FA_BC ? Ss[r][lane] : -INFINITY;
            float tile_max = opl_warp_max(s);
            if (tile_max == -INFINITY) continue;  // fully masked for this row
            float m_new = fmaxf(m[rr], tile_max);
            float p = lane < FA_BC ? __expf(s - m_new) : 0.0f;
            float corr = __expf(m[rr] - m_new);
            l[rr] = l[rr] * corr + opl_warp_sum(p);
            m[rr] = m_new;
#pragma unroll
            for (int c = 0; c < FA_DMAX / 32; ++c) {
                int col = lane + 32 * c;
                float o = acc[rr][c] * corr;
                if (col < d)
                    for (int j = 0; j < FA_BC; ++j) o = fmaf(__shfl_sync(0xffffffffu, p, j), Vs[j][col], o);
                acc[rr][c] = o;
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < 8; ++rr) {
        int r = warp * 8 + rr;
        if (i0 + r >= n) continue;
#pragma unroll
        for (int c = 0; c < FA_DMAX / 32; ++c) {
            int col = lane + 32 * c;
            if (col < d) O[(h * n + i0 + r) * d + col] = acc[rr][c] / l[rr];
        }
    }
}
