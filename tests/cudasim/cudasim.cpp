// cudasim: a CPU stand-in for the CUDA driver library (libcuda.so), for tests only.
//
// Why: most machines that build and test opledger have no GPU, yet its CUDA backend (cudarc
// calls, launch shapes, argument order, buffer sizes, graph capture, event timing) and its
// kernels (indexing, shared memory, warp shuffles, the bf16 mma fragment layouts) must be
// exercised. This library implements the part of the driver API that cudarc uses, and runs
// the *same* kernel sources
// (crates/backend/src/cuda/kernels/*.cu, included below) as C++: every CUDA thread is a fiber, a block's
// fibers run on one OS thread and switch at __syncthreads and warp collectives, so the kernels'
// synchronisation is honoured exactly (a barrier that not all threads reach is reported as a
// deadlock, not hidden), and each warp runs ahead to its next barrier before the next warp
// starts (run_block), so a missing barrier changes results. NVRTC still compiles every module for real; the simulator checks that
// each requested kernel is in the loaded image, then runs its C++ twin.
//
// What it cannot tell: anything about speed (times are the CPU's), or a misreading of the PTX
// fragment layouts shared by the kernels and opl_mma_bf16 below (both follow the PTX ISA's
// m16n8k16 tables). Device memory is host memory with a guard page after every allocation, so a
// kernel writing or reading past the end of a buffer stops the process with a message.
//
// Built by tests/cudasim.rs:  g++ -std=c++17 -O2 -shared -fPIC -fno-strict-aliasing
//   -fvisibility=hidden -I crates/backend/src/cuda/kernels tests/cudasim/cudasim.cpp -o DIR/libcuda.so

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <tuple>
#include <unistd.h>
#include <utility>
#include <vector>

#define OPL_API extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------------
// The CUDA dialect the kernels use, as C++.

struct opl_dim3 {
    unsigned x, y, z;
};
struct float4 {
    float x, y, z, w;
};
struct uint4 {
    unsigned x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static opl_dim3 threadIdx, blockIdx, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)
#define __CUDA_ARCH__ 900
#define OPL_CUDASIM 1

// glibc declares its own __expf; the kernels get the fast-math exp under that name.
static inline float opl_sim_expf(float x) { return expf(x); }
#define __expf opl_sim_expf
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

namespace sim {

// ---- fibers ----
// x86-64 System V context switch: saves the callee-saved registers on the current stack, stores
// the stack pointer in *save, and resumes the context whose stack pointer is `to`.
extern "C" void opl_sim_switch(void** save, void* to);
asm(R"(
    .text
    .p2align 4
    .type opl_sim_switch,@function
opl_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size opl_sim_switch, .-opl_sim_switch
)");

constexpr size_t STACK_BYTES = 256 * 1024;
constexpr size_t PAGE = 4096;

// One cp.async copy: 16 bytes from `src` (or zeros when null) to `dst`.
struct AsyncCopy {
    void* dst;
    const void* src;
};

struct Fiber {
    void* sp = nullptr;
    char* stack = nullptr;  // lowest usable byte (a PROT_NONE guard page lies below it)
    bool done = false;
    // cp.async copies of this thread: the open group, then committed groups oldest first. In
    // half of the blocks they are performed only when waited for (the latest the hardware may
    // complete them: a read of shared memory before the wait sees the old contents), in the
    // other half at once (the earliest: a copy into a buffer other warps still read lands
    // while they read it).
    std::vector<AsyncCopy> open_group;
    std::vector<std::vector<AsyncCopy>> groups;
};

struct Warp {
    unsigned live = 0, arrived = 0;
    uint64_t gen = 0;
    uint32_t buf[32][6];  // one lane's operands of a collective (shuffle value, mma fragments)
};

static std::vector<Fiber> fibers;
static void* sched_sp = nullptr;
static unsigned cur = 0;
static const std::function<void()>* body = nullptr;
static uint64_t progress = 0;  // arrivals, releases and exits: deadlock detection
static unsigned block_live = 0, block_arrived = 0;
static uint64_t block_gen = 0;
static std::vector<Warp> warps;
static bool copies_early = false;      // cp.async copies land at issue (else at the wait)
static std::string fault;              // first error found in a launch ("" when none)
static const char* running = nullptr;  // the kernel being simulated, for fault messages

static void fail(const std::string& what) {
    if (fault.empty()) fault = what;
}

static void set_thread(unsigned tid) {
    threadIdx.x = tid % blockDim.x;
    threadIdx.y = (tid / blockDim.x) % blockDim.y;
    threadIdx.z = tid / (blockDim.x * blockDim.y);
}

static void yield() { opl_sim_switch(&fibers[cur].sp, sched_sp); }

// __syncthreads: every live thread of the block arrives before any leaves.
static void sync_block() {
    uint64_t gen = block_gen;
    ++progress;
    if (++block_arrived == block_live) {
        block_arrived = 0;
        ++block_gen;
        return;
    }
    while (block_gen == gen) yield();
}

static Warp& my_warp() { return warps[cur / 32]; }
static unsigned my_lane() { return cur % 32; }

// A warp-collective rendezvous: every live lane of the warp arrives before any leaves.
static void sync_warp(Warp& w) {
    uint64_t gen = w.gen;
    ++progress;
    if (++w.arrived == w.live) {
        w.arrived = 0;
        ++w.gen;
        return;
    }
    while (w.gen == gen) yield();
}

static void check_full_warp(unsigned mask, const char* what) {
    Warp& w = my_warp();
    if (mask != 0xffffffffu || w.live != 32)
        fail(std::string(what) + " with mask " + std::to_string(mask) + " in a warp of " +
             std::to_string(w.live) + " live threads (the kernels assume full warps)");
}

static void perform(const std::vector<AsyncCopy>& group) {
    for (const AsyncCopy& c : group) {
        if (c.src) memcpy(c.dst, c.src, 16);
        else memset(c.dst, 0, 16);
    }
}

static void fiber_main() {
    (*body)();
    Fiber& f = fibers[cur];
    if (!f.open_group.empty() || !f.groups.empty())
        fail("a thread exited with cp.async copies not waited for");
    f.done = true;
    ++progress;
    // An exited thread no longer counts at barriers (as on the hardware).
    if (--block_live > 0 && block_arrived == block_live) {
        block_arrived = 0;
        ++block_gen;
    }
    Warp& w = my_warp();
    if (--w.live > 0 && w.arrived == w.live) {
        w.arrived = 0;
        ++w.gen;
    }
    opl_sim_switch(&f.sp, sched_sp);
    abort();  // a finished fiber is never resumed
}

static void start_fiber(Fiber& f) {
    if (!f.stack) {
        void* m = mmap(nullptr, STACK_BYTES + PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("cudasim: mmap of a fiber stack");
            abort();
        }
        mprotect(m, PAGE, PROT_NONE);  // stack overflow faults instead of corrupting memory
        f.stack = static_cast<char*>(m) + PAGE;
    }
    uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + STACK_BYTES) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                                // fiber_main's return address (never used)
    *--sp = reinterpret_cast<void*>(&fiber_main);   // where opl_sim_switch's `ret` goes
    for (int i = 0; i < 6; ++i) *--sp = nullptr;    // rbp rbx r12 r13 r14 r15
    f.sp = sp;
    f.done = false;
    f.open_group.clear();
    f.groups.clear();
}

// Runs one block to completion; false on a deadlock.
//
// The schedule is a legal but adversarial one, so that a missing __syncthreads changes results
// instead of hiding: each warp in turn runs as far as it can — its lanes round-robin through
// their shuffles and mma collectives — until every lane waits at a block barrier (or is done);
// only then does the next warp start. A warp thus races as far ahead of the others as a barrier
// lets it, as a fast warp can on the hardware. Warps go in order in even blocks and in reverse
// order in odd ones, so that unsynchronised data flowing either way shows up.
static bool run_block(unsigned threads, bool reverse) {
    if (fibers.size() < threads) fibers.resize(threads);
    for (unsigned i = 0; i < threads; ++i) start_fiber(fibers[i]);
    block_live = threads;
    block_arrived = 0;
    warps.assign((threads + 31) / 32, Warp{});
    for (unsigned w = 0; w < warps.size(); ++w) warps[w].live = std::min(32u, threads - 32 * w);
    unsigned live = threads;
    const unsigned n_warps = (unsigned)warps.size();
    while (live > 0) {
        uint64_t before = progress;
        for (unsigned k = 0; k < n_warps; ++k) {
            unsigned w = reverse ? n_warps - 1 - k : k;
            unsigned first = 32 * w, last = std::min(threads, first + 32);
            for (;;) {  // until no lane of this warp can move
                uint64_t warp_before = progress;
                for (unsigned i = first; i < last; ++i) {
                    if (fibers[i].done) continue;
                    cur = i;
                    set_thread(i);
                    opl_sim_switch(&sched_sp, fibers[i].sp);
                    if (fibers[i].done) --live;
                }
                if (progress == warp_before) break;
            }
        }
        if (live > 0 && progress == before) {
            fail("deadlock in block (" + std::to_string(blockIdx.x) + "," +
                 std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + "): " +
                 std::to_string(live) +
                 " threads wait at a barrier or warp collective that the others never reach");
            return false;
        }
    }
    return true;
}

// Runs a whole grid; "" or the fault.
static std::string run_grid(const std::function<void()>& f, opl_dim3 grid, opl_dim3 block,
                            const char* name) {
    fault.clear();
    running = name;
    body = &f;
    gridDim = grid;
    blockDim = block;
    unsigned threads = block.x * block.y * block.z;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = {x, y, z};
                unsigned linear = (z * grid.y + y) * grid.x + x;
                copies_early = (linear >> 1) & 1;  // blocks 0, 1: late; 2, 3: early; ...
                if (!run_block(threads, linear & 1) || !fault.empty()) {
                    running = nullptr;
                    return fault;
                }
            }
    running = nullptr;
    return fault;
}

template <class T>
static T shuffle(unsigned mask, T v, unsigned src, const char* what) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    check_full_warp(mask, what);
    Warp& w = my_warp();
    memcpy(&w.buf[my_lane()][0], &v, 4);
    sync_warp(w);
    T r;
    memcpy(&r, &w.buf[src & 31][0], 4);
    sync_warp(w);  // nobody overwrites buf before every lane has read it
    return r;
}

// Round to nearest even, NaN to the canonical quiet NaN, as cvt.rn.bf16.f32.
static unsigned short to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
}

static float bf16_half(uint32_t reg, unsigned k) {
    uint32_t h = (k & 1) ? (reg >> 16) : (reg & 0xffffu);
    return __uint_as_float(h << 16);
}

}  // namespace sim

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int = 32) {
    return sim::shuffle(mask, v, sim::my_lane() ^ lane_mask, "__shfl_xor_sync");
}
static inline float __shfl_sync(unsigned mask, float v, int src_lane, int = 32) {
    return sim::shuffle(mask, v, src_lane, "__shfl_sync");
}
static inline void __syncthreads() { sim::sync_block(); }

static inline unsigned short opl_f32_to_bf16(float f) { return sim::to_bf16(f); }
static inline unsigned opl_pack_bf16x2(float lo, float hi) {
    return (unsigned)sim::to_bf16(lo) | ((unsigned)sim::to_bf16(hi) << 16);
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as a warp collective, with the PTX ISA's
// fragment layouts (g = lane / 4, t = lane % 4):
//   A 16×16 row-major, 4 regs: reg r holds row g + 8·(r & 1), columns 2t, 2t+1 (+8 when r ≥ 2);
//   B 16×8 column-major, 2 regs: reg r holds rows 2t, 2t+1 (+8 when r = 1) of column g;
//   C 16×8 f32: c[e] is row g + 8·(e ≥ 2), column 2t + (e & 1).
// The lower-indexed element of a pair is the low half of its register.
static inline void opl_mma_bf16(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                unsigned b0, unsigned b1) {
    sim::check_full_warp(0xffffffffu, "mma.sync");
    sim::Warp& w = sim::my_warp();
    unsigned lane = sim::my_lane();
    uint32_t* mine = w.buf[lane];
    mine[0] = a0, mine[1] = a1, mine[2] = a2, mine[3] = a3, mine[4] = b0, mine[5] = b1;
    sim::sync_warp(w);
    unsigned g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {
        unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        double acc = 0.0;  // bf16 products are exact in f32; the sum is rounded once
        for (unsigned k = 0; k < 16; ++k) {
            unsigned a_lane = (row % 8) * 4 + (k % 8) / 2;
            unsigned a_reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            unsigned b_lane = col * 4 + (k % 8) / 2;
            unsigned b_reg = 4 + (k >= 8 ? 1 : 0);
            acc += (double)sim::bf16_half(w.buf[a_lane][a_reg], k) *
                   (double)sim::bf16_half(w.buf[b_lane][b_reg], k);
        }
        c[e] = (float)((double)c[e] + acc);
    }
    sim::sync_warp(w);
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 as a warp collective, per the PTX ISA: lanes
// 8i..8i+7 give the 16-byte-aligned addresses of the rows of matrix i; lane (g, t) receives in
// r[i] row g, elements 2t and 2t+1 of matrix i (low half first), or with .trans column g, rows
// 2t and 2t+1.
static inline void opl_sim_ldmatrix(unsigned r[4], const unsigned short* row, bool trans) {
    sim::check_full_warp(0xffffffffu, trans ? "ldmatrix.trans" : "ldmatrix");
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
        sim::fail("ldmatrix row address not 16-byte aligned");
    sim::Warp& w = sim::my_warp();
    unsigned lane = sim::my_lane();
    memcpy(&w.buf[lane][0], &row, sizeof row);
    sim::sync_warp(w);
    auto row_of = [&](unsigned l) {
        const unsigned short* p;
        memcpy(&p, &w.buf[l][0], sizeof p);
        return p;
    };
    unsigned g = lane >> 2, t = lane & 3;
    for (unsigned i = 0; i < 4; ++i) {
        unsigned lo, hi;
        if (!trans) {
            const unsigned short* p = row_of(8 * i + g);
            lo = p[2 * t], hi = p[2 * t + 1];
        } else {
            lo = row_of(8 * i + 2 * t)[g], hi = row_of(8 * i + 2 * t + 1)[g];
        }
        r[i] = lo | (hi << 16);
    }
    sim::sync_warp(w);
}
// cp.async.cg.shared.global (16 bytes, zero-filled when !valid), commit_group and wait_group.
static inline void opl_cp_async16(void* smem, const void* gmem, bool valid) {
    if (reinterpret_cast<uintptr_t>(smem) % 16 || reinterpret_cast<uintptr_t>(gmem) % 16)
        sim::fail("cp.async of 16 bytes with an address not 16-byte aligned");
    sim::AsyncCopy c{smem, valid ? gmem : nullptr};
    if (sim::copies_early) sim::perform({c});
    else sim::fibers[sim::cur].open_group.push_back(c);
}
static inline void opl_cp_async_commit() {
    sim::Fiber& f = sim::fibers[sim::cur];
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
}
template <int N>
static inline void opl_cp_async_wait() {
    sim::Fiber& f = sim::fibers[sim::cur];
    while (f.groups.size() > (size_t)N) {
        sim::perform(f.groups.front());
        f.groups.erase(f.groups.begin());
    }
}

static inline void opl_ldmatrix_x4(unsigned r[4], const unsigned short* row) {
    opl_sim_ldmatrix(r, row, false);
}
static inline void opl_ldmatrix_x4_trans(unsigned r[4], const unsigned short* row) {
    opl_sim_ldmatrix(r, row, true);
}

// ---------------------------------------------------------------------------------------------
// The GPU's global timer: the host's steady clock.
static inline unsigned long long opl_globaltimer_ns() {
    return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// The kernels themselves: the very files NVRTC compiles (common.cuh first, as nvrtc.rs does).

#include "common.cuh"
#include "elementwise.cu"
#include "rows.cu"
#include "gemm.cu"
#include "attention.cu"
#include "attention_bf16.cu"
#include "launch.cu"
#include "probe.cu"
#include "add_rmsnorm.cu"
// A user's kernel, as a spec's `cuda:` side names it (examples/cuda/).
#include "../../examples/cuda/bias_gelu.cu"
// Cheating user's kernels (tests/cudasim.rs): one writes only on its first launch, one answers
// from a table of earlier launches' results, one keeps its results keyed by its inputs.
#include "first_launch_only.cu"
#include "cached_result.cu"
#include "memo_gemm.cu"

namespace sim {

// ---- kernel registry: name → a binder that copies the launch's arguments ----

using Bound = std::function<void()>;

template <class... A, size_t... I>
static Bound bind_args(void (*k)(A...), void** params, std::index_sequence<I...>) {
    std::tuple<std::decay_t<A>...> args{*static_cast<std::decay_t<A>*>(params[I])...};
    return [k, args]() { std::apply(k, args); };
}

struct Kernel {
    const char* name;
    std::function<Bound(void**)> bind;
    unsigned max_threads;  // __launch_bounds__, or 1024
};

template <class... A>
static Kernel kernel(const char* name, void (*k)(A...), unsigned max_threads = 1024) {
    return Kernel{name,
                  [k](void** params) {
                      return bind_args(k, params, std::index_sequence_for<A...>{});
                  },
                  max_threads};
}

#define OPL_K(name, ...) kernel(#name, &name, ##__VA_ARGS__)
static const std::vector<Kernel>& registry() {
    static const std::vector<Kernel> r = {
        OPL_K(ew_chain),        OPL_K(chain_affine),
        OPL_K(probe_copy),      OPL_K(probe_flush_read),  OPL_K(probe_fma),         OPL_K(probe_mma_bf16),
        OPL_K(opledger_marker),  OPL_K(opledger_hold),
        OPL_K(gemm_naive),      OPL_K(gemm_tiled),        OPL_K(row_square),
        OPL_K(row_scale_by),    OPL_K(row_sub),           OPL_K(row_exp_sub),
        OPL_K(row_div),         OPL_K(row_mul_weight),    OPL_K(row_affine),
        OPL_K(row_mean),        OPL_K(row_mean_sq),       OPL_K(row_sum),
        OPL_K(row_max),         OPL_K(row_rsqrt),         OPL_K(rmsnorm_fused),
        OPL_K(layernorm_fused), OPL_K(softmax_fused),     OPL_K(attn_scores),
        OPL_K(attn_softmax_rows), OPL_K(attn_pv),         OPL_K(flash_attn_f32, 128),
        OPL_K(attn_scores_bf16), OPL_K(attn_softmax_rows_bf16), OPL_K(attn_pv_bf16),
        OPL_K(flash_attn_bf16, 128),
        OPL_K(add_residual),    OPL_K(rmsnorm_of_sum),    OPL_K(add_rmsnorm_fused),
        OPL_K(bias_gelu_fused),  OPL_K(bias_gelu_first_launch_only), OPL_K(bias_gelu_cached),
        OPL_K(gemm_memo),
    };
    return r;
}

// ---- driver objects ----

struct Launch {
    const Kernel* k;
    opl_dim3 grid, block;
    Bound bound;
};
struct Stream {
    bool capturing = false;
    bool invalidated = false;
    std::vector<Launch> captured;
};
struct Event {
    unsigned flags;
    bool recorded = false;
    double secs = 0.0;
};
struct Module {
    std::string image;
};
struct Graph {
    std::vector<Launch> launches;
};

static std::mutex lock;  // cudarc may call from several threads; the simulator runs one thing
static std::map<uintptr_t, size_t> allocations;  // device pointer → requested bytes
static thread_local void* current_ctx = nullptr;
static thread_local Stream* capturing_here = nullptr;
static int primary_ctx_token = 0;

// Device memory: host pages, the allocation placed so that its (256-byte rounded) end touches a
// PROT_NONE page, so that running past the end of a buffer faults at once.
static uintptr_t device_alloc(size_t bytes) {
    size_t rounded = (std::max<size_t>(bytes, 1) + 255) & ~size_t(255);
    size_t pages = (rounded + PAGE - 1) / PAGE;
    void* m = mmap(nullptr, (pages + 1) * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    char* base = static_cast<char*>(m);
    mprotect(base + pages * PAGE, PAGE, PROT_NONE);
    uintptr_t p = reinterpret_cast<uintptr_t>(base + pages * PAGE - rounded);
    allocations[p] = bytes;
    return p;
}

static bool device_free(uintptr_t p) {
    auto it = allocations.find(p);
    if (it == allocations.end()) return false;
    size_t rounded = (std::max<size_t>(it->second, 1) + 255) & ~size_t(255);
    size_t pages = (rounded + PAGE - 1) / PAGE;
    char* base = reinterpret_cast<char*>(p) + rounded - pages * PAGE;
    munmap(base, (pages + 1) * PAGE);
    allocations.erase(it);
    return true;
}

// True when [p, p + bytes) lies inside one allocation.
static bool in_device(uintptr_t p, size_t bytes) {
    auto it = allocations.upper_bound(p);
    if (it == allocations.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
}

static double now_secs() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

static void on_segv(int sig, siginfo_t* info, void*) {
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "cudasim: %s at address %p while running kernel %s, block (%u,%u,%u), "
                     "thread (%u,%u,%u): an access past the end of a device buffer (or a fiber "
                     "stack overflow)\n",
                     sig == SIGSEGV ? "segmentation fault" : "bus error", info->si_addr,
                     running ? running : "(none: host code)", blockIdx.x, blockIdx.y, blockIdx.z,
                     threadIdx.x, threadIdx.y, threadIdx.z);
    if (n > 0) (void)!write(2, msg, (size_t)std::min(n, (int)sizeof msg - 1));
    _exit(70);
}

static void install_fault_handler() {
    static bool done = false;
    if (done) return;
    done = true;
    static char alt[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

// Is `name` a symbol of the loaded image (CUBIN string table or a PTX .entry)?
static bool image_has(const std::string& image, const std::string& name) {
    if (image.compare(0, 4, "\x7f" "ELF") == 0) {
        std::string needle = name + std::string(1, '\0');
        for (size_t at = image.find(needle); at != std::string::npos;
             at = image.find(needle, at + 1))
            if (at == 0 || image[at - 1] == '\0' || image[at - 1] == '.') return true;
        return false;
    }
    return image.find(".entry " + name + "(") != std::string::npos;
}

// The byte length of an ELF64 image (its section or program header table ends last).
static size_t elf_size(const unsigned char* p) {
    uint64_t shoff, phoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, p + 0x20, 8);
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&phentsize, p + 0x36, 2);
    memcpy(&phnum, p + 0x38, 2);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    return std::max<uint64_t>(shoff + (uint64_t)shnum * shentsize,
                              phoff + (uint64_t)phnum * phentsize);
}

// A fault leaves the context unusable, as on a GPU: every later guarded call returns it.
static int sticky = 0;

// CUDASIM_TRACE=FILE: one line per launch, event record and synchronisation, in call order
// (`launch NAME`, `record`, `ctx_sync`, `stream_sync`, `event_sync`): what the tests read to check
// the order of a timed sample's calls, which the simulator's synchronous execution cannot show
// in its times.
static void trace(const char* what, const char* name = nullptr) {
    static FILE* out = [] {
        const char* path = getenv("CUDASIM_TRACE");
        return path && *path ? fopen(path, "a") : nullptr;
    }();
    if (!out) return;
    if (name)
        fprintf(out, "%s %s\n", what, name);
    else
        fprintf(out, "%s\n", what);
    fflush(out);
}

static int execute(const Launch& l) {
    trace("launch", l.k->name);
    // CUDASIM_FAULT_KERNEL=name: that kernel faults as an access to an illegal address would.
    const char* fault = getenv("CUDASIM_FAULT_KERNEL");
    if (fault && strcmp(fault, l.k->name) == 0) {
        fprintf(stderr, "cudasim: kernel %s: an illegal address (CUDASIM_FAULT_KERNEL)\n", l.k->name);
        sticky = 700;  // CUDA_ERROR_ILLEGAL_ADDRESS
        return sticky;
    }
    std::string f = run_grid(l.bound, l.grid, l.block, l.k->name);
    if (!f.empty()) {
        fprintf(stderr, "cudasim: kernel %s failed: %s\n", l.k->name, f.c_str());
        sticky = 719;  // CUDA_ERROR_LAUNCH_FAILED
        return sticky;
    }
    return 0;
}

// A call that synchronises with or copies on a stream under capture invalidates the capture.
static bool capture_violation(Stream* s) {
    Stream* c = s && s->capturing ? s : capturing_here;
    if (!c) return false;
    c->invalidated = true;
    return true;
}

}  // namespace sim

// ---------------------------------------------------------------------------------------------
// The driver API (the subset cudarc calls for opledger). CUresult codes as in cuda.h.

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
using sim::Event;
using sim::Graph;
using sim::Module;
using sim::Stream;

enum : CUresult {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_IMAGE = 200,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    CAPTURE_UNSUPPORTED = 900,
    CAPTURE_INVALIDATED = 901,
};

#define GUARD                                   \
    std::lock_guard<std::mutex> guard(sim::lock); \
    if (sim::sticky) return sim::sticky

OPL_API CUresult cuInit(unsigned) {
    sim::install_fault_handler();
    return OK;
}
OPL_API CUresult cuDriverGetVersion(int* v) {
    if (!v) return INVALID_VALUE;
    *v = 13000;
    return OK;
}
OPL_API CUresult cuDeviceGetCount(int* n) {
    if (!n) return INVALID_VALUE;
    *n = 1;
    return OK;
}
OPL_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    if (!d || ordinal != 0) return INVALID_VALUE;
    *d = 0;
    return OK;
}
OPL_API CUresult cuDeviceGetName(char* name, int len, CUdevice) {
    if (!name || len <= 0) return INVALID_VALUE;
    snprintf(name, (size_t)len, "opledger cudasim CPU emulation");
    return OK;
}
OPL_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
    if (!bytes) return INVALID_VALUE;
    *bytes = size_t(8) << 30;
    return OK;
}
OPL_API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice) {
    if (!v) return INVALID_VALUE;
    switch (attr) {
        case 1: *v = 1024; break;           // MAX_THREADS_PER_BLOCK
        case 8: *v = 48 * 1024; break;      // MAX_SHARED_MEMORY_PER_BLOCK
        case 10: *v = 32; break;            // WARP_SIZE
        case 16: *v = 2; break;             // MULTIPROCESSOR_COUNT
        case 38: *v = 4 << 20; break;       // L2_CACHE_SIZE
        case 75: *v = 9; break;             // COMPUTE_CAPABILITY_MAJOR
        case 76: *v = 0; break;             // COMPUTE_CAPABILITY_MINOR
        case 97: *v = 227 * 1024; break;    // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (sm_90)
        case 115: *v = 1; break;            // MEMORY_POOLS_SUPPORTED: cudarc then allocates
                                            // with cuMemAllocAsync, as on an H200
        default: *v = 0;
    }
    return OK;
}
OPL_API CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice) {
    if (!ctx) return INVALID_VALUE;
    *ctx = &sim::primary_ctx_token;
    return OK;
}
OPL_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return OK; }
OPL_API CUresult cuCtxSetCurrent(void* ctx) {
    sim::current_ctx = ctx;
    return OK;
}
OPL_API CUresult cuCtxGetCurrent(void** ctx) {
    if (!ctx) return INVALID_VALUE;
    *ctx = sim::current_ctx;
    return OK;
}
OPL_API CUresult cuCtxSynchronize() {
    GUARD;
    sim::trace("ctx_sync");
    return sim::capture_violation(nullptr) ? CAPTURE_UNSUPPORTED : OK;
}
OPL_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
    GUARD;
    size_t used = 0;
    for (auto& a : sim::allocations) used += a.second;
    size_t total = size_t(8) << 30;
    if (free_bytes) *free_bytes = used < total ? total - used : 0;
    if (total_bytes) *total_bytes = total;
    return OK;
}

// ---- streams ----
OPL_API CUresult cuStreamCreate(Stream** s, unsigned) {
    if (!s) return INVALID_VALUE;
    *s = new Stream();
    return OK;
}
OPL_API CUresult cuStreamDestroy_v2(Stream* s) {
    delete s;
    return OK;
}
OPL_API CUresult cuStreamSynchronize(Stream* s) {
    GUARD;
    sim::trace("stream_sync");
    return sim::capture_violation(s) ? CAPTURE_UNSUPPORTED : OK;
}
OPL_API CUresult cuStreamWaitEvent(Stream*, Event*, unsigned) { return OK; }
OPL_API CUresult cuStreamBeginCapture_v2(Stream* s, int) {
    GUARD;
    if (!s) return CAPTURE_UNSUPPORTED;  // the legacy stream cannot be captured
    if (s->capturing) return INVALID_VALUE;
    s->capturing = true;
    s->invalidated = false;
    s->captured.clear();
    sim::capturing_here = s;
    return OK;
}
OPL_API CUresult cuStreamEndCapture(Stream* s, Graph** g) {
    GUARD;
    if (!s || !g || !s->capturing) return INVALID_VALUE;
    s->capturing = false;
    sim::capturing_here = nullptr;
    if (s->invalidated) {
        *g = nullptr;
        return CAPTURE_INVALIDATED;
    }
    *g = new Graph{std::move(s->captured)};
    s->captured.clear();
    return OK;
}
OPL_API CUresult cuStreamIsCapturing(Stream* s, int* status) {
    if (!status) return INVALID_VALUE;
    *status = s && s->capturing ? (s->invalidated ? 2 : 1) : 0;
    return OK;
}

// ---- memory ----
OPL_API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
    GUARD;
    if (!p) return INVALID_VALUE;
    if (sim::capturing_here) {  // not allowed under global or thread-local capture
        sim::capturing_here->invalidated = true;
        return CAPTURE_UNSUPPORTED;
    }
    *p = sim::device_alloc(bytes);
    return *p ? OK : OUT_OF_MEMORY;
}
OPL_API CUresult cuMemFree_v2(CUdeviceptr p) {
    GUARD;
    return sim::device_free(p) ? OK : INVALID_VALUE;
}
OPL_API CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, Stream* s) {
    GUARD;
    if (!p) return INVALID_VALUE;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    *p = sim::device_alloc(bytes);
    return *p ? OK : OUT_OF_MEMORY;
}
OPL_API CUresult cuMemFreeAsync(CUdeviceptr p, Stream* s) {
    GUARD;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    return sim::device_free(p) ? OK : INVALID_VALUE;
}
OPL_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, Stream* s) {
    GUARD;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    if (!sim::in_device(dst, n) || (!src && n)) return INVALID_VALUE;
    memcpy(reinterpret_cast<void*>(dst), src, n);
    return OK;
}
OPL_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, Stream* s) {
    GUARD;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    if (!sim::in_device(src, n) || (!dst && n)) return INVALID_VALUE;
    memcpy(dst, reinterpret_cast<const void*>(src), n);
    return OK;
}
OPL_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, Stream* s) {
    GUARD;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    if (!sim::in_device(dst, n) || !sim::in_device(src, n)) return INVALID_VALUE;
    memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
    return OK;
}
OPL_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    return cuMemcpyHtoDAsync_v2(dst, src, n, nullptr);
}
OPL_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
    return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr);
}
OPL_API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, Stream* s) {
    GUARD;
    if (sim::capture_violation(s)) return CAPTURE_UNSUPPORTED;
    if (!sim::in_device(p, n)) return INVALID_VALUE;
    memset(reinterpret_cast<void*>(p), v, n);
    return OK;
}
OPL_API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    return cuMemsetD8Async(p, v, n, nullptr);
}

// ---- events: host clock at record time (execution is synchronous) ----
OPL_API CUresult cuEventCreate(Event** e, unsigned flags) {
    if (!e) return INVALID_VALUE;
    *e = new Event{flags};
    return OK;
}
OPL_API CUresult cuEventDestroy_v2(Event* e) {
    delete e;
    return OK;
}
OPL_API CUresult cuEventRecord(Event* e, Stream*) {
    if (!e) return INVALID_HANDLE;
    e->recorded = true;
    e->secs = sim::now_secs();
    sim::trace("record");
    return OK;
}
OPL_API CUresult cuEventSynchronize(Event* e) {
    if (!e) return INVALID_HANDLE;
    sim::trace("event_sync");
    return OK;
}
OPL_API CUresult cuEventQuery(Event* e) { return e ? OK : INVALID_HANDLE; }
OPL_API CUresult cuEventElapsedTime_v2(float* ms, Event* start, Event* end) {
    if (!ms || !start || !end) return INVALID_VALUE;
    // CU_EVENT_DISABLE_TIMING (2): such events cannot be timed, as on the hardware.
    if ((start->flags & 2) || (end->flags & 2) || !start->recorded || !end->recorded)
        return INVALID_HANDLE;
    *ms = (float)((end->secs - start->secs) * 1e3);
    return OK;
}
OPL_API CUresult cuEventElapsedTime(float* ms, Event* start, Event* end) {
    return cuEventElapsedTime_v2(ms, start, end);
}

// ---- modules and launches ----
OPL_API CUresult cuModuleLoadData(Module** m, const void* image) {
    if (!m || !image) return INVALID_VALUE;
    const unsigned char* p = static_cast<const unsigned char*>(image);
    std::string bytes;
    if (memcmp(p, "\x7f" "ELF", 4) == 0) {
        uint16_t machine;
        memcpy(&machine, p + 0x12, 2);
        if (p[4] != 2 || machine != 190) return INVALID_IMAGE;  // ELF64, EM_CUDA
        bytes.assign(reinterpret_cast<const char*>(p), sim::elf_size(p));
    } else {
        bytes.assign(reinterpret_cast<const char*>(p));
        if (bytes.find(".target sm_") == std::string::npos) return INVALID_IMAGE;
    }
    *m = new Module{std::move(bytes)};
    return OK;
}
OPL_API CUresult cuModuleUnload(Module* m) {
    delete m;
    return OK;
}
OPL_API CUresult cuModuleGetFunction(const sim::Kernel** f, Module* m, const char* name) {
    if (!f || !m || !name) return INVALID_VALUE;
    if (!sim::image_has(m->image, name)) return NOT_FOUND;
    for (const sim::Kernel& k : sim::registry())
        if (strcmp(k.name, name) == 0) {
            *f = &k;
            return OK;
        }
    fprintf(stderr, "cudasim: kernel %s is in the module but not in the simulator's registry\n",
            name);
    return NOT_FOUND;
}
// A function's dynamic shared memory is limited to 48 KiB until it is raised with
// cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES), up to the device's opt-in limit (227 KiB on
// sm_90), as on a GPU: a launch asking for more than the function's limit is refused.
static std::mutex smem_lock;
static std::map<const sim::Kernel*, int>& smem_limits() {
    static std::map<const sim::Kernel*, int> m;
    return m;
}
static unsigned dynamic_smem_limit(const sim::Kernel* f) {
    std::lock_guard<std::mutex> g(smem_lock);
    auto it = smem_limits().find(f);
    return it == smem_limits().end() ? 48 * 1024 : (unsigned)it->second;
}
OPL_API CUresult cuFuncGetAttribute(int* v, int attribute, const sim::Kernel* f) {
    if (!v) return INVALID_VALUE;
    *v = attribute == 8 ? (int)dynamic_smem_limit(f) : 0;  // MAX_DYNAMIC_SHARED_SIZE_BYTES
    return OK;
}
OPL_API CUresult cuFuncSetAttribute(const sim::Kernel* f, int attribute, int value) {
    if (!f) return INVALID_VALUE;
    if (attribute != 8) return OK;
    if (value < 0 || value > 227 * 1024) return INVALID_VALUE;
    std::lock_guard<std::mutex> g(smem_lock);
    smem_limits()[f] = value;
    return OK;
}
OPL_API CUresult cuLaunchKernel(const sim::Kernel* f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes,
                                Stream* s, void** params, void** extra) {
    GUARD;
    if (!f || (!params && !extra)) return INVALID_VALUE;
    if (extra) return INVALID_VALUE;  // opledger passes kernelParams only
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (!gx || !gy || !gz || threads == 0 || threads > f->max_threads || bz > 64 ||
        gy > 65535 || gz > 65535 || shared_bytes > dynamic_smem_limit(f)) {
        fprintf(stderr, "cudasim: invalid launch of %s: grid (%u,%u,%u) block (%u,%u,%u) (at most %u threads), %u B dynamic shared memory\n",
                f->name, gx, gy, gz, bx, by, bz, f->max_threads, shared_bytes);
        return INVALID_VALUE;
    }
    sim::Launch l{f, {gx, gy, gz}, {bx, by, bz}, f->bind(params)};
    if (s && s->capturing) {
        s->captured.push_back(std::move(l));
        return OK;
    }
    if (sim::capture_violation(nullptr)) return CAPTURE_UNSUPPORTED;  // legacy stream
    return sim::execute(l);
}

// ---- graphs ----
OPL_API CUresult cuGraphInstantiateWithFlags(Graph** exec, Graph* g, unsigned long long) {
    if (!exec || !g) return INVALID_VALUE;
    *exec = new Graph(*g);
    return OK;
}
OPL_API CUresult cuGraphUpload(Graph* exec, Stream*) { return exec ? OK : INVALID_VALUE; }
OPL_API CUresult cuGraphLaunch(Graph* exec, Stream* s) {
    GUARD;
    if (!exec) return INVALID_VALUE;
    if (s && s->capturing) return CAPTURE_UNSUPPORTED;
    for (const sim::Launch& l : exec->launches)
        if (CUresult r = sim::execute(l)) return r;
    return OK;
}
OPL_API CUresult cuGraphExecDestroy(Graph* exec) {
    delete exec;
    return OK;
}
OPL_API CUresult cuGraphDestroy(Graph* g) {
    delete g;
    return OK;
}

// ---- errors ----
static const char* error_text(CUresult r) {
    switch (r) {
        case 0: return "CUDA_SUCCESS";
        case 1: return "CUDA_ERROR_INVALID_VALUE";
        case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
        case 200: return "CUDA_ERROR_INVALID_IMAGE";
        case 400: return "CUDA_ERROR_INVALID_HANDLE";
        case 500: return "CUDA_ERROR_NOT_FOUND";
        case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
        case 719: return "CUDA_ERROR_LAUNCH_FAILED";
        case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
        case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
        default: return nullptr;
    }
}
OPL_API CUresult cuGetErrorName(CUresult r, const char** s) {
    if (!s) return INVALID_VALUE;
    *s = error_text(r);
    return *s ? OK : INVALID_VALUE;
}
OPL_API CUresult cuGetErrorString(CUresult r, const char** s) { return cuGetErrorName(r, s); }
