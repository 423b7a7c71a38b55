"""The TMA store of the persistent 16-bit kernel (``tma_store=true`` on persistent_gemm): each consumer warp
writes its accumulators, through the epilogue and rounded to the output type, into a box of shared memory
(its 16 rows × 32 columns of the tile, dense row-major, the TMA box of D's tensor map), and one lane hands the
box to the TMA unit (``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group``), which writes it to D while
the warp goes on: with the next box, then the next tile's wgmmas.

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
"""

from __future__ import annotations

from tvm.script import tirx as T

from .workloads import Gemm, epilogue_value, itemsize

BOX_ROWS, BOX_COLS = 16, 32  # one consumer warp's rows of an m64 subtile, by 32 columns
BOX_BUFFERS = 2  # boxes per warp, used in turn
MOST_BYTES = 4  # the widest output (fp32): the boxes reserved whatever D's type, so the ring's check is the type's


def tma_store_bytes(cfg) -> int:
    """Shared memory of ``tma_store``: BOX_BUFFERS boxes per consumer warp (0 without it)."""
    if not getattr(cfg, "tma_store", False):
        return 0
    return cfg.consumers * 4 * BOX_BUFFERS * BOX_ROWS * BOX_COLS * MOST_BYTES


def tma_store_refusal(cfg, wl: Gemm) -> str | None:
    """Why ``tma_store`` cannot serve ``wl`` with ``cfg`` (None where it can)."""
    item = itemsize(wl.out_dtype)
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


def make_tma_store(g, wl: Gemm):
    """A macro ``store(D_map, bias, R, acc, boxes, tile_m, tile_n, row0, w, lane, i)``: consumer warp
    ``lane // 32`` of warpgroup ``w`` (rows ``row0``.. of the tile) stores its accumulators of the
    block's ``i``-th tile through its boxes (shared address ``boxes``) and D's tensor map; the
    epilogue (bias and R read at the outputs, clamped inside D) on the accumulators in the fragment
    layout. ``g``: the kernel's schedules.tma_fp16.Geometry."""
    M, N, NACC = g.M, g.N, g.NACC
    MT, CHUNKS = g.cfg.m_subtiles, g.BN // BOX_COLS
    OUT = wl.out_dtype
    ITEM = itemsize(OUT)
    BOX = BOX_ROWS * BOX_COLS * ITEM
    PER_TILE = MT * CHUNKS  # boxes a warp stores per tile
    FUSED, BIAS, RES = wl.has_epilogue, wl.bias, wl.residual

    def value(bias, R, x, row, col):
        if not FUSED:
            return x
        return epilogue_value(wl, x, bias[T.min(col, N - 1)] if BIAS else None,
                              R[T.min(row, M - 1), T.min(col, N - 1)] if RES else None)

    def put(addr, a, b):  # two adjacent outputs of one row into the box
        if ITEM == 4:
            return T.ptx.st.shared.v2.f32(addr, a, b)
        return T.ptx.st.shared.v2.b16(addr, T.reinterpret("uint16", a), T.reinterpret("uint16", b))

    @T.macro
    def store(D_map, bias, R, acc, boxes, tile_m, tile_n, row0, w, lane, i):
        area: T.let[T.uint32] = boxes + T.cast((w * 4 + lane // 32) * BOX_BUFFERS * BOX, "uint32")
        for mt in T.unroll(MT):
            for c in T.unroll(CHUNKS):
                box: T.let[T.uint32] = area + T.cast((i * PER_TILE + mt * CHUNKS + c) % BOX_BUFFERS * BOX, "uint32")
                if lane % 32 == 0:  # the TMA unit has read this box's last store (the other one may run on)
                    T.ptx["cp.async.bulk.wait_group.read"](BOX_BUFFERS - 1)
                T.cuda.warp_sync()
                for jj in T.unroll(4):
                    for h in T.unroll(2):
                        r = T.meta_var(lane % 32 // 4 + h * 8)
                        cc = T.meta_var(jj * 8 + lane % 4 * 2)
                        row = T.meta_var(tile_m * g.BM + row0 + mt * 64 + lane // 32 * 16 + r)
                        col = T.meta_var(tile_n * g.BN + c * BOX_COLS + cc)
                        x = T.meta_var(mt * NACC + (c * 4 + jj) * 4 + h * 2)
                        T.evaluate(put(box + T.cast((r * BOX_COLS + cc) * ITEM, "uint32"),
                                       value(bias, R, acc[x], row, col), value(bias, R, acc[x + 1], row, col + 1)))
                T.ptx["fence.proxy.async.shared::cta"]()  # the box's writes, visible to the TMA unit
                T.cuda.warp_sync()
                if lane % 32 == 0:
                    T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"](
                        T.address_of(D_map), tile_n * g.BN + c * BOX_COLS,
                        tile_m * g.BM + row0 + mt * 64 + lane // 32 * 16, box)
                    T.ptx["cp.async.bulk.commit_group"]()

    return store


@T.macro
def drain_stores(lane):
    """A consumer warp's last act: every TMA store it issued has been written."""
    if lane % 32 == 0:
        T.ptx["cp.async.bulk.wait_group"](0)
