"""Block scales (DeepSeek-V3's: a scale per 1×128 piece of A, per 128×128 block of B) in the FP8
kernels: loaded by TMA into shared memory beside each K tile (``scales_in_ring``, where the rows of
scales allow it: :func:`make_scale_tma_load`, :func:`make_scale_reader`) or (the default) by the consumers from
global memory a K tile ahead of their use (:func:`make_scale_loader`); the promotion of a K tile's
partial sums into the running fp32 sum (schedules.gemm_fp8.make_promotion, the ping-pong unit of
schedules.fp8_pingpong), and the software-pipelined cooperative unit (``pipelined=True``,
:func:`make_pipelined_unit`)."""

from __future__ import annotations

from tvm.script import tirx as T

from .common import ceil_div
from .tma_common import fence_acc, release_slot, tma_load
from .workloads import SCALE_BLOCK


def scale_group(block_n: int) -> int:
    """Columns of a tile that share one B scale in every tile: B's 128-column block where block_n is
    a multiple of 128; 64 where it is an odd multiple of 64 (128 × 192: a tile starts at column 0 or
    64 of a block, so each 64-column group lies in one block, which one depending on the tile)."""
    return SCALE_BLOCK if block_n % SCALE_BLOCK == 0 else 64


def block_of(g, tile_n, cb):
    """B's 128-column scale block holding column group ``cb`` of tile column ``tile_n``."""
    GW = scale_group(g.BN)
    if GW == SCALE_BLOCK:
        return tile_n * (g.BN // GW) + cb
    return T.truncdiv(tile_n * g.BN + cb * GW, SCALE_BLOCK)


def first_block(g, tile_n):
    """The first of B's 128-column scale blocks that tile column ``tile_n`` touches: the row at which
    the scale box of B starts (make_scale_tma_load), from which the reader counts (make_scale_reader)."""
    return T.truncdiv(tile_n * g.BN, SCALE_BLOCK)


SCALE_BOX_K = 4  # K tiles of scales per TMA box row: 16 bytes, the narrowest box a tensor map takes


def scale_blocks_spanned(block_n: int) -> int:
    """B's 128-column scale blocks that a tile of ``block_n`` columns can touch (192: two; a tile starts
    at a multiple of 64 columns, so it spans no more blocks than its width rounded up)."""
    return ceil_div(block_n, SCALE_BLOCK)


def scale_slot_bytes(cfg) -> int:
    """Bytes of one ring slot's scales (``scales_in_ring``): a 16-byte row of :data:`SCALE_BOX_K`
    K tiles' scales per row of the block tile (A's 1×128 pieces), then one per B block the tile
    spans; rounded up to 128 bytes (a TMA destination's alignment)."""
    return ceil_div((cfg.block_m + scale_blocks_spanned(cfg.block_n)) * 16, 128) * 128


def scale_ring_bytes(cfg) -> int:
    """Shared memory of the scales' slots, one per ring stage (0 unless ``scales_in_ring``)."""
    return cfg.stages * scale_slot_bytes(cfg) if getattr(cfg, "scales_in_ring", False) else 0


def scales_by_tma(wl, cfg) -> bool:
    """Whether the kernel loads the block scales by TMA beside each K tile: ``scales_in_ring`` and
    rows of scales a whole number of 16 bytes (⌈K/128⌉ a multiple of 4: a tensor map's row pitch);
    otherwise the consumers load them from global memory (:func:`make_scale_loader`)."""
    return (wl.scaling == "block" and getattr(cfg, "scales_in_ring", False)
            and ceil_div(wl.K, SCALE_BLOCK) % SCALE_BOX_K == 0)


#: Arrivals the scales add to a slot's full barrier when they come by TMA: the producer thread's
#: expect_tx for them, beside the one for the K tile.
SCALE_TMA_ARRIVALS = 1


def encode_scale_maps(g, SA_map, SB_map, SA_data, SB_data):
    """(A's, B's) tensor-map encode calls of the block scales: A's M × ⌈K/128⌉ floats in boxes of
    (:data:`SCALE_BOX_K` K tiles, block_m rows), B's ⌈N/128⌉ × ⌈K/128⌉ in boxes of (4, the blocks a
    tile spans); no swizzle (rows of 16 bytes). Rows past M or N are zero-filled: never stored."""
    KB, NB = ceil_div(g.K, SCALE_BLOCK), ceil_div(g.N, SCALE_BLOCK)
    L2 = g.cfg.l2_promotion

    def encode(tmap, data, rows, box_rows):
        return T.tensormap_encode_tiled(tmap, data, KB, rows, KB * 4, SCALE_BOX_K, box_rows, 1, 1,
                                        descriptor_dtype="float32", rank=2, swizzle=0, l2_promotion=L2)

    return encode(SA_map, SA_data, g.M, g.BM), encode(SB_map, SB_data, NB, scale_blocks_spanned(g.BN))


def make_scale_tma_load(g):
    """A macro ``load(SA_map, SB_map, scales, full_u32, slot, kt, tile_m, tile_n)`` run by the
    producer thread after a K tile's loads: the scales of K tile ``kt`` (and of the 3 beside it in
    the box: 16-byte rows) for the tile's rows and B blocks, into the slot's scale area at shared
    address ``scales``, completing on the slot's full barrier (its own expect_tx:
    :data:`SCALE_TMA_ARRIVALS`). The consumers read them there (:func:`make_scale_reader`).

    Why: read by the consumers from global memory, a K tile's scales are 128 row-strided 4-byte
    loads per block (A's scales are stored M × ⌈K/128⌉), each a sector of its own. Measured on an
    H100 (reports/results/NVIDIA_H100_80GB_HBM3/fp8_block_scales_ring): it helps the ping-pong
    kernel (64 × 128 at 4096³: 191.3 → 177.3 µs) and not the pipelined cooperative one (129.5 →
    137.6 µs: it runs about as the unpipelined one, as if the next K tile's slot were seldom full
    when its consumers reach it); a producer warp copying them instead (4-byte cp.async, or loads
    and st.shared two K tiles ahead) ran 157 µs. Off by default (``scales_in_ring=false``)."""
    SLOT, BM = scale_slot_bytes(g.cfg), g.BM
    NBB = scale_blocks_spanned(g.BN)
    BYTES = (BM + NBB) * 16

    @T.macro
    def load(SA_map, SB_map, scales, full_u32, slot, kt, tile_m, tile_n):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(full_u32, T.uint32(BYTES))
        area = T.meta_var(scales + T.cast(slot * SLOT, "uint32"))
        tma_load(SA_map, area, full_u32, kt // SCALE_BOX_K * SCALE_BOX_K, tile_m * BM)
        tma_load(SB_map, area + T.uint32(BM * 16), full_u32, kt // SCALE_BOX_K * SCALE_BOX_K, first_block(g, tile_n))

    return load


def make_scale_reader(g):
    """A macro ``read(sa, sb, at, scales, slot, kt, tile_n, row0, lane)``: the scales of K tile
    ``kt`` in ring slot ``slot`` (:func:`make_scale_tma_load`'s area: 16-byte rows of 4 K tiles) for
    this thread's rows (2 per m64 subtile) and the tile's column groups, into set ``at`` of ``sa``
    and ``sb`` (:func:`make_scale_loader`'s layout), by ``ld.shared``; called once the slot's full
    barrier has completed."""
    MT, NCB, BM = g.cfg.m_subtiles, g.BN // scale_group(g.BN), g.BM
    SLOT = scale_slot_bytes(g.cfg)

    @T.macro
    def read(sa, sb, at, scales, slot, kt, tile_n, row0, lane):
        area = T.meta_var(scales + T.cast(slot * SLOT + kt % SCALE_BOX_K * 4, "uint32"))
        for mt in T.unroll(MT):
            for h in T.unroll(2):
                T.ptx.ld.shared.f32(sa[at * 2 * MT + mt * 2 + h], area + T.cast(
                    (row0 + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8) * 16, "uint32"))
        for cb in T.unroll(NCB):
            T.ptx.ld.shared.f32(sb[at * NCB + cb], area + T.cast(
                (BM + block_of(g, tile_n, cb) - first_block(g, tile_n)) * 16, "uint32"))

    return read


def make_scale_loader(g):
    """A macro ``load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb)``: the block scales of K
    tile ``kb`` for this thread's rows (A's 1×128 pieces, 2 per m64 subtile) and the tile's 128-column
    blocks (B's) into ``sa[at·2·MT ..]`` and ``sb[at·NCB ..]`` (set ``at`` of two), indices past M or
    N clamped (their outputs are never stored). Loaded a K tile ahead of their use: a load from
    global memory takes longer than a K tile's wgmmas, and waiting on it every K tile left the
    block-scaled kernel at 57-59% of the per-tensor one. Ahead in the source: in the unrolled K loop
    ptxas sinks these read-only loads into the K tile that uses them (H200, fp8_block_steady_state:
    volatile loads, kept ahead, ran 0.83x)."""
    M, N = g.M, g.N
    MT, GW = g.cfg.m_subtiles, scale_group(g.BN)
    NCB = g.BN // GW
    NB = ceil_div(N, SCALE_BLOCK)

    @T.macro
    def load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb):
        for mt in T.unroll(MT):
            for h in T.unroll(2):
                sa[at * 2 * MT + mt * 2 + h] = SA[T.min(g.out_row(tile_m, row0, lane, mt, h), M - 1), kb]
        for cb in T.unroll(NCB):
            sb[at * NCB + cb] = SB[T.min(block_of(g, tile_n, cb), NB - 1), kb]

    return load


def scales_by_chunk(wl, cfg) -> bool:
    """Whether the unpipelined cooperative kernel loads its block scales a chunk at a time
    (``chunk_scales``: :func:`make_chunk_scale_loader`): asked for, the scales from global memory,
    and 16-byte loads aligned: ⌈K/128⌉ (the scales' row pitch) and the chunk multiples of 4;
    otherwise a K tile ahead one by one (:func:`make_scale_loader`)."""
    return (wl.scaling == "block" and getattr(cfg, "chunk_scales", False) and not scales_by_tma(wl, cfg)
            and ceil_div(wl.K, SCALE_BLOCK) % 4 == 0 and cfg.k_chunk % 4 == 0)


def make_chunk_scale_loader(g, sets: int):
    """A macro ``load(sa, sb, SA, SB, tile_m, tile_n, row0, lane, kb0, n)`` (``chunk_scales``): the
    block scales of ``n`` K tiles from ``kb0`` (a multiple of 4, as ``n``) for this thread's rows and
    the tile's 128-column blocks, row r's K tile u at ``sa[r·sets + u]`` (B's block cb at
    ``sb[cb·sets + u]``), 16 bytes a load: a row's scales of 8 K tiles lie in one 32-byte sector
    (A's M × ⌈K/128⌉ layout, ⌈K/128⌉ a multiple of 4), read once a chunk, not once a K tile. Rows
    past M and blocks past N clamped."""
    M, N = g.M, g.N
    MT, NCB = g.cfg.m_subtiles, g.BN // scale_group(g.BN)
    NB = ceil_div(N, SCALE_BLOCK)

    @T.macro
    def load(sa, sb, SA, SB, tile_m, tile_n, row0, lane, kb0, n):
        for q in T.unroll(n // 4):
            for mt in T.unroll(MT):
                for h in T.unroll(2):
                    for e in T.vectorized(4):
                        sa[(mt * 2 + h) * sets + q * 4 + e] = SA[T.min(g.out_row(tile_m, row0, lane, mt, h), M - 1),
                                                                 kb0 + q * 4 + e]
            for cb in T.unroll(NCB):
                for e in T.vectorized(4):
                    sb[cb * sets + q * 4 + e] = SB[T.min(block_of(g, tile_n, cb), NB - 1), kb0 + q * 4 + e]

    return load


def make_scaled_add(g, a_at, b_at):
    """A macro ``add(acc, part, sa, sb, at)``: the running sum plus a K tile's partial sums times their
    scales, each accumulator's row scale ``sa[a_at(r, at)]`` (r: the thread's row, 2 per m64 subtile)
    times its column group's ``sb[b_at(cb, at)]`` (cb: the group's B scale in the tile); ``a_at`` and
    ``b_at`` say where the loader put scale set ``at``."""
    NACC, MT, JN = g.NACC, g.cfg.m_subtiles, g.BN // 8
    JB = scale_group(g.BN) // 8  # 8-column groups per column group of one B scale

    @T.macro
    def add(acc, part, sa, sb, at):
        for mt in T.unroll(MT):
            for j in T.unroll(JN):
                for h in T.unroll(2):
                    for e in T.unroll(2):
                        acc[mt * NACC + j * 4 + h * 2 + e] = acc[mt * NACC + j * 4 + h * 2 + e] + part[
                            mt * NACC + j * 4 + h * 2 + e] * (sa[a_at(mt * 2 + h, at)] * sb[b_at(j // JB, at)])

    return add


def make_scale_set_sum(g, sets: int):
    """A macro ``add(acc, part, sa, sb, at)``: :func:`make_scaled_add` with the scales of K tile ``at``
    of :func:`make_chunk_scale_loader`'s chunk (row r's at ``r·sets + at``), no sets moved."""
    return make_scaled_add(g, lambda r, at: r * sets + at, lambda cb, at: cb * sets + at)


def make_scale_sum(g):
    """A macro ``add(acc, part, sa, sb)``: the running sum plus a K tile's partial sums times their
    scales (set 0 of :func:`make_scale_loader`'s), then the next K tile's scales (set 1) moved into
    set 0."""
    MT, NCB = g.cfg.m_subtiles, g.BN // scale_group(g.BN)  # NCB: column groups of one B scale per tile
    scaled = make_scaled_add(g, lambda r, at: r, lambda cb, at: cb)

    @T.macro
    def add(acc, part, sa, sb):
        scaled(acc, part, sa, sb, 0)
        for x in T.unroll(2 * MT):
            sa[x] = sa[2 * MT + x]
        for cb in T.unroll(NCB):
            sb[cb] = sb[NCB + cb]

    return add


def make_pipelined_unit(g, mma):
    """A macro: a cooperative consumer warpgroup's whole unit under block scaling, software-pipelined
    (``pipelined=True``). gemm_fp8.make_promotion issues a K tile's wgmmas, waits for all of them
    (``wait_group 0``) and promotes: the tensor cores idle while the wgmmas drain and while the
    partial sums are scaled into the running sum, and the two consumers (same ring slot each K tile)
    idle them together. Here each thread holds two partial-sum sets, ``part0`` and ``part1`` (the
    running sum and both: 3 × 64 registers at 128 × 128): at K tile kt the consumer issues K tile
    kt+1's wgmmas into the other set, then ``wait_group 1`` (kt's group done, kt+1's still running;
    ``wait_group 0`` on the unit's last K tile), releases kt's slot and promotes kt's set with kt's
    scales while kt+1's wgmmas run, so the promotion hides behind the tensor cores.

    A register array is only addressed statically (a dynamic index would move it to local memory),
    so K tiles go in pairs (the first in ``part0``, the second in ``part1``). ptxas serializes every
    wgmma (C7514) where partial sums are read after ``wait_group 1`` with a wgmma in flight across a
    loop's back edge (a K loop of pairs: seen at KT ≥ 5), so the K tiles run in chunks of
    ``pipe_tiles`` unrolled in the kernel's text (TVM's unroll: straight-line code), each started
    by issuing its first K tile and ended by ``wait_group 0``: one drain per chunk, not per K tile;
    the loop over chunks has nothing in flight at its back edge. KT is the workload's, known here: a
    last, shorter chunk takes the remainder. Chunks of 4 (the default) built without spills at
    128 × 128 for every K tried with nvcc 13; 8 did too where KT is a multiple of 8, but straight-line
    runs of 9 K tiles or more (a chunk and its remainder where the loop runs once) spilled.

    The ring's protocol is make_promotion's: every full barrier waited once per K tile (a chunk's
    first before its loop, kt+1's in step kt), every slot released once, in order, after its
    wgmmas are done; the unit's last release follows ``wait_group 0``, so nothing is in flight when
    the epilogue reads ``acc``. The scales: with ``scales_in_ring`` read from K tile kt+1's slot
    into set 1 once its wgmmas are issued (the chunk's first into set 0); else loaded from
    global memory a K tile ahead (set 1 at step kt for kt+1, across chunks too); make_scale_sum
    moves set 1 to set 0."""
    S, KT, CL = g.S, g.KT, g.cfg.cluster_m
    load_scales, read_scales, add = make_scale_loader(g), make_scale_reader(g), make_scale_sum(g)
    IN_RING = g.scales_tma
    U = min(g.cfg.pipe_tiles, KT)  # K tiles per chunk
    CHUNKS, REST = KT // U, KT % U

    @T.macro
    def step(cur, nxt, acc, sa_r, sb_r, SA, SB, scales, ring, bars, i, kt, has_next, tile_m, tile_n, row0, lane):
        # has_next: kt + 1 in the chunk; a constant once the chunk is unrolled
        it = T.meta_var(i * KT + kt)
        if not IN_RING:  # the next K tile's
            load_scales(sa_r, sb_r, 1, SA, SB, tile_m, tile_n, row0, lane, T.min(kt + 1, KT - 1))
        if has_next:
            T.cuda.mbarrier_wait(T.address_of(bars[(it + 1) % S]), (it + 1) // S % 2)
            mma(nxt, ring, (it + 1) % S, row0, 0)  # K tile kt+1 into the other set (scale-d 0 first)
            if IN_RING:  # its scales, read once its wgmmas are issued
                read_scales(sa_r, sb_r, 1, scales, (it + 1) % S, kt + 1, tile_n, row0, lane)
            T.ptx.wgmma.wait_group.sync.aligned(1)  # K tile kt's wgmmas are done, kt+1's run on
        else:
            T.ptx.wgmma.wait_group.sync.aligned(0)  # the chunk's last: nothing left in flight
        if lane == 0:
            release_slot(bars, S + it % S, CL)
        fence_acc(cur, g.ACC)  # no read of K tile kt's partial sums above the wait
        add(acc, cur, sa_r, sb_r)

    def second_has_next(jp, n):  # the pair's second K tile has a next one in a chunk of n
        return True if n % 2 else jp * 2 + 2 < n

    @T.macro
    def chunk(acc, part0, part1, sa_r, sb_r, SA, SB, scales, ring, bars, i, k0, n, tile_m, tile_n, row0, lane):
        T.cuda.mbarrier_wait(T.address_of(bars[(i * KT + k0) % S]), (i * KT + k0) // S % 2)
        mma(part0, ring, (i * KT + k0) % S, row0, 0)  # the chunk's first K tile into part0
        if IN_RING:
            read_scales(sa_r, sb_r, 0, scales, (i * KT + k0) % S, k0, tile_n, row0, lane)
        for jp in T.unroll(n // 2):
            step(part0, part1, acc, sa_r, sb_r, SA, SB, scales, ring, bars, i, k0 + jp * 2, True, tile_m, tile_n,
                 row0, lane)
            step(part1, part0, acc, sa_r, sb_r, SA, SB, scales, ring, bars, i, k0 + jp * 2 + 1,
                 second_has_next(jp, n), tile_m, tile_n, row0, lane)
        if n % 2 == 1:
            step(part0, part1, acc, sa_r, sb_r, SA, SB, scales, ring, bars, i, k0 + n - 1, False, tile_m, tile_n,
                 row0, lane)

    @T.macro
    def unit(acc, part0, part1, sa_r, sb_r, SA, SB, scales, ring, bars, i, tile_m, tile_n, row0, lane):
        for r in T.unroll(g.ACC):
            acc[r] = T.float32(0)
        if not IN_RING:
            load_scales(sa_r, sb_r, 0, SA, SB, tile_m, tile_n, row0, lane, 0)
        for c in T.serial(CHUNKS):
            chunk(acc, part0, part1, sa_r, sb_r, SA, SB, scales, ring, bars, i, c * U, U, tile_m, tile_n, row0, lane)
        if REST > 0:
            chunk(acc, part0, part1, sa_r, sb_r, SA, SB, scales, ring, bars, i, CHUNKS * U, REST, tile_m, tile_n,
                  row0, lane)

    return unit
