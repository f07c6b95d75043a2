// One op of a decode-like launch chain: dst = src·a + b on a small tensor. Eager launches it
// n times; the graph variant captures the same n launches once and replays the graph.
extern "C" __global__ void chain_affine(float* dst, const float* src, float a, float b, long long n) {
    OPL_GRID_STRIDE(i, n) dst[i] = src[i] * a + b;
}
