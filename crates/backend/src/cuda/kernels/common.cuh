#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Shared helpers of opledger's CUDA kernels (prepended to every source before NVRTC compiles it;
// NVRTC has no include path here). Conventions: f32 row-major tensors, 64-bit element indices,
// grid-stride loops so any launch shape covers any size.
#define OPL_GRID_STRIDE(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ float opl_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float opl_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions for blockDim.x a multiple of 32 (≤ 1024); `scratch` holds 32 floats.
__device__ __forceinline__ float opl_block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = opl_warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < warps) ? scratch[threadIdx.x] : 0.0f;
    if (warp == 0) v = opl_warp_sum(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    return scratch[0];
}

__device__ __forceinline__ float opl_block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = opl_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < warps) ? scratch[threadIdx.x] : -INFINITY;
    if (warp == 0) v = opl_warp_max(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    return scratch[0];
}

// bf16 values travel as raw 16-bit patterns (unsigned short): NVRTC has no cuda_bf16.h here.
typedef unsigned short opl_bf16;

__device__ __forceinline__ float opl_bf16_to_f32(opl_bf16 h) {
    return __uint_as_float(((unsigned)h) << 16);
}

// The GPU's global timer in nanoseconds (the simulator provides its own, the host's clock).
#if !defined(OPL_CUDASIM)
__device__ __forceinline__ unsigned long long opl_globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif

#if defined(OPL_CUDASIM)
// tests/cudasim (the CPU simulator of the driver) provides opl_f32_to_bf16, opl_pack_bf16x2,
// opl_mma_bf16 and the ldmatrix loads as warp-collective C++ with the same fragment layouts,
// and the cp.async copies (landing at issue in some blocks and at the wait in others: the
// earliest and the latest the hardware may).
#elif __CUDA_ARCH__ >= 800
__device__ __forceinline__ opl_bf16 opl_f32_to_bf16(float f) {
    opl_bf16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Two floats as a bf16x2 register: `lo` in the low half (the lower column/row index).
__device__ __forceinline__ unsigned opl_pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c += A·B for one m16n8k16 tile: A row-major 16×16 (4 regs), B column-major 16×8 (2 regs).
__device__ __forceinline__ void opl_mma_bf16(float c[4], unsigned a0, unsigned a1, unsigned a2,
                                             unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned opl_smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// ldmatrix.x4: four 8×8 bf16 matrices from shared memory; lanes 8i..8i+7 give the addresses of
// matrix i's rows (16-byte aligned). Lane (g = lane/4, t = lane%4) receives in r[i] row g,
// columns 2t and 2t+1 of matrix i (the lower column in the low half).
__device__ __forceinline__ void opl_ldmatrix_x4(unsigned r[4], const opl_bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(opl_smem_addr(row)));
}

// The same, each matrix transposed: r[i] holds rows 2t and 2t+1 (low half first) of column g.
__device__ __forceinline__ void opl_ldmatrix_x4_trans(unsigned r[4], const opl_bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(opl_smem_addr(row)));
}

// cp.async: 16 bytes from global to shared memory without passing through registers; with
// `valid` false the 16 shared bytes are zero-filled and nothing is read. Copies issued since the
// last commit form a group; opl_cp_async_wait<N> waits until at most N groups are in flight.
__device__ __forceinline__ void opl_cp_async16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(opl_smem_addr(smem)),
                 "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void opl_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void opl_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
