"""gemm 27: tf32 (fp32 inputs) on the persistent, warp-specialized TMA structure, computed as
Cᵀ = Bᵀ·Aᵀ (tma_tf32_gemm): :class:`Tf32TmaConfig` and :func:`tf32_kernel`. The kernel runs the
warp-specialized ring of gemm 21-23 (tma_common.py: barrier set-up, producer loop, work-unit
decoding, the end of a unit); its own parts are the tf32 wgmma with the Bᵀ operand in registers,
its TMA loads and its transposed store.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div
from .errors import ScheduleParamError
from .registry import register
from .step_config import StepConfig
from .tma_common import (DESC_SWIZZLE_128B, ROW_BYTES, WARPGROUP, StreamUnits, WorkUnits, check_split_k,
                         check_stream_k, encode_map, grouped_tile, pad_copy_kernel, release_slot, ring_barriers,
                         ring_producer, ring_unit_done, sms_of, split_k_tiles, split_slices, split_sum_kernel,
                         split_workspace_bytes, stream_fixup_kernel, stream_k_grid, stream_pieces, stream_producer,
                         stream_store_piece, stream_unit_done, tma_launch, tma_load, transpose_kernel)
from .tma_fp16 import TmaConfig
from .workloads import LAYOUTS, Gemm


# ------------------------------------------------------------------------------------------------
# gemm 27: tf32 (fp32 inputs) as C^T = B^T · A^T
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tf32TmaConfig(StepConfig):
    """TF32 wgmma reads both shared-memory operands k-major only (no transpose immediates). A
    (M×K row-major) is k-major; B (K×N row-major) is not. So the kernel computes the transposed
    product C^T = B^T · A^T: the wgmma's A operand is B^T, taken from *registers* (the ``rs`` form,
    four ld.shared per thread and k8 step from an n-major TMA tile of B), and its B operand is A^T,
    i.e. the A tile exactly as TMA loads it (k-major, 128-byte swizzle). The wgmma's N is block_m
    (rows of C), its M is 64 columns of C per m64 subtile.

    ``block_m`` rows of C per tile (the wgmma's N: 64..256), ``block_n`` columns, split over
    ``consumers`` warpgroups (64 or 128 columns each); K tiles of 32 (one 128-byte row).
    ``tf32_round``: tensor maps of type CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 (TVM's runtime comment: TMA
    rounds fp32 to tf32 to nearest on load, as cuBLAS rounds; unverified); False: plain FLOAT32 maps,
    the MMA truncates. ``split_k`` and ``stream_k`` as :class:`schedules.tma_fp16.TmaConfig`'s."""

    block_m: int = 256
    block_n: int = 128
    block_k: int = 32
    stages: int = 4
    consumers: int = 2
    persistent: bool = True
    group_m: int = 8
    sms: int = 0
    producer_regs: int = 40
    tf32_round: bool = True
    l2_promotion: int = 2
    pad_operands: bool = False  # rows not a multiple of 16 bytes: copy A / B into padded workspaces first
    pad_pitch: int = 16  # the padded copies' row pitch in bytes, as TmaConfig.pad_pitch
    split_k: int = 1  # K slices, as TmaConfig.split_k
    stream_k: bool = False  # K tiles shared out evenly over the blocks, as TmaConfig.stream_k
    warp_specialized = True
    cluster_m = 1
    dtypes = ("float32",)
    layouts = LAYOUTS  # B stored N×K: k-major tiles; A stored K×M: transposed into a workspace first
    step_name = "tma_tf32_gemm"
    archs = ("sm_90a",)  # wgmma, setmaxnreg: Hopper's alone (Blackwell has tcgen05 instead)
    arch_features = "wgmma, TMA, setmaxnreg"
    zero_means_auto = ("sms", "consumer_regs")
    tolerance = 2e-3  # tf32 keeps 10 of fp32's 23 mantissa bits

    @property
    def wg_cols(self) -> int:
        return self.block_n // self.consumers

    @property
    def m_subtiles(self) -> int:
        return self.wg_cols // 64

    @property
    def acc_regs(self) -> int:
        return self.m_subtiles * self.block_m // 2

    @property
    def frag_regs(self) -> int:  # two sets (K tiles alternate) of 4 k8 steps x 4 registers per subtile
        return 2 * (self.block_k // 8) * 4 * self.m_subtiles

    threads = TmaConfig.threads
    launch_regs = TmaConfig.launch_regs
    consumer_budget = TmaConfig.consumer_budget
    consumer_regs = 0

    def stage_bytes(self, itemsize: int = 4) -> int:
        return (self.block_m + self.block_n) * self.block_k * 4

    def shared_bytes(self, itemsize: int = 4) -> int:
        return self.stages * self.stage_bytes() + 1024

    def tiles(self, M: int, N: int):
        return ceil_div(M, self.block_m), ceil_div(N, self.block_n)

    def grid(self, M: int, N: int, K: int | None = None, batch: int = 1) -> int:
        tm, tn = self.tiles(M, N)
        if self.stream_k:
            if K is None:
                raise ValueError(f"{self.step_name}: the grid of stream_k depends on K: grid(M, N, K)")
            return stream_k_grid(tm * tn, ceil_div(K, self.block_k), sms_of(self))
        units = tm * tn * split_slices(self, K) * batch
        return min(sms_of(self), units) if self.persistent else units

    def k_split(self, K: int) -> tuple[int, int]:
        """(K tiles per work unit, K slices used), as :meth:`TmaConfig.k_split` (K tiles of 32)."""
        return split_k_tiles(self, K)

    def workspace_bytes(self, wl: Gemm) -> int:
        """Bytes of the fp32 partial products (0 without split-K), as :meth:`TmaConfig.workspace_bytes`."""
        if self.stream_k:
            return 4 * stream_pieces(self, wl) * self.block_m * self.block_n
        return split_workspace_bytes(self, wl)

    def check(self, wl: Gemm):
        M, N, K, dtype = wl.M, wl.N, wl.K, wl.dtype
        name = self.step_name
        if dtype != "float32":
            raise ScheduleParamError(f"{name} takes float32 inputs, not {dtype}")
        TmaConfig.check_pad_pitch(self)
        # a tensor map's row pitch must be a multiple of 16 bytes (A stored K×M is transposed into a
        # padded workspace in any case)
        for what, dim, pitch, copied in (("A", "K", K, wl.trans_a),
                                         ("B", *(("K", K) if wl.trans_b else ("N", N)), False)):
            if pitch * 4 % 16 and not (self.pad_operands or copied):
                raise ScheduleParamError(
                    f"{name}: the row pitch of {what} ({dim}) is {pitch * 4} bytes; TMA needs a multiple of 16 "
                    f"({dim} must be a multiple of 4 for float32; pad_operands=true copies the operand into a "
                    f"padded buffer first), got M,N,K = {M},{N},{K}, layout {wl.layout}")
        if self.block_k != 32:
            raise ScheduleParamError(f"{name}: block_k must be 32 (one 128-byte row of fp32)")
        if self.block_m % 64 or not 64 <= self.block_m <= 256:
            raise ScheduleParamError(f"{name}: block_m (the wgmma's N) must be 64, 128, 192 or 256, "
                                     f"got {self.block_m}")
        if self.consumers not in (2, 3) or self.block_n % self.consumers or self.m_subtiles not in (1, 2) \
                or self.wg_cols % 64:
            raise ScheduleParamError(f"{name}: block_n ({self.block_n}) must give each of 2 or 3 consumer "
                                     f"warpgroups 64 or 128 columns (consumers={self.consumers})")
        c, r, p = self.consumer_budget, self.launch_regs, self.producer_regs
        if self.acc_regs + self.frag_regs > c - 40:
            raise ScheduleParamError(f"{name}: {self.acc_regs} accumulators + {self.frag_regs} fragment "
                                     f"registers leave too few of the {c} a consumer gets")
        if p % 8 or c % 8 or not 24 <= p <= r <= c <= 256 or self.consumers * (c - r) > r - p:
            raise ScheduleParamError(f"{name}: setmaxnreg budgets do not hold: producer {p}, consumer {c}")
        if self.stages < 2 or self.shared_bytes() > 227 * 1024:
            raise ScheduleParamError(f"{name}: {self.stages} stages need {self.shared_bytes()} bytes of "
                                     f"shared memory (2 ≤ stages, ≤ 227 KiB)")
        check_split_k(self, wl)
        check_stream_k(self, wl, ceil_div(M, self.block_m) * ceil_div(N, self.block_n))

    def copied(self, wl: Gemm) -> tuple[bool, bool]:
        """(A, B): whether a copy kernel runs first: A stored K×M is always transposed into an M×K
        workspace (tf32 wgmma reads its shared-memory operand k-major only); otherwise as
        :meth:`TmaConfig.copied` (``pad_operands`` and rows that are not whole 16 bytes)."""
        pad_a, pad_b = TmaConfig.copied(self, wl)
        return pad_a or wl.trans_a, pad_b

    @property
    def pass_config(self) -> dict:
        """As :attr:`TmaConfig.pass_config`: split-K partials beside a copied operand (padded, or A
        transposed, which the configuration alone cannot tell) must not share its memory."""
        return {"tirx.disable_storage_rewrite": True} if self.split_k > 1 or self.stream_k else {}

    def describe(self) -> str:
        return (f"tf32 {self.block_m}x{self.block_n}x{self.block_k} s{self.stages} ws {self.consumers}c"
                f"{' pers' if self.persistent else ''}{'' if self.tf32_round else ' trunc'}"
                f"{f' sk{self.split_k}' if self.split_k > 1 else ''}{' streamk' if self.stream_k else ''}")


def tf32_kernel(wl: Gemm, cfg: Tf32TmaConfig):
    M, N, K = wl.M, wl.N, wl.K
    BM, BN, BK, S, NC = cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.consumers
    MT = cfg.m_subtiles
    WGC = cfg.wg_cols
    KT = ceil_div(K, BK)
    TM, TN = cfg.tiles(M, N)
    TILES = TM * TN
    GRID = cfg.grid(M, N, K)
    # split-K: units (tile, K slice), slice-major (unit = slice·TILES + tile), KTS K tiles each
    KTS, SPLIT = cfg.k_split(K)
    STREAM = cfg.stream_k  # stream-K units (tma_common.StreamUnits), as in ws_kernel
    if STREAM:
        units = StreamUnits(TILES, GRID, KT, lambda t, rank: grouped_tile(t, cfg.group_m, TM, TN))
        PAD = False
    else:
        units = WorkUnits(TILES, GRID, KT, KTS, SPLIT, 0, lambda t, rank: grouped_tile(t, cfg.group_m, TM, TN))
        PAD = units.PAD  # the last slice's last K tiles lie past K: not loaded, not multiplied
    if SPLIT > 1:
        split_sum, _ = split_sum_kernel(M, N, SPLIT)
    # layouts: A stored K×M (tn, tt) is transposed into an M×K workspace first (the wgmma reads
    # it k-major from shared memory, and tf32 has no transpose bit); B stored N×K (nt, tt) is
    # loaded k-major and its register fragments read from that layout (frag_word)
    TA, TB = wl.trans_a, wl.trans_b
    (b_rows, b_cols) = wl.b_shape
    COPY_A, PAD_B = cfg.copied(wl)  # A: transposed (tn, tt) or padded
    if TA:
        copy_a, KP = transpose_kernel(K, M, 4, "float32")
    else:
        copy_a, KP = pad_copy_kernel(M, K, 4, "float32", cfg.pad_pitch) if COPY_A else (None, K)
    pad_b, BP = pad_copy_kernel(b_rows, b_cols, 4, "float32", cfg.pad_pitch) if PAD_B else (None, b_cols)
    A_BYTES = BM * ROW_BYTES  # the A tile: BM rows of 32 fp32
    PANEL_BYTES = BK * ROW_BYTES  # one 32-column panel of B: 32 K rows of 128 bytes
    PANELS = BN // 32
    STAGE_BYTES = cfg.stage_bytes()
    RING_BYTES = S * STAGE_BYTES
    NACC = BM // 2  # accumulators of one m64 subtile (64 columns of C x BM rows)
    ACC = cfg.acc_regs
    KSTEPS = BK // 8
    FRAG = KSTEPS * 4 * MT  # fragment registers of one K tile
    SBO = 8 * ROW_BYTES // 16
    DT_CU = 11 if cfg.tf32_round else -1  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
    mma = T.ptx[f"wgmma.mma_async.sync.aligned.m64n{BM}k8.f32.tf32.tf32"]
    L2 = cfg.l2_promotion
    SKIP_PANELS = N % BN != 0 and ceil_div(N % BN, 32) < PANELS
    ROW_CHECK, COL_CHECK = M % BM != 0, N % BN != 0

    def desc_b(addr_u32):  # the A tile as wgmma's k-major B operand: LBO unused, SBO 1024 bytes
        const = (1 << 16) | (SBO << 32) | (DESC_SWIZZLE_128B << 62)
        return T.bitwise_or(T.cast(T.shift_right(addr_u32, T.uint32(4)) & T.uint32(0x3FFF), "uint64"),
                            T.uint64(const))

    def frag_word(slot_base_w, col, k):
        """uint32 index (from the ring start) of B[k0 + k, n0 + col] in a slot: panel col // 32,
        n-major (B stored K×N): row k of 128 bytes, 16-byte chunk (col % 32) // 4 stored at
        chunk ^ (k % 8); k-major (B stored N×K): row col % 32, chunk k // 4 at chunk ^ (col % 8)."""
        if TB:
            return (slot_base_w + (A_BYTES + col // 32 * PANEL_BYTES + col % 32 * ROW_BYTES) // 4
                    + T.bitwise_xor(k // 4, col % 8) * 4 + k % 4)
        return (slot_base_w + (A_BYTES + col // 32 * PANEL_BYTES + k * ROW_BYTES) // 4
                + T.bitwise_xor(col % 32 // 4, k % 8) * 4 + col % 4)

    def panel_bytes(tile_n):
        """Bytes of this tile's B panels that lie (at least partly) inside B: a sum of non-negative
        terms, so no analysis of tile indices that no block reaches can make it negative (a
        ``min(ceil((N - tile_n·BN) / 32), PANELS)`` form once did, and a uint32 cannot be negative)."""
        if not SKIP_PANELS:
            return PANELS * PANEL_BYTES
        return sum(T.if_then_else(tile_n * BN + p * 32 < N, PANEL_BYTES, 0) for p in range(PANELS))

    @T.macro
    def consume(acc, frag, smem_w, ring_w, ring, bars, it, kt, w, lane, fs):
        # one K tile: wait for it, load this warpgroup's B^T fragments (set fs), 4 x MT wgmmas
        T.cuda.mbarrier_wait(T.address_of(bars[it % S]), it // S % 2)
        for kk in T.unroll(KSTEPS):
            for mt in T.unroll(MT):
                for q in T.unroll(2):
                    for h in T.unroll(2):
                        # wgmma A fragment (tf32): a[h + 2q] = A'[16*warp + lane/4 + 8h, lane%4 + 4q]
                        frag[fs * FRAG + (kk * MT + mt) * 4 + q * 2 + h] = smem_w[frag_word(
                            ring_w + it % S * (STAGE_BYTES // 4),
                            w * WGC + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8,
                            kk * 8 + lane % 4 + q * 4)]
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(KSTEPS):
            for mt in T.unroll(MT):
                mma(*[acc[mt * NACC + j] for j in range(NACC)],
                    *[frag[fs * FRAG + (kk * MT + mt) * 4 + r] for r in range(4)],
                    desc_b(ring + T.truncmod(T.cast(it, "uint32"), T.uint32(S)) * T.uint32(STAGE_BYTES)
                           + T.uint32(kk * 32)),
                    T.Or(kt > 0, kk > 0), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()
        # K tile kt-1's wgmmas (and its fragment set, fs ^ 1) are done: free its slot
        T.ptx.wgmma.wait_group.sync.aligned(1)
        if T.And(kt > 0, lane == 0):
            release_slot(bars, S + (it - 1) % S, 1)

    @T.macro
    def load(A_map, B_map, ring, full_u32, slot, kt, tile_m, tile_n, rank, b):
        # one K tile into ring slot ``slot``: the A tile and the B panels inside N, their bytes
        # announced on the slot's full barrier (``rank``, ``b``: no clusters, no batch here)
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(
            full_u32, T.cast(A_BYTES + panel_bytes(tile_n), "uint32"))
        tma_load(A_map, ring + T.cast(slot * STAGE_BYTES, "uint32"), full_u32, kt * BK, tile_m * BM)
        for p in T.unroll(PANELS):
            if (tile_n * BN + p * 32 < N) if SKIP_PANELS else True:
                tma_load(B_map, ring + T.cast(slot * STAGE_BYTES + A_BYTES + p * PANEL_BYTES, "uint32"),
                          full_u32, *((kt * BK, tile_n * BN + p * 32) if TB else (tile_n * BN + p * 32, kt * BK)))

    # the ring of gemm 21-23 (no clusters): NC consumer warpgroups release each slot
    init_ring = ring_barriers(S, NC)
    if STREAM:
        produce = stream_producer(units, S, cfg.producer_regs, load, full_let=True)
        unit_done = stream_unit_done(S, 1, ACC)
    else:
        produce = ring_producer(units, S, cfg.producer_regs, load, full_let=True)
        unit_done = ring_unit_done(units, S, 1, ACC)

    @T.macro
    def store_c(C, acc, tile_m, tile_n, w, lane):
        # D = C^T: accumulator (row r, col c) of subtile mt is C[tile_m*BM + c, n0 + r]
        for mt in T.unroll(MT):
            for j in T.unroll(BM // 8):
                for h in T.unroll(2):
                    for e in T.unroll(2):
                        row = T.meta_var(tile_m * BM + j * 8 + lane % 4 * 2 + e)
                        col = T.meta_var(tile_n * BN + w * WGC + mt * 64 + lane // 32 * 16 + lane % 32 // 4 + h * 8)
                        if T.And(row < M if ROW_CHECK else True, col < N if COL_CHECK else True):
                            C[row, col] = acc[mt * NACC + j * 4 + h * 2 + e]

    if STREAM:
        store_piece = stream_store_piece(ACC, NC * WARPGROUP)

        QN = BM // 8  # register groups of one m64 subtile

        @T.macro
        def store_group(C, bias, R, v, i, tile_m, tile_n, thread, q):  # no epilogue here: bias and R are None
            # accumulators 4q..4q+3 of the thread: subtile q // QN, 8-row group q % QN of C (= D^T)
            for h in T.unroll(2):
                for e in T.unroll(2):
                    row = T.meta_var(tile_m * BM + q % QN * 8 + thread % WARPGROUP % 4 * 2 + e)
                    col = T.meta_var(tile_n * BN + thread // WARPGROUP * WGC + q // QN * 64
                                     + thread % WARPGROUP // 32 * 16 + thread % 32 // 4 + h * 8)
                    if T.And(row < M if ROW_CHECK else True, col < N if COL_CHECK else True):
                        C[row, col] = v[i + h * 2 + e]

        fixup, _ = stream_fixup_kernel(units, 1, NC * WARPGROUP, ACC, store_group)

    @T.prim_func
    def main(A: T.Buffer(wl.a_shape, "float32"), B: T.Buffer(wl.b_shape, "float32"),
             C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        if COPY_A:  # A as M×K with a 16-byte pitch: transposed (tn, tt) or padded (pad_operands)
            A_pad = T.alloc_buffer((M, KP), "float32", scope="global")
            copy_a(A, A_pad)
        if PAD_B:
            B_pad = T.alloc_buffer((b_rows, BP), "float32", scope="global")
            pad_b(B, B_pad)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.evaluate(encode_map(A_map, (A_pad if COPY_A else A).data, (KP, M), (BK, BM), 4, "float32", L2,
                               force_cu_dtype=DT_CU))
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.evaluate(encode_map(B_map, (B_pad if PAD_B else B).data, (BP, b_rows), (BK, 32) if TB else (32, BK), 4,
                               "float32", L2, force_cu_dtype=DT_CU))
        if SPLIT > 1:
            # the partial products (workspace from the device's pool, see ws_kernel)
            P = T.alloc_buffer((SPLIT, M, N), "float32", scope="global")
        if STREAM:  # the pieces of split tiles (see ws_kernel)
            W = T.alloc_buffer((units.PIECES * BM * BN,), "float32", scope="global")
        with T.launch_thread("blockIdx.x", GRID) as bid:
            tid = T.launch_thread("threadIdx.x", cfg.threads)
            T.attr(0, "tirx.max_registers", cfg.launch_regs)
            # one uint32 buffer (the fragment loads index it): a uint8 buffer with a uint32 decl_buffer
            # view makes the default pipeline declare the storage as uint with the uint8 element count,
            # i.e. request 4x the dynamic shared memory at launch
            smem_w = T.alloc_buffer(((RING_BYTES + 1024) // 4,), "uint32", scope="shared.dyn")
            bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)
            acc = T.alloc_buffer((ACC,), "float32", scope="local")
            frag = T.alloc_buffer((2 * FRAG,), "uint32", scope="local")
            base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(smem_w.data)
            ring: T.let[T.uint32] = T.bitwise_and(base + T.uint32(1023), T.uint32(0xFFFFFC00))
            ring_w: T.let[T.int32] = T.cast(ring - base, "int32") // 4  # the ring in smem_w elements
            wg = T.meta_var(tid // WARPGROUP)
            lane = T.meta_var(tid % WARPGROUP)
            if STREAM:
                sk_begin: T.let[T.int32] = units.begin(bid)
                sk_end: T.let[T.int32] = units.end(bid)
                n_sk: T.let[T.int32] = units.sk_units(sk_begin, sk_end)
                n_tiles: T.let[T.int32] = units.count(n_sk)
            else:
                n_tiles: T.let[T.int32] = units.count(bid)
            init_ring(bars, tid)
            if wg == 0:
                if STREAM:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, bid, 0, sk_begin, sk_end, n_sk)
                else:
                    produce(A_map, B_map, ring, bars, lane, n_tiles, bid, 0)
            elif STREAM:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):
                    t: T.let[T.int32] = units.tile(bid, sk_begin, n_sk, i)
                    n_k: T.let[T.int32] = units.k_count(sk_begin, sk_end, n_sk, i, t)
                    pos: T.let[T.int32] = units.position(sk_begin, sk_end, n_sk, i, t)
                    for kt2 in T.serial(n_k // 2):  # fragment sets alternate, as below
                        consume(acc, frag, smem_w, ring_w, ring, bars, pos + kt2 * 2, kt2 * 2, w, lane, 0)
                        consume(acc, frag, smem_w, ring_w, ring, bars, pos + kt2 * 2 + 1, kt2 * 2 + 1, w, lane, 1)
                    if n_k % 2 == 1:
                        consume(acc, frag, smem_w, ring_w, ring, bars, pos + n_k - 1, n_k - 1, w, lane, 0)
                    unit_done(acc, bars, pos + n_k - 1, lane)
                    tm_, tn_ = T.meta_var(units.tile_of(t, 0))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    if n_k == KT:
                        store_c(C, acc, tile_m, tile_n, w, lane)
                    else:
                        store_piece(W, acc, units.piece(bid, i), w * WARPGROUP + lane)
            else:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](cfg.consumer_budget)
                w = T.meta_var(wg - 1)
                for i in T.serial(n_tiles):
                    if SPLIT > 1:
                        part: T.let[T.int32] = units.outer(bid, i, SPLIT)  # the unit's K slice
                    if PAD:
                        n_k: T.let[T.int32] = units.k_tiles(part)  # K tiles inside K
                    else:
                        n_k = T.meta_var(KTS)
                    # K tiles in pairs: fragment set 0 for even, 1 for odd (the set a K tile's wgmmas
                    # read must not be overwritten while they run: one K tile stays in flight)
                    for kt2 in T.serial(n_k // 2):
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + kt2 * 2, kt2 * 2, w, lane, 0)
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + kt2 * 2 + 1, kt2 * 2 + 1, w, lane, 1)
                    if PAD:
                        if n_k % 2 == 1:
                            consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + n_k - 1, n_k - 1, w, lane, 0)
                    elif KTS % 2 == 1:
                        consume(acc, frag, smem_w, ring_w, ring, bars, i * KTS + KTS - 1, KTS - 1, w, lane, 0)
                    unit_done(acc, bars, i, n_k, lane)
                    tm_, tn_ = T.meta_var(units.tile(bid, i))
                    tile_m: T.let[T.int32] = tm_
                    tile_n: T.let[T.int32] = tn_
                    # D = C^T: accumulator (row r, col c) of subtile mt is C[tile_m*BM + c, n0 + r]
                    for mt in T.unroll(MT):
                        for j in T.unroll(BM // 8):
                            for h in T.unroll(2):
                                for e in T.unroll(2):
                                    row = T.meta_var(tile_m * BM + j * 8 + lane % 4 * 2 + e)
                                    col = T.meta_var(tile_n * BN + w * WGC + mt * 64 + lane // 32 * 16 + lane % 32 // 4
                                                     + h * 8)
                                    if T.And(row < M if ROW_CHECK else True, col < N if COL_CHECK else True):
                                        if SPLIT > 1:
                                            P[part, row, col] = acc[mt * NACC + j * 4 + h * 2 + e]
                                        else:
                                            C[row, col] = acc[mt * NACC + j * 4 + h * 2 + e]
        if SPLIT > 1:
            split_sum(P, C)
        if STREAM:
            fixup(W, C, None, None)

    return main


# ------------------------------------------------------------------------------------------------
# gemm 27, the registered step
# ------------------------------------------------------------------------------------------------
Tf32TmaConfig.launch = tma_launch


@register("tma_tf32_gemm", "gemm", Tf32TmaConfig, aliases=("tf32_tma",), tags=("tf32",))
def tma_tf32_gemm(wl: Gemm, cfg: Tf32TmaConfig = Tf32TmaConfig()):
    """TF32 on the persistent, warp-specialized structure: fp32 inputs read as tf32, computed as
    Cᵀ = Bᵀ·Aᵀ so that no operand has to be transposed on its way in.

    tf32 wgmma reads shared-memory operands k-major only; B (K×N, row-major) is n-major, which is
    why wgmma_tf32_gemm copied it element by element. Transposed, the product's shared-memory
    operand is Aᵀ, i.e. the A tile exactly as TMA loads it, and the other operand, Bᵀ, comes from
    registers (wgmma's register-A form), each thread reading its fragment from an n-major TMA tile
    of B with four 32-bit shared loads per k8 step. The tensor maps round fp32 to tf32 on load
    (``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``). The accumulators hold Cᵀ and are stored transposed.
    """
    cfg.check(wl)
    return s_tir.Schedule(tf32_kernel(wl, cfg))
