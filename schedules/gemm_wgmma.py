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

Operand layouts (``gemm:...:nt`` etc., :class:`schedules.workloads.Gemm`): for 16-bit inputs each
shared tile keeps its operand's stored major order and wgmma reads it through its transpose bits
(imm-trans-a = 1 for an A stored K×M, kept m-major in 64-row panels; imm-trans-b = 0 for a B stored
N×K, kept k-major like A), so every copy stays a whole 16-byte chunk. tf32 wgmma has no transpose:
an operand stored m- or n-major is transposed on its way in, one 4-byte element per copy
(:func:`operand_kinds`). A batch of products (``bmm:...``) is folded into blockIdx.x, batch
outermost, each block reading its product's slices of the 3-D operands. A linear layer's epilogue
and a 16-bit output (16-bit inputs) are computed on the accumulators before the one store of D
(wgmma_epilogue.py): pairs of outputs stored as one vector.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .tma_common import ROW_BYTES, WARPGROUP  # a K tile row: the 128-byte swizzle atom (64 fp16, 32 tf32)
from .wgmma_epilogue import kernel_entry, make_fused_store
from .workloads import LAYOUTS, Gemm

SWIZZLE_128B = 3  # TVM's descriptor encoder: 0 none, 1 32 B, 2 64 B, 3 128 B
WGMMA_K_BYTES = 32  # K of one wgmma: 16 fp16 (m64nNk16) or 8 tf32 (m64nNk8)
ITEMSIZE = {"float16": 2, "float32": 4}
SYNC_GROUP = 32  # 2-byte copies whose loads are issued together (a register each; groups of 8: 1.07x, 32: 1.28x)


@dataclass(frozen=True)
class WgmmaConfig(StepConfig):
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
    epilogues = True  # computed on the accumulators, D stored once in its type (wgmma_epilogue.py)
    layouts = LAYOUTS  # 16-bit: wgmma's transpose bits; tf32: an operand stored m/n-major is transposed on its way in
    batched = True     # a bmm: the batch folded into blockIdx.x (batch outermost), base offsets per product
    step_name = "wgmma_gemm"
    archs = ("sm_90a",)  # wgmma exists only in sm_90a (Blackwell has tcgen05 instead)
    arch_features = "wgmma"
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
        """Bytes per copy of A and of B: ``copy_bytes``, or the widest that divides the stored row
        pitch (A: K·itemsize, or M·itemsize stored transposed; B: N·itemsize, or K·itemsize stored
        transposed). tf32 wgmma reads both operands k-major and has no transpose, so a tf32 operand
        stored m- or n-major (B in nn/tn, A in tn/tt) is transposed on its way in, one 4-byte
        element at a time."""
        def widest(pitch_bytes):
            w = 16
            while w > self.itemsize and pitch_bytes % w:
                w //= 2
            return w

        a_pitch, b_pitch = _pitches(wl)
        a = 4 if self.itemsize == 4 and wl.trans_a else (self.copy_bytes or widest(a_pitch * self.itemsize))
        b = 4 if self.itemsize == 4 and not wl.trans_b else (self.copy_bytes or widest(b_pitch * self.itemsize))
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
        for what, width, pitch in zip("AB", (a_bytes, b_bytes), _pitches(wl)):
            if width not in (2, 4, 8, 16) or width < self.itemsize or (pitch * self.itemsize) % width:
                raise ScheduleParamError(f"{name}: copy_bytes={width} does not fit {what}'s rows of "
                                         f"{pitch * self.itemsize} bytes ({wl}); 0 picks the widest that does")
        b_copies = self.block_n * self.block_k * self.itemsize // b_bytes
        if b_copies % self.threads or (self.block_m * self.block_k * self.itemsize // a_bytes) % self.threads:
            raise ScheduleParamError(f"{name}: the tiles' copies must divide over the {self.threads} threads "
                                     f"(block_m, block_n)")

    def launch(self, wl: Gemm) -> Launch:
        tiles = ceil_div(wl.M, self.block_m) * ceil_div(wl.N, self.block_n)
        return Launch((tiles * wl.batches, 1, 1), (self.threads, 1, 1), self.shared_bytes(),
                      threads_from="block_m (128 threads per 64 rows)", shared_from="block_m, block_n, stages",
                      dynamic_shared=True)


def _pitches(wl: Gemm) -> tuple[int, int]:
    """Elements per stored row of A and of B: K, or M for an A stored transposed (K×M); N, or K
    for a B stored transposed (N×K)."""
    return (wl.M if wl.trans_a else wl.K), (wl.K if wl.trans_b else wl.N)


def operand_kinds(wl: Gemm) -> tuple[str, str]:
    """How each operand's tile goes into shared memory, for the layout and input type:

    * ``"rows"``: k-major tile (one 128-byte row of K per m or n, its 16-byte chunks swizzled by
      row % 8) copied from an operand stored k-contiguous (A in nn/nt, B in nt/tt): whole chunks;
    * ``"panels"``: m- or n-major tile (64-wide panels, each K row of a panel 128 bytes, chunks
      swizzled by k % 8) copied from an operand stored m/n-contiguous (16-bit B in nn/tn, 16-bit A
      in tn/tt): whole chunks, read by wgmma with its transpose bit set;
    * ``"elements"``: k-major tile copied from an operand stored m/n-contiguous, one 4-byte element
      per copy (tf32: no transpose bits; B in nn/tn, A in tn/tt).
    """
    tf32 = wl.dtype == "float32"
    a = "rows" if not wl.trans_a else ("elements" if tf32 else "panels")
    b = "rows" if wl.trans_b else ("elements" if tf32 else "panels")
    return a, b


@dataclass(frozen=True)
class OperandPlan:
    """How one operand's tile is copied into shared memory (see :func:`operand_kinds`): ``rows``
    of the tile along m or n (block_m or block_n), the matrix's extent there (``ext``: M or N),
    ``vector`` elements per copy, ``pieces`` copies per 16-byte chunk, ``copies`` per thread."""

    kind: str
    rows: int
    ext: int
    vector: int
    pieces: int
    copies: int
    nbytes: int

    @property
    def kmajor(self) -> bool:
        return self.kind != "panels"


def operand_plans(wl: Gemm, cfg: WgmmaConfig) -> tuple[OperandPlan, OperandPlan]:
    """The copy plans of A and B for ``wl`` (its layout and input type) and ``cfg``."""
    a_kind, b_kind = operand_kinds(wl)
    a_bytes, b_bytes = cfg.copy_widths(wl)
    vec = 16 // cfg.itemsize
    plans = []
    for kind, rows, ext, nbytes in ((a_kind, cfg.block_m, wl.M, a_bytes), (b_kind, cfg.block_n, wl.N, b_bytes)):
        v = nbytes // cfg.itemsize
        plans.append(OperandPlan(kind, rows, ext, v, vec // v, rows * cfg.block_k // v // cfg.threads, nbytes))
    return plans[0], plans[1]


def copy_piece(kind, q, at, tile0, kt, R, ext, K, BK, VEC, V, P):
    """Copy number ``q`` of a tile (``R`` = block_m or block_n rows or columns, ``tile0`` its first,
    ``ext`` = M or N; ``V`` elements per copy, ``P`` copies per 16-byte chunk), as plain expressions:
    ``(shared index, stored row, stored column, in bounds)``, the stored indices in the operand's
    stored order (m|n, k) for ``rows`` and (k, m|n) otherwise (see :func:`operand_kinds`)."""
    if kind == "rows":  # row r of 128 bytes, its 16-byte chunk ch stored at ch ^ (r % 8), piece p of it
        r, ch, p = q // (8 * P), q % (8 * P) // P, q % P
        g, gk = tile0 + r, kt * BK + ch * VEC + p * V
        return at + r * BK + T.bitwise_xor(ch, r % 8) * VEC + p * V, g, gk, T.And(g < ext, gk < K)
    if kind == "panels":  # K row kr of 64-column panel nc // 8, its chunk nc % 8 stored at (nc % 8) ^ (kr % 8)
        row_chunks = R // 8
        kr, nc, p = q // (row_chunks * P), q % (row_chunks * P) // P, q % P
        gk, g = kt * BK + kr, tile0 + nc * 8 + p * V
        return (at + nc // 8 * (64 * BK) + kr * 64 + T.bitwise_xor(nc % 8, kr % 8) * 8 + p * V, gk, g,
                T.And(gk < K, g < ext))
    # elements (tf32): k-major rows of n, chunks swizzled by n % 8; a warp reads 32 consecutive n
    n, k = q % R, q // R
    gk, g = kt * BK + k, tile0 + n
    return at + n * BK + T.bitwise_xor(k // 4, n % 8) * 4 + k % 4, gk, g, T.And(gk < K, g < ext)


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
    PLAN_A, PLAN_B = operand_plans(wl, cfg)  # how each tile is copied (the layout and the input type)
    A_BYTES, B_BYTES = PLAN_A.nbytes, PLAN_B.nbytes  # bytes per copy: 16 where the rows allow it
    VA, VB = PLAN_A.vector, PLAN_B.vector  # elements per copy
    PA, PB = PLAN_A.pieces, PLAN_B.pieces  # copies per 16-byte chunk of the swizzled layout
    A_CHUNKS = PLAN_A.copies  # copies per thread per tile
    B_COPIES = PLAN_B.copies
    PANEL = 64 * BK  # (16-bit) one 64-column panel of an m- or n-major tile
    ACC = BN // 2  # fp32 accumulators per thread: 64 x BN over 128 threads
    KT = ceil_div(K, BK)
    TM, TN = ceil_div(M, BM), ceil_div(N, BN)
    TILES = TM * TN
    BATCHED = wl.batched
    A_KIND, B_KIND = PLAN_A.kind, PLAN_B.kind
    A_KMAJOR, B_KMAJOR = PLAN_A.kmajor, PLAN_B.kmajor
    # the stored extents of A and B (rows, columns) and of each copy's source piece
    A_EXT = (M, K) if A_KIND == "rows" else (K, M)
    B_EXT = (N, K) if B_KIND == "rows" else (K, N)
    SBO = 8 * ROW_BYTES // 16  # descriptor offsets are in 16-byte units: next group of 8 rows, 1024 bytes
    A_LBO = 1 if A_KMAJOR else PANEL * 2 // 16  # (16-bit m-major A: next 64-row panel; one per warpgroup)
    B_LBO = 1 if B_KMAJOR else PANEL * 2 // 16  # 16-bit n-major B: next 64-column panel of B
    A_STEP = WK if A_KMAJOR else WK * 64  # elements between the A slices of two k steps
    B_STEP = WK if B_KMAJOR else WK * BK  # elements between the B slices of two k steps
    if TF32:  # tf32 wgmma has no transpose: both operands k-major
        mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BN}k8.f32.tf32.tf32"]
        mma_flags = (1, 1)  # scale-a, scale-b
    else:
        ab = {"float16": "f16", "bfloat16": "bf16"}[DT]
        mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{ab}.{ab}"]
        # scale-a, scale-b, imm-trans-a (A m-major), imm-trans-b (B n-major): nn is (1, 1, 0, 1)
        mma_flags = (1, 1, int(not A_KMAJOR), int(not B_KMAJOR))

    # Thread ``tid``'s ``c``-th copy of a tile and its place in the accumulator layout, as plain
    # expressions (Python helpers, not TIR variables), so the simplifier sees the loop ranges and
    # drops the bounds checks a shape does not need (at 4096³ all but one are provably true).
    def copy(dst, src, ok, size):  # one cp.async, zero-filled where ``ok`` is false
        return T.ptx["cp.async.cg.shared.global" if size == 16 else "cp.async.ca.shared.global"](
            T.address_of(dst), T.address_of(src), size, T.if_then_else(ok, T.uint32(size), T.uint32(0)))

    def load(X, bz, i0, i1):  # an element of a stored operand (of product bz in a batch)
        return X[bz, i0, i1] if BATCHED else X[i0, i1]

    # Thread ``tid``'s ``c``-th copy of a tile: (shared index, stored row, stored column, in bounds)
    # (:func:`copy_piece`); a copy narrower than 16 bytes is piece p of its chunk.
    def a_piece(at, tid, c, tile_m, kt):
        return copy_piece(A_KIND, c * THREADS + tid, at, tile_m * BM, kt, BM, M, K, BK, VEC, VA, PA)

    def b_piece(at, tid, c, tile_n, kt):
        return copy_piece(B_KIND, c * THREADS + tid, at + A_ELEMS, tile_n * BN, kt, BN, N, K, BK, VEC, VB, PB)

    def copy_a(A, smem, at, tid, c, tile_m, kt, bz):
        dst, i0, i1, ok = a_piece(at, tid, c, tile_m, kt)
        return copy(smem[dst], load(A, bz, T.min(i0, A_EXT[0] - 1), T.min(i1, A_EXT[1] - VA)), ok, A_BYTES)

    def copy_b(B, smem, at, tid, c, tile_n, kt, bz):
        dst, i0, i1, ok = b_piece(at, tid, c, tile_n, kt)
        return copy(smem[dst], load(B, bz, T.min(i0, B_EXT[0] - 1), T.min(i1, B_EXT[1] - VB)), ok, B_BYTES)

    def out_row(tile_m, tid, h):  # warp w of a warpgroup holds rows 16w.., each lane rows lane/4 and +8
        return tile_m * BM + tid // WARPGROUP * 64 + tid % WARPGROUP // 32 * 16 + tid % 32 // 4 + h * 8

    def out_col(tile_n, tid, j, e):  # ... and two adjacent columns of every 8-column group j
        return tile_n * BN + j * 8 + tid % 4 * 2 + e

    def tile_of(bid):  # the output tile of a block, and the product of the batch it belongs to
        return bid % TILES if BATCHED else bid

    def batch_of(bid):
        return bid // TILES if BATCHED else 0

    # 2-byte pieces (a 16-bit matrix with an odd row length): cp.async copies at least 4 bytes,
    # so these go through registers, plain loads and shared stores ordered by the same barriers
    # (and the same proxy fence) as the asynchronous copies. A thread's loads of up to SYNC_GROUP
    # copies are issued first, each into its register (zero outside the matrix), then stored: with
    # each load's store right after it, a warp waited for every load before issuing the next (H200,
    # 108 products of odd rows on 64 x 64 to 128 x 256 tiles: 1.28x, geometric mean; loading every
    # piece unconditionally from clamped indices and zeroing by a select was 1.12x, down to 0.38x)
    A_SYNC, B_SYNC = A_BYTES < 4, B_BYTES < 4
    # copies per group: the most, up to SYNC_GROUP, that divides each 2-byte operand's copies per thread
    # (128 x 192: 32 of A, 48 of B, groups of 16)
    SYNC_COPIES = [n for n, sync in ((A_CHUNKS, A_SYNC), (B_COPIES, B_SYNC)) if sync]
    GROUP = max(d for d in range(1, SYNC_GROUP + 1) if all(n % d == 0 for n in SYNC_COPIES))

    @T.macro
    def sync_copies(X, ext, piece, copies, smem, at, tid, tile, kt, bz, staged):
        for g in T.unroll(copies // GROUP):
            for c in T.unroll(GROUP):
                _, i0, i1, ok = T.meta_var(piece(at, tid, g * GROUP + c, tile, kt))
                staged[c] = T.if_then_else(ok, load(X, bz, T.min(i0, ext[0] - 1), T.min(i1, ext[1] - 1)), T.cast(0, DT))
            for c in T.unroll(GROUP):
                dst, _i0, _i1, _ok = T.meta_var(piece(at, tid, g * GROUP + c, tile, kt))
                smem[dst] = staged[c]

    @T.macro
    def copy_tile(A, B, smem, base, tid, tile_m, tile_n, kt, slot, bz, staged):
        if A_SYNC:
            sync_copies(A, A_EXT, a_piece, A_CHUNKS, smem, base + slot * STAGE, tid, tile_m, kt, bz, staged)
        else:
            for c in T.unroll(A_CHUNKS):
                copy_a(A, smem, base + slot * STAGE, tid, c, tile_m, kt, bz)
        if B_SYNC:
            sync_copies(B, B_EXT, b_piece, B_COPIES, smem, base + slot * STAGE, tid, tile_n, kt, bz, staged)
        else:
            for c in T.unroll(B_COPIES):
                copy_b(B, smem, base + slot * STAGE, tid, c, tile_n, kt, bz)

    # with an epilogue or another output type: computed on the accumulators, D stored in its type
    FUSED = wl.has_epilogue
    fused = make_fused_store(wl, BM, BN, 1, M % BM != 0, N % BN != 0) if FUSED else None

    @T.macro
    def body(A, B, bias, R, C):
        bid = T.launch_thread("blockIdx.x", TILES * wl.batches)
        tid = T.launch_thread("threadIdx.x", THREADS)
        smem = T.alloc_buffer((S * STAGE + 1024 // cfg.itemsize,), DT, scope="shared.dyn")
        acc = T.alloc_buffer((ACC,), "float32", scope="local")
        desc_a = T.alloc_buffer((1,), "uint64", scope="local")
        desc_b = T.alloc_buffer((1,), "uint64", scope="local")
        staged = T.alloc_buffer((GROUP,), DT, scope="local")  # 2-byte copies' loads
        # a batch: the blocks of product bz are blocks bz·TILES ... (bz + 1)·TILES - 1
        tb = T.meta_var(tile_of(bid))
        bz = T.meta_var(batch_of(bid))
        # grouped block order (rasterized_gemm): GM block-rows of one column group run together
        first_m = tb // (GM * TN) * GM
        rows = T.min(TM - first_m, GM)
        tile_m = first_m + tb % (GM * TN) % rows
        tile_n = tb % (GM * TN) // rows
        # the ring starts on a 1024-byte boundary, where the 128-byte swizzle pattern starts
        addr = T.cuda.cvta_generic_to_shared(T.address_of(smem[0]))
        base = T.cast((T.uint32(1024) - (addr & T.uint32(1023))) & T.uint32(1023), "int32") // cfg.itemsize
        wg = tid // WARPGROUP
        # the two matrix descriptors of the ring's start (128-byte swizzle, 1024 bytes between 8-row
        # groups; 16-bit m/n-major tiles' 64-wide panels PANEL apart); the loop only moves their start addresses
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc_a[0]), T.address_of(smem[base]), A_LBO, SBO,
                                              SWIZZLE_128B)
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc_b[0]), T.address_of(smem[base]), B_LBO, SBO,
                                              SWIZZLE_128B)
        for s in T.unroll(AHEAD):  # prologue: K tiles 0 .. AHEAD-1 in flight
            if s < KT:
                copy_tile(A, B, smem, base, tid, tile_m, tile_n, s, s, bz, staged)
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
                # A: this warpgroup's 64 rows, WK columns in (32 bytes along the swizzled rows), or
                # (m-major) its 64-row panel, WK K rows down; B: the next WK K rows (n-major) or 32
                # bytes along its rows (k-major).
                # scale-d false on the very first: no separate zeroing of the accumulators
                mma(*[acc[i] for i in range(ACC)],
                    desc_a[0] + T.uint64((cur * STAGE + wg * 64 * BK + kk * A_STEP) // VEC),
                    desc_b[0] + T.uint64((cur * STAGE + A_ELEMS + kk * B_STEP) // VEC),
                    T.Or(kt > 0, kk > 0), *mma_flags)
            T.ptx.wgmma.commit_group.sync.aligned()
            # while the tensor cores work: the copies of tile kt+AHEAD into tile kt-1-LAG's slot
            if kt + AHEAD < KT:
                copy_tile(A, B, smem, base, tid, tile_m, tile_n, kt + AHEAD, (kt + AHEAD) % S, bz, staged)
            T.ptx["cp.async.commit_group"]()
            T.ptx.wgmma.wait_group.sync.aligned(LAG)
        if LAG > 0:
            T.ptx.wgmma.wait_group.sync.aligned(0)
        if FUSED:  # the epilogue on the accumulators, pairs of outputs stored as one vector
            fused(C, bias, R, acc, tile_m, tile_n, wg * 64, tid % WARPGROUP, bz)
        else:
            # the accumulators straight to C (the wgmma accumulator layout: out_row, out_col)
            for j in T.unroll(BN // 8):
                for h in T.unroll(2):
                    for e in T.unroll(2):
                        if T.And(out_row(tile_m, tid, h) < M, out_col(tile_n, tid, j, e) < N):
                            if BATCHED:
                                C[bz, out_row(tile_m, tid, h), out_col(tile_n, tid, j, e)] = acc[j * 4 + h * 2 + e]
                            else:
                                C[out_row(tile_m, tid, h), out_col(tile_n, tid, j, e)] = acc[j * 4 + h * 2 + e]

    return kernel_entry(wl, body)


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
