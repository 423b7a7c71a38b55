"""Short-K products (K ≤ 64) with a large output: short_k_gemm, where storing C is the work.

A product with K = 16 does 32 flops per output and writes 4 bytes per output (fp32): on an H200
the FMA pipes finish such a tile long before its stores have left the SM, so the kernel that wins
is the one that keeps the store path busy. The fast SIMT steps (gemm 11-15) are built for long K
and miss it three ways here:

* their K loop stages every K tile in shared memory (a cooperative copy and two ``__syncthreads``
  per tile, a register double buffer): at K = 16 that is two tiles of pipeline fill and drain for
  a few FMAs, paid by every block;
* their 128 × 128 tiles and 8 × 8 thread tiles hold 2 blocks (16 warps) per SM, whose store phases
  run after their compute phases, so the SM's store path idles while they compute;
* where M or N is not a multiple of the block tile, every block tests every row it stores
  (``if (row < M)``), interior blocks included, and where a row of C is not 16 bytes long
  (N % 4 ≠ 0 in fp32) the stores are scalars strided across the lanes of a warp.

short_k_gemm reads its operands straight from global memory into registers (no shared memory,
no barrier: a warp's lanes share the rows of A, one broadcast load, and read consecutive 16 bytes
of B, served from L1 for the other warps of the block), walks the whole K unrolled, each thread
a thread_m × thread_n register tile, and writes C as 16-byte vector stores (float4 for an fp32
output, 4 or 8 halves for a 16-bit one): a warp's store is 32 consecutive vectors of one row.
Small tiles (32 × 128 blocks of 256 threads, 16 accumulators per thread) keep the SM full of
warps, so one warp's stores overlap another's FMAs. The blocks of whole block-rows store
without a row test: the block-row index is partitioned (``pragma_loop_partition_hint`` on
blockIdx.y, TVM's LoopPartition with ``partition_const_loop``) into the interior, whose
code has no row test, and the last, partial block-row, which keeps it. The column test of a last,
partial block-column is one comparison per thread (a thread's columns are fixed), and none where
block_n divides N. This needs a kernel without barriers: LoopPartition duplicates the body under
``if (blockIdx.y < ...)``, and TVM inserts no ``__syncthreads`` inside a condition.
Where a row of C is not a whole number of vectors (N % 4 ≠ 0 in fp32), the stores narrow to
what the rows allow, a thread's columns then strided by the warp's width (``vthread``), so that a
warp's store is still 32 consecutive elements of one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .common import aligned_vector, ceil_div, fuse_epilogue, inline_padding, new_schedule
from .errors import ScheduleParamError
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm, itemsize

K_STEP = 4  # k values per register fragment of A and B (one 16-byte load of fp32 where the rows allow it)
STORE_BYTES = 16  # the widest store: one 128-bit vector


@dataclass(frozen=True)
class ShortKConfig(StepConfig):
    """Block and thread tiles of :func:`short_k_gemm`. thread_n outputs of a thread's row are
    stored as one vector where the rows of C allow (at most 16 bytes)."""

    dtypes = ("float32", "float16", "bfloat16")  # 16-bit inputs widened to fp32 on their way to the FMAs
    layouts = LAYOUTS  # A and B are read where they are stored, as wide as their rows allow
    batched = True     # the batch on blockIdx.z
    epilogues = True   # computed in the write-back from the accumulators
    max_k: ClassVar[int] = 64  # the whole K unrolled, fragments of it in registers

    block_m: int = 32
    block_n: int = 128
    thread_m: int = 4
    thread_n: int = 4

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n

    def splits(self, wl) -> int:
        """K slices (the tiled steps' split-K): one, the whole K in every block."""
        return 1

    @property
    def pass_config(self) -> dict:
        """LoopPartition splits the block-row index (hinted) into interior and edge code; the
        blockIdx extents are constants, which it partitions only with ``partition_const_loop``."""
        return {"s_tir.LoopPartition": {"partition_const_loop": True}}

    @classmethod
    def scope_refusal(cls, wl) -> str | None:
        if getattr(wl, "K", 0) > cls.max_k:
            return f"short_k_gemm keeps the whole K in the unrolled loop of each thread: K ≤ {cls.max_k}, not {wl.K}"
        return None

    def store_vector(self, wl) -> int:
        """Outputs per store: thread_n, at most 16 bytes of the output type, and no wider than a
        row of C allows (a row starts at a multiple of N outputs). An epilogue with a constant (an
        activation, alpha or beta) is computed on at most 4 outputs at a time: TVM 0.27 writes an
        8-lane fp32 constant as a ``make_ulonglong4`` of 8 floats, which nvcc rejects."""
        widest = max(1, STORE_BYTES // itemsize(getattr(wl, "out_dtype", "float32")))
        epilogue = getattr(wl, "epilogue", None)
        if epilogue is not None and (epilogue.activation or epilogue.alpha != 1 or epilogue.beta != 1):
            widest = min(widest, 4)
        return aligned_vector(wl.N, min(self.thread_n, widest))

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"short_k_gemm takes {' or '.join(self.dtypes)} inputs, not {wl.dtype}")
        refusal = self.scope_refusal(wl)
        if refusal:
            raise ScheduleParamError(refusal)
        for name in ("m", "n"):
            block, thread = getattr(self, f"block_{name}"), getattr(self, f"thread_{name}")
            if block % thread:
                raise ScheduleParamError(f"thread_{name}={thread} must divide block_{name}={block}")
        if self.threads % 32:
            raise ScheduleParamError(f"(block_m / thread_m) × (block_n / thread_n) = {self.threads} threads must be "
                                     f"whole warps (a multiple of 32)")

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.N, self.block_n), ceil_div(wl.M, self.block_m), getattr(wl, "batches", 1)),
                      block=(self.threads_n, self.threads_m, 1),
                      threads_from="(block_m / thread_m) × (block_n / thread_n)", shared_from="no shared memory")


def _vector_copy(sch, frag, at, width: int):
    """A register fragment's copy loops (those inside ``at``): the innermost as ``width``-wide
    vector loads, the others unrolled."""
    loops = sch.get_loops(frag)
    copy = loops[[sch.get(x).same_as(sch.get(at)) for x in loops].index(True) + 1:]
    *outer, inner = copy
    if width > 1:
        split, inner = sch.split(inner, [None, width])
        outer.append(split)
        sch.vectorize(inner)
    else:
        outer.append(inner)
    for loop in outer:
        sch.unroll(loop)


@register("short_k_gemm", "gemm", ShortKConfig, aliases=("short_k",))
def short_k_gemm(wl: Gemm, cfg: ShortKConfig = ShortKConfig()):
    """Short K (≤ 64), large output: storing C is the work. No shared memory and no K pipeline:
    each thread reads fragments of A and B straight from global memory (L1) into registers and
    walks the whole K unrolled into a 4 × 4 register tile; C leaves as 16-byte vector stores,
    and the blocks of whole block-rows store without a bounds test (LoopPartition on blockIdx.y).

    At K = 16 a product does 32 flops per 4 bytes of fp32 output: the SM's FMA pipes are idle most
    of the time and its store path is the limit. The fast SIMT steps stage every K tile through
    shared memory with barriers, hold 2 big blocks per SM (their stores wait for their compute),
    and where M is not a multiple of 128 test every row they store; here 32 × 128 blocks of 256
    threads fill the SM with warps whose stores overlap the others' FMAs. K > 64 is refused: the
    unrolled loop and its loads grow with K, and there the tiled steps win.
    """
    cfg.check(wl)
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    vec = cfg.store_vector(wl)
    batch = [1] if wl.batched else []
    sch.pad_einsum(block, batch + [cfg.block_m, cfg.block_n, ceil_div(wl.K, K_STEP) * K_STEP])
    *b, i, j, k = sch.get_loops(block)
    bi, ti, ii = sch.split(i, [None, cfg.threads_m, cfg.thread_m])
    # a thread's columns: thread_n / vec vectors, strided by the warp's width where vec < thread_n
    bj, vj, tj, jj = sch.split(j, [None, cfg.thread_n // vec, cfg.threads_n, vec])
    ko, ki = sch.split(k, [None, K_STEP])
    # the block-row index outermost: only the outermost bound loop keeps its partition hint
    sch.reorder(bi, *b, bj, vj, ti, tj, ko, ki, ii, jj)
    sch.annotate(bi, "pragma_loop_partition_hint", 1)
    sch.bind(bi, "blockIdx.y")
    if b:
        sch.bind(b[0], "blockIdx.z")
    sch.bind(bj, "blockIdx.x")
    if cfg.thread_n // vec > 1:
        sch.bind(vj, "vthread.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tj, preserve_unit_loops=True)
    # fragments of A (thread_m rows × K_STEP) and B (K_STEP × vec columns) per K step, each loaded
    # along its stored rows as wide as they allow (A's rows are K long, M where stored K×M; B's N,
    # K where stored N×K), at most 4 elements: the fragments hold the widened fp32 values, and TVM
    # 0.27 writes an 8-wide fp32 vector as a ulonglong4 that nvcc rejects
    a_width = aligned_vector(wl.M, min(cfg.thread_m, 4)) if wl.trans_a else aligned_vector(wl.K, K_STEP)
    b_width = aligned_vector(wl.K, K_STEP) if wl.trans_b else min(vec, 4)
    for index, width in ((0, a_width), (1, b_width)):
        frag = sch.cache_read(block, index, "local")
        sch.compute_at(frag, ko, preserve_unit_loops=True)
        _vector_copy(sch, frag, ko, width)
    for loop in (ko, ki, ii, jj):
        sch.unroll(loop)
    *_, rows, cols = sch.get_loops(write_back)
    sch.unroll(rows)
    sch.vectorize(cols)
    inline_padding(sch)
    sch.decompose_reduction(block, ko)
    fuse_epilogue(sch)
    return sch
