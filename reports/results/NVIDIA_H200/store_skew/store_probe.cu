// Store-rate probe (store_probe.py): one block per BM x BN tile of a float32 C (row-major, N columns), 256 threads, a warp per row at a time.
// values: row * 7 + col (exact in float for these sizes)
extern "C" __global__ void scalar_tile(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int c0 = tn * BN, c1 = min(c0 + BN, N);
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    float* row = C + (long long)r * N;
    for (int c = c0 + lane; c < c1; c += 32) row[c] = (float)(r * 7 + c);
  }
}
// each row's segment: scalar head to a 16-byte boundary, float4 body, scalar tail
extern "C" __global__ void vector_tile(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int c0 = tn * BN, c1 = min(c0 + BN, N);
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    long long e0 = (long long)r * N;
    int a = c0 + (int)((4 - (e0 + c0) % 4) % 4);  // first column on a 16-byte boundary
    if (a > c1) a = c1;
    int b = a + ((c1 - a) / 4) * 4;                // end of the float4 body
    float* row = C + e0;
    if (lane < a - c0) row[c0 + lane] = (float)(r * 7 + c0 + lane);
    if (lane < c1 - b) row[b + lane] = (float)(r * 7 + b + lane);
    for (int c = a + lane * 4; c < b; c += 128) {
      float4 v = make_float4((float)(r * 7 + c), (float)(r * 7 + c + 1), (float)(r * 7 + c + 2), (float)(r * 7 + c + 3));
      *(float4*)(row + c) = v;
    }
  }
}
// the tile's rows shifted so that each row's segment starts on a 128-byte line: every line written by one block
extern "C" __global__ void skewed_vector_tile(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    long long e0 = (long long)r * N;
    int s = (int)(e0 % 32);                         // the row's offset in its line
    int c0 = tn * BN - s, c1 = min(c0 + BN, N);     // the last block of a row takes the rest
    if (tn == gridDim.x - 1) c1 = N;
    if (c0 < 0) c0 = 0;
    int a = c0 + (int)((4 - (e0 + c0) % 4) % 4);
    if (a > c1) a = c1;
    int b = a + ((c1 - a) / 4) * 4;
    float* row = C + e0;
    if (lane < a - c0) row[c0 + lane] = (float)(r * 7 + c0 + lane);
    if (lane < c1 - b) row[b + lane] = (float)(r * 7 + b + lane);
    for (int c = a + lane * 4; c < b; c += 128) {
      float4 v = make_float4((float)(r * 7 + c), (float)(r * 7 + c + 1), (float)(r * 7 + c + 2), (float)(r * 7 + c + 3));
      *(float4*)(row + c) = v;
    }
  }
}
// skewed, scalar: whole lines per block, 4 bytes a lane
extern "C" __global__ void skewed_scalar_tile(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    long long e0 = (long long)r * N;
    int s = (int)(e0 % 32);
    int c0 = tn * BN - s, c1 = min(c0 + BN, N);
    if (tn == gridDim.x - 1) c1 = N;
    if (c0 < 0) c0 = 0;
    float* row = C + e0;
    for (int c = c0 + lane; c < c1; c += 32) row[c] = (float)(r * 7 + c);
  }
}
// the tile's own columns, each warp store on one whole 128-byte line (ALIGN 32) or whole 32-byte sectors (ALIGN 8):
// only the first and last piece of a row's segment partial, shared with the neighbouring block
template <int ALIGN>
__device__ void aligned_pieces(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int c0 = tn * BN, c1 = min(c0 + BN, N);
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    long long e0 = (long long)r * N;
    int L0 = c0 - (int)((e0 + c0) % ALIGN);
    float* row = C + e0;
    for (int c = L0 + lane; c < c1; c += 32) if (c >= c0) row[c] = (float)(r * 7 + c);
  }
}
extern "C" __global__ void lines_tile(float* C, int M, int N, int BM, int BN) { aligned_pieces<32>(C, M, N, BM, BN); }
extern "C" __global__ void sectors_tile(float* C, int M, int N, int BM, int BN) { aligned_pieces<8>(C, M, N, BM, BN); }
// skewed by sectors only: each row's segment starts on a 32-byte sector (a shift of 0-7 columns)
extern "C" __global__ void skewed_sector_tile(float* C, int M, int N, int BM, int BN) {
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = tm * BM + warp; r < min(tm * BM + BM, M); r += warps) {
    long long e0 = (long long)r * N;
    int s = (int)(e0 % 8);
    int c0 = tn * BN - s, c1 = min(c0 + BN, N);
    if (tn == gridDim.x - 1) c1 = N;
    if (c0 < 0) c0 = 0;
    float* row = C + e0;
    for (int c = c0 + lane; c < c1; c += 32) row[c] = (float)(r * 7 + c);
  }
}
// a short-K product C = A B (fp32, row-major, K <= 32) whose blocks own whole sectors of C: 8 warps, warp w the rows
// w, w+8, .., w+56 of a 64-row block (one shift s per warp: rows 8 apart start at the same offset in their sector),
// lane l the columns tile*128 - s + l + 32 j, j < 4; B's piece 8 columns wider than the tile, in shared memory.
extern "C" __global__ void __launch_bounds__(256) skew_gemm(const float* A, const float* B, float* C, int M, int N, int K, int skew) {
  __shared__ float As[32][65];
  __shared__ float Bs[32][136];
  int tn = blockIdx.x, tm = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int row0 = tm * 64, col0 = tn * 128 - 8;
  for (int i = threadIdx.x; i < 64 * K; i += 256) {
    int r = i / K, k = i % K;
    As[k][r] = (row0 + r < M) ? A[(long long)(row0 + r) * K + k] : 0.f;
  }
  for (int i = threadIdx.x; i < K * 136; i += 256) {
    int k = i / 136, c = i % 136;
    int gc = col0 + c;
    Bs[k][c] = (gc >= 0 && gc < N) ? B[(long long)k * N + gc] : 0.f;
  }
  __syncthreads();
  int s = skew ? (int)(((long long)(row0 + warp) * N) % 8) : 0;
  float acc[8][4];
  #pragma unroll
  for (int i = 0; i < 8; i++)
    #pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
  for (int k = 0; k < K; k++) {
    float a[8], b[4];
    #pragma unroll
    for (int i = 0; i < 8; i++) a[i] = As[k][warp + 8 * i];
    #pragma unroll
    for (int j = 0; j < 4; j++) b[j] = Bs[k][8 - s + lane + 32 * j];
    #pragma unroll
    for (int i = 0; i < 8; i++)
      #pragma unroll
      for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
  bool last = tn == gridDim.x - 1;
  #pragma unroll
  for (int i = 0; i < 8; i++) {
    int r = row0 + warp + 8 * i;
    if (r >= M) break;
    float* row = C + (long long)r * N;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      int c = tn * 128 - s + lane + 32 * j;
      if (c >= 0 && c < N) row[c] = acc[i][j];
    }
  }
}
