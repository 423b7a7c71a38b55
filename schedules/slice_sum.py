"""Split-K summed by the last slice to finish (the warp-specialized TMA kernel's ``last_slice_sum``,
:mod:`schedules.gemm_tma_ws`): every (tile, K slice) unit still stores its fp32 partial tile into the
workspace P[slices, M, N]; then its block counts itself in for the tile (an atomic increment of the tile's
counter), and the block that finds every other slice already counted adds the partials, in slice order,
and stores the tile through the epilogue, C written once. No second kernel: split-K's sum kernel costs a
launch and a pass over the partials, 3-4 µs, as much as a fifth of a product of a few dozen rows against a
large weight (the dispatcher's model: schedules.dispatch._reduce_us).

Why it is right:

* **visibility.** Each consumer thread fences (``fence.acq_rel.gpu``) after its partial stores, the
  consumer threads meet on a named barrier, and only then one thread increments the tile's counter; in the
  block that finds the count complete, each consumer thread fences again before its loads: the release and
  acquire of the CUDA programming guide's "last block" pattern (threadFenceReduction), so the loads see every
  slice's stores (the acquire fence drops the SM's L1 lines: ``CCTL.IVALL`` in the SASS). Plain 8-byte
  loads, which ptxas issues many at a time: read through L2 one at a time (``ld.global.cg``, strong loads
  that it keeps in order) the sum took longer than the second kernel it replaces (H200: 17 → 39 µs).
* **the same sum every run.** The last block reads every slice's partial, its own too, and adds them in
  slice order from slice 0: the additions the sum kernel makes (tma_common.split_sum_kernel), whichever
  block happens to finish last, so the output is bit for bit the sum kernel's.
* **counters that reset themselves.** The counters are a ``__device__`` array of the kernel's module, zero
  when the module is loaded; ``atomicInc(c, slices - 1)`` counts 0 … slices - 1 and wraps to 0 on the
  last arrival, so every tile's counter is 0 again when the kernel ends, ready for the next call. (Two
  launches of one module running at once on different streams would share the counters: the lab runs a
  kernel on one stream at a time.)
* **no waiting.** No block waits for another: the last to arrive does the work, the others go on to their
  next unit. The sum is the tile's epilogue moved to whichever slice ends last.
"""

from __future__ import annotations

from tvm.script import tirx as T

SLICE_SUM_BARRIER = 3  # the consumer warpgroups' named barrier around the count (0: __syncthreads)


def _arrival_source(tiles: int) -> str:
    """The module's per-tile counters and the arrival (CUDA): every consumer thread fences its partial
    stores, they meet (named barrier :data:`SLICE_SUM_BARRIER`), consumer thread 0 counts the slice in and
    leaves the count before it in a shared word, they meet again and each returns that count (0 … slices - 1).
    The word is the function's own ``__shared__`` variable (4 bytes of static shared memory)."""
    return (f"__device__ unsigned int schedlab_slice_count_{tiles}[{tiles}];\n"
            f"__device__ __forceinline__ unsigned int schedlab_slice_arrive_{tiles}(int tile, unsigned int last, "
            f"int thread, int threads) {{\n"
            f"  __shared__ unsigned int count;\n"
            f"  asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n"
            f"  asm volatile(\"bar.sync %0, %1;\" :: \"r\"({SLICE_SUM_BARRIER}), \"r\"(threads) : \"memory\");\n"
            f"  if (thread == 0) count = atomicInc(schedlab_slice_count_{tiles} + tile, last);\n"
            f"  asm volatile(\"bar.sync %0, %1;\" :: \"r\"({SLICE_SUM_BARRIER}), \"r\"(threads) : \"memory\");\n"
            f"  return count;\n}}\n")


_FENCE_SOURCE = ('__device__ __forceinline__ void schedlab_fence_acq_rel_gpu() '
                 '{ asm volatile("fence.acq_rel.gpu;" ::: "memory"); }\n')


def threadfence():
    """``fence.acq_rel.gpu``: a thread's stores before it (release) / its loads after it (acquire) ordered
    with the count."""
    return T.evaluate(T.cuda.func_call("schedlab_fence_acq_rel_gpu", source_code=_FENCE_SOURCE))


def last_slice_sum(g, SPLIT: int, CONSUMER_THREADS: int, TILES: int):
    """Macros of ``last_slice_sum`` for a kernel of geometry ``g`` (schedules.tma_fp16.Geometry) with
    ``SPLIT`` K slices, ``CONSUMER_THREADS`` consumer threads and ``TILES`` counters (one per block tile):

    * ``arrive(tile, thread)``, after a unit's partial stores (consumer thread ``thread``): the count of
      counter ``tile`` before this slice, the same in every consumer thread (:func:`_arrival_source`);
      ``SPLIT - 1`` says that this block is the tile's last;
    * ``add(P, acc, tile_m, tile_n, row0, lane)``, in the last block: a consumer warpgroup's accumulators
      (rows ``row0``.. of the tile, the wgmma fragment layout) become the sums of the SPLIT partials at their
      outputs, added in slice order (outputs past M or N are not read: the store skips them too)."""
    M, N, NACC = g.M, g.N, g.NACC
    MT, JN = g.cfg.m_subtiles, g.BN // 8
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0
    arrival = _arrival_source(TILES)

    VEC = g.cfg.vector_store and N % 2 == 0  # a pair of adjacent outputs: one 8-byte load per slice

    def row_ok(tile_m, row0, lane, mt, h):
        return g.out_row(tile_m, row0, lane, mt, h) < M if ROW_CHECK else T.bool(True)

    def col_ok(tile_n, lane, j, e):
        return g.out_col(tile_n, lane, j) + e < N if COL_CHECK else T.bool(True)

    def arrive(tile, thread):
        return T.cast(T.cuda.func_call(f"schedlab_slice_arrive_{TILES}", tile, T.uint32(SPLIT - 1), thread,
                                       T.int32(CONSUMER_THREADS), source_code=arrival, return_type="uint32"), "int32")

    @T.macro
    def add(P, acc, tile_m, tile_n, row0, lane):
        threadfence()  # the other slices' stores, seen through the count, before these loads
        for mt in T.unroll(MT):
            for j in T.unroll(JN):
                for h in T.unroll(2):
                    if VEC:
                        if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, 0)):
                            for e in T.vectorized(2):
                                acc[mt * NACC + j * 4 + h * 2 + e] = P[
                                    0, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e]
                            for s in T.unroll(1, SPLIT):
                                for e in T.vectorized(2):
                                    acc[mt * NACC + j * 4 + h * 2 + e] = acc[mt * NACC + j * 4 + h * 2 + e] + P[
                                        s, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e]
                    else:
                        for e in T.unroll(2):
                            if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, e)):
                                acc[mt * NACC + j * 4 + h * 2 + e] = P[
                                    0, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e]
                                for s in T.unroll(1, SPLIT):
                                    acc[mt * NACC + j * 4 + h * 2 + e] = acc[mt * NACC + j * 4 + h * 2 + e] + P[
                                        s, g.out_row(tile_m, row0, lane, mt, h), g.out_col(tile_n, lane, j) + e]

    return arrive, add
