"""Fast fp32 GEMM, gemm 10–15 (vectorized_shared_gemm to skinny_gemm): towards cuBLAS-class SIMT fp32.

Every fp32 step here is one body, :func:`fast_tiled`, with one knob turned on at a time; each step's
configuration is a :class:`FastTileConfig` with that knob's defaults, so a step's docstring can say
exactly what changed from the one before. The knobs:

* ``a_layout`` / ``pad``: how the A tile sits in shared memory. ``"m_major"`` keeps A's rows as they
  are in global memory, so both the 128-bit global load and the shared store are vector instructions;
  a ``pad`` of 4 floats per row (``storage_align``) moves consecutive rows onto different banks, so
  the column reads of the fragment loads do not conflict. ``"k_major"`` transposes A on the way in,
  so a thread's column of A is one 128-bit shared load. (These name the shared tile: an A stored
  K×M, the ``tn``/``tt`` operand layouts, arrives k-major, and ``"k_major"`` then copies it as it
  is; a B stored N×K is transposed on its way in. See :func:`apply_fast_tiled`.)
* ``warps_m × warps_n``: warp tiling. Each warp owns a (block_m / warps_m) × (block_n / warps_n)
  sub-tile and its 32 lanes form a lanes_m × lanes_n grid inside it: the lanes that share a row read
  the same A fragment (one broadcast), those that share a column the same B fragment.
* ``stages`` / ``async_copy``: software pipelining. ``stages=2`` without async copies stages global
  loads through registers (double_buffer_gemm); with ``async_copy`` the copies are ``cp.async`` straight into a
  ring of ``stages`` shared buffers, ``stages - 1`` tiles in flight while one is computed.
* ``split_k``: the K loop cut into ``split_k`` slices computed by separate thread blocks
  (``rfactor``): a first kernel writes ``split_k`` partial products, a second sums them. It multiplies
  the number of blocks for small outputs, where one block per output tile leaves SMs idle.
* ``group_m``: thread-block rasterization. Blocks are numbered so that consecutive blocks walk down
  ``group_m`` block-rows of one block-column group before moving on, so the B tiles they share and the
  A rows they reuse are still in L2.

The tensor-core step that follows them (gemm 18, WMMA) is in gemm_wmma.py; it reuses
:func:`rasterize` and :func:`async_pipeline` from here.
"""

from __future__ import annotations

from dataclasses import dataclass


from .common import (aligned_vector, ceil_div, cooperative_fetch_axes, fit_blocks_per_sm, fuse_epilogue,
                     inline_padding, new_schedule, padded_copy, register_fragments, whole_piece_bounds)
from .errors import ScheduleParamError
from .gemm import check_thread_tiles, pipeline_double_buffer
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm

# the outputs a thread from which its write-back tests its piece once (whole_piece_bounds): 8 x 8. Where
# ptxas ballooned (64 outputs, 165-214 registers) it kept 126-128, 1.15-1.31x faster on nine products;
# pieces of 4 x 4, 8 x 1 and 4 x 1 never ballooned and ran 0.94x as fast tested once (24 kernels of 4-11 us;
# reports/results/NVIDIA_H200/piece_bounds)
PIECE_TESTED_FROM = 64

F32 = 4


# --- the fp32 body -----------------------------------------------------------------------------
@dataclass(frozen=True)
class FastTileConfig(StepConfig):
    """Tile sizes and switches of :func:`fast_tiled` (defaults: vectorized_shared_gemm)."""

    dtypes = ("float32",)  # input types the step takes (a class attribute, not a parameter)
    layouts = LAYOUTS  # operand layouts (class attributes): the shared tiles adapt, see apply_fast_tiled
    batched = True     # a bmm: the batch on blockIdx.z
    epilogues = True   # computed in the write-back from the accumulators (split-K: after the final sum)
    zero_means_auto = ("min_blocks",)  # 0: ptxas chooses the registers, and with them the blocks an SM holds

    block_m: int = 128
    block_n: int = 128
    block_k: int = 8
    thread_m: int = 8
    thread_n: int = 8
    vector: int = 4          # a thread's sub-tile is vector × vector; global loads are this wide
    warps_m: int = 1         # warps along M; 1 × 1 = no warp tiling (lanes span the whole block)
    warps_n: int = 1
    a_layout: str = "m_major"  # A tile in shared memory: "m_major" (as in A) or "k_major" (transposed)
    pad: int = 4             # floats of padding per shared row (storage_align); 0 = none
    stages: int = 1          # shared-memory buffers in the K pipeline
    async_copy: bool = False  # cp.async global → shared (needs stages >= 2)
    split_k: int = 1         # K slices on separate blocks, summed by a second kernel
    group_m: int = 1         # block-rows per rasterization group (1 = row-major block order)
    unroll: int = 256
    fragment_pipeline: bool = False  # with async_copy: also double-buffer the register fragments
    pad_operands: bool = False  # copy A / B whose rows are not whole 16 bytes into padded buffers first
    staged_store: bool = False  # C leaves through a shared tile, a warp's stores on 32 consecutive columns
    min_blocks: int = 0      # blocks an SM must hold (__launch_bounds__): caps registers; 0 = ptxas's choice

    # derived ----------------------------------------------------------------------------------
    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n

    @property
    def lanes_m(self) -> int:
        return self.threads_m // self.warps_m

    @property
    def lanes_n(self) -> int:
        return self.threads_n // self.warps_n

    @property
    def pass_config(self) -> dict:
        """cp.async injection needs the shared tiles to stay float-typed: StorageRewrite would retype a
        buffer that is only read as float4 into a float4 buffer, which InjectPTXAsyncCopy rejects
        (index lanes 1 vs 4)."""
        return {"tirx.disable_storage_rewrite": True} if self.async_copy else {}

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"this SIMT step takes {' or '.join(self.dtypes)} inputs, not {wl.dtype}")
        check_thread_tiles(self)
        if self.threads_m % self.warps_m or self.threads_n % self.warps_n:
            raise ScheduleParamError(
                f"warps_m={self.warps_m} × warps_n={self.warps_n} must divide the "
                f"{self.threads_m} × {self.threads_n} thread grid")
        if self.a_layout not in ("m_major", "k_major"):
            raise ScheduleParamError(f"a_layout must be 'm_major' or 'k_major', got {self.a_layout!r}")
        if self.async_copy and self.stages < 2:
            raise ScheduleParamError("async_copy needs stages >= 2 (a buffer to copy into while one is read)")
        if self.async_copy and wl.dtype != "float32":
            raise ScheduleParamError(f"async_copy takes float32 inputs: cp.async copies 4, 8 or 16 bytes, and a "
                                     f"{wl.dtype} tile transposed on its way in would need single-element copies")
        if self.staged_store and self.split_k > 1:
            raise ScheduleParamError("staged_store stages C, which split_k > 1 leaves to its sum kernel (partial sums "
                                     "go to a workspace of whole tiles)")
        if self.block_k % self.vector and self.a_layout == "m_major":
            raise ScheduleParamError(f"vector={self.vector} must divide block_k={self.block_k} for m_major A")

    @property
    def dynamic_shared(self) -> bool:
        """Tiles past the 48 KiB static limit live in dynamic shared memory (opt-in, up to 227 KiB), and
        so do those beside a staged C tile (a static ring and a dynamic tile over 48 KiB together
        would need an opt-in TVM asks only for a dynamic part of 48 KiB or more)."""
        return F32 * self.ring_floats() > 48 * 1024 or self.staged_store

    def splits(self, wl) -> int:
        """K slices actually used: split_k, but never more than K has tiles of block_k."""
        return max(1, min(self.split_k, ceil_div(wl.K, self.block_k)))

    def copied(self, wl) -> tuple[bool, bool]:
        """(A, B): whether ``pad_operands`` copies the operand first, i.e. its stored rows are not a
        whole number of 16 bytes, so loads from it could not be 16 bytes wide."""
        return wl.misaligned_rows() if self.pad_operands else (False, False)

    def load_vectors(self, wl) -> tuple[int, int]:
        """Elements per global load of A and of B: as wide as their stored row length allows (a row
        of A starts at a multiple of K elements, M when stored transposed; one of B at a multiple
        of N, K when transposed: a v-wide load needs the length % v == 0), or full width from a
        padded copy, whose rows are whole tiles."""
        copy_a, copy_b = self.copied(wl)
        step = self.block_k * self.splits(wl)
        m_pad, n_pad = ceil_div(wl.M, self.block_m) * self.block_m, ceil_div(wl.N, self.block_n) * self.block_n
        k_pad = ceil_div(wl.K, step) * step
        a_pad, b_pad = (m_pad if wl.trans_a else k_pad), (k_pad if wl.trans_b else n_pad)
        return (aligned_vector(a_pad if copy_a else wl.a_shape[-1], self.vector),
                aligned_vector(b_pad if copy_b else wl.b_shape[-1], self.vector))

    def shared_floats(self) -> int:
        """The ring of A and B tiles, and with ``staged_store`` the block's C tile (dynamic)."""
        return self.ring_floats() + (self.block_m * self.block_n if self.staged_store else 0)

    def ring_floats(self) -> int:
        rows_a = self.block_k + self.pad if self.a_layout == "m_major" else self.block_m + self.pad
        cols_a = self.block_m if self.a_layout == "m_major" else self.block_k
        return (rows_a * cols_a + self.block_k * (self.block_n + self.pad)) * max(self.stages, 1)

    def launch(self, wl: Gemm) -> Launch:
        tiles = ceil_div(wl.M, self.block_m) * ceil_div(wl.N, self.block_n)
        lanes = self.lanes_m * self.lanes_n
        return Launch(grid=(tiles, self.splits(wl), wl.batches), block=(lanes, self.warps_n, self.warps_m),
                      shared_bytes=F32 * self.shared_floats(), dynamic_shared=self.dynamic_shared,
                      threads_from="(block_m / thread_m) × (block_n / thread_n)",
                      shared_from="(A tile + B tile, padded) × stages floats"
                      + (" + block_m × block_n floats of C" if self.staged_store else ""))


def simt_vector(thread_m: int, thread_n: int) -> int:
    """The widest load (4, 2 or 1 floats) that divides both sides of a thread tile: a configuration's
    ``vector`` for that thread tile (the dispatcher's SIMT candidates)."""
    return next(v for v in (4, 2, 1) if thread_m % v == 0 and thread_n % v == 0)


def fast_tiled(wl: Gemm, cfg: FastTileConfig, fuse: bool = True):
    """The fp32 body of vectorized_shared_gemm ... rasterized_gemm. Returns the schedule. ``fuse``:
    compute an epilogue in the write-back (False leaves its block "D" to the caller)."""
    return apply_fast_tiled(new_schedule(wl.prim_func()), wl, cfg, fuse=fuse)


def apply_fast_tiled(sch, wl: Gemm, cfg: FastTileConfig, unroll=None, fuse: bool = True):
    """:func:`fast_tiled` applied to an existing schedule of ``wl``'s PrimFunc (the tuner's design
    spaces start from MetaSchedule's schedule). ``unroll``: in place of ``cfg.unroll``, e.g. a
    sampled value (a tuning knob) annotated where the hand-written step puts its own.

    Operand layouts (``wl.layout``): the copy loops of a shared tile follow the stored operand, so
    global loads are always vector loads along its contiguous axis; what adapts is whether a tile
    is transposed on its way in. A stored K×M (``tn``, ``tt``) is k-major already: ``a_layout=
    "k_major"`` keeps it as it comes (128-bit shared stores, 16-byte cp.async), ``"m_major"``
    transposes it. B stored N×K (``nt``, ``tt``) is transposed on its way in, so the inner loop
    still reads a row of B (n contiguous) per k; as for A in ``nn``, the shared stores are scalar
    and cp.async copies single floats. A batch (``bmm``) is one more spatial loop, on blockIdx.z.
    An epilogue or a 16-bit output (``wl.has_epilogue``) is computed in the write-back from the
    registers (:func:`~schedules.common.fuse_epilogue`); with split-K, in that of the final sum, since
    an activation of a partial sum is not the activation of the sum. ``staged_store`` sends C through a
    shared tile of the block (:func:`_store_rows`, the thread map of :func:`_lane_order`). Otherwise
    each thread stores its outputs from registers, as wide as C's rows allow, a piece of 8 x 8 with
    one bounds test (:func:`~schedules.common.whole_piece_bounds`, :data:`PIECE_TESTED_FROM`)."""
    block = sch.get_sblock("C")
    splits = cfg.splits(wl)
    batch = [1] if wl.batched else []
    sch.pad_einsum(block, batch + [cfg.block_m, cfg.block_n, cfg.block_k * splits])
    *b, i, j, k = sch.get_loops(block)
    if splits > 1:
        ks, k = sch.split(k, [splits, None])
        partial = sch.rfactor(ks, factor_axis=0)  # C_rf[ks, (b,) i, j]; block "C" now sums over ks
        final, block = block, partial
        sch.set_scope(block, 0, "global")
        *b, i, j, ks, k = sch.get_loops(block)
    staged = cfg.staged_store
    ko, ki = sch.split(k, [None, cfg.block_k])
    outer = [ks] if splits > 1 else []
    if staged:  # thread map: i = [block, warp, lane, element]: a thread's outputs one dense block (see _store_rows)
        bi, wi, ti, ii = sch.split(i, [None, cfg.warps_m, cfg.lanes_m, cfg.thread_m])
        bj, wj, tj, jj = sch.split(j, [None, cfg.warps_n, cfg.lanes_n, cfg.thread_n])
        lanes = _lane_order(sch, ti, tj, cfg)
        sch.reorder(*b, *outer, bi, bj, wi, wj, *lanes, ko, ki, ii, jj)
    else:  # thread map: i = [block, warp, sub-tile, lane, element], the same for j
        bi, wi, vi, ti, ii = sch.split(i, [None, cfg.warps_m, cfg.thread_m // cfg.vector, cfg.lanes_m, cfg.vector])
        bj, wj, vj, tj, jj = sch.split(j, [None, cfg.warps_n, cfg.thread_n // cfg.vector, cfg.lanes_n, cfg.vector])
        sch.reorder(*b, *outer, bi, bj, wi, wj, vi, vj, ti, tj, ko, ki, ii, jj)
    tile = rasterize(sch, bi, bj, cfg.group_m, ceil_div(wl.M, cfg.block_m))
    sch.bind(tile, "blockIdx.x")
    if outer:
        sch.bind(ks, "blockIdx.y")
    if b:
        sch.bind(b[0], "blockIdx.z")
    sch.bind(wi, "threadIdx.z")
    sch.bind(wj, "threadIdx.y")
    if not staged:
        sch.bind(vi, "vthread.y")
        sch.bind(vj, "vthread.x")
    lane = sch.fuse(*lanes) if staged else sch.fuse(ti, tj)
    sch.bind(lane, "threadIdx.x")
    to_global = sch.cache_write(block, 0, "shared.dyn") if staged else None
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, lane, preserve_unit_loops=True)
    if staged:
        sch.reverse_compute_at(to_global, tile, preserve_unit_loops=True)

    axes = (("threadIdx.z", cfg.warps_m), ("threadIdx.y", cfg.warps_n), ("threadIdx.x", cfg.lanes_m * cfg.lanes_n))
    # global loads as wide as the stored rows allow (float2 where float4 is not; a row of A is K
    # elements long, M when stored transposed; one of B N, K when transposed), or full width from the
    # padded copies that pad_operands makes of misaligned operands (kernels of their own, below)
    a_vec, b_vec = cfg.load_vectors(wl)
    scope = "shared.dyn" if cfg.dynamic_shared else "shared"
    a_shared = sch.cache_read(block, 0, scope)
    b_shared = sch.cache_read(block, 1, scope)
    for copy in (a_shared, b_shared):
        sch.compute_at(copy, ko, preserve_unit_loops=True)
    swap = _swap_last_two(wl.batched)
    row = 1 if wl.batched else 0  # the shared tiles' row axis (after a unit batch axis)
    # cp.async cannot transpose 16 bytes: a tile transposed on its way in is copied as single floats
    narrow = 1 if cfg.async_copy else None
    if cfg.a_layout == "k_major":
        if not wl.trans_a:
            sch.transform_layout(a_shared, ("write", 0), swap)
        cooperative_fetch_axes(sch, a_shared, axes, a_vec if wl.trans_a else (narrow or a_vec))
        if cfg.pad:
            sch.storage_align(a_shared, 0, axis=row, factor=cfg.block_m, offset=cfg.pad)
    else:
        if wl.trans_a:
            sch.transform_layout(a_shared, ("write", 0), swap)
        cooperative_fetch_axes(sch, a_shared, axes, (narrow or a_vec) if wl.trans_a else a_vec)
        if cfg.pad:
            sch.storage_align(a_shared, 0, axis=row, factor=cfg.block_k, offset=cfg.pad)
    if wl.trans_b:  # B stored N×K: transposed on its way in, so that the inner loop reads rows of n
        sch.transform_layout(b_shared, ("write", 0), swap)
    cooperative_fetch_axes(sch, b_shared, axes, (narrow or b_vec) if wl.trans_b else b_vec)
    if cfg.pad:
        sch.storage_align(b_shared, 0, axis=row, factor=cfg.block_n, offset=cfg.pad)

    register_fragments(sch, block, ki, vector=cfg.vector if staged else None)  # a column of A and a row of B per k
    sch.unroll(ki)
    depth = cfg.unroll if unroll is None else unroll
    if not isinstance(depth, int) or depth:
        sch.annotate(lane, "pragma_auto_unroll_max_step", depth)
        sch.annotate(lane, "pragma_unroll_explicit", 1)
    last = sch.get_loops(write_back)[-1]
    store = cfg.vector if staged else aligned_vector(wl.N, cfg.vector)  # as wide as a row of C begins
    if staged or store < cfg.vector:  # staged: a thread's row of thread_n outputs as float4 stores
        last = sch.split(last, [None, store])[1]
    if store > 1:
        sch.vectorize(last)
    _pipeline(sch, cfg, ko, ki, a_shared, b_shared)
    if splits > 1:
        _sum_partials(sch, final)
    if staged:
        _store_rows(sch, to_global, cfg)
    copies = [name for name, copied in zip(("A_pad", "B_pad"), cfg.copied(wl)) if copied]
    for name in copies:
        padded_copy(sch, name)
    inline_padding(sch, reads=[name for name in ("A_pad", "B_pad") if name not in copies])
    sch.decompose_reduction(block, ko)
    if fuse:
        fuse_epilogue(sch)  # into the write-back from the accumulators (split-K: that of the final sum)
    if not staged and cfg.thread_m * cfg.thread_n >= PIECE_TESTED_FROM:
        whole_piece_bounds(sch, write_back)  # one bounds test a thread (ptxas's register count)
    if cfg.min_blocks:
        fit_blocks_per_sm(sch, tile, cfg.min_blocks)
    return sch


def _swap_last_two(batched: bool):
    """The index map of a transposed shared tile: (x, y) → (y, x), after a unit batch axis if any."""
    if batched:
        return lambda b, x, y: (b, y, x)
    return lambda x, y: (y, x)


def group_rows(group_m: int, tiles_m: int) -> int:
    """Block-rows per group actually used: the largest divisor of ``tiles_m`` that is at most
    ``group_m`` (all of them, one group, where they are that few, or where that divisor is under
    half of ``group_m`` and they are at most ``2 · group_m``). A group size that does not divide
    the block-rows would pad the grid with blocks past M, and the loop split that makes the groups
    would put a test of the block's row in front of every multiply-add of the inner loop (measured
    on an H200: 27 TFLOP/s at 1500×2500×3333, 12 block-rows in groups of 8, where 3001×1999×5003,
    24 block-rows, runs at 40)."""
    if group_m <= 1:
        return 1
    if tiles_m <= group_m:
        return tiles_m
    d = max(d for d in range(1, group_m + 1) if tiles_m % d == 0)
    return tiles_m if 2 * d < group_m and tiles_m <= 2 * group_m else d


def rasterize(sch, bi, bj, group_m: int, tiles_m: int):
    """One blockIdx for the (bi, bj) tile grid, in grouped order: :func:`group_rows` block-rows of
    one column sweep before the next column (1: plain row-major order; all: column-major)."""
    group = group_rows(group_m, tiles_m)
    if group <= 1:
        return sch.fuse(bi, bj)
    if group == tiles_m:  # one group: column-major block order
        sch.reorder(bj, bi)
        return sch.fuse(bj, bi)
    bio, bii = sch.split(bi, [None, group])
    sch.reorder(bio, bj, bii)
    return sch.fuse(bio, bj, bii)


def _pipeline(sch, cfg, ko, ki, a_shared, b_shared):
    if cfg.stages <= 1:
        return
    if cfg.async_copy:
        async_pipeline(sch, ko, ki if cfg.fragment_pipeline else None, cfg.stages)
        return
    pipeline_double_buffer(sch, ko, ki, a_shared, b_shared)


def async_pipeline(sch, ko, ki, stages):
    """cp.async ring of ``stages`` shared buffers over the K-outer loop ``ko`` (children: A copy, B
    copy, compute); with ``ki`` given, the fragment loads inside a K tile are pipelined one k ahead."""
    if ki is None:
        sch.annotate(ko, "software_pipeline_stage", [0, 0, stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
    else:
        sch.annotate(ki, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ki, "software_pipeline_order", [0, 1, 2])
        # once ki is expanded, ko's children are [A copy, B copy, ki prologue, body, epilogue]
        sch.annotate(ko, "software_pipeline_stage", [0, 0, stages - 1, stages - 1, stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2, 3, 4])
    sch.annotate(ko, "software_pipeline_async_stages", [0])


def _lane_order(sch, ti, tj, cfg) -> list:
    """staged_store's lanes, in the order of threadIdx.x. A thread's row of B (thread_n floats, 32 bytes for 8)
    is read as float4s, eight lanes to a shared-memory cycle: lanes side by side along N (tj) would read 32
    bytes apart, two to a bank, where the vthreads' sub-tiles read 16. So tj is split and ti placed between
    its halves: the eight lanes of a cycle take 4 columns of threads (128 bytes, every bank once) and 2 rows,
    whose B reads coincide (a broadcast) and whose A reads are 2 addresses."""
    per_cycle = 128 // (4 * cfg.thread_n)  # lanes along N whose float4 reads fill the banks once
    if cfg.thread_n * 4 <= 16 or cfg.lanes_n % per_cycle:
        return [ti, tj]
    tj_out, tj_in = sch.split(tj, [None, per_cycle])
    return [tj_out, ti, tj_in]


def _store_rows(sch, to_global, cfg):
    """staged_store's copy of the block's tile from shared memory to C: the threads over its elements
    in row-major order, a warp's 32 lanes on 32 consecutive columns of a row, so that every store
    instruction writes whole sectors whatever the alignment of C's rows (the fragments' own stores,
    strided over the lanes, write a quarter of each sector they touch where N % 4 != 0). The
    thread map is then [block, warp, lane, element] (a thread's outputs one dense block of
    registers) in place of the vthread sub-tiles, which would each stage a tile of their own."""
    rows, cols = sch.get_loops(to_global)[-2:]
    _, tz, ty, tx = sch.split(sch.fuse(rows, cols), [None, cfg.warps_m, cfg.warps_n, cfg.lanes_m * cfg.lanes_n])
    sch.bind(tz, "threadIdx.z")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")


def _sum_partials(sch, final):
    """Second kernel of split-K: one thread per output sums its split_k partials (coalesced reads)."""
    *bij, ks = sch.get_loops(final)  # (batch,) i, j
    bx, tx = sch.split(sch.fuse(*bij), [None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    # sum in a register; the guarded store into C (if padded) is inlined into this write-back
    write_back = sch.cache_write(final, 0, "local")
    sch.reverse_compute_at(write_back, tx, preserve_unit_loops=True)
    sch.decompose_reduction(final, ks)


# --- the registered steps ----------------------------------------------------------------------
@dataclass(frozen=True)
class VectorizedSharedConfig(FastTileConfig):
    pass


@register("vectorized_shared_gemm", "gemm", VectorizedSharedConfig, aliases=("vectorized_shared",))
def vectorized_shared_gemm(wl: Gemm, cfg: VectorizedSharedConfig = VectorizedSharedConfig()):
    """Vectorized shared stores + padding: step 8's 128×128×8 tile with A kept m-major in shared
    memory, so both tiles go global → shared as 128-bit loads and 128-bit stores, and every shared
    row padded by 4 floats (storage_align).

    Step 8 transposed A on the way in, which splits each float4 into 4 scalar shared stores; here the
    store stays one instruction. The fragment reads of A walk down a column instead (scalar loads);
    the 4-float pad puts consecutive rows 4 banks apart, so those reads do not conflict. The lesson
    is in the measurement (H200, 4096³): 49% of cuBLAS against step 8's 80%: the stores happen once
    per K tile, the fragment reads 8 times as often, and 8 scalar reads per k instead of 2 float4s
    (and 167 registers, one block per SM) cost far more than the stores saved. warp_tiled_gemm and the steps after it keep A
    transposed and pad it.
    """
    return fast_tiled(wl, cfg)


@dataclass(frozen=True)
class WarpTileConfig(FastTileConfig):
    warps_m: int = 4
    warps_n: int = 2
    a_layout: str = "k_major"
    stages: int = 2


@register("warp_tiled_gemm", "gemm", WarpTileConfig, aliases=("warp_tiling",))
def warp_tiled_gemm(wl: Gemm, cfg: WarpTileConfig = WarpTileConfig()):
    """Warp tiling: the 256 threads form 4 × 2 warps, each owning a 32 × 64 sub-tile of C; inside a
    warp the lanes form a 4 × 8 grid, each lane 8×8 outputs as 2×2 sub-tiles of 4×4. A is stored
    k-major (transposed) in shared memory, with step 9's register-staged double buffer.

    The lanes of a warp now share rows and columns of the warp's tile: the 8 lanes of a lane-row read
    the same A fragment (one broadcast) and the 4 lanes of a lane-column the same B fragment, so a
    warp's fragment loads touch 4 (A) + 8 (B) distinct float4s per sub-tile instead of up to 32, and
    the A column is one float4 load. On an H200 this is the fastest fp32 body measured (93% of cuBLAS
    at 4096³), ahead of the cp.async variants.
    """
    return fast_tiled(wl, cfg)


@dataclass(frozen=True)
class AsyncPipelineConfig(WarpTileConfig):
    warps_m: int = 2
    warps_n: int = 4
    block_k: int = 16
    stages: int = 4
    async_copy: bool = True


@register("async_pipeline_gemm", "gemm", AsyncPipelineConfig, aliases=("cp_async", "async_pipeline"))
def async_pipeline_gemm(wl: Gemm, cfg: AsyncPipelineConfig = AsyncPipelineConfig()):
    """cp.async multi-stage pipeline: global → shared copies issued as ``cp.async`` (no register
    staging) into a ring of 4 shared buffers of K depth 16 (66 KiB: dynamic shared memory), 3 K tiles
    in flight while the fourth is computed.

    The copies no longer pass through registers or need the threads to wait for them: a thread
    issues its copies for tile k+3 and goes straight on to the FMAs of tile k, and waits
    (cp.async.wait_group) only for the tile it needs next. B goes as 16-byte copies; A, stored
    transposed, as 4-byte copies (cp.async cannot transpose within 16 bytes). Measured on an H200 it
    is 2-3 points behind warp_tiled_gemm's register staging at 2048³-4096³ (90% of cuBLAS): the 4-byte
    copies of A cost issue slots the FMA loop needs, and the deeper ring buys nothing more once the
    K loop is long.
    """
    return fast_tiled(wl, cfg)


@dataclass(frozen=True)
class SplitKConfig(WarpTileConfig):
    split_k: int = 8


@register("split_k_gemm", "gemm", SplitKConfig, aliases=("split_k",))
def split_k_gemm(wl: Gemm, cfg: SplitKConfig = SplitKConfig()):
    """Split-K, for small outputs: warp_tiled_gemm's 128×128 tiles, with K cut into 8 slices computed by
    separate blocks (``rfactor`` → a partial product C_rf[8, M, N]), summed by a second kernel.

    1024×512 has only 32 tiles of 128×128 for 132 SMs (2 resident blocks each): 12% of the GPU.
    Eight K slices make 256 blocks, one full wave. The price is the partials, written and read back
    once (for 1024×512: 16 MiB each way, mostly in L2) and a second launch. Measured on an H200:
    98% of cuBLAS at 1024×512×2048 (warp_tiled_gemm alone: 28%); smaller 64×64 or 128×64 tiles, the other
    way to make blocks, reached 85-91%.
    """
    return fast_tiled(wl, cfg)


@dataclass(frozen=True)
class RasterizedConfig(WarpTileConfig):
    group_m: int = 8


@register("rasterized_gemm", "gemm", RasterizedConfig, aliases=("swizzle", "rasterized"))
def rasterized_gemm(wl: Gemm, cfg: RasterizedConfig = RasterizedConfig()):
    """Thread-block rasterization: warp_tiled_gemm with the block order grouped, 8 block-rows of one
    block-column group at a time, instead of row by row.

    The blocks resident at one moment then share 8 row panels of A and a few column panels of B
    instead of one row panel and every column panel, so on large shapes the panels they read are
    still in L2 when the neighbours ask for them: fewer DRAM reads for the same work. On an H200
    (50+ MB of L2, and an fp32 SIMT kernel that reads 8 flops' worth of tile per byte) it gains
    only 0.2-0.6%: the kernel is bound by the FMA pipe, not by DRAM.
    """
    return fast_tiled(wl, cfg)


@dataclass(frozen=True)
class SkinnyConfig(WarpTileConfig):
    block_m: int = 128
    block_n: int = 16
    thread_m: int = 4
    thread_n: int = 4
    warps_m: int = 4
    warps_n: int = 1
    group_m: int = 8
    dtypes = ("float32", "float16", "bfloat16")  # 16-bit inputs are widened to fp32 on their way to the FMAs


@register("skinny_gemm", "gemm", SkinnyConfig, aliases=("skinny",))
def skinny_gemm(wl: Gemm, cfg: SkinnyConfig = SkinnyConfig()):
    """Skinny tiles, for outputs with a few columns (or rows): warp_tiled_gemm's body with 128 × 16
    blocks of 128 threads (4 × 4 outputs each; 16 × 128 for a few rows), split-K where the blocks
    are too few, and inputs of any type (fp16/bf16 widened to fp32 on their way to the FMAs).

    A 128 × 128 block on an output 3 columns wide computes 125 columns of zeros: 97% of its FMAs
    and of its B traffic are wasted, and there are few blocks. A 16-column block wastes 13 of 16,
    and since such a product reads every byte of A once for a handful of FMAs, what counts is
    that A streams through at full bandwidth, which needs many blocks (split-K) more than big
    register tiles. Tensor cores cannot help much here either (a 64-wide MMA tile for 3 columns).
    """
    return fast_tiled(wl, cfg)
