"""The block-scaled unit of the ping-pong FP8 kernel (``pingpong=True`` on fp8_block_scaled_gemm). The structure
itself, the two consumers taking whole tiles in turn with an ordered hand-off, is schedules/pingpong.py's, which
fp8_tma_gemm shares. With block scales a consumer holds the running sum and a K tile's partial sums (twice a
tile's accumulators), which leaves 64 × 128 (``block_m=64``)."""

from __future__ import annotations

from tvm.script import tirx as T

from .fp8_block_scales import make_scale_loader, make_scale_reader, make_scale_sum
from .pingpong import pass_turn
from .tma_common import fence_acc, release_slot


def make_pingpong_promotion(g, mma):
    """A macro: a ping-pong consumer's whole unit under block scaling (gemm_fp8.make_promotion's
    work per K tile): each K tile's wgmmas into a fresh partial-sum set (scale-d 0), ``wait_group
    0``, the slot released, the partial sums added to the running sum times the scales of the
    thread's rows and of the tile's column block (loaded a K tile ahead: fp8_block_scales.make_scale_loader).
    The turn passes to the other consumer as soon as the unit's last wgmmas are issued, so that the
    last promotion and the epilogue run behind the other's wgmmas.

    Not ``wait_group 1`` with two partial sets (promoting K tile kt-1 while kt's wgmmas run): ptxas
    then serializes every wgmma (C7514: non-wgmma instructions reading accumulator registers while
    a wgmma is in flight, across the K loop's back edge), as CUTLASS's and DeepGEMM's promotions also
    wait for 0. The cooperative kernel's ``pipelined=True`` (fp8_block_scales.make_pipelined_unit)
    avoids it with unrolled chunks of K tiles, nothing in flight at a loop's back edge."""
    S, KT, CL = g.S, g.KT, g.cfg.cluster_m
    load_scales, read_scales, add = make_scale_loader(g), make_scale_reader(g), make_scale_sum(g)
    IN_RING = g.scales_tma

    @T.macro
    def unit(acc, part, sa_r, sb_r, SA, SB, scales, ring, bars, i, tile_m, tile_n, lane, w, n_tiles):
        for r in T.unroll(g.ACC):
            acc[r] = T.float32(0)
        if not IN_RING:
            load_scales(sa_r, sb_r, 0, SA, SB, tile_m, tile_n, 0, lane, 0)
        for kt in T.serial(KT):
            if not IN_RING:  # the next K tile's
                load_scales(sa_r, sb_r, 1, SA, SB, tile_m, tile_n, 0, lane, T.min(kt + 1, KT - 1))
            T.cuda.mbarrier_wait(T.address_of(bars[(i * KT + kt) % S]), (i * KT + kt) // S % 2)
            mma(part, ring, (i * KT + kt) % S, 0, 0)  # kt = 0 for the macro: a fresh partial sum
            if IN_RING:  # this K tile's, from its slot (set 0; add's move of set 1 is then unused)
                read_scales(sa_r, sb_r, 0, scales, (i * KT + kt) % S, kt, tile_n, 0, lane)
            if T.And(kt == KT - 1, i + 1 < n_tiles):
                pass_turn(w)  # the unit's last wgmmas are issued
            T.ptx.wgmma.wait_group.sync.aligned(0)
            if lane == 0:
                release_slot(bars, S + (i * KT + kt) % S, CL)
            fence_acc(part, g.ACC)  # no read of the partial sums above the wait
            add(acc, part, sa_r, sb_r)

    return unit
