// GEMM C[m×n] = A[m×k]·B[k×n], f32 row-major.
// naive: one thread per C element, a dot product down a column of B.
extern "C" __global__ void gemm_naive(float* C, const float* A, const float* B, int m, int n, int k) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    float s = 0.0f;
    for (int p = 0; p < k; ++p) s += A[(long long)row * k + p] * B[(long long)p * n + col];
    C[(long long)row * n + col] = s;
}

// tiled: 64×64 C tile per block of 256 threads, each thread a 4×4 register tile; A and B tiles
// of depth 16 staged in shared memory. Launch with blockDim (16, 16), grid (ceil(n/64), ceil(m/64)).
#define GT 64
#define GK 16
extern "C" __global__ void gemm_tiled(float* C, const float* A, const float* B, int m, int n, int k) {
    __shared__ float As[GK][GT + 1];
    __shared__ float Bs[GK][GT];
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    int row0 = blockIdx.y * GT, col0 = blockIdx.x * GT;
    float acc[4][4] = {};
    for (int p0 = 0; p0 < k; p0 += GK) {
        for (int e = tid; e < GT * GK; e += 256) {
            int r = e / GK, c = e % GK;  // A tile: GT rows × GK cols, stored transposed
            int gr = row0 + r, gc = p0 + c;
            As[c][r] = (gr < m && gc < k) ? A[(long long)gr * k + gc] : 0.0f;
            int br = e / GT, bc = e % GT;  // B tile: GK rows × GT cols
            int gbr = p0 + br, gbc = col0 + bc;
            Bs[br][bc] = (gbr < k && gbc < n) ? B[(long long)gbr * n + gbc] : 0.0f;
        }
        __syncthreads();
        for (int p = 0; p < GK; ++p) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i) a[i] = As[p][ty * 4 + i];
            for (int j = 0; j < 4; ++j) b[j] = Bs[p][tx * 4 + j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < m && c < n) C[(long long)r * n + c] = acc[i][j];
        }
}
