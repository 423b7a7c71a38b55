"""gemm 24: decode-sized products at the memory-bandwidth limit (decode_gemm).

    C (M×N) = A·Bᵀ, A M×K and B N×K (layout nt: PyTorch's Linear, Y = X·Wᵀ), with
    M ≤ 64 (a few rows of activations against a large weight), or N ≤ 64 (the mirror: the
    weight is A, the few columns B)

Such a product moves the weight once and does 2·T flops per weight element (T = the few rows):
at T ≤ 64 that is under 64 flops per byte, below what an H100 or H200 needs to be bound by its
arithmetic, so the only ceiling is device-memory bandwidth. The tiled kernels waste it: a
128-row tile is mostly padding, and a few output tiles leave SMs idle. This kernel streams the
weight through a deep ring of asynchronous copies and multiplies on the tensor cores, so that T
rows cost no more instructions than one (with FMAs, 16 rows at 3-4.8 TB/s of weight would already
need 48-77 TFLOP/s of fp32 FMAs, about all an H100 or H200 has):

* a warp owns ``warp_rows`` (16 or 32) rows of the weight: one or two m16 tiles of
  ``mma.sync.m16n8k16`` (fp16/bf16 in, fp32 accumulators), the weight as the 16-row operand and
  the few rows as the 8-column one, ⌈T/8⌉ of them (the "swap AB" of decode kernels: T = 1 … 8
  costs one mma per 16 weight rows and 16 K);
* lane ``4g + c`` copies 16 contiguous bytes of row g (and g + 8) per 32-element K step, elements
  8c … 8c+7. The mma's own operand layout would want pairs at k = 2c and 2c + 8; a sum does not
  depend on the order of its terms, so the kernel gives mma #0 the elements 8c … 8c+3 and mma #1
  8c+4 … 8c+7 in place of the mma's k slots (the same permutation for both operands): one 16-byte
  piece feeds two mma instructions, with no shuffle;
* the pieces travel by ``cp.async`` (16 bytes, zero-filled past K) into a ring of ``stages``
  shared-memory slots, ``stages - 1`` block steps in flight: the loads are asynchronous, so how
  many are in flight does not depend on registers or on where the compiler schedules them (with
  plain loads ptxas moved each load next to its mma and a warp had 5 in flight). A lane reads
  back the weight pieces it copied itself; the block's few rows (X, 8·⌈T/8⌉ × the step's K) are
  copied once per block into the same slot and read by every warp, so X's traffic is T / (rows
  per block) of the weight's;
* ``row_warps`` warps of a block take consecutive rows, ``k_warps`` the consecutive K pieces of a
  block step (their sums added through shared memory at the end); ``split_k`` blocks take K
  slices. On Hopper (sm_90) the slices of a row block form one thread-block cluster and add their
  sums through distributed shared memory (:func:`cluster_sum`): one kernel. Elsewhere, or with
  more than 8 slices, they write fp32 partials P[s, M, N] that a second kernel sums (tma_common's
  split-K sum): that kernel's launch cost a decode layer 2-5 µs, as much as 30% of its time;
* the write-back is one place (:func:`make_store`): each output leaves once, straight to C (or
  P), masked past the edges, with the workload's epilogue (bias, activation, residual, scaling,
  a 16-bit output) applied there, or by the split-K sum where K is split over blocks.

Written as a TIR kernel (TVMScript: ``T.ptx`` cp.async, ``T.ptx_legacy.mma``), as the Hopper steps
are, because TVM 0.27's schedules cannot express it: its tensor-core tensorization reaches mma
operands only through ``ldmatrix`` into "warp" buffers laid out in the mma's own k order (no
permuted K), it registers no bf16 mma or ldmatrix intrinsic, and its cross-thread reductions
cannot add tensor-core accumulators across warps.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div, current_gpu
from .decode_plan import (K_STEP, MAX_TOKENS, SHARED_STATIC, Access, DecodePlan, decode_form, plan_decode,
                          trans_pitch, trans_position)
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .tma_common import split_sum_kernel
from .wgmma_epilogue import kernel_entry, split_sum_epilogue
from .workloads import Gemm, epilogue_value

PTX_TYPE = {"float16": "fp16", "bfloat16": "bf16"}
PIECE = 16               # bytes of one cp.async (8 elements)


def pack_halves(lo, hi):
    """Two 16-bit elements' bits (:func:`masked_half`) as one shared word (``lo`` at the lower address)."""
    return T.bitwise_or(lo, T.shift_left(hi, T.uint32(16)))


def masked_half(X, i0, i1, ok, e0, e1):
    """The bits of the 16-bit X[i0, i1] where ``ok``, else 0 (+0.0). The address is clamped into X (``e0``,
    ``e1`` its extents) and the load made whatever ``ok``, its bits masked after: no branch, so a
    thread's loads issue back to back rather than one branch at a time."""
    return T.bitwise_and(T.Cast("uint32", T.reinterpret("uint16", X[T.min(i0, e0 - 1), T.min(i1, e1 - 1)])),
                         T.Select(ok, T.uint32(0xFFFF), T.uint32(0)))


def check_knobs(step: str, cfg, wl):
    """The checks decode_gemm and thin_tc_gemm share (their kernel body's): power-of-two K warps,
    16- or 32-row warps, a ring of two slots at least, the K warps' sum within static shared memory,
    split-K partials within 32-bit indices; ScheduleParamError naming ``step`` otherwise."""
    if cfg.k_warps & (cfg.k_warps - 1):
        raise ScheduleParamError(f"{step}: k_warps must be a power of two (their sums are added in halving "
                                 f"rounds), got {cfg.k_warps}")
    if cfg.warp_rows not in (0, 16, 32):
        raise ScheduleParamError(f"{step}: warp_rows must be 16 or 32 (one or two m16 tiles), got {cfg.warp_rows}")
    p = cfg.plan(wl)
    if p.stages < 2:
        raise ScheduleParamError(f"{step}: stages must be at least 2 (a slot filling while one is read), "
                                 f"got {p.stages}")
    if 4 * p.shared_floats > SHARED_STATIC:
        raise ScheduleParamError(f"{step}: the sum of {p.k_warps} K warps needs {4 * p.shared_floats} bytes "
                                 f"of shared memory, more than {SHARED_STATIC}; fewer k_warps")
    if p.cluster and p.row_warps * p.acc * 32 > p.stages * p.slot_words:
        raise ScheduleParamError(f"{step}: the cluster's sum parks {p.row_warps * p.acc * 32} floats in the ring "
                                 f"of {p.stages * p.slot_words} words; more stages, or cluster_sum=False")
    if p.splits > 1 and p.splits * wl.M * wl.N >= 2**31:
        raise ScheduleParamError(f"{step}: split_k={p.splits} partials need 64-bit indices; lower split_k")


@dataclass(frozen=True)
class DecodeConfig(StepConfig):
    """The weight rows a warp owns (``warp_rows``: 16 or 32), warps per block along the rows
    (``row_warps``) and along K (``k_warps``), 32-element K pieces per warp per block step
    (``unroll``), ring slots (``stages``) and K slices on separate blocks (``split_k``). 0: chosen
    from the shape and the GPU (:meth:`plan`). ``cluster_sum``: the K slices of a row block add
    their sums in their thread-block cluster (sm_90 and later, 2 to 8 slices); False, or where
    that does not apply: a second kernel adds the fp32 partials."""

    dtypes = ("float16", "bfloat16")
    layouts = ("nt",)   # both operands K-contiguous: 16-byte pieces along K for the weight and X
    epilogues = True    # computed where each output is stored (make_store), or by split-K's sum
    min_arch = "sm_80"  # cp.async and mma.sync m16n8k16 (fp16 and bf16)
    arch_features = "cp.async, mma.sync"
    fill_sms = True     # up to 24 tokens from sm_90, row blocks that fill the SMs (decode_plan.filling_row_warps)
    zero_means_auto = ("warp_rows", "row_warps", "k_warps", "unroll", "stages", "split_k", "block_warps",
                       "ring_bytes")
    warp_rows: int = 0
    row_warps: int = 0
    k_warps: int = 0
    unroll: int = 0
    stages: int = 0
    split_k: int = 0
    block_warps: int = 0        # warps per block the automatic K warps fill; 0: two K warps (one from 64 tokens)
    ring_bytes: int = 0         # shared memory the automatic choice of stages fills; 0: half the SM's
    cluster_sum: bool = True    # K slices summed in their cluster (sm_90 and later, up to 8 slices); else a second kernel

    @property
    def pass_config(self) -> dict:
        """The fragments are local uint32 arrays that the mma reads by offset; StorageRewrite would
        retype one written only by 16-byte loads into an array of uint4, and the offsets would then
        count 16-byte elements."""
        return {"tirx.disable_storage_rewrite": True}

    @classmethod
    def scope_refusal(cls, wl) -> str | None:
        """A decode-sized product only: a few rows (or columns) against a large weight."""
        if wl.kind == "gemm" and decode_form(wl) is None:
            return (f"decode_gemm needs M ≤ {MAX_TOKENS} or N ≤ {MAX_TOKENS} (the few rows of a decode step), "
                    f"layout nt and no batch: {wl}")
        return None

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"decode_gemm takes float16 or bfloat16 inputs, not {wl.dtype}")
        refusal = self.scope_refusal(wl)
        if refusal:
            raise ScheduleParamError(refusal)
        if wl.K % 8:
            raise ScheduleParamError(f"decode_gemm copies 16 bytes along K: K = {wl.K} must be a multiple of 8")
        check_knobs("decode_gemm", self, wl)

    def plan(self, wl, gpu=None) -> DecodePlan:
        """Resolve the automatic parameters for ``wl`` on ``gpu`` (the current one by default).

        m16 tiles per warp: 2 from 32 tokens up (each X fragment then feeds two tiles), else 1;
        two 32-element pieces per warp and block step. Rows per block: 128 (64 where 128-row
        blocks would number fewer than half the SMs), each copy of X shared by all of them; two K
        warps (one from 64 tokens, whose accumulators fill the registers), or with ``block_warps``
        as many as fill the block to it. Stages: as many slots as half the SM's shared memory
        holds (2 to 8; two blocks per SM). Split-K: doubled while the blocks stay within one wave
        of what the SMs hold and the partials (written and read once) under a quarter of the
        weight's bytes. Measured on an H200 over every warp_rows × row_warps × k_warps (16, 32 ×
        1-8 × 1-4) on weights of 4096-28672 × 4096-14336 and 1-64 tokens: the choice is within 5%
        of the grid's best on each, where the earlier T-rows-per-block rule (X read from L2 once
        per 16 rows at 16 tokens) was up to 27% slower (reports/results/NVIDIA_H200/decode_blocks).
        Where 128-row blocks number more than two per SM, blocks of 80 rows (96 with 32-row warps):
        an SM draws about a fixed share of the bandwidth, so those given one block more finish last,
        and smaller blocks make that block smaller. On the seven of nine such weights it applies to,
        never slower than 128 rows and up to 1.22× faster (reports/results/NVIDIA_H200/decode_waves).
        Up to 24 tokens from sm_90, all of that gives way to the fewest row warps (2-8) whose row blocks
        of the whole K fit one per SM and reach half the SMs (``fill_sms``,
        decode_plan.filling_row_warps; K unsplit with ``cluster_sum``, the default): 1.036x faster
        on 105 products of 8-24 tokens, 0.95-1.17x (reports/results/NVIDIA_H200/decode_row_blocks)."""
        return plan_decode(self, wl, gpu or current_gpu())

    def launch(self, wl) -> Launch:
        p = self.plan(wl)
        return Launch(grid=(p.row_blocks * p.splits, 1, 1), block=(32, p.warps, 1),
                      shared_bytes=p.ring_bytes + 4 * p.shared_floats, dynamic_shared=True,
                      threads_from="32 × row_warps × k_warps",
                      shared_from="stages × (the warps' weight pieces + X's rows) + the K warps' sum")


def make_store(wl: Gemm, form: str, tokens: int, rows: int):
    """A macro: the single write of one output, C[t, r] (rows form) or C[r, t] (columns form),
    masked past the edges; ``C`` is the output, or with split-K the partials and ``part`` the
    block's slice. Into the output, the workload's epilogue is applied there (bias, activation,
    residual, scaling, the rounding to its output type: :func:`schedules.workloads.epilogue_value`;
    ``bias``, ``R``: its buffers, None where the workload has none)."""
    EPI, BIAS, RES = wl.has_epilogue, wl.bias, wl.residual

    def finished(value, bias, R, row, col):
        return epilogue_value(wl, value, bias[col] if BIAS else None, R[row, col] if RES else None)

    @T.macro
    def store(C, value, t, r, part, split, bias, R):
        if T.And(t < tokens, r < rows):
            if split:
                if form == "rows":
                    C[part, t, r] = value
                else:
                    C[part, r, t] = value
            elif form == "rows":
                if EPI:
                    C[t, r] = finished(value, bias, R, t, r)
                else:
                    C[t, r] = value
            elif EPI:
                C[r, t] = finished(value, bias, R, r, t)
            else:
                C[r, t] = value

    return store


def decode_kernel(wl: Gemm, p: DecodePlan, access: Access = Access()):
    """The TIR PrimFunc of plan ``p`` for ``wl`` (see the module's docstring): ``main(A, B, C)``, or
    with an epilogue or another output type ``main(A, B, [bias], [R], D)``. ``access``: how the
    operands are read (:class:`Access`; decode_gemm's by default)."""
    DT, K = wl.dtype, wl.K
    PT = PTX_TYPE[DT]
    FORM, TOK, ROWS = p.form, p.tokens, p.rows
    MT, NT, U, WR, WK, S = p.m_tiles, p.token_tiles, p.unroll, p.row_warps, p.k_warps, p.stages
    WARPS, THREADS = p.warps, 32 * p.warps
    SUB = K_STEP * U                # K elements of one warp per block step
    BSTEP = p.step_k                # ... of the block
    KT = ceil_div(K, BSTEP)         # block steps of the whole K
    KTS, SPLIT = p.steps_per_slice, p.splits
    RB, BROWS = p.row_blocks, p.block_rows
    GRID = RB * SPLIT
    ACC = p.acc
    K2 = K // 2                     # the operands as uint32 pairs: 16 bytes = 4 of them
    SLOT, XPITCH = p.slot_words, p.x_pitch
    WP = trans_pitch(MT)            # words per K row of a transposed weight tile
    RW = access.row_words           # words per weight row of a (piece, tile, row half): 16 (decode_gemm's) or 20
    WQ = 32 * WP if access.w_trans else MT * 2 * 8 * RW  # words of one warp's weight per 32-element piece
    W_WORDS = WARPS * U * WQ        # a slot's weight pieces: per warp, piece, tile, row half
    XP = BSTEP // 8                 # 16-byte pieces of one X row per step
    X_PIECES = 8 * NT * XP
    X_ROUNDS = ceil_div(X_PIECES, THREADS)
    X_EDGE = X_PIECES % THREADS != 0
    RED = max(1, p.shared_floats)
    ROUNDS = (WK - 1).bit_length()  # k_warps is a power of two: log2 of it
    HALF = WK // 2 * WR             # warps that park their sums in the first round
    EPI = wl.has_epilogue
    CLUSTER = p.cluster             # the slices of a row block: one cluster, summed in distributed shared memory
    if SPLIT > 1 and not CLUSTER:
        sum_kernel = split_sum_epilogue(wl, SPLIT)[0] if EPI else split_sum_kernel(wl.M, wl.N, SPLIT)[0]
    store = make_store(wl, FORM, TOK, ROWS)

    def held(i, j, h, e, lane, row0):
        """What a lane's fragment entry (m16 tile i, token group j, row half h, element e) holds:
        ``(accumulator index, token, row)``: lane 4g + c holds rows g, g + 8 of each tile, tokens
        2c, 2c + 1 of each group."""
        return (i * NT + j) * 4 + 2 * h + e, 8 * j + lane % 4 * 2 + e, row0 + 16 * i + 8 * h + lane // 4

    def copy(dst, src, ok):
        """One 16-byte cp.async, zero-filled where ``ok`` is false (past K, past the few rows)."""
        return T.ptx["cp.async.cg.shared.global"](T.address_of(dst), T.address_of(src), PIECE,
                                                  T.if_then_else(ok, T.uint32(PIECE), T.uint32(0)))

    # the thin-product paths (access other than decode_gemm's): narrower copies, a transposed weight
    # tile, X transposed on its way in. Sizes in uint32 words of the slot (two 16-bit elements)
    W_PIECES = not access.w_trans and access.w_bytes == 16   # decode_gemm's weight copies
    X_PIECES16 = not access.x_trans and access.x_bytes == 16  # ... and X's
    WW, XW = max(1, access.w_bytes // 4), max(1, access.x_bytes // 4)  # words per copy (2 bytes: one word of 2 loads)
    W_CPR = 8 * MT // WW            # copies per K row of a warp's transposed tile (one per lane and row: 32 rows)
    WPR = 16 // WW                  # copies per row of a K-contiguous weight's 32-element piece
    ODD_CPR = 8 * MT + 1            # 4-byte copies per K row of a transposed tile with an odd pitch
    W_LAST = (ROWS * K - 1) // 2 * 2  # the last even element of the weight: an odd pitch's copies start there at most
    W_ALL = ROWS * K
    XC = BSTEP // (2 * XW)          # copies per X row of a block step (X K-contiguous)
    X_COPIES = 8 * NT * XC if not access.x_trans else 8 * NT * BSTEP // 2
    XC_ROUNDS = ceil_div(X_COPIES, THREADS)
    XC_EDGE = X_COPIES % THREADS != 0
    T8 = 8 * NT

    def copy_n(dst, src, ok, size):
        """One cp.async of ``size`` bytes (16: .cg, 4 or 8: .ca), zero-filled where ``ok`` is false."""
        return T.ptx["cp.async.cg.shared.global" if size == 16 else "cp.async.ca.shared.global"](
            T.address_of(dst), T.address_of(src), size, T.if_then_else(ok, T.uint32(size), T.uint32(0)))

    def copy_odd(dst, W, e, ok, pitch, whole=True):
        """The 4-byte word of the weight (stored with ``pitch`` elements per row, odd) from its even
        element ``e``: zero-filled where ``ok`` is false, its second half left out (zero-filled) at
        the end of the weight (the address clamped into it) and where ``whole`` is false: there it
        is the next row's first element, which the mma would multiply by X's zero padding (an inf
        or NaN there would turn the row's output into NaN)."""
        return T.ptx["cp.async.ca.shared.global"](
            T.address_of(dst), T.address_of(W[T.min(e, W_LAST) // pitch, T.min(e, W_LAST) % pitch]), 4,
            T.if_then_else(T.And(ok, e < W_ALL),
                           T.if_then_else(T.And(whole, e + 1 < W_ALL), T.uint32(4), T.uint32(2)), T.uint32(0)))

    def odd_half(ring, row, e):
        """The 16 bits at half ``e`` of the shared row starting at word ``row``, as the low half of a word."""
        return T.bitwise_and(T.shift_right(ring[row + e // 2], T.Cast("uint32", e % 2 * 16)), T.uint32(0xFFFF))

    def realigned(lo, hi, late):
        """Two elements of a row that starts one element late: the high half of ``lo`` and the low
        half of ``hi``, where ``late``; else ``lo``."""
        return T.if_then_else(late, T.bitwise_or(T.shift_right(lo, T.uint32(16)), T.shift_left(hi, T.uint32(16))), lo)

    @T.macro
    def fetch_weight(ring, W, slot, bstep, warp, lane, row0):
        """The warp's weight pieces of block step ``bstep``: K-contiguous rows copied in pieces as wide
        as their pitch allows into decode_gemm's layout, or (``w_trans``) the stored K × rows tile,
        K row kk of each 32-element piece into row trans_position(kk) of the warp's tile."""
        for q in T.unroll(U):
            if access.w_trans and access.w_odd:
                # K row kk of the piece: its 8·MT + 1 words from the even element at or before
                # (k·ROWS + row0); k odd starts one element late (ROWS odd)
                for j in T.unroll(ODD_CPR):
                    T.evaluate(copy_odd(
                        ring[slot * SLOT + (warp * U + q) * WQ + trans_position((j * 32 + lane) // ODD_CPR) * WP
                             + (j * 32 + lane) % ODD_CPR],
                        W, (bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // ODD_CPR) * ROWS + row0
                        + (j * 32 + lane) % ODD_CPR * 2 - (j * 32 + lane) // ODD_CPR % 2,
                        bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // ODD_CPR < K, ROWS))
            elif access.w_odd:
                # row g's 16 words (and a 17th) from the even element at or before (r·K + k), r odd
                # starting one element late (K odd); rows past the weight's copy its last row
                for i in T.unroll(MT):
                    for h in T.unroll(2):
                        for c in T.unroll(4):
                            T.evaluate(copy_odd(
                                ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 8 * RW
                                     + (c * 32 + lane) // 16 * RW + lane % 16],
                                W, T.min(row0 + 16 * i + 8 * h + (c * 32 + lane) // 16, ROWS - 1) * K
                                + bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2
                                - T.min(row0 + 16 * i + 8 * h + (c * 32 + lane) // 16, ROWS - 1) % 2,
                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2 < K, K,
                                # a row that starts on an even element: its word at K - 1 ends in the next row
                                T.Or(T.min(row0 + 16 * i + 8 * h + (c * 32 + lane) // 16, ROWS - 1) % 2 == 1,
                                     bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2 + 1 < K)))
                        if lane < 8:
                            T.evaluate(copy_odd(
                                ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 8 * RW + lane * RW + 16],
                                W, T.min(row0 + 16 * i + 8 * h + lane, ROWS - 1) * K
                                + bstep * BSTEP + warp // WR * SUB + K_STEP * q + 32
                                - T.min(row0 + 16 * i + 8 * h + lane, ROWS - 1) % 2,
                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + 32 < K + 1, K))
            elif access.w_trans:
                for j in T.unroll(W_CPR):
                    if access.w_bytes >= 4:
                        T.evaluate(copy_n(
                            ring[slot * SLOT + (warp * U + q) * WQ + trans_position((j * 32 + lane) // W_CPR) * WP
                                 + (j * 32 + lane) % W_CPR * WW],
                            W[T.min(bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR, K - 1),
                              T.min(row0 + (j * 32 + lane) % W_CPR * 2 * WW, ROWS - 2 * WW)],
                            T.And(bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR < K,
                                  row0 + (j * 32 + lane) % W_CPR * 2 * WW < ROWS), access.w_bytes))
                    else:
                        ring[slot * SLOT + (warp * U + q) * WQ + trans_position((j * 32 + lane) // W_CPR) * WP
                             + (j * 32 + lane) % W_CPR] = pack_halves(
                            masked_half(W, bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR,
                                        row0 + (j * 32 + lane) % W_CPR * 2,
                                        T.And(bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR
                                              < K, row0 + (j * 32 + lane) % W_CPR * 2 < ROWS), K, ROWS),
                            masked_half(W, bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR,
                                        row0 + (j * 32 + lane) % W_CPR * 2 + 1,
                                        T.And(bstep * BSTEP + warp // WR * SUB + K_STEP * q + (j * 32 + lane) // W_CPR
                                              < K, row0 + (j * 32 + lane) % W_CPR * 2 + 1 < ROWS), K, ROWS))
            else:
                # the 128 words of a (piece, tile, row half) are its 8 rows' 32 elements in order (lane
                # 4g + c reads row g's words 4c …): any thread may fill any word, so consecutive lanes
                # take consecutive words of a row (coalesced), WPR copies per row
                for i in T.unroll(MT):
                    for h in T.unroll(2):
                        for c in T.unroll(4 // WW):
                            if access.w_bytes >= 4:
                                T.evaluate(copy_n(
                                    ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 128
                                         + (c * 32 + lane) // WPR * 16 + (c * 32 + lane) % WPR * WW],
                                    W[T.min(row0 + 16 * i + 8 * h + (c * 32 + lane) // WPR, ROWS - 1),
                                      T.min(bstep * BSTEP + warp // WR * SUB + K_STEP * q
                                            + (c * 32 + lane) % WPR * 2 * WW, K - 2 * WW)],
                                    bstep * BSTEP + warp // WR * SUB + K_STEP * q + (c * 32 + lane) % WPR * 2 * WW < K,
                                    access.w_bytes))
                            else:
                                ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 128 + c * 32
                                     + lane] = pack_halves(
                                    masked_half(W, row0 + 16 * i + 8 * h + (c * 32 + lane) // 16,
                                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2,
                                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2 < K,
                                                ROWS, K),
                                    masked_half(W, row0 + 16 * i + 8 * h + (c * 32 + lane) // 16,
                                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2 + 1,
                                                bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 16 * 2 + 1 < K,
                                                ROWS, K))

    @T.macro
    def fetch_x(ring, X, slot, bstep, warp, lane):
        """X's rows of block step ``bstep`` into the slot (token t's K elements contiguous, as
        decode_gemm lays them out): K-contiguous X in pieces as wide as its pitch allows, or X
        stored K × tokens two K rows at a time (consecutive threads on consecutive tokens: the
        loads coalesce), each pair of elements one shared word."""
        for x in T.unroll(XC_ROUNDS):
            if T.Or(not XC_EDGE, x * THREADS + warp * 32 + lane < X_COPIES):
                if access.x_trans:
                    ring[slot * SLOT + W_WORDS + (x * THREADS + warp * 32 + lane) % T8 * XPITCH
                         + (x * THREADS + warp * 32 + lane) // T8] = pack_halves(
                        masked_half(X, bstep * BSTEP + (x * THREADS + warp * 32 + lane) // T8 * 2,
                                    (x * THREADS + warp * 32 + lane) % T8,
                                    T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) // T8 * 2 < K,
                                          (x * THREADS + warp * 32 + lane) % T8 < TOK), K, TOK),
                        masked_half(X, bstep * BSTEP + (x * THREADS + warp * 32 + lane) // T8 * 2 + 1,
                                    (x * THREADS + warp * 32 + lane) % T8,
                                    T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) // T8 * 2 + 1 < K,
                                          (x * THREADS + warp * 32 + lane) % T8 < TOK), K, TOK))
                elif access.x_bytes >= 4:
                    T.evaluate(copy_n(
                        ring[slot * SLOT + W_WORDS + (x * THREADS + warp * 32 + lane) // XC * XPITCH
                             + (x * THREADS + warp * 32 + lane) % XC * XW],
                        X[T.min((x * THREADS + warp * 32 + lane) // XC, TOK - 1),
                          T.min(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2 * XW, K - 2 * XW)],
                        T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2 * XW < K,
                              (x * THREADS + warp * 32 + lane) // XC < TOK), access.x_bytes))
                else:
                    ring[slot * SLOT + W_WORDS + (x * THREADS + warp * 32 + lane) // XC * XPITCH
                         + (x * THREADS + warp * 32 + lane) % XC] = pack_halves(
                        masked_half(X, (x * THREADS + warp * 32 + lane) // XC,
                                    bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2,
                                    T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2 < K,
                                          (x * THREADS + warp * 32 + lane) // XC < TOK), TOK, K),
                        masked_half(X, (x * THREADS + warp * 32 + lane) // XC,
                                    bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2 + 1,
                                    T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XC * 2 + 1 < K,
                                          (x * THREADS + warp * 32 + lane) // XC < TOK), TOK, K))

    @T.macro
    def weight_fragments(ring, wf, slot, warp, lane, q):
        """A transposed tile's mma fragments, piece ``q``: per m16 tile and mma, one ldmatrix.x4.trans
        (lane l gives row h·16 + 8·(l / 16) + l % 8, rows 16i + 8·(l / 8 % 2) … + 7 of the warp's).
        With an odd pitch (the odd K rows start one element late: each holds its rows from the
        element before), the lane gathers its fragments' elements itself: element r of position p
        is half (r + p % 2) of the row's words."""
        if access.w_odd:
            for i in T.unroll(MT):
                for half in T.unroll(2):
                    for reg in T.unroll(4):  # a0..a3: rows g (+ 8 for a1, a3), slots 2c, 2c + 1 (+ 8 for a2, a3)
                        wf[i * 8 + 4 * half + reg] = T.bitwise_or(
                            odd_half(ring, slot * SLOT + (warp * U + q) * WQ + (half * 16 + reg // 2 * 8 + lane % 4 * 2)
                                     * WP, 16 * i + reg % 2 * 8 + lane // 4),
                            T.shift_left(odd_half(ring, slot * SLOT + (warp * U + q) * WQ
                                                  + (half * 16 + reg // 2 * 8 + lane % 4 * 2 + 1) * WP,
                                                  16 * i + reg % 2 * 8 + lane // 4 + 1), T.uint32(16)))
        else:
            for i in T.unroll(MT):
                for half in T.unroll(2):
                    T.evaluate(T.ptx_legacy.ldmatrix(
                        True, 4, ".b16", wf.data, i * 8 + 4 * half, ring.access_ptr("r"),
                        slot * SLOT + (warp * U + q) * WQ + (half * 16 + lane // 16 * 8 + lane % 8) * WP
                        + i * 8 + lane // 8 % 2 * 4, dtype="uint32"))

    @T.macro
    def fetch(ring, Wu, Xu, Wh, Xh, slot, bstep, warp, lane, row0):
        """Block step ``bstep`` into ring slot ``slot``: each lane's weight pieces (its rows g and
        g + 8 of each tile, elements 8c … 8c+7 of each of its warp's ``unroll`` 32-element pieces),
        then X's rows for the whole step, spread over the block's threads."""
        if W_PIECES:
            for q in T.unroll(U):
                for i in T.unroll(MT):
                    for h in T.unroll(2):
                        T.evaluate(copy(
                            ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 128 + lane * 4],
                            Wu[T.min(row0 + 16 * i + 8 * h + lane // 4, ROWS - 1),
                               T.min(bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 4 * 8, K - 8) // 2],
                            bstep * BSTEP + warp // WR * SUB + K_STEP * q + lane % 4 * 8 < K))
        else:
            fetch_weight(ring, Wh, slot, bstep, warp, lane, row0)
        if X_PIECES16:
            for x in T.unroll(X_ROUNDS):
                if T.Or(not X_EDGE, x * THREADS + warp * 32 + lane < X_PIECES):
                    T.evaluate(copy(
                        ring[slot * SLOT + W_WORDS + (x * THREADS + warp * 32 + lane) // XP * XPITCH
                             + (x * THREADS + warp * 32 + lane) % XP * 4],
                        Xu[T.min((x * THREADS + warp * 32 + lane) // XP, TOK - 1),
                           T.min(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XP * 8, K - 8) // 2],
                        T.And(bstep * BSTEP + (x * THREADS + warp * 32 + lane) % XP * 8 < K,
                              (x * THREADS + warp * 32 + lane) // XP < TOK)))
        else:
            fetch_x(ring, Xh, slot, bstep, warp, lane)

    @T.macro
    def compute(ring, acc, wt, wf, xf, slot, warp, lane):
        """The mmas of ring slot ``slot``: per 32-element piece, the lane's weight pieces (rows g
        and g + 8 interleaved into the mma's A registers) and X's token groups, read back with
        16-byte shared loads."""
        for q in T.unroll(U):
            if access.w_trans:
                weight_fragments(ring, wf, slot, warp, lane, q)
            elif access.w_odd:  # rows of 20 words; row g starts one element late where g is odd
                for i in T.unroll(MT):
                    for h in T.unroll(2):
                        for v in T.vectorized(4):
                            wt[v] = ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 8 * RW
                                         + lane // 4 * RW + lane % 4 * 4 + v]
                        for v in T.unroll(3):
                            wf[i * 8 + 2 * v + h] = realigned(wt[v], wt[v + 1], lane // 4 % 2 == 1)
                        wf[i * 8 + 6 + h] = realigned(
                            wt[3], ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 8 * RW
                                        + lane // 4 * RW + lane % 4 * 4 + 4], lane // 4 % 2 == 1)
            else:
                for i in T.unroll(MT):
                    for h in T.unroll(2):
                        for v in T.vectorized(4):
                            wt[v] = ring[slot * SLOT + (((warp * U + q) * MT + i) * 2 + h) * 128 + lane * 4 + v]
                        for v in T.unroll(4):
                            wf[i * 8 + 2 * v + h] = wt[v]
            for j in T.unroll(NT):
                for v in T.vectorized(4):
                    xf[j * 4 + v] = ring[slot * SLOT + W_WORDS + (8 * j + lane // 4) * XPITCH
                                         + (warp // WR * U + q) * 16 + lane % 4 * 4 + v]
            for i in T.unroll(MT):
                for j in T.unroll(NT):
                    for half in T.unroll(2):  # elements 8c..8c+3, then 8c+4..8c+7 of each lane
                        T.ptx_legacy.mma("m16n8k16", "row", "col", PT, PT, "fp32",
                                         wf.data, i * 8 + 4 * half, xf.data, j * 4 + 2 * half,
                                         acc.data, (i * NT + j) * 4, False, dtype="float32")

    W_SHAPE, X_SHAPE = (ROWS, K2), (TOK, K2)
    W_ARG = "B" if FORM == "rows" else "A"

    @T.macro
    def cluster_sum(ring, acc, pb, vals, part, warp, lane, row0, bias, R, C):
        """The K slices of a row block, one cluster (rank = slice), add up their sums: each parks its
        row warps' accumulators in its ring (word (e·WR + warp)·32 + lane for accumulator e), and
        after a cluster barrier slice s sums accumulators e ≡ s (mod slices) of every slice's ring
        (``ld.shared::cluster``, in slice order: the same sum on every run) and stores them with
        the epilogue. A second barrier keeps every ring alive until its peers have read it."""
        T.cuda.cta_sync()  # every warp is done with the ring (a K warp may still read its last slot)
        if warp < WR:
            for e in T.unroll(ACC):
                ring[(e * WR + warp) * 32 + lane] = T.reinterpret("uint32", acc[e])
        base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(ring.data)
        for r in T.unroll(SPLIT):  # each slice's ring in the cluster's shared window
            T.evaluate(T.ptx.mapa.shared__cluster.u32(pb[r], base, T.uint32(r)))
        T.cuda.cluster_sync()
        if warp < WR:
            for i in T.unroll(MT):
                for j in T.unroll(NT):
                    for h in T.unroll(2):
                        for e in T.unroll(2):
                            a, t, row = T.meta_var(held(i, j, h, e, lane, row0))
                            if a % SPLIT == part:
                                for r in T.unroll(SPLIT):  # accumulator a of slice r
                                    T.evaluate(T.ptx.ld.shared__cluster.f32(
                                        vals[r], pb[r] + T.uint32(4 * 32 * WR * a)
                                        + T.cast((warp * 32 + lane) * 4, "uint32")))
                                for r in T.unroll(1, SPLIT):
                                    vals[0] = vals[0] + vals[r]
                                store(C, vals[0], t, row, part, False, bias, R)
        T.cuda.cluster_sync()

    @T.macro
    def body(A, B, bias, R, C):
        if SPLIT > 1 and not CLUSTER:
            # the partial products: a global buffer of the host part (the device's workspace pool)
            P = T.alloc_buffer((SPLIT, wl.M, wl.N), "float32", scope="global")
        with T.launch_thread("blockIdx.x", GRID) as bid:
            if CLUSTER:
                rank = T.launch_thread("clusterCtaIdx.x", SPLIT)  # -> cuLaunchKernelEx cluster dims
            lane = T.launch_thread("threadIdx.x", 32)
            warp = T.launch_thread("threadIdx.y", WARPS)
            Wu = T.decl_buffer(W_SHAPE, "uint32", data=(B if W_ARG == "B" else A).data)
            Xu = T.decl_buffer(X_SHAPE, "uint32", data=(A if W_ARG == "B" else B).data)
            ring = T.alloc_buffer((S * SLOT,), "uint32", scope="shared.dyn")
            red = T.alloc_buffer((RED,), "float32", scope="shared")
            acc = T.alloc_buffer((ACC,), "float32", scope="local")
            wt = T.alloc_buffer((4,), "uint32", scope="local")
            wf = T.alloc_buffer((MT * 8,), "uint32", scope="local")
            xf = T.alloc_buffer((NT * 4,), "uint32", scope="local")
            for e in T.unroll(ACC):
                acc[e] = T.float32(0)
            if CLUSTER:  # a cluster: the SPLIT slices of one row block, consecutive blocks
                pb = T.alloc_buffer((SPLIT,), "uint32", scope="local")
                vals = T.alloc_buffer((SPLIT,), "float32", scope="local")
                row0: T.let[T.int32] = bid // SPLIT * BROWS + warp % WR * (16 * MT)
                part: T.let[T.int32] = bid % SPLIT
            else:
                row0: T.let[T.int32] = bid % RB * BROWS + warp % WR * (16 * MT)
                part: T.let[T.int32] = bid // RB
            # this block's K slice: steps first .. first + n - 1 (the last slice may be shorter)
            n: T.let[T.int32] = T.min(KTS, KT - part * KTS)
            for s in T.unroll(S - 1):
                if s < n:
                    fetch(ring, Wu, Xu, B if W_ARG == "B" else A, A if W_ARG == "B" else B, s, part * KTS + s,
                          warp, lane, row0)
                T.ptx["cp.async.commit_group"]()
            for it in T.serial(n):
                T.ptx["cp.async.wait_group"](S - 2)  # this thread's copies of step it have landed
                T.cuda.cta_sync()  # ... everyone's, and everyone is done with slot (it - 1) % S
                if it + S - 1 < n:
                    fetch(ring, Wu, Xu, B if W_ARG == "B" else A, A if W_ARG == "B" else B,
                          (it + S - 1) % S, part * KTS + it + S - 1, warp, lane, row0)
                T.ptx["cp.async.commit_group"]()
                compute(ring, acc, wt, wf, xf, it % S, warp, lane)
            # the K warps of each row group add up their sums, halving each round: warps
            # [stride, 2·stride) park theirs, warps [0, stride) add them
            for rnd in T.unroll(ROUNDS):
                if T.And(warp // WR >= (WK >> (rnd + 1)), warp // WR < (WK >> rnd)):
                    for e in T.unroll(ACC):
                        red[(e * HALF + warp - (WK >> (rnd + 1)) * WR) * 32 + lane] = acc[e]
                T.cuda.cta_sync()
                if warp // WR < (WK >> (rnd + 1)):
                    for e in T.unroll(ACC):
                        acc[e] = acc[e] + red[(e * HALF + warp) * 32 + lane]
                if rnd + 1 < ROUNDS:
                    T.cuda.cta_sync()
            if CLUSTER:
                cluster_sum(ring, acc, pb, vals, part, warp, lane, row0, bias, R, C)
            elif warp < WR:
                for i in T.unroll(MT):
                    for j in T.unroll(NT):
                        for h in T.unroll(2):
                            for e in T.unroll(2):
                                a, t, row = T.meta_var(held(i, j, h, e, lane, row0))
                                if SPLIT > 1:
                                    store(P, acc[a], t, row, part, True, bias, R)
                                else:
                                    store(C, acc[a], t, row, part, False, bias, R)
        if SPLIT > 1 and not CLUSTER:
            if EPI:
                sum_kernel(P, bias, R, C)
            else:
                sum_kernel(P, C)

    return kernel_entry(wl, body)


@register("decode_gemm", "gemm", DecodeConfig, aliases=("decode", "gemm_decode"), tags=("float16",))
def decode_gemm(wl: Gemm, cfg: DecodeConfig = DecodeConfig()):
    """Decode-sized products (M ≤ 64 rows against a large weight, Y = X·Wᵀ, or the mirror N ≤ 64)
    at the memory-bandwidth limit: the weight streamed once through a deep ring of 16-byte
    ``cp.async`` copies along K into ``mma.sync`` (the weight as its 16-row operand, the few rows as
    its 8-column one), K split over the warps of a block and, for weights with few rows, over
    blocks (on Hopper one thread-block cluster per row block, their sums added in distributed shared
    memory).

    The tiled tensor-core kernels pad a 64-row or 128-row tile around a few rows, and a handful of
    output tiles leave SMs idle with a long K loop each. Here nothing is padded but the mma's 8
    token columns; each lane's 16-byte piece feeds two mma instructions (K taken in a permuted
    order that both operands share); how much is in flight is the ring's depth, not what the
    compiler keeps in registers (plain loads had ptxas move each load next to its mma: 5 in flight
    per warp, 55-67% of the copy bandwidth); every output is written once.
    """
    cfg.check(wl)
    return s_tir.Schedule(decode_kernel(wl, cfg.plan(wl)))
