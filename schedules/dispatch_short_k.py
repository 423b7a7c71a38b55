"""The dispatcher's family for short K (:func:`schedules.gemm_short_k.short_k_gemm`): its candidates
and its term of the model.

A short-K product's time is its output leaving the SMs: short_k_gemm has no K pipeline and
small blocks that fill the SMs with warps, so its stores, its loads and its FMAs overlap, and

    time = launch + max(fill + max(store, compute, L2), latency) + convert

* **store**: the output (in its type; R read beside it) and the inputs once from DRAM, at the
  measured DRAM bandwidth (``memory_gbps``) times ``short_k_store_efficiency``, the share of it
  a stream of 16-byte stores from every SM reaches (stores narrower than 16 bytes, on rows of C
  that are not a whole number of vectors, are charged nothing more: a warp's store is still 32
  consecutive outputs, whole sectors);
* **compute**: 2·M·N·K flops (K rounded up to the kernel's K step) at the SIMT rate of every SM
  (``fp32_sm_tflops``) times the tile's efficiency (``efficiency["short_k ..."]``, else
  ``default_efficiency["short_k"]``, else :data:`SHORT_K_EFFICIENCY`);
* **L2**: each block reads its rows of A and its columns of B (A once per block-column, B once
  per block-row) at ``l2_factor`` times the DRAM bandwidth;
* **latency**: a thread walks K in steps of K_STEP, each step's loads of A and B a round trip to
  memory that the next step's FMAs wait for (the whole K is unrolled, but nvcc keeps a step's
  fragments, not the next step's, in flight: 32-127 registers per thread), so a block takes at
  least ``fill_us`` + ⌈K / K_STEP⌉ · ``k_step_us`` (the SIMT tiles' load latency), and its blocks
  run in waves of the SMs times the blocks one SM holds (registers: :func:`short_k_registers`, the sweep's median).
  Where the output is a few waves of blocks and K is not tiny, this is the cost: on an H100,
  78x6296x50 (150 blocks, 13 steps) ran 16.2 µs where its stores take 1 µs and the model without
  this term said 6.1; 1210x3424x21 on 32x256 tiles (532 blocks, 3 per SM at 78 registers: 2
  waves of 6 steps) 17.2 µs against 11.1. A tiled kernel, whose loads of the next K tile are in
  flight while one is computed, wins such shapes (the committed candidate timings,
  reports/results/NVIDIA_H100_80GB_HBM3/floor_candidates).

* **convert**: 16-bit inputs widened to fp32 by each thread, at every k (:data:`SHORT_K_CONVERT_FLOPS`).

``schedlab calibrate`` fits ``short_k_store_efficiency`` (and the tiles' efficiencies where the
FMAs, not the stores, set the time) to the sweep's short_k_gemm points; until a sweep has
measured the kernel, the defaults below stand.
"""

from __future__ import annotations

from .common import GpuSpec, blocks_per_sm, ceil_div, current_gpu, limits_of
from .gemm_short_k import K_STEP, ShortKConfig
from .gemm_short_k_tc import ShortKTcConfig
from .errors import ScheduleParamError
from .registry import get
from .workloads import itemsize

# (block_m, block_n, thread_m, thread_n): 256 threads of 4 × 4 outputs (a warp's 32 lanes along
# one row of 128 columns), twice as many rows per thread, and 8 outputs per thread along N for a
# 16-bit output (one 16-byte store of 8 halves)
SHORT_K_TILES = ((32, 128, 4, 4), (64, 128, 8, 4), (32, 256, 4, 8))
# The share of the DRAM bandwidth (``memory_gbps``, which the calibration sets to the copy bandwidth
# the sweep measured) that short_k_gemm's stream of 16-byte stores reaches, until a sweep fits it:
# 0.9, the GEMV kernels' share of it on a stream of 16-byte loads (DECODE_EFFICIENCY, 0.92-1.05;
# "gemv" 0.8 with its reduction), a little under a copy's since writes to DRAM turn the bus around
SHORT_K_STORE_EFFICIENCY = 0.9
# The 4 × 4 thread tile's share of the SIMT peak where its FMAs set the time, until a sweep fits
# it: the calibrated efficiency of the tiled kernels' 4 × 4 thread tiles (simt 64x64 t4x4: 0.63;
# 16x128 t4x4: 0.54), here with no shared-memory loads but two L1 loads per 4 k steps
SHORT_K_EFFICIENCY = 0.6
# 16-bit inputs are widened to fp32 in the thread that multiplies them: each thread converts its fragments of
# A and B at every k, M·N·K·(1/thread_m + 1/thread_n) conversions, which Hopper's SMs do 64 a clock (F2F) where
# they do 128 FMAs: a conversion costs the time of 4 flops at the SIMT rate. Not hidden by the stores or the
# loads: the same tile on fp16 inputs took the fp32 time plus that term on the random draws' short-K
# products (H100: 2767x5205x61 19.9 µs more, the term 25.7; 13273x9243x27 86 more, 96.8; 1663x2002x33 3.7,
# 4.3; H200 6031x294x63 4.6, 4.4), where a K of at most 16 is as fast or faster in fp16 (fewer bytes)
SHORT_K_CONVERT_FLOPS = 4


def short_k_register_key(cfg: ShortKConfig, item: int, k: int) -> str:
    """The calibration's key for a short_k_gemm tile's registers (``regs``): its thread tile, whether
    its inputs are 16-bit (widened beside the fp32 fragments, which ptxas allocates differently), and
    whether K is more than two K steps: the whole K is unrolled, and past two steps nvcc hoists the
    next steps' loads ahead of their FMAs (the H200 sweep's fp32 8 × 4 tile: 58-79 registers at K ≤ 8,
    80-127 above; the drawn products' up to 152)."""
    return (f"short_k t{cfg.thread_m}x{cfg.thread_n}" + (" 16-bit" if item == 2 else "")
            + (" deep" if k > 2 * K_STEP else ""))


def short_k_registers(cfg: ShortKConfig, cal: dict | None = None, item: int = 4, k: int = 0) -> int:
    """Registers per thread of a short_k_gemm tile, which set how many blocks an SM holds: the
    median of what ptxas reported for its thread tile, input width and K (:func:`short_k_register_key`)
    in the calibration sweep (``regs``, fitted as the SIMT tiles' are), or, for one the sweep did not
    build, the accumulators twice over (a step's fragments of A and B and the widened values beside
    them) and 16 for addresses, in steps of 8. The formula alone was short for K past two steps: fp32
    4 × 8 tiles at 80 where ptxas reported 121-198 on drawn products with K ≥ 15 (3917x10903x57: 174,
    one block per SM where the estimate had three; 265 µs where the model said 198), 8 × 4 tiles 152
    at K = 28 (4939x516x28 ran in two waves where the model counted one: 16.4 µs against 9.6)."""
    key = short_k_register_key(cfg, item, k)
    if cal is not None and key in cal.get("regs", {}):
        return cal["regs"][key]
    return ceil_div(2 * cfg.thread_m * cfg.thread_n + 16, 8) * 8


def short_k_waves(wl, cfg: ShortKConfig, gpu: GpuSpec, batches: int = 1, cal: dict | None = None) -> int:
    """Waves of blocks: the grid over the SMs times the blocks one SM holds (threads, registers)."""
    regs = short_k_registers(cfg, cal, itemsize(wl.dtype), wl.K)
    per_sm = max(1, blocks_per_sm(cfg.threads, regs, 0, gpu))
    blocks = ceil_div(wl.M, cfg.block_m) * ceil_div(wl.N, cfg.block_n) * batches
    return ceil_div(blocks, gpu.sms * per_sm)


def short_k_configs(wl, limits=None):
    """``(configuration, calibration key)`` of short_k_gemm's tiles for ``wl`` (K ≤
    ShortKConfig.max_k), those valid on the GPU of ``limits``."""
    if wl.K > ShortKConfig.max_k:
        return []
    # a large output only (a wave of tiles at least): on a few tiles the store is not the cost, the latency is
    # (6x87x33 and 30x35x57 ran at 39-61% of cuBLAS on an H200)
    return _wave_configs(wl, "short_k_gemm", [(ShortKConfig(block_m=bm, block_n=bn, thread_m=tm, thread_n=tn),
                                               f"short_k {bm}x{bn} t{tm}x{tn}") for bm, bn, tm, tn in SHORT_K_TILES], limits)


def _wave_configs(wl, step: str, configs, limits=None):
    """The ``(configuration, key)`` pairs of ``configs`` whose tiles make a wave of blocks or more on this GPU and
    that ``step`` takes for ``wl`` on the GPU of ``limits``."""
    limits = limits or limits_of(current_gpu())
    out = []
    for cfg, key in configs:
        if ceil_div(wl.M, cfg.block_m) * ceil_div(wl.N, cfg.block_n) < current_gpu().sms:
            continue
        try:
            get(step).validate(wl, cfg, limits)
        except ScheduleParamError:
            continue
        out.append((cfg, key))
    return out


def short_k_us(wl, cand, gpu, cal, out_bytes: int, epilogue_bytes: int, batches: int) -> tuple[float, dict]:
    """(µs, terms) of a short_k_gemm candidate (the module docstring's model). ``out_bytes``:
    bytes a block moves per output as it stores (the output, R beside it); ``epilogue_bytes``:
    the epilogue's reads of one product (bias, R)."""
    cfg = cand.config
    M, N, K = wl.M, wl.N, wl.K
    eff = (cal["efficiency"].get(cand.key) or cal.get("default_efficiency", {}).get("short_k")
           or SHORT_K_EFFICIENCY)
    store_eff = cal.get("short_k_store_efficiency", SHORT_K_STORE_EFFICIENCY)
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    item = itemsize(wl.dtype)
    moved = out_bytes * M * N + item * (M * K + K * N) + epilogue_bytes
    store = batches * moved / (bw * store_eff)
    flops = 2 * M * N * ceil_div(K, K_STEP) * K_STEP * batches
    compute = flops / (cal["fp32_sm_tflops"] * 1e6 * gpu.sms * eff)
    blocks = ceil_div(M, cfg.block_m) * ceil_div(N, cfg.block_n) * batches
    l2 = batches * item * (M * K * ceil_div(N, cfg.block_n) + K * N * ceil_div(M, cfg.block_m)) / (bw * cal["l2_factor"])
    waves = short_k_waves(wl, cfg, gpu, batches, cal)
    latency = waves * (cal["fill_us"] + ceil_div(K, K_STEP) * cal.get("k_step_us", 0.0))
    converts = flops / 2 * (1 / cfg.thread_m + 1 / cfg.thread_n) if item == 2 else 0.0
    convert = SHORT_K_CONVERT_FLOPS * converts / (cal["fp32_sm_tflops"] * 1e6 * gpu.sms)
    terms = {"family": "short_k", "efficiency": eff, "store_efficiency": store_eff, "store_us": store,
             "compute_us": compute, "dram_us": store, "l2_us": l2, "latency_us": latency, "convert_us": convert,
             "reduce_us": 0.0, "blocks": blocks, "per_sm": 0, "waves": waves, "splits": 1}
    return cal["launch_us"] + max(cal["fill_us"] + max(store, compute, l2), latency) + convert, terms


# short_k_tc_gemm (gemm 36, 16-bit inputs on the tensor cores): (block_m, block_n, warps_m, warps_n), 8 warps
SHORT_K_TC_TILES = ((64, 128, 4, 2), (128, 128, 4, 2), (64, 256, 2, 4), (32, 128, 2, 4), (64, 64, 4, 2), (128, 64, 4, 2))
# Its time is its phases one after the other (a block loads A and B element by element, runs its mmas, stages
# and stores its tile; the blocks an SM holds overlap little of it): launch + fill + pass + store + load, where pass
# is one block's phases in series (the first wave's latency, SHORT_K_TC_PASS_US), store the output (R beside it) and
# the inputs at ``short_k_tc_store_efficiency`` of the DRAM bandwidth, and load every block's 2-byte loads of its
# whole A and B tiles (K padded to 16; past the edges the loads are clamped and masked, not skipped) at
# ``short_k_tc_load_efficiency`` of it. Until a calibration sweep measures it, the values fitted (least squares in
# log time) to 343 timings of its tiles on a wave of blocks or more: 18 products with K of 3-64 and the 245 drawn
# fp16 products where the model first chose it (H200, reports/results/NVIDIA_H200/short_k_tc): median |log error|
# 0.053; stores at 1.12 of the profile's nominal bandwidth (4000 GB/s; a stream of stores alone is not a copy's
# turned-around bus), loads at 0.92, a block's pass 1.9 µs
SHORT_K_TC_STORE_EFFICIENCY, SHORT_K_TC_LOAD_EFFICIENCY, SHORT_K_TC_PASS_US = 1.12, 0.92, 1.9
SHORT_K_TC_MMA_EFFICIENCY = 0.5  # mma.sync from shared memory, against the wgmma peak (tc16_sm_tflops): a bound only


def short_k_tc_configs(wl, limits=None):
    """``(configuration, calibration key)`` of short_k_tc_gemm's tiles for a 16-bit ``wl`` with K ≤ 64
    and a wave of blocks or more (on fewer, its load-then-store phases are not overlapped by other blocks)."""
    if wl.K > ShortKTcConfig.max_k or wl.dtype not in ShortKTcConfig.dtypes or getattr(wl, "batched", False):
        return []
    return _wave_configs(wl, "short_k_tc_gemm", [(ShortKTcConfig(block_m=bm, block_n=bn, warps_m=wm, warps_n=wn),
                                                  f"short_k_tc {bm}x{bn}") for bm, bn, wm, wn in SHORT_K_TC_TILES], limits)


def short_k_tc_us(wl, cand, gpu, cal, out_bytes: int, epilogue_bytes: int, batches: int = 1) -> tuple[float, dict]:
    """(µs, terms) of a short_k_tc_gemm candidate: launch + fill + pass + max(store + load, mma) (SHORT_K_TC_TILES' note)."""
    cfg = cand.config
    M, N, KP = wl.M, wl.N, cfg.k_padded(wl)
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    store_eff = cal.get("short_k_tc_store_efficiency", SHORT_K_TC_STORE_EFFICIENCY)
    load_eff = cal.get("short_k_tc_load_efficiency", SHORT_K_TC_LOAD_EFFICIENCY)
    store = (out_bytes * M * N + 2 * (M * wl.K + wl.K * N) + epilogue_bytes) / (bw * store_eff)
    blocks = ceil_div(M, cfg.block_m) * ceil_div(N, cfg.block_n)
    load = 2 * KP * (cfg.block_m + cfg.block_n) * blocks / (bw * load_eff)
    compute = 2 * M * N * KP / (cal["tc16_sm_tflops"] * 1e6 * gpu.sms * SHORT_K_TC_MMA_EFFICIENCY)
    pass_us = cal.get("short_k_tc_pass_us", SHORT_K_TC_PASS_US)
    terms = {"family": "short_k_tc", "efficiency": store_eff, "store_efficiency": store_eff, "load_efficiency": load_eff, "store_us": store,
             "l2_us": load, "compute_us": compute, "dram_us": store, "reduce_us": 0.0, "splits": 1,
             "pass_us": pass_us, "blocks": blocks}
    return cal["launch_us"] + cal["fill_us"] + pass_us + max(store + load, compute), terms


def narrow_copy_share(k_tiles: int, stages: int) -> float:
    """The share of a cp.async wgmma kernel's K tiles that copies narrower than 16 bytes slow down
    (the exponent of its ``copy_factor``): none where the ring's prologue issues them all (at most
    ``stages - 1`` K tiles, whose copies' issue and latency overlap: the time is the fill and the
    store), all from twice that on, a ramp between. Charged on every K tile, the 2-byte copies made
    the model too slow on short K (H200: the 43 published cp.async points with at most 4 K tiles ran
    at a median 0.58 of it, 0.70 with this share); on the 24 drawn fp16 products whose choice it
    moved, the new choices ran 1.094x faster (geometric mean, 18 of 24; H100,
    reports/results/NVIDIA_H100_80GB_HBM3/cp_narrow_copies)."""
    return min(1.0, max(0, k_tiles - (stages - 1)) / (stages - 1))
