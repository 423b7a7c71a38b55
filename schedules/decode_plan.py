"""decode_gemm's plan (gemm 24, :mod:`schedules.gemm_decode`; thin_tc_gemm's too, :mod:`schedules.gemm_thin`):
which products it takes (:func:`decode_form`), how its operands are read (:class:`Access`), and the
numbers one launch is built from (:class:`DecodePlan`, resolved for a shape and a GPU by
:func:`plan_decode`): rows per warp and block, K warps, ring depth, K slices and whether a cluster
sums them, and the share of the bandwidth one block streams (:func:`sm_share`, the model's)."""

from __future__ import annotations

from dataclasses import dataclass

from .common import MAX_CLUSTER, ceil_div
from .gpus import arch_number

CLUSTER_ACC = 16         # accumulators per lane a cluster sum takes (up to 24 tokens; from 32 a lane has 32)
CLUSTER_BLOCKS_PER_SM = 1.5  # the grid the automatic split-K fills where clusters sum the slices
MAX_TOKENS = 64          # the few rows: at most 8 token groups of 8 (the mma's n = 8)
K_STEP = 32              # elements of K one lane-quad covers per piece: 4 lanes × 8
SHARED_STATIC = 48 * 1024  # the cross-warp sum's buffer: static shared memory


@dataclass(frozen=True)
class Access:
    """How the kernel reads its operands (decode_gemm's: both K-contiguous, 16-byte pieces; the
    thin-product step, :mod:`schedules.gemm_thin`, takes the others). ``w_trans``: the weight is
    stored K × rows (its rows contiguous), copied as stored into a K-row tile per warp and read by
    ``ldmatrix.trans``; ``w_bytes``/``x_bytes``: bytes per copy of the weight/X (16, 8 or 4 by
    cp.async, as the row pitch allows; 2: two plain loads packed into one shared word);
    ``x_trans``: X is stored K × tokens, loaded two K rows at a time and transposed on its way
    into the slot. ``w_odd``: the weight's pitch is an odd number of elements, so every other row
    starts at an odd element: each row is copied by 4-byte cp.async from the even element at or
    before its start (one word more), and the rows that start late are realigned on their way to
    the mma (a 16-bit funnel shift of the words a lane reads; in a transposed tile, by the row's
    lane in shared memory before ldmatrix)."""

    w_trans: bool = False
    w_bytes: int = 16
    x_trans: bool = False
    x_bytes: int = 16
    w_odd: bool = False  # an odd pitch (in elements) copied by 4-byte cp.async, odd rows one element late

    @property
    def row_words(self) -> int:
        """uint32 words per row of a K-contiguous weight's 32-element piece in a slot: 16, or 20
        where the pitch is odd (a 17th word: the row read from the even element before it; padded
        to keep 16-byte reads aligned)."""
        return 20 if self.w_odd and not self.w_trans else 16

    @property
    def decode(self) -> bool:
        return self == Access()


def trans_pitch(m_tiles: int) -> int:
    """uint32 words per K row of a warp's transposed weight tile (16·m_tiles elements): padded by
    16 bytes to an odd number of 16-byte chunks, so that the 8 rows one ldmatrix phase reads fall
    on distinct banks."""
    return 8 * m_tiles + 4


def trans_position(kk):
    """The row of K offset ``kk`` (0-31 of a 32-element piece) in a transposed weight tile: the
    permuted K order of the pieces (mma #h takes the elements 8c + 4h … 8c + 4h + 3) laid out so
    that each ldmatrix reads 8 consecutive rows: row h·16 + s for mma slot s."""
    return kk % 8 // 4 * 16 + kk % 4 // 2 * 8 + kk // 8 * 2 + kk % 2


def thin_form(wl) -> tuple[str, int, int] | None:
    """``(form, tokens, rows)`` of a thin product in any layout, or None (a batch, or neither side
    few): "rows" when M is the few (≤ 64; the weight is B), "columns" when N is (the weight is A; the
    output's rows are the weight's). thin_tc_gemm takes these (:mod:`schedules.gemm_thin`)."""
    if wl.kind != "gemm" or getattr(wl, "batched", False):
        return None
    if wl.M <= wl.N and wl.M <= MAX_TOKENS:
        return "rows", wl.M, wl.N
    if wl.N <= MAX_TOKENS:
        return "columns", wl.N, wl.M
    return None


def decode_form(wl) -> tuple[str, int, int] | None:
    """:func:`thin_form` in layout nt only (both operands K-contiguous): the products decode_gemm takes."""
    return thin_form(wl) if wl.kind == "gemm" and wl.layout == "nt" else None


@dataclass(frozen=True)
class DecodePlan:
    """The numbers one launch is built from (:meth:`DecodeConfig.plan`)."""

    form: str          # "rows" (tokens = M, weight = B) or "columns" (tokens = N, weight = A)
    tokens: int        # T, the few rows
    rows: int          # R, the weight's rows
    m_tiles: int       # m16 tiles per warp
    row_warps: int     # warps along the rows in a block
    k_warps: int       # warps along K in a block
    unroll: int        # 32-element K pieces per warp per block step
    stages: int        # ring slots
    splits: int        # K slices on separate blocks
    steps_per_slice: int
    cluster: bool = False  # the slices of a row block are one cluster, summed in distributed shared memory

    @property
    def token_tiles(self) -> int:
        return ceil_div(self.tokens, 8)

    @property
    def block_rows(self) -> int:
        return 16 * self.m_tiles * self.row_warps

    @property
    def row_blocks(self) -> int:
        return ceil_div(self.rows, self.block_rows)

    @property
    def warps(self) -> int:
        return self.row_warps * self.k_warps

    @property
    def step_k(self) -> int:
        """K elements of one block step: every K warp's ``unroll`` pieces of 32."""
        return K_STEP * self.unroll * self.k_warps

    @property
    def acc(self) -> int:
        """fp32 accumulators per lane: 4 per (m16 tile, token group)."""
        return 4 * self.m_tiles * self.token_tiles

    @property
    def x_pitch(self) -> int:
        """uint32 words per X row in a slot: the step's pieces, padded to an odd multiple of 64
        bytes so that the 8 rows one fragment load reads fall on both halves of the banks."""
        words = self.step_k // 2  # a multiple of 16 (64 bytes)
        return words if words // 16 % 2 else words + 16

    @property
    def slot_words(self) -> int:
        """uint32 words of one ring slot: every warp's weight pieces, then X's 8·⌈T/8⌉ rows."""
        return self.warps * self.unroll * self.m_tiles * 2 * 32 * 4 + 8 * self.token_tiles * self.x_pitch

    @property
    def ring_bytes(self) -> int:
        return 4 * self.stages * self.slot_words

    @property
    def shared_floats(self) -> int:
        """The cross-warp sum's buffer: in its first round half of the K warps of each row group
        park their accumulators there."""
        return self.k_warps // 2 * self.row_warps * 32 * self.acc


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def filling_row_warps(groups: int, sms: int) -> int:
    """Row warps (2-8) whose blocks of K unsplit fill the SMs best in one round: the fewest whose
    ⌈groups / warps⌉ row blocks do not exceed the SMs, where those reach at least half of them;
    0 where none does (too few rows for half the SMs at 2 warps, or more than 8 warps' worth
    of row groups per SM). Each block streams its rows at a rate of its own: measured with ncu on
    an H200 (16 tokens against a 6144 × 4096 weight), 96 blocks of 64 rows read at 54% of the
    DRAM bandwidth while a GEMV's grid over every SM read the same weight at 70%; 128 blocks of 48
    rows ran 1.05x faster than the 96 (``…H200/decode_row_blocks/``)."""
    for rw in range(2, 9):
        blocks = ceil_div(groups, rw)
        if blocks <= sms:
            return rw if 2 * blocks >= sms else 0
    return 0


def _block(cfg, wl, gpu, form, tokens, rows, mt, rw, unroll):
    """A block of ``rw`` row warps: its K warps, ring depth, and how many such blocks the SMs hold
    at once (``(probe, stages, slots)``; the probe's stages and splits are 1)."""
    nt = ceil_div(tokens, 8)
    if cfg.block_warps:
        kw = cfg.k_warps or max(1, cfg.block_warps // rw)
    else:  # two K warps: the two halves of a block step's K (one from 64 tokens: its accumulators)
        kw = cfg.k_warps or (2 if nt <= 4 else 1)
    while not cfg.k_warps and kw > 1 and (K_STEP * unroll * kw * 2 > wl.K
                                          or kw // 2 * rw * 32 * 4 * mt * nt * 4 > SHARED_STATIC):
        kw //= 2
    probe = DecodePlan(form, tokens, rows, mt, rw, kw, unroll, 1, 1, 1)
    # two blocks per SM, each ring as deep as its half of the SM's shared memory allows
    budget = cfg.ring_bytes or gpu.smem_per_sm // 2 - 4 * probe.shared_floats - 8 * 1024
    stages = cfg.stages or max(2, min(8, budget // (4 * probe.slot_words)))
    block_bytes = 4 * stages * probe.slot_words + 4 * probe.shared_floats + 1024
    slots = gpu.sms * max(1, min(gpu.smem_per_sm // block_bytes, 64 // probe.warps))
    return probe, stages, slots


def plan_decode(cfg, wl, gpu) -> DecodePlan:
    form, tokens, rows = decode_form(wl) or ("rows", wl.M, wl.N)
    nt = ceil_div(tokens, 8)
    mt = cfg.warp_rows // 16 if cfg.warp_rows else (2 if nt >= 4 else 1)
    groups = ceil_div(rows, 16 * mt)
    unroll = cfg.unroll or 2
    # K slices: at most so many that their fp32 partials (written and read once) stay under a
    # quarter of the weight's bytes: 4·S·T / K ≤ 1/4
    most = cfg.split_k or max(1, wl.K // (16 * tokens))
    # rows per block: 128 share each copy of X (its L2 traffic then 8·⌈T/8⌉ / 128 of the weight's, and
    # a block step moves 128 rows × its K of weight), 64 where 128-row blocks would not occupy half
    # the SMs (the weights of 4096-8191 rows on an H200's 132 SMs)
    block_rows = 128 if rows >= 64 * gpu.sms else 64
    rw = cfg.row_warps or max(1, min(block_rows // (16 * mt), _pow2_at_least(groups), 8))
    if cfg.fill_sms and not (cfg.row_warps or cfg.split_k) and mt == 1 and arch_number(gpu.arch) >= 90:
        # up to 24 tokens from sm_90 (measured on an H200): as many row blocks as fill the SMs in one
        # round, K unsplit (what the slices below did with fewer, larger blocks, and a cluster sum).
        # Unsplit where the slices would be summed in clusters (the default), which stop at half the
        # SMs; with cluster_sum=False the slots rule below may still split them (not measured)
        rw = filling_row_warps(groups, gpu.sms) or rw
    probe, stages, slots = _block(cfg, wl, gpu, form, tokens, rows, mt, rw, unroll)
    if not cfg.row_warps and probe.row_blocks > 2 * gpu.sms:
        # more than two blocks per SM: smaller blocks (80 rows, 96 with 32-row warps), so that the
        # SMs' shares differ by less when the blocks run out (the last ones are small)
        rw = 5 if mt == 1 else 3
        probe, stages, slots = _block(cfg, wl, gpu, form, tokens, rows, mt, rw, unroll)
    kw = probe.k_warps
    steps = ceil_div(wl.K, probe.step_k)
    # the slices summed in their cluster: from sm_90, where a lane parks few accumulators (at 64
    # tokens its 64, read back from every slice, cost more than the second kernel: H200, 4 of 4 layers)
    clustered = cfg.cluster_sum and arch_number(gpu.arch) >= 90 and probe.acc <= CLUSTER_ACC
    splits = cfg.split_k
    if not splits:
        # as many slices as keep the blocks in one wave (the blocks the SMs' shared memory holds); in
        # clusters, within 1.5 blocks per SM: a cluster's blocks are placed on one GPC together and
        # wait for each other at the end, and grids of 256-320 blocks on 132 SMs ran 15-30% slower
        # than the same grid without clusters (H200), those of 128-192 blocks 0-10% slower; and
        # splitting row blocks that already reach half the SMs was slower than streaming each row
        # block's whole K (H100: 72-96 row blocks of 4608-6144 rows, 1.04-1.18x)
        most_blocks = int(CLUSTER_BLOCKS_PER_SM * gpu.sms) if clustered else slots
        splits = 1
        while (probe.row_blocks * splits * 2 <= most_blocks and splits * 2 <= most and steps >= 4 * splits
               and not (clustered and probe.row_blocks * splits >= gpu.sms / 2)):
            splits *= 2
        if clustered and splits == 1 and probe.row_blocks <= gpu.sms and not (cfg.stages or cfg.ring_bytes):
            # K unsplit, one block per SM: its ring may take the SM's shared memory (a 16-warp block's
            # 2 slots left 10240 rows at 80 blocks 1.25x slower than with 5)
            budget = gpu.smem_per_sm - 4 * probe.shared_floats - 8 * 1024
            stages = max(2, min(8, budget // (4 * probe.slot_words)))
    per_slice = ceil_div(steps, splits)
    splits = ceil_div(steps, per_slice)  # slices that would start past K are dropped
    cluster = clustered and 1 < splits <= MAX_CLUSTER
    return DecodePlan(form, tokens, rows, mt, rw, kw, unroll, stages, splits, per_slice, cluster)


def sm_share(p: DecodePlan, gpu) -> float:
    """How many times an SM's even share of the bandwidth one block streams where the grid has fewer
    blocks than SMs: 2 for the blocks of up to 24 tokens on sm_90 (8-16 warps, a ring that fills the
    SM when K is not split: on an H100, 72 such blocks of a 4608 × 3584 weight at 16 tokens streamed
    it as fast as a read of its bytes over every SM), else 1 (at 64 tokens a block of two warps
    streamed at its share: 56 blocks of 61 tokens took 2.6× cuBLAS's time)."""
    return 2.0 if arch_number(gpu.arch) >= 90 and p.acc <= CLUSTER_ACC else 1.0
