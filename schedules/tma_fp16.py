"""The fp16/bf16 pieces of the Hopper TMA steps (gemm 20-23): the configuration (:class:`TmaConfig`), the tile geometry
and wgmma descriptors (:class:`Geometry`), the TMA loader, the wgmma K-tile macro, the epilogue (the fp32 accumulators
to C, or through a linear layer's epilogue to D in its type: :func:`make_fused_epilogue`), and gemm 20's one-block-
per-tile kernel that the warp-specialized kernel of gemm 21-23 starts from (:func:`simple_kernel`). The steps
themselves are registered in gemm_tma.py (gemm 20) and gemm_tma_ws.py (gemm 21-23); see gemm_tma.py for what TVM 0.27
provides for them and how the operand layouts and batches are served."""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from .cluster_sum import check_cluster_sum
from .common import ceil_div
from .errors import ScheduleParamError
from .staged_store import staged_bytes
from .step_config import StepConfig
from .tma_store import tma_store_bytes, tma_store_refusal
from .tma_common import (DESC_SWIZZLE_128B, ITEMSIZE, PTX_TYPE, ROW_BYTES, WARPGROUP, b_box_rows, check_split_k,
                         check_stream_k, encode_map, fence_acc, grouped_tile, slice_of, sms_of, split_k_tiles,
                         split_slices, split_workspace_bytes, stream_k_grid, stream_pieces, tma_launch, tma_load,
                         tma_multicast)
from .wgmma_epilogue import kernel_entry, make_fused_store
from .workloads import LAYOUTS, Gemm, epilogue_value


# The row pitch the dispatcher's padded copies take (``pad_pitch``): the TMA unit reads rows that start 16 bytes off
# a 32-byte boundary slowly (3000 x 3000 x 3000 bf16, K pitch 6000 bytes: 437 TFLOP/s where K = 3008 ran 672), and a
# copy that runs anyway costs no more for rows of whole 128-byte lines: 18 padded fp16 and tf32 products ran 1.11x
# faster than with 16-byte rows, up to 1.45x (1773 x 3253 x 9745 fp16: 350.9 -> 241.3 us), slower on none (H100,
# reports/results/NVIDIA_H100_80GB_HBM3/pad_pitch)
ALIGNED_PITCH = 128


def padded_copies(misaligned: bool) -> dict:
    """The knobs of a TMA configuration for rows a tensor map cannot take (``misaligned``): A and B
    copied into buffers whose rows are whole 128-byte lines (``pad_operands``, ``pad_pitch`` =
    :data:`ALIGNED_PITCH`); none for aligned rows."""
    return dict(pad_operands=True, pad_pitch=ALIGNED_PITCH) if misaligned else {}


@dataclass(frozen=True)
class TmaConfig(StepConfig):
    """``block_m × block_n`` output tile per block, split over ``consumers`` warpgroups along M (``block_m / consumers``
    rows each, a multiple of 64: one or two m64 wgmmas); K tiles of ``block_k`` = 64 (one 128-byte swizzle row);
    ``stages`` ring slots; ``group_m`` block-rows per group of the grouped tile order; ``sms`` blocks of the
    persistent grid (0: one per SM of the GPU the choice is made for, schedules.common.current_gpu; the ring takes
    most of an SM's shared memory, so one block per SM); ``producer_regs``/``consumer_regs``: the ``setmaxnreg``
    budgets (per thread; (producer + consumers·n)·128 ≤ 65536); ``split_k``: K slices (warp-specialized kernel
    only): the work units become (output tile, K slice) pairs, each storing an fp32 partial tile into a workspace
    that a second kernel sums into C (see :meth:`k_split`); ``stream_k`` (persistent warp-specialized kernel,
    ``split_k`` 1): the K tiles of the partial last round of output tiles (all tiles, where there are fewer than
    SMs) shared out evenly over the blocks after the whole rounds (tma_common.StreamUnits), so that a fraction of
    a round of tiles (448 tiles on 132 SMs: 3.4 rounds) or a few tiles over a long K leave no SM idle; the tiles
    split between blocks are finished by a fix-up kernel that adds the blocks' fp32 pieces and writes C once
    (:meth:`workspace_bytes`). ``staged_store`` (a float32 C without an epilogue, warp-specialized kernel): C
    leaves through a shared-memory area per consumer warp, a row segment of 128 bytes per store
    (:func:`schedules.staged_store.make_staged_epilogue`). ``cluster_sum``: split-K's slices of a tile added in
    their cluster, with no second kernel (:mod:`schedules.cluster_sum`). ``pad_pitch``: the row pitch in bytes of
    ``pad_operands``' copies (16: what a tensor map needs; the dispatcher asks for :data:`ALIGNED_PITCH`)."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    stages: int = 4
    consumers: int = 2
    warp_specialized: bool = True
    persistent: bool = True
    group_m: int = 8
    sms: int = 0
    cluster_m: int = 1
    producer_regs: int = 40
    consumer_regs: int = 0  # 0: the most the producer's registers pay for (232 with 2 consumers)
    l2_promotion: int = 2  # CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
    vector_store: bool = True  # float2 stores of adjacent accumulator pairs (needs N even)
    pad_operands: bool = False  # rows not a multiple of 16 bytes: copy A / B into padded workspaces first
    pad_pitch: int = 16  # the padded copies' row pitch: a multiple of 16 bytes (16, 32, 64 or 128)
    split_k: int = 1  # K slices: (tile, slice) units, fp32 partials P[slices, M, N] summed by a 2nd kernel
    stream_k: bool = False  # K tiles shared out evenly over the persistent blocks; split tiles: a fix-up kernel
    staged_store: bool = False  # C through per-warp shared-memory areas, one 128-byte row segment per store
    cluster_sum: bool = False  # split-K's slices of a tile in one cluster, summed in distributed shared memory
    dtypes = ("float16", "bfloat16")
    #: block_n a multiple of 16 (not only of 64) where B is stored N×K (k-major): its pieces are then
    #: b_box_rows(block_n) rows each; the FP8 kernels keep 64-row pieces
    narrow_panels = True
    epilogues = True  # computed on the consumers' accumulators, D stored once in its type (wgmma_epilogue.py)
    layouts = LAYOUTS  # a transposed operand: m/n-major or k-major tiles, read through wgmma's transpose bits
    batched = True     # a bmm: 3-D tensor maps, the work units walk the batch (batch-major)
    step_name = "persistent_gemm"
    archs = ("sm_90a",)  # wgmma, setmaxnreg, TMA multicast: Hopper's alone (Blackwell has tcgen05 instead)
    arch_features = "wgmma, TMA, setmaxnreg"
    zero_means_auto = ("sms", "consumer_regs")  # 0: the GPU's SM count; what the producer frees

    # --- derived sizes ------------------------------------------------------------------------
    @property
    def wg_rows(self) -> int:
        return self.block_m // self.consumers

    @property
    def m_subtiles(self) -> int:  # m64 wgmmas per consumer warpgroup per k step
        return self.wg_rows // 64

    @property
    def acc_regs(self) -> int:  # fp32 accumulators per consumer thread
        return self.m_subtiles * self.block_n // 2

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.consumers + int(self.warp_specialized))

    @property
    def launch_regs(self) -> int:
        """Registers per thread at launch, the kernel's ``__maxnreg__``: the block's full share of
        64K (168 for 384 threads). Without it ptxas starts a light kernel with fewer (58 for a
        128x64 tile) and the budgets below no longer add up (a count at launch outside the producer's
        and the consumers' budgets deadlocks the kernel: ``setmaxnreg.inc`` waits for registers the
        producer's ``dec`` never frees)."""
        return min(255, 65536 // self.threads // 8 * 8)

    @property
    def consumer_budget(self) -> int:
        """``setmaxnreg.inc`` count: what the producer warpgroup gives back, shared by the consumers."""
        if self.consumer_regs:
            return self.consumer_regs
        r = self.launch_regs
        return min(256, (r + (r - self.producer_regs) // self.consumers) // 8 * 8)

    def stage_bytes(self, itemsize: int = 2) -> int:
        return (self.block_m + self.block_n) * self.block_k * itemsize

    def shared_bytes(self, itemsize: int = 2) -> int:
        # the ring + 1 KiB to align it to 1024 bytes (the 128-byte swizzle pattern repeats every
        # 1024 bytes, TMA writes and wgmma reads it from there); barriers are static shared memory
        # (with staged_store, each consumer warp's staging area after the ring; with tma_store, its boxes)
        return self.stages * self.stage_bytes(itemsize) + 1024 + staged_bytes(self) + tma_store_bytes(self)

    def tiles(self, M: int, N: int) -> tuple[int, int]:
        return ceil_div(M, self.block_m), ceil_div(N, self.block_n)

    def grid(self, M: int, N: int, K: int | None = None, batch: int = 1) -> int:
        """Blocks launched (of the first kernel): one per (cluster) work unit or, persistent (not cluster_sum), at most
        one per SM (whole clusters). A unit: a (cluster) tile, with ``split_k`` a (tile, K slice) pair, in a bmm a
        (product, tile) pair."""
        tm, tn = self.tiles(M, N)
        cl_tiles = ceil_div(tm, self.cluster_m) * tn  # cluster tiles: cluster_m block tiles each
        if self.stream_k:  # one block (cluster) per SM, fewer only where there are fewer K tiles
            if K is None:
                raise ValueError(f"{self.step_name}: the grid of stream_k depends on K: grid(M, N, K)")
            return self.cluster_m * stream_k_grid(cl_tiles, ceil_div(K, self.block_k), sms_of(self) // self.cluster_m)
        units = cl_tiles * split_slices(self, K) * batch
        if not self.persistent or self.cluster_sum:
            return self.cluster_m * units
        return self.cluster_m * min(sms_of(self) // self.cluster_m, units)

    def k_split(self, K: int) -> tuple[int, int]:
        """(K tiles per work unit, K slices used): ``split_k`` slices of ceil(KT / split_k) K tiles each (KT =
        ceil(K / block_k)); slices that would start past K are dropped (KT = 9, split_k = 8: 2 K tiles per unit,
        5 slices), so only the last slice can run past the end of K, its K tiles there neither loaded nor multiplied."""
        return split_k_tiles(self, K)

    def workspace_bytes(self, wl: Gemm) -> int:
        """Bytes of the fp32 partial products P[slices, M, N] (0 without split-K or with cluster_sum), allocated
        per call from the device's workspace pool (TVMBackendAllocWorkspace); with ``stream_k`` the blocks'
        pieces of split tiles, two block tiles per block."""
        if self.stream_k:
            return 4 * stream_pieces(self, wl) * self.block_m * self.block_n
        return 0 if self.cluster_sum else split_workspace_bytes(self, wl)

    def check(self, wl: Gemm):
        M, N, K, dtype = wl.M, wl.N, wl.K, wl.dtype
        name = self.step_name
        if dtype not in ITEMSIZE:
            raise ScheduleParamError(f"{name} takes float16 or bfloat16 inputs, not {dtype}")
        item = ITEMSIZE[dtype]
        # a tensor map's row pitch (globalStrides) must be a multiple of 16 bytes; the rows are the
        # stored operand's (A: K, or M when stored transposed; B: N, or K when stored transposed)
        for what, dim, pitch in (("A", *(("M", M) if wl.trans_a else ("K", K))),
                                 ("B", *(("K", K) if wl.trans_b else ("N", N)))):
            if pitch * item % 16 and not self.pad_operands:
                raise ScheduleParamError(
                    f"{name}: the row pitch of {what} ({dim}) is {pitch * item} bytes; TMA needs a multiple of "
                    f"16 ({dim} must be a multiple of {16 // item} for {dtype}; pad_operands=true copies the "
                    f"operand into a padded buffer first), got M,N,K = {M},{N},{K}, layout {wl.layout}")
        if self.staged_store and not self.warp_specialized:
            raise ScheduleParamError(f"{name}: staged_store is for the warp-specialized kernel "
                                     f"(warp_specialized=true): its consumer warps stage C without a block barrier")
        if wl.batched and self.split_k > 1:
            raise ScheduleParamError(f"{name}: a batch fills the GPU the way split-K does: split_k must be 1 "
                                     f"for a bmm, got {self.split_k}")
        self.check_pad_pitch()
        if self.block_k * item != ROW_BYTES:
            raise ScheduleParamError(f"{name}: block_k must be {ROW_BYTES // item} (one 128-byte row), "
                                     f"got {self.block_k}")
        self.check_structure(wl, item)

    def check_structure(self, wl: Gemm, item: int):
        """The checks that do not depend on the input type beyond its size ``item`` (bytes): the
        block tile and its consumers, the register budgets, the ring, the cluster, split-K."""
        name = self.step_name
        if self.consumers not in (1, 2, 3, 4) or self.block_m % (64 * self.consumers):
            raise ScheduleParamError(f"{name}: block_m ({self.block_m}) must be 64·consumers·(1 or 2), "
                                     f"consumers={self.consumers}")
        if self.m_subtiles not in (1, 2):
            raise ScheduleParamError(f"{name}: each consumer warpgroup takes 64 or 128 rows, got "
                                     f"{self.wg_rows} (block_m={self.block_m}, consumers={self.consumers})")
        if self.block_m > 256:
            raise ScheduleParamError(f"{name}: block_m ≤ 256 (one TMA box), got {self.block_m}")
        step = 16 if self.narrow_panels and wl.trans_b else 64
        if self.block_n % step or not 64 <= self.block_n <= 256:
            narrow = " (with B stored N×K, layouts nt and tt: a multiple of 16 from 64 to 256)" if self.narrow_panels else ""
            raise ScheduleParamError(f"{name}: block_n must be 64, 128, 192 or 256{narrow}, got {self.block_n}")
        if getattr(self, "tma_store", False):
            refusal = tma_store_refusal(self, wl)
            if refusal:
                raise ScheduleParamError(f"{name}: {refusal}")
        if self.staged_store and self.block_n % 32:
            raise ScheduleParamError(f"{name}: staged_store stages C 32 columns at a time: block_n must be a multiple "
                                     f"of 32, got {self.block_n}")
        if not self.warp_specialized and self.acc_regs > 128:  # the warp-specialized kernel: see below
            raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators per thread (> 128) would spill: "
                                     f"lower block_n or raise consumers")
        if not self.warp_specialized and self.persistent:
            raise ScheduleParamError(f"{name}: persistent needs warp_specialized (the simple kernel is one "
                                     f"block per tile)")
        self.check_ring(item)
        if self.warp_specialized:
            if self.consumers not in (1, 2, 3):
                raise ScheduleParamError(f"{name}: warp_specialized takes 1 to 3 consumer warpgroups (their "
                                         f"setmaxnreg budget is what the producer frees), got {self.consumers}")
            self.check_budgets()
            c = self.consumer_budget
            if self.acc_regs > c - 40:
                raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators per thread leave too few of the "
                                         f"{c} registers a consumer gets: lower block_n or block_m")
        if self.cluster_m not in (1, 2):
            raise ScheduleParamError(f"{name}: cluster_m must be 1 or 2, got {self.cluster_m}")
        pieces = self.block_n // b_box_rows(self.block_n)  # B's TMA boxes per K tile, shared out over the cluster
        if self.cluster_m == 2 and (not self.warp_specialized or pieces % 2):
            raise ScheduleParamError(f"{name}: cluster_m=2 needs warp_specialized and an even number of B pieces "
                                     f"(block_n 128 and 256: 2 and 4 of 64 rows; 224: 4 of 56), got block_n="
                                     f"{self.block_n} ({pieces})")
        if self.group_m < 1:
            raise ScheduleParamError(f"{name}: group_m must be ≥ 1")
        check_split_k(self, wl)
        check_stream_k(self, wl, ceil_div(ceil_div(wl.M, self.block_m), self.cluster_m) * ceil_div(wl.N, self.block_n))
        if self.split_k > 1 and not self.warp_specialized:
            raise ScheduleParamError(f"{name}: split_k needs warp_specialized (the simple kernel is one block "
                                     f"per tile), got split_k={self.split_k}")
        check_cluster_sum(self, wl, item)

    def check_ring(self, item: int):
        """The ring: two stages or more, and (with the staging areas) within the 227 KiB of shared memory a
        block may take, for elements of ``item`` bytes."""
        if self.stages < 2:
            raise ScheduleParamError(f"{self.step_name}: stages must be ≥ 2, got {self.stages}")
        if self.shared_bytes(item) > 227 * 1024:
            raise ScheduleParamError(f"{self.step_name}: the ring needs {self.shared_bytes(item)} bytes of shared "
                                     f"memory (> 227 KiB): fewer stages or a smaller tile")

    def check_budgets(self):
        """The ``setmaxnreg`` budgets: multiples of 8, producer ≤ the launch count ≤ consumer ≤ 256, and what the
        consumers take beyond the launch count no more than the producer gives back."""
        p, c, r = self.producer_regs, self.consumer_budget, self.launch_regs
        if p % 8 or c % 8 or not 24 <= p <= r <= c <= 256 or self.consumers * (c - r) > r - p:
            raise ScheduleParamError(
                f"{self.step_name}: setmaxnreg budgets (multiples of 8, 24 ≤ producer ≤ {r} ≤ consumer ≤ 256, "
                f"consumers·(consumer - {r}) ≤ {r} - producer) do not hold: producer {p}, consumer {c}")

    def check_pad_pitch(self):
        if self.pad_pitch not in (16, 32, 64, 128):
            raise ScheduleParamError(f"{self.step_name}: pad_pitch is the padded copies' row pitch in bytes: 16, 32, "
                                     f"64 or 128, got {self.pad_pitch}")

    def copied(self, wl: Gemm) -> tuple[bool, bool]:
        """(A, B): whether a copy kernel runs first for the operand: ``pad_operands`` and rows
        (of the operand as stored) that are not a whole number of 16 bytes (copied to rows of ``pad_pitch`` bytes)."""
        return wl.misaligned_rows() if self.pad_operands else (False, False)

    @property
    def pass_config(self) -> dict:
        """With padded copies and split-K partials in one call, TVM's StorageRewrite sees the padded
        operand's last use at the tensor map's encoding (the kernel reads it only through the map)
        and gives the partials the same memory: measured wrong on an H200. Keep them apart."""
        partials = self.split_k > 1 or self.stream_k
        return {"tirx.disable_storage_rewrite": True} if self.pad_operands and partials else {}

    def describe(self) -> str:
        ws = f"ws {self.consumers}c" if self.warp_specialized else f"nows {self.consumers}wg"
        return (f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} {ws}"
                f"{' pers' if self.persistent else ''}"
                f"{' clu2' if self.cluster_m == 2 else ''}"
                f"{f' sk{self.split_k}' if self.split_k > 1 else ''}"
                f"{' streamk' if self.stream_k else ''}{' csum' if self.cluster_sum else ''}")


# ------------------------------------------------------------------------------------------------
# pieces shared by the fp16/bf16 kernels, gemm 20-23 (plain Python helpers returning TIR
# expressions, so sizes stay compile-time constants and the simplifier sees the loop ranges)
# ------------------------------------------------------------------------------------------------
class Geometry:
    """Sizes and shared-memory layout of one kernel. Every operand tile is stored as 128-byte
    swizzled rows, in one of wgmma's two canonical forms for 16-bit types:

    * **k-major** (A of nn/nt, B of nt/tt: K contiguous in memory): rows of 64 K-elements, one
      row per row of A (column of B); LBO unused, SBO = 8 rows; a k16 step moves 32 bytes along
      the rows; the wgmma transpose bit 0.
    * **m/n-major** (A of tn/tt, B of nn/tn): panels of 64 M (N) elements, each 64 K rows deep;
      LBO = one panel (the next 64 columns), SBO = 8 K rows; a k16 step moves 16 rows (2048
      bytes); transpose bit 1.

    Either way 64 rows (columns) of a tile take one 8 KiB piece, so a warpgroup's rows start at
    the same offset in both forms."""

    def __init__(self, wl: Gemm, cfg: TmaConfig):
        M, N, K = wl.M, wl.N, wl.K
        self.M, self.N, self.K, self.DT, self.cfg = M, N, K, wl.dtype, cfg
        self.item = ITEMSIZE[wl.dtype]
        self.BM, self.BN, self.BK, self.S = cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages
        self.TA, self.TB = wl.trans_a, wl.trans_b
        self.BATCH = wl.batch if wl.batched else 0  # 0: a plain GEMM (2-D operands and tensor maps)
        self.A_BYTES = self.BM * self.BK * self.item  # one A tile
        self.PANEL_BYTES = 64 * self.BK * self.item  # 64 rows (columns) of a tile: one 8 KiB piece
        self.A_PIECES = self.BM // 64 if self.TA else 1  # TMA boxes per A tile (k-major: one box)
        self.B_ROWS = b_box_rows(self.BN)  # B rows (columns of C) per TMA box: 64 but for a narrow k-major B
        self.B_PIECE_BYTES = self.B_ROWS * ROW_BYTES
        self.PANELS = self.BN // self.B_ROWS  # TMA boxes per B tile
        self.STAGE_BYTES = cfg.stage_bytes(self.item)
        self.RING_BYTES = self.S * self.STAGE_BYTES
        self.KT = ceil_div(K, self.BK)
        self.KTS, self.SPLIT = cfg.k_split(K)  # K tiles per work unit, K slices
        self.PARTIALS = self.SPLIT > 1 and not cfg.cluster_sum  # fp32 partials P[slices, M, N], a 2nd kernel adds
        self.TM, self.TN = cfg.tiles(M, N)
        self.GRID = cfg.grid(M, N, K, wl.batches)
        self.ACC = cfg.acc_regs
        self.rows_padded = False  # tile rows past ceil(M / block_m) (cluster rounding)
        self.NACC = self.BN // 2  # accumulators of one m64 subtile
        ab = PTX_TYPE[wl.dtype]
        self.mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{self.BN}k16.f32.{ab}.{ab}"]
        # descriptor fields (16-byte units): SBO = 1024 bytes between 8-row groups (both forms);
        # LBO: 1 (unused) k-major, one panel m/n-major
        self.SBO = 8 * ROW_BYTES // 16
        k_major = (16 * self.item, 1, 0)  # (bytes per k16 step, LBO, transpose bit)
        mn_major = (16 * ROW_BYTES, self.PANEL_BYTES // 16, 1)
        self.K_STEP_A, self.A_LBO, self.TRANS_A = mn_major if self.TA else k_major
        self.K_STEP_B, self.B_LBO, self.TRANS_B = k_major if self.TB else mn_major

    # grouped tile order: GM block-rows of one column group run together (gemm_wgmma's order)
    def tile_mn(self, t):
        return grouped_tile(t, self.cfg.group_m, self.TM, self.TN)

    def desc_high(self, lbo):
        """A wgmma descriptor's bits beside the start address: LBO in 16-29, SBO in 32-45, layout type
        in 62-63 (base offset 0: 1024-aligned ring)."""
        return (lbo << 16) | (self.SBO << 32) | (DESC_SWIZZLE_128B << 62)

    def desc(self, addr_u32, lbo):
        """wgmma matrix descriptor of a shared address (sm_90 layout): start address >> 4 in bits
        0-13, the rest :meth:`desc_high`."""
        const = self.desc_high(lbo)
        return T.bitwise_or(T.cast(T.shift_right(addr_u32, T.uint32(4)) & T.uint32(0x3FFF), "uint64"),
                            T.uint64(const))

    def out_row(self, tile_m, row0, lane, mt, h):
        """wgmma accumulator layout: warp w of a warpgroup holds rows 16w.., lane rows lane/4, +8"""
        return tile_m * self.BM + row0 + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8

    def out_col(self, tile_n, lane, j):  # ... and columns 2·(lane%4) + {0, 1} of each 8-column group j
        return tile_n * self.BN + j * 8 + lane % 4 * 2


def make_epilogue(g: "Geometry"):
    """A macro storing one consumer warpgroup's accumulators (its rows ``row0``.. of the tile)
    straight to C, bounds-checked (the checks fold away where the shape allows). With
    ``vector_store`` and N even, each adjacent pair goes out as one 8-byte store. With split-K
    (g.PARTIALS) ``C`` is the workspace P[slices, M, N] and ``part`` the unit's K slice; in a
    bmm, ``C`` is the output C[batch, M, N] and ``part`` the unit's product."""
    M, N, NACC = g.M, g.N, g.NACC
    PARTIAL = g.PARTIALS or g.BATCH > 0  # C has a leading axis
    VEC = g.cfg.vector_store and N % 2 == 0
    MT, JN = g.cfg.m_subtiles, g.BN // 8
    # tile_m < TM and tile_n < TN hold for every tile walked, so whole tiles need no checks
    # (with clusters the rounded-up tile rows may lie past M: g.rows_padded, set by the caller)
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0

    def row_ok(tile_m, row0, lane, mt, h):
        return g.out_row(tile_m, row0, lane, mt, h) < M if ROW_CHECK else T.bool(True)

    def col_ok(tile_n, lane, j, e):
        return g.out_col(tile_n, lane, j) + e < N if COL_CHECK else T.bool(True)

    @T.macro
    def epilogue(C, acc, tile_m, tile_n, row0, lane, part=None):
        for mt in T.unroll(MT):
            for j in T.unroll(JN):
                for h in T.unroll(2):
                    if VEC:
                        if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, 0)):
                            for e in T.vectorized(2):
                                if PARTIAL:
                                    C[part, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = \
                                        acc[mt * NACC + j * 4 + h * 2 + e]
                                else:
                                    C[g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = \
                                        acc[mt * NACC + j * 4 + h * 2 + e]
                    else:
                        for e in T.unroll(2):
                            if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, e)):
                                if PARTIAL:
                                    C[part, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = \
                                        acc[mt * NACC + j * 4 + h * 2 + e]
                                else:
                                    C[g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e] = \
                                        acc[mt * NACC + j * 4 + h * 2 + e]

    return epilogue


def make_fused_epilogue(g: "Geometry", wl: Gemm):
    """:func:`make_epilogue` for a product with an epilogue or another output type: a macro
    ``store(D, bias, R, acc, tile_m, tile_n, row0, lane, b)`` computing the epilogue on one consumer
    warpgroup's accumulators and storing D in its type (schedules.wgmma_epilogue.make_fused_store),
    with the same bounds checks and, with ``vector_store``, pairs of outputs as one store."""
    return make_fused_store(wl, g.BM, g.BN, g.cfg.m_subtiles, g.M % g.BM != 0 or g.rows_padded, g.N % g.BN != 0,
                            g.cfg.vector_store)


def make_group_store(g: "Geometry", wl: Gemm):
    """A macro ``store(D, bias, R, v, i, tile_m, tile_n, thread, q)`` for stream-K's fix-up
    (:func:`schedules.tma_common.stream_fixup_kernel`): the four sums ``v[i..i+3]`` of register
    group ``q`` of consumer thread ``thread`` (accumulators 4q..4q+3: m64 subtile q // (BN/8),
    8-column group q % (BN/8), rows +0 and +8, two columns each) through the workload's epilogue
    (none for a float32 C) into D, a pair as one store where N is even, bounds-checked."""
    M, N, QN, ROW0 = g.M, g.N, g.NACC // 4, g.cfg.wg_rows
    FUSED, BIAS, RES = wl.has_epilogue, wl.bias, wl.residual
    VEC = g.cfg.vector_store and N % 2 == 0
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0

    def value(D, bias, R, x, row, col):
        if not FUSED:
            return x
        return epilogue_value(wl, x, bias[col] if BIAS else None, R[row, col] if RES else None)

    @T.macro
    def store(D, bias, R, v, i, tile_m, tile_n, thread, q):
        ov = T.alloc_buffer((2,), wl.out_dtype, scope="local")
        for h in T.unroll(2):
            row = T.meta_var(g.out_row(tile_m, thread // WARPGROUP * ROW0, thread % WARPGROUP, q // QN, h))
            col = T.meta_var(g.out_col(tile_n, thread % WARPGROUP, q % QN))
            if VEC:
                if T.And(row < M if ROW_CHECK else T.bool(True), col < N if COL_CHECK else T.bool(True)):
                    for e in T.unroll(2):
                        ov[e] = value(D, bias, R, v[i + h * 2 + e], row, col + e)
                    for e in T.vectorized(2):
                        D[row, col + e] = ov[e]
            else:
                for e in T.unroll(2):
                    if T.And(row < M if ROW_CHECK else T.bool(True), col + e < N if COL_CHECK else T.bool(True)):
                        D[row, col + e] = value(D, bias, R, v[i + h * 2 + e], row, col + e)

    return store


def make_loader(g: "Geometry", CL: int = 1):
    """A macro issuing the TMA loads of one K tile into one ring slot (run by one thread) and
    announcing their byte count on the slot's full barrier: the A tile (one box k-major, 64-column
    panels m-major) and the B tile in pieces (64-column panels n-major, boxes of ``B_ROWS`` rows
    k-major: 64, or a divisor of a narrow block_n, :func:`schedules.tma_common.b_box_rows`),
    at batch coordinate ``b`` in a bmm. Boxes that lie wholly outside the matrix (the last pieces
    of a ragged last row or column tile, A tiles of the rows a cluster pads) are skipped and left
    out of the byte count: they would only feed outputs that are never stored. Partially outside
    boxes are zero-filled by TMA (and counted in full)."""
    M, N, BM, BN, BK = g.M, g.N, g.BM, g.BN, g.BK
    PANELS, MY = g.PANELS, g.PANELS // CL
    A_PIECES, A_PIECE_BYTES = g.A_PIECES, g.A_BYTES // g.A_PIECES
    # static: can a piece / an A box of some tile lie wholly outside?
    BR = g.B_ROWS  # B rows (columns of C) per piece
    SKIP_PANELS = N % BN != 0 and ceil_div(N % BN, BR) < PANELS
    SKIP_A = g.rows_padded or (A_PIECES > 1 and M % BM != 0 and ceil_div(M % BM, 64) < A_PIECES)

    def a_ok(tile_m, p=0):
        return tile_m * BM + p * 64 < M if SKIP_A else T.bool(True)

    def panel_ok(tile_n, p):
        return tile_n * BN + p * BR < N if SKIP_PANELS else T.bool(True)

    def tx_bytes(tile_m, tile_n):
        if not (SKIP_A or SKIP_PANELS):
            return T.uint32(g.STAGE_BYTES)
        # a sum of non-negative terms: an expression with a subtraction here can be simplified
        # into one the device passes cannot prove non-negative when cast to uint32
        panels = (sum(T.if_then_else(panel_ok(tile_n, p), g.B_PIECE_BYTES, 0) for p in range(PANELS))
                  if SKIP_PANELS else PANELS * g.B_PIECE_BYTES)
        if not SKIP_A:
            a = g.A_BYTES
        elif A_PIECES == 1:
            a = T.if_then_else(a_ok(tile_m), g.A_BYTES, 0)
        else:
            a = sum(T.if_then_else(a_ok(tile_m, p), A_PIECE_BYTES, 0) for p in range(A_PIECES))
        return T.cast(a + panels, "uint32")

    def at(row_or_col, k, mn_major, b):
        """TMA coordinates (innermost first) of a box at ``row_or_col`` (M or N) and K offset ``k``
        of product ``b``: K innermost in a k-major operand (A of nn/nt, B of nt/tt)."""
        return ((row_or_col, k) if mn_major else (k, row_or_col)) + ((b,) if g.BATCH else ())

    @T.macro
    def load(A_map, B_map, ring, full_u32, slot, kt, tile_m, tile_n, rank, b):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(full_u32, tx_bytes(tile_m, tile_n))
        for p in T.unroll(A_PIECES):
            if a_ok(tile_m, p):
                tma_load(A_map, ring + T.cast(slot * g.STAGE_BYTES + p * A_PIECE_BYTES, "uint32"), full_u32,
                          *at(tile_m * BM + p * 64, kt * BK, g.TA, b))
        for p in T.unroll(MY):
            if CL == 1:
                if panel_ok(tile_n, p):
                    tma_load(B_map, ring + T.cast(slot * g.STAGE_BYTES + g.A_BYTES + p * g.B_PIECE_BYTES, "uint32"),
                              full_u32, *at(tile_n * BN + p * BR, kt * BK, not g.TB, b))
            else:
                # this block's share of the pieces, written to the same offset in every block of
                # the cluster and completing on the same barrier in each
                if panel_ok(tile_n, rank * MY + p):
                    tma_multicast(
                        B_map, ring + T.cast(slot * g.STAGE_BYTES + g.A_BYTES + (rank * MY + p) * g.B_PIECE_BYTES,
                                             "uint32"),
                        full_u32, (1 << CL) - 1, *at(tile_n * BN + (rank * MY + p) * BR, kt * BK, not g.TB, b))

    return load


def encode_maps(g: "Geometry", A_data, B_data, A_map, B_map, pitch_a: int, pitch_b: int):
    """(A map, B map) encode calls of the host part: each operand as stored, ``pitch_*`` elements
    per row (its padded copy's where the rows are not a multiple of 16 bytes); a k-major operand
    in boxes of (block_k, rows), an m/n-major one in boxes of (64, block_k)."""
    BM, BK, M, N, K = g.BM, g.BK, g.M, g.N, g.K
    batch = (g.BATCH,) if g.BATCH else ()
    L2 = g.cfg.l2_promotion
    a_dims, a_box = ((pitch_a, K), (64, BK)) if g.TA else ((pitch_a, M), (BK, BM))
    b_dims, b_box = ((pitch_b, N), (BK, g.B_ROWS)) if g.TB else ((pitch_b, K), (64, BK))
    return (encode_map(A_map, A_data, a_dims + batch, a_box, g.item, g.DT, L2),
            encode_map(B_map, B_data, b_dims + batch, b_box, g.item, g.DT, L2))


def make_mma(g: "Geometry"):
    """A macro: one K tile's wgmmas of one consumer warpgroup (rows ``row0``.. of the block tile)
    on descriptors of ring slot ``slot``; scale-d = 0 on the tile's first k step (no zeroing)."""
    cfg = g.cfg

    @T.macro
    def mma(acc, ring, slot, row0, kt):
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(g.BK // 16):
            for mt in T.unroll(cfg.m_subtiles):
                # per k16 step: 32 bytes along the rows of a k-major tile, 16 K rows of an m/n-major one
                g.mma(*[acc[mt * g.NACC + j] for j in range(g.NACC)],
                      g.desc(ring + T.cast(slot * g.STAGE_BYTES + row0 * ROW_BYTES, "uint32")
                             + T.uint32(mt * 64 * ROW_BYTES + kk * g.K_STEP_A), g.A_LBO),
                      g.desc(ring + T.cast(slot * g.STAGE_BYTES, "uint32")
                             + T.uint32(g.A_BYTES + kk * g.K_STEP_B), g.B_LBO),
                      T.Or(kt > 0, kk > 0), 1, 1, g.TRANS_A, g.TRANS_B)  # scale-d, scale-a, scale-b, transpose bits
        T.ptx.wgmma.commit_group.sync.aligned()

    return mma


# The tensor maps (host part of every kernel, re-encoded on each call):
#   A: globalDim (K, M), globalStrides (K·itemsize), box (block_k, block_m): one A tile;
#   B: globalDim (N, K), globalStrides (N·itemsize), box (64, block_k) (tf32: (32, 32)): one panel.
#   128-byte swizzle, OOB zero fill, L2 promotion cfg.l2_promotion.


# ------------------------------------------------------------------------------------------------
# gemm 20: TMA + mbarriers, no warp specialization (one block per tile)
# ------------------------------------------------------------------------------------------------
def simple_kernel(wl: Gemm, cfg):
    """gemm 20's kernel (all warpgroups compute; thread 0 issues the TMA loads ``stages-1`` tiles
    ahead, a ``__syncthreads`` per K tile frees the slot): the TIR PrimFunc ``main(A, B, C)``, or
    ``main(A, B, [bias], [R], D)`` with an epilogue (computed on the accumulators)."""
    g = Geometry(wl, cfg)
    DT = wl.dtype
    BM, BK, S, KT = g.BM, g.BK, g.S, g.KT
    THREADS = cfg.threads
    # K tiles loaded ahead of the one computed: at iteration kt, once every warpgroup has waited
    # for tile kt-1's wgmmas (wait_group 1 + __syncthreads), its slot takes tile kt + S - 1
    AHEAD = S - 1
    TILES = g.TM * g.TN
    GRID = TILES * max(1, g.BATCH)  # a bmm: the products one after another (batch-major)
    epilogue = make_epilogue(g)
    FUSED = wl.has_epilogue  # the epilogue on the accumulators, D stored in its type
    fused = make_fused_epilogue(g, wl) if FUSED else None
    load = make_loader(g)
    mma = make_mma(g)

    @T.macro
    def body(A, B, bias, R, C):
        # host side, every call: the two tensor maps (innermost dimension first)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        a_enc, b_enc = T.meta_var(encode_maps(g, A.data, B.data, A_map, B_map, wl.a_shape[-1], wl.b_shape[-1]))
        T.evaluate(a_enc)
        T.evaluate(b_enc)
        bid = T.launch_thread("blockIdx.x", GRID)
        tid = T.launch_thread("threadIdx.x", THREADS)
        smem = T.alloc_buffer((g.RING_BYTES + 1024,), "uint8", scope="shared.dyn")
        full = T.alloc_buffer((S,), "uint64", scope="shared", align=8)
        acc = T.alloc_buffer((g.ACC,), "float32", scope="local")
        # smem.data (not smem[0]): keeps CompactBufferAllocation from shrinking the buffer to the
        # elements the TIR indexes (TMA and wgmma touch it only through addresses)
        ring: T.let[T.uint32] = T.bitwise_and(T.cuda.cvta_generic_to_shared(smem.data) + T.uint32(1023),
                                              T.uint32(0xFFFFFC00))
        if g.BATCH > 0:
            tm_, tn_ = T.meta_var(g.tile_mn(T.truncmod(bid, TILES)))
            b: T.let[T.int32] = slice_of(bid, TILES, g.BATCH)  # the block's product
        else:
            tm_, tn_ = T.meta_var(g.tile_mn(bid))
            b = T.meta_var(0)
        tile_m: T.let[T.int32] = tm_
        tile_n: T.let[T.int32] = tn_
        wg = T.meta_var(tid // WARPGROUP)
        lane = T.meta_var(tid % WARPGROUP)
        if tid == 0:
            T.ptx.prefetch.tensormap(T.address_of(A_map))
            T.ptx.prefetch.tensormap(T.address_of(B_map))
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(full[s])), T.uint32(1))
            T.ptx.fence.mbarrier_init.release.cluster()
        T.cuda.cta_sync()
        if tid == 0:
            for s in T.unroll(AHEAD):
                if s < KT:
                    load(A_map, B_map, ring, T.cuda.cvta_generic_to_shared(T.address_of(full[s])), s, s,
                         tile_m, tile_n, 0, b)
        for kt in T.serial(KT):
            T.cuda.mbarrier_wait(T.address_of(full[kt % S]), kt // S % 2)
            mma(acc, ring, kt % S, wg * cfg.wg_rows, kt)
            T.ptx.wgmma.wait_group.sync.aligned(1)  # tile kt-1's wgmmas (this warpgroup) are done
            T.cuda.cta_sync()  # ... everyone's: slot (kt-1) % S = (kt + AHEAD) % S is free
            if tid == 0:
                if kt + AHEAD < KT:
                    load(A_map, B_map, ring, T.cuda.cvta_generic_to_shared(T.address_of(full[(kt + AHEAD) % S])),
                         (kt + AHEAD) % S, kt + AHEAD, tile_m, tile_n, 0, b)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        fence_acc(acc, g.ACC)  # no accumulator read moves above the wait
        if FUSED:
            fused(C, bias, R, acc, tile_m, tile_n, wg * cfg.wg_rows, lane, b)
        elif g.BATCH > 0:
            epilogue(C, acc, tile_m, tile_n, wg * cfg.wg_rows, lane, b)
        else:
            epilogue(C, acc, tile_m, tile_n, wg * cfg.wg_rows, lane)

    return kernel_entry(wl, body)


TmaConfig.launch = tma_launch

