"""Pieces shared by the Hopper TMA steps, gemm 20-23 (gemm_tma.py, gemm_tma_ws.py) and gemm 26
(gemm_tma_tf32.py): the 128-byte swizzle constants, TMA loads and tensor-map encoding, the
accumulator fence, split-K's bookkeeping and second kernel, the operand copy kernels (padding,
transposition), and the warp-specialized ring that the fp16/bf16 and the tf32 kernels both run.

They are plain Python helpers returning TIR expressions or ``T.macro`` bodies, so sizes stay
compile-time constants and the simplifier sees the loop ranges.
"""

from __future__ import annotations

import math

from tvm.script import tirx as T

from .common import ceil_div, current_gpu
from .errors import ScheduleParamError
from .registry import Launch
from .workloads import Gemm, itemsize

ROW_BYTES = 128  # one K-tile row of A, one K row of a B panel: the 128-byte swizzle atom
SWIZZLE_128B = 3  # CUtensorMapSwizzle: CU_TENSOR_MAP_SWIZZLE_128B
DESC_SWIZZLE_128B = 1  # wgmma descriptor layout_type (bits 62-63): 1 = 128-byte swizzle
WARPGROUP = 128
ITEMSIZE = {"float16": 2, "bfloat16": 2}
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}


def sms_of(cfg) -> int:
    return cfg.sms or current_gpu().sms


# --- split-K (both configurations) ----------------------------------------------------------------
def split_k_tiles(cfg, K: int) -> tuple[int, int]:
    k_tiles = ceil_div(K, cfg.block_k)
    per_unit = ceil_div(k_tiles, max(1, cfg.split_k))
    return per_unit, ceil_div(k_tiles, per_unit)


def split_slices(cfg, K: int | None) -> int:
    if cfg.split_k == 1:
        return 1
    if K is None:
        raise ValueError(f"{cfg.step_name}: the grid of split_k={cfg.split_k} depends on K: grid(M, N, K)")
    return split_k_tiles(cfg, K)[1]


def slice_of(unit, tiles: int, splits: int):
    """The K slice of work unit ``unit`` (units are slice-major: unit = slice · tiles + tile). The
    min changes nothing (units < tiles · splits); it bounds the slice for the device passes, which
    must prove the ring offsets computed from it non-negative."""
    return T.min(T.truncdiv(unit, tiles), splits - 1)


def k_tiles_of(part, k_tiles: int, per_unit: int):
    """K tiles of slice ``part`` that lie inside K: ``per_unit`` but in the last slice. At least 1
    (slices starting past K are dropped, see split_k_tiles); the bound, again, is for the device passes."""
    return T.max(T.min(k_tiles - part * per_unit, per_unit), 1)


def split_workspace_bytes(cfg, wl: Gemm) -> int:
    slices = split_slices(cfg, wl.K)
    return 4 * slices * wl.M * wl.N if slices > 1 else 0


def check_split_k(cfg, wl: Gemm):
    name, K = cfg.step_name, wl.K
    k_tiles = ceil_div(K, cfg.block_k)
    if cfg.split_k < 1:
        raise ScheduleParamError(f"{name}: split_k must be ≥ 1, got {cfg.split_k}")
    if cfg.split_k > k_tiles:
        raise ScheduleParamError(f"{name}: split_k={cfg.split_k} exceeds the {k_tiles} K tiles of "
                                 f"{cfg.block_k} (K={K})")
    slices = split_slices(cfg, K)
    if slices > 1 and slices * wl.M * wl.N >= 2**31:
        raise ScheduleParamError(f"{name}: the split-K workspace ({slices} x {wl.M} x {wl.N} floats) "
                                 f"needs 64-bit indices; lower split_k")


# ``T.cuda.wgmma.noop_barrier(reg)`` (TVM 0.27) fails on a buffer element ("'TensorLoad' object
# has no attribute 'dtype'", backend/cuda/cpp/asm.py:417) and its helper takes the register *by
# value*, which fences a copy. CUTLASS's warpgroup_fence_operand is a macro on the variable itself:
_FENCE_SRC = '#define TMA_GEMM_FENCE_F32(x) asm volatile("" : "+f"(x) :: "memory")\n'


def fence_acc(acc, n):
    """Tie the accumulator registers to this point (no read or write of them moves across)."""
    for i in range(n):
        T.evaluate(T.cuda.func_call("TMA_GEMM_FENCE_F32", acc[i], source_code=_FENCE_SRC))


def tma_load(tmap, dst_u32, bar_u32, *coords):
    """One TMA tile load (coordinates innermost first: 2 for a matrix, 3 with a batch), completing
    on ``bar``."""
    return T.ptx[f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.mbarrier::complete_tx::bytes"](
        dst_u32, T.address_of(tmap), *coords, bar_u32)


def tma_multicast(tmap, dst_u32, bar_u32, mask, *coords):
    """TMA load written to (and completing on the barrier at the same offset in) every CTA of
    ``mask`` in the cluster."""
    return T.ptx[f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster"](dst_u32, T.address_of(tmap), *coords, bar_u32, T.uint16(mask))


def encode_map(tmap, data, dims, box, item: int, DT: str, L2: int, **kw):
    """Encode a tensor map (host side) of a row-major array of ``dims`` elements, innermost
    first (inner, rows[, batch]), read in boxes of ``box`` (the batch box is 1), 128-byte swizzle."""
    strides = [dims[0] * item * math.prod(dims[1:i]) for i in range(1, len(dims))]
    box = tuple(box) + (1,) * (len(dims) - len(box))
    return T.tensormap_encode_tiled(tmap, data, *dims, *strides, *box, *([1] * len(dims)),
                                    descriptor_dtype=DT, rank=len(dims), swizzle=SWIZZLE_128B,
                                    l2_promotion=L2, **kw)


SUM_THREADS = 128  # threads per block of split-K's second kernel


def split_sum_kernel(M: int, N: int, SPLIT: int):
    """(macro, blocks): split-K's second kernel, ``C = Σ_s P[s]`` over the fp32 partial products
    P[SPLIT, M, N]. C and P are contiguous, so the sum runs over the flat M·N outputs: one thread
    per ``V`` = 4 consecutive outputs (2 or 1 where M·N is not a multiple of 4: never for the
    shapes a tensor map takes), 16-byte loads and stores, consecutive threads on consecutive
    vectors (coalesced), the slices summed in order (deterministic); one guard where the last
    block is partial. Every partial was written by the first kernel (every unit stores its whole
    tile, bounds-checked like C), and P lives in L2 for the shapes split-K is for."""
    MN = M * N
    V = 4 if MN % 4 == 0 else 2 if MN % 2 == 0 else 1
    E = MN // V
    BLOCKS = ceil_div(E, SUM_THREADS)
    GUARD = E % SUM_THREADS != 0

    @T.macro
    def split_sum(P, C):
        with T.launch_thread("blockIdx.x", BLOCKS) as sum_bid:
            sum_tid = T.launch_thread("threadIdx.x", SUM_THREADS)
            total = T.alloc_buffer((V,), "float32", scope="local")
            P_flat = T.decl_buffer((SPLIT * MN,), "float32", data=P.data)
            C_flat = T.decl_buffer((MN,), "float32", data=C.data)
            if (sum_bid * SUM_THREADS + sum_tid < E) if GUARD else True:
                for v in T.vectorized(V):
                    total[v] = P_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v]
                for s in T.unroll(1, SPLIT):
                    for v in T.vectorized(V):
                        total[v] = total[v] + P_flat[s * MN + (sum_bid * SUM_THREADS + sum_tid) * V + v]
                for v in T.vectorized(V):
                    C_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v] = total[v]

    return split_sum, BLOCKS


PAD_THREADS = 256


def pad_copy_kernel(rows: int, cols: int, item: int, DT: str):
    """(macro, padded columns): a kernel copying a ``rows × cols`` row-major matrix into a buffer
    whose rows are a whole number of 16 bytes, the extra columns zero. A tensor map needs a row
    pitch that is a multiple of 16 bytes; a matrix whose rows are not (K or N not a multiple of 8
    for 16-bit types, of 4 for fp32) is copied once into such a buffer (``pad_operands``), and the
    TMA kernel reads the copy. One thread per 16 bytes of the copy: element loads (the source rows
    start anywhere), one 16-byte store. ``rows`` counts every row of the array (a batch of
    matrices: batch × rows each), read through a flat view of ``src``."""
    V = 16 // item
    cols_pad = ceil_div(cols, V) * V
    VECS = rows * cols_pad // V
    BLOCKS = ceil_div(VECS, PAD_THREADS)

    @T.macro
    def pad(src, dst):
        with T.launch_thread("blockIdx.x", BLOCKS) as pbid:
            ptid = T.launch_thread("threadIdx.x", PAD_THREADS)
            piece = T.alloc_buffer((V,), DT, scope="local")
            dst_flat = T.decl_buffer((rows * cols_pad,), DT, data=dst.data)
            src_flat = T.decl_buffer((rows * cols,), DT, data=src.data)
            if pbid * PAD_THREADS + ptid < VECS:
                for v in T.unroll(V):
                    piece[v] = T.if_then_else(
                        (pbid * PAD_THREADS + ptid) % (cols_pad // V) * V + v < cols,
                        src_flat[(pbid * PAD_THREADS + ptid) // (cols_pad // V) * cols
                                 + T.min((pbid * PAD_THREADS + ptid) % (cols_pad // V) * V + v, cols - 1)],
                        T.cast(0, DT))
                for v in T.vectorized(V):
                    dst_flat[(pbid * PAD_THREADS + ptid) * V + v] = piece[v]

    return pad, cols_pad


TRANSPOSE_TILE = 32


def transpose_kernel(rows: int, cols: int, item: int, DT: str):
    """(macro, padded rows): a kernel writing the transpose of a ``rows × cols`` row-major matrix
    into a ``cols × rows_pad`` one (``rows_pad``: rows rounded up to 16 bytes, the extra columns
    zero), for an operand a kernel can only read in the other major order (tf32 wgmma takes its
    shared-memory operand k-major only). The classic tiled transpose: a 32×32 tile read along the
    source rows and written along the destination rows, both coalesced, through shared memory
    padded by one column (no bank conflicts); 32×8 threads, four elements each."""
    TT = TRANSPOSE_TILE
    V = 16 // item
    rows_pad = ceil_div(rows, V) * V
    RB, CB = ceil_div(rows_pad, TT), ceil_div(cols, TT)

    @T.macro
    def transpose(src, dst):
        with T.launch_thread("blockIdx.x", RB * CB) as tbid:
            ttx = T.launch_thread("threadIdx.x", TT)
            tty = T.launch_thread("threadIdx.y", 8)
            # flat, rows of TT + 1: a 2-D (TT, TT + 1) buffer is compacted to the TT columns indexed
            tile = T.alloc_buffer((TT * (TT + 1),), DT, scope="shared")
            for i in T.unroll(TT // 8):
                tile[(tty + i * 8) * (TT + 1) + ttx] = T.if_then_else(
                    T.And(tbid // CB * TT + tty + i * 8 < rows, tbid % CB * TT + ttx < cols),
                    src[T.min(tbid // CB * TT + tty + i * 8, rows - 1), T.min(tbid % CB * TT + ttx, cols - 1)],
                    T.cast(0, DT))
            T.cuda.cta_sync()
            for i in T.unroll(TT // 8):
                if T.And(tbid % CB * TT + tty + i * 8 < cols, tbid // CB * TT + ttx < rows_pad):
                    dst[tbid % CB * TT + tty + i * 8, tbid // CB * TT + ttx] = tile[ttx * (TT + 1) + tty + i * 8]

    return transpose, rows_pad


def release_slot(bars, index, CL):
    """Arrive on empty barrier ``index``: this block's, and with a cluster every block's (each
    slot is refilled by multicasts from all of them, so all their consumers must be done)."""
    addr = T.cuda.cvta_generic_to_shared(T.address_of(bars[index]))
    if CL == 1:
        T.evaluate(T.ptx.mbarrier.arrive.shared.b64(addr, T.uint32(1)))
        return
    mapped = T.alloc_local([1], "uint32")
    for r in range(CL):
        # the same barrier in block r of the cluster (mapa: shared::cta -> shared::cluster address)
        T.evaluate(T.ptx.mapa.shared__cluster.u32(mapped[0], addr, T.uint32(r)))
        T.evaluate(T.ptx.mbarrier.arrive.shared__cluster.b64(mapped[0]))


def tma_launch(cfg, wl: Gemm) -> Launch:
    return Launch((cfg.grid(wl.M, wl.N, wl.K, wl.batches), 1, 1), (cfg.threads, 1, 1),
                  cfg.shared_bytes(itemsize(wl.dtype)),
                  threads_from="128 × (consumers + producer warpgroup)", shared_from="block tiles × stages",
                  dynamic_shared=True)

