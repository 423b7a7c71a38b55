"""The ping-pong structure of the Hopper TMA kernels (``pingpong=True`` on persistent_gemm, fp8_tma_gemm and
fp8_block_scaled_gemm; CUTLASS's KernelTmaWarpSpecializedPingpong): the two consumer warpgroups each own a whole
output tile and take the block's work units in turn (consumer 0 units 0, 2, 4, …; consumer 1 units 1, 3, 5, …), so
that one runs its epilogue (the bias, the activation, the conversion, the stores of D; the FP8 scales) while the
other's wgmmas keep the tensor cores busy.

In the cooperative structure (the default) both consumers split every tile along M: they reach the end of a tile
together, and the tensor cores idle while both store. Here the producer fills the same ring in the same order
(unit i's K tiles at stream positions i·KT + kt: the ring, tma_common.py's, is unchanged), each slot is read by
one consumer (its empty barrier counts one arrival per block of the cluster, not one per consumer), and an
**ordered hand-off** lets only one consumer at a time walk the ring: a consumer starts its unit's mainloop once the
other has issued the previous unit's last wgmmas (``bar.sync`` on its named barrier, 256 threads: the other's 128
``bar.arrive`` and its own 128), and passes the turn on the other's barrier when it has issued its own (skipped
after the block's last unit, so no arrival is left pending). The hand-off is also what keeps the ring's parity
waits sound: a consumer that skips the other's units would otherwise meet full barriers two phases on, which a
parity wait cannot tell from the phase it waits for; with it, every earlier stream position has been waited for
(its fill completed) before a consumer waits for its first one.

With ping-pong a consumer holds a whole tile's accumulators alone: ``block_m`` is the tile of one consumer (64 or
128 rows: one or two m64 wgmmas per K step), and its accumulators (block_m · block_n / 128 per thread) must fit
the consumer's ``setmaxnreg`` budget (232 with two consumers) with room for the epilogue: 128 × 128 and 64 × 256
(128 accumulators) are the largest tiles.
"""

from __future__ import annotations

from tvm.script import tirx as T

from .errors import ScheduleParamError
from .tma_common import b_box_rows, release_slot

ORDER_BARRIER = 1  # named barrier 1 + w: consumer w may issue (0 is __syncthreads')
ORDER_THREADS = 256  # the two consumer warpgroups: one arrives, the other waits


def wait_turn(w):
    """Consumer warpgroup ``w`` waits until the other has issued its unit's last wgmmas."""
    T.evaluate(T.ptx.bar.sync(T.uint32(ORDER_BARRIER) + T.cast(w, "uint32"), T.uint32(ORDER_THREADS)))


def pass_turn(w):
    """Consumer warpgroup ``w`` hands the tensor cores (and the ring) to the other one."""
    T.evaluate(T.ptx.bar.arrive(T.uint32(ORDER_BARRIER + 1) - T.cast(w, "uint32"), T.uint32(ORDER_THREADS)))


def turns(w, n_tiles):
    """How many of the block's ``n_tiles`` units consumer ``w`` takes (units w, w + 2, ...): ⌈(n_tiles - w) / 2⌉,
    written as two quotients of non-negative numerators (the simplifier turns the single quotient
    (n_tiles + 1 - w) / 2 into (n_tiles - w - 1) / 2 + 1, which C rounds wrongly at -1)."""
    return T.if_then_else(w == 0, T.truncdiv(n_tiles + 1, 2), T.truncdiv(n_tiles, 2))


def make_mainloop(S: int, CL: int, mma, unit_done):
    """A macro: consumer ``w``'s mainloop of its unit ``i``, ``KT`` K tiles at ring positions i·KT + kt, the whole
    tile's rows each (``mma``'s rows from 0), the previous slot released once a K tile's wgmmas are issued; the turn
    passes as soon as the last are (not after the block's last unit of ``n_tiles``), then ``unit_done`` waits for
    them, so that the other consumer's wgmmas follow at once."""

    @T.macro
    def mainloop(acc, ring, bars, i, KT, lane, w, n_tiles):
        for kt in T.serial(KT):
            it: T.let[T.int32] = i * KT + kt
            T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
            mma(acc, ring, it % S, 0, kt)
            T.ptx.wgmma.wait_group.sync.aligned(1)
            if T.And(kt > 0, lane == 0):
                release_slot(bars, S + (it - 1) % S, CL)
        if i + 1 < n_tiles:
            pass_turn(w)  # every wgmma of unit i issued: the other consumer's may follow
        unit_done(acc, bars, i, KT, lane)

    return mainloop


def check_pingpong(cfg, wl, item: int):
    """The ping-pong structure's checks (in place of the cooperative ones of TmaConfig.check_structure): two
    consumers each holding a whole ``block_m × block_n`` tile (block_m 64 or 128), a persistent grid, the register
    budgets, the ring of ``item``-byte elements, the cluster."""
    name = cfg.step_name
    if cfg.consumers != 2:
        raise ScheduleParamError(f"{name}: pingpong takes 2 consumer warpgroups (one computes while the other "
                                 f"stores), got consumers={cfg.consumers}")
    if cfg.block_m not in (64, 128):
        raise ScheduleParamError(f"{name}: with pingpong a consumer warpgroup owns the whole tile: block_m must be "
                                 f"64 or 128, got {cfg.block_m}")
    step = 16 if cfg.narrow_panels and wl.trans_b else 64
    if cfg.block_n % step or not 64 <= cfg.block_n <= 256:
        narrow = " (with B stored N×K, layouts nt and tt: a multiple of 16 from 64 to 256)" if step == 16 else ""
        raise ScheduleParamError(f"{name}: block_n must be 64, 128, 192 or 256{narrow}, got {cfg.block_n}")
    if not cfg.persistent:
        raise ScheduleParamError(f"{name}: pingpong needs persistent=true (one tile per block leaves the second "
                                 f"consumer without work)")
    cfg.check_budgets()
    c = cfg.consumer_budget
    if cfg.acc_regs > min(128, c - 40):
        raise ScheduleParamError(f"{name}: with pingpong a consumer holds the whole {cfg.block_m}x{cfg.block_n} "
                                 f"tile's {cfg.acc_regs} accumulators per thread alone (at most "
                                 f"{min(128, c - 40)} of its {c} registers): lower block_n or block_m")
    cfg.check_ring(item)
    if cfg.cluster_m not in (1, 2):
        raise ScheduleParamError(f"{name}: cluster_m must be 1 or 2, got {cfg.cluster_m}")
    pieces = cfg.block_n // b_box_rows(cfg.block_n)  # B's TMA boxes per K tile, shared out over the cluster
    if cfg.cluster_m == 2 and pieces % 2:
        raise ScheduleParamError(f"{name}: cluster_m=2 needs an even number of B pieces (block_n 128 or 256: 2 and 4 "
                                 f"of 64 rows), got block_n={cfg.block_n} ({pieces})")
    if cfg.group_m < 1:
        raise ScheduleParamError(f"{name}: group_m must be ≥ 1")
