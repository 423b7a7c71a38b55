"""Steps 21-23: Hopper's warpgroup MMA (``wgmma``) for fp16 and tf32 GEMM, written as a TIR kernel,
and the fp16 choice per shape.

TVM 0.27's tensorize intrinsics stop at ``wmma`` and ``mma.sync`` (step 19); ``wgmma`` is a
warpgroup-wide instruction (128 threads) whose accumulator is spread over the four warps and whose
operands are *shared-memory descriptors*, not fragments, so no ``TensorIntrin`` of the s_tir
schedule language describes it. TVM's PTX dialect (``T.ptx``, the TIRx CUDA backend) does emit it,
and the ordinary ``tvm.compile`` pipeline compiles a TIR function that calls it. This step therefore
writes its loop nest directly as TIR (TVMScript), with the tile sizes as parameters, and hands it to
the lab as a schedule like every other step (``schedlab show`` prints its TIR, lowered TIR, CUDA
and PTX).

Hopper's own instructions need the architecture-specific target ``sm_90a``; the lab's compiler
(:func:`tuning.cuda_compile.compile_to_cubin`) takes it for any source that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div
from .errors import ScheduleParamError
from .gemm_fast import H200_SMS, BestConfig, TensorCoreConfig
from .registry import Launch, get, register
from .workloads import Gemm

ROW_BYTES = 128  # one K tile row: exactly the 128-byte swizzle atom (64 fp16 or 32 tf32)
SWIZZLE_128B = 3  # TVM's descriptor encoder: 0 none, 1 32 B, 2 64 B, 3 128 B
WARPGROUP = 128  # threads
WGMMA_K_BYTES = 32  # K of one wgmma: 16 fp16 (m64nNk16) or 8 tf32 (m64nNk8)
ITEMSIZE = {"float16": 2, "float32": 4}


@dataclass(frozen=True)
class WgmmaConfig:
    """``block_m`` rows per block (64 per warpgroup), ``block_n`` columns (the wgmma's N, up to
    256), ``stages`` K tiles in the shared-memory ring (a tile is one 128-byte row deep: 64 fp16 or
    32 tf32 values), ``group_m`` block-rows per group of the grouped block order; ``mma_overlap``
    waits for a tile's wgmmas one iteration later (the ring then copies one tile less ahead)."""

    block_m: int = 128
    block_n: int = 256
    stages: int = 4
    group_m: int = 8
    mma_overlap: bool = True  # leave one tile's wgmmas running while the next tile's are issued
    dtypes = ("float16",)
    step_name = "wgmma_gemm"

    @property
    def warpgroups(self) -> int:
        return self.block_m // 64

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtypes[0]]

    @property
    def b_copy_elems(self) -> int:
        """Elements of B per copy: fp16 B goes n-major, 16 bytes at a time; tf32 B is transposed on
        its way in, one 4-byte element at a time (tf32 wgmma reads both operands k-major)."""
        return 8 if self.itemsize == 2 else 1

    @property
    def block_k(self) -> int:
        return ROW_BYTES // self.itemsize

    def stage_elems(self) -> int:
        return (self.block_m + self.block_n) * self.block_k

    def shared_bytes(self) -> int:
        # the ring plus 1 KiB to align it: the 128-byte swizzle repeats every 1024 bytes
        return self.itemsize * self.stages * self.stage_elems() + 1024

    def check(self, wl: Gemm):
        name = type(self).step_name
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"{name} takes {self.dtypes[0]} inputs, not {wl.dtype}")
        if self.block_m % 64 or not 64 <= self.block_m <= 256:
            raise ScheduleParamError(f"{name}: block_m must be 64, 128, 192 or 256 (64 rows per warpgroup), "
                                     f"got {self.block_m}")
        if self.block_n % 64 or not 64 <= self.block_n <= 256:
            raise ScheduleParamError(f"{name}: block_n must be 64, 128, 192 or 256 (whole 64-column "
                                     f"panels, wgmma's N ≤ 256), got {self.block_n}")
        if self.stages < 2 + self.mma_overlap:
            raise ScheduleParamError(f"{name}: stages must be at least {2 + self.mma_overlap} "
                                     f"(mma_overlap={self.mma_overlap}), got {self.stages}")
        if (self.block_n * self.block_k // self.b_copy_elems) % self.threads:
            raise ScheduleParamError(f"{name}: the B tile's copies ({self.block_n * self.block_k // self.b_copy_elems}) "
                                     f"must divide over the {self.threads} threads (block_m, block_n)")
        vec = 16 // self.itemsize
        if wl.K % vec or wl.N % self.b_copy_elems:
            which = "K and N must be multiples" if self.b_copy_elems > 1 else "K must be a multiple"
            raise ScheduleParamError(f"{name} copies rows in 16-byte pieces: {which} of {vec} ({wl})")

    def launch(self, wl: Gemm) -> Launch:
        tiles = ceil_div(wl.M, self.block_m) * ceil_div(wl.N, self.block_n)
        return Launch((tiles, 1, 1), (self.threads, 1, 1), self.shared_bytes(),
                      threads_from="block_m (128 threads per 64 rows)", shared_from="block_m, block_n, stages",
                      dynamic_shared=True)


def wgmma_kernel(wl: Gemm, cfg: WgmmaConfig):
    """The TIR of :func:`wgmma_gemm` for one shape and configuration."""
    M, N, K = wl.M, wl.N, wl.K
    BM, BN, S, GM = cfg.block_m, cfg.block_n, cfg.stages, cfg.group_m
    LAG = int(cfg.mma_overlap)  # wgmma groups left running at the end of an iteration
    AHEAD = S - 1 - LAG  # K tiles copied ahead of the one computed: the ring also holds LAG tiles being read
    THREADS = cfg.threads
    DT = cfg.dtypes[0]
    TF32 = DT == "float32"  # fp32 inputs, read by the tensor cores as tf32
    BK = cfg.block_k  # elements in one 128-byte row
    VEC = 16 // cfg.itemsize  # elements in one 16-byte chunk
    WK = WGMMA_K_BYTES // cfg.itemsize  # K of one wgmma
    A_ELEMS = BM * BK  # one stage: the A tile, then the B tile
    STAGE = cfg.stage_elems()
    A_CHUNKS = A_ELEMS // VEC // THREADS  # 16-byte copies per thread per tile
    B_COPIES = BN * BK // cfg.b_copy_elems // THREADS
    ROW_CHUNKS = BN // 8  # (fp16) 16-byte chunks in one K row of the B tile
    PANEL = 64 * BK  # (fp16) one 64-column panel of the B tile
    ACC = BN // 2  # fp32 accumulators per thread: 64 x BN over 128 threads
    KT = ceil_div(K, BK)
    TM, TN = ceil_div(M, BM), ceil_div(N, BN)
    SBO = 8 * ROW_BYTES // 16  # descriptor offsets are in 16-byte units: next group of 8 rows, 1024 bytes
    B_LBO = 1 if TF32 else PANEL * 2 // 16  # fp16 (n-major): next 64-column panel of B
    B_STEP = WK if TF32 else WK * BK  # elements between the B slices of two k steps
    if TF32:  # tf32 wgmma has no transpose: both operands k-major
        mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BN}k8.f32.tf32.tf32"]
        mma_flags = (1, 1)  # scale-a, scale-b
    else:
        mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.f16.f16"]
        mma_flags = (1, 1, 0, 1)  # scale-a, scale-b, A k-major, B n-major (transposed)

    # Thread ``tid``'s ``c``-th copy of a tile and its place in the accumulator layout, as plain
    # expressions (Python helpers, not TIR variables), so the simplifier sees the loop ranges and
    # drops the bounds checks a shape does not need (at 4096³ all but one are provably true).
    def copy(dst, src, ok, size):  # one cp.async, zero-filled where ``ok`` is false
        return T.ptx["cp.async.cg.shared.global" if size == 16 else "cp.async.ca.shared.global"](
            T.address_of(dst), T.address_of(src), size, T.if_then_else(ok, T.uint32(size), T.uint32(0)))

    def copy_a(A, smem, at, tid, c, tile_m, kt):
        # A tile (BM x BK, k-major): row r is 128 bytes, its 16-byte chunk ch stored at ch ^ (r % 8)
        r, ch = (c * THREADS + tid) // 8, (c * THREADS + tid) % 8
        gm, gk = tile_m * BM + r, kt * BK + ch * VEC
        return copy(smem[at + r * BK + T.bitwise_xor(ch, r % 8) * VEC],
                    A[T.min(gm, M - 1), T.min(gk, K - VEC)], T.And(gm < M, gk < K), 16)

    def copy_b(B, smem, at, tid, c, tile_n, kt):
        if TF32:
            # B tile stored k-major (BN rows of 128 bytes, chunks swizzled by n % 8): B is K x N
            # row-major, so each 4-byte element is copied alone, a warp reading 32 consecutive n
            n, k = (c * THREADS + tid) % BN, (c * THREADS + tid) // BN
            gk, gn = kt * BK + k, tile_n * BN + n
            return copy(smem[at + A_ELEMS + n * BK + T.bitwise_xor(k // 4, n % 8) * 4 + k % 4],
                        B[T.min(gk, K - 1), T.min(gn, N - 1)], T.And(gk < K, gn < N), 4)
        # fp16: B tile n-major (64 x BN): 64-column panels, each K row of a panel 128 bytes, swizzled by k % 8
        kr, nc = (c * THREADS + tid) // ROW_CHUNKS, (c * THREADS + tid) % ROW_CHUNKS
        gk, gn = kt * BK + kr, tile_n * BN + nc * 8
        return copy(smem[at + A_ELEMS + nc // 8 * PANEL + kr * 64 + T.bitwise_xor(nc % 8, kr % 8) * 8],
                    B[T.min(gk, K - 1), T.min(gn, N - 8)], T.And(gk < K, gn < N), 16)

    def out_row(tile_m, tid, h):  # warp w of a warpgroup holds rows 16w.., each lane rows lane/4 and +8
        return tile_m * BM + tid // WARPGROUP * 64 + tid % WARPGROUP // 32 * 16 + tid % 32 // 4 + h * 8

    def out_col(tile_n, tid, j, e):  # ... and two adjacent columns of every 8-column group j
        return tile_n * BN + j * 8 + tid % 4 * 2 + e

    @T.macro
    def copy_tile(A, B, smem, base, tid, tile_m, tile_n, kt, slot):
        for c in T.unroll(A_CHUNKS):
            copy_a(A, smem, base + slot * STAGE, tid, c, tile_m, kt)
        for c in T.unroll(B_COPIES):
            copy_b(B, smem, base + slot * STAGE, tid, c, tile_n, kt)

    @T.prim_func
    def main(A: T.Buffer((M, K), DT), B: T.Buffer((K, N), DT), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        bid = T.launch_thread("blockIdx.x", TM * TN)
        tid = T.launch_thread("threadIdx.x", THREADS)
        smem = T.alloc_buffer((S * STAGE + 1024 // cfg.itemsize,), DT, scope="shared.dyn")
        acc = T.alloc_buffer((ACC,), "float32", scope="local")
        desc_a = T.alloc_buffer((1,), "uint64", scope="local")
        desc_b = T.alloc_buffer((1,), "uint64", scope="local")
        # grouped block order (step 18): GM block-rows of one column group run together
        first_m = bid // (GM * TN) * GM
        rows = T.min(TM - first_m, GM)
        tile_m = first_m + bid % (GM * TN) % rows
        tile_n = bid % (GM * TN) // rows
        # the ring starts on a 1024-byte boundary, where the 128-byte swizzle pattern starts
        addr = T.cuda.cvta_generic_to_shared(T.address_of(smem[0]))
        base = T.cast((T.uint32(1024) - (addr & T.uint32(1023))) & T.uint32(1023), "int32") // cfg.itemsize
        wg = tid // WARPGROUP
        # the two matrix descriptors of the ring's start (128-byte swizzle, 1024 bytes between 8-row
        # groups; fp16 B's 64-column panels PANEL apart); the loop only moves their start addresses
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc_a[0]), T.address_of(smem[base]), 1, SBO,
                                              SWIZZLE_128B)
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc_b[0]), T.address_of(smem[base]), B_LBO, SBO,
                                              SWIZZLE_128B)
        for s in T.unroll(AHEAD):  # prologue: K tiles 0 .. AHEAD-1 in flight
            if s < KT:
                copy_tile(A, B, smem, base, tid, tile_m, tile_n, s, s)
            T.ptx["cp.async.commit_group"]()
        for kt in T.serial(KT):
            T.ptx["cp.async.wait_group"](AHEAD - 1)  # this thread's copies of tile kt have landed
            T.ptx["fence.proxy.async.shared::cta"]()  # ... and are visible to the tensor cores
            # everyone's have; and every warpgroup has waited for tile kt-1-LAG's wgmmas: its slot is free
            T.cuda.cta_sync()
            cur = kt % S
            T.ptx.wgmma.fence.sync.aligned()
            for kk in T.unroll(BK // WK):
                # D (+)= A·B on descriptors moved along the ring (start address in 16-byte units):
                # A: this warpgroup's 64 rows, WK columns in (32 bytes along the swizzled rows);
                # B: the next WK K rows (fp16, n-major) or 32 bytes along its rows (tf32, k-major).
                # scale-d false on the very first: no separate zeroing of the accumulators
                mma(*[acc[i] for i in range(ACC)],
                    desc_a[0] + T.uint64((cur * STAGE + wg * 64 * BK + kk * WK) // VEC),
                    desc_b[0] + T.uint64((cur * STAGE + A_ELEMS + kk * B_STEP) // VEC),
                    T.Or(kt > 0, kk > 0), *mma_flags)
            T.ptx.wgmma.commit_group.sync.aligned()
            # while the tensor cores work: the copies of tile kt+AHEAD into tile kt-1-LAG's slot
            if kt + AHEAD < KT:
                copy_tile(A, B, smem, base, tid, tile_m, tile_n, kt + AHEAD, (kt + AHEAD) % S)
            T.ptx["cp.async.commit_group"]()
            T.ptx.wgmma.wait_group.sync.aligned(LAG)
        if LAG > 0:
            T.ptx.wgmma.wait_group.sync.aligned(0)
        # the accumulators straight to C (the wgmma accumulator layout: out_row, out_col)
        for j in T.unroll(BN // 8):
            for h in T.unroll(2):
                for e in T.unroll(2):
                    if T.And(out_row(tile_m, tid, h) < M, out_col(tile_n, tid, j, e) < N):
                        C[out_row(tile_m, tid, h), out_col(tile_n, tid, j, e)] = acc[j * 4 + h * 2 + e]

    return main


@register("wgmma_gemm", "gemm", 21, WgmmaConfig, aliases=("warpgroup_mma", "wgmma"), tags=("float16",))
def wgmma_gemm(wl: Gemm, cfg: WgmmaConfig = WgmmaConfig()):
    """Warpgroup MMA (Hopper): fp16 inputs, fp32 accumulation through ``wgmma.mma_async``, each
    warpgroup of 128 threads multiplying 64 × 256 × 16 per instruction with both operands read by
    the tensor cores straight from shared memory; 2 warpgroups per 128 × 256 block, K tiles of 64 in
    a 4-stage cp.async ring stored in the 128-byte swizzled layout wgmma reads, one tile's wgmmas
    still running while the next tile's are issued, grouped block order.

    Step 19's ``mma.sync`` is a warp-wide, synchronous instruction fed from registers: every warp
    loads its fragments from shared memory (ldmatrix) and waits for each product. ``wgmma`` is
    issued by four warps at once, asynchronously, on descriptors of the shared tiles, so no
    fragment loads pass through registers and a thread can issue the next tile's copies while the
    tensor cores work; it is the instruction Hopper's full tensor-core rate is reached with (cuBLAS
    uses it). The shared tiles must be in one of its canonical layouts: A k-major and B n-major, in
    rows of 128 bytes whose 16-byte pieces are permuted by XOR with the row index (the 128-byte
    swizzle, which also keeps the copies free of bank conflicts). TVM's s_tir schedule language
    has no tensor intrinsic for a warpgroup instruction, so this step is written as a TIR kernel
    with ``T.ptx`` calls rather than as transformations of the naive loop nest.

    Measured on an H200 at 4096³ (``scripts/sweep_gemm.py --set wgmma``): 71% of cuBLAS fp16 with
    ``mma_overlap`` (the barrier and the copies of the next tile no longer leave the tensor cores
    idle), 67% waiting for each tile's wgmmas; step 19 reaches 44%.
    """
    return s_tir.Schedule(wgmma_kernel(wl, cfg))


@dataclass(frozen=True)
class Tf32WgmmaConfig(WgmmaConfig):
    """Step 21's parameters; 4 warpgroups of 64 × 128 by default (the many small copies of B go
    faster over 512 threads: 223 TFLOP/s at 4096³ on an H200 against 187 with 2 × 64 × 256)."""

    block_m: int = 256
    block_n: int = 128
    dtypes = ("float32",)
    step_name = "wgmma_tf32_gemm"
    tolerance = 2e-3  # tf32 keeps 10 of fp32's 23 mantissa bits: errors near 3e-4 against float64


@register("wgmma_tf32_gemm", "gemm", 23, Tf32WgmmaConfig, aliases=("tf32_gemm", "wgmma_tf32"), tags=("tf32",))
def wgmma_tf32_gemm(wl: Gemm, cfg: Tf32WgmmaConfig = Tf32WgmmaConfig()):
    """TF32 warpgroup MMA: fp32 inputs multiplied by the tensor cores as tf32 (10-bit mantissa), fp32
    accumulation: step 21's kernel with ``wgmma.mma_async.m64n128k8.f32.tf32.tf32``, 4 warpgroups per
    256 × 128 block, K tiles of 32 (still 128-byte rows), and B transposed on its way into shared memory.

    tf32 wgmma has no transpose immediates: both operands must be k-major in shared memory. A
    (M×K, row-major) is; B (K×N, row-major) is n-major, so each of its elements is copied on its own
    (4-byte ``cp.async``, a warp reading 32 consecutive columns of one row) into a k-major,
    128-byte-swizzled tile: 8× the copy instructions of the fp16 step for B. Results differ from
    fp32 by tf32 rounding (relative errors near 1e-4 to 1e-3, checked to 2e-3); compare it with
    cuBLAS in TF32 mode (``scripts/bench_gemm.py``: ``cublas_tf32``). Run by name:
    ``schedlab run`` leaves it out of the fp32 steps it runs by default.
    """
    return s_tir.Schedule(wgmma_kernel(wl, cfg))


# --- the best fp16 choice --------------------------------------------------------------------------
FP16_BLOCKS = (WgmmaConfig(), WgmmaConfig(block_n=128, stages=3, mma_overlap=False),
               WgmmaConfig(block_n=64, mma_overlap=False))


def choose_fp16(wl: Gemm, sms: int = H200_SMS):
    """The fp16 schedule for ``wl``: step 21 (wgmma) where its 16-byte copies fit the shape, with
    the largest block tile of :data:`FP16_BLOCKS` whose blocks cover at least 90% of the SMs (one
    block per SM: these tiles use most of an SM's registers or shared memory), else the one making
    the most blocks; step 19 (WMMA, any shape) where they do not. Returns ``(step name, config)``.

    Measured on an H200 (``scripts/sweep_gemm.py --set wgmma``): 128×256 with ``mma_overlap`` at
    4096³ and 2048³; 128×64 at 1024×512×2048 (64 blocks; 128×256 makes 16 and runs at half the
    speed), where overlapping costs 15% (two tiles copied ahead instead of three).
    """
    if wl.K % 8 or wl.N % 8:
        return "tensor_core_gemm", TensorCoreConfig()
    blocks = [cfg.launch(wl).grid[0] for cfg in FP16_BLOCKS]
    for cfg, n in zip(FP16_BLOCKS, blocks):
        if n >= 0.9 * sms:
            return "wgmma_gemm", cfg
    return "wgmma_gemm", FP16_BLOCKS[blocks.index(max(blocks))]


@dataclass(frozen=True)
class BestFp16Config(BestConfig):
    """No tile parameters: they are chosen per workload by :func:`choose_fp16`."""

    dtypes = ("float16",)
    choice_for = ("best_fp16_gemm", "float16", "best_gemm")

    def chosen(self, wl):
        return choose_fp16(wl, self.sms)


@register("best_fp16_gemm", "gemm", 22, BestFp16Config, aliases=("best_fp16",), tags=("float16",))
def best_fp16_gemm(wl: Gemm, cfg: BestFp16Config = BestFp16Config()):
    """Best fp16: warpgroup MMA (step 21) with the block tile that fills the GPU for the workload's
    shape, chosen by :func:`choose_fp16`; WMMA (step 19) where K or N is not a multiple of 8.

    Like best_gemm for fp32: one body, and what changes with the shape is how many blocks it makes.
    """
    name, chosen = cfg.chosen(wl)
    return get(name).builder(wl, chosen)
