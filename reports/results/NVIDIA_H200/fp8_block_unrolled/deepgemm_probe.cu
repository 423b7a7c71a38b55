// probe.cu -- standalone benchmark probe for DeepGEMM's SM90 FP8 1D2D block-scaled GEMM
// (deep_gemm::sm90_fp8_gemm_1d2d_impl, deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh)
// running outside PyTorch on an H100/H200 (sm_90a, 132 SMs).
//
//   D[M,N] (bf16) = sum_kb sfa[m,kb] * sfb[n/128,kb] * sum_{k in kb} A[m,k] * B[n,k]
//   A: M x K e4m3 K-major, B: N x K e4m3 K-major ("nt"), kb = 128-wide K blocks.
//
// Everything host-side mirrors DeepGEMM's csrc (commit 54e2261):
//   * heuristic     : csrc/jit_kernels/heuristics/sm90.hpp + common.hpp (get_best_config<SM90ArchSpec>)
//   * tensor maps   : csrc/jit_kernels/impls/runtime_utils.hpp (make_tma_{a,b,cd,sf}_desc, make_tma_2d_desc)
//   * launch        : csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp + csrc/jit/handle.hpp
//   * SF layouts    : csrc/apis/layout.hpp (SFA -> get_mn_major_tma_aligned_tensor; SFB (N/128, K/128) K-major)
//   * compiled dims : fp8_gemm_nt default compiled_dims = "nk" -> SHAPE_M = 0, SHAPE_N = N, SHAPE_K = K
//
// Modes (see README.txt):
//   ./probe all                                   all built-in configurations (one CSV line each)
//   ./probe M N K BLOCK_M BLOCK_N STAGES MC [MCA] one configuration (STAGES 0 = DeepGEMM formula; MC 1|2;
//                                                 MCA default = (BLOCK_M >= BLOCK_N))
//   ./probe heur [M N K [num_sms]]                print DeepGEMM's heuristic reasoning (no GPU needed)
//   ./probe list                                  list the compiled configurations (no GPU needed)
//
// Build parts (see build.sh): by default everything is one translation unit.  With
//   -DPROBE_NUM_PARTS=P -DPROBE_PART=p -DPROBE_WITH_MAIN=0   only table entries with index % P == p are instantiated;
//   -DPROBE_PART=-1 -DPROBE_WITH_MAIN=1                       only main + helpers (no GEMM instantiation).
// Host-only build for the heuristic (no CUDA needed): g++ -std=c++17 -x c++ -DPROBE_HOST_ONLY probe.cu

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PROBE_NUM_PARTS
#define PROBE_NUM_PARTS 1
#endif
#ifndef PROBE_PART
#define PROBE_PART 0
#endif
#ifndef PROBE_WITH_MAIN
#define PROBE_WITH_MAIN 1
#endif

#ifndef PROBE_HOST_ONLY
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp8.h>
#include <cuda_bf16.h>
#if PROBE_PART >= 0
#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>
#endif
#endif

// =====================================================================================================
// Part 1: host-side port of DeepGEMM's SM90 heuristic (Normal GEMM, Kernel1D2D, FP8 A/B, BF16 D, K-major)
// =====================================================================================================
namespace probe {

constexpr int kNumSMsCompiled = 132;       // kNumSMs template argument of every instantiation
constexpr int kSmemCapacity = 232448;      // SM90ArchSpec::smem_capacity
constexpr int kBlockK = 128;               // 128 / get_element_size(MXFP8FP4)
constexpr int kElemAB = 1, kElemCD = 2;    // c10::elementSize(e4m3) / (bf16)

constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
constexpr int align_up(int a, int b) { return ceil_div(a, b) * b; }

// heuristics/utils.hpp: get_swizzle_mode(block_size, elem_size)
constexpr int get_swizzle_mode(int block_size, int elem_size) {
    const int modes[4] = {128, 64, 32, 16};
    for (int i = 0; i < 4; ++ i)
        if ((block_size * elem_size) % modes[i] == 0) return modes[i];
    return -1;
}

struct PipelineConfig { int smem_size; int num_stages; };

// SM90ArchSpec::get_pipeline_config for Kernel1D2D, Normal, bf16 D
constexpr PipelineConfig get_pipeline_config(int k, int block_m, int block_n) {
    constexpr int kNumMaxStages = 16;
    const int smem_cd = align_up(block_m * block_n * kElemCD, 1024);
    const int smem_barriers = kNumMaxStages * 8 * 2;
    const int smem_a_per_stage = block_m * kBlockK * kElemAB;     // load_block_m = block_m
    const int smem_b_per_stage = block_n * kBlockK * kElemAB;     // load_block_n = block_n
    const int smem_sfa_per_stage = align_up(block_m * 4, 128);
    const int smem_sfb_per_stage = 0;                             // only 1D1D
    const int use_uniform_sfb = kBlockK % block_n == 0 ? 1 : 2;
    const int smem_extra_sfb = align_up(ceil_div(k, kBlockK) * 4 * use_uniform_sfb, 8);
    const int smem_tensormap = 0;                                 // only KGroupedContiguous
    const int smem_extra = smem_cd + smem_barriers + smem_extra_sfb + smem_tensormap;
    const int smem_per_stage = smem_a_per_stage + smem_b_per_stage + smem_sfa_per_stage + smem_sfb_per_stage;
    const int s = (kSmemCapacity - smem_extra) / smem_per_stage;
    const int num_stages = s < kNumMaxStages ? s : kNumMaxStages;
    return {smem_extra + num_stages * smem_per_stage, num_stages};
}

struct HLayout { int block_m, block_n, block_k, cluster_m, cluster_n; };
struct HInfo {
    int num_waves, last_wave_util;
    int64_t num_cycles;
    HLayout layout;
    int64_t l1_cycles, l2_cycles; float wave_eff;   // extra (for printing)
};

// SM90ArchSpec::get_layout_candidates (Normal GEMM, Kernel1D2D, bf16 D, block_n_multiple_of = 1)
static std::vector<HLayout> get_layout_candidates(int m, int n, int k, int num_sms) {
    (void) n;
    std::vector<int> block_m_candidates = {64, 128};
    if (m <= 16) block_m_candidates.push_back(16);
    if (m <= 32) block_m_candidates.push_back(32);
    block_m_candidates.push_back(256);                            // cd_dtype != float
    std::vector<int> block_n_candidates;
    const int step = 16;                                          // lcm(16, block_n_multiple_of=1)
    for (int i = step; i <= 192; i += step)                       // Kernel1D2D: end = 192
        block_n_candidates.push_back(i);
    std::vector<HLayout> candidates;
    for (int cluster_m = 1; cluster_m <= 2; ++ cluster_m)
        for (int cluster_n = 1; cluster_n <= 2; ++ cluster_n) {
            if (cluster_m * cluster_n > 2) continue;
            if (num_sms % (cluster_m * cluster_n) != 0) continue;
            for (int block_m: block_m_candidates)
                for (int block_n: block_n_candidates) {
                    const int block_k = kBlockK;
                    if (block_n > block_k and (block_n % (block_n - block_k) != 0 and block_k % (block_n - block_k) != 0))
                        continue;
                    if (block_m > 128 and block_n > 128) continue;
                    const int swizzle_a = get_swizzle_mode(block_k, kElemAB), swizzle_b = get_swizzle_mode(block_k, kElemAB);
                    if (swizzle_a % 64 != 0 or swizzle_b % 64 != 0) continue;
                    const int num_stages = get_pipeline_config(k, block_m, block_n).num_stages;
                    if (num_stages < 3 or (block_m * block_n < 128 * 192 and num_stages < 4)) continue;
                    candidates.push_back({block_m, block_n, block_k, cluster_m, cluster_n});
                }
        }
    return candidates;
}

// SM90ArchSpec::get_layout_info (verbatim arithmetic and types)
static HInfo get_layout_info(int m, int n, int k, int num_sms, const HLayout& layout) {
    const auto num_blocks = ceil_div(m, layout.block_m) * ceil_div(n, layout.block_n) * 1;
    const auto num_waves = ceil_div(num_blocks, num_sms);
    const auto num_last_blocks = num_blocks % num_sms;
    const auto last_wave_util = num_last_blocks == 0 ? num_sms : num_last_blocks;
    const int l2_bandwidth_per_cycle = std::min(64. * num_sms, 8e6 / (1.3e3));
    const int l1_bandwidth_per_cycle = 128 * num_sms;
    const int wgmma_m = 64;
    const int elem_size_ab = kElemAB, elem_size_cd = kElemCD;
    int64_t expected_k = k;
    int64_t num_bytes_l2_ab = expected_k * (layout.block_m / layout.cluster_n + layout.block_n / layout.cluster_m) * elem_size_ab;
    int64_t num_bytes_l1_ab = expected_k * (layout.block_m + layout.block_n) * elem_size_ab;
    int64_t num_bytes_l1_tc = expected_k * (std::max(wgmma_m, layout.block_m) + layout.block_n) * elem_size_ab
                              + layout.block_m * layout.block_n * elem_size_cd;
    int64_t num_bytes_l1_l2_cd = layout.block_m * layout.block_n * elem_size_cd * 1;   // no accumulation
    int64_t num_l2_cycles = (num_bytes_l2_ab + num_bytes_l1_l2_cd) * num_blocks / l2_bandwidth_per_cycle;
    int64_t num_l1_cycles = (num_bytes_l1_ab + num_bytes_l1_tc + num_bytes_l1_l2_cd) * num_blocks / l1_bandwidth_per_cycle;
    float wave_efficiency = static_cast<float>(num_blocks) / (num_waves * num_sms);
    int64_t num_cycles = std::max(num_l1_cycles, num_l2_cycles) / wave_efficiency;
    if (layout.cluster_n * layout.cluster_m > 1 and num_waves <= 1)
        num_cycles = std::numeric_limits<int64_t>::max();
    return {num_waves, last_wave_util, num_cycles, layout, num_l1_cycles, num_l2_cycles, wave_efficiency};
}

static HInfo get_best_layout(int m, int n, int k, int num_sms) {
    const auto candidates = get_layout_candidates(m, n, k, num_sms);
    auto best = get_layout_info(m, n, k, num_sms, candidates[0]);
    for (size_t i = 1; i < candidates.size(); ++ i) {
        const auto info = get_layout_info(m, n, k, num_sms, candidates[i]);
        if (info.num_cycles < best.num_cycles)   // SM90ArchSpec::compare
            best = info;
    }
    return best;
}

// Kernel template args derived from a layout: multicast = cluster_m * cluster_n, on A = cluster_n > 1
static bool is_heuristic_choice(int m, int n, int k, int block_m, int block_n, int mc, int mca) {
    const auto best = get_best_layout(m, n, k, kNumSMsCompiled).layout;
    const int best_mc = best.cluster_m * best.cluster_n;
    const int best_mca = best.cluster_n > 1;
    return best.block_m == block_m and best.block_n == block_n and best_mc == mc and (mc == 1 or best_mca == mca);
}

static void print_heuristic(FILE* f, int m, int n, int k, int num_sms, int top = 8) {
    const auto candidates = get_layout_candidates(m, n, k, num_sms);
    std::vector<HInfo> infos;
    for (const auto& c: candidates) infos.push_back(get_layout_info(m, n, k, num_sms, c));
    const auto best = get_best_layout(m, n, k, num_sms);
    std::vector<HInfo> sorted = infos;
    std::stable_sort(sorted.begin(), sorted.end(), [](const HInfo& a, const HInfo& b) { return a.num_cycles < b.num_cycles; });
    const auto p = get_pipeline_config(k, best.layout.block_m, best.layout.block_n);
    fprintf(f, "# heuristic M=%d N=%d K=%d num_sms=%d: %zu legal candidates; choice block_m=%d block_n=%d cluster_m=%d cluster_n=%d"
               " -> multicast=%d multicast_on_a=%d stages=%d smem=%d swizzle_d=%d math_threads=%d\n",
            m, n, k, num_sms, candidates.size(), best.layout.block_m, best.layout.block_n, best.layout.cluster_m, best.layout.cluster_n,
            best.layout.cluster_m * best.layout.cluster_n, best.layout.cluster_n > 1 ? 1 : 0, p.num_stages, p.smem_size,
            get_swizzle_mode(best.layout.block_n, kElemCD), best.layout.block_m <= 64 ? 128 : 256);
    fprintf(f, "#   why: minimal modeled cycles = max(L1 cycles, L2 cycles) / wave_efficiency (ties: first enumerated wins);"
               " L2 bytes/block = K*(block_m/cluster_n + block_n/cluster_m), cluster>1 disabled if <= 1 wave\n");
    fprintf(f, "#   rank block_m block_n cluster_m cluster_n waves last_wave_util wave_eff l1_cycles l2_cycles num_cycles stages\n");
    for (int i = 0; i < top and i < static_cast<int>(sorted.size()); ++ i) {
        const auto& x = sorted[i];
        fprintf(f, "#   %4d %7d %7d %9d %9d %5d %14d %8.4f %9lld %9lld %10lld %6d\n", i + 1,
                x.layout.block_m, x.layout.block_n, x.layout.cluster_m, x.layout.cluster_n, x.num_waves, x.last_wave_util,
                x.wave_eff, static_cast<long long>(x.l1_cycles), static_cast<long long>(x.l2_cycles),
                static_cast<long long>(x.num_cycles), get_pipeline_config(k, x.layout.block_m, x.layout.block_n).num_stages);
    }
}

// =====================================================================================================
// Part 2: the compile-time configuration table
// =====================================================================================================
struct Cfg { int n, k, block_m, block_n, mc, mca; };

// Per (N, K): fixed block shapes x {multicast 1, multicast 2 on A, multicast 2 on B}
//   256x128 mc2 on A is DeepGEMM's heuristic choice for all four default shapes (see `./probe heur`);
//   256x112 mc2 on A is the heuristic's runner-up for 8192^3 and 4096x16384x1024 (extra).
//   The last four entries (128x128, no multicast, N = 4096, K = 1024 ... 16384) are the K sweep of
//   fp8_block_steady_state/ (./probe 4096 4096 K 128 128 0 1).
#define PROBE_BLOCK3(X, N, K, BM, BN) X(N, K, BM, BN, 1, 0) X(N, K, BM, BN, 2, 1) X(N, K, BM, BN, 2, 0)
#define PROBE_NK(X, N, K) \
    PROBE_BLOCK3(X, N, K, 256, 128) \
    PROBE_BLOCK3(X, N, K, 128, 128) \
    PROBE_BLOCK3(X, N, K, 128, 192) \
    PROBE_BLOCK3(X, N, K, 128, 160) \
    PROBE_BLOCK3(X, N, K, 128, 144) \
    X(N, K, 256, 112, 2, 1)
#define PROBE_TABLE(X) \
    PROBE_NK(X,  4096, 4096) \
    PROBE_NK(X,  8192, 8192) \
    PROBE_NK(X, 16384, 1024) \
    PROBE_NK(X,  1024, 4096) \
    X(4096, 1024, 128, 128, 1, 0) X(4096, 2048, 128, 128, 1, 0) X(4096, 8192, 128, 128, 1, 0) \
    X(4096, 16384, 128, 128, 1, 0)
#define PROBE_AS_CFG(N, K, BM, BN, MC, MCA) Cfg{N, K, BM, BN, MC, MCA},
constexpr Cfg kTable[] = { PROBE_TABLE(PROBE_AS_CFG) };
constexpr int kNumEntries = sizeof(kTable) / sizeof(Cfg);

struct Shape { int m, n, k; };
constexpr Shape kShapes[] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4096, 16384, 1024}, {16384, 1024, 4096}};

// Static legality checks mirroring the kernel's static asserts and the heuristic's filters
constexpr bool cfg_is_legal(const Cfg& c) {
    const auto p = get_pipeline_config(c.k, c.block_m, c.block_n);
    const bool unroll_ok = not (c.block_n > kBlockK and (c.block_n % (c.block_n - kBlockK) != 0 and kBlockK % (c.block_n - kBlockK) != 0));
    const bool size_ok = not (c.block_m > 128 and c.block_n > 128);
    const bool stages_ok = not (p.num_stages < 3 or (c.block_m * c.block_n < 128 * 192 and p.num_stages < 4));
    const bool mc_ok = (c.mc == 1 and c.mca == 0) or (c.mc == 2 and kNumSMsCompiled % 2 == 0);
    return unroll_ok and size_ok and stages_ok and mc_ok and c.block_n % 16 == 0 and p.smem_size <= kSmemCapacity;
}
template <int I = 0> constexpr bool all_legal() {
    if constexpr (I == kNumEntries) return true; else return cfg_is_legal(kTable[I]) and all_legal<I + 1>();
}
static_assert(all_legal(), "a table entry is not a legal DeepGEMM SM90 1D2D configuration");

} // namespace probe

// =====================================================================================================
// Part 3: CUDA side
// =====================================================================================================
#ifndef PROBE_HOST_ONLY

#define PROBE_CUDA_CHECK(expr) do { \
    const cudaError_t e_ = (expr); \
    if (e_ != cudaSuccess) { \
        fprintf(stderr, "CUDA error %s (%d) at %s:%d: %s\n  in: %s\n", cudaGetErrorName(e_), static_cast<int>(e_), \
                __FILE__, __LINE__, cudaGetErrorString(e_), #expr); \
        probe::fail_exit(); \
    } } while (0)

#define PROBE_CU_CHECK(expr) do { \
    const CUresult r_ = (expr); \
    if (r_ != CUDA_SUCCESS) { \
        const char* n_ = nullptr; const char* s_ = nullptr; \
        probe::cu_error_strings(r_, &n_, &s_); \
        fprintf(stderr, "CUDA driver error %s (%d) at %s:%d: %s\n  in: %s\n", n_ ? n_ : "?", static_cast<int>(r_), \
                __FILE__, __LINE__, s_ ? s_ : "?", #expr); \
        probe::fail_exit(); \
    } } while (0)

namespace probe {

// A registered instantiation (filled by static initializers of the part translation units)
struct LaunchParams {
    float* sfb; uint32_t m, n, k;
    CUtensorMap tma_a, tma_b, tma_d, tma_sfa;
};
struct Entry {
    int index; Cfg cfg;
    int stages, smem, num_tma_threads, num_math_threads, swizzle_a, swizzle_b, swizzle_d;
    cudaError_t (*set_smem)();
    cudaError_t (*get_attrs)(cudaFuncAttributes*);
    cudaError_t (*launch)(const cudaLaunchConfig_t*, const LaunchParams&);
    cudaError_t (*max_active_clusters)(const cudaLaunchConfig_t*, int*);
};
std::vector<Entry>& registry();

[[noreturn]] void fail_exit();
void cu_error_strings(CUresult r, const char** name, const char** str);

} // namespace probe

// ----------------------------------------- instantiations -------------------------------------------
#if PROBE_PART >= 0
namespace probe {

template <int I>
struct Inst {
    static constexpr Cfg c = kTable[I];
    static constexpr PipelineConfig p = get_pipeline_config(c.k, c.block_m, c.block_n);
    static constexpr uint32_t kNumTMAThreads = 128;
    static constexpr uint32_t kNumMathThreads = c.block_m <= 64 ? 128 : 256;
    // StorageConfig: K-major A/B -> swizzle by block_k bytes (128B); D swizzle by store_block_n * 2 bytes
    static constexpr uint32_t kSwizzleA = get_swizzle_mode(kBlockK, kElemAB);
    static constexpr uint32_t kSwizzleB = get_swizzle_mode(kBlockK, kElemAB);
    static constexpr uint32_t kSwizzleD = get_swizzle_mode(c.block_n, kElemCD);
    static_assert(kSwizzleA == kBlockK and kSwizzleB == kBlockK, "DeepGEMM requires no TMA splits");

    // Template args exactly as SM90FP8Gemm1D2DRuntime::generate_impl with compiled_dims = "nk"
    static auto kernel() { return &deep_gemm::sm90_fp8_gemm_1d2d_impl<
        cute::UMMA::Major::K,                                          // major_sfb (SFB is (N/128, K/128) row-major)
        0u, static_cast<uint32_t>(c.n), static_cast<uint32_t>(c.k),    // SHAPE_M/N/K ("nk")
        1u,                                                            // kNumGroups
        static_cast<uint32_t>(c.block_m), static_cast<uint32_t>(c.block_n), static_cast<uint32_t>(kBlockK),
        kSwizzleA, kSwizzleB, kSwizzleD,
        static_cast<uint32_t>(p.num_stages),
        kNumTMAThreads, kNumMathThreads,
        static_cast<uint32_t>(c.mc), c.mca != 0,                       // cluster size, cluster_n > 1
        static_cast<uint32_t>(kNumSMsCompiled), deep_gemm::GemmType::Normal,
        cutlass::bfloat16_t,
        deep_gemm::epilogue::transform::EpilogueIdentity>; }

    static cudaError_t set_smem() {
        return cudaFuncSetAttribute(kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_size);
    }
    static cudaError_t get_attrs(cudaFuncAttributes* attr) { return cudaFuncGetAttributes(attr, kernel()); }
    static cudaError_t launch(const cudaLaunchConfig_t* config, const LaunchParams& a) {
        return cudaLaunchKernelEx(config, kernel(), a.sfb, static_cast<int*>(nullptr), a.m, a.n, a.k,
                                  a.tma_a, a.tma_b, a.tma_d, a.tma_sfa);
    }
    static cudaError_t max_active_clusters(const cudaLaunchConfig_t* config, int* num) {
        return cudaOccupancyMaxActiveClusters(num, kernel(), config);
    }
    static Entry entry() {
        return Entry{I, c, p.num_stages, p.smem_size, static_cast<int>(kNumTMAThreads), static_cast<int>(kNumMathThreads),
                     static_cast<int>(kSwizzleA), static_cast<int>(kSwizzleB), static_cast<int>(kSwizzleD),
                     &set_smem, &get_attrs, &launch, &max_active_clusters};
    }
};

template <int I> static void maybe_register() {
    if constexpr (I % PROBE_NUM_PARTS == PROBE_PART)
        registry().push_back(Inst<I>::entry());
}
template <int... Is> static int register_all(std::integer_sequence<int, Is...>) {
    (maybe_register<Is>(), ...);
    return 0;
}
static const int g_registered = register_all(std::make_integer_sequence<int, kNumEntries>{});

} // namespace probe
#endif // PROBE_PART >= 0

// ------------------------------------------ main program --------------------------------------------
#if PROBE_WITH_MAIN
namespace probe {

std::vector<Entry>& registry() { static std::vector<Entry> r; return r; }

// Context of the configuration being run, so that a CUDA error still produces its CSV line
static int g_cur_m = 0;
static const Entry* g_cur_entry = nullptr;
static bool g_line_printed = false;
static void print_csv_line(int m, const Entry& e, bool heur, double med, double tflops, double rel, const char* status,
                           double mn, double mx, double calc_diff, int regs, int local_bytes);
static bool is_heuristic_choice(int m, const Entry& e) {
    return is_heuristic_choice(m, e.cfg.n, e.cfg.k, e.cfg.block_m, e.cfg.block_n, e.cfg.mc, e.cfg.mca);
}

[[noreturn]] void fail_exit() {
    if (g_cur_entry != nullptr and not g_line_printed) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        print_csv_line(g_cur_m, *g_cur_entry, is_heuristic_choice(g_cur_m, *g_cur_entry), nan, nan, nan, "CUDA_ERROR",
                       nan, nan, nan, -1, -1);
    }
    fflush(stdout); fflush(stderr);
    _exit(2);
}

void cu_error_strings(CUresult r, const char** name, const char** str) {
#ifndef PROBE_NO_LIBCUDA
    cuGetErrorName(r, name);
    cuGetErrorString(r, str);
#else
    (void) r; *name = nullptr; *str = nullptr;
#endif
}

// ---------- driver API: cuTensorMapEncodeTiled (linked from libcuda; or via the runtime's entry point) ----------
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                   const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiledFn get_encode_tiled() {
#ifndef PROBE_NO_LIBCUDA
    return &cuTensorMapEncodeTiled;
#else
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    PROBE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
#else
    PROBE_CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q));
#endif
    if (fn == nullptr or q != cudaDriverEntryPointSuccess) { fprintf(stderr, "cannot get cuTensorMapEncodeTiled\n"); fail_exit(); }
    return reinterpret_cast<EncodeTiledFn>(fn);
#endif
}

// runtime_utils.hpp: mode_into_tensor_map_swizzle (base = 0)
static CUtensorMapSwizzle mode_into_tensor_map_swizzle(int mode) {
    switch (mode) {
        case 0: case 16: return CU_TENSOR_MAP_SWIZZLE_NONE;
        case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
        case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
        case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    }
    fprintf(stderr, "bad swizzle mode %d\n", mode); fail_exit();
}

static bool g_verbose = false;
static bool g_print_device = false;   // print a '# device ...' line (first configuration of a run)

// runtime_utils.hpp: make_tma_2d_desc
static CUtensorMap make_tma_2d_desc(void* ptr, CUtensorMapDataType dtype, int elem_size,
                                    int gmem_inner_dim, int gmem_outer_dim,
                                    int smem_inner_dim, int smem_outer_dim,
                                    int gmem_outer_stride, int swizzle_mode, const char* name) {
    if (swizzle_mode != 0)
        smem_inner_dim = swizzle_mode / elem_size;
    CUtensorMap tensor_map;
    memset(&tensor_map, 0, sizeof(tensor_map));
    const cuuint64_t gmem_dims[2] = {static_cast<cuuint64_t>(gmem_inner_dim), static_cast<cuuint64_t>(gmem_outer_dim)};
    const cuuint32_t smem_dims[2] = {static_cast<cuuint32_t>(smem_inner_dim), static_cast<cuuint32_t>(smem_outer_dim)};
    const cuuint64_t gmem_strides[1] = {static_cast<cuuint64_t>(gmem_outer_stride) * static_cast<cuuint64_t>(elem_size)};
    const cuuint32_t elem_strides[2] = {1, 1};
    if (g_verbose)
        fprintf(stderr, "TMA desc %-3s: gmem %d x %d (inner x outer), smem box %d x %d, outer stride %d elems, swizzle %d, elem %d B, ptr %p\n",
                name, gmem_inner_dim, gmem_outer_dim, smem_inner_dim, smem_outer_dim, gmem_outer_stride, swizzle_mode, elem_size, ptr);
    PROBE_CU_CHECK(get_encode_tiled()(
        &tensor_map, dtype, 2, ptr, gmem_dims, gmem_strides, smem_dims, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, mode_into_tensor_map_swizzle(swizzle_mode),
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return tensor_map;
}

// math.hpp: get_tma_aligned_size(x, element_size) = align(x, 16 / element_size)
static int get_tma_aligned_size(int x, int element_size) { return align_up(x, 16 / element_size); }

// ------------------------------------------- device helpers -------------------------------------------
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
    return static_cast<float>(splitmix64(seed * 0x100000001B3ull + i) >> 40) * (1.0f / 16777216.0f);   // [0, 1)
}

// FP8 e4m3 data: uniform[-1, 1) * range, rounded to e4m3 (satfinite) by __nv_fp8_e4m3's constructor
__global__ void flush_read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
    uint4 acc = {0, 0, 0, 0};
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i]; acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if (acc.x == 0x12345678u and acc.y == 0x9abcdef0u and acc.z == 0x0fedcba9u) sink[0] = acc.w;
}

__global__ void gen_fp8_kernel(uint8_t* out, size_t n, uint64_t seed, float range) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float v = (uniform01(seed, i) * 2.0f - 1.0f) * range;
        const __nv_fp8_e4m3 q(v);
        out[i] = q.__x;
    }
}
// Scale factors: uniform [lo, hi)
__global__ void gen_float_kernel(float* out, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        out[i] = lo + (hi - lo) * uniform01(seed, i);
}

__device__ __forceinline__ float fp8_to_float(uint8_t x) {
    __nv_fp8_e4m3 v;
    v.__x = x;
    return static_cast<float>(v);
}

// Reference: ref[m, n] = sum_kb sfa[kb * sfa_ld + m] * sfb[(n / 128) * num_kb + kb] * sum_{k in kb} A[m, k] * B[n, k]
// 64x64 output tile per 256-thread block, 4x4 outputs per thread, fp32 per-K-block partial sums, fp64 cross-block sum.
constexpr int RT = 64, RK = 32;
__global__ void __launch_bounds__(256) ref_gemm_kernel(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
                                                       const float* __restrict__ sfa, const float* __restrict__ sfb,
                                                       float* __restrict__ ref, int M, int N, int K, int sfa_ld) {
    __shared__ float As[RK][RT + 1], Bs[RK][RT + 1];
    const int m0 = blockIdx.y * RT, n0 = blockIdx.x * RT;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int num_kb = (K + 127) / 128;
    double acc[4][4];
    for (int i = 0; i < 4; ++ i) for (int j = 0; j < 4; ++ j) acc[i][j] = 0;
    for (int kb = 0; kb < num_kb; ++ kb) {
        float part[4][4];
        for (int i = 0; i < 4; ++ i) for (int j = 0; j < 4; ++ j) part[i][j] = 0;
        const int k_end = min(K, (kb + 1) * 128);
        for (int k0 = kb * 128; k0 < k_end; k0 += RK) {
            for (int e = threadIdx.x; e < RT * RK; e += 256) {
                const int r = e / RK, c = e % RK, gk = k0 + c;
                const int gm = m0 + r, gn = n0 + r;
                As[c][r] = (gm < M and gk < k_end) ? fp8_to_float(A[static_cast<size_t>(gm) * K + gk]) : 0.0f;
                Bs[c][r] = (gn < N and gk < k_end) ? fp8_to_float(B[static_cast<size_t>(gn) * K + gk]) : 0.0f;
            }
            __syncthreads();
            #pragma unroll 4
            for (int c = 0; c < RK; ++ c) {
                float a[4], b[4];
                for (int i = 0; i < 4; ++ i) a[i] = As[c][ty + 16 * i];
                for (int j = 0; j < 4; ++ j) b[j] = Bs[c][tx + 16 * j];
                for (int i = 0; i < 4; ++ i) for (int j = 0; j < 4; ++ j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
            }
            __syncthreads();
        }
        for (int i = 0; i < 4; ++ i) for (int j = 0; j < 4; ++ j) {
            const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M and n < N)
                acc[i][j] += static_cast<double>(part[i][j]) * sfa[static_cast<size_t>(kb) * sfa_ld + m] * sfb[static_cast<size_t>(n / 128) * num_kb + kb];
        }
    }
    for (int i = 0; i < 4; ++ i) for (int j = 0; j < 4; ++ j) {
        const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
        if (m < M and n < N) ref[static_cast<size_t>(m) * N + n] = static_cast<float>(acc[i][j]);
    }
}

// sums[0] = sum (d - r)^2, sums[1] = sum r^2, sums[2] = sum d*r, sums[3] = sum d^2, sums[4] = #non-finite d
__global__ void compare_kernel(const __nv_bfloat16* __restrict__ d, const float* __restrict__ ref, size_t n, double* sums) {
    double s[5] = {0, 0, 0, 0, 0};
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const double x = __bfloat162float(d[i]), y = ref[i];
        if (not isfinite(x)) { s[4] += 1; continue; }
        s[0] += (x - y) * (x - y); s[1] += y * y; s[2] += x * y; s[3] += x * x;
    }
    for (int j = 0; j < 5; ++ j) {
        double v = s[j];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        if ((threadIdx.x & 31) == 0) atomicAdd(sums + j, v);
    }
}

// -------------------------------------------- one config ----------------------------------------------
enum ExitCode { kExitPass = 0, kExitFail = 1, kExitError = 2, kExitSkip = 3 };

static void print_csv_header() {
    printf("M,N,K,block_m,block_n,stages,multicast,multicast_on_a,heuristic_choice,median_us,tflops,rel_err,status,"
           "min_us,max_us,calc_diff,smem_bytes,regs,local_bytes,math_threads,swizzle_d\n");
    fflush(stdout);
}

static void print_csv_line(int m, const Entry& e, bool heur, double med, double tflops, double rel, const char* status,
                           double mn, double mx, double calc_diff, int regs, int local_bytes) {
    printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%.1f,%.3e,%s,%.2f,%.2f,%.3e,%d,%d,%d,%d,%d\n",
           m, e.cfg.n, e.cfg.k, e.cfg.block_m, e.cfg.block_n, e.stages, e.cfg.mc, e.cfg.mca, heur ? 1 : 0,
           med, tflops, rel, status, mn, mx, calc_diff, e.smem, regs, local_bytes, e.num_math_threads, e.swizzle_d);
    fflush(stdout);
    g_line_printed = true;
}

static int get_env_int(const char* name, int def) {
    const char* v = getenv(name);
    return (v != nullptr and *v != '\0') ? atoi(v) : def;
}

// Runs one configuration in the current process; prints exactly one CSV line on every non-crash path.
static int run_one(int m, const Entry& e) {
    const int n = e.cfg.n, k = e.cfg.k;
    const bool heur = is_heuristic_choice(m, e);
    g_cur_m = m, g_cur_entry = &e, g_line_printed = false;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto early = [&](const char* status, int code) { print_csv_line(m, e, heur, nan, nan, nan, status, nan, nan, nan, -1, -1); return code; };

    // Device checks
    int dev = 0, num_sms = 0, cc_major = 0, cc_minor = 0;
    PROBE_CUDA_CHECK(cudaGetDevice(&dev));
    PROBE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
    PROBE_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    PROBE_CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (g_verbose or g_print_device) {
        cudaDeviceProp prop;
        int driver = 0, runtime = 0, clock_khz = 0, mem_clock_khz = 0;
        PROBE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        PROBE_CUDA_CHECK(cudaDriverGetVersion(&driver));
        PROBE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
        PROBE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
        PROBE_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, dev));
        printf("# device %d: %s, sm_%d%d, %d SMs (kernels instantiated for %d), L2 %d MiB, smem opt-in %zu B, "
               "max SM clock %d MHz, mem clock %d MHz, driver %d, runtime %d\n",
               dev, prop.name, cc_major, cc_minor, num_sms, kNumSMsCompiled, prop.l2CacheSize >> 20,
               static_cast<size_t>(prop.sharedMemPerBlockOptin), clock_khz / 1000, mem_clock_khz / 1000, driver, runtime);
        fflush(stdout);
    }
    if (cc_major != 9 or cc_minor != 0) {
        fprintf(stderr, "GPU is sm_%d%d, this probe is built for sm_90a only\n", cc_major, cc_minor);
        return early("SKIP_ARCH", kExitSkip);
    }
    if (num_sms != kNumSMsCompiled) {
        fprintf(stderr, "GPU has %d SMs but kernels are instantiated with kNumSMs = %d; refusing to run\n", num_sms, kNumSMsCompiled);
        return early("SKIP_NUM_SMS", kExitSkip);
    }
    if (m <= 0 or n % 8 != 0 or k % 16 != 0) {
        fprintf(stderr, "bad shape %d %d %d\n", m, n, k);
        return early("BAD_SHAPE", kExitError);
    }

    // Kernel attributes
    cudaFuncAttributes attr;
    PROBE_CUDA_CHECK(e.get_attrs(&attr));
    PROBE_CUDA_CHECK(e.set_smem());

    // Buffers
    const int num_kb = ceil_div(k, 128);
    const int sfa_ld = get_tma_aligned_size(m, sizeof(float));      // MN-major, TMA-aligned SFA
    const int sfb_rows = ceil_div(n, 128);
    const size_t size_a = static_cast<size_t>(m) * k, size_b = static_cast<size_t>(n) * k, size_d = static_cast<size_t>(m) * n;
    const size_t size_sfa = static_cast<size_t>(sfa_ld) * num_kb, size_sfb = static_cast<size_t>(sfb_rows) * num_kb;
    const size_t flush_bytes = 256ull << 20;
    uint8_t *d_a, *d_b, *d_flush; float *d_sfa, *d_sfb, *d_ref; __nv_bfloat16* d_d; double* d_sums;
    PROBE_CUDA_CHECK(cudaMalloc(&d_a, size_a));
    PROBE_CUDA_CHECK(cudaMalloc(&d_b, size_b));
    PROBE_CUDA_CHECK(cudaMalloc(&d_sfa, size_sfa * sizeof(float)));
    PROBE_CUDA_CHECK(cudaMalloc(&d_sfb, size_sfb * sizeof(float)));
    PROBE_CUDA_CHECK(cudaMalloc(&d_d, size_d * sizeof(__nv_bfloat16)));
    PROBE_CUDA_CHECK(cudaMalloc(&d_ref, size_d * sizeof(float)));
    PROBE_CUDA_CHECK(cudaMalloc(&d_sums, 5 * sizeof(double)));
    PROBE_CUDA_CHECK(cudaMalloc(&d_flush, flush_bytes));

    // Random inputs (deterministic per shape)
    const uint64_t seed = (static_cast<uint64_t>(m) * 1000003ull + n) * 1000003ull + k;
    const float data_range = 2.0f;
    gen_fp8_kernel<<<1024, 256>>>(d_a, size_a, seed ^ 0xA, data_range);
    PROBE_CUDA_CHECK(cudaGetLastError());
    gen_fp8_kernel<<<1024, 256>>>(d_b, size_b, seed ^ 0xB, data_range);
    PROBE_CUDA_CHECK(cudaGetLastError());
    gen_float_kernel<<<256, 256>>>(d_sfa, size_sfa, seed ^ 0x5FA, 0.5f, 2.0f);   // padding rows (m >= M) are never used
    PROBE_CUDA_CHECK(cudaGetLastError());
    gen_float_kernel<<<256, 256>>>(d_sfb, size_sfb, seed ^ 0x5FB, 0.5f, 2.0f);
    PROBE_CUDA_CHECK(cudaGetLastError());

    // Reference
    ref_gemm_kernel<<<dim3(ceil_div(n, RT), ceil_div(m, RT)), 256>>>(d_a, d_b, d_sfa, d_sfb, d_ref, m, n, k, sfa_ld);
    PROBE_CUDA_CHECK(cudaGetLastError());
    PROBE_CUDA_CHECK(cudaDeviceSynchronize());

    // Tensor maps exactly as sm90_fp8_gemm_1d2d() builds them
    LaunchParams lp;
    lp.sfb = d_sfb; lp.m = m; lp.n = n; lp.k = k;
    // make_tma_a_desc(K, a, m, k, load_block_m, block_k, a.stride(-2) = k, 1, swizzle_a): gmem (k, m), box (block_k, block_m)
    lp.tma_a = make_tma_2d_desc(d_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, m, kBlockK, e.cfg.block_m, k, e.swizzle_a, "A");
    // make_tma_b_desc(K, b, n, k, load_block_n, block_k, b.stride(-2) = k, 1, swizzle_b): gmem (k, n), box (block_k, block_n)
    lp.tma_b = make_tma_2d_desc(d_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, n, kBlockK, e.cfg.block_n, k, e.swizzle_b, "B");
    // make_tma_cd_desc(d, m, n, store_block_m = block_m, store_block_n = block_n, d.stride(-2) = n, 1, swizzle_cd)
    lp.tma_d = make_tma_2d_desc(d_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, n, m, e.cfg.block_n, e.cfg.block_m, n, e.swizzle_d, "D");
    // make_tma_sf_desc(MN, sfa, m, k, block_m, block_k, 1, 0): gmem (align(m, 4), ceil(k/128)), box (block_m, 1), stride align(m, 4)
    lp.tma_sfa = make_tma_2d_desc(d_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, sfa_ld, num_kb, e.cfg.block_m, 1, sfa_ld, 0, "SFA");

    // Launch config (get_launch_config + construct_launch_config)
    cudaLaunchAttribute attrs[1];
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kNumSMsCompiled, 1, 1);
    config.blockDim = dim3(e.num_tma_threads + e.num_math_threads, 1, 1);
    config.dynamicSmemBytes = e.smem;
    config.stream = nullptr;
    config.attrs = attrs;
    config.numAttrs = 0;
    if (e.cfg.mc > 1) {
        attrs[0].id = cudaLaunchAttributeClusterDimension;
        attrs[0].val.clusterDim.x = e.cfg.mc;
        attrs[0].val.clusterDim.y = 1;
        attrs[0].val.clusterDim.z = 1;
        config.numAttrs = 1;
    }
    if (g_verbose) {
        fprintf(stderr, "launch: grid %d, block %d, smem %d, cluster %d, regs %d, local %zu B, stages %d\n",
                kNumSMsCompiled, e.num_tma_threads + e.num_math_threads, e.smem, e.cfg.mc, attr.numRegs,
                static_cast<size_t>(attr.localSizeBytes), e.stages);
        if (e.cfg.mc > 1) {
            int clusters = -1;
            const cudaError_t err = e.max_active_clusters(&config, &clusters);
            fprintf(stderr, "max active clusters: %d (%s)\n", clusters, cudaGetErrorString(err));
            (void) cudaGetLastError();
        }
    }

    // Correctness run: D pre-filled with NaN (0xFFFF) so unwritten tiles are caught
    PROBE_CUDA_CHECK(cudaMemset(d_d, 0xFF, size_d * sizeof(__nv_bfloat16)));
    PROBE_CUDA_CHECK(e.launch(&config, lp));
    PROBE_CUDA_CHECK(cudaGetLastError());
    PROBE_CUDA_CHECK(cudaDeviceSynchronize());
    PROBE_CUDA_CHECK(cudaMemset(d_sums, 0, 5 * sizeof(double)));
    compare_kernel<<<1024, 256>>>(d_d, d_ref, size_d, d_sums);
    PROBE_CUDA_CHECK(cudaGetLastError());
    double sums[5];
    PROBE_CUDA_CHECK(cudaMemcpy(sums, d_sums, sizeof(sums), cudaMemcpyDeviceToHost));
    const double rel_err = sums[4] > 0 ? nan : std::sqrt(sums[0] / sums[1]);
    const double calc_diff = sums[4] > 0 ? nan : 1.0 - 2.0 * sums[2] / (sums[3] + sums[1]);   // DeepGEMM's calc_diff
    const bool pass = sums[4] == 0 and rel_err < 1e-2;
    if (sums[4] > 0)
        fprintf(stderr, "%.0f non-finite outputs\n", sums[4]);

    // Timing: L2 emptied before every launch by reading 256 MiB (as the lab's timer); 3 warmups, 30 timed
    PROBE_CUDA_CHECK(cudaMemset(d_flush, 1, flush_bytes));
    const int num_warmups = 3, num_timed = std::max(1, get_env_int("PROBE_ITERS", 30));
    std::vector<cudaEvent_t> ev(2 * num_timed);
    for (auto& x: ev) PROBE_CUDA_CHECK(cudaEventCreate(&x));
    for (int i = 0; i < num_warmups; ++ i) {
        flush_read_kernel<<<1056, 256>>>(reinterpret_cast<const uint4*>(d_flush), flush_bytes / 16, reinterpret_cast<unsigned*>(d_sums));
        PROBE_CUDA_CHECK(e.launch(&config, lp));
    }
    PROBE_CUDA_CHECK(cudaGetLastError());
    for (int i = 0; i < num_timed; ++ i) {
        flush_read_kernel<<<1056, 256>>>(reinterpret_cast<const uint4*>(d_flush), flush_bytes / 16, reinterpret_cast<unsigned*>(d_sums));
        PROBE_CUDA_CHECK(cudaEventRecord(ev[2 * i], nullptr));
        PROBE_CUDA_CHECK(e.launch(&config, lp));
        PROBE_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], nullptr));
    }
    PROBE_CUDA_CHECK(cudaGetLastError());
    PROBE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> us(num_timed);
    for (int i = 0; i < num_timed; ++ i) {
        float ms = 0;
        PROBE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = ms * 1e3;
    }
    std::sort(us.begin(), us.end());
    const double med = num_timed % 2 ? us[num_timed / 2] : 0.5 * (us[num_timed / 2 - 1] + us[num_timed / 2]);
    const double tflops = 2.0 * m * static_cast<double>(n) * k / (med * 1e-6) / 1e12;

    // Re-check D after the timed runs (same inputs -> must still be correct)
    PROBE_CUDA_CHECK(cudaMemset(d_sums, 0, 5 * sizeof(double)));
    compare_kernel<<<1024, 256>>>(d_d, d_ref, size_d, d_sums);
    PROBE_CUDA_CHECK(cudaGetLastError());
    double sums2[5];
    PROBE_CUDA_CHECK(cudaMemcpy(sums2, d_sums, sizeof(sums2), cudaMemcpyDeviceToHost));
    const double rel_err2 = sums2[4] > 0 ? nan : std::sqrt(sums2[0] / sums2[1]);
    const bool pass2 = sums2[4] == 0 and rel_err2 < 1e-2;

    print_csv_line(m, e, heur, med, tflops, rel_err, (pass and pass2) ? "PASS" : "FAIL", us.front(), us.back(), calc_diff,
                   attr.numRegs, static_cast<int>(attr.localSizeBytes));
    if (pass and not pass2)
        fprintf(stderr, "result became wrong after timed runs: rel_err %.3e\n", rel_err2);

    for (auto& x: ev) PROBE_CUDA_CHECK(cudaEventDestroy(x));
    PROBE_CUDA_CHECK(cudaFree(d_a)); PROBE_CUDA_CHECK(cudaFree(d_b)); PROBE_CUDA_CHECK(cudaFree(d_sfa));
    PROBE_CUDA_CHECK(cudaFree(d_sfb)); PROBE_CUDA_CHECK(cudaFree(d_d)); PROBE_CUDA_CHECK(cudaFree(d_ref));
    PROBE_CUDA_CHECK(cudaFree(d_sums)); PROBE_CUDA_CHECK(cudaFree(d_flush));
    g_cur_entry = nullptr;
    return (pass and pass2) ? kExitPass : kExitFail;
}

// Runs one config in a forked child (no CUDA in the parent), with a watchdog: a hung or crashed kernel
// cannot take down the remaining configurations.
static int run_isolated(int m, const Entry& e) {
    if (get_env_int("PROBE_NO_FORK", 0))
        return run_one(m, e);
    fflush(stdout); fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) { perror("fork"); return kExitError; }
    if (pid == 0) {
        const int code = run_one(m, e);
        fflush(stdout); fflush(stderr);
        _exit(code);
    }
    const int timeout_s = get_env_int("PROBE_TIMEOUT", 180);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const bool heur = is_heuristic_choice(m, e);
    int status = 0;
    for (int waited_ms = 0;; waited_ms += 50) {
        const pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0) { perror("waitpid"); return kExitError; }
        if (waited_ms >= timeout_s * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "config #%d timed out after %d s (killed)\n", e.index, timeout_s);
            print_csv_line(m, e, heur, nan, nan, nan, "TIMEOUT", nan, nan, nan, -1, -1);
            return kExitError;
        }
        const struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, nullptr);
    }
    if (WIFEXITED(status) and WEXITSTATUS(status) <= kExitSkip)
        return WEXITSTATUS(status);     // the child printed its own line
    fprintf(stderr, "config #%d: child %s %d\n", e.index, WIFSIGNALED(status) ? "killed by signal" : "exited with",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    print_csv_line(m, e, heur, nan, nan, nan, "CRASH", nan, nan, nan, -1, -1);
    return kExitError;
}

static std::vector<Entry> sorted_entries() {
    auto r = registry();
    std::sort(r.begin(), r.end(), [](const Entry& a, const Entry& b) { return a.index < b.index; });
    return r;
}

static void usage() {
    fprintf(stderr,
        "usage: probe all                                    run all built-in configurations\n"
        "       probe M N K BLOCK_M BLOCK_N STAGES MC [MCA]  run one (STAGES 0 = formula; MC 1|2; MCA default = BLOCK_M >= BLOCK_N)\n"
        "       probe heur [M N K [num_sms]]                 print DeepGEMM's heuristic reasoning\n"
        "       probe list                                   list compiled configurations\n"
        "env: PROBE_VERBOSE=1, PROBE_NO_FORK=1, PROBE_TIMEOUT=secs (180), PROBE_ITERS=n (30)\n");
}

static void print_list() {
    printf("index,N,K,block_m,block_n,stages,smem_bytes,multicast,multicast_on_a,math_threads,swizzle_d\n");
    for (const auto& e: sorted_entries())
        printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", e.index, e.cfg.n, e.cfg.k, e.cfg.block_m, e.cfg.block_n, e.stages, e.smem,
               e.cfg.mc, e.cfg.mca, e.num_math_threads, e.swizzle_d);
}

} // namespace probe

int main(int argc, char** argv) {
    using namespace probe;
    setvbuf(stdout, nullptr, _IOLBF, 0);
    g_verbose = get_env_int("PROBE_VERBOSE", 0) != 0;
    if (static_cast<int>(registry().size()) != kNumEntries) {
        fprintf(stderr, "internal error: %zu of %d instantiations registered (missing part objects at link time?)\n",
                registry().size(), kNumEntries);
        return kExitError;
    }
    if (argc < 2) { usage(); return kExitError; }
    const std::string mode = argv[1];
    if (mode == "list") { print_list(); return 0; }
    if (mode == "heur") {
        if (argc >= 5) {
            print_heuristic(stdout, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc >= 6 ? atoi(argv[5]) : kNumSMsCompiled, 1000);
        } else {
            for (const auto& s: kShapes) print_heuristic(stdout, s.m, s.n, s.k, kNumSMsCompiled);
        }
        return 0;
    }
    const auto entries = sorted_entries();
    if (mode == "all") {
        for (const auto& s: kShapes) print_heuristic(stdout, s.m, s.n, s.k, kNumSMsCompiled, 5);
        print_csv_header();
        int worst = 0, num_pass = 0, num_total = 0;
        for (const auto& s: kShapes)
            for (const auto& e: entries)
                if (e.cfg.n == s.n and e.cfg.k == s.k) {
                    g_print_device = num_total == 0;
                    const int code = run_isolated(s.m, e);
                    ++ num_total; num_pass += code == kExitPass;
                    if (code == kExitSkip) {
                        fprintf(stderr, "skipping the remaining configurations\n");
                        return kExitSkip;
                    }
                    worst = std::max(worst, code);
                }
        printf("# %d/%d PASS\n", num_pass, num_total);
        return worst;
    }
    if (argc < 8) { usage(); return kExitError; }
    const int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]);
    const int bm = atoi(argv[4]), bn = atoi(argv[5]), stages = atoi(argv[6]), mc = atoi(argv[7]);
    const int mca = mc == 1 ? 0 : (argc >= 9 ? atoi(argv[8]) : (bm >= bn ? 1 : 0));
    for (const auto& e: entries) {
        if (e.cfg.n == n and e.cfg.k == k and e.cfg.block_m == bm and e.cfg.block_n == bn and e.cfg.mc == mc and e.cfg.mca == mca and
            (stages == 0 or stages == e.stages)) {
            print_heuristic(stdout, m, n, k, kNumSMsCompiled, 5);
            print_csv_header();
            g_print_device = true;
            return run_isolated(m, e);
        }
    }
    fprintf(stderr, "no compiled instantiation for N=%d K=%d block %dx%d stages %d multicast %d on_a %d; compiled list:\n",
            n, k, bm, bn, stages, mc, mca);
    print_list();
    return kExitError;
}
#endif // PROBE_WITH_MAIN

#else  // PROBE_HOST_ONLY: heuristic / table printing only (g++ -std=c++17 -x c++ -DPROBE_HOST_ONLY probe.cu)

int main(int argc, char** argv) {
    using namespace probe;
    if (argc >= 5 and std::string(argv[1]) == "heur") {
        print_heuristic(stdout, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc >= 6 ? atoi(argv[5]) : kNumSMsCompiled, 1000);
        return 0;
    }
    for (const auto& s: kShapes) print_heuristic(stdout, s.m, s.n, s.k, kNumSMsCompiled);
    printf("index,N,K,block_m,block_n,stages,smem_bytes,multicast,multicast_on_a,heuristic_choice_for_default_shape\n");
    for (int i = 0; i < kNumEntries; ++ i) {
        const auto& c = kTable[i];
        const auto p = get_pipeline_config(c.k, c.block_m, c.block_n);
        int m = 0;
        for (const auto& s: kShapes) if (s.n == c.n and s.k == c.k) m = s.m;
        printf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", i, c.n, c.k, c.block_m, c.block_n, p.num_stages, p.smem_size, c.mc, c.mca,
               is_heuristic_choice(m, c.n, c.k, c.block_m, c.block_n, c.mc, c.mca) ? 1 : 0);
    }
    return 0;
}
#endif // PROBE_HOST_ONLY
