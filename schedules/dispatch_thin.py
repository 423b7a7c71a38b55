"""The dispatcher's candidates and cost for thin_tc_gemm (:mod:`schedules.gemm_thin`): thin 16-bit
products (M ≤ 64 or N ≤ 64) in the layouts and row pitches decode_gemm does not take (any layout
but nt, or K not a multiple of 8).

Its time is decode_gemm's model (:func:`schedules.dispatch._decode_us`: every byte once at a share of
the bandwidth, scaled by the share of the SMs its grid reaches, X from L2 once per block of rows,
split-K's sum) with two terms for what this step changes:

* **narrower copies**: the weight's bandwidth share is multiplied by ``thin_copy_factor`` for the
  width its pitch allows (:data:`THIN_COPY_FACTOR`: 16 and 8 bytes by cp.async stream as decode's
  pieces do; 4-byte cp.async issues four copies per 16 bytes, an odd pitch's realigned copies
  included; 2 bytes (``odd_copy=2``) is two plain loads per shared word, which a warp waits for),
  and by ``thin_trans_factor`` where the weight is stored K × rows (its block step reads K rows of
  a few hundred bytes each, not rows of K, and its fragments go through ``ldmatrix.trans``), one
  factor per token group (:func:`trans_factor`: the plan's warps and rows per warp change with it);
  X's L2 term likewise for X's width (X stored K × tokens, or an odd K: 2-byte loads);
* **latency**: a block walks its K slice one block step after the other, each a round trip to
  memory that ``stages - 1`` steps in flight hide (cp.async), or none where a copy is a plain load;
  a block takes at least ``fill_us`` + (steps + in flight − 1) / in flight × ``k_step_us`` (the SIMT
  tiles' latency floor, :func:`schedules.dispatch._waves_compute`). A step whose loads are waited for
  (:func:`waits_for_loads`) costs at least that, and a time per 8 tokens it serves, fitted on the
  sweep's thin products (``thin_wait_step_us``, :func:`wait_step_us`): one for a weight copied as
  stored, one for a weight realigned on the way (an odd pitch). The products this step serves are a
  few µs, where this term and the launches decide.

Candidates: the plan's configuration, and the same without split-K where the plan splits (its sum is
a second launch, which a product of a few µs feels). The constants are defaults until a calibration
sweep fits them (``thin_copy_factor``, ``thin_trans_factor`` and ``thin_wait_step_us`` in the
calibration override the table, :data:`THIN_TRANS_FACTOR` and ``k_step_us``).
"""

from __future__ import annotations

from .common import current_gpu
from .gemm_thin import ThinConfig, access_of, thin_form
from .gemv import vector_form
from .workloads import itemsize

# the weight's (and X's) bandwidth share per copy width in bytes, relative to 16-byte cp.async:
# uncalibrated. 8 bytes: as 16 (the cp wgmma kernels' calibrated copy_factor is 1.0 for both); 4
# bytes: that kernel family's 0.8; 2 bytes: two plain loads and a shared store per word, which the
# warp waits for (its ring no longer keeps copies in flight: the latency term counts that), 0.5
THIN_COPY_FACTOR = {16: 1.0, 8: 1.0, 4: 0.8, 2: 0.5}
# the same for a weight stored K × rows (read transposed), uncalibrated: as a K-contiguous one
THIN_TRANS_FACTOR = 1.0
# warps per SM at which a block step whose loads are waited for costs one k_step_us (fewer: more, see thin_us)
THIN_SATURATING_WARPS = 8
# decode_gemm's bandwidth share by token groups of 8 (dispatch.DECODE_EFFICIENCY, fitted on nt decode
# shapes), for the same kernel
THIN_EFFICIENCY = {1: 1.2, 2: 1.2, 4: 1.2, 8: 0.5}


def token_group(token_tiles: int) -> int:
    """The token group (1, 2, 4 or 8 tiles of 8 tokens) whose constants a plan of ``token_tiles`` takes."""
    return min(k for k in THIN_EFFICIENCY if k >= token_tiles)


def trans_factor(cal: dict, token_tiles: int) -> float:
    """The bandwidth share of a weight stored K × rows, relative to a K-contiguous one, for this token
    group: the calibration's ``thin_trans_factor`` (one value, or one per group: a group no sweep
    measured takes the median of the others), else :data:`THIN_TRANS_FACTOR`."""
    f = cal.get("thin_trans_factor", THIN_TRANS_FACTOR)
    if not isinstance(f, dict):
        return f
    return f.get(str(token_group(token_tiles))) or sorted(f.values())[len(f) // 2]


def waits_for_loads(access) -> bool:
    """Whether a block step waits for its own loads: the weight copied 2 bytes at a time, or X read
    transposed or at an odd K (plain loads, not cp.async copies a ring keeps in flight)."""
    return min(access.w_bytes, 2 if access.x_trans else access.x_bytes) < 4


def wait_step_us(cal: dict, access, token_tiles: int) -> float:
    """A waited-for block step's time at a saturated SM: at least ``k_step_us`` (the K loop's floor),
    and the calibration's ``thin_wait_step_us`` per 8 tokens times the token tiles, for a weight copied
    as stored (``even_per_8_tokens``: X read transposed is loaded a word of two tokens at a time, so a
    step's loads per thread grow with the tokens) or realigned on the way (``odd_per_8_tokens``: on an
    H200 and an H100, 2.6 µs a step at 23 tokens, 6-7 at 50, under 1 at 5)."""
    per_8 = cal.get("thin_wait_step_us", {}).get("odd_per_8_tokens" if access.w_odd else "even_per_8_tokens", 0.0)
    return max(cal.get("k_step_us", 0.0), per_8 * token_tiles)


def thin_configs(wl, valid, decode_taken: bool) -> list[tuple[ThinConfig, str]]:
    """(configuration, calibration key) of thin_tc_gemm for a thin 16-bit product that decode_gemm
    does not take (``decode_taken``): its plan's configuration on this GPU, and without split-K
    where the plan splits. ``valid(cfg)``: the dispatcher's check. A matrix-vector product without
    an epilogue stays with the GEMV family (as for decode_gemm)."""
    if decode_taken or wl.dtype not in ThinConfig.dtypes or thin_form(wl) is None:
        return []
    if vector_form(wl) is not None and not getattr(wl, "has_epilogue", False):
        return []
    p = ThinConfig().plan(wl, current_gpu())
    out = []
    for splits in sorted({p.splits, 1}, reverse=True):
        cfg = ThinConfig(warp_rows=16 * p.m_tiles, row_warps=p.row_warps, k_warps=p.k_warps, unroll=p.unroll,
                         stages=p.stages, split_k=splits)
        if valid(cfg):
            out.append((cfg, f"thin t{8 * p.token_tiles}"))
    return out


def thin_us(wl, cand, gpu, cal, out_bytes: int, epilogue_bytes: int, reduce_us) -> tuple[float, dict]:
    """(µs, terms) of a thin_tc_gemm candidate (the module's model). ``out_bytes``: per output;
    ``epilogue_bytes``: the bias and R; ``reduce_us(splits)``: split-K's sum kernel (none where a cluster sums the slices)."""
    p = cand.config.plan(wl, gpu)
    access = access_of(wl, cand.config.odd_copy)
    copy = cal.get("thin_copy_factor", {})
    w_factor = copy.get(str(access.w_bytes), THIN_COPY_FACTOR[access.w_bytes])
    if access.w_trans:
        w_factor *= trans_factor(cal, p.token_tiles)
    x_width = 2 if access.x_trans else access.x_bytes
    x_factor = copy.get(str(x_width), THIN_COPY_FACTOR[x_width])
    eff = cal["efficiency"].get(cand.key) or THIN_EFFICIENCY[token_group(p.token_tiles)]
    item, bw = itemsize(wl.dtype), gpu.memory_gbps * 1e3
    weight, x = item * p.rows * wl.K, item * p.tokens * wl.K
    out = out_bytes * wl.M * wl.N + epilogue_bytes
    blocks = p.row_blocks * p.splits
    fill = min(1.0, blocks / gpu.sms)
    dram = (weight / w_factor + x + out) / (bw * eff * fill)
    l2 = x * p.row_blocks / (bw * cal["l2_factor"] * x_factor)
    # plain loads (a 2-byte weight, X transposed or with an odd K) are waited for every block step
    in_flight = 1 if waits_for_loads(access) else max(1, p.stages - 1)
    per_sm = max(1, min(gpu.smem_per_sm // (p.ring_bytes + 4 * p.shared_floats + 1024), 64 // p.warps))
    waves = -(-blocks // (gpu.sms * per_sm))
    # a step waited for is slower where an SM has few warps to switch to (measured on an H200 with X
    # transposed: 2 warps per SM took 1.4-3.8 µs per step, 4610x34x12629's 99 steps 3.8), by the square
    # root of the shortfall (a milder term moved four of eight thin shapes measured faster on it to SIMT)
    warps_per_sm = p.warps * min(per_sm, -(-blocks // gpu.sms))
    step_us = (wait_step_us(cal, access, p.token_tiles) * max(1.0, THIN_SATURATING_WARPS / warps_per_sm) ** 0.5 if in_flight == 1
               else cal.get("k_step_us", 0.0))
    latency = waves * (cal["fill_us"] + (p.steps_per_slice + in_flight - 1) / in_flight * step_us)
    reduce = 0.0 if p.cluster else reduce_us(p.splits)  # a cluster sums its slices itself
    terms = {"family": "thin", "efficiency": eff * w_factor, "fill": fill, "dram_us": dram, "l2_us": l2,
             "compute_us": latency, "step_us": step_us, "reduce_us": reduce, "blocks": blocks, "splits": p.splits, "waves": waves,
             "per_sm": per_sm,
             "copy_bytes": (access.w_bytes, x_width), "weight_transposed": access.w_trans}
    return cal["launch_us"] + max(dram, l2, latency) + reduce, terms


# --- thin fp32 products on SIMT tiles fitted to the narrow side ---------------------------------------
# The SIMT tiles of the table (dispatch.SIMT_TILES, SKINNY_TILES) are 8, 16, 64, 128 or 256 wide: an output 17-48
# columns wide (or rows high) computes on a 64-wide tile (up to 73% of its FMAs on padding) or on a 16-wide one
# (4 x 4 thread tiles, a quarter of an 8 x 8's FMAs per shared load). These tiles are as wide as the narrow side
# rounded up to 24, 32 or 48, with 8 x 6, 8 x 8 or 8 x 4 thread tiles: (block_m, block_n, thread_m, thread_n,
# warps_m, warps_n) of the few-columns form; the few-rows form is their mirror. Not 64 x 48 (two warps a block): a
# few points faster than 128 x 48 on an H100, but its mirror took 36 x 9245 x 15731 in 765 µs at split-K 8 (and
# 686 at 9) against 380-388 at 7, on an H100 and an H200 alike (reports/results/NVIDIA_H100_80GB_HBM3/thin_simt_tiles)
THIN_SIMT_WIDTHS = (24, 32, 48)
THIN_SIMT_TILES = {24: [(256, 24, 8, 6, 4, 1), (128, 24, 8, 6, 2, 1)],
                   32: [(256, 32, 8, 8, 4, 1), (128, 32, 8, 4, 4, 1)],
                   48: [(128, 48, 8, 6, 4, 1)]}
# Their rate, as the calibration's SIMT efficiencies (a share of fp32_sm_tflops), where no calibration sweep has
# timed them: fitted on 19 thin fp32 and tf32 products of the random draws (17-48 wide, K 450-15731, three split
# factors per tile), each point the efficiency at which the model's time meets the measured one, the median per
# tile (H100, reports/results/NVIDIA_H100_80GB_HBM3/thin_simt_tiles; points the model cannot meet at any rate,
# its fixed terms above the measured time, left out). The few-rows tiles 32 high, which no drawn product timed,
# take their mirrors' rates.
THIN_SIMT_EFFICIENCY = {"simt 256x24 t8x6": 0.54, "simt 128x24 t8x6": 0.55, "simt 256x32 t8x8": 0.52,
                        "simt 128x32 t8x4": 0.75, "simt 128x48 t8x6": 0.76,
                        "simt 24x256 t6x8": 0.97, "simt 24x128 t6x8": 0.80, "simt 32x256 t8x8": 0.52,
                        "simt 32x128 t4x8": 0.75, "simt 48x128 t6x8": 0.78}


def thin_simt_tiles(wl) -> list[tuple[int, int, int, int, int, int]]:
    """The fitted SIMT tiles of a thin fp32 product (:data:`THIN_SIMT_TILES`): an output 17-48 columns
    wide (N) or rows high (M) takes the tiles of the narrowest width that covers it, mirrored for the
    few-rows form; none for other shapes or 16-bit inputs (thin_tc_gemm serves those)."""
    if itemsize(wl.dtype) != 4:
        return []
    out = []
    for narrow, mirror in ((wl.N, False), (wl.M, True)):
        if 16 < narrow <= THIN_SIMT_WIDTHS[-1]:
            width = min(w for w in THIN_SIMT_WIDTHS if w >= narrow)
            out += [(bn, bm, tn, tm, wn, wm) if mirror else (bm, bn, tm, tn, wm, wn)
                    for bm, bn, tm, tn, wm, wn in THIN_SIMT_TILES[width]]
    return out


# --- small 16-bit products on the SIMT split-K tiles ------------------------------------------------------------------
# An output of at most SMALL_OUTPUT elements (eight 64 x 64 tiles) over a K of SMALL_LONG_K or more: the tensor-core
# kernels leave most SMs idle (the cp.async wgmma tiles do not split K; the TMA tiles split it, but rows that are not
# whole 16 bytes cost them two copy kernels first), where the skinny SIMT tiles (16-bit inputs widened) split K over
# many slices. On the 28 small fp16 products of odd row lengths timed with both (H200,
# reports/results/NVIDIA_H200/small_fp16_products), the model's SIMT pick ran 1.05-1.62x faster than its
# tensor-core pick on the 7 such outputs; on the 11 larger outputs or shorter K where the model would have taken it,
# 0.71-1.06x (7 slower), so there the SIMT tiles are not offered (a narrow side of 64 or less, or K of 64 or less,
# offers them anyway).
SMALL_OUTPUT = 8 * 64 * 64
SMALL_LONG_K = 256


def small_product(wl) -> bool:
    """Whether a 16-bit product's output is small and its K long enough for the SIMT tiles' split-K
    (:data:`SMALL_OUTPUT`, :data:`SMALL_LONG_K`)."""
    return wl.M * wl.N <= SMALL_OUTPUT and wl.K >= SMALL_LONG_K
