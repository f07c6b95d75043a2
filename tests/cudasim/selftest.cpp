// Self-test of the simulator (tests/cudasim.rs builds and runs it): the checks that make the
// simulated runs meaningful must themselves fail on broken kernels. Prints one line per check
// and exits 0 only when every check behaved.
//
//   1. a block reduction over 256 fiber-threads gives the exact sum (barriers and shuffles work);
//   2. threads waiting at different barriers (block vs warp) are reported as a deadlock;
//   3. a full-mask shuffle in a partial warp is reported; a missing __syncthreads between one
//      warp's shared-memory write and another's read changes the result (the schedule lets a
//      warp run ahead to its next barrier), with the barrier it does not;
//   4. one m16n8k16 mma with fragments loaded per the PTX layout equals the plain product, and
//      so do two with fragments from ldmatrix.x4 (A plain, B transposed, row-major in shared);
//   5. a kernel writing one element past the end of a device buffer stops the process (in a
//      child) with the simulator's message.

#include "cudasim.cpp"

#include <sys/wait.h>

static int failures = 0;
static void check(bool ok, const char* what, const std::string& detail = "") {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    if (!ok) ++failures;
}

static void block_sum_kernel(float* out) {
    __shared__ float scratch[32];
    float s = opl_block_sum((float)(threadIdx.x + 1), scratch);
    if (threadIdx.x == 0) *out = s;
}

// Half of each warp waits at the block barrier while the other half waits for it in a shuffle.
// (An exited thread counts as arrived, as on the hardware, so the halves must not exit.)
static void divergent_barrier_kernel() {
    if ((threadIdx.x & 31) < 16) {
        __syncthreads();
    } else {
        opl_warp_sum(1.0f);
        __syncthreads();
    }
}

// Warp 1 writes a shared value that warp 0 reads: correct only with the barrier between. (Two
// blocks: the warps run in order in one and in reverse order in the other.)
template <bool BARRIER>
static void handoff_kernel(float* out) {
    __shared__ float cell;
    if (threadIdx.x == 0) cell = -1.0f;
    __syncthreads();
    if (threadIdx.x == 32) cell = 42.0f;
    if (BARRIER) __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = cell;
}

static void partial_warp_shuffle_kernel(float* out) {
    out[threadIdx.x] = opl_warp_sum(1.0f);
}

static void mma_kernel(const float* a, const float* b, float* c) {
    // a: 16×16 row-major, b: 16×8 row-major (k × n); fragments gathered per the PTX tables.
    unsigned lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    auto pack = [](float lo, float hi) { return opl_pack_bf16x2(lo, hi); };
    unsigned a0 = pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
    unsigned a1 = pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
    unsigned a2 = pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
    unsigned a3 = pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
    unsigned b0 = pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
    unsigned b1 = pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
    float acc[4] = {0, 0, 0, 0};
    opl_mma_bf16(acc, a0, a1, a2, a3, b0, b1);
    c[g * 8 + 2 * t] = acc[0];
    c[g * 8 + 2 * t + 1] = acc[1];
    c[(g + 8) * 8 + 2 * t] = acc[2];
    c[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// C (16×16) = A (16×16) · B (16×16), both row-major in shared memory, B fragments of the two
// n-tiles from one ldmatrix.x4.trans, A from one ldmatrix.x4.
static void ldmatrix_mma_kernel(const float* a, const float* b, float* c) {
    __shared__ __align__(16) unsigned short As[16][16 + 8];
    __shared__ __align__(16) unsigned short Bs[16][16 + 8];
    unsigned lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    for (unsigned e = lane; e < 256; e += 32) {
        As[e / 16][e % 16] = opl_f32_to_bf16(a[e]);
        Bs[e / 16][e % 16] = opl_f32_to_bf16(b[e]);
    }
    __syncthreads();
    unsigned m = lane >> 3, r = lane & 7;
    unsigned fa[4], fb[4];
    // A: matrix m = rows 8·(m%2).., columns 8·(m/2)..: a0..a3 in mma order.
    opl_ldmatrix_x4(fa, &As[(m & 1) * 8 + r][(m >> 1) * 8]);
    // B: matrix m = rows (k) 8·(m%2).., columns (n) 8·(m/2)..: b0, b1 of n-tile 0, then 1.
    opl_ldmatrix_x4_trans(fb, &Bs[(m & 1) * 8 + r][(m >> 1) * 8]);
    for (unsigned nt = 0; nt < 2; ++nt) {
        float acc[4] = {0, 0, 0, 0};
        opl_mma_bf16(acc, fa[0], fa[1], fa[2], fa[3], fb[2 * nt], fb[2 * nt + 1]);
        for (unsigned e = 0; e < 4; ++e)
            c[(g + (e >= 2 ? 8 : 0)) * 16 + nt * 8 + 2 * t + (e & 1)] = acc[e];
    }
}

static void overrun_kernel(float* buf, int n) {
    for (int i = threadIdx.x; i <= n; i += blockDim.x) buf[i] = 1.0f;  // `<=`: one too many
}

int main() {
    sim::install_fault_handler();
    {
        float out = 0;
        std::string f = sim::run_grid([&] { block_sum_kernel(&out); }, {1, 1, 1}, {256, 1, 1},
                                      "block_sum");
        check(f.empty() && out == 256.0f * 257.0f / 2.0f, "block sum over 256 threads",
              f.empty() ? std::to_string(out) : f);
    }
    {
        std::string f = sim::run_grid([] { divergent_barrier_kernel(); }, {1, 1, 1},
                                      {128, 1, 1}, "divergent");
        check(f.find("deadlock") != std::string::npos, "divergent barrier and shuffle is a deadlock", f);
    }
    {
        float with[2] = {}, without[2] = {};
        std::string f1 = sim::run_grid([&] { handoff_kernel<true>(with); }, {2, 1, 1},
                                       {64, 1, 1}, "handoff");
        std::string f2 = sim::run_grid([&] { handoff_kernel<false>(without); }, {2, 1, 1},
                                       {64, 1, 1}, "handoff");
        check(f1.empty() && f2.empty() && with[0] == 42.0f && with[1] == 42.0f &&
                  (without[0] != 42.0f || without[1] != 42.0f),
              "a missing __syncthreads changes the result",
              "with " + std::to_string(with[0]) + "/" + std::to_string(with[1]) + ", without " +
                  std::to_string(without[0]) + "/" + std::to_string(without[1]));
    }
    {
        float out[48] = {};
        std::string f = sim::run_grid([&] { partial_warp_shuffle_kernel(out); }, {1, 1, 1},
                                      {48, 1, 1}, "partial");
        check(f.find("warp of 16 live threads") != std::string::npos,
              "full-mask shuffle in a partial warp is reported", f);
    }
    {
        // Small integers: exact in bf16 and in the f32 sums.
        float a[256], b[128], c[128] = {}, want[128] = {};
        for (int i = 0; i < 256; ++i) a[i] = (float)((i * 7) % 11 - 5);
        for (int i = 0; i < 128; ++i) b[i] = (float)((i * 5) % 9 - 4);
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 8; ++n)
                for (int k = 0; k < 16; ++k) want[r * 8 + n] += a[r * 16 + k] * b[k * 8 + n];
        std::string f = sim::run_grid([&] { mma_kernel(a, b, c); }, {1, 1, 1}, {32, 1, 1}, "mma");
        bool same = f.empty() && memcmp(c, want, sizeof c) == 0;
        check(same, "mma m16n8k16 equals the plain product", f);
    }
    {
        float a[256], b[256], c[256] = {}, want[256] = {};
        for (int i = 0; i < 256; ++i) {
            a[i] = (float)((i * 7) % 13 - 6);
            b[i] = (float)((i * 3) % 7 - 3);
        }
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 16; ++n)
                for (int k = 0; k < 16; ++k) want[r * 16 + n] += a[r * 16 + k] * b[k * 16 + n];
        std::string f = sim::run_grid([&] { ldmatrix_mma_kernel(a, b, c); }, {1, 1, 1},
                                      {32, 1, 1}, "ldmatrix_mma");
        bool same = f.empty() && memcmp(c, want, sizeof c) == 0;
        check(same, "ldmatrix.x4 (plain and .trans) fragments give the plain product", f);
    }
    {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            int n = 1000;
            uintptr_t p = sim::device_alloc(n * sizeof(float));
            float* buf = reinterpret_cast<float*>(p);
            // 1000 floats = 4000 bytes, rounded to 4096: index 1000..1023 are still in the
            // 256-byte rounding, so overrun by a whole rounded allocation's tail.
            sim::run_grid([&] { overrun_kernel(buf, 1024); }, {1, 1, 1}, {256, 1, 1},
                          "overrun_kernel");
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        check(WIFEXITED(status) && WEXITSTATUS(status) == 70,
              "a write past the end of a device buffer stops the process",
              "child status " + std::to_string(status));
    }
    printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
