"""Stream-K in the dispatcher's model (:mod:`schedules.dispatch`): which persistent TMA tiles are
also offered with ``stream_k`` (the K tiles of all output tiles shared out evenly over one block per
SM, :class:`schedules.tma_common.StreamUnits`), and the time of such a grid: no round of tiles on
part of the GPU (every block walks the same K tiles, ±1), at the price of the split tiles' fp32
pieces, stored by the main kernel and added by a fix-up kernel that writes those tiles."""

from __future__ import annotations

from .common import GpuSpec, ceil_div
from .tma_common import stream_k_grid, stream_plan


def stream_k_offered(wl, bm: int, bn: int, sms: int, bk: int = 64) -> bool:
    """Whether a persistent TMA tile is also offered with stream-K: where its tiles are not a whole
    number of rounds of the ``sms`` blocks (the last round would leave SMs idle, or, with fewer tiles
    than SMs over a long K, most of them), and K is at least two K tiles of ``bk`` (a split needs
    both halves)."""
    tiles = ceil_div(wl.M, bm) * ceil_div(wl.N, bn)
    return not getattr(wl, "batched", False) and tiles % sms != 0 and ceil_div(wl.K, bk) >= 2


def stream_k_us(wl, cfg, tiles: int, bk: int, flops_per_k_tile: float, rate: float, gpu: GpuSpec, cal: dict,
                store_bytes: int, store_factor: float) -> tuple[float, dict]:
    """(µs, plan) of a stream-K grid's main kernel: its blocks' pipelines filled once, then the
    block that takes longest, its K tiles at ``rate`` (flops per µs) and its stores: each whole tile
    at ``store_bytes`` per output (the output type, and R read), each piece of a split tile in fp32,
    at ``sm_store_gbps`` × ``store_factor`` per SM; the plan (:func:`schedules.tma_common.stream_plan`,
    one block per SM) with the fix-up kernel's µs: a launch, every piece read (from L2,
    ``l2_factor`` times the DRAM bandwidth, where the pieces fit there: the main kernel has just
    written them) and the split tiles stored (DRAM)."""
    bm, bn = cfg.block_m, cfg.block_n
    KT = ceil_div(wl.K, bk)
    grid = stream_k_grid(tiles, KT, gpu.sms)
    plan = stream_plan(tiles, grid, KT)
    store_rate = cal["sm_store_gbps"] * 1e3 * store_factor  # bytes per µs and SM
    whole_us, piece_us = store_bytes * bm * bn / store_rate, 4 * bm * bn / store_rate
    busy = max(k * flops_per_k_tile / rate + whole * whole_us + pieces * piece_us
               for k, whole, pieces in plan["blocks"])
    pieces = plan["pieces"] * 4 * bm * bn
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    read = pieces / (bw * (cal["l2_factor"] if pieces <= gpu.l2_bytes else 1.0))
    plan.update(grid=grid, fixup_us=cal["launch_us"] + read + plan["split_tiles"] * bm * bn * store_bytes / bw)
    return cal["fill_us"] + busy, plan
