"""Stream-K in the dispatcher's model (:mod:`schedules.dispatch`): which persistent TMA tiles are
also offered with ``stream_k`` (the K tiles of all output tiles shared out evenly over one block per
SM, :class:`schedules.tma_common.StreamUnits`), and the time of such a grid: no round of tiles on
part of the GPU (every block walks the same K tiles, ±1), at the price of the split tiles' fp32
pieces, stored by the main kernel and added by a fix-up kernel that writes those tiles."""

from __future__ import annotations

from .common import GpuSpec, ceil_div
from .workloads import itemsize
from .tma_common import stream_k_grid, stream_plan


# The least share of a persistent grid's SM-time that its last partial round must leave idle for a
# tile to be offered with stream-K as well: below it (many rounds, or a nearly full last one) the
# gain is within the model's error, and whole tiles are what was measured
STREAM_K_MIN_IDLE = 0.1


def stream_k_offered(wl, bm: int, bn: int, sms: int, bk: int = 64) -> bool:
    """Whether a persistent TMA tile is also offered with stream-K: where its tiles are not a whole
    number of rounds of the ``sms`` blocks and the last round leaves at least STREAM_K_MIN_IDLE of
    the grid's SM-time idle (a fraction of a round over a few rounds, or fewer tiles than SMs over
    a long K), and K is at least two K tiles of ``bk`` (a split needs both halves)."""
    tiles = ceil_div(wl.M, bm) * ceil_div(wl.N, bn)
    idle = (-tiles) % sms / (ceil_div(tiles, sms) * sms)
    return not getattr(wl, "batched", False) and idle >= STREAM_K_MIN_IDLE and ceil_div(wl.K, bk) >= 2


# The rate of a stream-K block's shared-out K tiles against its whole tiles' (the tile's calibrated
# efficiency), until a calibration sweep fits it: the first H200 measurements of the fp16/bf16 kernels
# (128 x 256 and 128 x 128 tiles; 1000 x 14336 x 4096 and 1000 x 13824 x 5120 bf16 at 3.3-6.8 rounds,
# 1892 x 1042 x 7208 fp16, 8192^3 fp16) put them at 0.48-0.62 (median 0.55) of the whole tiles' rate,
# their pieces and the fix-up included: blocks that walk the same tiles at staggered K offsets share
# little of L2, where the whole tiles of a round walk K together. Stream-K lost to whole tiles on all
# seven but one (1892 x 1042 x 7208 on 128 x 128 tiles: 101 against 123 µs, where 128 x 256 whole
# tiles took 88)
STREAM_K_FACTOR = 0.55


# Why a shared-out K tile is slower than a whole tile's: the blocks of a round of whole tiles walk K
# together, so the A rows and B columns of neighbouring tiles are read from DRAM once and then from L2;
# the blocks that share a stream-K tile walk different K ranges of it, and nothing one of them reads
# serves another. The shared-out phase (every block's stream-K range, run first and at once) therefore
# reads each of its K tiles' A and B pieces from DRAM: ``sk_dram_us`` below, against which its compute
# is overlapped. Without it the model put stream-K at 0.67-0.89 of its measured time on the H100's
# language-model layers (bf16, K 3584-18944: reports/results/NVIDIA_H100_80GB_HBM3/bench_llm, f4c8388),
# where whole tiles were within 5%.


def stream_k_us(wl, cfg, tiles: int, bk: int, flops_per_k_tile: float, rate: float, gpu: GpuSpec, cal: dict,
                store_bytes: int, store_factor: float) -> tuple[float, dict]:
    """(µs, plan) of a stream-K grid's main kernel: its blocks' pipelines filled once, then the
    block that takes longest: its whole tiles' K tiles at ``rate`` (flops per µs), its stream-K
    range's at ``stream_k_factor`` of it or, where longer, the shared-out phase's DRAM time
    (``sk_dram_us``: every stream-K K tile's A and B pieces read from DRAM, see above), and its
    stores: each whole tile at ``store_bytes`` per output (the output type, and R read), each
    piece of a split tile in fp32, at ``sm_store_gbps`` × ``store_factor`` per SM; the plan
    (:func:`schedules.tma_common.stream_plan`, one block per SM) with ``sk_dram_us`` and the fix-up
    kernel's µs: a launch, every piece read (from L2, ``l2_factor`` times the DRAM bandwidth, where
    the pieces fit there: the main kernel has just written them) and the split tiles stored (DRAM)."""
    bm, bn = cfg.block_m, cfg.block_n
    KT = ceil_div(wl.K, bk)
    grid = stream_k_grid(tiles, KT, gpu.sms)
    plan = stream_plan(tiles, grid, KT)
    store_rate = cal["sm_store_gbps"] * 1e3 * store_factor  # bytes per µs and SM
    whole_us, piece_us = store_bytes * bm * bn / store_rate, 4 * bm * bn / store_rate
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    sk_dram = plan["sk_tiles"] * KT * (bm + bn) * bk * itemsize(wl.dtype) / bw
    # the K tiles of the shared-out range at ``stream_k_factor`` of the tile's rate (see STREAM_K_FACTOR)
    shared_rate = rate * cal.get("stream_k_factor", STREAM_K_FACTOR)
    busy = max((k - shared) * flops_per_k_tile / rate + max(shared * flops_per_k_tile / shared_rate, sk_dram)
               + whole * whole_us + pieces * piece_us for k, whole, pieces, shared in plan["blocks"])
    pieces = plan["pieces"] * 4 * bm * bn
    read = pieces / (bw * (cal["l2_factor"] if pieces <= gpu.l2_bytes else 1.0))
    plan.update(grid=grid, sk_dram_us=sk_dram,
                fixup_us=cal["launch_us"] + read + plan["split_tiles"] * bm * bn * store_bytes / bw)
    return cal["fill_us"] + busy, plan
