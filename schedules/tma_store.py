"""The TMA store of the persistent 16-bit kernel (``tma_store=true`` on persistent_gemm) and of the cooperative
FP8 kernels (on fp8_tma_gemm, the scales applied in the boxes, and fp8_block_scaled_gemm, whose sums are scaled
before the store): each consumer warp writes its accumulators, through the epilogue and rounded to the output
type, into a box of shared memory (its 16 rows × 32 columns of the tile, dense row-major, the TMA box of D's
tensor map), and one lane hands the box to the TMA unit (``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group``),
which writes it to D while the warp goes on: with the next box, then the next tile's wgmmas.

The staged store (schedules/staged_store.py) has the warp's threads write D: the warp reads its area back and
issues the stores, 16 per box, and the SM keeps only so many of them in flight; with one block per SM, a tile
whose mainloop is short (a short K) leaves its stores as the whole cost, and they drain at about half the
store rate a grid of small blocks reaches. A TMA store is one instruction per box, whole 128-byte lines,
asynchronous: the warp waits only before it fills a box again, for the TMA unit to have read it
(``cp.async.bulk.wait_group.read``), and at the end of the kernel for every store to be done. Rows and columns
past M and N are clipped by the tensor map itself: no bounds test at all.

Two boxes per warp (:data:`BOX_BUFFERS`), used in turn: a box is written while the other one is read by the
TMA unit. The fragment's 8-byte writes (a row's two columns per lane) land 8 rows × 32 bytes apart in the
dense box: shared memory serves them in 8 passes, a few hundred cycles per tile against microseconds of
stores. D's row pitch must be a multiple of 16 bytes (a tensor map's), N a multiple of 4 (fp32) or 8 (16-bit).

FP8 products scaled per tensor or per row (on fp8_tma_gemm) apply their scales in the box write: the product of
the two scalars; or per row, B's scales of the lane's 8 columns read a box ahead as the bias is (four 8-byte loads),
and A's of its rows once a tile.

An epilogue's bias and R are read a box ahead of their use (the lane's 8 columns, and its 2 rows of R): the box's
``st.shared`` are ``asm volatile`` with a memory clobber, so nvcc moves no load above them, and a load issued in
the box that uses it waited for L2 once per box. Read ahead, a bf16 output with bias and GELU ran at 0.97-1.03× the
staged store's speed (H200); the dispatcher keeps the staged store there (docs/dispatcher.md#tma-stores).
"""

from __future__ import annotations

from tvm.script import tirx as T

from .workloads import Gemm, epilogue_value, itemsize

BOX_ROWS, BOX_COLS = 16, 32  # one consumer warp's rows of an m64 subtile, by 32 columns
BOX_BUFFERS = 2  # boxes per warp, used in turn
MOST_BYTES = 4  # the boxes are reserved at fp32's size whatever D's type: shared_bytes() does not see the workload


def tma_store_bytes(cfg) -> int:
    """Shared memory of ``tma_store``: BOX_BUFFERS boxes per consumer warp (0 without it)."""
    if not getattr(cfg, "tma_store", False):
        return 0
    return cfg.consumers * 4 * BOX_BUFFERS * BOX_ROWS * BOX_COLS * MOST_BYTES


def tma_store_refusal(cfg, wl: Gemm) -> str | None:
    """Why ``tma_store`` cannot serve ``wl`` with ``cfg`` (None where it can)."""
    item = itemsize(wl.out_dtype)
    if not cfg.warp_specialized:
        return "tma_store is for the warp-specialized kernel (warp_specialized=true)"
    if cfg.staged_store:
        return "tma_store and staged_store are two ways to store the tile: take one"
    if cfg.split_k > 1 or cfg.stream_k or wl.batched:
        return "tma_store stores whole tiles of one product: split_k 1, no stream_k, no batch"
    if cfg.block_n % BOX_COLS:
        return f"tma_store stores {BOX_COLS} columns a box: block_n must be a multiple of {BOX_COLS}"
    if wl.N * item % 16:
        return (f"tma_store: D's row pitch ({wl.N} × {item} bytes) must be a multiple of 16 bytes (a tensor map's); "
                f"N must be a multiple of {16 // item}")
    return None


def encode_store_map(D_map, D_data, wl: Gemm):
    """The host part's encoding of D's tensor map: (N, M) elements of the output type, boxes of
    BOX_COLS × BOX_ROWS, no swizzle (the box is dense row-major in shared memory)."""
    item = itemsize(wl.out_dtype)
    return T.tensormap_encode_tiled(D_map, D_data, wl.N, wl.M, wl.N * item, BOX_COLS, BOX_ROWS, 1, 1,
                                    descriptor_dtype=wl.out_dtype, rank=2, swizzle=0, l2_promotion=0)


def make_tma_store(g, wl: Gemm, scaling: str | None = None):
    """A macro ``store(D_map, bias, R, scales, acc, boxes, tile_m, tile_n, row0, w, lane, i)``: consumer
    warp ``lane // 32`` of warpgroup ``w`` (rows ``row0``.. of the tile) stores its accumulators of the
    block's ``i``-th tile through its boxes (shared address ``boxes``) and D's tensor map; the
    epilogue on the accumulators in the fragment layout, its bias and R (clamped inside D) read a
    box ahead. ``g``: the kernel's schedules.tma_fp16.Geometry. ``scaling``: an FP8 product's scales
    applied first, ``"tensor"`` (``scales`` a local buffer holding scale_a·scale_b) or ``"row"``
    (``scales`` the pair (scale_a, scale_b), read a box ahead at the lane's rows and columns); None
    (``scales`` None): the sums are the product already (16-bit inputs, FP8 block scales)."""
    M, N, NACC = g.M, g.N, g.NACC
    MT, CHUNKS = g.cfg.m_subtiles, g.BN // BOX_COLS
    OUT = wl.out_dtype
    ITEM = itemsize(OUT)
    BOX = BOX_ROWS * BOX_COLS * ITEM
    PER_TILE = MT * CHUNKS  # boxes a warp stores per tile
    FUSED, BIAS, RES = wl.has_epilogue, wl.bias, wl.residual

    EARLY_B, EARLY_R = FUSED and BIAS, FUSED and RES  # the epilogue's operands, read a box ahead of their use
    ROWWISE, TENSOR = scaling == "row", scaling == "tensor"
    EARLY = EARLY_B or EARLY_R or ROWWISE
    if scaling not in (None, "tensor", "row"):
        raise ValueError(f"make_tma_store: scaling is None, 'tensor' or 'row', not {scaling!r}")
    assert N % 2 == 0, "a tensor map's row pitch (a multiple of 16 bytes) holds an even N"

    def row_of(tile_m, row0, lane, q, h):
        return tile_m * g.BM + row0 + q // CHUNKS * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8

    def col_of(tile_n, lane, q, jj):
        return tile_n * g.BN + q % CHUNKS * BOX_COLS + jj * 8 + lane % 4 * 2

    def put(addr, a, b):  # two adjacent outputs of one row into the box
        if ITEM == 4:
            return T.ptx.st.shared.v2.f32(addr, a, b)
        return T.ptx.st.shared.v2.b16(addr, T.reinterpret("uint16", a), T.reinterpret("uint16", b))

    @T.macro
    def fetch(bias, R, scales, bv, rv, sv, slot, q, tile_m, tile_n, row0, lane):
        """Box ``q``'s bias (8 columns a lane), R (its 2 rows of them) and B's row scales (at the 8
        columns) into ``slot`` of bv, rv, sv."""
        for jj in T.unroll(4):
            for e in T.unroll(2):
                if EARLY_B:
                    bv[slot * 8 + jj * 2 + e] = bias[T.min(col_of(tile_n, lane, q, jj) + e, N - 1)]
                if EARLY_R:
                    for h in T.unroll(2):
                        rv[slot * 16 + (jj * 2 + h) * 2 + e] = R[T.min(row_of(tile_m, row0, lane, q, h), M - 1),
                                                                  T.min(col_of(tile_n, lane, q, jj) + e, N - 1)]
            if ROWWISE:  # B's scales of the lane's column pair, one 8-byte load (N even: the pair in D or past it)
                for e in T.vectorized(2):
                    sv[slot * 8 + jj * 2 + e] = scales[1][0, T.min(col_of(tile_n, lane, q, jj), N - 2) + e]

    def value(bv, rv, sv, sa, scales, x, slot, mt, jj, h, e):
        if not FUSED:
            return x
        if ROWWISE:  # x·(scale_a·scale_b), as schedules.gemm_fp8.output_value
            x = x * (sa[mt * 2 + h] * sv[slot * 8 + jj * 2 + e])
        elif TENSOR:
            x = x * scales[0]
        return epilogue_value(wl, x, bv[slot * 8 + jj * 2 + e] if EARLY_B else None,
                              rv[slot * 16 + (jj * 2 + h) * 2 + e] if EARLY_R else None)

    @T.macro
    def store(D_map, bias, R, scales, acc, boxes, tile_m, tile_n, row0, w, lane, i):
        area: T.let[T.uint32] = boxes + T.cast((w * 4 + lane // 32) * BOX_BUFFERS * BOX, "uint32")
        if EARLY_B:
            bv = T.alloc_buffer((16,), OUT, scope="local")
        else:
            bv = T.meta_var(None)
        if EARLY_R:
            rv = T.alloc_buffer((32,), OUT, scope="local")
        else:
            rv = T.meta_var(None)
        if ROWWISE:  # B's scales a box ahead; A's of the lane's 2 rows of each m64 subtile, once a tile
            sv = T.alloc_buffer((16,), "float32", scope="local")
            sa = T.alloc_buffer((2 * MT,), "float32", scope="local")
            for mt in T.unroll(MT):
                for h in T.unroll(2):
                    sa[mt * 2 + h] = scales[0][T.min(row_of(tile_m, row0, lane, mt * CHUNKS, h), M - 1), 0]
        else:
            sv = T.meta_var(None)
            sa = T.meta_var(None)
        if EARLY:
            fetch(bias, R, scales, bv, rv, sv, 0, 0, tile_m, tile_n, row0, lane)
        for q in T.unroll(PER_TILE):  # box q: m64 subtile q // CHUNKS, columns 32·(q % CHUNKS)..
            if EARLY:
                if q + 1 < PER_TILE:  # the next box's operands, in flight while this one is written
                    fetch(bias, R, scales, bv, rv, sv, (q + 1) % 2, q + 1, tile_m, tile_n, row0, lane)
            box: T.let[T.uint32] = area + T.cast((i * PER_TILE + q) % BOX_BUFFERS * BOX, "uint32")
            if lane % 32 == 0:  # the TMA unit has read this box's last store (the other one may run on)
                T.ptx["cp.async.bulk.wait_group.read"](BOX_BUFFERS - 1)
            T.cuda.warp_sync()
            for jj in T.unroll(4):
                for h in T.unroll(2):
                    x = T.meta_var(q // CHUNKS * NACC + (q % CHUNKS * 4 + jj) * 4 + h * 2)
                    T.evaluate(put(box + T.cast(((lane % 32 // 4 + h * 8) * BOX_COLS + jj * 8 + lane % 4 * 2) * ITEM,
                                                "uint32"),
                                   value(bv, rv, sv, sa, scales, acc[x], q % 2, q // CHUNKS, jj, h, 0),
                                   value(bv, rv, sv, sa, scales, acc[x + 1], q % 2, q // CHUNKS, jj, h, 1)))
            T.ptx["fence.proxy.async.shared::cta"]()  # the box's writes, visible to the TMA unit
            T.cuda.warp_sync()
            if lane % 32 == 0:
                T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](
                    T.address_of(D_map), col_of(tile_n, 0, q, 0), row_of(tile_m, row0, lane - lane % 32, q, 0), box)
                T.ptx["cp.async.bulk.commit_group"]()

    return store


@T.macro
def drain_stores(lane):
    """A consumer warp's last act: every TMA store it issued has been written."""
    if lane % 32 == 0:
        T.ptx["cp.async.bulk.wait_group"](0)
