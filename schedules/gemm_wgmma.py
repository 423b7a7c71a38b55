"""Hopper's warpgroup MMA (``wgmma``) for fp16 and tf32 GEMM, written as a TIR kernel,
and the fp16 choice per shape.

TVM 0.27's tensorize intrinsics stop at ``wmma`` and ``mma.sync`` (tensor_core_gemm); ``wgmma`` is a
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
from .registry import Launch, register
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
    waits for a tile's wgmmas one iteration later (the ring then copies one tile less ahead);
    ``copy_bytes``: the width of one copy of a row piece (16, 8, 4 through cp.async, 2 through
    registers); 0 takes the widest the shape allows (a row of A starts at a multiple of K·itemsize
    bytes, one of B at N·itemsize: a copy must not straddle two rows' alignment)."""

    block_m: int = 128
    block_n: int = 256
    stages: int = 4
    group_m: int = 8
    mma_overlap: bool = True  # leave one tile's wgmmas running while the next tile's are issued
    copy_bytes: int = 0
    dtypes = ("float16", "bfloat16")  # 16-bit inputs of one size: the tiles' layout is the same for both
    step_name = "wgmma_gemm"
    zero_means_auto = ("copy_bytes",)

    @property
    def warpgroups(self) -> int:
        return self.block_m // 64

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtypes[0]]

    def copy_widths(self, wl: Gemm) -> tuple[int, int]:
        """Bytes per copy of A and of B: ``copy_bytes``, or the widest that divides the row pitch
        (A: K·itemsize; fp16 B: N·itemsize; tf32 B is transposed on its way in, one 4-byte element
        at a time: tf32 wgmma reads both operands k-major)."""
        def widest(pitch_bytes):
            w = 16
            while w > self.itemsize and pitch_bytes % w:
                w //= 2
            return w

        a = self.copy_bytes or widest(wl.K * self.itemsize)
        b = 4 if self.itemsize == 4 else (self.copy_bytes or widest(wl.N * self.itemsize))
        return a, b

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
            raise ScheduleParamError(f"{name} takes {' or '.join(self.dtypes)} inputs, not {wl.dtype}")
        if self.block_m % 64 or not 64 <= self.block_m <= 256:
            raise ScheduleParamError(f"{name}: block_m must be 64, 128, 192 or 256 (64 rows per warpgroup), "
                                     f"got {self.block_m}")
        if self.block_n % 64 or not 64 <= self.block_n <= 256:
            raise ScheduleParamError(f"{name}: block_n must be 64, 128, 192 or 256 (whole 64-column "
                                     f"panels, wgmma's N ≤ 256), got {self.block_n}")
        if self.stages < 2 + self.mma_overlap:
            raise ScheduleParamError(f"{name}: stages must be at least {2 + self.mma_overlap} "
                                     f"(mma_overlap={self.mma_overlap}), got {self.stages}")
        a_bytes, b_bytes = self.copy_widths(wl)
        for what, width, pitch in (("A", a_bytes, wl.K), ("B", b_bytes, wl.N)):
            if width not in (2, 4, 8, 16) or width < self.itemsize or (pitch * self.itemsize) % width:
                raise ScheduleParamError(f"{name}: copy_bytes={width} does not fit {what}'s rows of "
                                         f"{pitch * self.itemsize} bytes ({wl}); 0 picks the widest that does")
        b_copies = self.block_n * self.block_k * self.itemsize // b_bytes
        if b_copies % self.threads or (self.block_m * self.block_k * self.itemsize // a_bytes) % self.threads:
            raise ScheduleParamError(f"{name}: the tiles' copies must divide over the {self.threads} threads "
                                     f"(block_m, block_n)")

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
    DT = wl.dtype
    TF32 = DT == "float32"  # fp32 inputs, read by the tensor cores as tf32
    BK = cfg.block_k  # elements in one 128-byte row
    VEC = 16 // cfg.itemsize  # elements in one 16-byte chunk
    WK = WGMMA_K_BYTES // cfg.itemsize  # K of one wgmma
    A_ELEMS = BM * BK  # one stage: the A tile, then the B tile
    STAGE = cfg.stage_elems()
    A_BYTES, B_BYTES = cfg.copy_widths(wl)  # bytes per copy: 16 where the rows allow it
    VA, VB = A_BYTES // cfg.itemsize, B_BYTES // cfg.itemsize  # elements per copy
    PA, PB = VEC // VA, VEC // VB  # copies per 16-byte chunk of the swizzled layout
    A_CHUNKS = A_ELEMS // VA // THREADS  # copies per thread per tile
    B_COPIES = BN * BK // VB // THREADS
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
        ab = {"float16": "f16", "bfloat16": "bf16"}[DT]
        mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{ab}.{ab}"]
        mma_flags = (1, 1, 0, 1)  # scale-a, scale-b, A k-major, B n-major (transposed)

    # Thread ``tid``'s ``c``-th copy of a tile and its place in the accumulator layout, as plain
    # expressions (Python helpers, not TIR variables), so the simplifier sees the loop ranges and
    # drops the bounds checks a shape does not need (at 4096³ all but one are provably true).
    def copy(dst, src, ok, size):  # one cp.async, zero-filled where ``ok`` is false
        return T.ptx["cp.async.cg.shared.global" if size == 16 else "cp.async.ca.shared.global"](
            T.address_of(dst), T.address_of(src), size, T.if_then_else(ok, T.uint32(size), T.uint32(0)))

    # Thread ``tid``'s ``c``-th copy of a tile: (shared index, global row, global column, in bounds).
    # A tile (BM x BK, k-major): row r is 128 bytes, its 16-byte chunk ch stored at ch ^ (r % 8);
    # a copy narrower than 16 bytes is piece p of its chunk.
    def a_piece(at, tid, c, tile_m, kt):
        q = c * THREADS + tid
        r, ch, p = q // (8 * PA), q % (8 * PA) // PA, q % PA
        gm, gk = tile_m * BM + r, kt * BK + ch * VEC + p * VA
        return at + r * BK + T.bitwise_xor(ch, r % 8) * VEC + p * VA, gm, gk, T.And(gm < M, gk < K)

    def b_piece(at, tid, c, tile_n, kt):
        q = c * THREADS + tid
        if TF32:
            # B tile stored k-major (BN rows of 128 bytes, chunks swizzled by n % 8): B is K x N
            # row-major, so each 4-byte element is copied alone, a warp reading 32 consecutive n
            n, k = q % BN, q // BN
            gk, gn = kt * BK + k, tile_n * BN + n
            return at + A_ELEMS + n * BK + T.bitwise_xor(k // 4, n % 8) * 4 + k % 4, gk, gn, T.And(gk < K, gn < N)
        # fp16/bf16: B tile n-major (64 x BN): 64-column panels, each K row of a panel 128 bytes,
        # swizzled by k % 8
        kr, nc, p = q // (ROW_CHUNKS * PB), q % (ROW_CHUNKS * PB) // PB, q % PB
        gk, gn = kt * BK + kr, tile_n * BN + nc * 8 + p * VB
        return (at + A_ELEMS + nc // 8 * PANEL + kr * 64 + T.bitwise_xor(nc % 8, kr % 8) * 8 + p * VB, gk, gn,
                T.And(gk < K, gn < N))

    def copy_a(A, smem, at, tid, c, tile_m, kt):
        dst, gm, gk, ok = a_piece(at, tid, c, tile_m, kt)
        return copy(smem[dst], A[T.min(gm, M - 1), T.min(gk, K - VA)], ok, A_BYTES)

    def copy_b(B, smem, at, tid, c, tile_n, kt):
        dst, gk, gn, ok = b_piece(at, tid, c, tile_n, kt)
        return copy(smem[dst], B[T.min(gk, K - 1), T.min(gn, N - VB)], ok, B_BYTES)

    def out_row(tile_m, tid, h):  # warp w of a warpgroup holds rows 16w.., each lane rows lane/4 and +8
        return tile_m * BM + tid // WARPGROUP * 64 + tid % WARPGROUP // 32 * 16 + tid % 32 // 4 + h * 8

    def out_col(tile_n, tid, j, e):  # ... and two adjacent columns of every 8-column group j
        return tile_n * BN + j * 8 + tid % 4 * 2 + e

    # 2-byte pieces (a 16-bit matrix with an odd row length): cp.async copies at least 4 bytes,
    # so these go through registers, plain loads and shared stores ordered by the same barriers
    # (and the same proxy fence) as the asynchronous copies
    A_SYNC, B_SYNC = A_BYTES < 4, B_BYTES < 4

    @T.macro
    def copy_tile(A, B, smem, base, tid, tile_m, tile_n, kt, slot):
        for c in T.unroll(A_CHUNKS):
            if A_SYNC:
                dst, gm, gk, ok = T.meta_var(a_piece(base + slot * STAGE, tid, c, tile_m, kt))
                smem[dst] = T.if_then_else(ok, A[T.min(gm, M - 1), T.min(gk, K - 1)], T.cast(0, DT))
            else:
                copy_a(A, smem, base + slot * STAGE, tid, c, tile_m, kt)
        for c in T.unroll(B_COPIES):
            if B_SYNC:
                dst, gk, gn, ok = T.meta_var(b_piece(base + slot * STAGE, tid, c, tile_n, kt))
                smem[dst] = T.if_then_else(ok, B[T.min(gk, K - 1), T.min(gn, N - 1)], T.cast(0, DT))
            else:
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
        # grouped block order (rasterized_gemm): GM block-rows of one column group run together
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


@register("wgmma_gemm", "gemm", WgmmaConfig, aliases=("warpgroup_mma", "wgmma"), tags=("float16",))
def wgmma_gemm(wl: Gemm, cfg: WgmmaConfig = WgmmaConfig()):
    """Warpgroup MMA (Hopper): fp16 inputs, fp32 accumulation through ``wgmma.mma_async``, each
    warpgroup of 128 threads multiplying 64 × 256 × 16 per instruction with both operands read by
    the tensor cores straight from shared memory; 2 warpgroups per 128 × 256 block, K tiles of 64 in
    a 4-stage cp.async ring stored in the 128-byte swizzled layout wgmma reads, one tile's wgmmas
    still running while the next tile's are issued, grouped block order.

    tensor_core_gemm's ``mma.sync`` is a warp-wide, synchronous instruction fed from registers: every warp
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
    idle), 67% waiting for each tile's wgmmas; tensor_core_gemm reaches 44%.
    """
    return s_tir.Schedule(wgmma_kernel(wl, cfg))


@dataclass(frozen=True)
class Tf32WgmmaConfig(WgmmaConfig):
    """wgmma_gemm's parameters; 4 warpgroups of 64 × 128 by default (the many small copies of B go
    faster over 512 threads: 223 TFLOP/s at 4096³ on an H200 against 187 with 2 × 64 × 256)."""

    block_m: int = 256
    block_n: int = 128
    dtypes = ("float32",)
    step_name = "wgmma_tf32_gemm"
    tolerance = 2e-3  # tf32 keeps 10 of fp32's 23 mantissa bits: errors near 3e-4 against float64


@register("wgmma_tf32_gemm", "gemm", Tf32WgmmaConfig, aliases=("tf32_gemm", "wgmma_tf32"), tags=("tf32",))
def wgmma_tf32_gemm(wl: Gemm, cfg: Tf32WgmmaConfig = Tf32WgmmaConfig()):
    """TF32 warpgroup MMA: fp32 inputs multiplied by the tensor cores as tf32 (10-bit mantissa), fp32
    accumulation: wgmma_gemm's kernel with ``wgmma.mma_async.m64n128k8.f32.tf32.tf32``, 4 warpgroups per
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
