"""Pieces shared by the Hopper TMA steps, gemm 20-23 (gemm_tma.py, gemm_tma_ws.py), gemm 27
(gemm_tma_tf32.py) and gemm 29-30 (gemm_fp8.py): the 128-byte swizzle constants, TMA loads and tensor-map encoding, the
accumulator fence, split-K's bookkeeping and second kernel, the operand copy kernels (padding,
transposition), and the warp-specialized ring that the fp16/bf16 and the tf32 kernels both run.

They are plain Python helpers returning TIR expressions or ``T.macro`` bodies, so sizes stay
compile-time constants and the simplifier sees the loop ranges.

The warp-specialized ring (gemm 21-23, 27, 29 and 30): ``stages`` shared-memory slots, each guarded by a
*full* barrier (bars[slot]: one arrival, the producer's ``expect_tx``, plus the bytes its TMA loads
complete) and an *empty* barrier (bars[stages + slot]: one arrival per consumer warpgroup, of
every block of the cluster). Everything is in closed form: K tile ``it`` of a block's stream (it =
unit index · K tiles per unit + kt) goes to slot it % stages with parity it // stages % 2.

* :func:`ring_barriers`: both barriers of every slot initialised, then a block (or cluster) sync;
* :class:`WorkUnits`: a block's work units (cid, cid + grid, ...) and how each is decoded into its
  output tile, its K slice (split-K) or product (bmm), and its first K tile;
* :func:`ring_producer`: the producer warpgroup: one thread walks the units issuing each K tile's
  TMA loads once its slot is empty (past the end of K: an arrival without bytes);
* :func:`ring_unit_done` and :func:`release_slot`: the consumers' side of the protocol: release a
  slot (in every block of the cluster), and at the end of a unit wait for its last wgmmas, release
  its last slot and pass the slots of K tiles past K.
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

_WG_SRC = ('__forceinline__ __device__ int tma_warp_group() {\n'
           '  return __shfl_sync(0xffffffff, (int)(threadIdx.x / 128), 0);\n}\n')


def warp_group_index():
    """The thread's warpgroup, lane 0's broadcast by ``__shfl_sync`` (CUTLASS's
    canonical_warp_group_idx): ptxas then knows it warp-uniform and keeps what is computed from it
    (the wgmma descriptors) in uniform registers instead of moving them there (R2UR) every K tile."""
    return T.cuda.func_call("tma_warp_group", source_code=_WG_SRC, return_type="int32")


def b_box_rows(block_n: int) -> int:
    """Rows of one TMA box of a B tile (columns of C): 64, one 8 KiB piece, where ``block_n`` is a
    multiple of 64 (an n-major B's panels are always 64 columns of 128 bytes); for a k-major B
    tile of another width (a multiple of 16: 144, 160, 224, chosen so that the tiles fill whole
    rounds of the SMs), the largest multiple of 8 up to 64 that divides it (144: 48, 160: 40,
    224: 56). Boxes of whole 8-row swizzle atoms (1024 bytes) lie back to back, so the tile in
    shared memory is the one a single box of ``block_n`` rows would write, and wgmma reads it with
    the same descriptors."""
    if block_n % 64 == 0:
        return 64
    return max(r for r in range(8, 65, 8) if block_n % r == 0)


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


_WAIT_SRC = ('__forceinline__ __device__ void tma_gemm_wait(void* bar, int phase) {\n'
             '  unsigned a = __cvta_generic_to_shared(bar);\n'
             '  asm volatile("{\\n.reg .pred P1;\\nLAB_WAIT:\\n"\n'
             '               "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1, %2;\\n"\n'
             '               "@P1 bra DONE;\\nbra LAB_WAIT;\\nDONE:\\n}" :: "r"(a), "r"(phase), "r"(0x989680) : "memory");\n'
             '}\n')


def wait_phase(bar_ptr, phase):
    """Wait for ``phase`` of an mbarrier, as CUTLASS's ClusterBarrier::wait (no ``.acquire`` qualifier,
    no ``.uni`` branches): ptxas then keeps the retry loop out of line."""
    T.evaluate(T.cuda.func_call("tma_gemm_wait", bar_ptr, phase, source_code=_WAIT_SRC))


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


def pad_copy_kernel(rows: int, cols: int, item: int, DT: str, pitch: int = 16):
    """(macro, padded columns): a kernel copying a ``rows × cols`` row-major matrix into a buffer
    whose rows are a whole number of ``pitch`` bytes (a multiple of 16), the extra columns zero. A tensor map needs a row
    pitch that is a multiple of 16 bytes; a matrix whose rows are not (K or N not a multiple of 8
    for 16-bit types, of 4 for fp32) is copied once into such a buffer (``pad_operands``), and the
    TMA kernel reads the copy. One thread per 16 bytes of the copy: element loads (the source rows
    start anywhere), one 16-byte store. ``rows`` counts every row of the array (a batch of
    matrices: batch × rows each), read through a flat view of ``src``."""
    V = 16 // item
    cols_pad = ceil_div(cols, pitch // item) * (pitch // item)
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



# ------------------------------------------------------------------------------------------------
# the warp-specialized ring (gemm 21-23 and gemm 27): barriers, work units, producer, unit end
# ------------------------------------------------------------------------------------------------
def grouped_tile(t, group_m: int, TM: int, TN: int):
    """(tile row, tile column) of tile ``t`` in the grouped order of a TM × TN tile grid:
    ``group_m`` tile rows of one column group run together (gemm_wgmma's order)."""
    GM = group_m
    first_m = t // (GM * TN) * GM
    rows = T.min(TM - first_m, GM)
    # everything is non-negative: C division (truncdiv) instead of TIR's floordiv, whose
    # sign fix-ups the simplifier cannot drop for the runtime divisor ``rows``
    return (first_m + T.truncmod(t % (GM * TN), rows), T.truncdiv(t % (GM * TN), rows))


class WorkUnits:
    """The work units of a warp-specialized kernel and how a block decodes them (plain Python
    returning TIR expressions). A unit is an output tile (of a cluster: ``tile_of`` maps a cluster
    tile and the block's rank in the cluster to the block's tile), with split-K a (tile, K slice)
    pair, in a bmm a (product, tile) pair; units are outer-major (u = slice·tiles + tile, or
    product·tiles + tile), every unit ``KTS`` K tiles long. The block (cluster) whose first unit is
    ``first`` takes units first, first + stride, ... (one unit each if not persistent)."""

    def __init__(self, tiles: int, stride: int, KT: int, KTS: int, splits: int, batch: int, tile_of):
        self.TILES, self.STRIDE = tiles, stride
        self.KT, self.KTS, self.SPLIT, self.BATCH = KT, KTS, splits, batch
        self.COUNT = tiles * splits * max(1, batch)
        self.OUTER = splits > 1 or batch > 0  # units carry an outer index: their K slice or their product
        self.PAD = KTS * splits > KT  # the last slice's last K tiles lie past K: not loaded, not multiplied
        self.tile_of = tile_of

    def count(self, first):
        """Units of the block whose first unit is ``first``."""
        return T.truncdiv(self.COUNT - 1 - first, self.STRIDE) + 1

    def unit(self, first, i):
        return first + i * self.STRIDE

    def tile(self, first, i, rank=0):
        """(tile_m, tile_n) of the block's ``i``-th unit."""
        u = self.unit(first, i)
        return self.tile_of(T.truncmod(u, self.TILES) if self.OUTER else u, rank)

    def k0(self, first, i):
        """The first K tile of the ``i``-th unit's K slice (split-K)."""
        return T.truncdiv(self.unit(first, i), self.TILES) * self.KTS

    def outer(self, first, i, parts: int):
        """The ``i``-th unit's K slice (``parts`` = slices) or product (``parts`` = batch)."""
        return slice_of(self.unit(first, i), self.TILES, parts)

    def k_tiles(self, part):
        """K tiles of slice ``part`` inside K (split-K with a ragged last slice)."""
        return k_tiles_of(part, self.KT, self.KTS)


def ring_barriers(S: int, empty_arrivals: int, CL: int = 1, full_arrivals: int = 1):
    """A macro: thread 0 initialises the ring's barriers, ``bars[0:S]`` *full* (``full_arrivals``:
    the producer's expect_tx, and a second one where it loads more into the slot, as the FP8 block
    scales: ring_producer's ``extra_load``) and ``bars[S:2S]`` *empty* (``empty_arrivals``: every
    consumer warpgroup of every block of the cluster), then the block (cluster: peers' barriers are
    initialized before anyone multicasts) synchronises."""

    @T.macro
    def init(bars, tid):
        if tid == 0:
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[s])),
                                               T.uint32(full_arrivals))
                T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[S + s])),
                                               T.uint32(empty_arrivals))
            T.ptx.fence.mbarrier_init.release.cluster()
        if CL > 1:
            T.cuda.cluster_sync()  # peers' barriers are initialized before anyone multicasts
        else:
            T.cuda.cta_sync()

    return init


def ring_producer(units: WorkUnits, S: int, producer_regs: int, load, full_let: bool = False, extra_load=None):
    """A macro: the producer warpgroup. It gives registers back (``setmaxnreg.dec``) and one thread
    walks the block's units issuing, per K tile, ``load(A_map, B_map, ring, full barrier, slot,
    K tile, tile_m, tile_n, rank, product)`` (the kernel's TMA loads, announcing their bytes on the
    full barrier) once the slot's previous fill was consumed; K tiles past K (split-K) load nothing
    and only arrive. ``full_let``: the full barrier's address bound to a name first. ``extra_load``
    (split-K 1 only): a second macro issued after ``load``, ``extra_load(X_map, Y_map, area, full
    barrier, slot, K tile, tile_m, tile_n)`` on the produce macro's arguments ``X_map, Y_map, area``
    (the FP8 block scales: fp8_block_scales.make_scale_tma_load)."""
    KTS, KT, SPLIT, BATCH, PAD = units.KTS, units.KT, units.SPLIT, units.BATCH, units.PAD

    @T.macro
    def produce(A_map, B_map, ring, bars, lane, n_tiles, first, rank, X_map=None, Y_map=None, area=None):
        T.ptx["setmaxnreg.dec.sync.aligned.u32"](producer_regs)
        if lane == 0:
            T.ptx.prefetch.tensormap(T.address_of(A_map))
            T.ptx.prefetch.tensormap(T.address_of(B_map))
            if extra_load is not None:
                T.ptx.prefetch.tensormap(T.address_of(X_map))
                T.ptx.prefetch.tensormap(T.address_of(Y_map))
            for i in T.serial(n_tiles):
                tm_, tn_ = T.meta_var(units.tile(first, i, rank))
                if SPLIT > 1:
                    k0: T.let[T.int32] = units.k0(first, i)  # first K tile
                if BATCH > 0:
                    b: T.let[T.int32] = units.outer(first, i, BATCH)  # the unit's product
                else:
                    b = T.meta_var(0)
                tile_m: T.let[T.int32] = tm_
                tile_n: T.let[T.int32] = tn_
                for kt in T.serial(KTS):
                    it: T.let[T.int32] = i * KTS + kt  # position in the block's stream of K tiles
                    slot: T.let[T.int32] = it % S
                    if full_let:
                        full_u32: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(T.address_of(bars[slot]))
                    else:
                        full_u32 = T.meta_var(T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])))
                    # fill it // S of the slot: wait until fill it // S - 1 was consumed (in every
                    # block of the cluster); a fresh barrier passes parity 1 at once
                    T.cuda.mbarrier_wait(T.address_of(bars[S + slot]), it // S % 2 ^ 1)
                    if SPLIT == 1:
                        load(A_map, B_map, ring, full_u32, slot, kt, tile_m, tile_n, rank, b)
                        if extra_load is not None:
                            extra_load(X_map, Y_map, area, full_u32, slot, kt, tile_m, tile_n)
                    elif PAD:
                        if k0 + kt < KT:
                            load(A_map, B_map, ring, full_u32, slot, k0 + kt, tile_m, tile_n, rank, b)
                        else:
                            # past K: nothing to load; the phase still completes (no bytes)
                            T.evaluate(T.ptx.mbarrier.arrive.shared.b64(full_u32, T.uint32(1)))
                    else:
                        load(A_map, B_map, ring, full_u32, slot, k0 + kt, tile_m, tile_n, rank, b)

    return produce


def ring_unit_done(units: WorkUnits, S: int, CL: int, n_acc: int):
    """A macro ending a consumer warpgroup's unit ``i`` after its ``n_k`` K tiles: wait for its
    last wgmmas, release the last slot, pass the slots of the K tiles past K (split-K: wait for
    their empty fill and release them, keeping the ring's protocol), fence the accumulators."""
    KTS, PAD = units.KTS, units.PAD

    @T.macro
    def done(acc, bars, i, n_k, lane):
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if lane == 0:
            release_slot(bars, S + (i * KTS + n_k - 1) % S, CL)
        if PAD:
            # K tiles past K: keep the ring's protocol (wait for the empty fill, release it)
            for kp in T.serial(KTS - n_k):
                T.cuda.mbarrier_wait(T.address_of(bars[(i * KTS + n_k + kp) % S]),
                                     (i * KTS + n_k + kp) // S % 2)
                if lane == 0:
                    release_slot(bars, S + (i * KTS + n_k + kp) % S, CL)
        fence_acc(acc, n_acc)

    return done


# ------------------------------------------------------------------------------------------------
# stream-K: the K tiles of all output tiles split evenly over the persistent blocks
# ------------------------------------------------------------------------------------------------
def _ints(*xs) -> bool:
    return all(isinstance(x, int) for x in xs)


def _div(a, b):  # non-negative operands: C division (see grouped_tile), or Python's on plain ints
    return a // b if _ints(a, b) else T.truncdiv(a, b)


def _min(a, b):
    return min(a, b) if _ints(a, b) else T.min(a, b)


def _max(a, b):
    return max(a, b) if _ints(a, b) else T.max(a, b)


def _sel(cond, a, b):
    return (a if cond else b) if isinstance(cond, bool) and _ints(a, b) else T.if_then_else(cond, a, b)


def stream_k_tiles(tiles: int, grid: int, KT: int) -> int:
    """Output tiles shared out K tile by K tile, after the others, which go whole, one per block and
    round (CUTLASS's data-parallel + stream-K hybrid): all of them where there are no more tiles
    than blocks; else the partial last round (one more round where it holds fewer K tiles than there
    are blocks, which every block must have one of; one round where the tiles are whole rounds: each
    block then takes one tile whole). The whole rounds walk K together from K = 0, so the A and B
    panels their tiles share are read from DRAM once; only the last round's few tiles are walked at
    staggered K offsets, and their panels fit in L2."""
    if tiles <= grid:
        return tiles
    rest = tiles % grid
    if rest == 0:
        return grid
    return rest if rest * KT >= grid else rest + grid


def stream_k_grid(tiles: int, k_tiles: int, sms: int) -> int:
    """Blocks (clusters) of a stream-K grid: one per SM, fewer only where there are fewer K tiles
    in all than SMs (every block walks at least one K tile)."""
    return min(sms, tiles * k_tiles)


class StreamUnits:
    """The work of a stream-K kernel and how a block decodes it (expressions that are TIR on TIR
    values and plain integers on integers, so that the decoding a kernel runs is the one the tests
    check in Python). ``tiles`` output tiles (cluster tiles) of ``KT`` K tiles on a grid of ``grid``
    blocks (clusters); ``tile_of(t, rank)``: the block's (tile_m, tile_n) of tile ``t``.

    The first ``DP`` tiles go whole: block ``b`` takes tiles ``b``, ``b + G``, ... (``DPW`` of them,
    a whole number of rounds). The last ``SK`` tiles (:func:`stream_k_tiles`) then form an iteration
    space of ``SK · KT`` K tiles, tile-major, which block ``b`` walks from ``⌊b · SKI / G⌋`` to
    ``⌊(b + 1) · SKI / G⌋`` (every block the same number of K tiles, ±1): one *unit* per tile its
    range touches, from its first K tile in that tile to its last. The ring's stream position of a
    unit is where it starts in the block's sequence of K tiles (closed form, as for split-K). Tiles
    of the stream-K part are numbered from 0 (*local*: tile ``DP + t``) by the fix-up's methods.

    A unit that covers its whole tile stores C as usual. A partial one stores its fp32 sums into
    *piece* ``2b`` (the block's first stream-K unit) or ``2b + 1`` (its last), and a fix-up kernel adds the
    pieces of each split tile (blocks :meth:`first_block` .. :meth:`last_block`, in order) and
    applies the epilogue: C is written once, and no block waits for another (no flags, no spin
    waits: nothing can deadlock when fewer blocks are resident than launched)."""

    def __init__(self, tiles: int, grid: int, KT: int, tile_of=None):
        self.TILES, self.G, self.KT, self.tile_of = tiles, grid, KT, tile_of
        self.SK = stream_k_tiles(tiles, grid, KT)
        self.SKI = self.SK * KT  # K tiles shared out
        self.DP = tiles - self.SK  # tiles walked whole, first
        self.DPW = self.DP // grid  # whole tiles per block, before its stream-K range
        self.PIECES = 2 * grid

    # --- a block ------------------------------------------------------------------------------
    def begin(self, b):
        """First K tile of block ``b``'s range of the stream-K iteration space."""
        return _div(b * self.SKI, self.G)

    def end(self, b):
        return _div((b + 1) * self.SKI, self.G)

    def first_tile(self, begin):
        """The local tile of the block's first stream-K unit (``begin``: :meth:`begin`)."""
        return _div(begin, self.KT)

    def sk_units(self, begin, end):
        """Units of the block's stream-K range: the tiles it touches (ranges are never empty: the
        grid has at most SKI blocks)."""
        return _div(end - 1, self.KT) - _div(begin, self.KT) + 1

    def count(self, n_sk):
        return n_sk + self.DPW

    # --- a unit: i-th of the block ------------------------------------------------------------
    def _part(self, i, shared, whole):
        """``whole`` for one of the block's whole tiles (its first DPW units), ``shared`` for a unit
        of its stream-K range; without whole tiles (DPW = 0) the first alone: the device passes'
        simplifier, given the facts of an unreachable branch, can fold its offsets into negative
        constants (a uint32 cast fails)."""
        return shared if self.DPW == 0 else _sel(i < self.DPW, whole, shared)

    def tile(self, b, begin, n_sk, i):
        """The unit's tile (index in the tile order)."""
        return self._part(i, self.DP + self.first_tile(begin) + i - self.DPW, b + i * self.G)

    def k0(self, begin, n_sk, i, tile):
        """The unit's first K tile (in its tile)."""
        return self._part(i, _max(begin - (tile - self.DP) * self.KT, 0), 0)

    def k_count(self, begin, end, n_sk, i, tile):
        """The unit's K tiles (≥ 1); KT for a whole tile. The outer max, as in :meth:`position`, bounds
        the count for the device passes' interval analysis (nothing changes: every unit has one)."""
        local = tile - self.DP
        return _max(self._part(i, _min(end - local * self.KT, self.KT) - _max(begin - local * self.KT, 0),
                               self.KT), 1)

    def position(self, begin, end, n_sk, i, tile):
        """Where the unit starts in the block's stream of K tiles (the ring's position). The outer
        max changes nothing (positions are ≥ 0); it bounds the position for the device passes, which
        must prove the ring offsets computed from it non-negative (the interval of a uint32 cast's operand
        in the tf32 kernel)."""
        return _max(self._part(i, self.DPW * self.KT + _max((tile - self.DP) * self.KT, begin) - begin,
                               i * self.KT), 0)

    def piece(self, b, i):
        """The workspace piece of a partial unit: the block's first stream-K unit (2b) or last (2b + 1)."""
        return b * 2 + _sel(i == self.DPW, 0, 1)

    # --- the fix-up: a stream-K tile ----------------------------------------------------------
    def first_block(self, t):
        """The block whose range holds local tile ``t``'s first K tile: the last b with begin(b) ≤ t·KT."""
        return _div((t * self.KT + 1) * self.G - 1, self.SKI)

    def last_block(self, t):
        """The block whose range holds tile ``t``'s last K tile."""
        return _div((t + 1) * self.KT * self.G - 1, self.SKI)

    def piece_of(self, b, t):
        """Block ``b``'s piece of tile ``t`` (t its first unit's tile: piece 2b, else 2b + 1)."""
        return b * 2 + _sel(self.first_tile(self.begin(b)) == t, 0, 1)

    def units_of(self, b):
        """Python: block ``b``'s units as (tile, first K tile, K tiles, stream position, piece or
        None for a whole tile), what the kernel's decoding gives."""
        begin, end = self.begin(b), self.end(b)
        n_sk = self.sk_units(begin, end)
        out = []
        for i in range(self.count(n_sk)):
            t = self.tile(b, begin, n_sk, i)
            n_k = self.k_count(begin, end, n_sk, i, t)
            out.append((t, self.k0(begin, n_sk, i, t), n_k, self.position(begin, end, n_sk, i, t),
                        None if n_k == self.KT else self.piece(b, i)))
        return out


def stream_plan(tiles: int, grid: int, KT: int) -> dict:
    """Python: what a stream-K grid does (the dispatcher's model): the most K tiles and units a
    block walks, the partial pieces stored, the tiles the fix-up finishes, and per block (K tiles,
    whole tiles stored, pieces stored, K tiles of its stream-K range)."""
    units = StreamUnits(tiles, grid, KT)
    per_block = [units.units_of(b) for b in range(grid)]
    pieces = sum(u[4] is not None for us in per_block for u in us)
    split = sum(units.first_block(t) != units.last_block(t) for t in range(units.SK))  # local tiles
    blocks = [(sum(u[2] for u in us), sum(u[4] is None for u in us), sum(u[4] is not None for u in us),
               sum(u[2] for u in us) - units.DPW * KT) for us in per_block]
    return {"sk_tiles": units.SK, "k_tiles": max(b[0] for b in blocks), "units": max(len(us) for us in per_block),
            "pieces": pieces, "split_tiles": split, "blocks": blocks}


def check_stream_k(cfg, wl: Gemm, tiles: int):
    """The stream-K knob's conditions: a persistent warp-specialized kernel, no split-K, no batch;
    the iteration space's products in 32 bits."""
    name = cfg.step_name
    if not cfg.stream_k:
        return
    if cfg.split_k != 1:
        raise ScheduleParamError(f"{name}: stream_k shares out K itself: split_k must be 1, got {cfg.split_k}")
    if not (cfg.persistent and cfg.warp_specialized):
        raise ScheduleParamError(f"{name}: stream_k needs the persistent warp-specialized kernel")
    if wl.batched:
        raise ScheduleParamError(f"{name}: stream_k takes no batch (a bmm fills the GPU with its products)")
    KT = ceil_div(wl.K, cfg.block_k)
    grid = stream_k_grid(tiles, KT, sms_of(cfg) // getattr(cfg, "cluster_m", 1))
    if (stream_k_tiles(tiles, grid, KT) * KT + KT) * grid >= 2**31:
        raise ScheduleParamError(f"{name}: stream_k's iteration space ({tiles} tiles x {KT} K tiles on {grid} "
                                 f"blocks) needs 64-bit indices")


def stream_producer(units: StreamUnits, S: int, producer_regs: int, load, full_let: bool = False):
    """:func:`ring_producer` for stream-K units: a unit's K tiles (its first K tile and count from
    the decoding) go to the ring from its stream position on; every K tile is inside K."""

    @T.macro
    def produce(A_map, B_map, ring, bars, lane, n_units, first, rank, sk_begin, sk_end, n_sk):
        T.ptx["setmaxnreg.dec.sync.aligned.u32"](producer_regs)
        if lane == 0:
            T.ptx.prefetch.tensormap(T.address_of(A_map))
            T.ptx.prefetch.tensormap(T.address_of(B_map))
            for i in T.serial(n_units):
                t: T.let[T.int32] = units.tile(first, sk_begin, n_sk, i)
                k0: T.let[T.int32] = units.k0(sk_begin, n_sk, i, t)
                n_k: T.let[T.int32] = units.k_count(sk_begin, sk_end, n_sk, i, t)
                pos: T.let[T.int32] = units.position(sk_begin, sk_end, n_sk, i, t)
                tm_, tn_ = T.meta_var(units.tile_of(t, rank))
                tile_m: T.let[T.int32] = tm_
                tile_n: T.let[T.int32] = tn_
                for kt in T.serial(n_k):
                    it: T.let[T.int32] = pos + kt
                    slot: T.let[T.int32] = it % S
                    if full_let:
                        full_u32: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(T.address_of(bars[slot]))
                    else:
                        full_u32 = T.meta_var(T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])))
                    T.cuda.mbarrier_wait(T.address_of(bars[S + slot]), it // S % 2 ^ 1)
                    load(A_map, B_map, ring, full_u32, slot, k0 + kt, tile_m, tile_n, rank, 0)

    return produce


def stream_unit_done(S: int, CL: int, n_acc: int):
    """A macro ending a consumer warpgroup's stream-K unit whose last K tile sits at stream position
    ``last``: wait for its wgmmas, release its slot, fence the accumulators (no K tile past K)."""

    @T.macro
    def done(acc, bars, last, lane):
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if lane == 0:
            release_slot(bars, S + last % S, CL)
        fence_acc(acc, n_acc)

    return done


def piece_index(piece, q, thread, e, n_acc: int, threads: int):
    """Element of a partial piece in the stream-K workspace: thread ``thread``'s accumulators
    4q..4q+3 (``e``), laid out so that the consumers' 16-byte stores and the fix-up's loads of one
    register group are coalesced across the threads."""
    return ((piece * (n_acc // 4) + q) * threads + thread) * 4 + e


def stream_store_piece(n_acc: int, threads: int):
    """A macro: one consumer warpgroup's fp32 accumulators into a workspace piece (float4 stores)."""

    @T.macro
    def store(W, acc, piece, thread):
        for q in T.unroll(n_acc // 4):
            for e in T.vectorized(4):
                W[piece_index(piece, q, thread, e, n_acc, threads)] = acc[q * 4 + e]

    return store


def fixup_groups_per_block(tiles: int, groups: int, blocks: int) -> int:
    """Register groups (4 accumulators of every consumer thread) one fix-up block adds: the fewest
    (a divisor of ``groups``) that keep the fix-up's grid of ``tiles`` split tiles within four
    blocks per SM of the main kernel's ``blocks`` (all of them: one block per tile where the tiles alone
    fill that): a few split tiles then still spread over every SM. One block per tile left 12 of 132
    SMs reading 11 pieces each for bf16 1000 × 4608 × 3584 (128 × 256 tiles): 58.8% of cuBLAS on an
    H100, 76.3% spread (docs/results.md, the H100's bench_llm_staged and bench_llm)."""
    return next((d for d in range(1, groups) if groups % d == 0 and tiles * (groups // d) <= 4 * blocks), groups)


def stream_fixup_kernel(units: StreamUnits, CL: int, threads: int, n_acc: int, store_group):
    """(macro ``fixup(W, C, bias, R)``, blocks): stream-K's fix-up kernel. Each stream-K (block)
    tile is shared by :func:`fixup_groups_per_block` blocks of the consumer warpgroups' threads, each
    taking some register groups q (accumulators 4q..4q+3 of every thread): a tile split over blocks
    first .. last sums their pieces in block order (deterministic) and ``store_group(C, bias, R, v,
    i, tile_m, tile_n, thread, q)`` applies the epilogue to the four sums ``v[i..i+3]`` and stores
    them where the consumer thread's accumulators 4q.. lie; a tile that one block computed whole is
    skipped (that block stored it). The pieces were written by the kernel before it (same stream):
    no waits."""
    GROUPS = n_acc // 4
    PER = fixup_groups_per_block(units.SK * CL, GROUPS, units.G * CL)
    PARTS = GROUPS // PER
    BLOCKS = units.SK * CL * PARTS

    @T.macro
    def fixup(W, C, bias, R):
        with T.launch_thread("blockIdx.x", BLOCKS) as fbid:
            ftid = T.launch_thread("threadIdx.x", threads)
            v = T.alloc_buffer((PER * 4,), "float32", scope="local")
            if CL > 1:
                t: T.let[T.int32] = fbid // PARTS // CL
                frank = T.meta_var(fbid // PARTS % CL)
            else:
                t: T.let[T.int32] = fbid // PARTS
                frank = T.meta_var(0)
            q0: T.let[T.int32] = fbid % PARTS * PER
            b0: T.let[T.int32] = units.first_block(t)
            b1: T.let[T.int32] = units.last_block(t)
            if b0 < b1:
                first_piece: T.let[T.int32] = units.piece_of(b0, t) * CL + frank
                for g in T.unroll(PER):
                    for e in T.vectorized(4):
                        v[g * 4 + e] = W[piece_index(first_piece, q0 + g, ftid, e, n_acc, threads)]
                for p in T.serial(b1 - b0):  # the later blocks start inside the tile: their first piece
                    for g in T.unroll(PER):
                        for e in T.vectorized(4):
                            v[g * 4 + e] = v[g * 4 + e] + W[piece_index(
                                (b0 + 1 + p) * 2 * CL + frank, q0 + g, ftid, e, n_acc, threads)]
                tm_, tn_ = T.meta_var(units.tile_of(units.DP + t, frank))
                tile_m: T.let[T.int32] = tm_
                tile_n: T.let[T.int32] = tn_
                for g in T.unroll(PER):
                    store_group(C, bias, R, v, g * 4, tile_m, tile_n, ftid, q0 + g)

    return fixup, BLOCKS


def stream_pieces(cfg, wl: Gemm) -> int:
    """Workspace pieces (block tiles of fp32) of a stream-K configuration: two per block."""
    return 2 * cfg.grid(wl.M, wl.N, wl.K)
