"""The dispatcher's model for 8-bit float inputs (FP8): which of the FP8 kernels, fp8_tma_gemm (scales
per tensor or per row, applied in the epilogue) or fp8_block_scaled_gemm (block scales, promoted every
K tile), and which of their configurations (block tile, ring depth, 2×1 clusters) runs a workload
fastest, by the model of :mod:`schedules.dispatch` extended to one-byte inputs.

Candidates: the persistent, warp-specialized kernels (one block per SM) at the block tiles
:data:`FP8_TILES` (128 × 256 and 256 × 128: one 128-wide accumulator per consumer thread; 128 × 128:
half that), each with the deepest ring that fits shared memory (:data:`STAGES`, 128 K of one byte per
row: the 16-bit kernel's 128-byte rows), with and without 2×1 clusters (B multicast to the two
blocks of a cluster); for block scales, the tiles whose two accumulator sets (the running sum and a
K tile's) fit the consumers' registers: 128 × 128. Each also in the **ping-pong** structure
(``pingpong=True``, schedules/pingpong.py) at the tiles :data:`PINGPONG_TILES`: a consumer warpgroup
holds a whole tile's accumulators alone, so the tile is what one consumer's registers hold (128 × 128
and 64 × 256: 128 accumulators per thread of its 232; block scales, two sets: 64 × 128). Where K is
not a multiple of 16 (no tensor map can describe rows of K bytes), every candidate copies A and B
first into zero-padded rows (``pad_k``), and the copy is counted. The cooperative candidates store D
by the TMA unit (``tma_store``) with block scales, and with per-tensor scales where there is no
epilogue and D is 16-bit; elsewhere through the staged store (measured: the notes in :func:`candidates`).

Each is estimated as the 16-bit TMA kernels are (:func:`schedules.dispatch.estimate`)::

    time = launch + max(compute, DRAM, L2) [+ the padded copies]

* **compute**: the persistent grid walks ⌈work units / blocks⌉ output tiles per block (a work unit is
  a cluster's tiles: 2×1 clusters round the tile rows up to pairs), each ``2·bm·bn·⌈K/128⌉·128``
  flops at the FP8 tensor-core rate, **twice the 16-bit one** (``2 × tc16_sm_tflops``, the
  calibration's measured 16-bit peak per SM) times the configuration's efficiency, plus its
  epilogue (the tile's outputs stored at ``sm_store_gbps``), plus one pipeline fill. Block scales
  multiply the efficiency by ``block_promotion``: a ``wait_group 0`` and an FMA per accumulator
  every K tile, which the two consumer warpgroups only partly overlap.
  **Ping-pong**: the two consumers alternate whole tiles, one's epilogue (``pingpong_epilogue`` times
  the cooperative store estimate: one warpgroup stores the tile, not two) running behind the other's
  mainloop, so a block's n tiles take ``n · max(mainloop, (mainloop + epilogue) / 2)`` plus the last
  tile's epilogue, which nothing hides (terms ``epilogue_us``, ``epilogue_hidden_us``); its own
  efficiency per tile and cluster (defaults solved from an H200's times: the notes below
  :data:`FP8_DEFAULTS`). Block scales:
  the efficiency times ``pingpong_block_promotion`` (the promotion every K tile stalls the one
  consumer whose turn it is; the other only waits: ping-pong hides the epilogue, not the promotion).
* **DRAM**: one byte per input element, the output in its type, the epilogue's inputs and the scales
  once. **L2**: A's panel once per column of tiles, B's once per row of clusters (multicast).

The FP8 constants (the per-configuration efficiencies, ``block_promotion``) are fitted by ``schedlab
calibrate`` to a calibration sweep of FP8 candidates (``schedlab sweep --set calibration
--precisions fp8``) and stored in the calibration's ``fp8`` section; the rest (launch, fill, store
rate, the 16-bit peak, the L2 factor) are the calibration's for every precision. Until a sweep has
been fitted, :data:`FP8_DEFAULTS` stands in (see there), and the choice says so
(:func:`calibrated_elsewhere`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

from . import dispatch
from .calibration import CALIBRATION
from .common import GpuSpec, ceil_div, current_gpu, limits_of
from .dispatch import Candidate, Estimate
from .dispatch_store import epilogue_bytes, output_bytes, store_bytes, store_factor
from .errors import ScheduleParamError
from .gemm_fp8 import Fp8BlockConfig, Fp8TmaConfig
from .registry import get
from .tma_store import tma_store_refusal
from .workloads import itemsize

PRECISION = "fp8"
# (block_m, block_n, stages): the 16-bit TMA kernels' ring depths per tile, each the deepest the
# tile's stages fit in 227 KiB with one-byte elements at K tiles of 128 (128 × 256: 4 × 48 KiB;
# 128 × 128: 6 × 32 KiB; 256 × 128: 4 × 48 KiB)
FP8_TILES = ((128, 256, 4), (128, 128, 6), (256, 128, 4))
# block scales: two accumulator sets per consumer thread; the unpipelined kernel with its K loop in
# unrolled chunks (Fp8BlockConfig's defaults): on an H200 1.066x the pipelined one it replaced over 17
# products, 1.01-1.15x (reports/results/NVIDIA_H200/fp8_block_unrolled/)
BLOCK_TILES = ((128, 128, 4),)
# ping-pong: (block_m, block_n, stages) of one consumer's whole tile, 128 accumulators per thread at
# most (128 × 128, 64 × 256, 64 × 128), with block scales two 64-register sets (64 × 128). Not the
# deepest ring that fits: on an H200 (fp8_pingpong_stages, 8 products, per-tensor scales) 128 × 128 at 4
# stages took 1.036x less time than at 6 (1.015-1.064x), 64 × 256 at 4 1.062x less than at 5 (0.95-1.12x);
# 64 × 128 at 8 1.2x less than at 4, and the cooperative 128 × 128 at 6 1.07x less than at 4
PINGPONG_TILES = ((128, 128, 4), (64, 256, 4), (64, 128, 8))
BLOCK_PINGPONG_TILES = ((64, 128, 8),)
CLUSTERS = (1, 2)
PAD_TO = 16  # a tensor map's row pitch: a multiple of 16 bytes, i.e. of 16 one-byte elements

#: The FP8 constants where the calibration has no ``fp8`` section (no FP8 sweep fitted yet). Solved
#: from the lab's FP8 benchmark on the calibration's GPU (reports/results/NVIDIA_H200/bench_fp8: H200,
#: e4m3 inputs, a bf16 output), with this model at the calibration's 16-bit peak (5.74 TFLOPS per SM,
#: doubled), fill and store rate: fp8_tma_gemm 128 × 256 reached 1321 TFLOPS at 8192³ (1365 with 2×1
#: clusters), fp8_block_scaled_gemm 128 × 128 811. The efficiencies are those that reproduce 8192³;
#: they then predict 4096³ and 16384 × 1024 × 4096 within 2% (tensor, row and block scales), except
#: 2×1 clusters at 4096³ (6% too fast: measured slower than without) and a short K (4096 × 16384 ×
#: 1024: 28% too fast, 11% with block scales), which a calibration sweep's fill and store terms are
#: for. The other tiles, unmeasured, scale as the calibrated 16-bit TMA kernel's efficiencies do
#: between the same tiles (tma 128x128 and 256x128 against 128x256: 0.975, 0.961). The block-scaled
#: kernel has no efficiency of its own: it is the tensor-scaled kernel's of the same tile and
#: cluster (:func:`efficiency_key`) times ``block_promotion``, what its promotion every K tile
#: leaves of it (0.618 at 8192³).
FP8_DEFAULTS = {
    "efficiency": {"fp8 128x256": 0.943, "fp8 128x256 c2": 0.976, "fp8 128x128": 0.919, "fp8 128x128 c2": 0.951,
                   "fp8 256x128": 0.906, "fp8 256x128 c2": 0.938,
                   # ping-pong (how they were set: below)
                   "fp8 128x128 pp": 1.002, "fp8 128x128 c2 pp": 0.82, "fp8 64x256 pp": 0.956,
                   "fp8 64x256 c2 pp": 0.902, "fp8 64x128 pp": 0.852, "fp8 64x128 c2 pp": 0.774},
    "default_efficiency": 0.85,  # a tile neither measured nor named above
    "block_promotion": 0.618,
    # ping-pong: one warpgroup stores a tile (half the threads of the cooperative store; not measured
    # apart), and the promotion every K tile is overlapped by no other consumer's wgmmas (measured)
    "pingpong_epilogue": 2.0,
    "pingpong_block_promotion": 0.512,
    "source": "defaults (no FP8 calibration sweep fitted): solved from the FP8 benchmark on an H200 "
              "(reports/results/NVIDIA_H200/bench_fp8)",
}

# How the ping-pong defaults above were set (the calibration's ``fp8`` section, fitted before the
# structure existed, has none): on an H200 (e4m3, bf16 output, tensor scales), 128 × 128 at 6 stages
# took 110.8 µs at 4096³ and 854 µs at 8192³ (the cooperative 128 × 128 at 5 stages 118.4 and 915,
# 128 × 256 112.2 and 852; torch._scaled_mm 94.9 and 752); 64 × 256 at 5 stages 120.9 and 941; 128 × 128
# with 2×1 clusters 121.6 at 4096³ (cooperative 119.9). Each ping-pong efficiency is the calibrated
# efficiency of the cooperative tile of the same width (128 × N: the same m64nN wgmmas) times the ratio
# of the two solved at those points (1.02 for 128 × 128, 0.92 with clusters, 0.87 for 64 × 256 against
# 128 × 256; the unmeasured 64-row tiles take 64 × 256's). The block-scaled 64 × 128 took 220.8 and
# 1677 µs (cooperative 128 × 128: 174.5 and 1356): ``pingpong_block_promotion`` 0.512 at those points.
UNCALIBRATED = ("no FP8 calibration sweep fitted: the FP8 efficiencies and block_promotion are defaults "
                "(schedules.dispatch_fp8.FP8_DEFAULTS); estimates for ranking")


def constants(cal: dict | None = None) -> dict:
    """The FP8 constants: :data:`FP8_DEFAULTS` with the calibration's ``fp8`` section over them."""
    fitted = (cal or CALIBRATION).get("fp8") or {}
    out = {**FP8_DEFAULTS, **fitted}
    out["efficiency"] = {**FP8_DEFAULTS["efficiency"], **fitted.get("efficiency", {})}
    return out


def calibrated_elsewhere(gpu: GpuSpec | None = None, cal: dict | None = None) -> str | None:
    """What the FP8 choice's constants describe where it is not this GPU, one line: that no FP8
    calibration sweep was fitted (the constants are :data:`FP8_DEFAULTS`), or the GPU the FP8 sweep
    ran on, or (the FP8 sweep's GPU being this one) the GPU of the rest of the calibration; None
    where every constant was measured on this GPU."""
    cal = cal or CALIBRATION
    fitted = cal.get("fp8") or {}
    if not fitted.get("calibrated_on"):
        on = dispatch.calibrated_elsewhere(gpu, cal)
        return "no FP8 calibration: FP8 defaults" + (f", the rest calibrated on {on}" if on else "")
    return dispatch.calibrated_elsewhere(gpu, {"calibrated_on": fitted["calibrated_on"]}) or \
        dispatch.calibrated_elsewhere(gpu, cal)


def key_of(family: str, cfg) -> str:
    """A configuration's name in the calibration sweep: its family, block tile, cluster and, where
    the consumers take whole tiles in turn, ``pp``."""
    return (f"{family} {cfg.block_m}x{cfg.block_n}" + (f" c{cfg.cluster_m}" if cfg.cluster_m > 1 else "")
            + (" pp" if getattr(cfg, "pingpong", False) else ""))


def efficiency_key(cand: Candidate) -> str:
    """The efficiency a candidate runs at: the tensor-scaled kernel's of its tile and cluster (the
    block-scaled kernel runs the same ring and wgmmas; its promotion is ``block_promotion``)."""
    return "fp8" + cand.key.removeprefix(cand.family)


def efficiency_of(cand: Candidate, c8: dict) -> float:
    """The candidate's efficiency (:func:`efficiency_key`), or ``default_efficiency``."""
    return c8["efficiency"].get(efficiency_key(cand)) or c8["default_efficiency"]


def candidates(wl, gpu: GpuSpec | None = None) -> list[Candidate]:
    """The FP8 configurations valid for ``wl`` on ``gpu`` (default: the current GPU): fp8_tma_gemm's
    for scales per tensor or row, fp8_block_scaled_gemm's for block scales; each with ``pad_k``
    where K is not a multiple of 16."""
    if wl.kind != "gemm" or not getattr(wl, "fp8", False):
        raise ScheduleParamError(f"fp8 takes 8-bit float inputs (float8_e4m3fn, float8_e5m2), not {wl}")
    limits = limits_of(gpu or current_gpu())
    block = wl.scaling == "block"
    step, cls, family, tiles, pp_tiles = (
        ("fp8_block_scaled_gemm", Fp8BlockConfig, "fp8_block", BLOCK_TILES, BLOCK_PINGPONG_TILES) if block
        else ("fp8_tma_gemm", Fp8TmaConfig, "fp8", FP8_TILES, PINGPONG_TILES))
    pad = wl.K % PAD_TO != 0
    # D by the TMA unit from per-warp boxes (cooperative candidates, where D's pitch takes a tensor map): with
    # block scales 1.048x over 16 products on an H200, 0.99-1.14x (fp8_block_epilogue); per tensor without an
    # epilogue into 16 bits, the product of the scales applied in the boxes, 1.017x over 12 products, 1.00-1.05x
    # (fp8_tma_store_scales). Not taken with row scales (the fragments load 64 columns of B's scales a tile:
    # 0.996x without an epilogue), an epilogue's inputs (a bias 0.98x, bias and R 0.84x: R read in the
    # fragments' layout) or an fp32 output (0.99-1.01x)
    tma_stored = block or (wl.scaling == "tensor" and wl.epilogue is None and itemsize(wl.out_dtype) == 2)
    out = []
    shapes = [(t, c, False) for t in tiles for c in CLUSTERS] + [(t, c, True) for t in pp_tiles for c in CLUSTERS]
    for (bm, bn, stages), cl, pp in shapes:
        cfg = cls(block_m=bm, block_n=bn, stages=stages, cluster_m=cl, pad_k=pad, pingpong=pp)
        if not block:  # the fewest blocks that take as many rounds of tiles as every SM would (balanced_blocks)
            cfg = replace(cfg, sms=balanced_blocks(wl, cfg, gpu or current_gpu()))
        if block and pp and cl == 1:  # the scales by TMA beside each K tile (where ⌈K/128⌉ % 4 == 0): ping-pong
            # 64 × 128 191.3 -> 177.3 µs at 4096³, 1460 -> 1376 at 8192³ (H100, fp8_block_scales_ring); the
            # cooperative kernels lose by it, and with clusters the ping-pong one spills
            cfg = replace(cfg, scales_in_ring=True)
        if block and not pp:  # a chunk's scales loaded at its start, 16 bytes of a row a load (where ⌈K/128⌉ % 4
            # == 0): 1.031x over 12 products on an H200, 0.99-1.08x (fp8_chunk_scales); 4096³ 124.2 -> 119.0 µs
            cfg = replace(cfg, chunk_scales=True)
        if tma_stored and not pp:  # the TMA store (the note above the loop)
            stored = replace(cfg, tma_store=True, staged_store=False)
            if tma_store_refusal(stored, wl) is None:
                cfg = stored
        out.append(Candidate(step, cfg, family, key_of(family, cfg)))
    valid = [c for c in out if dispatch._valid(c.step, wl, c.config, limits)]
    if not valid:  # say why the first (the step's own default tile) does not take it
        try:
            get(step).validate(wl, out[0].config, limits)
        except ScheduleParamError as e:
            raise ScheduleParamError(f"no fp8 kernel of the lab takes {wl}: {e}") from None
    return valid


def balanced_blocks(wl, cfg, gpu: GpuSpec) -> int:
    """The persistent grid (``sms``) of a candidate with scales per tensor or row: the fewest blocks,
    whole clusters, whose rounds of work units are as many as with a block on every SM, so that every
    block takes the same number of tiles and none sits out the last round (4096³ at 128 × 256: 512
    tiles, 4 rounds on 132 SMs or on 128). The model's time is the same (it counts rounds); measured
    on an H200 (reports/results/NVIDIA_H200/fp8_balanced_grid/), 1.010x with scales per tensor and
    1.007x per row over 15 products off the benchmark, 0.99-1.06x; block scales: 1.003x, not taken. 0
    where it is the whole GPU or one round."""
    cl = cfg.cluster_m
    rows, cols = unit_grid(wl, cfg)
    units = rows * cols
    clusters = gpu.sms // cl
    if units <= clusters:  # one round: the grid is the units already
        return 0
    blocks = cl * ceil_div(units, ceil_div(units, clusters))
    return 0 if blocks == cl * clusters else blocks


def unit_grid(wl, cfg) -> tuple[int, int]:
    """(cluster rows, tile columns) of the persistent grid's work units: a unit is a cluster's
    ``cluster_m`` vertically adjacent tiles (2×1 clusters round the tile rows up to pairs)."""
    return ceil_div(ceil_div(wl.M, cfg.block_m), cfg.cluster_m), ceil_div(wl.N, cfg.block_n)


def scale_bytes(wl) -> int:
    """Bytes of the two float32 scale tensors (per tensor: 8; per row: M + N floats; per block: one
    per 1×128 of A and per 128×128 of B)."""
    return 4 * sum(max(1, _prod(shape)) for shape in wl.scale_shapes)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def estimate(wl, cand: Candidate, gpu: GpuSpec | None = None, cal: dict | None = None) -> Estimate:
    """The model's time for one FP8 candidate (see the module's docstring), with its terms."""
    gpu, cal = gpu or current_gpu(), cal or CALIBRATION
    c8 = constants(cal)
    cfg = cand.config
    M, N, K = wl.M, wl.N, wl.K
    eff = efficiency_of(cand, c8)
    pp = getattr(cfg, "pingpong", False)
    if cand.family == "fp8_block":
        eff *= c8["pingpong_block_promotion" if pp else "block_promotion"]
    peak = 2 * cal["tc16_sm_tflops"]  # FP8 tensor cores: twice the 16-bit rate
    bm, bn, cl = cfg.block_m, cfg.block_n, cfg.cluster_m
    cluster_rows, tn = unit_grid(wl, cfg)
    units = cluster_rows * tn
    grid = min((cfg.sms or gpu.sms) // cl, units)  # clusters resident at once, one block per SM
    per_block = ceil_div(units, grid)
    flops = 2 * bm * bn * ceil_div(K, cfg.block_k) * cfg.block_k
    share = store_factor(wl, cal)  # of the bandwidth, as C's rows allow
    store = store_bytes(wl) * bm * bn / (cal["sm_store_gbps"] * 1e3 * share)
    mainloop = flops / (peak * 1e6 * eff)
    if pp:  # the epilogue behind the other consumer's mainloop, but the last one
        store *= c8["pingpong_epilogue"]
        comp = cal["fill_us"] + per_block * max(mainloop, (mainloop + store) / 2) + store
    else:
        comp = cal["fill_us"] + per_block * (mainloop + store)
    hidden = per_block * (mainloop + store) - (comp - cal["fill_us"])  # 0 without ping-pong
    bw = gpu.memory_gbps * 1e3  # bytes per µs
    a_item, b_item = itemsize(wl.dtype), itemsize(wl.dtype_b)
    dram = (a_item * M * K + b_item * N * K + output_bytes(wl) * M * N / share
            + epilogue_bytes(wl) + scale_bytes(wl)) / bw
    l2 = (a_item * M * K * tn + b_item * N * K * cluster_rows) / (bw * cal["l2_factor"])  # B multicast per cluster
    pad = dispatch._pad_us(wl, cfg, gpu, cal)
    terms = {"family": cand.family, "efficiency": eff, "blocks": grid * cl, "per_sm": 1, "waves": per_block,
             "compute_us": comp, "dram_us": dram, "l2_us": l2, "reduce_us": pad, "splits": 1, "pad_us": pad,
             "peak_sm_tflops": peak, "pingpong": pp, "epilogue_us": store, "epilogue_hidden_us": hidden,
             # registers per consumer thread: the accumulators it holds (ping-pong: a whole tile's) of its budget
             "acc_regs": cfg.acc_regs * (2 if cand.family == "fp8_block" else 1), "consumer_regs": cfg.consumer_budget}
    return Estimate(cand, cal["launch_us"] + max(comp, dram, l2) + pad, terms)


def rank(wl, gpu: GpuSpec | None = None, cal: dict | None = None) -> list[Estimate]:
    """Every valid FP8 candidate for ``wl`` with its estimated time, fastest first."""
    gpu = gpu or current_gpu()
    return sorted((estimate(wl, c, gpu, cal) for c in candidates(wl, gpu)), key=lambda e: e.time_us)


def choose(wl, gpu: GpuSpec | None = None, cal: dict | None = None):
    """``(step name, configuration)`` of the fastest FP8 candidate by the model."""
    best = rank(wl, gpu, cal)[0]
    return best.step, best.config


def describe(cand: Candidate) -> str:
    """One line: the step, its key, its ring, a grid short of the SMs (balanced_blocks) and, where K
    needs it, the padded copies."""
    cfg = cand.config
    extra = (f", stages {cfg.stages}" + (", ping-pong consumers" if cfg.pingpong else "")
             + (f", {cfg.sms} blocks" if cfg.sms else "")
             + (", TMA store" if cfg.tma_store else "")
             + (", K padded to 16 (copies of A/B)" if cfg.pad_k else ""))
    return f"{cand.step} [{cand.key}{extra}]"


def explanation(wl, k: int = 5, gpu: GpuSpec | None = None, cal: dict | None = None) -> dict:
    """:func:`schedules.dispatch.explanation` for FP8: the choice and the next best ``k - 1`` with
    the model's terms; ``calibration`` names the FP8 constants' source."""
    gpu, cal = gpu or current_gpu(), cal or CALIBRATION
    ests = rank(wl, gpu, cal)
    return {"workload": str(wl), "precision": PRECISION,
            "gpu": {"name": gpu.name, "arch": gpu.arch, "sms": gpu.sms, "regs_per_sm": gpu.regs_per_sm,
                    "smem_per_sm": gpu.smem_per_sm},
            "calibration": f"FP8: {constants(cal)['source']}; the rest: {cal.get('source', 'defaults')}",
            "calibrated_elsewhere": calibrated_elsewhere(gpu, cal), "fallback": None, "launch_us": cal["launch_us"],
            "calibration_note": None if (cal.get("fp8") or {}).get("calibrated_on") else UNCALIBRATED,
            "candidates": [{"rank": n, "step": e.step, "description": describe(e.candidate), "time_us": e.time_us,
                            "params": asdict(e.config), "terms": dict(e.terms)} for n, e in enumerate(ests[:k], 1)],
            "valid_candidates": len(ests)}


def explain(wl, k: int = 5, gpu: GpuSpec | None = None, cal: dict | None = None) -> str:
    """:func:`explanation` as text, laid out as the other precisions' (:func:`schedules.dispatch.explain_text`)."""
    return dispatch.explain_text(explanation(wl, k, gpu, cal))

