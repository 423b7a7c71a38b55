"""Block scales (DeepSeek-V3's: a scale per 1×128 piece of A, per 128×128 block of B) in the FP8
kernels' registers: loaded a K tile ahead of their use, and the promotion of a K tile's partial sums
into the running fp32 sum (schedules.gemm_fp8.make_promotion, the ping-pong unit of
schedules.fp8_pingpong)."""

from __future__ import annotations

from tvm.script import tirx as T

from .common import ceil_div
from .workloads import SCALE_BLOCK


def make_scale_loader(g):
    """A macro ``load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb)``: the block scales of K
    tile ``kb`` for this thread's rows (A's 1×128 pieces, 2 per m64 subtile) and the tile's 128-column
    blocks (B's) into ``sa[at·2·MT ..]`` and ``sb[at·NCB ..]`` (set ``at`` of two), indices past M or
    N clamped (their outputs are never stored). Loaded a K tile ahead of their use: a load from
    global memory takes longer than a K tile's wgmmas, and waiting on it every K tile left the
    block-scaled kernel at 57-59% of the per-tensor one."""
    M, N = g.M, g.N
    MT, NCB = g.cfg.m_subtiles, g.BN // SCALE_BLOCK
    NB = ceil_div(N, SCALE_BLOCK)

    @T.macro
    def load(sa, sb, at, SA, SB, tile_m, tile_n, row0, lane, kb):
        for mt in T.unroll(MT):
            for h in T.unroll(2):
                sa[at * 2 * MT + mt * 2 + h] = SA[T.min(g.out_row(tile_m, row0, lane, mt, h), M - 1), kb]
        for cb in T.unroll(NCB):
            sb[at * NCB + cb] = SB[T.min(tile_n * NCB + cb, NB - 1), kb]

    return load


def make_scale_sum(g):
    """A macro ``add(acc, part, sa, sb)``: the running sum plus a K tile's partial sums times their
    scales (set 0 of :func:`make_scale_loader`'s), then the next K tile's scales (set 1) moved into
    set 0."""
    NACC, MT, JN = g.NACC, g.cfg.m_subtiles, g.BN // 8
    NCB, JB = g.BN // SCALE_BLOCK, SCALE_BLOCK // 8  # 128-column blocks per tile, 8-column groups per block

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
