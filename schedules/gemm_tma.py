"""Hopper GEMM with TMA loads, mbarrier pipelines, warp specialization and a persistent grid,
written as a TIR kernel (TVMScript + ``T.ptx`` calls) in the style of ``schedules/gemm_wgmma.py``.

    C (M×N, fp32, row-major) = A (M×K, fp16|bf16, row-major) · B (K×N, same dtype, row-major)

What TVM 0.27 provides and this file uses:

* ``T.tvm_stack_alloca("tensormap", 1)`` + ``T.tensormap_encode_tiled(...)`` in the *host* part of
  the PrimFunc (before the first ``launch_thread``): the default ``tvm.compile`` pipeline lowers it
  to a packed call of ``runtime.cuTensorMapEncodeTiled`` (libtvm_runtime_cuda.so → the driver's
  ``cuTensorMapEncodeTiled``), run on every call of ``f(A, B, C)``, and ``SplitHostDevice`` passes
  the 128-byte map to the kernel as ``const __grid_constant__ CUtensorMap``.
* ``T.ptx["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"]``,
  ``T.ptx.mbarrier.*``, ``T.cuda.mbarrier_wait`` (``mbarrier.try_wait.parity`` loop),
  ``T.ptx["setmaxnreg.{inc,dec}.sync.aligned.u32"]``, ``T.ptx["wgmma.mma_async..."]``.

What TVM does not provide for Hopper: a wgmma tile primitive (``gemm_async`` is tcgen05, i.e.
Blackwell only), so the MMA is raw ``T.ptx`` as in gemm_wgmma.py. Its tile-level TMA
(``Tx.copy_async(dispatch="tma_auto")``) only lowers in a tirx-dialect kernel built with
``tir_pipeline="tirx"``, not in the lab's launch_thread kernels through the default pipeline
(tried). The ``tvm.backend.cuda.lang`` helpers (PipelineState,
Pipeline/MBarrier, ClusterPersistentScheduler2D, WarpgroupRole) do build in this style (tried); this file keeps
the equivalent logic in closed form (slot = it % stages, parity = it // stages % 2, grouped tile
index) so the simplifier folds it and every barrier is visible in one place.

Kernel structure (``warp_specialized=True``): warpgroup 0 is the producer: it gives registers back
(``setmaxnreg.dec``) and one thread walks the block's output tiles issuing, per K tile, one TMA
load of the A tile (block_m × 64, 128-byte swizzle) and block_n/64 loads of 64-column B panels into
a ring of ``stages`` slots, each guarded by a *full* barrier (TMA completes its byte count) and an
*empty* barrier (one arrival per consumer warpgroup). Warpgroups 1..consumers take registers
(``setmaxnreg.inc``), wait on *full*, issue ``wgmma.mma_async`` on descriptors of the slot, keep one
K tile's wgmmas in flight and release the previous slot after ``wgmma.wait_group 1``; at the end of
a tile they store their fp32 accumulators straight to C while the producer already fills the ring
for the next tile. ``persistent=True`` launches ``min(SMs, tiles)`` blocks that stride over the
tiles in grouped order (``group_m`` block-rows per group); ``False`` launches one block per tile.
(A "pingpong" variant, the two consumer warpgroups taking whole tiles in turn so that one stores
while the other computes, hung on an H200 in its first trial: a warpgroup that skips the other's
tiles meets ring barriers two phases on, which a parity wait cannot tell apart. It is left out.)

``warp_specialized=False`` is the stepping stone: all warpgroups compute; thread 0 issues the TMA
loads ``stages-1`` tiles ahead, one ``__syncthreads`` per K tile frees the slot (like
gemm_wgmma.py, but no thread copies operand bytes itself).

``cluster_m=2`` (optional): blocks pair up in 2×1 clusters along M (same block column); each block
loads its own A tile and half of the B panels and multicasts the B half to both blocks, so B is
read from L2 once per pair.

Operand layouts and batches (16-bit kernels): an operand stored with K contiguous (A of nn/nt, B of
nt/tt) is loaded k-major, one stored with M or N contiguous (A of tn/tt, B of nn/tn) in 64-column
panels, m/n-major; wgmma reads either form through its transpose immediates and the descriptors'
strides (see ``_Geometry``), so a transposed operand costs no copy and no extra instruction. A bmm
(``bmm:BxMxNxK``) gets 3-D tensor maps (the batch outermost) and work units (product, tile),
product-major; the batch fills the GPU the way split-K does, so a bmm takes ``split_k=1``.

``split_k=s`` (warp-specialized and tf32 kernels): for few output tiles and a long K. The work units
become (output tile, K slice) pairs, ``s`` slices of ceil(KT / s) K tiles each (slices that would
start past K are dropped); the grid walks the units slice-major (unit = slice · tiles + tile, the
tiles of one slice in the grouped order: units that run together read the same A and B panels, as
without split-K). Every unit walks the same number of K tiles, so the ring's stream position
``it = unit index · KTS + kt`` stays uniform: K tiles past the end of K are not loaded (the producer
arrives on the full barrier without bytes) and not multiplied (the consumers wait and release).
Each unit stores its fp32 partial tile into a workspace P[s, M, N], a ``scope="global"`` buffer of
the host part, which TVM allocates on every call from the device's workspace pool
(``TVMBackendAllocWorkspace``); a second kernel in the same PrimFunc sums the slices into C. With
``split_k=1`` the generated CUDA is the same as without the option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div, current_gpu
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm, itemsize

ROW_BYTES = 128  # one K-tile row of A, one K row of a B panel: the 128-byte swizzle atom
SWIZZLE_128B = 3  # CUtensorMapSwizzle: CU_TENSOR_MAP_SWIZZLE_128B
DESC_SWIZZLE_128B = 1  # wgmma descriptor layout_type (bits 62-63): 1 = 128-byte swizzle
WARPGROUP = 128
ITEMSIZE = {"float16": 2, "bfloat16": 2}
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class TmaConfig(StepConfig):
    """``block_m × block_n`` output tile per block, split over ``consumers`` warpgroups along M
    (``block_m / consumers`` rows each, a multiple of 64: one or two m64 wgmmas); K tiles of
    ``block_k`` = 64 (one 128-byte swizzle row); ``stages`` ring slots; ``group_m`` block-rows per
    group of the grouped tile order; ``sms`` blocks of the persistent grid (0: one per SM of the
    GPU the choice is made for, schedules.common.current_gpu; the ring takes most of an SM's shared
    memory, so one block per SM); ``producer_regs``/``consumer_regs``: the
    ``setmaxnreg`` budgets (per thread; (producer + consumers·n)·128 ≤ 65536); ``split_k``: K
    slices (warp-specialized kernel only): the work units become (output tile, K slice) pairs, each
    storing an fp32 partial tile into a workspace that a second kernel sums into C (see
    :meth:`k_split`)."""

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
    split_k: int = 1  # K slices: (tile, slice) units, fp32 partials P[slices, M, N] summed by a 2nd kernel
    dtypes = ("float16", "bfloat16")
    layouts = LAYOUTS  # a transposed operand: m/n-major or k-major tiles, read through wgmma's transpose bits
    batched = True     # a bmm: 3-D tensor maps, the work units walk the batch (batch-major)
    step_name = "persistent_gemm"
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
        128x64 tile) and the budgets below no longer add up; :func:`setmaxnreg_ok` checks ptxas's
        report."""
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
        return self.stages * self.stage_bytes(itemsize) + 1024

    def tiles(self, M: int, N: int) -> tuple[int, int]:
        return ceil_div(M, self.block_m), ceil_div(N, self.block_n)

    def grid(self, M: int, N: int, K: int | None = None, batch: int = 1) -> int:
        """Blocks launched (of the first kernel): one per (cluster) work unit or, persistent, at
        most one per SM (whole clusters). A work unit is a (cluster) tile, with ``split_k`` a
        (tile, K slice) pair (K is then needed), in a bmm a (product, tile) pair."""
        tm, tn = self.tiles(M, N)
        cl_tiles = ceil_div(tm, self.cluster_m) * tn  # cluster tiles: cluster_m block tiles each
        units = cl_tiles * _slices(self, K) * batch
        if not self.persistent:
            return self.cluster_m * units
        return self.cluster_m * min(_sms(self) // self.cluster_m, units)

    def k_split(self, K: int) -> tuple[int, int]:
        """(K tiles per work unit, K slices used): ``split_k`` slices of ceil(KT / split_k) K tiles
        each (KT = ceil(K / block_k)); slices that would start past K are dropped (KT = 9,
        split_k = 8: 2 K tiles per unit, 5 slices), so only the last slice can run past the end
        of K, and those K tiles are neither loaded nor multiplied."""
        return _k_split(self, K)

    def workspace_bytes(self, wl: Gemm) -> int:
        """Bytes of the fp32 partial products P[slices, M, N] (0 without split-K), allocated per
        call from the device's workspace pool (TVMBackendAllocWorkspace)."""
        return _workspace_bytes(self, wl)

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
        if wl.batched and self.split_k > 1:
            raise ScheduleParamError(f"{name}: a batch fills the GPU the way split-K does: split_k must be 1 "
                                     f"for a bmm, got {self.split_k}")
        if self.block_k * item != ROW_BYTES:
            raise ScheduleParamError(f"{name}: block_k must be {ROW_BYTES // item} (one 128-byte row), "
                                     f"got {self.block_k}")
        if self.consumers not in (1, 2, 3, 4) or self.block_m % (64 * self.consumers):
            raise ScheduleParamError(f"{name}: block_m ({self.block_m}) must be 64·consumers·(1 or 2), "
                                     f"consumers={self.consumers}")
        if self.m_subtiles not in (1, 2):
            raise ScheduleParamError(f"{name}: each consumer warpgroup takes 64 or 128 rows, got "
                                     f"{self.wg_rows} (block_m={self.block_m}, consumers={self.consumers})")
        if self.block_m > 256:
            raise ScheduleParamError(f"{name}: block_m ≤ 256 (one TMA box), got {self.block_m}")
        if self.block_n % 64 or not 64 <= self.block_n <= 256:
            raise ScheduleParamError(f"{name}: block_n must be 64, 128, 192 or 256, got {self.block_n}")
        if self.acc_regs > 128:
            raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators per thread (> 128) would spill: "
                                     f"lower block_n or raise consumers")
        if not self.warp_specialized and self.persistent:
            raise ScheduleParamError(f"{name}: persistent needs warp_specialized (the simple kernel is one "
                                     f"block per tile)")
        if self.stages < 2:
            raise ScheduleParamError(f"{name}: stages must be ≥ 2, got {self.stages}")
        if self.shared_bytes(item) > 227 * 1024:
            raise ScheduleParamError(f"{name}: the ring needs {self.shared_bytes(item)} bytes of shared "
                                     f"memory (> 227 KiB): fewer stages or a smaller tile")
        if self.warp_specialized:
            if self.consumers not in (2, 3):
                raise ScheduleParamError(f"{name}: warp_specialized takes 2 or 3 consumer warpgroups (their "
                                         f"setmaxnreg budget is what the producer frees), got {self.consumers}")
            p, c, r = self.producer_regs, self.consumer_budget, self.launch_regs
            if p % 8 or c % 8 or not 24 <= p <= r <= c <= 256 or self.consumers * (c - r) > r - p:
                raise ScheduleParamError(
                    f"{name}: setmaxnreg budgets (multiples of 8, 24 ≤ producer ≤ {r} ≤ consumer ≤ 256, "
                    f"consumers·(consumer - {r}) ≤ {r} - producer) do not hold: producer {p}, consumer {c}")
            if self.acc_regs > c - 40:
                raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators per thread leave too few of the "
                                         f"{c} registers a consumer gets: lower block_n or block_m")
        if self.cluster_m not in (1, 2):
            raise ScheduleParamError(f"{name}: cluster_m must be 1 or 2, got {self.cluster_m}")
        if self.cluster_m == 2 and (not self.warp_specialized or (self.block_n // 64) % 2):
            raise ScheduleParamError(f"{name}: cluster_m=2 needs warp_specialized and an even number of "
                                     f"64-column B panels (block_n 128 or 256), got block_n={self.block_n}")
        if self.group_m < 1:
            raise ScheduleParamError(f"{name}: group_m must be ≥ 1")
        _check_split(self, wl)
        if self.split_k > 1 and not self.warp_specialized:
            raise ScheduleParamError(f"{name}: split_k needs warp_specialized (the simple kernel is one block "
                                     f"per tile), got split_k={self.split_k}")

    def copied(self, wl: Gemm) -> tuple[bool, bool]:
        """(A, B): whether a copy kernel runs first for the operand: ``pad_operands`` and rows
        (of the operand as stored) that are not a whole number of 16 bytes."""
        return wl.misaligned_rows() if self.pad_operands else (False, False)

    @property
    def pass_config(self) -> dict:
        """With padded copies and split-K partials in one call, TVM's StorageRewrite sees the padded
        operand's last use at the tensor map's encoding (the kernel reads it only through the map)
        and gives the partials the same memory: measured wrong on an H200. Keep them apart."""
        return {"tirx.disable_storage_rewrite": True} if self.pad_operands and self.split_k > 1 else {}

    def describe(self) -> str:
        ws = f"ws {self.consumers}c" if self.warp_specialized else f"nows {self.consumers}wg"
        return (f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} {ws}"
                f"{' pers' if self.persistent else ''}"
                f"{' clu2' if self.cluster_m == 2 else ''}"
                f"{f' sk{self.split_k}' if self.split_k > 1 else ''}")


def setmaxnreg_ok(cfg: TmaConfig, registers: int) -> str | None:
    """None if ptxas's register count at launch (``Used N registers``) fits the setmaxnreg budgets,
    else why not. A mismatch deadlocks the kernel: ``setmaxnreg.inc`` waits for registers that the
    producer's ``dec`` never frees (or is undefined when it would lower the count)."""
    if not cfg.warp_specialized:
        return None
    p, c, n = cfg.producer_regs, cfg.consumer_budget, cfg.consumers
    if not p <= registers <= c:
        return f"launch registers {registers} outside [producer {p}, consumer {c}]"
    if n * (c - registers) > registers - p:
        return f"{n} consumers need {n * (c - registers) * 128} registers, the producer frees {(registers - p) * 128}"
    return None


def tma_kernel(wl: Gemm, cfg):
    """The TIR PrimFunc ``main(A: (M,K) dtype, B: (K,N) dtype, C: (M,N) float32)`` of ``wl``:
    float16 and bfloat16 with a :class:`TmaConfig`, float32 (read as tf32) with a
    :class:`Tf32TmaConfig` (the configuration is checked first: :meth:`TmaConfig.check`)."""
    cfg.check(wl)
    if isinstance(cfg, Tf32TmaConfig):
        return _tf32_kernel(wl, cfg)
    if cfg.warp_specialized:
        return _ws_kernel(wl, cfg)
    return _simple_kernel(wl, cfg)


def _sms(cfg) -> int:
    return cfg.sms or current_gpu().sms


# --- split-K (both configurations) ----------------------------------------------------------------
def _k_split(cfg, K: int) -> tuple[int, int]:
    k_tiles = ceil_div(K, cfg.block_k)
    per_unit = ceil_div(k_tiles, max(1, cfg.split_k))
    return per_unit, ceil_div(k_tiles, per_unit)


def _slices(cfg, K: int | None) -> int:
    if cfg.split_k == 1:
        return 1
    if K is None:
        raise ValueError(f"{cfg.step_name}: the grid of split_k={cfg.split_k} depends on K: grid(M, N, K)")
    return _k_split(cfg, K)[1]


def _slice_of(unit, tiles: int, splits: int):
    """The K slice of work unit ``unit`` (units are slice-major: unit = slice · tiles + tile). The
    min changes nothing (units < tiles · splits); it bounds the slice for the device passes, which
    must prove the ring offsets computed from it non-negative."""
    return T.min(T.truncdiv(unit, tiles), splits - 1)


def _k_tiles_of(part, k_tiles: int, per_unit: int):
    """K tiles of slice ``part`` that lie inside K: ``per_unit`` but in the last slice. At least 1
    (slices starting past K are dropped, see _k_split); the bound, again, is for the device passes."""
    return T.max(T.min(k_tiles - part * per_unit, per_unit), 1)


def _workspace_bytes(cfg, wl: Gemm) -> int:
    slices = _slices(cfg, wl.K)
    return 4 * slices * wl.M * wl.N if slices > 1 else 0


def _check_split(cfg, wl: Gemm):
    name, K = cfg.step_name, wl.K
    k_tiles = ceil_div(K, cfg.block_k)
    if cfg.split_k < 1:
        raise ScheduleParamError(f"{name}: split_k must be ≥ 1, got {cfg.split_k}")
    if cfg.split_k > k_tiles:
        raise ScheduleParamError(f"{name}: split_k={cfg.split_k} exceeds the {k_tiles} K tiles of "
                                 f"{cfg.block_k} (K={K})")
    slices = _slices(cfg, K)
    if slices > 1 and slices * wl.M * wl.N >= 2**31:
        raise ScheduleParamError(f"{name}: the split-K workspace ({slices} x {wl.M} x {wl.N} floats) "
                                 f"needs 64-bit indices; lower split_k")


# ------------------------------------------------------------------------------------------------
# pieces shared by both kernels (plain Python helpers returning TIR expressions, so sizes stay
# compile-time constants and the simplifier sees the loop ranges)
# ------------------------------------------------------------------------------------------------
class _Geometry:
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
        self.PANELS = self.BN // 64  # TMA boxes per B tile
        self.STAGE_BYTES = cfg.stage_bytes(self.item)
        self.RING_BYTES = self.S * self.STAGE_BYTES
        self.KT = ceil_div(K, self.BK)
        self.KTS, self.SPLIT = cfg.k_split(K)  # K tiles per work unit, K slices
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
        GM, TM, TN = self.cfg.group_m, self.TM, self.TN
        first_m = t // (GM * TN) * GM
        rows = T.min(TM - first_m, GM)
        # everything is non-negative: C division (truncdiv) instead of TIR's floordiv, whose
        # sign fix-ups the simplifier cannot drop for the runtime divisor ``rows``
        return (first_m + T.truncmod(t % (GM * TN), rows), T.truncdiv(t % (GM * TN), rows))

    def desc(self, addr_u32, lbo):
        """wgmma matrix descriptor of a shared address (sm_90 layout): start address >> 4 in bits
        0-13, LBO in 16-29, SBO in 32-45, layout type in 62-63 (base offset 0: 1024-aligned ring)."""
        const = (lbo << 16) | (self.SBO << 32) | (DESC_SWIZZLE_128B << 62)
        return T.bitwise_or(T.cast(T.shift_right(addr_u32, T.uint32(4)) & T.uint32(0x3FFF), "uint64"),
                            T.uint64(const))

    def out_row(self, tile_m, row0, lane, mt, h):
        """wgmma accumulator layout: warp w of a warpgroup holds rows 16w.., lane rows lane/4, +8"""
        return tile_m * self.BM + row0 + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8

    def out_col(self, tile_n, lane, j):  # ... and columns 2·(lane%4) + {0, 1} of each 8-column group j
        return tile_n * self.BN + j * 8 + lane % 4 * 2


def _epilogue(g: "_Geometry"):
    """A macro storing one consumer warpgroup's accumulators (its rows ``row0``.. of the tile)
    straight to C, bounds-checked (the checks fold away where the shape allows). With
    ``vector_store`` and N even, each adjacent pair goes out as one 8-byte store. With split-K
    (g.SPLIT > 1) ``C`` is the workspace P[slices, M, N] and ``part`` the unit's K slice; in a
    bmm, ``C`` is the output C[batch, M, N] and ``part`` the unit's product."""
    M, N, NACC = g.M, g.N, g.NACC
    PARTIAL = g.SPLIT > 1 or g.BATCH > 0  # C has a leading axis
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


# ``T.cuda.wgmma.noop_barrier(reg)`` (TVM 0.27) fails on a buffer element ("'TensorLoad' object
# has no attribute 'dtype'", backend/cuda/cpp/asm.py:417) and its helper takes the register *by
# value*, which fences a copy. CUTLASS's warpgroup_fence_operand is a macro on the variable itself:
_FENCE_SRC = '#define TMA_GEMM_FENCE_F32(x) asm volatile("" : "+f"(x) :: "memory")\n'


def _fence_acc(acc, n):
    """Tie the accumulator registers to this point (no read or write of them moves across)."""
    for i in range(n):
        T.evaluate(T.cuda.func_call("TMA_GEMM_FENCE_F32", acc[i], source_code=_FENCE_SRC))


def _tma_load(tmap, dst_u32, bar_u32, *coords):
    """One TMA tile load (coordinates innermost first: 2 for a matrix, 3 with a batch), completing
    on ``bar``."""
    return T.ptx[f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.mbarrier::complete_tx::bytes"](
        dst_u32, T.address_of(tmap), *coords, bar_u32)


def _tma_multicast(tmap, dst_u32, bar_u32, mask, *coords):
    """TMA load written to (and completing on the barrier at the same offset in) every CTA of
    ``mask`` in the cluster."""
    return T.ptx[f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster"](dst_u32, T.address_of(tmap), *coords, bar_u32, T.uint16(mask))


def _encode_map(tmap, data, dims, box, item: int, DT: str, L2: int, **kw):
    """Encode a tensor map (host side) of a row-major array of ``dims`` elements, innermost
    first (inner, rows[, batch]), read in boxes of ``box`` (the batch box is 1), 128-byte swizzle."""
    strides = [dims[0] * item * math.prod(dims[1:i]) for i in range(1, len(dims))]
    box = tuple(box) + (1,) * (len(dims) - len(box))
    return T.tensormap_encode_tiled(tmap, data, *dims, *strides, *box, *([1] * len(dims)),
                                    descriptor_dtype=DT, rank=len(dims), swizzle=SWIZZLE_128B,
                                    l2_promotion=L2, **kw)


SUM_THREADS = 128  # threads per block of split-K's second kernel


def _split_sum(M: int, N: int, SPLIT: int):
    """(macro, blocks): split-K's second kernel, ``C = Σ_s P[s]`` over the fp32 partial products
    P[SPLIT, M, N]. C and P are contiguous, so the sum runs over the flat M·N outputs: one thread
    per ``V`` = 4 consecutive outputs (2 or 1 where M·N is not a multiple of 4: never for the
    shapes a tensor map takes), 16-byte loads and stores, consecutive threads on consecutive
    vectors (coalesced), the slices summed in order (deterministic); one guard where the last
    block is partial. Every partial was written by the first kernel (every unit stores its whole
    tile, bounds-checked like C), and P lives in L2 for the shapes split-K is for."""
    MN = M * N
    V = 4 if MN % 4 == 0 else 2 if MN % 2 == 0 else 1
    E = MN // V
    BLOCKS = ceil_div(E, SUM_THREADS)
    GUARD = E % SUM_THREADS != 0

    @T.macro
    def split_sum(P, C):
        with T.launch_thread("blockIdx.x", BLOCKS) as sum_bid:
            sum_tid = T.launch_thread("threadIdx.x", SUM_THREADS)
            total = T.alloc_buffer((V,), "float32", scope="local")
            P_flat = T.decl_buffer((SPLIT * MN,), "float32", data=P.data)
            C_flat = T.decl_buffer((MN,), "float32", data=C.data)
            if (sum_bid * SUM_THREADS + sum_tid < E) if GUARD else True:
                for v in T.vectorized(V):
                    total[v] = P_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v]
                for s in T.unroll(1, SPLIT):
                    for v in T.vectorized(V):
                        total[v] = total[v] + P_flat[s * MN + (sum_bid * SUM_THREADS + sum_tid) * V + v]
                for v in T.vectorized(V):
                    C_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v] = total[v]

    return split_sum, BLOCKS


PAD_THREADS = 256


def _pad_copy(rows: int, cols: int, item: int, DT: str):
    """(macro, padded columns): a kernel copying a ``rows × cols`` row-major matrix into a buffer
    whose rows are a whole number of 16 bytes, the extra columns zero. A tensor map needs a row
    pitch that is a multiple of 16 bytes; a matrix whose rows are not (K or N not a multiple of 8
    for 16-bit types, of 4 for fp32) is copied once into such a buffer (``pad_operands``), and the
    TMA kernel reads the copy. One thread per 16 bytes of the copy: element loads (the source rows
    start anywhere), one 16-byte store. ``rows`` counts every row of the array (a batch of
    matrices: batch × rows each), read through a flat view of ``src``."""
    V = 16 // item
    cols_pad = ceil_div(cols, V) * V
    VECS = rows * cols_pad // V
    BLOCKS = ceil_div(VECS, PAD_THREADS)

    @T.macro
    def pad(src, dst):
        with T.launch_thread("blockIdx.x", BLOCKS) as pbid:
            ptid = T.launch_thread("threadIdx.x", PAD_THREADS)
            piece = T.alloc_buffer((V,), DT, scope="local")
            dst_flat = T.decl_buffer((rows * cols_pad,), DT, data=dst.data)
            src_flat = T.decl_buffer((rows * cols,), DT, data=src.data)
            if pbid * PAD_THREADS + ptid < VECS:
                for v in T.unroll(V):
                    piece[v] = T.if_then_else(
                        (pbid * PAD_THREADS + ptid) % (cols_pad // V) * V + v < cols,
                        src_flat[(pbid * PAD_THREADS + ptid) // (cols_pad // V) * cols
                                 + T.min((pbid * PAD_THREADS + ptid) % (cols_pad // V) * V + v, cols - 1)],
                        T.cast(0, DT))
                for v in T.vectorized(V):
                    dst_flat[(pbid * PAD_THREADS + ptid) * V + v] = piece[v]

    return pad, cols_pad


TRANSPOSE_TILE = 32


def _transpose_copy(rows: int, cols: int, item: int, DT: str):
    """(macro, padded rows): a kernel writing the transpose of a ``rows × cols`` row-major matrix
    into a ``cols × rows_pad`` one (``rows_pad``: rows rounded up to 16 bytes, the extra columns
    zero), for an operand a kernel can only read in the other major order (tf32 wgmma takes its
    shared-memory operand k-major only). The classic tiled transpose: a 32×32 tile read along the
    source rows and written along the destination rows, both coalesced, through shared memory
    padded by one column (no bank conflicts); 32×8 threads, four elements each."""
    TT = TRANSPOSE_TILE
    V = 16 // item
    rows_pad = ceil_div(rows, V) * V
    RB, CB = ceil_div(rows_pad, TT), ceil_div(cols, TT)

    @T.macro
    def transpose(src, dst):
        with T.launch_thread("blockIdx.x", RB * CB) as tbid:
            ttx = T.launch_thread("threadIdx.x", TT)
            tty = T.launch_thread("threadIdx.y", 8)
            # flat, rows of TT + 1: a 2-D (TT, TT + 1) buffer is compacted to the TT columns indexed
            tile = T.alloc_buffer((TT * (TT + 1),), DT, scope="shared")
            for i in T.unroll(TT // 8):
                tile[(tty + i * 8) * (TT + 1) + ttx] = T.if_then_else(
                    T.And(tbid // CB * TT + tty + i * 8 < rows, tbid % CB * TT + ttx < cols),
                    src[T.min(tbid // CB * TT + tty + i * 8, rows - 1), T.min(tbid % CB * TT + ttx, cols - 1)],
                    T.cast(0, DT))
            T.cuda.cta_sync()
            for i in T.unroll(TT // 8):
                if T.And(tbid % CB * TT + tty + i * 8 < cols, tbid // CB * TT + ttx < rows_pad):
                    dst[tbid % CB * TT + tty + i * 8, tbid // CB * TT + ttx] = tile[ttx * (TT + 1) + tty + i * 8]

    return transpose, rows_pad


def _loader(g: "_Geometry", CL: int = 1):
    """A macro issuing the TMA loads of one K tile into one ring slot (run by one thread) and
    announcing their byte count on the slot's full barrier: the A tile (one box k-major, 64-column
    panels m-major) and the B tile in 64-column pieces (panels n-major, boxes of 64 rows k-major),
    at batch coordinate ``b`` in a bmm. Boxes that lie wholly outside the matrix (the last pieces
    of a ragged last row or column tile, A tiles of the rows a cluster pads) are skipped and left
    out of the byte count: they would only feed outputs that are never stored. Partially outside
    boxes are zero-filled by TMA (and counted in full)."""
    M, N, BM, BN, BK = g.M, g.N, g.BM, g.BN, g.BK
    PANELS, MY = g.PANELS, g.PANELS // CL
    A_PIECES, A_PIECE_BYTES = g.A_PIECES, g.A_BYTES // g.A_PIECES
    # static: can a piece / an A box of some tile lie wholly outside?
    SKIP_PANELS = N % BN != 0 and ceil_div(N % BN, 64) < PANELS
    SKIP_A = g.rows_padded or (A_PIECES > 1 and M % BM != 0 and ceil_div(M % BM, 64) < A_PIECES)

    def a_ok(tile_m, p=0):
        return tile_m * BM + p * 64 < M if SKIP_A else T.bool(True)

    def panel_ok(tile_n, p):
        return tile_n * BN + p * 64 < N if SKIP_PANELS else T.bool(True)

    def tx_bytes(tile_m, tile_n):
        if not (SKIP_A or SKIP_PANELS):
            return T.uint32(g.STAGE_BYTES)
        # a sum of non-negative terms: an expression with a subtraction here can be simplified
        # into one the device passes cannot prove non-negative when cast to uint32
        panels = (sum(T.if_then_else(panel_ok(tile_n, p), g.PANEL_BYTES, 0) for p in range(PANELS))
                  if SKIP_PANELS else PANELS * g.PANEL_BYTES)
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
                _tma_load(A_map, ring + T.cast(slot * g.STAGE_BYTES + p * A_PIECE_BYTES, "uint32"), full_u32,
                          *at(tile_m * BM + p * 64, kt * BK, g.TA, b))
        for p in T.unroll(MY):
            if CL == 1:
                if panel_ok(tile_n, p):
                    _tma_load(B_map, ring + T.cast(slot * g.STAGE_BYTES + g.A_BYTES + p * g.PANEL_BYTES, "uint32"),
                              full_u32, *at(tile_n * BN + p * 64, kt * BK, not g.TB, b))
            else:
                # this block's share of the pieces, written to the same offset in every block of
                # the cluster and completing on the same barrier in each
                if panel_ok(tile_n, rank * MY + p):
                    _tma_multicast(
                        B_map, ring + T.cast(slot * g.STAGE_BYTES + g.A_BYTES + (rank * MY + p) * g.PANEL_BYTES,
                                             "uint32"),
                        full_u32, (1 << CL) - 1, *at(tile_n * BN + (rank * MY + p) * 64, kt * BK, not g.TB, b))

    return load


def _maps(g: "_Geometry", A_data, B_data, A_map, B_map, pitch_a: int, pitch_b: int):
    """(A map, B map) encode calls of the host part: each operand as stored, ``pitch_*`` elements
    per row (its padded copy's where the rows are not a multiple of 16 bytes); a k-major operand
    in boxes of (block_k, rows), an m/n-major one in boxes of (64, block_k)."""
    BM, BK, M, N, K = g.BM, g.BK, g.M, g.N, g.K
    batch = (g.BATCH,) if g.BATCH else ()
    L2 = g.cfg.l2_promotion
    a_dims, a_box = ((pitch_a, K), (64, BK)) if g.TA else ((pitch_a, M), (BK, BM))
    b_dims, b_box = ((pitch_b, N), (BK, 64)) if g.TB else ((pitch_b, K), (64, BK))
    return (_encode_map(A_map, A_data, a_dims + batch, a_box, g.item, g.DT, L2),
            _encode_map(B_map, B_data, b_dims + batch, b_box, g.item, g.DT, L2))


def _mma_tile(g: "_Geometry"):
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
# step 1: TMA + mbarriers, no warp specialization (one block per tile)
# ------------------------------------------------------------------------------------------------
def _simple_kernel(wl: Gemm, cfg):
    g = _Geometry(wl, cfg)
    DT = wl.dtype
    BM, BK, S, KT = g.BM, g.BK, g.S, g.KT
    THREADS = cfg.threads
    # K tiles loaded ahead of the one computed: at iteration kt, once every warpgroup has waited
    # for tile kt-1's wgmmas (wait_group 1 + __syncthreads), its slot takes tile kt + S - 1
    AHEAD = S - 1
    TILES = g.TM * g.TN
    GRID = TILES * max(1, g.BATCH)  # a bmm: the products one after another (batch-major)
    epilogue = _epilogue(g)
    load = _loader(g)
    mma = _mma_tile(g)

    @T.prim_func
    def main(A: T.Buffer(wl.a_shape, DT), B: T.Buffer(wl.b_shape, DT), C: T.Buffer(wl.c_shape, "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        # host side, every call: the two tensor maps (innermost dimension first)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        a_enc, b_enc = T.meta_var(_maps(g, A.data, B.data, A_map, B_map, wl.a_shape[-1], wl.b_shape[-1]))
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
            b: T.let[T.int32] = _slice_of(bid, TILES, g.BATCH)  # the block's product
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
        _fence_acc(acc, g.ACC)  # no accumulator read moves above the wait
        if g.BATCH > 0:
            epilogue(C, acc, tile_m, tile_n, wg * cfg.wg_rows, lane, b)
        else:
            epilogue(C, acc, tile_m, tile_n, wg * cfg.wg_rows, lane)

    return main


# ------------------------------------------------------------------------------------------------
# steps 2-3 (+5): warp-specialized producer/consumers, persistent grid, optional 2x1 cluster
# ------------------------------------------------------------------------------------------------
def _ws_kernel(wl: Gemm, cfg):
    g = _Geometry(wl, cfg)
    M, N, K, DT = wl.M, wl.N, wl.K, wl.dtype
    BM, BK, S, KT = g.BM, g.BK, g.S, g.KT
    NC = cfg.consumers
    THREADS = cfg.threads
    CL = cfg.cluster_m
    TM_CL = ceil_div(g.TM, CL) * CL  # tile rows rounded up to whole clusters
    CL_TILES = TM_CL * g.TN // CL  # cluster tiles: CL vertically adjacent block tiles
    GRID = g.GRID
    CL_GRID = GRID // CL
    L2 = cfg.l2_promotion
    g.rows_padded = TM_CL != g.TM
    epilogue = _epilogue(g)
    load = _loader(g, CL)
    mma = _mma_tile(g)
    # every consumer warpgroup (of every block of the cluster) reads each slot
    EMPTY_ARRIVALS = NC * CL
    ROW0 = cfg.wg_rows  # rows of consumer warpgroup w start at w * ROW0
    gc = _Geometry(wl, cfg)  # grouped order over cluster rows
    gc.TM = TM_CL // CL
    # split-K: a work unit is a (cluster tile, K slice) pair, KTS K tiles each (KTS = KT, one
    # slice, without split-K); units slice-major: unit u = slice·CL_TILES + tile (see NOTES).
    # A bmm: a (product, cluster tile) pair, batch-major (u = product·CL_TILES + tile); no split-K
    KTS, SPLIT, BATCH = g.KTS, g.SPLIT, g.BATCH
    UNITS = CL_TILES * SPLIT * max(1, BATCH)
    OUTER = SPLIT > 1 or BATCH > 0  # units carry an outer index: their K slice or their product
    PAD = KTS * SPLIT > KT  # the last slice's last K tiles lie past K: not loaded, not multiplied
    if SPLIT > 1:
        split_sum, _ = _split_sum(M, N, SPLIT)
    # rows a tensor map cannot describe (pad_operands): copied first into 16-byte-pitched buffers
    # (every row of every product of a bmm; the rows of the operand as stored)
    (a_rows, a_cols), (b_rows, b_cols) = wl.a_shape[-2:], wl.b_shape[-2:]
    PAD_A, PAD_B = cfg.copied(wl)
    pad_a, AP = _pad_copy(wl.batches * a_rows, a_cols, g.item, DT) if PAD_A else (None, a_cols)
    pad_b, BP = _pad_copy(wl.batches * b_rows, b_cols, g.item, DT) if PAD_B else (None, b_cols)
    batch_dims = wl.a_shape[:-2]

    def block_tile(c, rank):
        cm, cn = gc.tile_mn(c)
        return cm * CL + rank, cn

    @T.prim_func
    def main(A: T.Buffer(wl.a_shape, DT), B: T.Buffer(wl.b_shape, DT), C: T.Buffer(wl.c_shape, "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        if PAD_A:  # workspaces from the device's pool, like split-K's partials below
            A_pad = T.alloc_buffer(batch_dims + (a_rows, AP), DT, scope="global")
            pad_a(A, A_pad)
        if PAD_B:
            B_pad = T.alloc_buffer(batch_dims + (b_rows, BP), DT, scope="global")
            pad_b(B, B_pad)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        a_enc, b_enc = T.meta_var(_maps(g, (A_pad if PAD_A else A).data, (B_pad if PAD_B else B).data,
                                        A_map, B_map, AP, BP))
        T.evaluate(a_enc)
        T.evaluate(b_enc)
        if SPLIT > 1:
            # the partial products: a global buffer of the host part, i.e. TVMBackendAllocWorkspace
            # (the device's workspace pool) on every call, freed after the second kernel
            P = T.alloc_buffer((SPLIT, M, N), "float32", scope="global")
        with T.launch_thread("blockIdx.x", GRID) as bid:
            if CL > 1:
                crank = T.launch_thread("clusterCtaIdx.x", CL)  # -> cuLaunchKernelEx cluster dims
            tid = T.launch_thread("threadIdx.x", THREADS)
            # __maxnreg__(launch_regs): setmaxnreg needs a known register count at entry, and the
            # budgets assume the full share (ptxas otherwise starts a light kernel with fewer, and the
            # consumers' setmaxnreg.inc then waits for registers the producer never frees)
            T.attr(0, "tirx.max_registers", cfg.launch_regs)
            smem = T.alloc_buffer((g.RING_BYTES + 1024,), "uint8", scope="shared.dyn")
            bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)  # full[0:S], empty[S:2S]
            acc = T.alloc_buffer((g.ACC,), "float32", scope="local")
            ring: T.let[T.uint32] = T.bitwise_and(T.cuda.cvta_generic_to_shared(smem.data) + T.uint32(1023),
                                                  T.uint32(0xFFFFFC00))
            wg = T.meta_var(tid // WARPGROUP)
            lane = T.meta_var(tid % WARPGROUP)
            if CL > 1:
                rank = T.meta_var(crank)
                cid = T.meta_var(bid // CL)
            else:
                rank = T.meta_var(0)
                cid = T.meta_var(bid)
            # this block's (cluster) units: cid, cid + CL_GRID, ... (one per block if not persistent)
            n_tiles: T.let[T.int32] = T.truncdiv(UNITS - 1 - cid, CL_GRID) + 1
            if tid == 0:
                for s in T.unroll(S):
                    T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[s])), T.uint32(1))
                    T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[S + s])),
                                                   T.uint32(EMPTY_ARRIVALS))
                T.ptx.fence.mbarrier_init.release.cluster()
            if CL > 1:
                T.cuda.cluster_sync()  # peers' barriers are initialized before anyone multicasts
            else:
                T.cuda.cta_sync()
            if wg == 0:
                # ---- producer warpgroup: one thread issues every TMA load ----
                T.ptx["setmaxnreg.dec.sync.aligned.u32"](cfg.producer_regs)
                if lane == 0:
                    T.ptx.prefetch.tensormap(T.address_of(A_map))
                    T.ptx.prefetch.tensormap(T.address_of(B_map))
                    for i in T.serial(n_tiles):
                        if OUTER:
                            tm_, tn_ = T.meta_var(block_tile(T.truncmod(cid + i * CL_GRID, CL_TILES), rank))
                        else:
                            tm_, tn_ = T.meta_var(block_tile(cid + i * CL_GRID, rank))
                        if SPLIT > 1:
                            k0: T.let[T.int32] = T.truncdiv(cid + i * CL_GRID, CL_TILES) * KTS  # first K tile
                        if BATCH > 0:
                            b: T.let[T.int32] = _slice_of(cid + i * CL_GRID, CL_TILES, BATCH)  # the unit's product
                        else:
                            b = T.meta_var(0)
                        tile_m: T.let[T.int32] = tm_
                        tile_n: T.let[T.int32] = tn_
                        for kt in T.serial(KTS):
                            it: T.let[T.int32] = i * KTS + kt  # position in the block's stream of K tiles
                            slot: T.let[T.int32] = it % S
                            # fill it // S of the slot: wait until fill it // S - 1 was consumed (in every
                            # block of the cluster); a fresh barrier passes parity 1 at once
                            T.cuda.mbarrier_wait(T.address_of(bars[S + slot]), it // S % 2 ^ 1)
                            if SPLIT == 1:
                                load(A_map, B_map, ring, T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])),
                                     slot, kt, tile_m, tile_n, rank, b)
                            elif PAD:
                                if k0 + kt < KT:
                                    load(A_map, B_map, ring, T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])),
                                         slot, k0 + kt, tile_m, tile_n, rank, b)
                                else:
                                    # past K: nothing to load; the phase still completes (no bytes)
                                    T.evaluate(T.ptx.mbarrier.arrive.shared.b64(
                                        T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])), T.uint32(1)))
                            else:
                                load(A_map, B_map, ring, T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])),
                                     slot, k0 + kt, tile_m, tile_n, rank, b)
            else:
                # ---- consumer warpgroups ----
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):  # every consumer warpgroup takes its rows of every unit
                    if SPLIT > 1:
                        part: T.let[T.int32] = _slice_of(cid + i * CL_GRID, CL_TILES, SPLIT)  # the unit's K slice
                    if BATCH > 0:
                        part: T.let[T.int32] = _slice_of(cid + i * CL_GRID, CL_TILES, BATCH)  # the unit's product
                    if PAD:
                        # K tiles of this unit inside K (KTS but in the last slice); the rest: below
                        n_k: T.let[T.int32] = _k_tiles_of(part, KT, KTS)
                    else:
                        n_k = T.meta_var(KTS)
                    for kt in T.serial(n_k):
                        it: T.let[T.int32] = i * KTS + kt
                        T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
                        mma(acc, ring, it % S, w * ROW0, kt)  # kt == 0: scale-d 0 starts the unit's sum
                        T.ptx.wgmma.wait_group.sync.aligned(1)  # K tile kt-1's wgmmas are done: free its slot
                        if T.And(kt > 0, lane == 0):
                            _release(bars, S + (it - 1) % S, CL)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    if lane == 0:
                        _release(bars, S + (i * KTS + n_k - 1) % S, CL)
                    if PAD:
                        # K tiles past K: keep the ring's protocol (wait for the empty fill, release it)
                        for kp in T.serial(KTS - n_k):
                            T.cuda.mbarrier_wait(T.address_of(bars[(i * KTS + n_k + kp) % S]),
                                                 (i * KTS + n_k + kp) // S % 2)
                            if lane == 0:
                                _release(bars, S + (i * KTS + n_k + kp) % S, CL)
                    _fence_acc(acc, g.ACC)
                    if OUTER:
                        tm_, tn_ = T.meta_var(block_tile(T.truncmod(cid + i * CL_GRID, CL_TILES), rank))
                    else:
                        tm_, tn_ = T.meta_var(block_tile(cid + i * CL_GRID, rank))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    # the producer is already filling the ring with the next unit's K tiles
                    if SPLIT > 1:
                        epilogue(P, acc, tile_m, tile_n, w * ROW0, lane, part)
                    elif BATCH > 0:
                        epilogue(C, acc, tile_m, tile_n, w * ROW0, lane, part)
                    else:
                        epilogue(C, acc, tile_m, tile_n, w * ROW0, lane)
            if CL > 1:
                # no block leaves while a peer may still multicast into it or arrive on its barriers
                T.cuda.cluster_sync()
        if SPLIT > 1:
            split_sum(P, C)

    return main


def _release(bars, index, CL):
    """Arrive on empty barrier ``index``: this block's, and with a cluster every block's (each
    slot is refilled by multicasts from all of them, so all their consumers must be done)."""
    addr = T.cuda.cvta_generic_to_shared(T.address_of(bars[index]))
    if CL == 1:
        T.evaluate(T.ptx.mbarrier.arrive.shared.b64(addr, T.uint32(1)))
        return
    mapped = T.alloc_local([1], "uint32")
    for r in range(CL):
        # the same barrier in block r of the cluster (mapa: shared::cta -> shared::cluster address)
        T.evaluate(T.ptx.mapa.shared__cluster.u32(mapped[0], addr, T.uint32(r)))
        T.evaluate(T.ptx.mbarrier.arrive.shared__cluster.b64(mapped[0]))


# ------------------------------------------------------------------------------------------------
# step 5b: tf32 (fp32 inputs) as C^T = B^T · A^T
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tf32TmaConfig(StepConfig):
    """TF32 wgmma reads both shared-memory operands k-major only (no transpose immediates). A
    (M×K row-major) is k-major; B (K×N row-major) is not. So the kernel computes the transposed
    product C^T = B^T · A^T: the wgmma's A operand is B^T, taken from *registers* (the ``rs`` form,
    four ld.shared per thread and k8 step from an n-major TMA tile of B), and its B operand is A^T,
    i.e. the A tile exactly as TMA loads it (k-major, 128-byte swizzle). The wgmma's N is block_m
    (rows of C), its M is 64 columns of C per m64 subtile.

    ``block_m`` rows of C per tile (the wgmma's N: 64..256), ``block_n`` columns, split over
    ``consumers`` warpgroups (64 or 128 columns each); K tiles of 32 (one 128-byte row).
    ``tf32_round``: tensor maps of type CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 (TVM's runtime comment: TMA
    rounds fp32 to tf32 to nearest on load, as cuBLAS rounds; unverified); False: plain FLOAT32 maps,
    the MMA truncates."""

    block_m: int = 256
    block_n: int = 128
    block_k: int = 32
    stages: int = 4
    consumers: int = 2
    persistent: bool = True
    group_m: int = 8
    sms: int = 0
    producer_regs: int = 40
    tf32_round: bool = True
    l2_promotion: int = 2
    pad_operands: bool = False  # rows not a multiple of 16 bytes: copy A / B into padded workspaces first
    split_k: int = 1  # K slices, as TmaConfig.split_k
    warp_specialized = True
    cluster_m = 1
    dtypes = ("float32",)
    layouts = LAYOUTS  # B stored N×K: k-major tiles; A stored K×M: transposed into a workspace first
    step_name = "tma_tf32_gemm"
    zero_means_auto = ("sms", "consumer_regs")
    tolerance = 2e-3  # tf32 keeps 10 of fp32's 23 mantissa bits

    @property
    def wg_cols(self) -> int:
        return self.block_n // self.consumers

    @property
    def m_subtiles(self) -> int:
        return self.wg_cols // 64

    @property
    def acc_regs(self) -> int:
        return self.m_subtiles * self.block_m // 2

    @property
    def frag_regs(self) -> int:  # two sets (K tiles alternate) of 4 k8 steps x 4 registers per subtile
        return 2 * (self.block_k // 8) * 4 * self.m_subtiles

    threads = TmaConfig.threads
    launch_regs = TmaConfig.launch_regs
    consumer_budget = TmaConfig.consumer_budget
    consumer_regs = 0

    def stage_bytes(self, itemsize: int = 4) -> int:
        return (self.block_m + self.block_n) * self.block_k * 4

    def shared_bytes(self, itemsize: int = 4) -> int:
        return self.stages * self.stage_bytes() + 1024

    def tiles(self, M: int, N: int):
        return ceil_div(M, self.block_m), ceil_div(N, self.block_n)

    def grid(self, M: int, N: int, K: int | None = None, batch: int = 1) -> int:
        tm, tn = self.tiles(M, N)
        units = tm * tn * _slices(self, K) * batch
        return min(_sms(self), units) if self.persistent else units

    def k_split(self, K: int) -> tuple[int, int]:
        """(K tiles per work unit, K slices used), as :meth:`TmaConfig.k_split` (K tiles of 32)."""
        return _k_split(self, K)

    def workspace_bytes(self, wl: Gemm) -> int:
        """Bytes of the fp32 partial products (0 without split-K), as :meth:`TmaConfig.workspace_bytes`."""
        return _workspace_bytes(self, wl)

    def check(self, wl: Gemm):
        M, N, K, dtype = wl.M, wl.N, wl.K, wl.dtype
        name = self.step_name
        if dtype != "float32":
            raise ScheduleParamError(f"{name} takes float32 inputs, not {dtype}")
        # a tensor map's row pitch must be a multiple of 16 bytes (A stored K×M is transposed into a
        # padded workspace in any case)
        for what, dim, pitch, copied in (("A", "K", K, wl.trans_a),
                                         ("B", *(("K", K) if wl.trans_b else ("N", N)), False)):
            if pitch * 4 % 16 and not (self.pad_operands or copied):
                raise ScheduleParamError(
                    f"{name}: the row pitch of {what} ({dim}) is {pitch * 4} bytes; TMA needs a multiple of 16 "
                    f"({dim} must be a multiple of 4 for float32; pad_operands=true copies the operand into a "
                    f"padded buffer first), got M,N,K = {M},{N},{K}, layout {wl.layout}")
        if self.block_k != 32:
            raise ScheduleParamError(f"{name}: block_k must be 32 (one 128-byte row of fp32)")
        if self.block_m % 64 or not 64 <= self.block_m <= 256:
            raise ScheduleParamError(f"{name}: block_m (the wgmma's N) must be 64, 128, 192 or 256, "
                                     f"got {self.block_m}")
        if self.consumers not in (2, 3) or self.block_n % self.consumers or self.m_subtiles not in (1, 2) \
                or self.wg_cols % 64:
            raise ScheduleParamError(f"{name}: block_n ({self.block_n}) must give each of 2 or 3 consumer "
                                     f"warpgroups 64 or 128 columns (consumers={self.consumers})")
        c, r, p = self.consumer_budget, self.launch_regs, self.producer_regs
        if self.acc_regs + self.frag_regs > c - 40:
            raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators + {self.frag_regs} fragment "
                                     f"registers leave too few of the {c} a consumer gets")
        if p % 8 or c % 8 or not 24 <= p <= r <= c <= 256 or self.consumers * (c - r) > r - p:
            raise ScheduleParamError(f"{name}: setmaxnreg budgets do not hold: producer {p}, consumer {c}")
        if self.stages < 2 or self.shared_bytes() > 227 * 1024:
            raise ScheduleParamError(f"{name}: {self.stages} stages need {self.shared_bytes()} bytes of "
                                     f"shared memory (2 ≤ stages, ≤ 227 KiB)")
        _check_split(self, wl)

    def copied(self, wl: Gemm) -> tuple[bool, bool]:
        """(A, B): whether a copy kernel runs first: A stored K×M is always transposed into an M×K
        workspace (tf32 wgmma reads its shared-memory operand k-major only); otherwise as
        :meth:`TmaConfig.copied` (``pad_operands`` and rows that are not whole 16 bytes)."""
        pad_a, pad_b = TmaConfig.copied(self, wl)
        return pad_a or wl.trans_a, pad_b

    @property
    def pass_config(self) -> dict:
        """As :attr:`TmaConfig.pass_config`: split-K partials beside a copied operand (padded, or A
        transposed, which the configuration alone cannot tell) must not share its memory."""
        return {"tirx.disable_storage_rewrite": True} if self.split_k > 1 else {}

    def describe(self) -> str:
        return (f"tf32 {self.block_m}x{self.block_n}x{self.block_k} s{self.stages} ws {self.consumers}c"
                f"{' pers' if self.persistent else ''}{'' if self.tf32_round else ' trunc'}"
                f"{f' sk{self.split_k}' if self.split_k > 1 else ''}")


def _tf32_kernel(wl: Gemm, cfg: Tf32TmaConfig):
    M, N, K = wl.M, wl.N, wl.K
    BM, BN, BK, S, NC = cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.consumers
    MT = cfg.m_subtiles
    WGC = cfg.wg_cols
    KT = ceil_div(K, BK)
    TM, TN = cfg.tiles(M, N)
    TILES = TM * TN
    GRID = cfg.grid(M, N, K)
    # split-K: units (tile, K slice), slice-major (unit = slice·TILES + tile), KTS K tiles each
    KTS, SPLIT = cfg.k_split(K)
    UNITS = TILES * SPLIT
    PAD = KTS * SPLIT > KT  # the last slice's last K tiles lie past K: not loaded, not multiplied
    if SPLIT > 1:
        split_sum, _ = _split_sum(M, N, SPLIT)
    # layouts: A stored K×M (tn, tt) is transposed into an M×K workspace first (the wgmma reads
    # it k-major from shared memory, and tf32 has no transpose bit); B stored N×K (nt, tt) is
    # loaded k-major and its register fragments read from that layout (frag_word)
    TA, TB = wl.trans_a, wl.trans_b
    (b_rows, b_cols) = wl.b_shape
    COPY_A, PAD_B = cfg.copied(wl)  # A: transposed (tn, tt) or padded
    if TA:
        copy_a, KP = _transpose_copy(K, M, 4, "float32")
    else:
        copy_a, KP = _pad_copy(M, K, 4, "float32") if COPY_A else (None, K)
    pad_b, BP = _pad_copy(b_rows, b_cols, 4, "float32") if PAD_B else (None, b_cols)
    A_BYTES = BM * ROW_BYTES  # the A tile: BM rows of 32 fp32
    PANEL_BYTES = BK * ROW_BYTES  # one 32-column panel of B: 32 K rows of 128 bytes
    PANELS = BN // 32
    STAGE_BYTES = cfg.stage_bytes()
    RING_BYTES = S * STAGE_BYTES
    NACC = BM // 2  # accumulators of one m64 subtile (64 columns of C x BM rows)
    ACC = cfg.acc_regs
    KSTEPS = BK // 8
    FRAG = KSTEPS * 4 * MT  # fragment registers of one K tile
    SBO = 8 * ROW_BYTES // 16
    DT_CU = 11 if cfg.tf32_round else -1  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
    mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BM}k8.f32.tf32.tf32"]
    L2 = cfg.l2_promotion
    geo = _Geometry.__new__(_Geometry)  # reuse the grouped tile order
    geo.cfg, geo.TM, geo.TN = cfg, TM, TN
    SKIP_PANELS = N % BN != 0 and ceil_div(N % BN, 32) < PANELS
    ROW_CHECK, COL_CHECK = M % BM != 0, N % BN != 0

    def desc_b(addr_u32):  # the A tile as wgmma's k-major B operand: LBO unused, SBO 1024 bytes
        const = (1 << 16) | (SBO << 32) | (DESC_SWIZZLE_128B << 62)
        return T.bitwise_or(T.cast(T.shift_right(addr_u32, T.uint32(4)) & T.uint32(0x3FFF), "uint64"),
                            T.uint64(const))

    def frag_word(slot_base_w, col, k):
        """uint32 index (from the ring start) of B[k0 + k, n0 + col] in a slot: panel col // 32,
        n-major (B stored K×N): row k of 128 bytes, 16-byte chunk (col % 32) // 4 stored at
        chunk ^ (k % 8); k-major (B stored N×K): row col % 32, chunk k // 4 at chunk ^ (col % 8)."""
        if TB:
            return (slot_base_w + (A_BYTES + col // 32 * PANEL_BYTES + col % 32 * ROW_BYTES) // 4
                    + T.bitwise_xor(k // 4, col % 8) * 4 + k % 4)
        return (slot_base_w + (A_BYTES + col // 32 * PANEL_BYTES + k * ROW_BYTES) // 4
                + T.bitwise_xor(col % 32 // 4, k % 8) * 4 + col % 4)

    def panel_bytes(tile_n):
        """Bytes of this tile's B panels that lie (at least partly) inside B: a sum of non-negative
        terms, so no analysis of tile indices that no block reaches can make it negative (a
        ``min(ceil((N - tile_n·BN) / 32), PANELS)`` form once did, and a uint32 cannot be negative)."""
        if not SKIP_PANELS:
            return PANELS * PANEL_BYTES
        return sum(T.if_then_else(tile_n * BN + p * 32 < N, PANEL_BYTES, 0) for p in range(PANELS))

    @T.macro
    def consume(acc, frag, smem_w, ring_w, ring, bars, it, kt, w, lane, fs):
        # one K tile: wait for it, load this warpgroup's B^T fragments (set fs), 4 x MT wgmmas
        T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
        for kk in T.unroll(KSTEPS):
            for mt in T.unroll(MT):
                for q in T.unroll(2):
                    for h in T.unroll(2):
                        # wgmma A fragment (tf32): a[h + 2q] = A'[16*warp + lane/4 + 8h, lane%4 + 4q]
                        frag[fs * FRAG + (kk * MT + mt) * 4 + q * 2 + h] = smem_w[frag_word(
                            ring_w + it % S * (STAGE_BYTES // 4),
                            w * WGC + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8,
                            kk * 8 + lane % 4 + q * 4)]
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(KSTEPS):
            for mt in T.unroll(MT):
                mma(*[acc[mt * NACC + j] for j in range(NACC)],
                    *[frag[fs * FRAG + (kk * MT + mt) * 4 + r] for r in range(4)],
                    desc_b(ring + T.truncmod(T.cast(it, "uint32"), T.uint32(S)) * T.uint32(STAGE_BYTES)
                           + T.uint32(kk * 32)),
                    T.Or(kt > 0, kk > 0), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()
        # K tile kt-1's wgmmas (and its fragment set, fs ^ 1) are done: free its slot
        T.ptx.wgmma.wait_group.sync.aligned(1)
        if T.And(kt > 0, lane == 0):
            T.evaluate(T.ptx.mbarrier.arrive.shared.b64(
                T.cuda.cvta_generic_to_shared(T.address_of(bars[S + (it - 1) % S])), T.uint32(1)))

    @T.macro
    def load(A_map, B_map, ring, full_u32, slot, kt, tile_m, tile_n):
        # one K tile into ring slot ``slot``: the A tile and the B panels inside N, their bytes
        # announced on the slot's full barrier
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(
            full_u32, T.cast(A_BYTES + panel_bytes(tile_n), "uint32"))
        _tma_load(A_map, ring + T.cast(slot * STAGE_BYTES, "uint32"), full_u32, kt * BK, tile_m * BM)
        for p in T.unroll(PANELS):
            if (tile_n * BN + p * 32 < N) if SKIP_PANELS else True:
                _tma_load(B_map, ring + T.cast(slot * STAGE_BYTES + A_BYTES + p * PANEL_BYTES, "uint32"),
                          full_u32, *((kt * BK, tile_n * BN + p * 32) if TB else (tile_n * BN + p * 32, kt * BK)))

    @T.prim_func
    def main(A: T.Buffer(wl.a_shape, "float32"), B: T.Buffer(wl.b_shape, "float32"),
             C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        if COPY_A:  # A as M×K with a 16-byte pitch: transposed (tn, tt) or padded (pad_operands)
            A_pad = T.alloc_buffer((M, KP), "float32", scope="global")
            copy_a(A, A_pad)
        if PAD_B:
            B_pad = T.alloc_buffer((b_rows, BP), "float32", scope="global")
            pad_b(B, B_pad)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.evaluate(_encode_map(A_map, (A_pad if COPY_A else A).data, (KP, M), (BK, BM), 4, "float32", L2,
                               force_cu_dtype=DT_CU))
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.evaluate(_encode_map(B_map, (B_pad if PAD_B else B).data, (BP, b_rows), (BK, 32) if TB else (32, BK), 4,
                               "float32", L2, force_cu_dtype=DT_CU))
        if SPLIT > 1:
            # the partial products (workspace from the device's pool, see _ws_kernel)
            P = T.alloc_buffer((SPLIT, M, N), "float32", scope="global")
        with T.launch_thread("blockIdx.x", GRID) as bid:
            tid = T.launch_thread("threadIdx.x", cfg.threads)
            T.attr(0, "tirx.max_registers", cfg.launch_regs)
            # one uint32 buffer (the fragment loads index it): a uint8 buffer with a uint32 decl_buffer
            # view makes the default pipeline declare the storage as uint with the uint8 element count,
            # i.e. request 4x the dynamic shared memory at launch
            smem_w = T.alloc_buffer(((RING_BYTES + 1024) // 4,), "uint32", scope="shared.dyn")
            bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)
            acc = T.alloc_buffer((ACC,), "float32", scope="local")
            frag = T.alloc_buffer((2 * FRAG,), "uint32", scope="local")
            base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(smem_w.data)
            ring: T.let[T.uint32] = T.bitwise_and(base + T.uint32(1023), T.uint32(0xFFFFFC00))
            ring_w: T.let[T.int32] = T.cast(ring - base, "int32") // 4  # the ring in smem_w elements
            wg = T.meta_var(tid // WARPGROUP)
            lane = T.meta_var(tid % WARPGROUP)
            n_tiles: T.let[T.int32] = T.truncdiv(UNITS - 1 - bid, GRID) + 1
            if tid == 0:
                for s in T.unroll(S):
                    T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[s])), T.uint32(1))
                    T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(T.address_of(bars[S + s])),
                                                   T.uint32(NC))
                T.ptx.fence.mbarrier_init.release.cluster()
            T.cuda.cta_sync()
            if wg == 0:
                T.ptx["setmaxnreg.dec.sync.aligned.u32"](cfg.producer_regs)
                if lane == 0:
                    T.ptx.prefetch.tensormap(T.address_of(A_map))
                    T.ptx.prefetch.tensormap(T.address_of(B_map))
                    for i in T.serial(n_tiles):
                        if SPLIT > 1:
                            tm_, tn_ = T.meta_var(geo.tile_mn(T.truncmod(bid + i * GRID, TILES)))
                            k0: T.let[T.int32] = T.truncdiv(bid + i * GRID, TILES) * KTS  # first K tile
                        else:
                            tm_, tn_ = T.meta_var(geo.tile_mn(bid + i * GRID))
                        tile_m: T.let[T.int32] = tm_
                        tile_n: T.let[T.int32] = tn_
                        for kt in T.serial(KTS):
                            it: T.let[T.int32] = i * KTS + kt
                            slot: T.let[T.int32] = it % S
                            full_u32: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(T.address_of(bars[slot]))
                            T.cuda.mbarrier_wait(T.address_of(bars[S + slot]), it // S % 2 ^ 1)
                            if SPLIT == 1:
                                load(A_map, B_map, ring, full_u32, slot, kt, tile_m, tile_n)
                            elif PAD:
                                if k0 + kt < KT:
                                    load(A_map, B_map, ring, full_u32, slot, k0 + kt, tile_m, tile_n)
                                else:
                                    # past K: nothing to load; the phase still completes (no bytes)
                                    T.evaluate(T.ptx.mbarrier.arrive.shared.b64(full_u32, T.uint32(1)))
                            else:
                                load(A_map, B_map, ring, full_u32, slot, k0 + kt, tile_m, tile_n)
            else:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):
                    if SPLIT > 1:
                        part: T.let[T.int32] = _slice_of(bid + i * GRID, TILES, SPLIT)  # the unit's K slice
                    if PAD:
                        n_k: T.let[T.int32] = _k_tiles_of(part, KT, KTS)  # K tiles inside K
                    else:
                        n_k = T.meta_var(KTS)
                    # K tiles in pairs: fragment set 0 for even, 1 for odd (the set a K tile's wgmmas
                    # read must not be overwritten while they run: one K tile stays in flight)
                    for kt2 in T.serial(n_k // 2):
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + kt2 * 2, kt2 * 2, w, lane, 0)
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + kt2 * 2 + 1, kt2 * 2 + 1, w, lane, 1)
                    if PAD:
                        if n_k % 2 == 1:
                            consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + n_k - 1, n_k - 1, w, lane, 0)
                    elif KTS % 2 == 1:
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + KTS - 1, KTS - 1, w, lane, 0)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    if lane == 0:
                        T.evaluate(T.ptx.mbarrier.arrive.shared.b64(
                            T.cuda.cvta_generic_to_shared(T.address_of(bars[S + (i * KTS + n_k - 1) % S])),
                            T.uint32(1)))
                    if PAD:
                        # K tiles past K: keep the ring's protocol (wait for the empty fill, release it)
                        for kp in T.serial(KTS - n_k):
                            T.cuda.mbarrier_wait(T.address_of(bars[(i * KTS + n_k + kp) % S]),
                                                 (i * KTS + n_k + kp) // S % 2)
                            if lane == 0:
                                T.evaluate(T.ptx.mbarrier.arrive.shared.b64(T.cuda.cvta_generic_to_shared(
                                    T.address_of(bars[S + (i * KTS + n_k + kp) % S])), T.uint32(1)))
                    _fence_acc(acc, ACC)
                    if SPLIT > 1:
                        tm_, tn_ = T.meta_var(geo.tile_mn(T.truncmod(bid + i * GRID, TILES)))
                    else:
                        tm_, tn_ = T.meta_var(geo.tile_mn(bid + i * GRID))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    # D = C^T: accumulator (row r, col c) of subtile mt is C[tile_m*BM + c, n0 + r]
                    for mt in T.unroll(MT):
                        for j in T.unroll(BM // 8):
                            for h in T.unroll(2):
                                for e in T.unroll(2):
                                    row = T.meta_var(tile_m * BM + j * 8 + lane % 4 * 2 + e)
                                    col = T.meta_var(tile_n * BN + w * WGC + mt * 64 + lane // 32 * 16 + lane % 32 // 4
                                                     + h * 8)
                                    if T.And(row < M if ROW_CHECK else True, col < N if COL_CHECK else True):
                                        if SPLIT > 1:
                                            P[part, row, col] = acc[mt * NACC + j * 4 + h * 2 + e]
                                        else:
                                            C[row, col] = acc[mt * NACC + j * 4 + h * 2 + e]
        if SPLIT > 1:
            split_sum(P, C)

    return main


# ------------------------------------------------------------------------------------------------
# the registered steps: one structure, one piece turned on at a time
# ------------------------------------------------------------------------------------------------
def _launch(cfg, wl: Gemm) -> Launch:
    return Launch((cfg.grid(wl.M, wl.N, wl.K, wl.batches), 1, 1), (cfg.threads, 1, 1),
                  cfg.shared_bytes(itemsize(wl.dtype)),
                  threads_from="128 × (consumers + producer warpgroup)", shared_from="block tiles × stages",
                  dynamic_shared=True)


TmaConfig.launch = _launch
Tf32TmaConfig.launch = _launch


def _schedule(wl: Gemm, cfg):
    return s_tir.Schedule(tma_kernel(wl, cfg))


@dataclass(frozen=True)
class TmaLoadConfig(TmaConfig):
    warp_specialized: bool = False
    persistent: bool = False
    step_name = "tma_gemm"


@register("tma_gemm", "gemm", TmaLoadConfig, aliases=("tma",), tags=("float16",))
def tma_gemm(wl: Gemm, cfg: TmaLoadConfig = TmaLoadConfig()):
    """TMA loads: wgmma_gemm's 128 × 256 blocks and 4-slot ring, but the A and B tiles enter shared
    memory through the Tensor Memory Accelerator (``cp.async.bulk.tensor``), issued by one thread,
    their arrival tracked by mbarriers (``expect_tx`` / ``try_wait``) instead of cp.async groups.

    wgmma_gemm's 256 threads each issued 16-byte copies of every tile (8 192 per K tile) and spent
    issue slots and registers on their addresses; here one thread describes a whole tile with a
    tensor map (encoded on the host, ``cuTensorMapEncodeTiled``, passed to the kernel as a
    ``__grid_constant__`` parameter) and the copy engine writes it already in the 128-byte
    swizzled layout wgmma reads. Zero-filled past the matrix edges, so ragged shapes need no
    clamping. Shapes whose row pitch is not a multiple of 16 bytes cannot be described by a tensor
    map and are refused (best_fp16_gemm falls back to wgmma_gemm's cp.async there).
    """
    return _schedule(wl, cfg)


@dataclass(frozen=True)
class WarpSpecializedConfig(TmaConfig):
    persistent: bool = False
    step_name = "warp_specialized_gemm"


@register("warp_specialized_gemm", "gemm", WarpSpecializedConfig, aliases=("warp_specialized",), tags=("float16",))
def warp_specialized_gemm(wl: Gemm, cfg: WarpSpecializedConfig = WarpSpecializedConfig()):
    """Warp specialization: a producer warpgroup that only issues TMA loads and two consumer
    warpgroups that only wait and run wgmma, handing ring slots back and forth through full and
    empty mbarriers (4 slots); ``setmaxnreg`` moves registers from the producer (40 per thread) to
    the consumers (232).

    tma_gemm's warps still took turns: every K tile ended in a ``__syncthreads`` before thread 0
    could refill the slot. Here nobody waits for everybody: the producer refills a slot as soon as
    both consumers have released it, and the consumers never touch the copies. The registers the
    producer does not need become accumulator room for the consumers.
    """
    return _schedule(wl, cfg)


@dataclass(frozen=True)
class PersistentConfig(TmaConfig):
    step_name = "persistent_gemm"


@register("persistent_gemm", "gemm", PersistentConfig, aliases=("persistent",), tags=("float16",))
def persistent_gemm(wl: Gemm, cfg: PersistentConfig = PersistentConfig()):
    """Persistent tiles: warp_specialized_gemm with one block per SM that walks the output tiles in
    grouped order (8 block-rows per group), its producer loading the next tile's K tiles while the
    consumers store the current tile's accumulators.

    One block per tile paid a block launch, a barrier initialisation and an empty ring per tile,
    and its epilogue left the copy engine idle; a persistent block keeps its ring full across tile
    boundaries, so the next tile's first wgmmas find their operands waiting.
    """
    return _schedule(wl, cfg)


@dataclass(frozen=True)
class ClusterConfig(TmaConfig):
    cluster_m: int = 2
    step_name = "cluster_gemm"


@register("cluster_gemm", "gemm", ClusterConfig, aliases=("cluster",), tags=("float16",))
def cluster_gemm(wl: Gemm, cfg: ClusterConfig = ClusterConfig()):
    """Thread-block clusters: persistent_gemm with blocks paired in 2 × 1 clusters along M; the two
    blocks share a B tile, each loads half of its panels and multicasts them into both blocks'
    shared memory (``.multicast::cluster``), and a slot is released in both blocks.

    B is then read from L2 once per pair instead of twice: half the B traffic between L2 and the
    SMs, which matters where that traffic, not the tensor cores, sets the pace.
    """
    return _schedule(wl, cfg)


@register("tma_tf32_gemm", "gemm", Tf32TmaConfig, aliases=("tf32_tma",), tags=("tf32",))
def tma_tf32_gemm(wl: Gemm, cfg: Tf32TmaConfig = Tf32TmaConfig()):
    """TF32 on the persistent, warp-specialized structure: fp32 inputs read as tf32, computed as
    Cᵀ = Bᵀ·Aᵀ so that no operand has to be transposed on its way in.

    tf32 wgmma reads shared-memory operands k-major only; B (K×N, row-major) is n-major, which is
    why wgmma_tf32_gemm copied it element by element. Transposed, the product's shared-memory
    operand is Aᵀ, i.e. the A tile exactly as TMA loads it, and the other operand, Bᵀ, comes from
    registers (wgmma's register-A form), each thread reading its fragment from an n-major TMA tile
    of B with four 32-bit shared loads per k8 step. The tensor maps round fp32 to tf32 on load
    (``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``). The accumulators hold Cᵀ and are stored transposed.
    """
    return _schedule(wl, cfg)
