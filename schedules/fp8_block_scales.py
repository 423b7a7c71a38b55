"""Block scales (DeepSeek-V3's: a scale per 1×128 piece of A, per 128×128 block of B) in the FP8
kernels' registers: loaded a K tile ahead of their use, the promotion of a K tile's partial sums
into the running fp32 sum (schedules.gemm_fp8.make_promotion, the ping-pong unit of
schedules.fp8_pingpong), and the software-pipelined cooperative unit (``pipelined=True``,
:func:`make_pipelined_unit`)."""

from __future__ import annotations

from tvm.script import tirx as T

from .common import ceil_div
from .tma_common import fence_acc, release_slot
from .workloads import SCALE_BLOCK


def scale_group(block_n: int) -> int:
    """Columns of a tile that share one B scale in every tile: B's 128-column block where block_n is
    a multiple of 128; 64 where it is an odd multiple of 64 (128 × 192: a tile starts at column 0 or
    64 of a block, so each 64-column group lies in one block, which one depending on the tile)."""
    return SCALE_BLOCK if block_n % SCALE_BLOCK == 0 else 64


def make_scale_loader(g):
    """A macro ``load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb)``: the block scales of K
    tile ``kb`` for this thread's rows (A's 1×128 pieces, 2 per m64 subtile) and the tile's 128-column
    blocks (B's) into ``sa[at·2·MT ..]`` and ``sb[at·NCB ..]`` (set ``at`` of two), indices past M or
    N clamped (their outputs are never stored). Loaded a K tile ahead of their use: a load from
    global memory takes longer than a K tile's wgmmas, and waiting on it every K tile left the
    block-scaled kernel at 57-59% of the per-tensor one."""
    M, N = g.M, g.N
    MT, GW = g.cfg.m_subtiles, scale_group(g.BN)
    NCB = g.BN // GW
    NB = ceil_div(N, SCALE_BLOCK)

    def block_of(tile_n, cb):  # B's 128-column block holding the tile's column group cb
        if GW == SCALE_BLOCK:
            return tile_n * NCB + cb
        return T.truncdiv(tile_n * g.BN + cb * GW, SCALE_BLOCK)

    @T.macro
    def load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb):
        for mt in T.unroll(MT):
            for h in T.unroll(2):
                sa[at * 2 * MT + mt * 2 + h] = SA[T.min(g.out_row(tile_m, row0, lane, mt, h), M - 1), kb]
        for cb in T.unroll(NCB):
            sb[at * NCB + cb] = SB[T.min(block_of(tile_n, cb), NB - 1), kb]

    return load


def make_scale_sum(g):
    """A macro ``add(acc, part, sa, sb)``: the running sum plus a K tile's partial sums times their
    scales (set 0 of :func:`make_scale_loader`'s), then the next K tile's scales (set 1) moved into
    set 0."""
    NACC, MT, JN = g.NACC, g.cfg.m_subtiles, g.BN // 8
    GW = scale_group(g.BN)
    NCB, JB = g.BN // GW, GW // 8  # column groups of one B scale per tile, 8-column groups per column group

    @T.macro
    def add(acc, part, sa, sb):
        for mt in T.unroll(MT):
            for j in T.unroll(JN):
                for h in T.unroll(2):
                    for e in T.unroll(2):
                        acc[mt * NACC + j * 4 + h * 2 + e] = acc[mt * NACC + j * 4 + h * 2 + e] + part[
                            mt * NACC + j * 4 + h * 2 + e] * (sa[mt * 2 + h] * sb[j // JB])
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
    the epilogue reads ``acc``. The scales stay a K tile ahead (set 1 loaded at step kt for kt+1,
    across chunks too; make_scale_sum moves it to set 0)."""
    S, KT, CL = g.S, g.KT, g.cfg.cluster_m
    load_scales, add = make_scale_loader(g), make_scale_sum(g)
    U = min(g.cfg.pipe_tiles, KT)  # K tiles per chunk
    CHUNKS, REST = KT // U, KT % U

    @T.macro
    def step(cur, nxt, acc, sa_r, sb_r, SA, SB, ring, bars, i, kt, has_next, tile_m, tile_n, row0, lane):
        # has_next: kt + 1 in the chunk; a constant once the chunk is unrolled
        it = T.meta_var(i * KT + kt)
        load_scales(sa_r, sb_r, 1, SA, SB, tile_m, tile_n, row0, lane, T.min(kt + 1, KT - 1))  # the next K tile's
        if has_next:
            T.cuda.mbarrier_wait(T.address_of(bars[(it + 1) % S]), (it + 1) // S % 2)
            mma(nxt, ring, (it + 1) % S, row0, 0)  # K tile kt+1 into the other set (scale-d 0 first)
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
    def chunk(acc, part0, part1, sa_r, sb_r, SA, SB, ring, bars, i, k0, n, tile_m, tile_n, row0, lane):
        T.cuda.mbarrier_wait(T.address_of(bars[(i * KT + k0) % S]), (i * KT + k0) // S % 2)
        mma(part0, ring, (i * KT + k0) % S, row0, 0)  # the chunk's first K tile into part0
        for jp in T.unroll(n // 2):
            step(part0, part1, acc, sa_r, sb_r, SA, SB, ring, bars, i, k0 + jp * 2, True, tile_m, tile_n, row0, lane)
            step(part1, part0, acc, sa_r, sb_r, SA, SB, ring, bars, i, k0 + jp * 2 + 1, second_has_next(jp, n),
                 tile_m, tile_n, row0, lane)
        if n % 2 == 1:
            step(part0, part1, acc, sa_r, sb_r, SA, SB, ring, bars, i, k0 + n - 1, False, tile_m, tile_n, row0, lane)

    @T.macro
    def unit(acc, part0, part1, sa_r, sb_r, SA, SB, ring, bars, i, tile_m, tile_n, row0, lane):
        for r in T.unroll(g.ACC):
            acc[r] = T.float32(0)
        load_scales(sa_r, sb_r, 0, SA, SB, tile_m, tile_n, row0, lane, 0)
        for c in T.serial(CHUNKS):
            chunk(acc, part0, part1, sa_r, sb_r, SA, SB, ring, bars, i, c * U, U, tile_m, tile_n, row0, lane)
        if REST > 0:
            chunk(acc, part0, part1, sa_r, sb_r, SA, SB, ring, bars, i, CHUNKS * U, REST, tile_m, tile_n, row0, lane)

    return unit
