// A short-K product on tensor cores (WMMA, fp16 or tf32 inputs, fp32 accumulators and C) whose blocks own whole
// 32-byte sectors of C: a block computes 64 rows x 144 columns (its 128-wide tile and 8 columns each side), stages
// them in shared memory, and writes row r's columns tile*128 - s_r .. +128, s_r the row's offset in its sector
// (skew = 0: the tile's own columns, its boundary sectors shared with the neighbours). K <= 32, zero-padded.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

template <typename T> struct Frag;
template <> struct Frag<half> {
  static constexpr int KS = 16;
  typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> A;
  typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> B;
  typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> C;
};
template <> struct Frag<float> {
  static constexpr int KS = 8;
  typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> A;
  typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> B;
  typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> C;
};

template <typename T>
__device__ void tc_skew(const T* A, const T* B, float* C, int M, int N, int K, int skew) {
  constexpr int LA = 40, LB = 152, LC = 148;  // leading dimensions (elements) in shared memory
  __shared__ __align__(128) unsigned char smem[64 * LC * 4];
  T* As = (T*)smem;
  T* Bs = As + 64 * LA;
  float* Cs = (float*)smem;
  int tile = blockIdx.x, row0 = blockIdx.y * 64, col0 = tile * 128 - 8;
  int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < 64 * 32; i += 256) {
    int r = i / 32, k = i % 32;
    As[r * LA + k] = (row0 + r < M && k < K) ? A[(long long)(row0 + r) * K + k] : T(0.f);
  }
  for (int i = tid; i < 32 * 144; i += 256) {
    int k = i / 144, c = i % 144, gc = col0 + c;
    Bs[k * LB + c] = (k < K && gc >= 0 && gc < N) ? B[(long long)k * N + gc] : T(0.f);
  }
  __syncthreads();
  typedef Frag<T> F;
  int mg = warp % 4, n_first = warp < 4 ? 0 : 5, n_count = warp < 4 ? 5 : 4;
  typename F::C acc[5];
  int ksteps = (K + F::KS - 1) / F::KS;
#pragma unroll
  for (int j = 0; j < 5; j++) {
    wmma::fill_fragment(acc[j], 0.f);
    if (j < n_count) {
      for (int kk = 0; kk < ksteps; kk++) {
        typename F::A a; typename F::B b;
        wmma::load_matrix_sync(a, As + mg * 16 * LA + kk * F::KS, LA);
        wmma::load_matrix_sync(b, Bs + kk * F::KS * LB + (n_first + j) * 16, LB);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
  }
  __syncthreads();  // every warp has read A and B: the area becomes C's
#pragma unroll
  for (int j = 0; j < 5; j++)
    if (j < n_count) wmma::store_matrix_sync(Cs + mg * 16 * LC + (n_first + j) * 16, acc[j], LC, wmma::mem_row_major);
  __syncthreads();
  for (int rl = warp; rl < 64; rl += 8) {
    int r = row0 + rl;
    if (r >= M) break;
    int s = skew ? (int)(((long long)r * N) % 8) : 0;
    float* row = C + (long long)r * N;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int c = tile * 128 - s + lane + 32 * j;
      if (c >= 0 && c < N) row[c] = Cs[rl * LC + 8 - s + lane + 32 * j];
    }
  }
}
extern "C" __global__ void __launch_bounds__(256) tc_skew_fp16(const half* A, const half* B, float* C, int M, int N, int K, int skew) {
  tc_skew<half>(A, B, C, M, N, K, skew);
}
extern "C" __global__ void __launch_bounds__(256) tc_skew_tf32(const float* A, const float* B, float* C, int M, int N, int K, int skew) {
  tc_skew<float>(A, B, C, M, N, K, skew);
}
