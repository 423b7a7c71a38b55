"""The shape-general choice: for a GEMM's M, N, K, its precision and the GPU it runs on, which step
and which configuration (block, warp and thread tiles, K tile, pipeline stages, split-K, block
order, tensor-core instruction shape, copy width), by a model the lab can explain.

Every candidate is one of the lab's kernels with one configuration. Its time is estimated as

    time = launch + max(compute, memory) [+ the split-K sum]

* **compute**: the blocks in waves. A configuration's blocks per SM follow from its threads,
  registers and shared memory against the GPU's per-SM limits (occupancy); ``waves`` =
  ⌈blocks / (SMs · blocks per SM)⌉ (wave quantization: a last wave of a few blocks costs a whole
  wave). An SM with ``k`` resident blocks computes at ``peak per SM × efficiency × min(1, warps /
  w_sat)^γ``: ``efficiency`` is the configuration's measured share of the SM's peak once the SM is
  full, ``w_sat`` the warps it takes to hide the latencies (``wgmma_w_sat`` for the wgmma kernels,
  whose asynchronous warpgroup instructions keep the tensor cores busy), ``γ`` (``warp_gamma``) how soft that
  knee is (a few warps already keep much of the SM busy: each has several independent FMAs or
  tensor-core instructions in flight). A SIMT block's K loop also costs at
  least ``k_step_us`` per K tile it waits for: every tile with the register double buffer, one in
  ``stages - 1`` with a cp.async ring (whose efficiency carries a fitted ``simt_async_factor``).
  Persistent kernels walk ⌈units / SMs⌉ tiles per block instead; with stream-K
  (``stream_k``: the K tiles of all tiles shared out evenly over the blocks) the most K tiles one
  block walks, and the block's stores: whole tiles in the output type, the pieces of split tiles in
  fp32 (:func:`schedules.tma_common.stream_plan` decodes the grid exactly as the kernel does).
* **memory**: every input byte from DRAM once, the output once (in its type: 2 bytes an output for a
  16-bit one), the epilogue's inputs once (the bias, a residual R), plus each block's panels of A and B
  from L2 (A is read once per column of blocks, B once per row of blocks), at the measured DRAM
  bandwidth and ``l2_factor`` times it; split-K adds its partial sums, written and read once more
  (split-K is a candidate only where they fit in L2).
* **launch**: a kernel's fixed cost, per kernel (split-K's sum and stream-K's fix-up, which reads
  the pieces and writes the split tiles, are second kernels); and per wave of
  blocks, the time to fill their pipelines (``fill_us``) and to store their output tiles
  (``sm_store_gbps`` per SM; rows of C that are not 16-byte aligned store at ``unaligned_store`` of
  that).

The constants (efficiency per configuration, launch, w_sat, l2_factor, per-SM peaks) are fitted to a
sweep of shapes × configurations measured on a GPU (``schedlab sweep --set calibration``, then
``schedlab calibrate``), and live in :mod:`schedules.calibration`; nothing here names a benchmark
shape. The GPU's SM count, registers and shared memory come from the device at run time
(:func:`schedules.common.current_gpu`).

Operand layouts and batches: a candidate is valid for a workload only if its step takes the
workload's layout and batch (``layouts``/``batched`` on the step's configuration; every GEMM
kernel takes every layout, the tf32 TMA kernel no batch), so the choice is made among the kernels
that take it; a kernel that copies an operand first (the tf32 TMA kernel's transpose of A stored
K×M, padded copies) is charged the copy. A batch of products
(``bmm:BxMxNxK``) multiplies the blocks the way split-K does: ``B`` products of ``T`` output tiles
are ``B·T`` blocks (in waves), and each product's bytes are moved. The model has no layout term:
the per-configuration efficiencies were calibrated on nn, and a transposed operand costs little
where the kernel adapts (transposed on its way into shared memory, or read through the tensor
cores' transpose); a calibration sweep over layouts would add one.

Epilogues and 16-bit outputs (``Gemm.has_epilogue``): a kernel is a candidate only where its step
takes them (``epilogues`` on its configuration: the TVM-scheduled steps do, computing the epilogue
in the write-back, and the Hopper fp16/bf16 kernels, wgmma and TMA, on their accumulators). An fp16
or bf16 product with an epilogue is ranked among the same kernels as without it; the tf32 kernels
take none, so a tf32 product with one goes to the SIMT tiles. The output bytes (in the output type)
and the epilogue's reads (the bias, R) are counted in the memory and store terms, and split-K's sum
writes the output and reads them.

8-bit float inputs (FP8) are chosen for by :mod:`schedules.dispatch_fp8`, this model for one-byte
inputs at twice the 16-bit tensor-core rate, among the FP8 kernels alone.

Degenerate shapes go to their own families: N = 1 or M = 1 is a matrix-vector product (the GEMV
dispatcher, row form or transposed form); M or N of a few dozen get skinny block tiles (a few rows
or columns per block, many K slices); few outputs with a long K get split-K; a short K gets no deep
pipeline (one K tile or a few), and for K ≤ 64 short_k_gemm and (16-bit inputs) short_k_tc_gemm, whose time is
storing C (:mod:`schedules.dispatch_short_k`); rows not a multiple of 16 bytes get the widest copies they allow.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

from .calibration import CALIBRATION, tile_efficiency
from .common import GpuSpec, blocks_per_sm, ceil_div, current_gpu, limits_of
from .dispatch_fitted import fitted_tiles
from .dispatch_latency import ring_latency_us
from .dispatch_short_k import narrow_copy_share, short_k_configs, short_k_tc_configs, short_k_tc_us, short_k_us
from .dispatch_store import batches as _batches, epilogue_bytes as _epilogue_bytes, output_bytes as _out_bytes
from .dispatch_registers import simt_register_key, simt_registers, with_held_blocks  # noqa: F401 (the model's names)
from .dispatch_store import simt_staged_body, simt_staged_twins, with_store
from .dispatch_store import store_bytes as _store_bytes, store_factor as _store_factor
from .dispatch_stream_k import stream_k_offered, stream_k_us
from .dispatch_thin import THIN_SIMT_EFFICIENCY, small_product, thin_configs, thin_simt_tiles, thin_us
from .errors import ScheduleParamError
from .decode_plan import decode_form, sm_share
from .gemm_decode import DecodeConfig
from .gemm_fast import SkinnyConfig, WarpTileConfig, simt_vector
from .gemm_tma import TmaLoadConfig
from .gemm_tma_tf32 import Tf32TmaConfig
from .gemm_tma_ws import PersistentConfig
from .gemm_wgmma import Tf32WgmmaConfig, WgmmaConfig
from .gemm_wmma import TensorCoreConfig
from .gemv import ColumnGemvConfig, GemvDispatchConfig, row_form, vector_form
from .registry import get
from .tma_fp16 import padded_copies
from .workloads import itemsize

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DTYPE_OF = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# SIMT tiles (block_m, block_n, thread_m, thread_n, warps_m, warps_n): every arrangement puts 32 lanes in a warp. The
# general ones (fp32 inputs) are warp_tiled_gemm / split_k_gemm; the skinny ones (a few rows or columns) skinny_gemm
SIMT_TILES = [(128, 128, 8, 8, 4, 2), (128, 64, 8, 8, 4, 1), (64, 128, 8, 8, 1, 4), (64, 64, 4, 4, 4, 2),
              (64, 64, 8, 8, 2, 1)]
SKINNY_TILES = [(128, 16, 4, 4, 4, 1), (256, 8, 4, 4, 4, 1), (16, 128, 4, 4, 1, 4), (8, 256, 4, 4, 1, 4),
                # a short K: little to compute per output, so what counts is storing C: one column
                # per thread, a warp writing 32 consecutive floats of a row (whatever N's alignment)
                (16, 128, 4, 1, 4, 4), (32, 128, 8, 1, 4, 4),
                # the same, half as wide: an output a few dozen columns wide (33-64) wastes less of it
                (32, 64, 8, 1, 4, 2)]
# K tiles of a SIMT block: 8, the classic choice; deeper ones walk a short K in fewer steps, each a round trip to memory
# that a block with little to compute cannot hide (an 8 × 8 thread tile, made for long products, stays at 8 or 16)
SIMT_BLOCK_K = (8, 16, 32)
# K pipelines of a SIMT block, (stages, cp.async): step 9's register-staged double buffer keeps one K tile in flight
# while one is computed; a cp.async ring of 3 or 4 shared buffers keeps 2 or 3 in flight, so a block with little
# arithmetic per tile waits for its loads a half or a third as often (at the price of shared memory, hence occupancy,
# and of 4-byte copies for a tile transposed on its way in). cp.async copies 4, 8 or 16 bytes: fp32 inputs only
SIMT_PIPELINES = ((2, False), (3, True), (4, True))
# Split-K factors: every one to 16, so that tiles × splits fill whole waves (108 tiles split 7 ways: 2.86 rounds of 264
# blocks; 6 or 8 ways 2.45 or 3.27); against 1-6, 8, 12, 16 the 103 H100 draws' choices they moved (model gain ≥ 3%)
# ran 1.040x faster (76 faster; reports/results/NVIDIA_H100_80GB_HBM3/split_factors)
SPLITS = tuple(range(1, 17)) + (24, 32, 48, 64, 96, 128)
SIMT_MOST_SPLITS = 128  # a few hundred outputs, tens of thousands deep: a slice per SM
# tensor-core tiles (block_m, block_n, stages)
TMA_TILES = [(128, 256, 4), (128, 192, 5), (128, 128, 6), (128, 64, 8), (256, 128, 4)]
TMA_SMALL_TILES = [(64, 256, 5), (64, 128, 8), (64, 64, 8)]  # one warpgroup, no producer: small M
# the warp-specialized kernel with one consumer warpgroup: 64-row tiles, offered in place of TMA_TILES for a few
# rows (M ≤ FEW_ROWS) against a large weight, where a 128-row tile is half padding (its wgmmas at half use) and
# has half the tiles to spread the weight's read over; with split-K and persistence, which the one-block kernel
# above lacks. On eleven such layers (H200) the best 64-row tile beat the best 128-row one every time, by up to
# 1.3x (61 x 4096 x 14336: 35.6 against 43.2 µs; reports/results/NVIDIA_H200/few_rows_tma)
TMA_ONE_CONSUMER_TILES = [(64, 256, 5), (64, 128, 8)]  # 64 x 64: the best once in eleven layers, by 0.03 µs of 36
FEW_ROWS = 64
# How many times its even share of the bandwidth an SM's block streams where a tensor-core grid has fewer
# blocks than SMs (as decode_gemm's blocks: schedules.decode_plan.sm_share): 61 rows against 4096 x 4096,
# 64 x 128 tiles: 32 blocks took 23.3 µs, 64 (split-K 2) 16.0; against 3584 x 3584, 28 took 20.7, 56 15.7
# (H200, reports/results/NVIDIA_H200/few_rows_tma)
TC_SM_SHARE = 2.0
# A one-consumer tile's rate against the two-consumer tile of twice its rows and the same columns (its
# calibrated efficiency): one warpgroup issues the wgmmas, and the tensor cores idle while it waits on each K
# tile's barrier and wgmmas (H200, 61-row layers: 64 x 64 and 64 x 128 tiles at 0.33 and 0.53 of the model's
# rate, 128 x 64 and 128 x 128 calibrated at 0.68 and 1.05; reports/results/NVIDIA_H200/few_rows_tma)
ONE_CONSUMER_FACTOR = 0.5
CP_TILES = [(128, 256, 4), (128, 128, 4), (128, 64, 4), (64, 128, 4), (64, 64, 4)]
TF32_TMA_TILES = [(256, 128, 4), (128, 128, 6), (64, 128, 8)]  # (block_m = the wgmma's N, block_n, stages)
TF32_CP_TILES = [(256, 128, 4), (128, 128, 4), (128, 64, 4)]
# WMMA tiles (warps_m, warps_n, frags_m, frags_n) of tensor_core_gemm: fp16 on the GPUs without the Hopper
# kernels (sm_80-sm_89, Blackwell), where a warp owns frags_m × frags_n 16 × 16 accumulators
WMMA_TILES = [(2, 2, 4, 4), (2, 4, 4, 4), (2, 2, 2, 4), (2, 2, 4, 2), (2, 2, 2, 2)]
# The WMMA kernel's share of the model's fp16 tensor-core peak (tc16_sm_tflops) at 128 × 128 once its
# occupancy is counted: uncalibrated (no calibration sweep has timed it); tensor_core_gemm 128 × 128
# reached 290-335 TFLOPS at 2048³-4096³ on the calibration's H200 (reports/results/NVIDIA_H200/
# bench_best_fp16), 0.44 of the 758 TFLOPS peak at 8 resident warps per SM, which the model's warp term
# (w_sat, warp_gamma) puts at 0.65 of its full-SM rate. Other tiles: scaled as the calibrated cp.async
# wgmma kernel's efficiency scales with its block tile (the same shared-memory reuse per tile)
WMMA_EFFICIENCY = 0.65


@dataclass(frozen=True)
class Candidate:
    """One kernel configuration: the registered step that builds it and its configuration."""

    step: str
    config: object
    family: str
    key: str  # the calibration's name for this configuration's efficiency


@dataclass(frozen=True)
class Estimate:
    candidate: Candidate
    time_us: float
    terms: dict = field(default_factory=dict)

    @property
    def step(self) -> str:
        return self.candidate.step

    @property
    def config(self):
        return self.candidate.config


# --- candidates ----------------------------------------------------------------------------------
def _valid(step: str, wl, cfg, limits=None) -> bool:
    """Whether ``cfg`` runs ``wl`` on the GPU of ``limits`` (default: the current GPU): its
    architecture and its per-block limits included."""
    try:
        get(step).validate(wl, cfg, limits)
    except ScheduleParamError:
        return False
    return True


def _splits(K: int, block_k: int, most: int = 64):
    """Split-K factors that leave each slice at least two K tiles."""
    k_tiles = ceil_div(K, block_k)
    return [s for s in SPLITS if s <= most and (s == 1 or k_tiles >= 2 * s)]


def simt_candidates(wl, general: bool = True, limits=None):
    """The SIMT configurations valid for ``wl``: the general tiles (warp_tiled_gemm / split_k_gemm for
    fp32 inputs; for 16-bit inputs, skinny_gemm's body, which widens them, with the same tiles) and,
    always, the skinny ones."""
    out = []
    # rows that are not whole 16 bytes: also each configuration with padded copies of A and B
    pads = (False, True) if _misaligned(wl) else (False,)
    pipelines = SIMT_PIPELINES if itemsize(wl.dtype) == 4 else SIMT_PIPELINES[:1]
    # fp32 products 17-48 wide: also tiles as wide as that side (schedules.dispatch_thin)
    for tiles, skinny in ((SIMT_TILES if general else [], False), (SKINNY_TILES, True), (thin_simt_tiles(wl), False)):
        for bm, bn, tm, tn, wm, wn in tiles:
            for bk in simt_depths(tm, tn):
                for s, pad, (stages, ring) in itertools.product(_splits(wl.K, bk, SIMT_MOST_SPLITS), pads, pipelines):
                    fields = dict(block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn, warps_m=wm,
                                  warps_n=wn, stages=stages, async_copy=ring, split_k=s, group_m=8,
                                  vector=simt_vector(tm, tn), pad_operands=pad)
                    if skinny or itemsize(wl.dtype) != 4:  # 16-bit inputs: the SIMT body that widens them
                        step, cfg = "skinny_gemm", SkinnyConfig(**fields)
                    else:
                        step, cfg = ("split_k_gemm" if s > 1 else "warp_tiled_gemm"), WarpTileConfig(**fields)
                    out.append(Candidate(step, cfg, "simt", simt_key(cfg)))
    return [c for c in simt_staged_twins(wl, out) if _valid(c.step, wl, c.config, limits)]


def simt_depths(thread_m: int, thread_n: int) -> tuple[int, ...]:
    """The K tiles a SIMT thread tile is offered at (SIMT_BLOCK_K): an 8 × 8 tile (64 outputs per
    thread, made for long products) at 8 and 16 only, where 32 only stages more loads in registers
    (168 per thread at 64 × 64)."""
    return SIMT_BLOCK_K if thread_m * thread_n < 64 else SIMT_BLOCK_K[:2]


def simt_key(cfg) -> str:
    """The calibration's name for a SIMT configuration's efficiency: its block and thread tiles. The
    K tile is not part of it: the inner loop (a column of A and a row of B per k into the thread's
    accumulators) is the same at any depth; what a deeper tile changes, the model counts apart
    (fewer K steps against the latency floor, more registers and shared memory per block)."""
    return f"simt {cfg.block_m}x{cfg.block_n} t{cfg.thread_m}x{cfg.thread_n}"


def tiles_in_flight(cfg) -> int:
    """K tiles a SIMT block has in flight while it computes one: 1 for the register-staged double
    buffer, ``stages - 1`` for a cp.async ring."""
    return max(cfg.stages - 1, 1) if cfg.async_copy else 1


def short_k_candidates(wl, limits=None):
    """A short K (≤ 64), storing C most of the work: short_k_gemm's tiles, and short_k_tc_gemm's for 16-bit inputs."""
    return ([Candidate("short_k_gemm", cfg, "short_k", key) for cfg, key in short_k_configs(wl, limits)]
            + [Candidate("short_k_tc_gemm", cfg, "short_k_tc", key) for cfg, key in short_k_tc_configs(wl, limits)])


def gemv_candidates(wl):
    """A matrix-vector product (N = 1 or M = 1, no batch): the GEMV kernel of its form, which the
    layout decides (:func:`schedules.gemv.vector_form`: the stored matrix read along its rows or
    down its columns)."""

    form = vector_form(wl)
    if form is None:
        return []
    if form[0] == "row":
        out = [Candidate("gemv_dispatch", GemvDispatchConfig(), "gemv", "gemv row")]
    else:
        out = [Candidate("column_gemv_t", ColumnGemvConfig(), "gemv", "gemv column")]
    # the row form's steps take an epilogue (on the block's sums); column_gemv_t does not: the tiles take it
    return [c for c in out if _valid(c.step, wl, c.config)] if getattr(wl, "has_epilogue", False) else out


# decode_gemm's bandwidth on the scale of the model's DRAM term (memory_gbps, which the H200
# calibration fits the tiled kernels to), by its token groups of 8 (the few rows, rounded up),
# fitted by the choice's regret against the tensor-core kernels' estimates on 80 layers of four
# models at 4-56 rows (H200, reports/results/NVIDIA_H200/decode_vs_tma: regret 1.063 geometric
# mean, 1.110 with the earlier constants): up to 32 tokens it streams the weight at 1.2 on that
# scale (the model's 4000 GB/s is under the H200's measured copy rate, and the tensor-core
# estimates are 10-25% optimistic at a few rows); from 33 tokens, with one K warp and 64
# accumulators per lane, at 0.5.
DECODE_EFFICIENCY = {1: 1.2, 2: 1.2, 4: 1.2, 8: 0.5}


def decode_candidates(wl, limits=None):
    """A decode-sized product (a few rows against a large weight, layout nt, 16-bit inputs,
    :func:`schedules.decode_plan.decode_form`): decode_gemm, its parameters as its plan resolves
    them on this GPU (so that the choice names them). A matrix-vector product (one row or column)
    stays with the GEMV family where a GEMV step takes it (the row form, epilogue or not)."""
    if wl.dtype not in DecodeConfig.dtypes or decode_form(wl) is None or gemv_candidates(wl):
        return []
    p = DecodeConfig().plan(wl, current_gpu())
    cfg = DecodeConfig(warp_rows=16 * p.m_tiles, row_warps=p.row_warps, k_warps=p.k_warps, unroll=p.unroll,
                       stages=p.stages, split_k=p.splits, cluster_sum=p.cluster)
    cand = Candidate("decode_gemm", cfg, "decode", f"decode t{8 * p.token_tiles}")
    return [cand] if _valid(cand.step, wl, cfg, limits) else []


def thin_candidates(wl, limits=None):
    """A thin 16-bit product decode_gemm does not take (another layout, a K not a multiple of 8):
    thin_tc_gemm (:mod:`schedules.dispatch_thin`)."""
    taken = bool(decode_candidates(wl, limits))
    return [Candidate("thin_tc_gemm", cfg, "thin", key)
            for cfg, key in thin_configs(wl, lambda cfg: _valid("thin_tc_gemm", wl, cfg, limits), taken)]


def _decode_us(wl, cand: Candidate, gpu: GpuSpec, cal: dict) -> tuple[float, dict]:
    """decode_gemm: launch + every byte once (the weight, X, the output, the epilogue's bias and R) at
    its share of the bandwidth (``DECODE_EFFICIENCY``, or the calibration's for its key), scaled where
    its grid has fewer blocks than SMs (:func:`sm_share`) + split-K's sum kernel (none where a cluster
    sums the slices); X is read from L2 once per block of rows, at ``l2_factor`` times the bandwidth."""
    p = cand.config.plan(wl, gpu)
    eff = cal["efficiency"].get(cand.key) or DECODE_EFFICIENCY[min(k for k in DECODE_EFFICIENCY if k >= p.token_tiles)]
    item, bw = itemsize(wl.dtype), gpu.memory_gbps * 1e3
    weight, x = item * p.rows * wl.K, item * p.tokens * wl.K
    out = _out_bytes(wl) * wl.M * wl.N + _epilogue_bytes(wl)  # the output, the bias and R read once
    # a grid of fewer blocks than SMs streams through the SMs it has, each at up to its share of the bandwidth
    # (61 rows against a 3584 × 3584 weight: 28 row blocks × 2 K slices on 132 SMs took 2.6× cuBLAS's time)
    fill = min(1.0, sm_share(p, gpu) * p.row_blocks * p.splits / gpu.sms)
    dram = (weight + x + out) / (bw * eff * fill)
    l2 = x * p.row_blocks / (bw * cal["l2_factor"])
    reduce = 0.0 if p.cluster else _reduce_us(wl, p.splits, gpu, cal)  # a cluster sums its slices itself
    terms = {"family": "decode", "efficiency": eff, "fill": fill, "dram_us": dram, "l2_us": l2, "reduce_us": reduce,
             "blocks": p.row_blocks * p.splits, "splits": p.splits, "waves": 1}
    return cal["launch_us"] + max(dram, l2) + reduce, terms


def _misaligned(wl) -> bool:
    """Whether A's or B's stored rows are not a whole number of 16 bytes (Gemm.misaligned_rows)."""
    return any(wl.misaligned_rows())


def _pad_us(wl, cfg, gpu, cal) -> float:
    """The copy kernels a configuration runs first (its ``copied(wl)``): ``pad_operands`` giving
    misaligned rows a pitch of whole 16 bytes (``pad_pitch``), or the tf32 TMA kernel transposing A
    stored K×M; each reads and writes its operand once."""
    copied = getattr(cfg, "copied", None)
    if copied is None:
        return 0.0
    item, us = itemsize(wl.dtype), 0.0
    for shape, copy in zip((wl.a_shape, wl.b_shape), copied(wl)):
        if copy:
            us += cal["launch_us"] + 2 * item * math.prod(shape) / (gpu.memory_gbps * 1e3)
    return us


def hopper_kernels(limits) -> bool:
    """Whether the GPU of ``limits`` builds the Hopper kernels (wgmma, TMA: sm_90a)."""
    return WgmmaConfig().arch_refusal(limits.arch) is None


def wmma_candidates(wl, limits=None):
    """tensor_core_gemm's WMMA tiles (:data:`WMMA_TILES`), fp16 inputs (TVM 0.27 has no bf16
    tensor-core intrinsics): the tensor cores of the GPUs without the Hopper kernels."""
    out = [Candidate("tensor_core_gemm", TensorCoreConfig(warps_m=wm, warps_n=wn, frags_m=fm, frags_n=fn), "wmma",
                     f"wmma {16 * wm * fm}x{16 * wn * fn}") for wm, wn, fm, fn in WMMA_TILES]
    return [c for c in out if _valid(c.step, wl, c.config, limits)]


def fp16_candidates(wl, limits=None, sms: int | None = None):
    limits = limits or limits_of(current_gpu())
    sms = sms or current_gpu().sms
    if not hopper_kernels(limits):  # no wgmma, no TMA kernels here
        wmma = wmma_candidates(wl, limits) if wl.dtype == "float16" else []
        if not wmma:  # bf16 (WMMA here takes fp16), or no WMMA tile builds here: every SIMT tile
            return (simt_candidates(wl, general=True, limits=limits) + short_k_candidates(wl, limits) + gemv_candidates(wl)
                    + decode_candidates(wl, limits) + thin_candidates(wl, limits))
        skinny = simt_candidates(wl, general=False, limits=limits) if min(wl.M, wl.N) <= 64 or wl.K <= 64 else []
        return (wmma + skinny + short_k_candidates(wl, limits) + gemv_candidates(wl) + decode_candidates(wl, limits)
                + thin_candidates(wl, limits))
    out = []
    pad = _misaligned(wl)  # rows a tensor map cannot take: the TMA kernel copies them into padded buffers
    padding = padded_copies(pad)
    # 64-row tiles in place of 128-row ones, half padding or more (TMA_ONE_CONSUMER_TILES); not yet run on a
    # batch or on padded copies of misaligned rows, which keep the 128-row tiles measured there
    few = wl.M <= FEW_ROWS and not getattr(wl, "batched", False) and not pad

    def persistent(bm, bn, st, **knobs):  # a persistent TMA tile, C staged or stored by TMA where that pays
        return with_store(wl, Candidate("persistent_gemm", PersistentConfig(
            block_m=bm, block_n=bn, stages=st, **padding, **knobs), "tma", f"tma {bm}x{bn}"),
            lambda c: _valid(c.step, wl, c.config, limits))

    for bm, bn, st in TMA_ONE_CONSUMER_TILES if few else TMA_TILES:
        out += [persistent(bm, bn, st, split_k=s, consumers=1 if few else 2) for s in _splits(wl.K, 64, 32)]
        if not few and stream_k_offered(wl, bm, bn, sms):  # the same tile, its K tiles shared out evenly over the SMs
            out.append(persistent(bm, bn, st, stream_k=True))
    if not few:  # widths fitted to whole rounds of the SMs (B stored N×K: schedules.dispatch_fitted)
        out += [persistent(bm, bn, st) for bm, bn, st in fitted_tiles(wl, sms, TMA_TILES)]
    for bm, bn, st in TMA_SMALL_TILES:
        out.append(Candidate("tma_gemm", TmaLoadConfig(block_m=bm, block_n=bn, stages=st, consumers=1), "tma_small",
                             f"tma1 {bm}x{bn}"))
    for bm, bn, st in CP_TILES:
        cfg = WgmmaConfig(block_m=bm, block_n=bn, stages=st, mma_overlap=bn == 256)
        out.append(Candidate("wgmma_gemm", cfg, "cp", f"cp {bm}x{bn}"))
    # every one of them takes an epilogue and a 16-bit output (computed on the accumulators)
    out = [c for c in out if _valid(c.step, wl, c.config, limits)]
    # a few output rows or columns, or a small output over a long K: the skinny SIMT tiles (16-bit inputs widened)
    skinny = (simt_candidates(wl, general=False, limits=limits)
              if min(wl.M, wl.N) <= 64 or wl.K <= 64 or small_product(wl) else [])
    return (out + skinny + short_k_candidates(wl, limits) + gemv_candidates(wl) + decode_candidates(wl, limits)
            + thin_candidates(wl, limits))


def tf32_candidates(wl, limits=None, sms: int | None = None):
    """tf32 tensor-core kernels (Hopper's alone: wgmma), and the fp32 SIMT and GEMV kernels, which
    are all there is where the GPU has no wgmma."""
    out = []
    padding = padded_copies(_misaligned(wl))
    sms = sms or current_gpu().sms
    for bm, bn, st in TF32_TMA_TILES:
        for s in _splits(wl.K, 32, 32):
            out.append(Candidate("tma_tf32_gemm", Tf32TmaConfig(block_m=bm, block_n=bn, stages=st, split_k=s,
                                                                **padding), "tma_tf32", f"tma_tf32 {bm}x{bn}"))
        if stream_k_offered(wl, bm, bn, sms, 32):
            out.append(Candidate("tma_tf32_gemm", Tf32TmaConfig(block_m=bm, block_n=bn, stages=st, stream_k=True,
                                                                **padding), "tma_tf32", f"tma_tf32 {bm}x{bn}"))
    for bm, bn, st in TF32_CP_TILES:
        out.append(Candidate("wgmma_tf32_gemm", Tf32WgmmaConfig(block_m=bm, block_n=bn, stages=st,
                                                                mma_overlap=False), "cp_tf32", f"cp_tf32 {bm}x{bn}"))
    out = [c for c in out if _valid(c.step, wl, c.config, limits)]
    # fp32 SIMT and GEMV kernels compute the same product more exactly: where they are faster (a
    # matrix-vector product, a very short K), the tf32 choice may take them
    return out + simt_candidates(wl, limits=limits) + short_k_candidates(wl, limits) + gemv_candidates(wl)


def candidates(wl, precision: str, gpu: GpuSpec | None = None):
    """Every valid candidate for ``wl`` in ``precision`` on ``gpu`` (default: the current GPU):
    those that build for its architecture and fit its per-block limits."""
    if precision not in PRECISIONS:
        raise ScheduleParamError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if wl.kind != "gemm":
        raise ScheduleParamError(f"the dispatcher chooses GEMM kernels, not {wl.kind}")
    if wl.dtype != DTYPE_OF[precision]:
        raise ScheduleParamError(f"{precision} takes {DTYPE_OF[precision]} inputs, not {wl.dtype}")
    gpu = gpu or current_gpu()
    limits = limits_of(gpu)
    if precision == "fp32":
        return gemv_candidates(wl) or simt_candidates(wl, limits=limits) + short_k_candidates(wl, limits)
    if precision == "tf32":
        return tf32_candidates(wl, limits, gpu.sms)
    # a matrix read along its rows (one token against a weight stored N×K): the GEMV steps, faster than every other family
    # on the 24 one-token layers timed (H100, 1.03-1.21x decode_gemm: reports/results/NVIDIA_H100_80GB_HBM3/gemv_epilogue)
    return (gemv_candidates(wl) if row_form(wl) else []) or fp16_candidates(wl, limits, gpu.sms)


def fallback_note(wl, precision: str, gpu: GpuSpec | None = None) -> str | None:
    """What the choice falls back to where the GPU lacks the lab's Hopper tensor-core kernels
    (wgmma, TMA: sm_90a), one line; None where it has them (or for fp32, which needs none)."""
    gpu = gpu or current_gpu()
    if precision == "fp32" or hopper_kernels(limits_of(gpu)):
        return None
    if precision == "tf32":
        return (f"no tf32 kernel of the lab builds for {gpu.arch} (its tf32 kernels are wgmma: sm_90a): "
                f"an fp32 SIMT or GEMV kernel, which computes in fp32")
    if wl.dtype == "bfloat16":
        return (f"no bf16 tensor-core kernel of the lab builds for {gpu.arch} (wgmma needs sm_90a; "
                f"tensor_core_gemm's WMMA takes fp16): SIMT kernels, bf16 widened to fp32")
    return f"the Hopper kernels (wgmma, TMA) need sm_90a: WMMA tensor cores (tensor_core_gemm) on {gpu.arch}"


def calibrated_elsewhere(gpu: GpuSpec | None = None, cal: dict | None = None) -> str | None:
    """The GPU the model's constants were calibrated on (``calibrated_on`` of the calibration), as
    "NAME (sm_XY, N SMs)", where it is not ``gpu`` (default: the current GPU): the choice is then
    made with another GPU's per-SM rates and efficiencies. None where it is the same GPU."""
    gpu, on = gpu or current_gpu(), (cal or CALIBRATION).get("calibrated_on") or {}
    if not on.get("gpu"):
        return None
    same = (_gpu_key(on["gpu"]) == _gpu_key(gpu.name) and on.get("arch", gpu.arch) == gpu.arch
            and on.get("sms", gpu.sms) == gpu.sms)
    return None if same else f"{on['gpu']} ({on.get('arch', '?')}, {on.get('sms', '?')} SMs)"


def _gpu_key(name: str) -> str:
    return "".join(ch for ch in name.lower().removeprefix("nvidia") if ch.isalnum())


# --- the model -----------------------------------------------------------------------------------
def _memory_us(wl, bm, bn, splits, gpu, cal, store: float) -> tuple[float, float]:
    """(DRAM time, L2→SM time) of a tiled product in µs; the split-K partials in the first; a batch
    (bmm) moves each product's bytes. The output in its type (at ``store``, the share of the
    bandwidth its stores reach: :func:`schedules.dispatch_store.store_factor`), and the epilogue's inputs."""
    item = itemsize(wl.dtype)
    M, N, K = wl.M, wl.N, wl.K
    dram = item * (M * K + K * N) + _out_bytes(wl) * M * N / store + _epilogue_bytes(wl)
    if splits > 1:
        dram += _partial_bytes(wl, splits)  # partials written by the main kernel
    l2 = item * (M * K * ceil_div(N, bn) + K * N * ceil_div(M, bm))
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    return _batches(wl) * dram / bw, _batches(wl) * l2 / (bw * cal["l2_factor"])


def _partial_bytes(wl, splits) -> int:
    """Split-K's partial sums of one product: an fp32 output per K slice."""
    return 4 * splits * wl.M * wl.N


def _reduce_us(wl, splits, gpu, cal) -> float:
    """Split-K's second kernel: every partial read once, the output written once (in its type, the
    epilogue's inputs read there)."""
    if splits <= 1:
        return 0.0
    moved = _partial_bytes(wl, splits) + _out_bytes(wl) * wl.M * wl.N + _epilogue_bytes(wl)
    return cal["launch_us"] + moved * _batches(wl) / (gpu.memory_gbps * 1e3)


def _simt_copy_factor(wl, cfg, cal) -> tuple[float, str]:
    """(factor, key): global loads narrower than the configuration's vector (rows whose length
    does not allow it, see FastTileConfig.load_vectors) issue more instructions per byte; the
    factor on the efficiency is fitted per fraction of the full width (``simt_copy_factor``)."""
    a, b = cfg.load_vectors(wl)
    key = f"{min(a, b) / cfg.vector:g}"
    return cal.get("simt_copy_factor", {}).get(key, 1.0), key


def _waves_compute(blocks, per_sm, warps, flops_per_block, sm_tflops, eff, gpu, cal, out_bytes_per_block,
                   store_factor=1.0, k_steps=0, in_flight=1, w_sat=None):
    """(waves, µs): blocks in waves of SMs × per_sm, an SM with k resident blocks running at
    sm_tflops × eff × min(1, k·warps / w_sat)^warp_gamma; each wave also fills its pipelines (fill_us) and
    stores its k output tiles (at sm_store_gbps per SM). ``k_steps``: the K tiles a block walks
    one after the other; with ``in_flight`` tiles loading while one is computed (1: the register
    double buffer; stages - 1: a cp.async ring), a load's latency ``k_step_us``, which little
    arithmetic per tile cannot hide (a few outputs per block, or few warps per SM), is paid once
    per ``in_flight`` tiles: a wave takes at least (k_steps + in_flight - 1) / in_flight ·
    k_step_us. ``w_sat``: the saturating warps where not the calibration's (the wgmma kernels')."""
    per_sm = max(per_sm, 1)
    waves = ceil_div(blocks, gpu.sms * per_sm)
    k = min(per_sm, ceil_div(blocks, gpu.sms))  # blocks an SM holds at once (fewer in a small grid)
    rate = sm_tflops * 1e6 * eff * min(1.0, k * warps / (w_sat or cal["w_sat"])) ** cal.get("warp_gamma", 1.0)  # flops per µs
    epilogue = k * out_bytes_per_block / (cal["sm_store_gbps"] * 1e3 * store_factor)
    floor = (k_steps + in_flight - 1) / in_flight * cal.get("k_step_us", 0.0) if k_steps else 0.0
    busy = max(k * flops_per_block / rate, floor)
    return waves, waves * (busy + cal["fill_us"] + epilogue)


def estimate(wl, cand: Candidate, gpu: GpuSpec | None = None, cal: dict | None = None) -> Estimate:
    gpu, cal = gpu or current_gpu(), cal or CALIBRATION
    fam = cand.family
    if fam == "decode":
        time_us, terms = _decode_us(wl, cand, gpu, cal)
        return Estimate(cand, time_us, terms)
    if fam == "thin":
        time_us, terms = thin_us(wl, cand, gpu, cal, _out_bytes(wl), _epilogue_bytes(wl),
                                 lambda splits: _reduce_us(wl, splits, gpu, cal))
        return Estimate(cand, time_us, terms)
    if fam in ("short_k", "short_k_tc"):  # schedules.dispatch_short_k
        time_us, terms = {"short_k": short_k_us, "short_k_tc": short_k_tc_us}[fam](
            wl, cand, gpu, cal, _store_bytes(wl), _epilogue_bytes(wl), _batches(wl))
        return Estimate(cand, time_us, terms)
    cfg = cand.config
    if fam == "tma" and cfg.consumers == 1:  # a one-consumer tile: from the two-consumer tile of twice its rows
        eff = ONE_CONSUMER_FACTOR * (tile_efficiency(cal, f"tma {2 * cfg.block_m}x{cfg.block_n}")
                                     or cal["default_efficiency"][fam])
    else:
        eff = tile_efficiency(cal, cand.key) or THIN_SIMT_EFFICIENCY.get(cand.key) or (
            wmma_efficiency(cfg, cal) if fam == "wmma" else cal["default_efficiency"][fam])
    M, N, K = wl.M, wl.N, wl.K
    terms = {"family": fam, "efficiency": eff}
    if fam == "gemv":
        item = itemsize(wl.dtype)
        nbytes = item * (M * K + K * N) + 4 * M * N
        mem = nbytes / (gpu.memory_gbps * 1e3 * eff)
        terms.update(memory_us=mem, launch_us=cal["launch_us"], kernels=getattr(cfg, "kernels", lambda wl: 1)(wl))
        return Estimate(cand, cal["launch_us"] * terms["kernels"] + mem, terms)
    if fam == "simt":
        splits = cfg.splits(wl)
        kt = ceil_div(ceil_div(K, splits), cfg.block_k) * cfg.block_k
        # a batch multiplies the blocks, as split-K does (each product's tiles are blocks of their own)
        tiles = ceil_div(M, cfg.block_m) * ceil_div(N, cfg.block_n) * _batches(wl)
        regs = simt_registers(cfg, cal)
        per_sm = blocks_per_sm(cfg.threads, regs, 4 * cfg.shared_floats(), gpu)
        cand = with_held_blocks(wl, cand, regs, gpu, cal["w_sat"])  # where a few registers more would cost a block an SM
        factor, width = _simt_copy_factor(wl, cfg, cal)
        store = _store_factor(wl, cal, cfg, runs=cfg.staged_store)
        eff *= factor * (cal.get("simt_async_factor", 1.0) if cfg.async_copy else 1.0)
        eff *= simt_staged_body(cfg, cand.key)
        eff *= cal.get("simt_column_split_factor", 1.0) if splits > 1 and cfg.thread_n == 1 else 1.0  # one column a thread, K split
        waves, comp = _waves_compute(tiles * splits, per_sm, cfg.threads // 32, 2 * cfg.block_m * cfg.block_n * kt,
                                     cal["fp32_sm_tflops"], eff, gpu, cal, _store_bytes(wl) * cfg.block_m * cfg.block_n,
                                     store, k_steps=kt // cfg.block_k, in_flight=tiles_in_flight(cfg))
        dram, l2 = _memory_us(wl, cfg.block_m, cfg.block_n, splits, gpu, cal, store)
        reduce = _reduce_us(wl, splits, gpu, cal) + _pad_us(wl, cfg, gpu, cal)
        terms.update(blocks=tiles * splits, per_sm=per_sm, waves=waves, compute_us=comp, dram_us=dram, l2_us=l2,
                     reduce_us=reduce, splits=splits, efficiency=eff, load_width=width,
                     pipeline="async" if cfg.async_copy else "registers")
        return Estimate(cand, cal["launch_us"] + max(comp, dram, l2) + reduce, terms)
    # tensor cores. The cp.async wgmma kernels (steps 19 and 26) store C from the accumulator
    # fragments a float at a time, each store bounds-checked (the TMA kernels store pairs): their
    # epilogue runs at a fitted share of the store rate, which a short K makes most of their time.
    # With an epilogue, step 19 stores pairs too (N even), as the TMA kernels do
    pairs = getattr(wl, "has_epilogue", False) and wl.N % 2 == 0
    scalar_store = cal.get("scalar_store_factor", 1.0) if fam in ("cp", "cp_tf32") and not pairs else 1.0
    store = _store_factor(wl, cal, runs=getattr(cfg, "staged_store", False) or fam == "tma_tf32",
                          sectors=fam in ("tma", "tma_small", "cp", "cp_tf32") and _out_bytes(wl) == 4)
    tf32 = fam in ("tma_tf32", "cp_tf32")
    peak = cal["tf32_sm_tflops"] if tf32 else cal["tc16_sm_tflops"]
    bk = 32 if tf32 else (cfg.block_k if fam == "wmma" else 64)
    kts, splits = cfg.k_split(K) if hasattr(cfg, "k_split") else (ceil_div(K, bk), 1)
    bm, bn = cfg.block_m, cfg.block_n
    tiles = ceil_div(M, bm) * ceil_div(N, bn) * _batches(wl)  # a batch multiplies the blocks
    flops = 2 * bm * bn * kts * bk
    if fam in ("cp", "cp_tf32"):  # copies narrower than 16 bytes cost issue slots (and 2-byte ones registers)
        a_bytes, b_bytes = cfg.copy_widths(wl)
        eff *= cal["copy_factor"][str(a_bytes if tf32 else min(a_bytes, b_bytes))] ** narrow_copy_share(kts, cfg.stages)
        terms.update(efficiency=eff, copy_bytes=(a_bytes, b_bytes))
    stream = None
    if getattr(cfg, "stream_k", False):
        comp, stream = stream_k_us(wl, cfg, tiles, bk, flops / kts, peak * 1e6 * eff, gpu, cal,
                                   _store_bytes(wl), store)
        waves, per_sm = round(stream["k_tiles"] / ceil_div(K, bk), 2), 1
    elif fam in ("tma", "tma_tf32") and getattr(cfg, "persistent", True):
        units = tiles * splits
        grid = min(gpu.sms, units)
        per_block = ceil_div(units, grid)
        # the epilogue: a tile's outputs leave the SM (and R comes in), not overlapped with the next tile
        epi = _store_bytes(wl) * bm * bn / (cal["sm_store_gbps"] * 1e3 * store)
        comp = cal["fill_us"] + per_block * (flops / (peak * 1e6 * eff) + epi)
        waves = per_block
        per_sm = 1
    else:
        if fam == "wmma":
            threads, smem, regs = 32 * cfg.warps_m * cfg.warps_n, cfg.launch(wl).shared_bytes, wmma_registers(cfg)
        else:
            threads = cfg.threads
            smem = cfg.shared_bytes() if not hasattr(cfg, "stage_bytes") else cfg.shared_bytes(itemsize(wl.dtype))
            regs = cal["regs"].get(fam, 168)
        per_sm = blocks_per_sm(threads, regs, smem, gpu)
        # a wgmma is asynchronous, a warpgroup's keeps the SM's four tensor cores busy: those kernels' SMs
        # saturate at their own count of warps (wgmma_w_sat, fitted; the SIMT tiles' w_sat where none is)
        waves, comp = _waves_compute(tiles * splits, per_sm, threads // 32, flops, peak, eff, gpu, cal,
                                     _store_bytes(wl) * bm * bn, store * scalar_store,
                                     w_sat=None if fam == "wmma" else cal.get("wgmma_w_sat"))
        if fam in ("cp", "cp_tf32"):  # a memory latency per ring of K tiles in flight (dispatch_latency)
            comp = max(comp, ring_latency_us(tiles * splits, per_sm, kts, cfg.stages, gpu, cal))
    dram, l2 = _memory_us(wl, bm, bn, splits, gpu, cal, store)
    # stream-K: every SM walks the same number of K tiles, so no SM streams more than its share
    spread = 1.0 if stream else stream_spread(tiles * splits, gpu, persistent=fam in ("tma", "tma_tf32")
                                               and getattr(cfg, "persistent", True))
    dram *= spread
    reduce = _reduce_us(wl, splits, gpu, cal) + _pad_us(wl, cfg, gpu, cal)  # the extra kernels
    if stream:  # the pieces written (DRAM term) and the fix-up kernel
        dram += stream["pieces"] * bm * bn * 4 / (gpu.memory_gbps * 1e3)
        reduce += stream["fixup_us"]
        terms.update(stream_k={k: stream[k] for k in ("sk_tiles", "split_tiles", "pieces", "k_tiles")})
    terms.update(blocks=stream["grid"] if stream else tiles * splits, per_sm=per_sm, waves=waves, compute_us=comp,
                 dram_us=dram, l2_us=l2, reduce_us=reduce, splits=splits, spread=spread)
    return Estimate(cand, cal["launch_us"] + max(comp, dram, l2) + reduce, terms)


def stream_spread(units: int, gpu: GpuSpec, persistent: bool) -> float:
    """How much longer than bytes / bandwidth a persistent kernel's SMs take to stream its bytes:
    its SMs (one block each, walking units i, i + SMs, ...) take as long as the ones with
    ⌈units / SMs⌉ units, the last round on fewer SMs than the first. Non-persistent blocks are
    handed to SMs as others finish, which evens it out. A grid of fewer units than SMs is charged only
    where it has fewer than the SMs over TC_SM_SHARE (an SM pulls more than its share: 96 tiles of
    128 × 128 took 48 µs where 128 of 128 × 64 took 59, 61 rows × 4096×14336 on an H200; but 32 tiles
    of 64 × 128 took 1.5x the time of 64 over 61 × 4096×4096). Matters where the weight's read is the
    bound (a few rows against a large weight: reports/results/NVIDIA_H200/decode_vs_tma, few_rows_tma)."""
    if units < gpu.sms:
        return max(1.0, gpu.sms / (TC_SM_SHARE * units))
    if not persistent:
        return 1.0
    return ceil_div(units, gpu.sms) * gpu.sms / units


def wmma_efficiency(cfg, cal) -> float:
    """A WMMA tile's efficiency where the calibration has none (:data:`WMMA_EFFICIENCY`): 128 × 128's,
    scaled as the cp.async wgmma kernel's calibrated efficiency is from its 128 × 128 to this tile."""
    eff = cal["efficiency"]
    return WMMA_EFFICIENCY * eff.get(f"cp {cfg.block_m}x{cfg.block_n}", 1.0) / eff.get("cp 128x128", 1.0)


def wmma_registers(cfg) -> int:
    """Registers per thread of a WMMA configuration: 8 per 16 × 16 fp32 accumulator fragment, 8 per
    A and B fragment (double-buffered), 40 for addresses and counters, in steps of 8 (the 4 × 4
    fragments per warp of tensor_core_gemm's default: 200; ptxas reported 204-206 for it)."""
    return ceil_div(8 * cfg.frags_m * cfg.frags_n + 8 * (cfg.frags_m + cfg.frags_n) + 40, 8) * 8


def partials_fit(wl, est: Estimate, gpu: GpuSpec) -> bool:
    """Split-K only where its partial sums fit in L2: the sum kernel then reads back what the main
    kernel has just written from there. An output with more partials than that is large enough to
    fill the GPU with whole tiles (split-K would only trim its last wave), and its workspace would
    grow with the output (805 MB of partials for split-K 3 at 8192³ in fp32)."""
    splits = est.terms.get("splits", 1)
    return splits <= 1 or _partial_bytes(wl, splits) * _batches(wl) <= gpu.l2_bytes


def rank(wl, precision: str, gpu: GpuSpec | None = None, cal: dict | None = None) -> list[Estimate]:
    """Every valid candidate for ``wl`` with its estimated time, fastest first."""
    gpu = gpu or current_gpu()
    ests = [e for e in (estimate(wl, c, gpu, cal) for c in candidates(wl, precision, gpu)) if partials_fit(wl, e, gpu)]
    if not ests:
        raise ScheduleParamError(f"no {precision} kernel of the lab takes {wl}")
    return sorted(ests, key=lambda e: e.time_us)


def choose(wl, precision: str, gpu: GpuSpec | None = None, cal: dict | None = None):
    """``(step name, configuration)`` of the fastest candidate by the model."""
    best = rank(wl, precision, gpu, cal)[0]
    return best.step, best.config


def describe(cand: Candidate) -> str:
    cfg = cand.config
    extra = ""
    split = getattr(cfg, "split_k", 1)
    if split and split > 1:
        extra += f", split-K {split}" + (" in a cluster" if cand.family == "decode" and cfg.cluster_sum else "")
    if getattr(cfg, "stream_k", False):
        extra += ", stream-K"
    if getattr(cfg, "pad_operands", False):
        extra += ", padded copies of A/B"
    if getattr(cfg, "staged_store", False):
        extra += ", C staged"
    if getattr(cfg, "tma_store", False):
        extra += ", C by TMA"
    if cand.family == "cp":
        extra += f", stages {cfg.stages}"
    if cand.family == "simt" and cfg.block_k != 8:
        extra += f", K tile {cfg.block_k}"
    if cand.family == "simt" and cfg.async_copy:
        extra += f", cp.async ring of {cfg.stages}"
    if cand.family == "simt" and cfg.min_blocks:
        extra += f", held to {cfg.min_blocks} blocks/SM"
    if cand.family in ("decode", "thin"):
        extra += f", {cfg.warp_rows} rows per warp, {cfg.row_warps}x{cfg.k_warps} warps, ring of {cfg.stages}"
    return f"{cand.step} [{cand.key}{extra}]"


def explanation(wl, precision: str, k: int = 5, gpu: GpuSpec | None = None, cal: dict | None = None) -> dict:
    """The choice for ``wl`` and the model's figures for it and the next best ``k - 1``, as plain
    data (``schedlab show --explain --json``): the GPU the choice is made for, the calibration's
    source, and per candidate its rank, step, configuration, estimated time and the model's terms."""
    gpu = gpu or current_gpu()
    cal = cal or CALIBRATION
    ests = rank(wl, precision, gpu, cal)
    elsewhere, fallback = calibrated_elsewhere(gpu, cal), fallback_note(wl, precision, gpu)
    return {"workload": str(wl), "precision": precision,
            "gpu": {"name": gpu.name, "arch": gpu.arch, "sms": gpu.sms, "regs_per_sm": gpu.regs_per_sm,
                    "smem_per_sm": gpu.smem_per_sm},
            "calibration": cal.get("source", "defaults"), "calibrated_elsewhere": elsewhere, "fallback": fallback,
            "launch_us": cal["launch_us"],
            "candidates": [{"rank": n, "step": e.step, "description": describe(e.candidate), "time_us": e.time_us,
                            "params": asdict(e.config), "terms": dict(e.terms)}
                           for n, e in enumerate(ests[:k], 1)],
            "valid_candidates": len(ests)}


def explain(wl, precision: str, k: int = 5, gpu: GpuSpec | None = None, cal: dict | None = None) -> str:
    """:func:`explanation` as text: the choice, the model, and a table of the candidates' figures."""
    return explain_text(explanation(wl, precision, k, gpu, cal))


def explain_text(x: dict) -> str:
    """An :func:`explanation` (or one of the same form: schedules.dispatch_fp8's) as text."""
    g, best, precision = x["gpu"], x["candidates"][0], x["precision"]
    lines = [f"{x['workload']} ({precision}) on {g['name']} ({g['arch']}): {g['sms']} SMs, {g['regs_per_sm']} registers "
             f"and {g['smem_per_sm'] // 1024} KiB shared memory per SM",
             f"chosen: {best['description']}, estimated {best['time_us']:.1f} µs",
             f"  model: time = launch + max(compute or a short-K walk, DRAM, L2) [+ split-K sum, stream-K fix-up, padded copies]; calibration: "
             f"{x['calibration']}"]
    if x.get("calibration_note"):
        lines.append(f"  {x['calibration_note']}")
    elif x["calibrated_elsewhere"]:
        lines.append(f"  calibrated on another GPU: {x['calibrated_elsewhere']}; its per-SM rates, efficiencies and "
                     f"latencies are that GPU's, the SM count, registers and shared memory this one's: times are "
                     f"estimates for ranking")
    if x["fallback"]:
        lines.append(f"  {x['fallback']}")
    lines += ["", f"{'rank':>4}  {'est. µs':>9}  {'launch':>6}  {'compute':>8}  {'DRAM':>7}  {'L2':>7}  {'extra':>6}  "
                  f"{'blocks':>7}  {'per SM':>6}  {'waves':>5}  {'eff.':>5}  candidate"]
    for c in x["candidates"]:
        t = c["terms"]
        lines.append(f"{c['rank']:>4}  {c['time_us']:>9.1f}  {x['launch_us']:>6.1f}  "
                     f"{max(t.get('compute_us', 0), t.get('latency_us', 0)):>8.1f}  {t.get('dram_us', t.get('memory_us', 0)):>7.1f}  "
                     f"{t.get('l2_us', 0):>7.1f}  {t.get('reduce_us', 0):>6.1f}  {t.get('blocks', 0):>7}  "
                     f"{t.get('per_sm', 0):>6}  {t.get('waves', 0):>5}  {t['efficiency']:>5.2f}  {c['description']}")
    lines.append(f"({x['valid_candidates']} valid candidates in all)")
    return "\n".join(lines)


def wave_efficiency(blocks: int, slots: int) -> float:
    """Fraction of the GPU's block slots busy over the waves ``blocks`` need."""
    return blocks / (slots * ceil_div(blocks, slots)) if blocks else 0.0


def log_error(pred_us: float, measured_us: float) -> float:
    return abs(math.log(pred_us / measured_us))
