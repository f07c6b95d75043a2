// Attention forward in bf16 (storage) with f32 accumulation, tensors [bh][n][128]. Needs sm_80+
// (mma.sync with bf16 operands, cvt to bf16); the runtime refuses older devices. bf16 values
// travel as raw 16-bit patterns (unsigned short): NVRTC has no cuda_bf16.h here.
//
// standard: three kernels with S and P materialized in global memory in bf16, as eager
//   framework attention stores them: attn_scores_bf16, attn_softmax_rows_bf16, attn_pv_bf16.
//   Scalar (CUDA-core) dot products: this is the unfused baseline, not a tuned GEMM.
// flash: flash_attn_bf16, FlashAttention-2 style on tensor cores. One block of 4 warps per
//   (head, 64 query rows); each warp owns 16 query rows, keeps their Q fragments and output
//   accumulators in registers, and runs S = Q·Kᵀ and O += P·V as mma.sync m16n8k16 over K/V
//   tiles of 64 rows staged in shared memory by cp.async (16 bytes each), row-major as in
//   global memory, pipelined as FlashAttention-2 does: the next K tile is loaded while the
//   softmax and P·V of this one run, the next V tile while the next S = Q·Kᵀ runs.
//   B fragments come from ldmatrix.x4 (two n-tiles per instruction): plain for K, transposed
//   for V (so V needs no transposing store). The online softmax runs on the S accumulators in
//   the base-2 domain; P is rounded to bf16 for the P·V product (as FlashAttention does) while
//   the row sums stay f32. head_dim must be 128.

// opl_bf16 and its conversions and mma helpers are in common.cuh (the probe uses them too).

extern "C" __global__ void attn_scores_bf16(opl_bf16* S, const opl_bf16* Q, const opl_bf16* K,
                                            int n, int d, float scale, int causal,
                                            long long total) {
#if __CUDA_ARCH__ >= 800
    OPL_GRID_STRIDE(e, total) {
        long long h = e / ((long long)n * n);
        int i = (int)((e / n) % n), j = (int)(e % n);
        if (causal && j > i) { S[e] = 0xff80u; continue; }  // −inf
        const opl_bf16* q = Q + (h * n + i) * d;
        const opl_bf16* k = K + (h * n + j) * d;
        float s = 0.0f;
        for (int c = 0; c < d; ++c) s = fmaf(opl_bf16_to_f32(q[c]), opl_bf16_to_f32(k[c]), s);
        S[e] = opl_f32_to_bf16(s * scale);
    }
#endif
}

// One block per row of S (bh·n rows of n).
extern "C" __global__ void attn_softmax_rows_bf16(opl_bf16* P, const opl_bf16* S, int n) {
#if __CUDA_ARCH__ >= 800
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * n;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, opl_bf16_to_f32(S[base + j]));
    m = opl_block_max(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += __expf(opl_bf16_to_f32(S[base + j]) - m);
    float inv = 1.0f / opl_block_sum(s, scratch);
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        P[base + j] = opl_f32_to_bf16(__expf(opl_bf16_to_f32(S[base + j]) - m) * inv);
#endif
}

extern "C" __global__ void attn_pv_bf16(opl_bf16* O, const opl_bf16* P, const opl_bf16* V, int n,
                                        int d, int causal, long long total) {
#if __CUDA_ARCH__ >= 800
    OPL_GRID_STRIDE(e, total) {
        long long row = e / d;  // h·n + i
        int c = (int)(e % d);
        long long h = row / n;
        int i = (int)(row % n);
        int last = causal ? i + 1 : n;
        const opl_bf16* p = P + row * n;
        float s = 0.0f;
        for (int j = 0; j < last; ++j)
            s = fmaf(opl_bf16_to_f32(p[j]), opl_bf16_to_f32(V[(h * n + j) * d + c]), s);
        O[e] = opl_f32_to_bf16(s);
    }
#endif
}

#define FB_BR 64
#define FB_BC 64
#define FB_D 128
#define FB_PAD 8
extern "C" __global__ void __launch_bounds__(128)
flash_attn_bf16(opl_bf16* O, const opl_bf16* Q, const opl_bf16* K, const opl_bf16* V, int n,
                float scale_log2e, int causal) {
#if __CUDA_ARCH__ >= 800
    // Row strides padded by 8 bf16 (272 bytes): the 8 rows an ldmatrix phase reads start 4 banks
    // apart, so they fall in 32 different banks.
    __shared__ __align__(16) opl_bf16 Ks[FB_BC][FB_D + FB_PAD];
    __shared__ __align__(16) opl_bf16 Vs[FB_BC][FB_D + FB_PAD];
    const int tiles = (n + FB_BR - 1) / FB_BR;
    const long long h = blockIdx.x / tiles;
    const int i0 = (blockIdx.x % tiles) * FB_BR;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Fragment coordinates: g = row within an 8-row group, t = column pair.
    const int g = lane >> 2, t = lane & 3;
    const int r0 = i0 + warp * 16 + g, r1 = r0 + 8;  // the two query rows of this thread
    const opl_bf16* Qh = Q + h * n * FB_D;
    const opl_bf16* Kh = K + h * n * FB_D;
    const opl_bf16* Vh = V + h * n * FB_D;

    // Q as A fragments for the 8 k-steps of 16 over d = 128, loaded once.
    unsigned qa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        int c = kk * 16 + 2 * t;
        qa[kk][0] = r0 < n ? *(const unsigned*)(Qh + (long long)r0 * FB_D + c) : 0u;
        qa[kk][1] = r1 < n ? *(const unsigned*)(Qh + (long long)r1 * FB_D + c) : 0u;
        qa[kk][2] = r0 < n ? *(const unsigned*)(Qh + (long long)r0 * FB_D + c + 8) : 0u;
        qa[kk][3] = r1 < n ? *(const unsigned*)(Qh + (long long)r1 * FB_D + c + 8) : 0u;
    }
    float o[16][4];
#pragma unroll
    for (int dt = 0; dt < 16; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    // Running max (base-2 scaled scores) and this thread's part of the row sums, rows r0, r1.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    const int kv_end = causal ? min(n, i0 + FB_BR) : n;
    // One tile of K or V (rows j0.. of `src`) into `dst` by cp.async, 16 bytes (8 bf16) per copy:
    // a row is 16 chunks; rows past n are zero-filled. Always one commit (a group, maybe empty),
    // so that the wait counts below stay simple.
    auto load_tile = [&](opl_bf16 (*dst)[FB_D + FB_PAD], const opl_bf16* src, int j0) {
        if (j0 < kv_end) {
            for (int e = threadIdx.x; e < FB_BC * FB_D / 8; e += blockDim.x) {
                int r = e / (FB_D / 8), c = 8 * (e % (FB_D / 8));
                bool ok = j0 + r < n;
                opl_cp_async16(&dst[r][c], src + (long long)(ok ? j0 + r : 0) * FB_D + c, ok);
            }
        }
        opl_cp_async_commit();
    };
    load_tile(Ks, Kh, 0);
    load_tile(Vs, Vh, 0);
    for (int j0 = 0; j0 < kv_end; j0 += FB_BC) {
        // In flight: K and V of this tile, in that order: wait for K.
        opl_cp_async_wait<1>();
        __syncthreads();

        // ldmatrix lane roles: lane gives the address of row (lane & 7) of matrix (lane >> 3).
        const int lrow = lane & 7, lmat = lane >> 3;
        // S = Q·Kᵀ for this warp's 16 rows and the tile's 64 keys: 8 n-tiles of 8 keys. The B
        // fragment of n-tile nt at k-step kk is K rows 8nt..8nt+7, columns 16kk.. (b0) and
        // 16kk+8.. (b1): one ldmatrix.x4 gives both for n-tiles 2p and 2p+1 (matrix m: n-tile
        // 2p + m/2, column half m%2).
        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                unsigned b[4];
                opl_ldmatrix_x4(b, &Ks[(2 * p + (lmat >> 1)) * 8 + lrow][kk * 16 + (lmat & 1) * 8]);
                opl_mma_bf16(s[2 * p], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[0], b[1]);
                opl_mma_bf16(s[2 * p + 1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[2], b[3]);
            }
        }
        __syncthreads();  // every warp is done with Ks: load the next K tile behind the softmax
        load_tile(Ks, Kh, j0 + FB_BC);
        // Scale into the base-2 domain, mask, and take the tile's row maxima.
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int j = j0 + nt * 8 + 2 * t + (e & 1);
                int row = e < 2 ? r0 : r1;
                bool masked = j >= n || (causal && j > row);
                float v = masked ? -INFINITY : s[nt][e] * scale_log2e;
                s[nt][e] = v;
                if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
            }
        }
        // A row's 64 scores are spread over the 4 threads of a quad.
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // A row with nothing unmasked yet keeps max −inf: subtract 0 so exp2 gives 0, not NaN.
        float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;
        float corr0 = exp2f(m0 - b0), corr1 = exp2f(m1 - b1);
        m0 = mn0;
        m1 = mn1;
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] = exp2f(s[nt][0] - b0);
            s[nt][1] = exp2f(s[nt][1] - b0);
            s[nt][2] = exp2f(s[nt][2] - b1);
            s[nt][3] = exp2f(s[nt][3] - b1);
            ps0 += s[nt][0] + s[nt][1];
            ps1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * corr0 + ps0;
        l1 = l1 * corr1 + ps1;
#pragma unroll
        for (int dt = 0; dt < 16; ++dt) {
            o[dt][0] *= corr0;
            o[dt][1] *= corr0;
            o[dt][2] *= corr1;
            o[dt][3] *= corr1;
        }
        // In flight: V of this tile and K of the next: wait for V.
        opl_cp_async_wait<1>();
        __syncthreads();
        // O += P·V: the S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment of
        // the k-step kk (16 keys), so P never leaves registers. The B fragment of dim-tile dt is
        // V rows (keys) 16kk..16kk+7 (b0) and 16kk+8.. (b1) at columns 8dt..8dt+7, transposed:
        // one ldmatrix.x4.trans gives both for dim-tiles 2p and 2p+1 (matrix m: key half m%2,
        // dim-tile 2p + m/2).
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned a0 = opl_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
            unsigned a1 = opl_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
            unsigned a2 = opl_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            unsigned a3 = opl_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                unsigned b[4];
                opl_ldmatrix_x4_trans(b, &Vs[kk * 16 + (lmat & 1) * 8 + lrow][(2 * p + (lmat >> 1)) * 8]);
                opl_mma_bf16(o[2 * p], a0, a1, a2, a3, b[0], b[1]);
                opl_mma_bf16(o[2 * p + 1], a0, a1, a2, a3, b[2], b[3]);
            }
        }
        __syncthreads();  // every warp is done with Vs: load the next V tile behind the next S
        load_tile(Vs, Vh, j0 + FB_BC);
    }
    opl_cp_async_wait<0>();  // nothing may be in flight when the block exits
    // Complete the row sums over the quad, normalize, store bf16 pairs.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    opl_bf16* Oh = O + h * n * FB_D;
#pragma unroll
    for (int dt = 0; dt < 16; ++dt) {
        int c = dt * 8 + 2 * t;
        if (r0 < n)
            *(unsigned*)(Oh + (long long)r0 * FB_D + c) =
                opl_pack_bf16x2(o[dt][0] * inv0, o[dt][1] * inv0);
        if (r1 < n)
            *(unsigned*)(Oh + (long long)r1 * FB_D + c) =
                opl_pack_bf16x2(o[dt][2] * inv1, o[dt][3] * inv1);
    }
#endif
}
