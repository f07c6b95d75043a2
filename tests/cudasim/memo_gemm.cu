// A cheating `cuda:` kernel for the tests: a naive GEMM that keeps each element's result in a
// device-side table with a key sampled from its row of A and its column of B (one value in
// sixteen), and copies the kept result when the key matches. Its first launch on new inputs
// computes (and is right); every later launch on the same inputs reads a sixteenth of them and
// copies. The outputs are always right: only the time of the first launch on new inputs — the
// checked run — tells.
#define OPL_MEMO_ELEMENTS (1 << 16)
__device__ float gemm_memo_value[OPL_MEMO_ELEMENTS];
__device__ float gemm_memo_key[OPL_MEMO_ELEMENTS];
__device__ int gemm_memo_kept[OPL_MEMO_ELEMENTS];

extern "C" __global__ void gemm_memo(float* C, const float* A, const float* B, int m, int n, int k) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    long long e = (long long)row * n + col;
    float key = 0.0f;
    for (int p = 0; p < k; p += 16) key += 3.0f * A[(long long)row * k + p] + B[(long long)p * n + col];
    if (e < OPL_MEMO_ELEMENTS && gemm_memo_kept[e] && gemm_memo_key[e] == key) {
        C[e] = gemm_memo_value[e];
        return;
    }
    float s = 0.0f;
    for (int p = 0; p < k; ++p) s += A[(long long)row * k + p] * B[(long long)p * n + col];
    C[e] = s;
    if (e < OPL_MEMO_ELEMENTS) {
        gemm_memo_value[e] = s;
        gemm_memo_key[e] = key;
        gemm_memo_kept[e] = 1;
    }
}
