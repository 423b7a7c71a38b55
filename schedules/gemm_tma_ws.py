"""gemm 21-23: warp specialization (warp_specialized_gemm), persistent tiles (persistent_gemm) and
thread-block clusters (cluster_gemm): one fp16/bf16 kernel, :func:`ws_kernel`, with one piece turned
on per step. Its configuration, geometry, loader, wgmma macro and epilogue are gemm 20's
(gemm_tma.py); its ring (barrier set-up, producer loop, work-unit decoding, the end of a unit) is
tma_common.py's, which the tf32 kernel of gemm 27 runs too.

gemm 21, warp specialization (``warp_specialized=True``): warpgroup 0 is the producer: it gives
registers back (``setmaxnreg.dec``) and one thread walks the block's output tiles issuing, per K tile, one TMA
load of the A tile (block_m × 64, 128-byte swizzle) and block_n/64 loads of 64-column B panels (a B stored
N×K takes any block_n that is a multiple of 16, in boxes of tma_common.b_box_rows rows: 224 in four of 56) into
a ring of ``stages`` slots, each guarded by a *full* barrier (TMA completes its byte count) and an
*empty* barrier (one arrival per consumer warpgroup). Warpgroups 1..consumers take registers
(``setmaxnreg.inc``), wait on *full*, issue ``wgmma.mma_async`` on descriptors of the slot, keep one
K tile's wgmmas in flight and release the previous slot after ``wgmma.wait_group 1``; at the end of
a tile they store their fp32 accumulators straight to C while the producer already fills the ring
for the next tile. gemm 22, ``persistent=True``, launches ``min(SMs, tiles)`` blocks that stride over the
tiles in grouped order (``group_m`` block-rows per group); ``False`` launches one block per tile.
With ``pingpong=True`` (persistent_gemm) the two consumer warpgroups take whole tiles in turn, so
that one runs its epilogue while the other's wgmmas keep the tensor cores busy, with an ordered
hand-off between their mainloops (schedules/pingpong.py, shared with the FP8 kernels; a first trial
without the hand-off hung on an H200: a warpgroup that skips the other's tiles meets ring barriers
two phases on, which a parity wait cannot tell apart).

gemm 23, ``cluster_m=2``: blocks pair up in 2×1 clusters along M (same block column); each block
loads its own A tile and half of the B panels and multicasts the B half to both blocks, so B is
read from L2 once per pair.

``split_k=s`` (warp-specialized and tf32 kernels): for few output tiles and a long K. The work units
become (output tile, K slice) pairs, ``s`` slices of ceil(KT / s) K tiles each (slices that would
start past K are dropped); the grid walks the units slice-major (unit = slice · tiles + tile, the
tiles of one slice in the grouped order: units that run together read the same A and B panels, as
without split-K). Every unit walks the same number of K tiles, so the ring's stream position
``it = unit index · KTS + kt`` stays uniform: K tiles past the end of K are not loaded (the producer
arrives on the full barrier without bytes) and not multiplied (the consumers wait and release).
Each unit stores its fp32 partial tile into a workspace P[s, M, N], a ``scope="global"`` buffer of
the host part, which TVM allocates on every call from the device's workspace pool
(``TVMBackendAllocWorkspace``); a second kernel in the same PrimFunc sums the slices into C. With
``split_k=1`` the generated CUDA is the same as without the option. With ``cluster_sum=True`` the slices of a tile run
on the blocks of one cluster instead and add up in distributed shared memory, one unit per block
(cluster_sum.py). ``consumers=1``: one consumer warpgroup, 64-row tiles (a few rows against a weight).

``stream_k=True`` (persistent kernels): for tiles that are not a whole number of rounds of the
grid (a fraction of a round, or fewer tiles than SMs over a long K). The whole rounds of tiles go
first, one tile per block and round; the K tiles of the partial last round are then shared out
evenly, a contiguous range of (tile, K tile) per block (tma_common.StreamUnits); a unit is a tile's
K tiles inside the block's range, of
any length, at a stream position the producer and the consumers compute alike. Whole tiles are
stored from the accumulators; the parts of split tiles go to fp32 workspace pieces, which a fix-up
kernel (tma_common.stream_fixup_kernel) adds and stores through the epilogue: C is written once, and
no block waits for another.

A linear layer's epilogue and a 16-bit output (``gemm:...:out=bfloat16:bias:gelu_tanh``): the
consumers compute it on their accumulators and store D instead of C (wgmma_epilogue.py); with
split-K the slices still store fp32 partials and the sum kernel applies the epilogue to the sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .cluster_sum import ClusterSliceUnits, cluster_slice_sum
from .common import ceil_div
from .errors import ScheduleParamError
from .pingpong import check_pingpong, make_mainloop, turns, wait_turn
from .registry import register
from .tma_common import (WARPGROUP, StreamUnits, WorkUnits, grouped_tile, pad_copy_kernel, release_slot, ring_barriers,
                         ring_producer, ring_unit_done, split_sum_kernel, stream_fixup_kernel, stream_producer,
                         stream_store_piece, stream_unit_done)
from .staged_store import make_staged_epilogue, make_staged_fused_epilogue, staged_bytes
from .tma_fp16 import (Geometry, TmaConfig, encode_maps, make_epilogue, make_fused_epilogue, make_group_store,
                       make_loader, make_mma, simple_kernel)
from .tma_store import drain_stores, encode_store_map, make_tma_store, tma_store_bytes
from .wgmma_epilogue import kernel_entry, make_residual_prefetch, split_sum_epilogue
from .workloads import Gemm


# ------------------------------------------------------------------------------------------------
# gemm 21-23: warp-specialized producer/consumers, persistent grid, optional 2x1 cluster
# ------------------------------------------------------------------------------------------------
def ws_kernel(wl: Gemm, cfg):
    g = Geometry(wl, cfg)
    M, N, K, DT = wl.M, wl.N, wl.K, wl.dtype
    BM, BK, S, KT = g.BM, g.BK, g.S, g.KT
    NC = cfg.consumers
    THREADS = cfg.threads
    CL = cfg.cluster_m
    TM_CL = ceil_div(g.TM, CL) * CL  # tile rows rounded up to whole clusters
    CL_TILES = TM_CL * g.TN // CL  # cluster tiles: CL vertically adjacent block tiles
    GRID = g.GRID
    CL_GRID = GRID // CL
    L2 = cfg.l2_promotion
    g.rows_padded = TM_CL != g.TM
    epilogue = make_epilogue(g)
    STAGED = cfg.staged_store  # C through the consumer warps' staging areas (after the ring)
    staged = make_staged_epilogue(g) if STAGED else None
    TMA_STORE = getattr(cfg, "tma_store", False)  # D by the TMA unit from per-warp boxes (schedules/tma_store.py)
    tma_store = make_tma_store(g, wl) if TMA_STORE else None
    load = make_loader(g, CL)
    mma = make_mma(g)
    ROW0 = cfg.wg_rows  # rows of consumer warpgroup w start at w * ROW0
    # split-K: a work unit is a (cluster tile, K slice) pair, KTS K tiles each (KTS = KT, one
    # slice, without split-K); units slice-major: unit u = slice·CL_TILES + tile (see NOTES).
    # A bmm: a (product, cluster tile) pair, batch-major (u = product·CL_TILES + tile); no split-K
    KTS, SPLIT, BATCH = g.KTS, g.SPLIT, g.BATCH
    # cluster_sum: a tile's K slices on the blocks of one cluster, added there (no partials, no sum kernel)
    PARTIALS = g.PARTIALS  # fp32 partials in a workspace, summed by a second kernel
    CSUM = SPLIT > 1 and not PARTIALS

    def block_tile(c, rank):  # the grouped order over cluster rows; the block's row in its cluster
        cm, cn = grouped_tile(c, cfg.group_m, TM_CL // CL, g.TN)
        return cm * CL + rank, cn

    STREAM = cfg.stream_k
    if STREAM:  # stream-K: (tile, K range) units, a block's K tiles one stream (see StreamUnits)
        units = StreamUnits(CL_TILES, CL_GRID, KT, block_tile)
        PAD = False
    else:
        units = (ClusterSliceUnits if CSUM else WorkUnits)(CL_TILES, CL_GRID, KT, KTS, SPLIT, BATCH, block_tile)
        PAD = units.PAD  # the last slice's last K tiles lie past K: not loaded, not multiplied
    PP = getattr(cfg, "pingpong", False)  # whole tiles per consumer, in turn (schedules/pingpong.py)
    ROW_STEP = 0 if PP else ROW0  # consumer w's rows of a tile start at w · ROW_STEP
    # every consumer warpgroup (with ping-pong: the one whose unit it is) of every block of the cluster reads each slot
    init_ring = ring_barriers(S, (1 if PP else NC) * CL, CL)
    if STREAM:
        produce = stream_producer(units, S, cfg.producer_regs, load)
        unit_done = stream_unit_done(S, CL, g.ACC)
    else:
        produce = ring_producer(units, S, cfg.producer_regs, load)
        unit_done = ring_unit_done(units, S, CL, g.ACC)
    pp_mainloop = make_mainloop(S, CL, mma, unit_done) if PP else None  # stream-K is refused with ping-pong
    FUSED = wl.has_epilogue  # the epilogue on the accumulators (with split-K partials: in the sum kernel)
    fused = make_fused_epilogue(g, wl) if FUSED and not PARTIALS else None
    staged_fused = make_staged_fused_epilogue(g, wl) if STAGED and FUSED and not PARTIALS else None
    # R's rows of a tile asked into L2 as its mainloop starts (with split-K partials the sum kernel reads R)
    PREFETCH_R = FUSED and wl.residual and SPLIT == 1
    prefetch_r = make_residual_prefetch(wl, BM, g.BN, ROW0) if PREFETCH_R else None
    if STREAM:
        CONSUMER_THREADS = NC * WARPGROUP
        store_piece = stream_store_piece(g.ACC, CONSUMER_THREADS)

        @T.macro
        def finish(C, bias, R, acc, tile_m, tile_n, thread):  # a whole tile: the epilogue, C stored once
            if FUSED:
                fused(C, bias, R, acc, tile_m, tile_n, thread // WARPGROUP * ROW0, thread % WARPGROUP, 0)
            else:
                epilogue(C, acc, tile_m, tile_n, thread // WARPGROUP * ROW0, thread % WARPGROUP)

        fixup, _ = stream_fixup_kernel(units, CL, CONSUMER_THREADS, g.ACC, make_group_store(g, wl))
    @T.macro
    def store_tile(C, bias, R, acc, vals, pair, stage, tile_m, tile_n, w, lane, part, D_map, i):
        """A whole tile's outputs from consumer warpgroup ``w``'s accumulators: the epilogue and C
        stored once in its type (by TMA from the boxes at ``stage``, the block's ``i``-th tile; fused, staged
        or from the fragments; product ``part`` of a bmm, else 0, which each store reads only in a bmm)."""
        if TMA_STORE:
            tma_store(D_map, bias, R, None, acc, stage, tile_m, tile_n, w * ROW_STEP, w, lane, i)
        elif FUSED and STAGED:
            staged_fused(C, bias, R, None, None, None, acc, vals, pair, stage, tile_m, tile_n, w * ROW_STEP, w, lane,
                         part)
        elif FUSED:
            fused(C, bias, R, acc, tile_m, tile_n, w * ROW_STEP, lane, part)
        elif STAGED:
            staged(C, acc, vals, stage, tile_m, tile_n, w * ROW_STEP, w, lane, part)
        else:
            epilogue(C, acc, tile_m, tile_n, w * ROW_STEP, lane, part)

    if PARTIALS:
        split_sum, _ = split_sum_epilogue(wl, SPLIT) if FUSED else split_sum_kernel(M, N, SPLIT)
    if CSUM:
        slice_sum, slice_sum_producer = cluster_slice_sum(SPLIT, NC * WARPGROUP, g.ACC)
    # rows a tensor map cannot describe (pad_operands): copied first into buffers of pad_pitch-byte rows
    # (every row of every product of a bmm; the rows of the operand as stored)
    (a_rows, a_cols), (b_rows, b_cols) = wl.a_shape[-2:], wl.b_shape[-2:]
    PAD_A, PAD_B = cfg.copied(wl)
    pad_a, AP = pad_copy_kernel(wl.batches * a_rows, a_cols, g.item, DT, cfg.pad_pitch) if PAD_A else (None, a_cols)
    pad_b, BP = pad_copy_kernel(wl.batches * b_rows, b_cols, g.item, DT, cfg.pad_pitch) if PAD_B else (None, b_cols)
    batch_dims = wl.a_shape[:-2]

    @T.macro
    def body(A, B, bias, R, C):
        if PAD_A:  # workspaces from the device's pool, like split-K's partials below
            A_pad = T.alloc_buffer(batch_dims + (a_rows, AP), DT, scope="global")
            pad_a(A, A_pad)
        if PAD_B:
            B_pad = T.alloc_buffer(batch_dims + (b_rows, BP), DT, scope="global")
            pad_b(B, B_pad)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        a_enc, b_enc = T.meta_var(encode_maps(g, (A_pad if PAD_A else A).data, (B_pad if PAD_B else B).data,
                                        A_map, B_map, AP, BP))
        T.evaluate(a_enc)
        T.evaluate(b_enc)
        if TMA_STORE:
            D_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.evaluate(encode_store_map(D_map, C.data, wl))
        else:
            D_map = T.meta_var(None)
        if PARTIALS:
            # the partial products: a global buffer of the host part, i.e. TVMBackendAllocWorkspace
            # (the device's workspace pool) on every call, freed after the second kernel
            P = T.alloc_buffer((SPLIT, M, N), "float32", scope="global")
        if STREAM:  # the pieces of split tiles, two block tiles per block (same pool)
            W = T.alloc_buffer((units.PIECES * CL * BM * g.BN,), "float32", scope="global")
        with T.launch_thread("blockIdx.x", GRID) as bid:
            if CL > 1:
                crank = T.launch_thread("clusterCtaIdx.x", CL)  # -> cuLaunchKernelEx cluster dims
            if CSUM:
                T.launch_thread("clusterCtaIdx.x", SPLIT)  # a tile's K slices: one cluster
            tid = T.launch_thread("threadIdx.x", THREADS)
            # __maxnreg__(launch_regs): setmaxnreg needs a known register count at entry, and the
            # budgets assume the full share (ptxas otherwise starts a light kernel with fewer, and the
            # consumers' setmaxnreg.inc then waits for registers the producer never frees)
            T.attr(0, "tirx.max_registers", cfg.launch_regs)
            smem = T.alloc_buffer((g.RING_BYTES + 1024 + staged_bytes(cfg) + tma_store_bytes(cfg),), "uint8",
                                  scope="shared.dyn")
            bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)  # full[0:S], empty[S:2S]
            acc = T.alloc_buffer((g.ACC,), "float32", scope="local")
            ring: T.let[T.uint32] = T.bitwise_and(T.cuda.cvta_generic_to_shared(smem.data) + T.uint32(1023),
                                                  T.uint32(0xFFFFFC00))
            if STAGED:
                vals = T.alloc_buffer((16,), "float32", scope="local")  # a staged column, one row per entry
                stage: T.let[T.uint32] = ring + T.uint32(g.RING_BYTES)
                if FUSED:
                    pair = T.alloc_buffer((2,), wl.out_dtype, scope="local")  # two outputs, stored together
            if TMA_STORE:  # the consumer warps' boxes, after the ring
                stage: T.let[T.uint32] = ring + T.uint32(g.RING_BYTES)
            if not STAGED:  # nothing staged: store_tile's arguments for the staged store are unused
                vals = T.meta_var(None)
                if not TMA_STORE:
                    stage = T.meta_var(None)
            if not (STAGED and FUSED):
                pair = T.meta_var(None)
            wg = T.meta_var(tid // WARPGROUP)
            lane = T.meta_var(tid % WARPGROUP)
            if CL > 1:
                rank = T.meta_var(crank)
                cid = T.meta_var(bid // CL)
            else:
                rank = T.meta_var(0)
                cid = T.meta_var(bid)
            if STREAM:
                # this block's (cluster's) range of the stream-K iteration space, then whole tiles
                sk_begin: T.let[T.int32] = units.begin(cid)
                sk_end: T.let[T.int32] = units.end(cid)
                n_sk: T.let[T.int32] = units.sk_units(sk_begin, sk_end)
                n_tiles: T.let[T.int32] = units.count(n_sk)
            else:
                # this block's (cluster) units: cid, cid + CL_GRID, ... (one per block if not persistent)
                n_tiles: T.let[T.int32] = units.count(cid)
            init_ring(bars, tid)
            if wg == 0:
                # ---- producer warpgroup: one thread issues every TMA load ----
                if STREAM:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, cid, rank, sk_begin, sk_end, n_sk)
                else:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, cid, rank)
                if CSUM:
                    slice_sum_producer()
            elif STREAM:
                # ---- consumer warpgroups, stream-K units ----
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):
                    t: T.let[T.int32] = units.tile(cid, sk_begin, n_sk, i)
                    n_k: T.let[T.int32] = units.k_count(sk_begin, sk_end, n_sk, i, t)
                    pos: T.let[T.int32] = units.position(sk_begin, sk_end, n_sk, i, t)
                    if PREFETCH_R:
                        if n_k == KT:  # a whole tile: its epilogue reads R
                            pm_, pn_ = T.meta_var(units.tile_of(t, rank))
                            prefetch_r(R, pm_, pn_, w * ROW0, lane, 0)
                    for kt in T.serial(n_k):
                        it: T.let[T.int32] = pos + kt
                        T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
                        mma(acc, ring, it % S, w * ROW0, kt)  # kt == 0: scale-d 0 starts the unit's sum
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if T.And(kt > 0, lane == 0):
                            release_slot(bars, S + (it - 1) % S, CL)
                    unit_done(acc, bars, pos + n_k - 1, lane)
                    tm_, tn_ = T.meta_var(units.tile_of(t, rank))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    if n_k == KT:  # a whole tile: stored as without stream-K
                        if STAGED and FUSED:
                            staged_fused(C, bias, R, None, None, None, acc, vals, pair, stage, tile_m, tile_n, w * ROW0,
                                         w, lane, 0)
                        elif STAGED:
                            staged(C, acc, vals, stage, tile_m, tile_n, w * ROW0, w, lane)
                        else:
                            finish(C, bias, R, acc, tile_m, tile_n, w * WARPGROUP + lane)
                    else:  # a part of a split tile: fp32 sums to the block's piece, the fix-up adds them
                        store_piece(W, acc, units.piece(cid, i) * CL + rank, w * WARPGROUP + lane)
            elif PP:
                # ---- consumer warpgroups in turn: units w, w + 2, ..., each a whole tile (schedules/pingpong.py) ----
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for j in T.serial(turns(w, n_tiles)):
                    i: T.let[T.int32] = j * 2 + w
                    if BATCH > 0:
                        part: T.let[T.int32] = units.outer(cid, i, BATCH)  # the unit's product
                    tm_, tn_ = T.meta_var(units.tile(cid, i, rank))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    if PREFETCH_R:
                        prefetch_r(R, tile_m, tile_n, 0, lane, part if BATCH > 0 else 0)
                    if i > 0:
                        wait_turn(w)  # the other consumer has issued unit i - 1's last wgmmas
                    pp_mainloop(acc, ring, bars, i, KTS, lane, w, n_tiles)  # passes the turn after its last wgmmas
                    # the epilogue runs while the other consumer's wgmmas keep the tensor cores busy
                    store_tile(C, bias, R, acc, vals, pair, stage, tile_m, tile_n, w, lane, part if BATCH > 0 else 0,
                               D_map, i)
            else:
                # ---- consumer warpgroups ----
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):  # every consumer warpgroup takes its rows of every unit
                    if SPLIT > 1:
                        part: T.let[T.int32] = units.outer(cid, i, SPLIT)  # the unit's K slice
                    if BATCH > 0:
                        part: T.let[T.int32] = units.outer(cid, i, BATCH)  # the unit's product
                    if PAD:
                        # K tiles of this unit inside K (KTS but in the last slice); the rest: below
                        n_k: T.let[T.int32] = units.k_tiles(part)
                    else:
                        n_k = T.meta_var(KTS)
                    if PREFETCH_R:
                        pm_, pn_ = T.meta_var(units.tile(cid, i, rank))
                        prefetch_r(R, pm_, pn_, w * ROW0, lane, part if BATCH > 0 else 0)
                    for kt in T.serial(n_k):
                        it: T.let[T.int32] = i * KTS + kt
                        T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
                        mma(acc, ring, it % S, w * ROW0, kt)  # kt == 0: scale-d 0 starts the unit's sum
                        T.ptx.wgmma.wait_group.sync.aligned(1)  # K tile kt-1's wgmmas are done: free its slot
                        if T.And(kt > 0, lane == 0):
                            release_slot(bars, S + (it - 1) % S, CL)
                    unit_done(acc, bars, i, n_k, lane)
                    tm_, tn_ = T.meta_var(units.tile(cid, i, rank))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    # the producer is already filling the ring with the next unit's K tiles
                    if CSUM:  # the other slices' sums added into slice 0's accumulators
                        slice_sum(acc, smem, part, w * WARPGROUP + lane)
                    if PARTIALS and STAGED:
                        staged(P, acc, vals, stage, tile_m, tile_n, w * ROW0, w, lane, part)
                    elif PARTIALS:  # fp32 partials: the sum kernel below applies the epilogue
                        epilogue(P, acc, tile_m, tile_n, w * ROW0, lane, part)
                    elif CSUM:  # slice 0 stores the tile as the unsplit kernel does
                        if part == 0:
                            store_tile(C, bias, R, acc, vals, pair, stage, tile_m, tile_n, w, lane, 0, D_map, i)
                    else:
                        store_tile(C, bias, R, acc, vals, pair, stage, tile_m, tile_n, w, lane,
                                   part if BATCH > 0 else 0, D_map, i)
                if TMA_STORE:
                    drain_stores(lane)
            if CL > 1:
                # no block leaves while a peer may still multicast into it or arrive on its barriers
                T.cuda.cluster_sync()
        if PARTIALS:
            if FUSED:
                split_sum(P, bias, R, C)
            else:
                split_sum(P, C)
        if STREAM:
            fixup(W, C, bias, R)

    return kernel_entry(wl, body)


def fp16_tma_schedule(wl: Gemm, cfg):
    """The fp16/bf16 TMA kernel of ``cfg`` for ``wl`` as a schedule, the configuration checked first
    (:meth:`TmaConfig.check`): the warp-specialized kernel above, or gemm 20's one-block-per-tile
    kernel where ``warp_specialized`` is off. What every fp16/bf16 TMA step builds."""
    cfg.check(wl)
    return s_tir.Schedule(ws_kernel(wl, cfg) if cfg.warp_specialized else simple_kernel(wl, cfg))


# ------------------------------------------------------------------------------------------------
# the registered steps: one structure, one piece turned on at a time
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WarpSpecializedConfig(TmaConfig):
    persistent: bool = False
    step_name = "warp_specialized_gemm"


@register("warp_specialized_gemm", "gemm", WarpSpecializedConfig, aliases=("warp_specialized",), tags=("float16",))
def warp_specialized_gemm(wl: Gemm, cfg: WarpSpecializedConfig = WarpSpecializedConfig()):
    """Warp specialization: a producer warpgroup that only issues TMA loads and two consumer
    warpgroups that only wait and run wgmma, handing ring slots back and forth through full and
    empty mbarriers (4 slots); ``setmaxnreg`` moves registers from the producer (40 per thread) to
    the consumers (232).

    tma_gemm's warps still took turns: every K tile ended in a ``__syncthreads`` before thread 0
    could refill the slot. Here nobody waits for everybody: the producer refills a slot as soon as
    both consumers have released it, and the consumers never touch the copies. The registers the
    producer does not need become accumulator room for the consumers.
    """
    return fp16_tma_schedule(wl, cfg)


@dataclass(frozen=True)
class PersistentConfig(TmaConfig):
    """gemm 22's configuration: TmaConfig's, and ``tma_store``: D written by the TMA unit from a box of
    shared memory per consumer warp (schedules/tma_store.py) instead of by the warps' own stores;
    ``pingpong``: the two consumer warpgroups take whole ``block_m × block_n`` tiles in turn (block_m 64 or
    128), one running its epilogue while the other's wgmmas run (schedules/pingpong.py)."""

    tma_store: bool = False  # D through per-warp boxes and TMA stores (N·itemsize a multiple of 16 bytes)
    pingpong: bool = False  # whole tiles per consumer warpgroup, in turn; False: both split each tile along M
    step_name = "persistent_gemm"

    @property
    def wg_rows(self) -> int:  # ping-pong: a consumer warpgroup owns the whole tile
        return self.block_m if self.pingpong else self.block_m // self.consumers

    def check_structure(self, wl: Gemm, item: int):
        if not self.pingpong:
            TmaConfig.check_structure(self, wl, item)
            return
        check_pingpong(self, wl, item)  # a whole tile per consumer: its own tile, register and ring checks
        name = self.step_name
        for knob, on in (("split_k", self.split_k > 1), ("stream_k", self.stream_k),
                         ("cluster_sum", self.cluster_sum), ("tma_store", self.tma_store)):
            if on:
                raise ScheduleParamError(f"{name}: pingpong stores whole tiles from one consumer's accumulators: "
                                         f"{knob} is for the cooperative consumers (pingpong=false)")
        if self.staged_store and self.block_n % 32:
            raise ScheduleParamError(f"{name}: staged_store stages C 32 columns at a time: block_n must be a multiple "
                                     f"of 32, got {self.block_n}")

    def describe(self) -> str:
        return TmaConfig.describe(self) + (" pingpong" if self.pingpong else "")


@register("persistent_gemm", "gemm", PersistentConfig, aliases=("persistent",), tags=("float16",))
def persistent_gemm(wl: Gemm, cfg: PersistentConfig = PersistentConfig()):
    """Persistent tiles: warp_specialized_gemm with one block per SM that walks the output tiles in
    grouped order (8 block-rows per group), its producer loading the next tile's K tiles while the
    consumers store the current tile's accumulators.

    One block per tile paid a block launch, a barrier initialisation and an empty ring per tile,
    and its epilogue left the copy engine idle; a persistent block keeps its ring full across tile
    boundaries, so the next tile's first wgmmas find their operands waiting.
    """
    return fp16_tma_schedule(wl, cfg)


@dataclass(frozen=True)
class ClusterConfig(TmaConfig):
    cluster_m: int = 2
    step_name = "cluster_gemm"


@register("cluster_gemm", "gemm", ClusterConfig, aliases=("cluster",), tags=("float16",))
def cluster_gemm(wl: Gemm, cfg: ClusterConfig = ClusterConfig()):
    """Thread-block clusters: persistent_gemm with blocks paired in 2 × 1 clusters along M; the two
    blocks share a B tile, each loads half of its panels and multicasts them into both blocks'
    shared memory (``.multicast::cluster``), and a slot is released in both blocks.

    B is then read from L2 once per pair instead of twice: half the B traffic between L2 and the
    SMs, which matters where that traffic, not the tensor cores, sets the pace.
    """
    return fp16_tma_schedule(wl, cfg)
