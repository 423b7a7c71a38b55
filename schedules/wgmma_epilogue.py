"""The epilogue of the Hopper tensor-core kernels written in TVMScript (wgmma_gemm, gemm 19; the
TMA kernels, gemm 20-23): a linear layer's ``D = act(alpha·A·B + bias) + beta·R`` computed on the
fp32 accumulators in the registers of the threads that hold them, rounded to the output type and
stored once, and the PrimFunc signature those kernels take from the workload.

* :func:`kernel_entry`: the PrimFunc ``main(A, B, C)`` of a plain product, or ``main(A, B, [bias],
  [R], D)`` with an epilogue or another output type (``Gemm.arg_names``), around the kernel's body
  written once as a macro ``body(A, B, bias, R, out)`` (``None`` for the inputs it has not).
* :func:`make_fused_store`: a consumer warpgroup's accumulators (the wgmma m64nN layout: thread
  ``lane`` holds rows lane/32·16 + lane%32/4 (+8) of each 64-row subtile and columns 2·(lane%4)
  (+1) of each 8-column group) through the epilogue to D. Per 8-column group the thread's two bias
  values are read once (one 4-byte load for a 16-bit output) and serve every row it holds; per
  pair of adjacent outputs R is read and D written as one vector (two 16-bit values: one 4-byte
  access) where N is even; bounds checks only where the shape needs them.
* :func:`make_residual_prefetch`: R's rows of a tile asked into L2 when the tile's mainloop starts,
  so that the epilogue's reads of R wait for L2, not for DRAM.
* :func:`split_sum_epilogue`: split-K's second kernel where the product has an epilogue: the K
  slices' fp32 partials summed in order, then the epilogue on the sum (the activation of a partial
  sum is not that of the sum), four outputs per thread, D written in its type.
"""

from __future__ import annotations

from tvm.script import tirx as T

from .common import ceil_div
from .tma_common import SUM_THREADS, WARPGROUP
from .workloads import Gemm, epilogue_value, itemsize


def kernel_entry(wl: Gemm, body):
    """The PrimFunc of a kernel whose body is the macro ``body(A, B, bias, R, out)``: ``main(A, B,
    C)`` (C float32) for a plain product; with an epilogue or another output type ``main(A, B,
    [bias], [R], D)``, the bias and R present where the workload has them (in the output type),
    ``None`` passed to the body for those it has not: the arguments every other step and the
    harness take (``Gemm.arg_names``, ``arg_shapes``)."""
    DT, OUT = wl.dtype, wl.out_dtype
    AS, BS, CS, NS = wl.a_shape, wl.b_shape, wl.c_shape, wl.bias_shape
    if not wl.has_epilogue:
        @T.prim_func
        def main(A: T.Buffer(AS, DT), B: T.Buffer(BS, DT), C: T.Buffer(CS, "float32")):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, None, None, C)
    elif wl.bias and wl.residual:
        @T.prim_func
        def main(A: T.Buffer(AS, DT), B: T.Buffer(BS, DT), bias: T.Buffer(NS, OUT), R: T.Buffer(CS, OUT),
                 D: T.Buffer(CS, OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, bias, R, D)
    elif wl.bias:
        @T.prim_func
        def main(A: T.Buffer(AS, DT), B: T.Buffer(BS, DT), bias: T.Buffer(NS, OUT), D: T.Buffer(CS, OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, bias, None, D)
    elif wl.residual:
        @T.prim_func
        def main(A: T.Buffer(AS, DT), B: T.Buffer(BS, DT), R: T.Buffer(CS, OUT), D: T.Buffer(CS, OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, None, R, D)
    else:
        @T.prim_func
        def main(A: T.Buffer(AS, DT), B: T.Buffer(BS, DT), D: T.Buffer(CS, OUT)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, None, None, D)
    return main


def make_fused_store(wl: Gemm, BM: int, BN: int, MT: int, row_check: bool, col_check: bool, vector: bool = True):
    """A macro ``store(D, bias, R, acc, tile_m, tile_n, row0, lane, b)``: one consumer warpgroup's
    accumulators (``MT`` m64 subtiles of its rows ``row0``.. of the ``BM × BN`` block tile
    ``tile_m, tile_n``; ``lane`` its thread) through the workload's epilogue into D (product ``b``
    of a bmm). ``row_check``/``col_check``: whether some tile reaches past M / N (the checks are
    left out where none does); ``vector``: pairs as one access where N allows it."""
    M, N, OUT = wl.M, wl.N, wl.out_dtype
    NACC, JN = BN // 2, BN // 8
    VEC = vector and N % 2 == 0  # a thread's pairs start at an even column: with N even, 2 outputs in one access
    BIAS, RES, BATCHED = wl.bias, wl.residual, wl.batched

    def row(tile_m, row0, lane, mt, h):
        return tile_m * BM + row0 + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8

    def col(tile_n, lane, j):
        return tile_n * BN + j * 8 + lane % 4 * 2

    def row_ok(tile_m, row0, lane, mt, h):
        return row(tile_m, row0, lane, mt, h) < M if row_check else T.bool(True)

    def col_ok(tile_n, lane, j, e):
        return col(tile_n, lane, j) + e < N if col_check else T.bool(True)

    def r_at(R, b, r, c):
        return R[b, r, c] if BATCHED else R[r, c]

    def value(x, bv, rv, e):  # the epilogue of one accumulator, rounded to the output type
        return epilogue_value(wl, x, bv[e] if BIAS else None, rv[e] if RES else None)

    @T.macro
    def store(D, bias, R, acc, tile_m, tile_n, row0, lane, b):
        bv = T.alloc_buffer((2,), OUT, scope="local")  # the bias of the thread's two columns
        rv = T.alloc_buffer((2,), OUT, scope="local")  # R at the two outputs
        ov = T.alloc_buffer((2,), OUT, scope="local")  # the two outputs, rounded
        for j in T.unroll(JN):
            if BIAS:  # once per column: the same two values for every row the thread holds
                if VEC:
                    if col_ok(tile_n, lane, j, 0):
                        for e in T.vectorized(2):
                            bv[e] = bias[col(tile_n, lane, j) + e]
                else:
                    for e in T.unroll(2):
                        if col_ok(tile_n, lane, j, e):
                            bv[e] = bias[col(tile_n, lane, j) + e]
            for mt in T.unroll(MT):
                for h in T.unroll(2):
                    if VEC:
                        if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, 0)):
                            if RES:
                                for e in T.vectorized(2):
                                    rv[e] = r_at(R, b, row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e)
                            for e in T.unroll(2):
                                ov[e] = value(acc[mt * NACC + j * 4 + h * 2 + e], bv, rv, e)
                            for e in T.vectorized(2):
                                if BATCHED:
                                    D[b, row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e] = ov[e]
                                else:
                                    D[row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e] = ov[e]
                    else:
                        for e in T.unroll(2):
                            if T.And(row_ok(tile_m, row0, lane, mt, h), col_ok(tile_n, lane, j, e)):
                                if RES:
                                    rv[e] = r_at(R, b, row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e)
                                ov[e] = value(acc[mt * NACC + j * 4 + h * 2 + e], bv, rv, e)
                                if BATCHED:
                                    D[b, row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e] = ov[e]
                                else:
                                    D[row(tile_m, row0, lane, mt, h), col(tile_n, lane, j) + e] = ov[e]

    return store


LINE_BYTES = 128  # an L2 line


def make_residual_prefetch(wl: Gemm, BM: int, BN: int, ROWS: int):
    """A macro ``prefetch(R, tile_m, tile_n, row0, lane, b)``: a consumer warpgroup (``lane`` its
    thread) asks L2 for the ``ROWS`` rows of R its tile's outputs add, from ``row0`` of the ``BM ×
    BN`` tile ``tile_m, tile_n`` (product ``b`` of a bmm): ``prefetch.global.L2`` of each 128-byte
    line, a line per thread and pass, at the start of the tile's mainloop. The epilogue's reads of R
    then come from L2: read from DRAM there, a chunk's latency sat in every tile's epilogue (R cost
    a 128 × 128 tile of 1000 × 3584 × 3584 bf16 half again its time on an H100)."""
    M, N = wl.M, wl.N
    PER_LINE = LINE_BYTES // itemsize(wl.out_dtype)  # outputs (R is in the output type) per line
    LPR = ceil_div(BN, PER_LINE)  # lines per row of the tile
    LINES = ROWS * LPR
    PASSES = ceil_div(LINES, WARPGROUP)
    BATCHED = wl.batched

    @T.macro
    def prefetch(R, tile_m, tile_n, row0, lane, b):
        for p in T.unroll(PASSES):
            line = T.meta_var(p * WARPGROUP + lane)
            row = T.meta_var(tile_m * BM + row0 + line // LPR)
            col = T.meta_var(tile_n * BN + line % LPR * PER_LINE)
            if T.And(T.And(line < LINES, row < M), col < N):
                if BATCHED:
                    T.ptx.prefetch.global_.L2(T.address_of(R[b, row, col]))
                else:
                    T.ptx.prefetch.global_.L2(T.address_of(R[row, col]))

    return prefetch


def split_sum_epilogue(wl: Gemm, SPLIT: int):
    """(macro ``split_sum(P, bias, R, D)``, blocks): split-K's second kernel for a product with an
    epilogue: ``D = epilogue(Σ_s P[s])`` over the fp32 partials P[SPLIT, M, N], the slices summed in
    order (deterministic), then the epilogue on each sum in fp32, rounded to the output type last.
    As the plain sum (tma_common.split_sum_kernel): the flat M·N outputs, ``V`` = 4 consecutive per
    thread (2 or 1 where M·N is not a multiple of 4), 16-byte partial loads, R read and D written as
    ``V``-wide vectors, the bias of each output's column (its flat index modulo N: one ``V``-wide load
    where N is a multiple of ``V``)."""
    M, N, OUT = wl.M, wl.N, wl.out_dtype
    MN = M * N
    V = 4 if MN % 4 == 0 else 2 if MN % 2 == 0 else 1
    E = MN // V
    BLOCKS = ceil_div(E, SUM_THREADS)
    GUARD = E % SUM_THREADS != 0
    BIAS, RES = wl.bias, wl.residual
    ROW_VEC = N % V == 0  # a thread's V outputs lie in one row: their bias is one V-wide load

    def value(total, bv, rv, v):
        return epilogue_value(wl, total[v], bv[v] if BIAS else None, rv[v] if RES else None)

    @T.macro
    def split_sum(P, bias, R, D):
        with T.launch_thread("blockIdx.x", BLOCKS) as sum_bid:
            sum_tid = T.launch_thread("threadIdx.x", SUM_THREADS)
            total = T.alloc_buffer((V,), "float32", scope="local")
            bv = T.alloc_buffer((V,), OUT, scope="local")
            rv = T.alloc_buffer((V,), OUT, scope="local")
            ov = T.alloc_buffer((V,), OUT, scope="local")
            P_flat = T.decl_buffer((SPLIT * MN,), "float32", data=P.data)
            D_flat = T.decl_buffer((MN,), OUT, data=D.data)
            if (sum_bid * SUM_THREADS + sum_tid < E) if GUARD else True:
                for v in T.vectorized(V):
                    total[v] = P_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v]
                for s in T.unroll(1, SPLIT):
                    for v in T.vectorized(V):
                        total[v] = total[v] + P_flat[s * MN + (sum_bid * SUM_THREADS + sum_tid) * V + v]
                if BIAS:
                    if ROW_VEC:
                        for v in T.vectorized(V):
                            bv[v] = bias[T.truncmod((sum_bid * SUM_THREADS + sum_tid) * V, N) + v]
                    else:  # the V outputs may run into the next row: each its column
                        for v in T.unroll(V):
                            bv[v] = bias[T.truncmod((sum_bid * SUM_THREADS + sum_tid) * V + v, N)]
                if RES:
                    R_flat = T.decl_buffer((MN,), OUT, data=R.data)
                    for v in T.vectorized(V):
                        rv[v] = R_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v]
                for v in T.unroll(V):
                    ov[v] = value(total, bv, rv, v)
                for v in T.vectorized(V):
                    D_flat[(sum_bid * SUM_THREADS + sum_tid) * V + v] = ov[v]

    return split_sum, BLOCKS
