"""The staged store of the Hopper TMA kernels (``staged_store``, the 16-bit steps of gemm 21-23 and the FP8 steps):
each consumer warp writes its accumulators, 16 rows × 32 columns at a time, into its own staging area of shared
memory and reads them back along the rows, so that every store to global memory is a whole row segment (128 bytes
of fp32, two rows of 64 of a 16-bit output) instead of the wgmma fragment's 8 rows × 8 bytes. Only the warp's own
threads meet in its area: ``__syncwarp`` orders the writes and the reads, and no block barrier is needed."""

from __future__ import annotations

from tvm.script import tirx as T

from .workloads import Gemm, epilogue_value

# ``g`` below is a kernel's schedules.tma_fp16.Geometry (its sizes, its tile's rows and columns)

STAGE_ROW = 40  # floats per row of a warp's staging area: 32 columns + 8, so 8-byte writes hit no bank twice
STAGE_WARP_BYTES = 16 * STAGE_ROW * 4  # one warp's 16 accumulator rows of 32 columns


def staged_bytes(cfg) -> int:
    """Shared memory of ``staged_store``: one staging area per consumer warp (0 without it)."""
    return cfg.consumers * 4 * STAGE_WARP_BYTES if cfg.staged_store else 0


def make_stage_chunk(NACC: int):
    """A macro: one consumer warp writes its accumulators of 32 columns (chunk ``c`` of m64 subtile
    ``mt``: 16 rows × 32 in the wgmma fragment layout) into its staging area at shared address
    ``area`` as 8-byte ``st.shared``, then ``__syncwarp`` so that every lane may read the area."""

    @T.macro
    def stage_chunk(acc, area, mt, c, lane):
        for jj in T.unroll(4):
            for h in T.unroll(2):
                T.ptx.st.shared.v2.f32(
                    area + T.cast(((lane % 32 // 4 + h * 8) * STAGE_ROW + jj * 8 + lane % 4 * 2) * 4, "uint32"),
                    acc[mt * NACC + (c * 4 + jj) * 4 + h * 2], acc[mt * NACC + (c * 4 + jj) * 4 + h * 2 + 1])
        T.cuda.warp_sync()

    return stage_chunk


@T.macro
def read_column(vals, area, lane):
    """Lane ``lane % 32`` of a warp reads column ``lane % 32`` of the 16 staged rows into ``vals``."""
    for r in T.unroll(16):
        T.ptx.ld.shared.f32(vals[r], area + T.cast((r * STAGE_ROW + lane % 32) * 4, "uint32"))


def make_staged_rows(g, value, batched: bool = False, early=None):
    """A macro ``store(D, x1, x2, x3, x4, x5, acc, vals, pair, stage, tile_m, tile_n, row0, w, lane,
    b)``: a consumer warp's accumulators (warp ``lane // 32`` of consumer warpgroup ``w``, rows
    ``row0``.. of the tile) through its staging area into D, each value read back turned into an
    output by ``value(x, x1, .., x5, row, col, b)`` (the scales, the epilogue, the rounding: the
    kernel's; x1..x5 are the buffers it reads, None where it has fewer), D[b, row, col] where
    ``batched``. With N even lane l takes columns 2·(l % 16) and +1 of row l / 16 (one store of the
    pair), so a store is two rows of 64 bytes (16-bit output) or 128 (fp32): whole sectors; with N
    odd, 32 outputs of one row. The FP8 kernels' and the 16-bit kernels' epilogue, ``staged_store``.

    ``early``: ``(dtype, column, element)``, operands read ahead of their use (None: none such):
    ``column(x1, .., x5, col)`` (the bias) for the tile's columns, at the start; ``element(x1, ..,
    x5, row, col, b)`` (R) for a chunk's rows, before it is staged; ``value`` takes them last. Read
    inside the loop, each one's latency sat between two stores (a bias: +20% on a 128 × 128 tile)."""
    M, N, NACC = g.M, g.N, g.NACC
    MT, CHUNKS = g.cfg.m_subtiles, g.BN // 32
    PAIRS = N % 2 == 0
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0
    stage_chunk = make_stage_chunk(NACC)
    EDT, COLUMN, ELEMENT = early if early else (None, None, None)
    HAS_COLUMN, HAS_ELEMENT = COLUMN is not None, ELEMENT is not None
    W = 2 if PAIRS else 1  # outputs per lane per staged row (a pair, or one of an odd N's rows)
    ROWS = 8 if PAIRS else 16  # staged rows a lane stores per chunk

    def ok(row, col):
        return T.And(row < M if ROW_CHECK else T.bool(True), col < N if COL_CHECK else T.bool(True))

    def lane_col(tile_n, c, lane):
        return tile_n * g.BN + c * 32 + (lane % 16 * 2 if PAIRS else lane % 32)

    def lane_row(tile_m, row0, mt, lane, i):
        return tile_m * g.BM + row0 + mt * 64 + lane // 32 * 16 + (i * 2 + lane % 32 // 16 if PAIRS else i)

    def out(x, x1, x2, x3, x4, x5, row, col, b, bv, rv, c, i, e):  # chunk c, the lane's staged row i
        if not early:
            return value(x, x1, x2, x3, x4, x5, row, col, b)
        return value(x, x1, x2, x3, x4, x5, row, col, b, bv[c * W + e] if HAS_COLUMN else None,
                     rv[i * W + e] if HAS_ELEMENT else None)

    @T.macro
    def store(D, x1, x2, x3, x4, x5, acc, vals, pair, stage, tile_m, tile_n, row0, w, lane, b):
        area: T.let[T.uint32] = stage + T.cast((w * 4 + lane // 32) * STAGE_WARP_BYTES, "uint32")
        if HAS_COLUMN:  # the bias of every column this lane stores in the tile
            bv = T.alloc_buffer((CHUNKS * W,), EDT, scope="local")
            for c in T.unroll(CHUNKS):
                if ok(0, lane_col(tile_n, c, lane)):
                    for e in T.vectorized(W):
                        bv[c * W + e] = COLUMN(x1, x2, x3, x4, x5, lane_col(tile_n, c, lane) + e)
        else:
            bv = T.meta_var(None)
        if HAS_ELEMENT:
            rv = T.alloc_buffer((ROWS * W,), EDT, scope="local")
        else:
            rv = T.meta_var(None)
        for mt in T.unroll(MT):
            for c in T.unroll(CHUNKS):
                if HAS_ELEMENT:  # R at the chunk's outputs, read before the chunk is staged
                    for i in T.unroll(ROWS):
                        if ok(lane_row(tile_m, row0, mt, lane, i), lane_col(tile_n, c, lane)):
                            for e in T.vectorized(W):
                                rv[i * W + e] = ELEMENT(x1, x2, x3, x4, x5, lane_row(tile_m, row0, mt, lane, i),
                                                        lane_col(tile_n, c, lane) + e, b)
                stage_chunk(acc, area, mt, c, lane)
                if PAIRS:
                    for i in T.unroll(8):
                        for e in T.unroll(2):
                            T.ptx.ld.shared.f32(vals[i * 2 + e], area + T.cast(
                                ((i * 2 + lane % 32 // 16) * STAGE_ROW + lane % 16 * 2 + e) * 4, "uint32"))
                    for i in T.unroll(8):
                        row = T.meta_var(lane_row(tile_m, row0, mt, lane, i))
                        col = T.meta_var(lane_col(tile_n, c, lane))
                        if ok(row, col):
                            for e in T.unroll(2):
                                pair[e] = out(vals[i * 2 + e], x1, x2, x3, x4, x5, row, col + e, b, bv, rv, c, i, e)
                            for e in T.vectorized(2):
                                if batched:
                                    D[b, row, col + e] = pair[e]
                                else:
                                    D[row, col + e] = pair[e]
                else:
                    read_column(vals, area, lane)
                    for r in T.unroll(16):
                        row = T.meta_var(lane_row(tile_m, row0, mt, lane, r))
                        col = T.meta_var(lane_col(tile_n, c, lane))
                        if ok(row, col):
                            if batched:
                                D[b, row, col] = out(vals[r], x1, x2, x3, x4, x5, row, col, b, bv, rv, c, r, 0)
                            else:
                                D[row, col] = out(vals[r], x1, x2, x3, x4, x5, row, col, b, bv, rv, c, r, 0)
                T.cuda.warp_sync()  # every lane has read the area before the next chunk overwrites it

    return store


def make_staged_fused_epilogue(g: "Geometry", wl: Gemm):
    """:func:`make_fused_epilogue` through the consumer warps' staging areas (``staged_store``): the
    epilogue applied to the accumulators read back along the rows, the bias read once per tile and R
    once per chunk, ahead of their use (:func:`make_staged_rows`' ``early``), D stored by rows in
    its type."""
    BIAS, RES, BATCHED = wl.bias, wl.residual, wl.batched

    def value(x, bias, R, _3, _4, _5, row, col, b, bias_value, r_value):
        return epilogue_value(wl, x, bias_value, r_value)

    def column(bias, R, _3, _4, _5, col):
        return bias[col]

    def element(bias, R, _3, _4, _5, row, col, b):
        return R[b, row, col] if BATCHED else R[row, col]

    return make_staged_rows(g, value, BATCHED, (wl.out_dtype, column if BIAS else None, element if RES else None))


def make_staged_epilogue(g: "Geometry"):
    """:func:`make_epilogue` through shared memory (``staged_store``): each consumer warp writes
    its accumulators of 32 columns (16 rows × 32, the wgmma fragment layout) into its own staging
    area with 8-byte ``st.shared``, then reads them back one row at a time, lane ``l`` taking
    column ``l``, so that every ``st.global`` writes 32 consecutive floats of one row: 128 bytes,
    four whole sectors. Straight from the fragments a warp's store touches 8 rows; where N is odd
    the pairs cannot go out as one 8-byte store (half the rows would be misaligned), and each
    4-byte store fills half of each sector it touches. Only the warp's own threads meet in its
    area, so ``__syncwarp`` orders the writes and the reads, and the producer warpgroup never
    waits. The macro takes the area's shared address (``stage``) and the consumer warpgroup ``w`` whose
    warps' areas these are beside make_epilogue's arguments."""
    M, N, NACC = g.M, g.N, g.NACC
    PARTIAL = g.PARTIALS or g.BATCH > 0
    MT, CHUNKS = g.cfg.m_subtiles, g.BN // 32
    ROW_CHECK = M % g.BM != 0 or g.rows_padded
    COL_CHECK = N % g.BN != 0

    def ok(row, col):
        return T.And(row < M if ROW_CHECK else T.bool(True), col < N if COL_CHECK else T.bool(True))

    stage_chunk = make_stage_chunk(NACC)

    @T.macro
    def epilogue(C, acc, vals, stage, tile_m, tile_n, row0, w, lane, part=None):
        # warp lane // 32 of consumer warpgroup w owns its area (rows row0.. of the tile, whichever they are)
        area: T.let[T.uint32] = stage + T.cast((w * 4 + lane // 32) * STAGE_WARP_BYTES, "uint32")
        for mt in T.unroll(MT):
            for c in T.unroll(CHUNKS):
                stage_chunk(acc, area, mt, c, lane)
                read_column(vals, area, lane)
                for r in T.unroll(16):
                    row = T.meta_var(tile_m * g.BM + row0 + mt * 64 + lane // 32 * 16 + r)
                    col = T.meta_var(tile_n * g.BN + c * 32 + lane % 32)
                    if ok(row, col):
                        if PARTIAL:
                            C[part, row, col] = vals[r]
                        else:
                            C[row, col] = vals[r]
                T.cuda.warp_sync()  # every lane has read the area before the next chunk overwrites it

    return epilogue
