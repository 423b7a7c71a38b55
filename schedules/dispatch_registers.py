"""Registers of the SIMT tiles, in the dispatcher's model (:mod:`schedules.dispatch`): how many a
thread takes, which sets how many blocks an SM holds, and where the model asks ptxas to keep to it.

ptxas's count for one tile moves with the shape it is built for (the loop bounds and the address
arithmetic are constants of the kernel): the 128 × 128 tile of 8 × 8 threads took 128 registers on
half the calibration's products and 129-137 on the rest, and at 129 two blocks of 256 threads no
longer fit an SM's 65,536. One block an SM instead of two ran 1.25-1.31x slower on the draws where
it happened (reports/results/NVIDIA_H200/floor_candidates_seed42_43). A tile whose median sits on
such a line, and whose SM needs the warps of the block it would lose (fewer than the model's
saturating warps without it), is therefore built with ``min_blocks`` (CUDA's
``__launch_bounds__(threads, blocks)``), so that its occupancy is the one the model counted; ptxas
then holds the count to the line, which for a count a few registers over costs no spills. Not where
the loads are narrower than the tile's vector: those take 208-254 registers on the same tile, and
held to 128 they spill.
"""

from __future__ import annotations

import dataclasses

from .common import blocks_per_sm, ceil_div

REGISTER_STEP = 8  # ptxas allocates a thread's registers in steps of 8


def simt_register_key(cfg) -> str:
    """The calibration's name for a SIMT configuration's registers per thread: its thread tile, its
    K tile where it is not 8 (a deeper tile stages more loads in registers), and " async" for a
    cp.async ring (whose copies stage nothing in registers)."""
    deep = f" k{cfg.block_k}" if cfg.block_k != 8 else ""
    ring = " async" if cfg.async_copy else ""
    return f"t{cfg.thread_m}x{cfg.thread_n}{deep}{ring}"


def simt_registers(cfg, cal) -> int:
    """Registers per thread of a SIMT configuration, which set how many of its blocks an SM
    holds: the median of what ptxas reported for its thread tile and K tile in the calibration
    sweep (``regs``, :func:`simt_register_key`), or for one the sweep did not build an estimate: the accumulators, one column of A and one row of B
    per k, the K tile's loads a thread stages in registers, and 24 for addresses and loop counters,
    in steps of 8."""
    key = simt_register_key(cfg)
    if key in cal["regs"]:
        return cal["regs"][key]
    staged = 0 if cfg.async_copy else cfg.block_k * (cfg.block_m + cfg.block_n) // cfg.threads
    return ceil_div(cfg.thread_m * cfg.thread_n + cfg.thread_m + cfg.thread_n + staged + 24, 8) * 8


def held_blocks(wl, cfg, regs: int, gpu, w_sat: int) -> int:
    """The blocks an SM to hold ``cfg`` to (its ``min_blocks``), or 0 for ptxas's own count:
    ``regs`` (the model's count) is on the line, i.e. one more step of registers would cost a block
    an SM; and that block's warps are ones the SM needs (``w_sat``: the warps at which the model's SM
    runs at its full rate; with 8 warps a block, two blocks of the 128 × 128 tile make 16, one makes 8).
    Narrow loads too: the tiles they took to 208-254 registers, whose hold spilled, were C's
    write-back tested at every store (:func:`schedules.common.whole_piece_bounds`); the build keeps a
    hold only where ptxas's own count falls short and holding spills nothing."""
    smem = 4 * cfg.shared_floats()
    per_sm = blocks_per_sm(cfg.threads, regs, smem, gpu)
    if per_sm < 2 or blocks_per_sm(cfg.threads, regs + REGISTER_STEP, smem, gpu) >= per_sm:
        return 0
    if (per_sm - 1) * cfg.threads // 32 >= w_sat:  # a block fewer still saturates the SM
        return 0
    return per_sm


def with_held_blocks(wl, cand, regs: int, gpu, w_sat: int):
    """``cand`` with its configuration's ``min_blocks`` set by :func:`held_blocks` (itself where 0)."""
    blocks = held_blocks(wl, cand.config, regs, gpu, w_sat)
    if not blocks or cand.config.min_blocks == blocks:
        return cand
    return dataclasses.replace(cand, config=dataclasses.replace(cand.config, min_blocks=blocks))
