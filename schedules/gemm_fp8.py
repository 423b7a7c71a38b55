"""gemm 29 and 30: FP8 (8-bit float inputs, e4m3 and e5m2) on the persistent, warp-specialized
TMA structure, with per-tensor or row-wise scales applied where the accumulators are stored
(fp8_tma_gemm), or block scales applied inside the sum, every K tile promoted into fp32 registers
(fp8_block_scaled_gemm, :func:`make_promotion`).

    D (M×N, out type) = epilogue(scale_a·scale_b · (A (M×K, fp8) · Bᵀ (B: N×K, fp8)))

The workload (:class:`schedules.workloads.Gemm`) names the input types (``:float8_e4m3fn``, a
mixed pair ``:float8_e4m3fn:b=float8_e5m2``), the layout (``nt``: FP8 wgmma reads both operands
K-major and has no transpose immediates, so A stored M×K and B stored N×K are the layout it
takes), the scales (``:scale=tensor``, ``:scale=row`` or ``:scale=block``), the output type and the
epilogue. The kernel's arguments are A, B, scale_a, scale_b, [bias], [R], D (torch._scaled_mm's
order), the scales float32 tensors of shape (1,) and (1,) per tensor, (M, 1) and (1, N) per row,
(M, ⌈K/128⌉) and (⌈N/128⌉, ⌈K/128⌉) per block.

What changes from the 16-bit kernel of gemm 21-23 (gemm_tma_ws.py), whose ring it runs
(tma_common.py: barrier set-up, producer, work units, the end of a unit) and whose TMA loader it
shares (tma_fp16.make_loader):

* **the same bytes, twice the K.** A K tile is still one 128-byte swizzle row per row of A and of
  B, but 128 elements long instead of 64: a 128 × 256 tile with 4 stages holds the same 192 KiB
  and feeds twice the multiply-adds per byte loaded and per barrier round trip. The tensor maps
  are of type UINT8 (TMA moves bytes; zero fill is +0.0 in both formats).
* **wgmma m64nNk32.f32.e4m3.e4m3** (``.e5m2`` for an e5m2 operand): 32 elements of K, i.e. the
  same 32 bytes of each 128-byte row that an f16 k16 step reads, so the descriptors (K-major, LBO
  unused, SBO = 8 rows = 1024 bytes, 128-byte swizzle) and the 32-byte advance along K per
  instruction are the 16-bit kernel's, without the transpose immediates.
* **the epilogue.** Each consumer thread turns its fp32 accumulators into outputs once:
  ``acc · (scale_a·scale_b)`` (per tensor: both scales read once per thread; per row: the scale
  of its rows and of its column pair read where they are stored), then alpha, the bias, the
  activation and the residual, rounded to the output type, adjacent pairs stored together.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div
from .errors import ScheduleParamError
from .fp8_block_scales import (SCALE_TMA_ARRIVALS, encode_scale_maps, make_chunk_scale_loader, make_pipelined_unit,
                               make_scale_loader, make_scale_reader, make_scale_set_sum, make_scale_sum,
                               make_scale_tma_load, scale_group, scale_ring_bytes, scales_by_chunk, scales_by_tma)
from .fp8_pingpong import make_pingpong_promotion
from .pingpong import check_pingpong, make_mainloop, turns, wait_turn
from .registry import register
from .tma_common import (DESC_SWIZZLE_128B, ROW_BYTES, WARPGROUP, WorkUnits, encode_map, fence_acc, grouped_tile,
                         pad_copy_kernel, release_slot, ring_barriers, ring_producer, ring_unit_done, wait_phase,
                         warp_group_index)
from .staged_store import make_staged_rows, staged_bytes
from .tma_store import drain_stores, encode_store_map, make_tma_store, tma_store_bytes
from .tma_fp16 import Geometry, TmaConfig, make_loader
from .workloads import FP8_DTYPES, SCALE_BLOCK, Epilogue, Gemm, activation_expr

FP8_PTX = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
K_STEP = 32  # elements of K per FP8 wgmma (m64nNk32): 32 bytes of each 128-byte row


@dataclass(frozen=True)
class Fp8TmaConfig(TmaConfig):
    """TmaConfig's parameters with FP8's K tile: ``block_k`` = 128 elements (one 128-byte swizzle
    row, as 64 elements are for 16-bit inputs). The kernel is the warp-specialized one (producer
    warpgroup + 2 or 3 consumers, ``setmaxnreg``), persistent by default, with optional 2×1
    clusters (``cluster_m=2``, B multicast). No split-K. A row pitch (K bytes) that is not a
    multiple of 16 is refused, unless ``pad_k``: the kernel then copies A and B first into buffers
    whose rows are K rounded up to 16, the extra columns zero (:func:`fp8_kernel`; best_fp8_gemm
    asks for it where K needs it)."""

    block_k: int = 128
    pad_k: bool = False  # K not a multiple of 16: zero-padded copies of A and B (K pitch rounded up to 16) first
    #: The two consumer warpgroups take whole ``block_m × block_n`` tiles in turn (block_m 64 or 128),
    #: one running its epilogue while the other's wgmmas run, an ordered hand-off between their
    #: mainloops (schedules/pingpong.py); False: both split every tile along M (cooperative).
    pingpong: bool = False
    staged_store: bool = True  # D through a shared-memory area per consumer warp (make_fp8_staged_epilogue)
    #: D written by the TMA unit from two boxes of shared memory per consumer warp (schedules/tma_store.py)
    #: instead of by the warps' own stores, the scales applied in the boxes (cooperative consumers;
    #: staged_store false; N·itemsize a multiple of 16)
    tma_store: bool = False
    narrow_panels = False  # B in 64-row pieces: block_n a multiple of 64
    dtypes = FP8_DTYPES
    layouts = ("nt",)  # FP8 wgmma reads both operands K-major: A M×K and B N×K as stored
    layout_note = ("FP8 wgmma reads both operands K-major (no transpose immediates): store A as M×K and B as "
                   "N×K, as torch._scaled_mm takes them")
    batched = False
    epilogues = True  # the scales always, and bias, activation, residual, the output type
    scalings = ("tensor", "row")  # applied where the accumulators are stored
    step_name = "fp8_tma_gemm"

    @property
    def wg_rows(self) -> int:  # ping-pong: a consumer warpgroup owns the whole tile
        return self.block_m if self.pingpong else self.block_m // self.consumers

    def check(self, wl: Gemm):
        name = self.step_name
        if not wl.fp8:
            raise ScheduleParamError(f"{name} takes 8-bit float inputs ({', '.join(FP8_DTYPES)}), not {wl.dtype}")
        if wl.K % 16 and not self.pad_k:
            raise ScheduleParamError(
                f"{name}: the row pitch of A and B (K) is {wl.K} bytes; TMA needs a multiple of 16 (K must be a "
                f"multiple of 16 for 8-bit inputs; pad_k=true copies A and B into zero-padded buffers first), "
                f"got M,N,K = {wl.M},{wl.N},{wl.K}")
        if self.block_k != ROW_BYTES:
            raise ScheduleParamError(f"{name}: block_k must be {ROW_BYTES} (one 128-byte row of 8-bit elements), "
                                     f"got {self.block_k}")
        if self.pad_operands:
            raise ScheduleParamError(f"{name}: pad_operands is for the 16-bit steps; 8-bit inputs need K a multiple "
                                     f"of 16, or pad_k=true")
        if self.pad_pitch != 16:
            raise ScheduleParamError(f"{name}: pad_pitch is for the 16-bit and tf32 steps' padded copies; pad_k pads "
                                     f"8-bit rows to 16 bytes")
        if self.tma_store and self.pingpong:
            raise ScheduleParamError(f"{name}: tma_store is for the cooperative consumers (pingpong=false)")
        if self.split_k != 1:
            raise ScheduleParamError(f"{name}: split_k must be 1 (the epilogue applies the scales to the whole sum), "
                                     f"got {self.split_k}")
        if self.stream_k:
            raise ScheduleParamError(f"{name}: stream_k is for the 16-bit and tf32 steps (the FP8 kernel scales whole "
                                     f"sums in its epilogue)")
        if not self.warp_specialized:
            raise ScheduleParamError(f"{name}: the FP8 kernel is warp-specialized (warp_specialized=true)")
        if self.pingpong:
            check_pingpong(self, wl, 1)  # a whole tile per consumer: its own tile, register and ring checks
        else:
            self.check_structure(wl, 1)  # the tile, consumers, registers, ring and cluster, as gemm 21-23's

    def copied(self, wl: Gemm) -> tuple[bool, bool]:
        """(A, B): whether a copy kernel pads the operand's rows first: both where ``pad_k`` and K
        is not a multiple of 16 (A M×K and B N×K are both K-major), neither otherwise."""
        pad = self.pad_k and wl.K % 16 != 0
        return pad, pad

    def describe(self) -> str:
        return self.describe_structure() + (" tma store" if self.tma_store else "")

    def describe_structure(self) -> str:
        """:meth:`describe` without the store (which block scales name after their own knobs)."""
        return "fp8 " + TmaConfig.describe(self) + (" pingpong" if self.pingpong else "") + (
            ", K padded to 16" if self.pad_k else "")


class Fp8Geometry(Geometry):
    """gemm 21-23's geometry for 8-bit operands, both K-major (the nt layout): one byte per
    element, so a K tile of 128 elements is the 16-bit kernel's 128-byte rows; the A tile is one
    TMA box, B comes in 64-row pieces (8 KiB each); the wgmma is m64nNk32 with the operands' FP8
    types."""

    def __init__(self, wl: Gemm, cfg: Fp8TmaConfig):
        M, N, K = wl.M, wl.N, wl.K
        self.M, self.N, self.K, self.DT, self.cfg = M, N, K, wl.dtype, cfg
        self.item = 1
        self.BM, self.BN, self.BK, self.S = cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages
        self.TA, self.TB = False, True  # nt: A M×K, B N×K, both K-major
        self.BATCH = 0
        self.A_BYTES = self.BM * self.BK
        self.PANEL_BYTES = 64 * self.BK  # 64 rows of B: one 8 KiB piece
        self.A_PIECES = 1
        self.PANELS = self.BN // 64
        self.B_ROWS, self.B_PIECE_BYTES = 64, self.PANEL_BYTES
        self.STAGE_BYTES = cfg.stage_bytes(1)
        self.RING_BYTES = self.S * self.STAGE_BYTES
        self.KT = ceil_div(K, self.BK)
        self.KTS, self.SPLIT = self.KT, 1
        self.TM, self.TN = cfg.tiles(M, N)
        self.GRID = cfg.grid(M, N, K, 1)
        self.ACC = cfg.acc_regs
        self.rows_padded = False
        self.NACC = self.BN // 2
        self.SBO = 8 * ROW_BYTES // 16
        self.scales_tma = scales_by_tma(wl, cfg)  # block scales by TMA beside each K tile
        self.scales_chunk = scales_by_chunk(wl, cfg)  # block scales 16 bytes a row, a chunk at a time
        self.mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{self.BN}k{K_STEP}.f32."
                         f"{FP8_PTX[wl.dtype]}.{FP8_PTX[wl.dtype_b]}"]


def make_fp8_mma(g: Fp8Geometry, ring_word: bool = False):
    """A macro: one K tile's wgmmas of one consumer warpgroup (rows ``row0``.. of the block tile)
    on descriptors of ring slot ``slot``: block_k / 32 k32 steps, each 32 bytes further along the
    128-byte rows of both operands (K-major, no transpose immediates); scale-d = 0 on the unit's
    first step (no zeroing). ``ring_word``: ``ring`` is the ring's start as a descriptor's address
    field, ``(ring >> 4) & 0x3FFF``, and each descriptor that word plus the slot's and the step's
    offsets in 16-byte units, 32-bit adds (DeepGEMM's): a few instructions between a K tile's
    barrier and its first wgmma instead of a shift, mask and 64-bit or per descriptor."""
    MT = g.cfg.m_subtiles
    assert g.BK * g.item == ROW_BYTES and DESC_SWIZZLE_128B == 1
    HI = g.desc_high(1)

    def word(ring_lo, slot, rows_bytes, const):  # the ring's descriptor word plus 16-byte units
        return T.bitwise_or(T.cast(ring_lo + T.cast(slot, "uint32") * T.uint32(g.STAGE_BYTES // 16)
                                   + T.cast(rows_bytes, "uint32") + T.uint32(const // 16), "uint64"), T.uint64(HI))

    if ring_word:
        def descs(ring, slot, row0, mt, kk):  # A's and B's descriptors of step (mt, kk)
            return (word(ring, slot, row0 * (ROW_BYTES // 16), mt * 64 * ROW_BYTES + kk * K_STEP),
                    word(ring, slot, 0, g.A_BYTES + kk * K_STEP))
    else:
        def descs(ring, slot, row0, mt, kk):
            return (g.desc(ring + T.cast(slot * g.STAGE_BYTES + row0 * ROW_BYTES, "uint32")
                           + T.uint32(mt * 64 * ROW_BYTES + kk * K_STEP), 1),
                    g.desc(ring + T.cast(slot * g.STAGE_BYTES, "uint32") + T.uint32(g.A_BYTES + kk * K_STEP), 1))

    @T.macro
    def mma(acc, ring, slot, row0, kt):
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(g.BK // K_STEP):
            for mt in T.unroll(MT):
                g.mma(*[acc[mt * g.NACC + j] for j in range(g.NACC)], *descs(ring, slot, row0, mt, kk),
                      T.Or(kt > 0, kk > 0), 1, 1)  # scale-d, scale-a, scale-b
        T.ptx.wgmma.commit_group.sync.aligned()

    return mma


def output_value(wl: Gemm, x, scale, bias, R, row, col):
    """The epilogue on one fp32 accumulator ``x`` at (row, col), as a TIR expression, in the
    order of the workload's definition (:meth:`Gemm._epilogue_block`): x·(scale_a·scale_b), alpha,
    + bias, the activation, + beta·R, rounded to the output type last. ``scale``: the product of
    the two scales: per tensor, one value; per row, a (scale_a, scale_b) pair of buffers read at
    (row, 0) and (0, col); None where the sum is scaled already (block scales)."""
    ep = wl.epilogue or Epilogue()
    f32 = lambda v: tvm.tirx.const(v, "float32")  # noqa: E731
    if scale is not None:
        x = x * (scale[0][row, 0] * scale[1][0, col] if isinstance(scale, tuple) else scale)
    if ep.alpha != 1.0:
        x = x * f32(ep.alpha)
    if ep.bias:
        x = x + bias[col].astype("float32")
    x = activation_expr(ep.activation, x, "float32")
    if ep.residual:
        r = R[row, col].astype("float32")
        x = x + (r if ep.beta == 1.0 else r * f32(ep.beta))
    return x if wl.out_dtype == "float32" else x.astype(wl.out_dtype)


def make_fp8_epilogue(g: Fp8Geometry, wl: Gemm):
    """A macro storing one consumer warpgroup's accumulators (rows ``row0``.. of the tile) as
    outputs (:func:`output_value`), bounds-checked where the shape needs it; with ``vector_store``
    and N even, each thread's adjacent pair (columns 2·(lane % 4) + {0, 1} of an 8-column group)
    is computed into two registers and stored as one 4-byte (16-bit output) or 8-byte (fp32)
    store."""
    M, N, NACC = g.M, g.N, g.NACC
    VEC = g.cfg.vector_store and N % 2 == 0
    MT, JN = g.cfg.m_subtiles, g.BN // 8
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0
    ROWWISE = wl.scaling == "row"
    BLOCK = wl.scaling == "block"  # applied in the sum (make_promotion)

    def row_ok(tile_m, row0, lane, mt, h):
        return g.out_row(tile_m, row0, lane, mt, h) < M if ROW_CHECK else T.bool(True)

    def col_ok(tile_n, lane, j, e):
        return g.out_col(tile_n, lane, j) + e < N if COL_CHECK else T.bool(True)

    def value(acc, SA, SB, sab, bias, R, mt, j, h, e, row, col):
        scale = (SA, SB) if ROWWISE else None if BLOCK else sab[0]
        return output_value(wl, acc[mt * NACC + j * 4 + h * 2 + e], scale, bias, R, row, col)

    @T.macro
    def epilogue(D, SA, SB, sab, bias, R, acc, pair, tile_m, tile_n, row0, lane):
        for mt in T.unroll(MT):
            for j in T.unroll(JN):
                for h in T.unroll(2):
                    if VEC:
                        if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, 0)):
                            for e in T.unroll(2):
                                pair[e] = value(acc, SA, SB, sab, bias, R, mt, j, h, e,
                                                g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e)
                            for e in T.vectorized(2):
                                D[g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = pair[e]
                    else:
                        for e in T.unroll(2):
                            if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, e)):
                                D[g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = value(
                                    acc, SA, SB, sab, bias, R, mt, j, h, e,
                                    g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e)

    return epilogue


def make_fp8_staged_epilogue(g: Fp8Geometry, wl: Gemm):
    """:func:`make_fp8_epilogue` through shared memory (``staged_store``: the FP8 steps' default), as
    the 16-bit kernels' (:func:`schedules.staged_store.make_staged_rows`): each consumer warp's raw
    accumulators through its own area, the scales and the epilogue applied to the values read back
    along the rows (the bias and R read along a row), D stored by rows: with N even two rows of 64
    (16-bit output) or 128 bytes (fp32) per store, whole sectors. On an H100 it took 4096³ from 116.8
    to 96.8 µs (bf16 output, per-tensor scales; reports/results/NVIDIA_H100_80GB_HBM3/
    fp8_staged_store_staged); the fragments' own stores (``staged_store=False``) write 8 rows × 16
    bytes per instruction, half of each sector. Row scales are read ahead of their use (``early`` of
    make_staged_rows): B's at the lane's columns once a tile, A's at a chunk's rows before it is
    staged; read beside each output, two loads sat between every two stores."""
    ROWWISE, BLOCK = wl.scaling == "row", wl.scaling == "block"
    if ROWWISE:  # the scales read ahead of their use: B's of the lane's columns once a tile, A's of a chunk's rows
        def value(x, SA, SB, sab, bias, R, row, col, b, sb_col, sa_row):
            return output_value(wl, x, sa_row * sb_col, bias, R, row, col)

        def column(SA, SB, sab, bias, R, col):
            return SB[0, col]

        def element(SA, SB, sab, bias, R, row, col, b):
            return SA[row, 0]

        return make_staged_rows(g, value, early=("float32", column, element))

    def value(x, SA, SB, sab, bias, R, row, col, b):
        return output_value(wl, x, None if BLOCK else sab[0], bias, R, row, col)

    return make_staged_rows(g, value)


def make_promotion(g: Fp8Geometry, wl: Gemm):
    """A macro: one K tile of a cooperative consumer warpgroup under block scaling. The K tile (128
    of K: one block of both operands' scales) is multiplied into a fresh set of accumulators,
    ``part`` (scale-d 0 at its first k32 step); once its wgmmas are done (``wait_group 0``; the slot
    is released at once) each partial sum is added to the running sum in fp32 registers, multiplied
    by the scale of its row's 1×128 piece of A and of its column's 128×128 block of B: read from the
    slot beside the K tile (``scales_in_ring``: fp8_block_scales.make_scale_tma_load), or loaded from
    global memory one K tile ahead (:func:`make_scale_loader`; the tile's first by the caller). The
    tensor cores' limited-precision accumulation then spans 128 products, not K.

    The next K tile's full barrier is waited for between this one's ``wait_group`` and its
    promotion (the unit's first by the caller), with CUTLASS's wait (tma_common.wait_phase): ptxas
    then checks the barrier among the promotion's FMAs and keeps the retry out of line, and the
    descriptors are the ring's word plus offsets (``make_fp8_mma(ring_word=True)``: ``ring`` is that
    word)."""
    S, CL = g.S, g.cfg.cluster_m
    load_scales, read_scales, add = make_scale_loader(g), make_scale_reader(g), make_scale_sum(g)
    IN_RING = g.scales_tma
    CHUNK = g.scales_chunk  # the chunk's scales loaded at its start (make_chunk_scale_loader)
    add_set = make_scale_set_sum(g, g.cfg.k_chunk) if CHUNK else None
    mma = make_fp8_mma(g, ring_word=True)

    @T.macro
    def promote(acc, part, sa_r, sb_r, SA, SB, scales, ring, bars, it, kt, u, tile_m, tile_n, row0, lane):
        if not (IN_RING or CHUNK):  # the next K tile's
            load_scales(sa_r, sb_r, 1, SA, SB, tile_m, tile_n, row0, lane, T.min(kt + 1, g.KT - 1))
        # this K tile's barrier: waited for before the previous one's promotion, or by the caller
        mma(part, ring, it % S, row0, 0)  # kt = 0: scale-d 0 on the first k32 step, a fresh partial sum
        if IN_RING:  # this K tile's, from its slot (set 0; add's move of set 1 is then unused)
            read_scales(sa_r, sb_r, 0, scales, it % S, kt, tile_n, row0, lane)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if lane == 0:
            release_slot(bars, S + it % S, CL)
        if kt + 1 < g.KT:  # the next K tile's, before this one's promotion
            wait_phase(T.address_of(bars[(it + 1) % S]), (it + 1) // S % 2)
        fence_acc(part, g.ACC)  # no read of the partial sums above the wait
        if CHUNK:
            add_set(acc, part, sa_r, sb_r, u)
        else:
            add(acc, part, sa_r, sb_r)

    return promote


def fp8_kernel(wl: Gemm, cfg: Fp8TmaConfig):
    """The TIR PrimFunc ``main(A, B, scale_a, scale_b, [bias], [R], D)``: gemm 21-23's
    warp-specialized ring (tma_common.py) with FP8 tiles, wgmmas and epilogue."""
    g = Fp8Geometry(wl, cfg)
    M, N, K = wl.M, wl.N, wl.K
    S, KT = g.S, g.KT
    NC, CL = cfg.consumers, cfg.cluster_m
    TM_CL = ceil_div(g.TM, CL) * CL  # tile rows rounded up to whole clusters
    CL_TILES = TM_CL * g.TN // CL
    GRID = g.GRID
    g.rows_padded = TM_CL != g.TM
    load = make_loader(g, CL)
    mma = make_fp8_mma(g)
    epilogue = make_fp8_epilogue(g, wl)
    STAGED = cfg.staged_store  # D through the consumer warps' staging areas (after the ring)
    TMA_STORE = cfg.tma_store  # D by the TMA unit from per-warp boxes (schedules/tma_store.py)
    # block scales: the sums are scaled already; per tensor or row, the boxes' writes apply the scales
    tma_store = make_tma_store(g, wl, None if wl.scaling == "block" else wl.scaling) if TMA_STORE else None
    staged = make_fp8_staged_epilogue(g, wl) if STAGED else None
    ROW0 = cfg.wg_rows
    OUT = wl.out_dtype
    L2 = cfg.l2_promotion

    def block_tile(c, rank):  # the grouped order over cluster rows; the block's row in its cluster
        cm, cn = grouped_tile(c, cfg.group_m, TM_CL // CL, g.TN)
        return cm * CL + rank, cn

    units = WorkUnits(CL_TILES, GRID // CL, KT, KT, 1, 0, block_tile)
    PP = cfg.pingpong  # each slot read by one consumer: one arrival per block of the cluster
    BLOCK = wl.scaling == "block"
    IN_RING = g.scales_tma  # the producer thread loads each K tile's scales beside it (TMA)
    init_ring = ring_barriers(S, (1 if PP else NC) * CL, CL, 1 + (SCALE_TMA_ARRIVALS if IN_RING else 0))
    produce = ring_producer(units, S, cfg.producer_regs, load, extra_load=make_scale_tma_load(g) if IN_RING else None)
    unit_done = ring_unit_done(units, S, CL, g.ACC)
    ROWWISE = wl.scaling == "row"
    promote = make_promotion(g, wl) if BLOCK else None
    load_scales = make_scale_loader(g) if BLOCK else None
    CHUNK = g.scales_chunk
    load_chunk = make_chunk_scale_loader(g, cfg.k_chunk) if CHUNK else None
    promote_unit = make_pingpong_promotion(g, mma) if BLOCK and PP else None
    pp_mainloop = make_mainloop(S, CL, mma, unit_done) if PP and not BLOCK else None
    UK = cfg.k_chunk if BLOCK else 1  # block scales, unpipelined: K tiles per unrolled chunk
    SETS = UK if CHUNK else 2  # scale sets: this K tile's and the next's; chunk_scales: a chunk's
    PIPE = BLOCK and getattr(cfg, "pipelined", False)  # two partial sets, promoted behind the next wgmmas
    WORD = BLOCK and not PP and not PIPE  # make_promotion's consumers
    pipe_unit = make_pipelined_unit(g, mma) if PIPE else None
    # K not a multiple of 16 (pad_k): A and B copied first into rows of KP = K rounded up to 16 bytes,
    # the extra columns zero (they add nothing to the sum; K tiles, block scales and KT are K's)
    PAD = cfg.copied(wl)[0]
    pad_a, KP = pad_copy_kernel(M, K, 1, wl.dtype) if PAD else (None, K)
    pad_b, _ = pad_copy_kernel(N, K, 1, wl.dtype_b) if PAD else (None, K)

    @T.macro
    def k_tiles(acc, part, sa_r, sb_r, SA, SB, scales, ring_lo, bars, i, kt0, n, tile_m, tile_n, row0, lane):
        # unit i's n K tiles from kt0, unrolled (block scales, unpipelined); chunk_scales: their scales first
        if CHUNK:
            load_chunk(sa_r, sb_r, SA, SB, tile_m, tile_n, row0, lane, kt0, n)
        for u in T.unroll(n):
            promote(acc, part, sa_r, sb_r, SA, SB, scales, ring_lo, bars, i * KT + kt0 + u, kt0 + u, u, tile_m, tile_n,
                    row0, lane)

    @T.macro
    def body(A, B, SA, SB, bias, R, D):
        if PAD:  # workspaces from the device's pool, as the 16-bit steps' padded copies
            A_pad = T.alloc_buffer((M, KP), wl.dtype, scope="global")
            pad_a(A, A_pad)
            B_pad = T.alloc_buffer((N, KP), wl.dtype_b, scope="global")
            pad_b(B, B_pad)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        # UINT8 maps (TMA moves bytes): A (K, M) in boxes (128, block_m), B (K, N) in boxes (128, 64)
        a_data, b_data = T.meta_var(((A_pad if PAD else A).data, (B_pad if PAD else B).data))
        T.evaluate(encode_map(A_map, a_data, (KP, M), (g.BK, g.BM), 1, "uint8", L2))
        T.evaluate(encode_map(B_map, b_data, (KP, N), (g.BK, 64), 1, "uint8", L2))
        if TMA_STORE:
            D_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.evaluate(encode_store_map(D_map, D.data, wl))
        if IN_RING:  # the block scales' maps (fp8_block_scales.encode_scale_maps)
            SA_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            SB_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            sa_enc, sb_enc = T.meta_var(encode_scale_maps(g, SA_map, SB_map, SA.data, SB.data))
            T.evaluate(sa_enc)
            T.evaluate(sb_enc)
        with T.launch_thread("blockIdx.x", GRID) as bid:
            if CL > 1:
                crank = T.launch_thread("clusterCtaIdx.x", CL)
            tid = T.launch_thread("threadIdx.x", cfg.threads)
            T.attr(0, "tirx.max_registers", cfg.launch_regs)  # setmaxnreg needs a known count at entry
            smem = T.alloc_buffer((cfg.shared_bytes(1),), "uint8", scope="shared.dyn")
            bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)  # full[0:S], empty[S:2S]
            acc = T.alloc_buffer((g.ACC,), "float32", scope="local")
            pair = T.alloc_buffer((2,), OUT, scope="local")  # an adjacent pair of outputs, stored together
            sab = T.alloc_buffer((1,), "float32", scope="local")  # scale_a·scale_b (per tensor)
            if BLOCK:  # a K tile's partial sums, and its scales for this thread's rows and column blocks
                part = T.alloc_buffer((g.ACC,), "float32", scope="local")
                if PIPE:  # odd K tiles' partial sums (part: the even ones')
                    part1 = T.alloc_buffer((g.ACC,), "float32", scope="local")
                sa_r = T.alloc_buffer((SETS * 2 * cfg.m_subtiles,), "float32", scope="local")
                sb_r = T.alloc_buffer((SETS * g.BN // scale_group(g.BN),), "float32", scope="local")
            ring: T.let[T.uint32] = T.bitwise_and(T.cuda.cvta_generic_to_shared(smem.data) + T.uint32(1023),
                                                  T.uint32(0xFFFFFC00))
            if WORD:  # the ring's start as a descriptor's address field (make_fp8_mma's ring_word)
                ring_lo: T.let[T.uint32] = T.bitwise_and(T.shift_right(ring, T.uint32(4)), T.uint32(0x3FFF))
            if STAGED:
                vals = T.alloc_buffer((16,), "float32", scope="local")  # accumulators read back from the area
                stage: T.let[T.uint32] = ring + T.uint32(g.RING_BYTES)
            if TMA_STORE:  # the consumer warps' boxes, after the ring
                boxes: T.let[T.uint32] = ring + T.uint32(g.RING_BYTES)
                if ROWWISE:  # what the boxes' writes scale by (make_tma_store's scales)
                    store_scales = T.meta_var((SA, SB))
                elif BLOCK:
                    store_scales = T.meta_var(None)
                else:
                    store_scales = T.meta_var(sab)
            if IN_RING:  # the scales' slots, after the staging areas or boxes
                scales: T.let[T.uint32] = ring + T.uint32(g.RING_BYTES + staged_bytes(cfg) + tma_store_bytes(cfg))
            else:
                scales = T.meta_var(ring)  # unused
            wg = T.meta_var(tid // WARPGROUP)
            lane = T.meta_var(tid % WARPGROUP)
            if CL > 1:
                rank = T.meta_var(crank)
                cid = T.meta_var(bid // CL)
            else:
                rank = T.meta_var(0)
                cid = T.meta_var(bid)
            n_tiles: T.let[T.int32] = units.count(cid)
            init_ring(bars, tid)
            if wg == 0:
                if IN_RING:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, cid, rank, SA_map, SB_map, scales)
                else:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, cid, rank)
            else:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                # the consumer's index broadcast from lane 0 (CUTLASS's canonical_warp_group_idx): known
                # warp-uniform, so ptxas keeps the wgmma descriptors' arithmetic in uniform registers
                w_u: T.let[T.int32] = warp_group_index() - 1
                w = T.meta_var(w_u)
                if not (ROWWISE or BLOCK):
                    sab[0] = SA[0] * SB[0]
                if PP:
                    # units w, w + 2, ...: whole tiles, in turn with the other consumer (pingpong.py)
                    for j in T.serial(turns(w, n_tiles)):
                        i: T.let[T.int32] = j * 2 + w
                        tm_, tn_ = T.meta_var(units.tile(cid, i, rank))
                        tile_m: T.let[T.int32] = tm_
                        tile_n: T.let[T.int32] = tn_
                        if i > 0:
                            wait_turn(w)  # the other consumer has issued unit i - 1's last wgmmas
                        if BLOCK:  # passes the turn itself, before its last promotion
                            promote_unit(acc, part, sa_r, sb_r, SA, SB, scales, ring, bars, i, tile_m, tile_n, lane, w,
                                         n_tiles)
                        else:
                            pp_mainloop(acc, ring, bars, i, KT, lane, w, n_tiles)
                        # the epilogue runs while the other consumer's wgmmas keep the tensor cores busy
                        if STAGED:
                            staged(D, SA, SB, sab, bias, R, acc, vals, pair, stage, tile_m, tile_n, 0, w, lane, 0)
                        else:
                            epilogue(D, SA, SB, sab, bias, R, acc, pair, tile_m, tile_n, 0, lane)
                else:
                    for i in T.serial(n_tiles):
                        tm_, tn_ = T.meta_var(units.tile(cid, i, rank))
                        tile_m: T.let[T.int32] = tm_
                        tile_n: T.let[T.int32] = tn_
                        # the tile's row and column held in registers: as let-bound values TVM writes their
                        # expressions (a division by the group's height) into every use, each chunk's scale
                        # addresses and each box's or row's store address
                        tile_rc = T.alloc_local((2,), "int32")
                        tile_rc[0] = tile_m
                        tile_rc[1] = tile_n
                        if PIPE:
                            pipe_unit(acc, part, part1, sa_r, sb_r, SA, SB, scales, ring, bars, i, tile_m, tile_n,
                                      w * ROW0, lane)
                        elif BLOCK:
                            for r in T.unroll(g.ACC):
                                acc[r] = T.float32(0)
                            if not (IN_RING or CHUNK):
                                load_scales(sa_r, sb_r, 0, SA, SB, tile_rc[0], tile_rc[1], w * ROW0, lane, 0)
                            # the unit's first K tile's barrier (the others': in promote)
                            wait_phase(T.address_of(bars[i * KT % S]), i * KT // S % 2)
                            for c in T.serial(KT // UK):  # chunks of unroll_k K tiles in straight-line code
                                k_tiles(acc, part, sa_r, sb_r, SA, SB, scales, ring_lo, bars, i, c * UK, UK, tile_rc[0],
                                        tile_rc[1], w * ROW0, lane)
                            if KT % UK != 0:  # the rest
                                k_tiles(acc, part, sa_r, sb_r, SA, SB, scales, ring_lo, bars, i, KT // UK * UK,
                                        KT % UK, tile_rc[0], tile_rc[1], w * ROW0, lane)
                        else:
                            for kt in T.serial(KT):
                                it: T.let[T.int32] = i * KT + kt
                                T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
                                mma(acc, ring, it % S, w * ROW0, kt)
                                T.ptx.wgmma.wait_group.sync.aligned(1)  # K tile kt-1's wgmmas are done: free its slot
                                if T.And(kt > 0, lane == 0):
                                    release_slot(bars, S + (it - 1) % S, CL)
                            unit_done(acc, bars, i, KT, lane)
                        if TMA_STORE:  # the scales (per tensor or row) and the epilogue in the boxes
                            tma_store(D_map, bias, R, store_scales, acc, boxes, tile_rc[0], tile_rc[1], w * ROW0, w,
                                      lane, i)
                        elif STAGED:
                            staged(D, SA, SB, sab, bias, R, acc, vals, pair, stage, tile_rc[0], tile_rc[1], w * ROW0,
                                   w, lane, 0)
                        else:
                            epilogue(D, SA, SB, sab, bias, R, acc, pair, tile_rc[0], tile_rc[1], w * ROW0, lane)
                    if TMA_STORE:
                        drain_stores(lane)
            if CL > 1:
                T.cuda.cluster_sync()  # no block leaves while a peer may still multicast into it

    return _signature(wl, body)


def _signature(wl: Gemm, body):
    """``main`` with the workload's arguments (:meth:`Gemm.arg_names`): A, B, scale_a, scale_b,
    then the bias and R where the epilogue has them, then D. TVMScript has no variable argument
    lists, so one definition per combination."""
    M, N, OUT = wl.M, wl.N, wl.out_dtype
    DA, DB = wl.dtype, wl.dtype_b
    SA, SB = wl.scale_shapes
    if wl.bias and wl.residual:
        @T.prim_func
        def main(A: T.Buffer((M, wl.K), DA), B: T.Buffer((N, wl.K), DB), scale_a: T.Buffer(SA, "float32"),
                 scale_b: T.Buffer(SB, "float32"), bias: T.Buffer((N,), OUT), R: T.Buffer((M, N), OUT),
                 D: T.Buffer((M, N), OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, scale_a, scale_b, bias, R, D)
    elif wl.bias:
        @T.prim_func
        def main(A: T.Buffer((M, wl.K), DA), B: T.Buffer((N, wl.K), DB), scale_a: T.Buffer(SA, "float32"),
                 scale_b: T.Buffer(SB, "float32"), bias: T.Buffer((N,), OUT), D: T.Buffer((M, N), OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, scale_a, scale_b, bias, None, D)
    elif wl.residual:
        @T.prim_func
        def main(A: T.Buffer((M, wl.K), DA), B: T.Buffer((N, wl.K), DB), scale_a: T.Buffer(SA, "float32"),
                 scale_b: T.Buffer(SB, "float32"), R: T.Buffer((M, N), OUT), D: T.Buffer((M, N), OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, scale_a, scale_b, None, R, D)
    else:
        @T.prim_func
        def main(A: T.Buffer((M, wl.K), DA), B: T.Buffer((N, wl.K), DB), scale_a: T.Buffer(SA, "float32"),
                 scale_b: T.Buffer(SB, "float32"), D: T.Buffer((M, N), OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, scale_a, scale_b, None, None, D)
    return main


@register("fp8_tma_gemm", "gemm", Fp8TmaConfig, aliases=("fp8_tma", "fp8"), tags=("fp8",))
def fp8_tma_gemm(wl: Gemm, cfg: Fp8TmaConfig = Fp8TmaConfig()):
    """FP8 on the persistent, warp-specialized structure: e4m3/e5m2 inputs, wgmma m64nNk32 from
    128-byte-swizzled tiles, fp32 accumulators, per-tensor or row-wise scales applied in the
    epilogue (``D = scale_a·scale_b·(A·Bᵀ)``, then bias, activation, residual, the output type).

    8-bit inputs halve the bytes per multiply-add: a K tile of 128 elements is the 16-bit kernel's
    128-byte rows, so the same 4-stage, 192 KiB ring of 128 × 256 tiles carries twice the K per
    stage, and the tensor cores run FP8 at twice their 16-bit rate. FP8 wgmma reads both operands
    K-major (no transpose immediates): the nt layout, A M×K and B N×K as stored, as
    torch._scaled_mm takes them. The scales are kernel arguments (float32, shape (1,) per tensor,
    (M, 1) and (1, N) per row) multiplied into the accumulators once, where they are stored.

    ``pingpong=true`` (with a tile one consumer holds: ``block_m`` 64 or 128, e.g. 128 × 128): the
    two consumer warpgroups take whole tiles in turn, one's epilogue running while the other's
    wgmmas keep the tensor cores busy (schedules/pingpong.py).
    """
    cfg.check(wl)
    return s_tir.Schedule(fp8_kernel(wl, cfg))



@dataclass(frozen=True)
class Fp8BlockConfig(Fp8TmaConfig):
    """Fp8TmaConfig with a 128 × 128 tile and 4 stages (a power of two: the slot and phase of a K
    tile are a mask and a shift; ``pipelined`` too, measured at 6 before), the K loop in unrolled
    chunks of :attr:`k_chunk` K tiles: each
    consumer thread holds two accumulator sets, the running sum and a K tile's partial sums
    (2 × 64 registers at 128 × 128), and
    ``block_n`` a multiple of 64 (128 × 192: B's scale read per 64-column group, fp8_block_scales.
    scale_group). ``pipelined``: a third set, so that a K tile's promotion runs while the next K
    tile's wgmmas do (cooperative consumers only; fp8_block_scales.make_pipelined_unit). Three
    consumers (``block_m=192, consumers=3, producer_regs=24``: 160 registers each, two 64-register
    sets, chunks of 2 K tiles: :attr:`k_chunk`) hide one's promotion behind two others' wgmmas:
    on an H100 at 8192³ 1089 TFLOP/s against the pipelined 128 × 128's 1060 (4096³: 923 against
    1044, 6 waves of 192-row tiles for 5.3)."""

    block_n: int = 128
    stages: int = 4
    pipelined: bool = False  # two partial-sum sets: K tile kt promoted behind kt+1's wgmmas
    pipe_tiles: int = 4  # pipelined: K tiles per chunk, unrolled, one wait_group 0 each (C7514 otherwise)
    #: each K tile's scales loaded by TMA into shared memory beside it, by the producer thread, where
    #: ⌈K/128⌉ is a multiple of 4 (fp8_block_scales.scales_by_tma); False (or other K): the consumers
    #: load them from global memory
    scales_in_ring: bool = False
    #: unpipelined, scales from global memory: a chunk's scales loaded together at its start (a row's 8
    #: K tiles share a 32-byte sector), not a K tile ahead one by one
    chunk_scales: bool = False
    #: unpipelined: K tiles per chunk of the K loop in straight-line code (the rest after the chunks), so
    #: that ptxas schedules a K tile's barrier check and wgmma setup among the previous one's promotion;
    #: 0: by the registers a consumer has to spare (:attr:`k_chunk`)
    unroll_k: int = 0
    scalings = ("block",)  # promoted into fp32 registers every K tile (make_promotion)
    zero_means_auto = Fp8TmaConfig.zero_means_auto + ("unroll_k",)
    step_name = "fp8_block_scaled_gemm"

    def check(self, wl: Gemm):
        name = self.step_name
        if self.block_n % 64:
            raise ScheduleParamError(f"{name}: block_n must be a multiple of 64 (each 64-column group of a tile in "
                                     f"one of B's 128-column scale blocks), got {self.block_n}")
        if self.pipelined and self.pingpong:
            raise ScheduleParamError(f"{name}: pipelined is for the cooperative consumers (pingpong=false): a "
                                     f"ping-pong consumer's promotion hides behind the other's wgmmas")
        if self.chunk_scales and (self.pipelined or self.pingpong or self.scales_in_ring):
            raise ScheduleParamError(f"{name}: chunk_scales is for the unpipelined cooperative kernel with the scales "
                                     f"from global memory (pipelined, pingpong and scales_in_ring false)")
        if self.pipe_tiles < 2:
            raise ScheduleParamError(f"{name}: pipe_tiles must be ≥ 2 (K tiles per pipelined chunk), "
                                     f"got {self.pipe_tiles}")
        sets = 3 if self.pipelined else 2
        if sets * self.acc_regs > self.consumer_budget - 32:  # 32: addresses, scales, indices
            what = "the running sum and two K tiles'" if self.pipelined else "the running sum and a K tile's"
            raise ScheduleParamError(f"{name}: {('two', 'three')[sets - 2]} accumulator sets of {self.acc_regs} registers ({what}) leave "
                                     f"too few of the {self.consumer_budget} a consumer gets: lower block_n or block_m")
        Fp8TmaConfig.check(self, wl)

    @property
    def k_chunk(self) -> int:
        """K tiles per unrolled chunk of the unpipelined K loop: ``unroll_k``, or where it is 0 what
        the consumer's registers beyond its two accumulator sets allow: 8 with 100 or more to spare
        (128 × 128: 232 - 128), 4 with 40 (128 × 192: 232 - 192), else 2 (three consumers: 160 - 128);
        a chunk one step longer spilled in each (nvcc 13, sm_90a)."""
        if self.unroll_k:
            return self.unroll_k
        spare = self.consumer_budget - 2 * self.acc_regs
        return 8 if spare >= 100 else 4 if spare >= 40 else 2

    def shared_bytes(self, itemsize: int = 2) -> int:
        """The ring, the staging areas and (``scales_in_ring``) the scales' slots."""
        return Fp8TmaConfig.shared_bytes(self, itemsize) + scale_ring_bytes(self)

    def describe(self) -> str:
        pipe = (" pipelined" + (f"/{self.pipe_tiles}" if self.pipe_tiles != 4 else "")) if self.pipelined else ""
        unroll = f" unroll {self.unroll_k}" if self.unroll_k and not self.pipelined else ""
        chunk = " chunk scales" if self.chunk_scales else ""
        store = " tma store" if self.tma_store else ""
        return "block-scaled " + self.describe_structure() + pipe + unroll + chunk + store


@register("fp8_block_scaled_gemm", "gemm", Fp8BlockConfig, aliases=("fp8_block",), tags=("fp8",))
def fp8_block_scaled_gemm(wl: Gemm, cfg: Fp8BlockConfig = Fp8BlockConfig()):
    """FP8 with block scales (DeepSeek-V3's): a scale per 1×128 piece of A and per 128×128 block
    of B, applied inside the sum: each K tile's wgmmas start a fresh partial sum that is promoted
    into fp32 registers, scaled, once the tile is done.

    Per-tensor and row-wise scales factor out of the sum; block scales change every 128 of K, so
    they cannot wait for the epilogue. Promoting every K tile also bounds what the FP8 tensor cores'
    limited-precision accumulation (about 14 bits) can lose to 128 products instead of K: the
    error no longer grows with K. The price: a ``wait_group 0`` per K tile (the two consumer
    warpgroups overlap each other's promotion), an FMA per accumulator per K tile, and twice the
    accumulator registers, hence a 128 × 128 tile. Workload ``gemm:MxNxK:float8_e4m3fn:nt:scale=block``.

    ``pingpong=true`` with ``block_m=64``: each consumer warpgroup promotes a whole 64 × 128 tile of
    its own, the two taking tiles in turn; the epilogue hides behind the other's mainloop, the
    promotion does not (schedules/fp8_pingpong.py).

    ``pipelined=true`` (cooperative): a second partial-sum set (3 × 64 registers at 128 × 128, within
    the consumers' 232), so that each K tile's promotion runs while the next K tile's wgmmas do
    (``wait_group 1``), in unrolled chunks of ``pipe_tiles`` K tiles with one ``wait_group 0`` each
    (fp8_block_scales.make_pipelined_unit).

    ``scales_in_ring=true``: the producer thread loads each K tile's scales by TMA into shared memory
    beside the tile (where ⌈K/128⌉ is a multiple of 4), and the consumers read them there instead of
    loading them from global memory: faster for the ping-pong kernel (best_fp8_gemm's choice there),
    slower for the pipelined cooperative one (fp8_block_scales.make_scale_tma_load).
    """
    cfg.check(wl)
    return s_tir.Schedule(fp8_kernel(wl, cfg))
