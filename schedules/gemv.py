"""GEMV steps, y = A·x with A M×N row-major (fp32, or fp16 inputs with an fp32 sum): a group of
lanes per row (part of a warp, a warp, or several warps), partial sums in registers, a shuffle
reduction; and the transposed form y = Aᵀ·x, read column-wise.

GEMV moves every byte of A once and does two flops per 4 (or 2) bytes, so the only ceiling is
device-memory bandwidth. What keeps a kernel below it: loads that are not coalesced, too few bytes
in flight per SM (narrow loads, one load at a time per lane), idle lanes (short rows), too few
blocks (long rows, few of them), and for the transposed form a single block per column strip.

TVM emits the shuffles itself: binding the reduction loop to threadIdx.x makes
``LowerCrossThreadReduction`` keep per-lane partial sums and ``LowerThreadAllreduce`` reduce them
with ``__shfl_down_sync``; with more than 32 lanes on a row it adds a second stage through a
``__shared__`` buffer. Rows past M and columns past N are predicated off (``T.where``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .calibration import CALIBRATION
from .common import (SECTOR_BYTES, aligned_vector, blocks_per_sm, ceil_div, current_gpu, epilogue_block,
                     inline_padding, new_schedule, register_accumulator, register_fragments)
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm, Gemv, GemvT, itemsize

VECTOR_BYTES = 16  # the widest load a CUDA thread issues: 128 bits (float4, or 8 halves)


def resident_warps(value: int = 0) -> int:
    """``value``, or where it is 0 the warps the current GPU holds at once (SMs × warps per SM)."""
    gpu = current_gpu()
    return value or gpu.sms * gpu.threads_per_sm // 32


def widest_vector(wl) -> int:
    """Elements in one 128-bit load of ``wl``'s input type: 4 floats or 8 halves."""
    return VECTOR_BYTES // itemsize(wl.dtype)


def _check_vector(wl, vector):
    if vector not in (1, 2, 4, 8):
        raise ScheduleParamError(f"vector must be 1, 2, 4 or 8 (elements per load), got {vector}")
    if vector * itemsize(wl.dtype) > VECTOR_BYTES:
        raise ScheduleParamError(
            f"vector = {vector} {wl.dtype} elements is {vector * itemsize(wl.dtype) * 8} bits: loads are at most 128")


# --- GEMV forms: a GEMV, a transposed GEMV, or a GEMM with one output row or column -----------------
def vector_form(wl) -> tuple[str, int] | None:
    """How a GEMM is a matrix-vector product, as ``(form, matrix)``: ``form`` "row" (the matrix is
    read along its stored rows, one sum per row: the row-wise GEMV steps) or "column" (the sums run
    down its stored columns: the transposed GEMV step), ``matrix`` the read index of the operand
    that is the matrix (0: A, 1: B); None for a GEMM that is not one (or a batch of them).

    N = 1: A is the matrix; stored M×K (nn, nt) its rows are the sums (row form), stored K×M (tn,
    tt) its columns are (column form). M = 1: B is the matrix; stored K×N (nn, tn) the column form,
    stored N×K (nt, tt) the row form. The vector's layout never matters (a 1×K or K×1 operand is
    the same bytes), nor does A's when M = N = 1."""
    if wl.kind != "gemm" or getattr(wl, "batched", False):
        return None
    if wl.N == 1:
        return ("column", 0) if wl.trans_a and wl.M != 1 else ("row", 0)
    if wl.M == 1:
        return ("row", 1) if wl.trans_b else ("column", 1)
    return None


def gemv_shape(wl):
    """The GEMV a workload is: itself, or for a GEMM with N = 1 the row form y = A·x (Gemv(M, K):
    B is the vector) and with M = 1 the column form y = Bᵀ·x (GemvT(K, N): A is the vector), as its
    stored matrix is read (:func:`vector_form`: A stored K×M with N = 1 is GemvT(K, M), B stored N×K
    with M = 1 is Gemv(N, K)). The GEMV steps size their launch and choose their parameters from
    this."""
    if wl.kind in ("gemv", "gemv_t"):
        return wl
    form = vector_form(wl)
    if form is None:
        raise ScheduleParamError(f"{wl} is not a matrix-vector product (a GEMM needs M = 1 or N = 1, and no batch)")
    outputs = wl.M if form[1] == 0 else wl.N  # one sum per row (row form) or column (column form) of the matrix
    if form[0] == "row":
        return Gemv(outputs, wl.K, wl.dtype, wl.acc_dtype)
    return GemvT(wl.K, outputs, wl.dtype, wl.acc_dtype)


def row_form(wl) -> bool:
    """A GEMM the row-wise GEMV steps take: one output column of a matrix read along its stored
    rows (C = A·b, or Cᵀ = B·a with B stored N×K)."""
    form = vector_form(wl)
    return form is not None and form[0] == "row"


def _column_form(wl) -> bool:
    """A GEMM the transposed GEMV step takes: one output row of a matrix read down its stored
    columns (c = a·B, or C = Aᵀ-stored·b with A stored K×M)."""
    form = vector_form(wl)
    return form is not None and form[0] == "column"


def _start(wl, pad: int | None = None):
    """``(sch, block, out_loop, reduce_loop, matrix_read_index, pad_names)`` of a GEMV form: a GEMM's
    unit output loop is fused away, so every schedule below sees one output loop and the sum."""
    gemv_shape(wl)  # refuses a GEMM that is not a matrix-vector product
    sch = new_schedule(wl.prim_func())
    name = "C" if wl.kind == "gemm" else "y"
    block = sch.get_sblock(name)
    if pad is not None:
        sch.pad_einsum(block, [1] * (len(sch.get_loops(block)) - 1) + [pad])
    loops = sch.get_loops(block)
    out = sch.fuse(*loops[:-1]) if len(loops) == 3 else loops[0]
    matrix = vector_form(wl)[1] if wl.kind == "gemm" else 0  # the read index of the matrix (B for y = Bᵀ·x)
    pads = ("A_pad", "B_pad") if wl.kind == "gemm" else ("A_pad", "x_pad")
    return sch, block, out, loops[-1], matrix, pads


def _final_loops(sch, wl):
    """The summing block of an rfactor'd GEMV form and its loops (output, partial index)."""
    final = sch.get_sblock("C" if wl.kind == "gemm" else "y")
    return final, sch.get_loops(final)


# --- row-wise GEMV: the shared body ---------------------------------------------------------------

def row_gemv(wl: Gemv, *, lanes: int, rows_per_warp: int, rows_per_block: int, vector: int, unroll: int):
    """``lanes`` threads per row (threadIdx.x), ``rows_per_warp`` rows side by side in a warp
    (threadIdx.y), ``rows_per_block`` warps or row groups per block (threadIdx.z); each lane loads
    ``vector`` contiguous elements per instruction and has ``unroll`` such loads in flight.

    The reduction loop is split k = ((ko·unroll + u)·lanes + lane)·vector + v: consecutive lanes read
    consecutive vectors (coalesced), ``u`` is unrolled so that its ``unroll`` independent loads are
    issued back to back, and ``v`` is a register fragment filled by one wide load.
    """
    sch, block, i, k, _, _ = _start(wl)
    vector = aligned_vector(gemv_shape(wl).N, vector)
    bx, tz, ty = sch.split(i, [None, rows_per_block, rows_per_warp])
    ko, u, tx, v = sch.split(k, [None, unroll, lanes, vector])
    sch.reorder(bx, tz, ty, tx, ko, u, v)
    if vector > 1:
        register_fragments(sch, block, u)  # each lane's vector of A and x in registers: one wide load
        sch.unroll(v)
    if unroll > 1:
        sch.unroll(u)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tz, "threadIdx.z")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    _row_epilogue(sch, block, bx, lanes)
    return sch


def _row_epilogue(sch, block, bx, lanes: int):
    """The epilogue of a GEMM form (bias, activation, residual, scaling, a 16-bit output: the
    elementwise block "D"), computed where the block's sums are: each row's sum left by the lanes'
    reduction in shared memory (C never reaches global memory), then the block's outputs by its first
    ``lanes`` threads, each reading its bias and R and writing D once (dlight's GEMV rule does the
    same). A plain product is left as it is."""
    epilogue = epilogue_block(sch)
    if epilogue is None:
        return
    sch.set_scope(block, 0, "shared")
    sch.reverse_compute_at(epilogue, bx, preserve_unit_loops=True)
    outputs = sch.fuse(*sch.get_loops(epilogue)[1:])
    _, t = sch.split(outputs, [None, lanes])
    sch.bind(t, "threadIdx.x")


@dataclass(frozen=True)
class WarpRowConfig(StepConfig):
    also_takes = staticmethod(row_form)  # a GEMM that is a matrix-vector product
    layouts = LAYOUTS  # a GEMM form in any layout: its matrix is read as stored (vector_form)
    epilogues = True  # a GEMM form's epilogue and output type, on the block's sums (_row_epilogue)
    lanes: int = 32           # threads that share one row (a warp, or part of one)
    rows_per_warp: int = 1    # rows one warp reduces side by side (lanes × rows_per_warp ≤ 32)
    warps_per_block: int = 4
    vector: int = 1           # elements per lane per load (4 fp32 / 8 fp16 = 128-bit)
    unroll: int = 1           # loads in flight per lane (unrolled steps along the row)

    def check(self, wl):
        wl = gemv_shape(wl)
        if self.lanes * self.rows_per_warp > 32:
            raise ScheduleParamError(
                f"lanes × rows_per_warp = {self.lanes * self.rows_per_warp} must fit in one warp (32)")
        if self.rows_per_warp > 1 and 32 % (self.lanes * self.rows_per_warp):
            raise ScheduleParamError(f"lanes × rows_per_warp = {self.lanes * self.rows_per_warp} must divide 32")
        _check_vector(wl, self.vector)

    @property
    def rows_per_block(self) -> int:
        return self.warps_per_block * self.rows_per_warp

    def launch(self, wl: Gemv) -> Launch:
        wl = gemv_shape(wl)
        return Launch(grid=(ceil_div(wl.M, self.rows_per_block), 1, 1),
                      block=(self.lanes, self.rows_per_warp, self.warps_per_block),
                      threads_from="lanes × rows_per_warp × warps_per_block")


def warp_row_gemv(wl: Gemv, cfg: WarpRowConfig):
    """warp_gemv, vectorized_gemv and multi_row_gemv share this body: ``row_gemv`` with one warp's lanes split over its rows."""
    return row_gemv(wl, lanes=cfg.lanes, rows_per_warp=cfg.rows_per_warp, rows_per_block=cfg.warps_per_block,
                    vector=cfg.vector, unroll=cfg.unroll)


@register("warp_gemv", "gemv", WarpRowConfig, aliases=("gemv_warp",))
def warp_gemv(wl: Gemv, cfg: WarpRowConfig = WarpRowConfig()):
    """One warp per row: 32 lanes stride along the row, partial sums in registers, then a
    warp-shuffle reduction (for N around 32).

    Consecutive lanes read consecutive elements of A, so every warp load is one coalesced 128-byte
    transaction, and the reduction never touches shared memory.
    """
    return warp_row_gemv(wl, cfg)


@dataclass(frozen=True)
class VectorGemvConfig(WarpRowConfig):
    vector: int = 4
    unroll: int = 4


@register("vectorized_gemv", "gemv", VectorGemvConfig, aliases=("gemv_float4",))
def vectorized_gemv(wl: Gemv, cfg: VectorGemvConfig = VectorGemvConfig()):
    """One warp per row with 128-bit loads (float4) and several loads in flight per lane (N ≥ 128).

    Each lane loads four floats per instruction: a quarter of the load instructions of warp_gemv for
    the same bytes, and with ``unroll`` loads issued back to back, ``unroll`` × 16 bytes in flight
    per lane, which is what it takes to cover DRAM latency at full bandwidth. Rows start 16-byte
    aligned only when N % 4 == 0; otherwise the loads narrow to what the alignment allows (float2
    or scalar), and a row's last partial vector is predicated off.
    """
    return warp_row_gemv(wl, cfg)


@dataclass(frozen=True)
class MultiRowGemvConfig(WarpRowConfig):
    lanes: int = 16
    rows_per_warp: int = 2


@register("multi_row_gemv", "gemv", MultiRowGemvConfig, aliases=("gemv_multi_row",))
def multi_row_gemv(wl: Gemv, cfg: MultiRowGemvConfig = MultiRowGemvConfig()):
    """Several rows per warp (short rows): ``lanes`` threads per row, 32 / lanes rows per warp.

    With N = 16 a full warp per row would leave half its lanes idle; two half-warps each reduce
    their own row (shuffle offsets 8, 4, 2, 1), so every lane loads useful data. With float4 loads
    N = 16 needs only 4 lanes per row: 8 rows per warp, one 512-byte coalesced load per warp.
    """
    return warp_row_gemv(wl, cfg)


@dataclass(frozen=True)
class MultiWarpGemvConfig(StepConfig):
    also_takes = staticmethod(row_form)  # a GEMM that is a matrix-vector product
    layouts = LAYOUTS  # a GEMM form in any layout: its matrix is read as stored (vector_form)
    epilogues = True  # a GEMM form's epilogue and output type, on the block's sums (_row_epilogue)
    warps_per_row: int = 4    # lanes on one row = 32 × warps_per_row
    rows_per_block: int = 1
    vector: int = 4
    unroll: int = 2

    @property
    def lanes(self) -> int:
        return 32 * self.warps_per_row

    def check(self, wl):
        _check_vector(gemv_shape(wl), self.vector)

    def launch(self, wl: Gemv) -> Launch:
        wl = gemv_shape(wl)
        return Launch(grid=(ceil_div(wl.M, self.rows_per_block), 1, 1),
                      block=(self.lanes, 1, self.rows_per_block),
                      shared_bytes=4 * self.warps_per_row * self.rows_per_block,
                      threads_from="32 × warps_per_row × rows_per_block",
                      shared_from="warps_per_row × rows_per_block")


@register("multi_warp_gemv", "gemv", MultiWarpGemvConfig, aliases=("gemv_multi_warp",))
def multi_warp_gemv(wl: Gemv, cfg: MultiWarpGemvConfig = MultiWarpGemvConfig()):
    """Several warps per row (very long rows, few of them): a two-stage reduction.

    With M small and N large, one warp per row gives too few warps to keep every SM's loads in
    flight. Here ``warps_per_row`` warps share a row: each reduces its lanes by shuffles, writes
    one partial per warp to a ``__shared__`` buffer, and after a barrier the first warp reduces
    those by shuffles again (TVM emits both stages when the reduction is bound to > 32 threads).
    """
    return row_gemv(wl, lanes=cfg.lanes, rows_per_warp=1, rows_per_block=cfg.rows_per_block,
                    vector=cfg.vector, unroll=cfg.unroll)


@dataclass(frozen=True)
class SplitKGemvConfig(StepConfig):
    also_takes = staticmethod(row_form)  # a GEMM that is a matrix-vector product
    layouts = LAYOUTS  # a GEMM form in any layout: its matrix is read as stored (vector_form)
    splits: int | None = None     # chunks each row is cut into (blockIdx.y); None: enough for resident_warps
    warps_per_chunk: int = 8      # lanes on one chunk = 32 × warps_per_chunk (two-stage reduction)
    vector: int | None = None     # elements per load; None: the widest the row alignment allows
    unroll: int = 1
    resident_warps: int = 0       # 0: the GPU's (SMs × warps per SM: 132 × 64 = 8448 on H100/H200)
    zero_means_auto = ("resident_warps",)

    @property
    def lanes(self) -> int:
        return 32 * self.warps_per_chunk

    def vector_for(self, wl) -> int:
        wl = gemv_shape(wl)
        return aligned_vector(wl.N, self.vector or widest_vector(wl))

    def chunk(self, wl) -> int:
        """Elements per chunk: a whole number of steps of all lanes (every chunk starts aligned),
        and the chunks cover the padded row exactly: the split count divides the step count."""
        wl = gemv_shape(wl)
        step = self.lanes * self.vector_for(wl) * self.unroll
        steps = ceil_div(wl.N, step)
        want = self.splits or ceil_div(resident_warps(self.resident_warps), wl.M * self.warps_per_chunk)
        divisors = [d for d in range(1, steps + 1) if steps % d == 0]
        splits = next((d for d in divisors if d >= want), divisors[-1])
        return steps // splits * step

    def check(self, wl):
        _check_vector(wl, self.vector_for(wl))

    def launch(self, wl: Gemv) -> Launch:
        chunk, wl = self.chunk(wl), gemv_shape(wl)
        return Launch(grid=(wl.M, ceil_div(wl.N, chunk), 1), block=(self.lanes, 1, 1),
                      shared_bytes=4 * self.warps_per_chunk, threads_from="32 × warps_per_chunk")


@register("split_k_gemv", "gemv", SplitKGemvConfig, aliases=("gemv_split_k",))
def split_k_gemv(wl: Gemv, cfg: SplitKGemvConfig = SplitKGemvConfig()):
    """Split-K for very few, very long rows (M = 1 … tens): each row cut into chunks, one block
    per (row, chunk), then a second kernel adds each row's chunk sums.

    Several warps per row still leave most SMs idle when there are only a few rows; cutting each
    row into ``splits`` chunks (``rfactor`` over the chunk index, bound to blockIdx.y) gives
    M × splits blocks. Each block reduces its chunk like multi_warp_gemv (shuffles, then shared memory);
    the partials y_rf[chunk, row] are added by one block per row (a cross-thread reduction).
    """
    vector, chunk = cfg.vector_for(wl), cfg.chunk(wl)
    # Pad the row to whole steps (zero-filled reads, inlined below): TVM 0.27 silently drops the
    # cross-thread reduction of an rfactor block that carries a T.where predicate, and emits
    # racy updates of y_rf instead, so the rfactor block must not need one.
    sch, block, i, k, _, pads = _start(wl, pad=cfg.lanes * vector * cfg.unroll)
    ks, kr = sch.split(k, [None, chunk])
    rf = sch.rfactor(ks, factor_axis=0)
    i, ks, kr = sch.get_loops(rf)
    ko, u, tx, v = sch.split(kr, [None, cfg.unroll, cfg.lanes, vector])
    sch.reorder(i, ks, tx, ko, u, v)
    if vector > 1:
        register_fragments(sch, rf, u)
        sch.unroll(v)
    if cfg.unroll > 1:
        sch.unroll(u)
    sch.bind(i, "blockIdx.x")
    sch.bind(ks, "blockIdx.y")
    sch.bind(tx, "threadIdx.x")
    inline_padding(sch, reads=pads, writes=())
    final, (i, s) = _final_loops(sch, wl)
    so, sx = sch.split(s, [None, min(256, max(32, _pow2_at_least(ceil_div(gemv_shape(wl).N, chunk))))])
    sch.bind(i, "blockIdx.x")
    sch.bind(sx, "threadIdx.x")
    return sch


# --- the dispatcher ----------------------------------------------------------------------------

def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


@dataclass(frozen=True)
class GemvDispatchConfig(StepConfig):
    """Shape thresholds the dispatcher uses; row bytes = N × element size.

    Each threshold is a crossover measured on an NVIDIA H200 (copy bandwidth 4250 GB/s) with
    ``scripts/bench_gemv.py``, medians with the harness's L2 flush: the parameter sweep
    ``--sweep --extra`` of 2026-11-22 02:59 UTC (reports/results/NVIDIA_H200/gemv_sweep/sweep.csv) and the benchmark of
    03:16 UTC, commit 2c3cc0c7cdf8 (reports/results/NVIDIA_H200/bench_gemv/). Below ~0.5 µs (small shapes) or
    ~2 % (large ones) the differences are noise.
    """

    also_takes = staticmethod(row_form)  # a GEMM that is a matrix-vector product
    layouts = LAYOUTS  # a GEMM form in any layout: its matrix is read as stored (vector_form)
    epilogues = True  # taken by every step it picks for a GEMM form with one (not split_k_gemv: see pick)

    # Rows of ≤ 256 bytes share a warp. 16384×16: 4 lanes × 8 rows 5.2 µs vs warp/row 7.0;
    # ×32: 8 lanes 5.8 vs 7.3; ×64: 8 lanes 6.5 vs 7.6; ×128 (512 B): warp/row 8.0 = 16 lanes 8.1;
    # ×17 (scalar): 16 lanes × 2 rows 5.7 vs warp/row 7.1.
    multi_row_max_row_bytes: int = 256
    multi_row_lanes_vector: int = 8    # lanes per row with 128-bit loads (×64: 8 lanes 6.5 vs 16 lanes 6.7)
    multi_row_lanes_scalar: int = 16   # lanes per row with scalar loads (×17: 16 lanes 5.7)
    # Rows of ≥ 4 KiB go to several warps per row. 16384×1024: 4 warps 25.5 µs vs warp/row 26.0;
    # 16384×4096: 8 warps 71.8 vs 4 warps 72.3 vs warp/row 73.4; 8192×8192: 8 warps 72.2 vs 73.6;
    # 16384×4097 (scalar): 8 warps 72.6 vs warp/row 77.7; fp16 16384×4096 (8 KiB): 4 warps 42.5 vs 43.5.
    multi_warp_min_row_bytes: int = 4096
    multi_warp_wide_row_bytes: int = 16384   # from here 8 warps per row, below it 4
    # Rows of 256 B - 4 KiB, fewer of them than the GPU holds warps: several warps per row too, as many
    # as 8 with no lane idle (H100, aa55016, reports/results/NVIDIA_H100_80GB_HBM3/gemv_mid_rows: 167×1010
    # fp32 warp/row 11.6 µs, 8 warps 5.4; 466×526 8.2 → 5.2; 1000×1000 7.3 → 6.2; of 16 shapes none more
    # than 1.3% slower). Many rows (16384×1024 above) keep one warp a row.
    # Few rows: enough warps per row to put about ``resident_warps`` warps on the GPU (0: the GPU's,
    # SMs × warps per SM: 132 × 64 on H100/H200), up to 32 (1024 threads). 256×65536: 32 warps 26.3
    # µs, 16: 27.1, 8: 32.5 (31.8 in the sweep), 4: 43.2, 2: 69.5.
    resident_warps: int = 0
    zero_means_auto = ("resident_warps",)
    # Fewer rows than this (with ≥ 4 KiB rows): split-K, several blocks per row. ×65536 rows:
    # M = 1: split-K 7.2 µs vs 32 warps/row 8.4; M = 16: 9.3 vs 9.5; M = 256: 29.0 vs 26.3. The
    # crossover lies between 16 and 256 rows; 64 is inside it, not itself measured.
    split_k_max_rows: int = 64
    warps_per_block: int = 4   # warp/row: 2, 4, 8 warps per block within 1 % at 16384×4096
    max_unroll: int = 4        # loads in flight per lane: unroll 1–8 of float4 within 1 % at N ≥ 1024

    def pick(self, wl: Gemv):
        """(builder, configuration) of the GEMV step this shape goes to (the thresholds above)."""
        epilogue = getattr(wl, "has_epilogue", False)  # split_k_gemv's partial sums take none: several warps a row
        wl = gemv_shape(wl)
        item = itemsize(wl.dtype)
        vector = aligned_vector(wl.N, widest_vector(wl))
        lanes_needed = ceil_div(wl.N, vector)
        row_bytes = wl.N * item
        unroll_max = self.max_unroll
        if row_bytes <= self.multi_row_max_row_bytes:
            cap = self.multi_row_lanes_vector if vector > 1 else self.multi_row_lanes_scalar
            lanes = min(cap, _pow2_at_least(lanes_needed))
            # no more rows per block than the matrix has: with one row, TVM's lowering of the rows'
            # reduction drops the store's row test (the output's index folds to 0), and the padded rows'
            # threads stored their zero sums over the row's (gemm:1x1x4 was wrong on a GPU)
            per_warp = min(32 // lanes, _pow2_at_least(wl.M))
            warps = min(self.warps_per_block, ceil_div(wl.M, per_warp))
            return multi_row_gemv, MultiRowGemvConfig(lanes=lanes, rows_per_warp=per_warp,
                                                      warps_per_block=warps, vector=vector, unroll=1)
        if self.multi_row_max_row_bytes < row_bytes < self.multi_warp_min_row_bytes \
                and wl.M < resident_warps(self.resident_warps):
            # rows of 256 B - 4 KiB, fewer than the GPU holds warps: one warp a row leaves most warp slots
            # empty and each warp's loads follow one another; up to 8 warps a row, no lane idle
            warps = 8
            while warps > 1 and 32 * warps > lanes_needed:
                warps //= 2
            if warps >= 2:
                return multi_warp_gemv, MultiWarpGemvConfig(warps_per_row=warps, rows_per_block=1, vector=vector,
                                                            unroll=max(1, min(unroll_max, ceil_div(lanes_needed,
                                                                                                   32 * warps))))
        if row_bytes >= self.multi_warp_min_row_bytes and wl.M < self.split_k_max_rows and not epilogue:
            return split_k_gemv, SplitKGemvConfig(vector=vector, resident_warps=self.resident_warps)
        if row_bytes >= self.multi_warp_min_row_bytes:
            warps = 8 if row_bytes >= self.multi_warp_wide_row_bytes else 4
            while warps < 32 and wl.M * warps < resident_warps(self.resident_warps) and 32 * warps * 2 <= lanes_needed:
                warps *= 2
            per_lane = ceil_div(lanes_needed, 32 * warps)
            return multi_warp_gemv, MultiWarpGemvConfig(warps_per_row=warps, rows_per_block=1, vector=vector,
                                                        unroll=max(1, min(unroll_max, per_lane)))
        unroll = max(1, min(unroll_max, ceil_div(lanes_needed, 32)))
        if vector > 1:
            return vectorized_gemv, VectorGemvConfig(warps_per_block=self.warps_per_block, vector=vector,
                                                     unroll=unroll)
        return warp_gemv, WarpRowConfig(warps_per_block=self.warps_per_block, unroll=unroll)

    def launch(self, wl: Gemv) -> Launch:
        _, cfg = self.pick(wl)
        return cfg.launch(wl)

    def kernels(self, wl) -> int:
        """Kernels one call launches: split_k_gemv's two (each chunk's partial sums, then a kernel adding
        them per row), one for the others."""
        return 2 if self.pick(wl)[0] is split_k_gemv else 1


@register("gemv_dispatch", "gemv", GemvDispatchConfig, aliases=("gemv_auto",))
def gemv_dispatch(wl: Gemv, cfg: GemvDispatchConfig = GemvDispatchConfig()):
    """Dispatcher: picks among the GEMV steps before it and their parameters by shape.

    Short rows (≤ 256 B): several rows per warp with the widest aligned load; long rows (≥ 4 KiB):
    several warps per row (more when there are few rows), split-K when the rows are very few;
    rows in between: up to 8 warps per row where there are fewer rows than the GPU holds warps,
    otherwise one warp per row, 128-bit loads where N allows, unrolled by the row length.
    Thresholds are measured crossovers (see GemvDispatchConfig).
    """
    builder, chosen = cfg.pick(wl)
    return builder(wl, chosen)


# --- the transposed form -------------------------------------------------------------------------

SINGLE_PASS_ROWS = 16  # rows per thread (unrolled: their loads in flight together) of column_gemv_t's one kernel
FINAL_PARTIALS_A_THREAD = 16  # partials a thread adds in column_gemv_t's second kernel, where 1024 threads allow


def second_launch_bytes() -> float:
    """What a second kernel's launch costs, in bytes at the GPU's memory bandwidth (the calibrated
    launch time × ``memory_gbps``): 8.6 MB with the H100 profile."""
    return CALIBRATION["launch_us"] * current_gpu().memory_gbps * 1e3


@dataclass(frozen=True)
class ColumnGemvConfig(StepConfig):
    also_takes = staticmethod(_column_form)  # a GEMM that is a matrix-vector product
    layouts = LAYOUTS  # a GEMM form in any layout: its matrix is read as stored (vector_form)
    threads: int = 256          # threads per block: columns (threadIdx.x) × rows (threadIdx.y)
    max_threads_x: int = 32     # threads along the columns (wide A); fewer when N / vector is smaller
    vector: int | None = None   # contiguous columns per thread per load; None: 128 bits (4 fp32, 8 fp16)
    rows_per_slice: int | None = None  # rows one thread sums; None: chosen from the shape (see slice_rows)
    target_threads: int = 65536  # wide A: aim for about this many threads in the first kernel
    narrow_max_n: int = 64      # N ≤ this: scalar loads, one thread per column, rows reduced inside the block
    target_blocks: int = 0      # narrow A: aim for about this many blocks (0: 2 per SM of the GPU, 264 on H100/H200)
    single_pass: bool = True    # one kernel where a block's threads cover the rows with SINGLE_PASS_ROWS each or fewer
    single_pass_max_threads: int = 1024  # the single pass's threads a block where ``threads`` leave more rows each
    # _serial_columns (each thread adds every row of its columns): at most serial_rows rows, or at most
    # serial_wave_rows where the single pass would launch more than one wave of blocks. On an H200, 32 shapes
    # 1 x 64-16384 x 2-128 (reports/results/NVIDIA_H200/gemv_column_serial): at 2-12 rows it beat the single
    # pass on all 16 (1.01-1.32x), at 14-43 it lost by 1-11% on 7 of 9; of the other two, 1x11071x28 (3-column
    # groups, 3690 blocks) it ran in 5.6 us against 14.8 (1x67x24, 1.07x, one wave: left to the single pass)
    serial_columns: bool = True
    serial_rows: int = 12
    serial_wave_rows: int = 64
    # wide A, two kernels: rows of a thread's slice loaded together (the largest divisor of its rows up to
    # this; 1: the slice's loop as it comes, a load then an add). On an H200, 12 products 1 x 777-16384 x
    # 1024-30000 (reports/results/NVIDIA_H200/gemv_column_groups): 8 ran 1.185x faster than 1 (0.95-2.03x)
    rows_unroll: int = 8
    zero_means_auto = ("target_blocks",)

    def serial(self, wl) -> bool:
        """Whether one kernel sums the rows with no sum across threads (:func:`_serial_columns`): at most
        ``serial_rows`` of them (a thread's loads all in flight at once), or at most ``serial_wave_rows``
        where the single pass's blocks (N over its column groups) are more than the GPU holds at once:
        narrow groups (N prime, or a small multiple of one) give it thousands of blocks of mostly
        padded rows, which run wave after wave."""
        rows = gemv_shape(wl).M
        return self.serial_columns and (rows <= self.serial_rows or
                                        (rows <= self.serial_wave_rows and self.single_pass_waves(wl) > 1))

    def single_pass_waves(self, wl) -> float:
        """The single pass's blocks over the blocks of its size the GPU holds at once."""
        tx, ty = self.single_pass_threads(wl)
        gpu = current_gpu()
        return gemv_shape(wl).N // tx / (gpu.sms * blocks_per_sm(tx * ty, 0, 0, gpu))

    def serial_threads(self, wl) -> int:
        """The serial kernel's threads per block, all along the columns: enough blocks for every SM
        where the columns allow (a warp at least, 256 at most)."""
        lanes = ceil_div(gemv_shape(wl).N, self.vector_for(wl))
        if lanes <= 32:
            return _pow2_at_least(lanes)
        return max(32, min(self.threads, _pow2_at_least(ceil_div(lanes, current_gpu().sms))))

    def single_pass_threads(self, wl) -> tuple[int, int]:
        """One kernel's threads (along the columns, along the rows): the columns in groups of the
        largest divisor of N up to 64 (no column predicate may reach the rows' cross-thread sum),
        the rest of the block's threads along the rows, and where those would add more than
        ``SINGLE_PASS_ROWS`` rows each, as many more as that takes, up to ``single_pass_max_threads``
        threads a block (a second kernel's launch costs more than a block's sum across 1024 threads)."""
        shape = gemv_shape(wl)
        tx = max(d for d in range(1, min(shape.N, 64) + 1) if shape.N % d == 0)
        ty = max(1, self.threads // tx)
        if ceil_div(shape.M, ty) > SINGLE_PASS_ROWS:  # more rows: more threads along them, up to the block's most
            ty = max(ty, min(self.single_pass_max_threads // tx, ceil_div(shape.M, SINGLE_PASS_ROWS)))
        return tx, ty

    def one_kernel(self, wl) -> bool:
        """Whether one kernel sums every row: ``single_pass``, a block's threads along the rows
        cover them with at most ``SINGLE_PASS_ROWS`` rows each (a small matrix, or a short and wide
        one), and the sectors its narrow column groups waste cost less than the second kernel's
        launch (:meth:`sector_waste_bytes`)."""
        ty = self.single_pass_threads(wl)[1]
        return self.serial(wl) or (self.single_pass and ceil_div(gemv_shape(wl).M, ty) <= SINGLE_PASS_ROWS
                and self.sector_waste_bytes(wl) <= second_launch_bytes())

    def sector_waste_bytes(self, wl) -> float:
        """Bytes the one kernel reads and does not use: its column groups are the largest divisor of N
        up to 64 wide, so where that is narrower than a 32-byte sector (N prime, or 2 or 3 times a
        prime, ...) each warp's load of a row piece moves a whole sector for it. N = 5333 (prime):
        one column a block, 8 sectors' worth read per sector used; 1×5333×1512 took 68.4 µs in one
        kernel and 18.9 in two (H100; cuBLAS 17.3)."""
        item = itemsize(wl.dtype)
        tx = self.single_pass_threads(wl)[0]
        shape = gemv_shape(wl)
        return shape.M * shape.N * item * max(0.0, SECTOR_BYTES / (tx * item) - 1)

    def kernels(self, wl) -> int:
        return 1 if self.one_kernel(wl) else 2

    def narrow(self, wl) -> bool:
        return gemv_shape(wl).N <= self.narrow_max_n

    def vector_for(self, wl) -> int:
        if self.narrow(wl):
            return 1
        wl = gemv_shape(wl)
        return aligned_vector(wl.N, self.vector or widest_vector(wl))

    def threads_x(self, wl) -> int:
        if self.narrow(wl):
            # one thread per column: a block's threads read whole consecutive rows (coalesced,
            # nothing idle), and no column predicate reaches the cross-thread reduction (TVM's
            # lowering of that reduction drops such a predicate on its final store)
            return min(gemv_shape(wl).N, self.threads)
        return min(self.max_threads_x, self.threads,
                   _pow2_at_least(ceil_div(gemv_shape(wl).N, self.vector_for(wl))))

    def threads_y(self, wl) -> int:
        return max(1, self.threads // self.threads_x(wl))

    def slice_rows(self, wl) -> int:
        """Rows one thread adds up before its sum leaves registers."""
        narrow, wl = self.narrow(wl), gemv_shape(wl)
        if self.rows_per_slice:
            return self.rows_per_slice
        rows = 1 if narrow else 8
        if narrow:   # enough blocks of threads_y rows each
            blocks = self.target_blocks or 2 * current_gpu().sms
            while rows < 64 and ceil_div(wl.M, rows * 2 * self.threads_y(wl)) >= blocks:
                rows *= 2
            return rows
        columns = ceil_div(wl.N, self.vector_for(wl))
        while rows < 128 and ceil_div(wl.M, rows * 2) * columns >= self.target_threads:
            rows *= 2
        return rows

    def check(self, wl):
        _check_vector(gemv_shape(wl), self.vector_for(wl))

    def row_group(self, wl) -> int:
        """Rows of a thread's slice whose loads are issued together: the largest divisor of the slice's
        rows up to ``rows_unroll``."""
        rows = self.slice_rows(wl)
        return max(d for d in range(1, min(self.rows_unroll, rows) + 1) if rows % d == 0)

    def launch(self, wl: GemvT) -> Launch:
        if self.serial(wl):
            tx = self.serial_threads(wl)
            return Launch(grid=(ceil_div(gemv_shape(wl).N, tx * self.vector_for(wl)), 1, 1), block=(tx, 1, 1),
                          threads_from="the columns' vectors over the SMs, 32-256")
        if self.one_kernel(wl):
            tx, ty = self.single_pass_threads(wl)
            return Launch(grid=(gemv_shape(wl).N // tx, 1, 1), block=(tx, ty, 1),
                          threads_from="the columns' largest divisor up to 64 × threads / it")
        tx, ty, rows, vector, narrow = (self.threads_x(wl), self.threads_y(wl), self.slice_rows(wl),
                                        self.vector_for(wl), self.narrow(wl))
        wl = gemv_shape(wl)
        blocks_y = ceil_div(wl.M, rows * ty) if narrow else ceil_div(ceil_div(wl.M, rows), ty)
        return Launch(grid=(ceil_div(wl.N, tx * vector), blocks_y, 1),
                      block=(tx, ty, 1), threads_from="threads")


@register("column_gemv_t", "gemv_t", ColumnGemvConfig, aliases=("gemv_t_columns",))
def column_gemv_t(wl: GemvT, cfg: ColumnGemvConfig = ColumnGemvConfig()):
    """Transposed GEMV y = Aᵀ·x: threads along the columns, rows split over threads and blocks,
    partial sums per row slice, then a second kernel that adds the partials (any M, N).

    A warp's lanes read consecutive columns of one row (coalesced; 128-bit loads where N % 4 == 0).
    Wide A: each thread sums ``rows_per_slice`` rows of its vector of columns in registers; the
    slices spread over threadIdx.y and blockIdx.y, and ``rfactor`` over the slice index writes one
    partial row per slice. Narrow A (N ≤ narrow_max_n, one row is less than a warp's load): a
    warp covers several rows at once, and the threadIdx.y rows of a block are reduced inside the
    block (cross-thread reduction through shared memory), so there is one partial row per block.
    The second kernel reduces the partials of 8–16 column groups per block across threadIdx.y.
    Where a block's threads along the rows (up to 1024 threads a block) cover them with
    ``SINGLE_PASS_ROWS`` rows each or fewer (a small matrix), one kernel does it all
    (:func:`_single_pass`): no partials, one launch. A few rows (``serial_rows``, or up to
    ``serial_wave_rows`` where the single pass would run in waves of blocks): one kernel whose threads
    each add every row of their columns (:func:`_serial_columns`), no sum across threads.
    """
    if cfg.serial(wl):
        return _serial_columns(wl, cfg)
    if cfg.one_kernel(wl):
        return _single_pass(wl, cfg)
    vector = cfg.vector_for(wl)
    tx_n, ty_n, rows = cfg.threads_x(wl), cfg.threads_y(wl), cfg.slice_rows(wl)
    if cfg.narrow(wl):
        # whole blocks of rows: the rfactor block below reduces across threads and so must carry
        # no T.where predicate (see split_k_gemv); the padded rows read as zeros
        sch, block, j, i, matrix, pads = _start(wl, pad=rows * ty_n)
        s, r, ty = sch.split(i, [None, rows, ty_n])
        rf = sch.rfactor(s, factor_axis=0)           # y_rf[s, j]: one partial row per block
        j, s, r, ty = sch.get_loops(rf)
        bx, tx = sch.split(j, [None, tx_n])
        sch.reorder(s, bx, tx, ty, r)
        sch.unroll(r)
        sch.bind(s, "blockIdx.y")
    else:
        sch, block, j, i, matrix, pads = _start(wl)
        s, r = sch.split(i, [None, rows])
        rf = sch.rfactor(s, factor_axis=0)           # y_rf[s, j] = Σ_r A[s·R + r, j]·x[s·R + r]
        j, s, r = sch.get_loops(rf)
        by, ty = sch.split(s, [None, ty_n])
        bx, tx, v = sch.split(j, [None, tx_n, vector])
        sch.reorder(by, bx, ty, tx, r, v)
        group = cfg.row_group(wl)
        if group > 1:  # the slice's rows in groups whose loads are issued together
            _grouped_column_sums(sch, rf, tx, r, v, group, matrix)
        else:
            _column_sums_in_registers(sch, rf, tx, r, v, vector, matrix)  # the slice's sums
        sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    inline_padding(sch, reads=pads, writes=())
    # second kernel: columns on threadIdx.x (coalesced), the partials of a column over threadIdx.y
    final, (j, s) = _final_loops(sch, wl)
    fx = min(32, _pow2_at_least(gemv_shape(wl).N))
    fb, ft = sch.split(j, [None, fx])
    so, sy = sch.split(s, [None, final_partial_threads(fx, sch.get(s).extent.value)])
    sch.reorder(fb, ft, sy, so)
    if sch.get(so).extent.value <= 64:
        sch.unroll(so)                               # all of a thread's partial loads in flight at once
    sch.bind(fb, "blockIdx.x")
    sch.bind(ft, "threadIdx.x")
    sch.bind(sy, "threadIdx.y")
    return sch


def final_partial_threads(columns: int, partials: int) -> int:
    """Threads along a column's partials in column_gemv_t's second kernel (``columns`` threads along
    the columns): 256 threads a block, and where that leaves a thread more than
    FINAL_PARTIALS_A_THREAD partials to add, more threads, up to 1024 a block. The kernel has a block
    for each ``columns`` columns, so a narrow output (1 x 270 x 8575: 9 blocks, 536 partials a
    column) had a few SMs each walk 67 partials a thread one after the other, a load's latency each."""
    threads = max(1, 256 // columns)
    while ceil_div(partials, threads) > FINAL_PARTIALS_A_THREAD and 2 * threads * columns <= 1024:
        threads *= 2
    return threads


def _column_sums_in_registers(sch, block, tx, rows, v, vector: int, matrix: int):
    """A thread's sums of its ``vector`` columns (loop ``v``) kept in registers and written once, at
    ``tx``; with ``vector`` > 1, each row's columns read as one vector load (at the rows' loop ``rows``)
    and written back as one."""
    write_back = register_accumulator(sch, block, tx)
    if vector > 1:
        sch.vectorize(sch.get_loops(write_back)[-1])
        register_fragments(sch, block, rows, indices=(matrix,))
        sch.unroll(v)


def _grouped_column_sums(sch, block, tx, rows, v, group: int, matrix: int):
    """:func:`_column_sums_in_registers` with the rows taken ``group`` at a time: each group's vectors
    loaded into registers together (one unrolled run of loads, all in flight at once), then added."""
    write_back = register_accumulator(sch, block, tx)
    sch.vectorize(sch.get_loops(write_back)[-1])
    outer, inner = sch.split(rows, [None, group])
    frag = register_fragments(sch, block, outer, indices=(matrix,))[0]
    sch.unroll(sch.get_loops(frag)[-2])
    sch.unroll(inner)
    sch.unroll(v)


def _serial_columns(wl, cfg: ColumnGemvConfig):
    """One kernel and no sum across threads, for a few rows: threadIdx.x on consecutive columns (a
    vector of them per thread where N allows), each thread adding every row of its columns in a
    register, the rows unrolled so that all its loads are in flight at once. The single pass splits
    so few rows over the threads of a block whose columns are N's largest divisor up to 64: for N
    prime, a block of 256 threads a column, thousands of them for a few rows. Here the columns take
    a predicate (there is no cross-thread sum for it to be lost on), and the blocks are few."""
    vector, tx_n = cfg.vector_for(wl), cfg.serial_threads(wl)
    sch, block, j, i, matrix, pads = _start(wl)
    bx, tx, v = sch.split(j, [None, tx_n, vector])
    sch.reorder(bx, tx, i, v)
    _column_sums_in_registers(sch, block, tx, i, v, vector, matrix)
    sch.unroll(i)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def _single_pass(wl, cfg: ColumnGemvConfig):
    """One kernel: a block's threadIdx.x on consecutive columns (coalesced), its threadIdx.y on
    interleaved rows, each thread's rows unrolled (their loads in flight together) and summed in a
    register, then the threadIdx.y sums added inside the block (TVM's cross-thread reduction,
    through shared memory). The rows are padded to whole blocks (read as zeros), and the columns
    split by a divisor of N: that reduction's lowering drops a predicate on its final store."""
    tx_n, ty_n = cfg.single_pass_threads(wl)
    sch, block, j, i, matrix, pads = _start(wl, pad=ceil_div(gemv_shape(wl).M, ty_n) * ty_n)
    r, ty = sch.split(i, [None, ty_n])
    bx, tx = sch.split(j, [None, tx_n])
    sch.reorder(bx, tx, ty, r)
    sch.unroll(r)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.bind(ty, "threadIdx.y")
    inline_padding(sch, reads=pads, writes=())
    return sch


GEMV_FAMILY = ("warp_gemv", "vectorized_gemv", "multi_row_gemv", "multi_warp_gemv", "split_k_gemv", "gemv_dispatch")
