"""The classic GEMM optimization steps, C = A·B in fp32, each one a TVM schedule.

Read them in step order: each changes one thing from the one before and its docstring says what
and why it should be faster. Sizes need not be tile multiples: a split by a non-divisor makes TVM
add predicates (``T.where``), so out-of-range loads and stores are skipped; the thread-tiled steps
pad the computation instead (``pad_einsum``), reading zeros past the edges and guarding the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import (ceil_div, cooperative_fetch, inline_padding, new_schedule, register_accumulator, register_fragments,
                     shared_tiles, tile_and_bind_2d)
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm

F32 = 4


# --- 1 -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NaiveConfig(StepConfig):
    layouts = LAYOUTS  # any operand layout: the loops index the stored operands (nothing adapts)

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(wl.N, wl.M, 1), block=(1, 1, 1), threads_from="one thread")


@register("naive_gemm", "gemm", NaiveConfig, aliases=("naive", "v0"))
def naive_gemm(wl: Gemm, cfg: NaiveConfig = NaiveConfig()):
    """Naive: one thread block of one thread per output element, a serial loop over K.

    blockIdx.y is the row and blockIdx.x the column. Every element of A and B is read from global
    memory N and M times over, and each block keeps 1 of a warp's 32 lanes busy: the baseline the
    other steps are measured against.
    """
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    sch.bind(i, "blockIdx.y")
    sch.bind(j, "blockIdx.x")
    sch.decompose_reduction(block, k)
    return sch


# --- 2 -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thread1DConfig(StepConfig):
    layouts = LAYOUTS
    rows_per_block: int = 32

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.M, self.rows_per_block), wl.N, 1),
                      block=(self.rows_per_block, 1, 1), threads_from="rows_per_block")


@register("thread_1d_gemm", "gemm", Thread1DConfig, aliases=("threads_1d", "v1"))
def thread_1d_gemm(wl: Gemm, cfg: Thread1DConfig = Thread1DConfig()):
    """1D threads: rows split by 32, the outer part to blockIdx.x, the inner to threadIdx.x; the
    columns to blockIdx.y.

    A block now runs a full warp, so 32 times the threads are in flight per block. The threads of a
    warp walk down a column of C, so they read A with a stride of K (not coalesced) but share
    each element of B (one broadcast load).
    """
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    bi, ti = sch.split(i, [None, cfg.rows_per_block])
    sch.reorder(bi, j, ti, k)
    sch.bind(bi, "blockIdx.x")
    sch.bind(j, "blockIdx.y")
    sch.bind(ti, "threadIdx.x")
    sch.decompose_reduction(block, k)
    return sch


# --- 3 and 6 -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thread2DConfig(StepConfig):
    layouts = LAYOUTS
    tile_m: int = 32
    tile_n: int = 32

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.N, self.tile_n), ceil_div(wl.M, self.tile_m), 1),
                      block=(self.tile_n, self.tile_m, 1), threads_from="tile_m × tile_n")


def _thread_2d(wl: Gemm, cfg: Thread2DConfig, rows_on: str):
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    *_, k = tile_and_bind_2d(sch, block, cfg.tile_m, cfg.tile_n, rows_on=rows_on)
    sch.decompose_reduction(block, k)
    return sch


@register("thread_2d_gemm", "gemm", Thread2DConfig, aliases=("threads_2d", "v2"))
def thread_2d_gemm(wl: Gemm, cfg: Thread2DConfig = Thread2DConfig()):
    """2D threads: 32×32 output tiles, both axes split and bound to blocks and threads.

    threadIdx.x runs along a row of C, so a warp reads 32 consecutive floats of B and writes 32
    consecutive floats of C (coalesced), and reads one element of A together (broadcast).
    """
    return _thread_2d(wl, cfg, rows_on="y")


@register("uncoalesced_gemm", "gemm", Thread2DConfig, aliases=("uncoalesced",))
def uncoalesced_gemm(wl: Gemm, cfg: Thread2DConfig = Thread2DConfig()):
    """Uncoalesced: step 3 with threadIdx.x running down the rows instead of along them.

    The same arithmetic, but the 32 lanes of a warp now read A 32 rows apart and write C 32 rows
    apart: every warp-wide load becomes 32 separate memory transactions. Kept to measure the
    coalescing lesson (about ten times slower in its source).
    """
    return _thread_2d(wl, cfg, rows_on="x")


# --- 4, 5 and 7: shared-memory tiles -----------------------------------------------------------
@dataclass(frozen=True)
class SharedTileConfig(StepConfig):
    layouts = LAYOUTS  # the copies follow the stored operand: fetched along its contiguous axis
    tile_m: int = 16
    tile_n: int = 16
    tile_k: int = 8

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.N, self.tile_n), ceil_div(wl.M, self.tile_m), 1),
                      block=(self.tile_n, self.tile_m, 1),
                      shared_bytes=F32 * self.tile_k * (self.tile_m + self.tile_n),
                      threads_from="tile_m × tile_n", shared_from="tile_k × (tile_m + tile_n) floats")


@dataclass(frozen=True)
class RegisterCacheConfig(SharedTileConfig):
    tile_m: int = 32
    tile_n: int = 32
    tile_k: int = 4


@dataclass(frozen=True)
class BlockTileConfig(SharedTileConfig):
    tile_k: int = 16


def shared_tiled_gemm(sch, block, tile_m, tile_n, tile_k, register_acc: bool, vector=1, bind=True):
    """Block tile tile_m × tile_n, one output per thread, K in steps of tile_k through shared
    memory (loads ``vector`` wide); optionally with the accumulator in a register. The sizes may be
    integers or sampled knobs (the tuner's ``classic`` space); ``bind=False`` is the CPU twin."""
    write_back = sch.cache_write(block, 0, "local") if register_acc else None
    _, _, _, tj, k = tile_and_bind_2d(sch, block, tile_m, tile_n, bind=bind)
    ko, _ = sch.split(k, [None, tile_k])
    if write_back is not None:
        sch.reverse_compute_at(write_back, tj, preserve_unit_loops=True)
    shared_tiles(sch, block, ko, threads=(tile_m, tile_n), vector=vector, bind=bind)
    sch.decompose_reduction(block, ko)
    return sch


def _shared_tiled(wl: Gemm, cfg: SharedTileConfig, register_acc: bool):
    sch = new_schedule(wl.prim_func())
    return shared_tiled_gemm(sch, sch.get_sblock("C"), cfg.tile_m, cfg.tile_n, cfg.tile_k, register_acc)


@register("shared_cache_gemm", "gemm", SharedTileConfig, aliases=("shared_cache", "v3"))
def shared_cache_gemm(wl: Gemm, cfg: SharedTileConfig = SharedTileConfig()):
    """Shared cache: 16×16 tiles, K split by 8, the A and B tiles read into shared memory at the
    K-outer loop, cooperatively fetched by all threads of the block.

    Each element of a tile is read from global memory once per block instead of once per thread
    (16 times fewer global loads), then reused from on-chip shared memory. The block synchronizes
    twice per K step.
    """
    return _shared_tiled(wl, cfg, register_acc=False)


@register("register_cache_gemm", "gemm", RegisterCacheConfig, aliases=("register_cache", "v4"))
def register_cache_gemm(wl: Gemm, cfg: RegisterCacheConfig = RegisterCacheConfig()):
    """Register cache: 32×32 tiles, K split by 4, C accumulated in a local (register) cache and
    written back once; A and B through shared memory.

    Step 4 read and wrote C in global memory on every K step; now the running sum stays in a
    register and C is stored once. The tile grows to 32×32, so each shared element serves 32 threads.
    """
    return _shared_tiled(wl, cfg, register_acc=True)


@register("block_tiling_gemm", "gemm", BlockTileConfig, aliases=("block_tiling",))
def block_tiling_gemm(wl: Gemm, cfg: BlockTileConfig = BlockTileConfig()):
    """Block tiling: 16×16×16 shared-memory tiles, one output per thread, the sum in a register.

    The textbook tiled kernel: a K step of 16 halves the number of barrier pairs of step 4 for the
    same 16×16 block, and the register accumulator keeps C out of the K loop.
    """
    return _shared_tiled(wl, cfg, register_acc=True)


# --- 8 and 9: register tiles per thread --------------------------------------------------------
def check_thread_tiles(cfg):
    """A register-tiled config's thread tiles divide its block tiles, and the vector width its thread
    tiles (steps 8-9 and the fast steps)."""
    for t, b, tn, bn in (("thread_m", cfg.thread_m, "block_m", cfg.block_m),
                         ("thread_n", cfg.thread_n, "block_n", cfg.block_n)):
        if bn % b:
            raise ScheduleParamError(f"thread tile {t}={b} must divide {tn}={bn}")
        if b % cfg.vector:
            raise ScheduleParamError(f"vector={cfg.vector} must divide {t}={b}")


@dataclass(frozen=True)
class ThreadTileConfig(StepConfig):
    layouts = LAYOUTS  # the shared tiles end up k-major whatever the layout (see register_tiled_gemm)
    block_m: int = 128
    block_n: int = 128
    block_k: int = 8
    thread_m: int = 8
    thread_n: int = 8
    vector: int = 4  # contiguous elements a thread owns per sub-tile, and the global load width
    unroll: int = 256

    def check(self, wl):
        check_thread_tiles(self)
        for name in ("block_m", "block_n"):
            tile = getattr(self, name) * self.block_k
            if tile % (self.threads * self.vector) and tile >= self.threads * self.vector:
                raise ScheduleParamError(
                    f"{name} × block_k = {tile} must be a multiple of threads × vector = "
                    f"{self.threads * self.vector} for the cooperative fetch")

    @property
    def threads(self) -> int:
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.N, self.block_n), ceil_div(wl.M, self.block_m), 1),
                      block=(self.block_n // self.thread_n, self.block_m // self.thread_m, 1),
                      shared_bytes=F32 * self.block_k * (self.block_m + self.block_n) * self.stages,
                      threads_from="(block_m / thread_m) × (block_n / thread_n)",
                      shared_from="block_k × (block_m + block_n) floats × stages")

    stages = 1


@dataclass(frozen=True)
class DoubleBufferConfig(ThreadTileConfig):
    stages = 2


def register_tiled_gemm(sch, block, i_factors, j_factors, k_factors, fetch, trans_a=False, trans_b=False):
    """The register-tiled GEMM body of steps 8 and 9 on ``block``, with the tile sizes given as
    split factors (integers, or sampled knobs in the tuner's ``tiled`` space):

    ``i_factors``/``j_factors`` = [blocks, sub-tiles per thread (vthreads), threads, sub-tile
    width] and ``k_factors`` = [K steps, block_k]. Each thread owns (sub-tiles × width)² outputs as
    sub-tiles strided by the threads' span (vthreads): the CUTLASS interleaved map, which keeps a
    warp's fragment loads contiguous and conflict-free. ``fetch(sch, copy_block)`` distributes the
    shared-memory copies over the threads. Returns the loops and blocks later steps annotate.
    """
    i, j, k = sch.get_loops(block)
    bi, vi, ti, ii = sch.split(i, i_factors)
    bj, vj, tj, jj = sch.split(j, j_factors)
    ko, ki = sch.split(k, k_factors)
    sch.reorder(bi, bj, vi, vj, ti, tj, ko, ki, ii, jj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(vi, "vthread.y")
    sch.bind(vj, "vthread.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    write_back = register_accumulator(sch, block, tj)
    a_shared, b_shared = shared_tiles(sch, block, ko, fetch=fetch)
    # Store A k-major in shared memory (As[k][m]) so a thread's column of A is one vector load
    # (an A stored K×M is k-major already); B likewise n-contiguous (Bs[k][n]).
    if not trans_a:
        sch.transform_layout(a_shared, ("write", 0), lambda m, kk: (kk, m))
    if trans_b:
        sch.transform_layout(b_shared, ("write", 0), lambda n, kk: (kk, n))
    # Register fragments: a column of A and a row of B per k, reused for thread_m × thread_n FMAs.
    register_fragments(sch, block, ki)
    sch.unroll(ki)
    return dict(ko=ko, ki=ki, tj=tj, a_shared=a_shared, b_shared=b_shared, write_back=write_back)


def thread_tiled(wl: Gemm, cfg: ThreadTileConfig):
    """Shared body of steps 8 and 9. Returns the schedule and the named loops and blocks the
    pipelining step annotates."""
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    # Pad M, N, K up to tile multiples: reads past the edge load zeros, the store is guarded.
    sch.pad_einsum(block, [cfg.block_m, cfg.block_n, cfg.block_k])
    ty_n, tx_n = cfg.block_m // cfg.thread_m, cfg.block_n // cfg.thread_n
    h = register_tiled_gemm(
        sch, block,
        [None, cfg.thread_m // cfg.vector, ty_n, cfg.vector],
        [None, cfg.thread_n // cfg.vector, tx_n, cfg.vector],
        [None, cfg.block_k],
        fetch=lambda s, copy: cooperative_fetch(s, copy, (ty_n, tx_n), cfg.vector),
        trans_a=wl.trans_a, trans_b=wl.trans_b)
    sch.annotate(h["tj"], "pragma_auto_unroll_max_step", cfg.unroll)
    sch.annotate(h["tj"], "pragma_unroll_explicit", 1)
    sch.vectorize(sch.get_loops(h["write_back"])[-1])
    inline_padding(sch)
    sch.decompose_reduction(block, h["ko"])
    return sch, h


def pipeline_double_buffer(sch, ko, ki, a_shared, b_shared):
    """Step 9's software pipeline on a register-tiled GEMM: global loads of K tile k+1 staged in
    registers and stored to the other of two shared buffers after the FMAs of tile k, register
    fragments double-buffered inside the K step."""
    for copy in (a_shared, b_shared):
        sch.annotate(copy, "tirx.manifest_shared_memory_local_stage", 1)
        sch.annotate(copy, "double_buffer_scope", 0)
    # children of ki: [A fragment, B fragment, update]
    sch.annotate(ki, "software_pipeline_stage", [0, 0, 1])
    sch.annotate(ki, "software_pipeline_order", [0, 1, 2])
    # children of ko once ki is expanded: [A g→r, A r→s, B g→r, B r→s, ki prologue, body, epilogue]
    sch.annotate(ko, "software_pipeline_stage", [0, 0, 0, 0, 0, 1, 1])
    sch.annotate(ko, "software_pipeline_order", [0, 3, 1, 4, 5, 2, 6])


@register("thread_tiling_gemm", "gemm", ThreadTileConfig, aliases=("thread_tiling", "cutlass"))
def thread_tiling_gemm(wl: Gemm, cfg: ThreadTileConfig = ThreadTileConfig()):
    """Thread tiling: a 128×128 block tile, K step 8, each thread an 8×8 register tile accumulated
    as outer products of a column of A and a row of B held in registers.

    Each thread now loads 8 + 8 values from shared memory per k for 64 FMAs (step 5: 2 loads per
    FMA), so the kernel stops being bound by shared-memory bandwidth. Global loads are 128-bit
    (float4), and A is kept k-major in shared memory so fragments load as float4 too.
    """
    return thread_tiled(wl, cfg)[0]


@register("double_buffer_gemm", "gemm", DoubleBufferConfig, aliases=("double_buffer", "pipelined"))
def double_buffer_gemm(wl: Gemm, cfg: DoubleBufferConfig = DoubleBufferConfig()):
    """Double buffering: step 8 with two shared-memory stages, the load of the next K tile
    overlapping the compute of the current one (TVM's software-pipelining annotations).

    Global loads of tile k+1 go into registers before the FMAs of tile k start and are stored to the
    other shared buffer after them, so the load latency hides behind the arithmetic; the register
    fragments are double-buffered the same way inside the K step.
    """
    sch, h = thread_tiled(wl, cfg)
    pipeline_double_buffer(sch, h["ko"], h["ki"], h["a_shared"], h["b_shared"])
    return sch
