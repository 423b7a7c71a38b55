"""GEMV steps, y = A·x in fp32 with A M×N row-major: one warp (or part of one) per row, partial sums
in registers, a warp-shuffle reduction.

TVM emits the shuffles itself: binding the reduction loop to threadIdx.x makes
``LowerCrossThreadReduction`` keep per-lane partial sums and ``LowerThreadAllreduce`` reduce them
with ``__shfl_down_sync``. Rows past M and columns past N are predicated off (``T.where``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import ceil_div, new_schedule
from .errors import ScheduleParamError
from .registry import Launch, register
from .workloads import Gemv


@dataclass(frozen=True)
class WarpRowConfig:
    lanes: int = 32           # threads that share one row (a warp, or part of one)
    rows_per_warp: int = 1    # rows one warp reduces side by side (lanes × rows_per_warp ≤ 32)
    warps_per_block: int = 4
    vector: int = 1           # elements per lane per load (4 = 128-bit float4)

    def check(self, wl):
        if self.lanes * self.rows_per_warp > 32:
            raise ScheduleParamError(
                f"lanes × rows_per_warp = {self.lanes * self.rows_per_warp} must fit in one warp (32)")
        if self.rows_per_warp > 1 and 32 % (self.lanes * self.rows_per_warp):
            raise ScheduleParamError(f"lanes × rows_per_warp = {self.lanes * self.rows_per_warp} must divide 32")
        if self.vector not in (1, 2, 4):
            raise ScheduleParamError(f"vector must be 1, 2 or 4 (elements per load), got {self.vector}")

    @property
    def rows_per_block(self) -> int:
        return self.warps_per_block * self.rows_per_warp

    def launch(self, wl: Gemv) -> Launch:
        return Launch(grid=(ceil_div(wl.M, self.rows_per_block), 1, 1),
                      block=(self.lanes, self.rows_per_warp, self.warps_per_block),
                      threads_from="lanes × rows_per_warp × warps_per_block")


def aligned_vector(n: int, vector: int) -> int:
    """The widest load not over ``vector`` that every row start allows: a row of A begins at
    element i·N, so 128-bit loads need N % 4 == 0 (64-bit: N % 2 == 0)."""
    while vector > 1 and n % vector:
        vector //= 2
    return vector


def warp_row_gemv(wl: Gemv, cfg: WarpRowConfig):
    """Shared body of the GEMV steps: ``lanes`` threads per row, ``rows_per_warp`` rows per warp,
    ``warps_per_block`` warps per block, ``vector`` contiguous elements per lane per load."""
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("y")
    i, k = sch.get_loops(block)
    vector = aligned_vector(wl.N, cfg.vector)
    bx, tz, ty = sch.split(i, [None, cfg.warps_per_block, cfg.rows_per_warp])
    if vector > 1:
        ko, tx, v = sch.split(k, [None, cfg.lanes, vector])
        sch.reorder(bx, tz, ty, tx, ko, v)
        for index in (0, 1):  # stage each lane's vector of A and x in registers: one wide load
            frag = sch.cache_read(block, index, "local")
            sch.compute_at(frag, ko, preserve_unit_loops=True)
            sch.vectorize(sch.get_loops(frag)[-1])
        sch.unroll(v)
    else:
        ko, tx = sch.split(k, [None, cfg.lanes])
        sch.reorder(bx, tz, ty, tx, ko)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tz, "threadIdx.z")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    return sch


@register("warp_gemv", "gemv", 10, WarpRowConfig, aliases=("gemv_warp",))
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


@register("vectorized_gemv", "gemv", 11, VectorGemvConfig, aliases=("gemv_float4",))
def vectorized_gemv(wl: Gemv, cfg: VectorGemvConfig = VectorGemvConfig()):
    """One warp per row with 128-bit (float4) loads (N ≥ 128).

    Each lane loads four floats per instruction: a quarter of the load instructions of step 10 for
    the same bytes, more bytes in flight per warp. Rows start 16-byte aligned only when N % 4 == 0;
    otherwise the loads narrow to what the alignment allows (float2 or scalar).
    """
    return warp_row_gemv(wl, cfg)


@dataclass(frozen=True)
class MultiRowGemvConfig(WarpRowConfig):
    lanes: int = 16
    rows_per_warp: int = 2


@register("multi_row_gemv", "gemv", 12, MultiRowGemvConfig, aliases=("gemv_multi_row",))
def multi_row_gemv(wl: Gemv, cfg: MultiRowGemvConfig = MultiRowGemvConfig()):
    """Several rows per warp (N ≤ 16): 16 lanes per row, two rows per warp.

    With N = 16 a full warp per row would leave half its lanes idle; two half-warps each reduce
    their own row (shuffle offsets 8, 4, 2, 1), so every lane loads useful data.
    """
    return warp_row_gemv(wl, cfg)


@dataclass(frozen=True)
class GemvDispatchConfig:
    """Shape thresholds the dispatcher uses."""

    multi_row_max_n: int = 16
    vector_min_n: int = 128

    def choose(self, wl: Gemv):
        if wl.N <= self.multi_row_max_n:
            return multi_row_gemv, MultiRowGemvConfig()
        if wl.N >= self.vector_min_n and wl.N % 4 == 0:
            return vectorized_gemv, VectorGemvConfig()
        return warp_gemv, WarpRowConfig()

    def launch(self, wl: Gemv) -> Launch:
        _, cfg = self.choose(wl)
        return cfg.launch(wl)


@register("gemv_dispatch", "gemv", 13, GemvDispatchConfig, aliases=("gemv_auto",))
def gemv_dispatch(wl: Gemv, cfg: GemvDispatchConfig = GemvDispatchConfig()):
    """Dispatcher: picks among steps 10–12 by shape.

    N ≤ 16: several rows per warp; N ≥ 128 and N % 4 == 0: float4 loads; otherwise one warp per row.
    """
    builder, chosen = cfg.choose(wl)
    return builder(wl, chosen)
