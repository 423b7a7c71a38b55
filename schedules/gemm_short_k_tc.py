"""gemm 36: short-K 16-bit products on the tensor cores, in one pass (short_k_tc_gemm).

A product with K ≤ 64 and a large output is storing C: 2·K flops per output against 4 bytes of it
(fp32). For 16-bit inputs the lab had two ways, both slower than cuBLAS by a third on such products
when C's rows are not whole 32-byte sectors (6113 × 8145 × 27: 133 µs against cuBLAS's 87):

* short_k_gemm (gemm 34) widens the inputs to fp32 and spends an FMA per output per k: at K = 27
  the FMAs of a 4 × 4 thread tile, not the stores, set its time;
* the TMA kernels (gemm 20-23) pad K to their 64-wide K tile, copy A and B into padded buffers
  where the rows are not 16-byte multiples, and store C from two consumer warpgroups one 128-row
  tile at a time: the SM's store path idles while they compute.

This kernel takes the whole K in one pass. A block of 8 warps loads its A rows and B columns once,
element by element (2-byte loads, any row pitch, any layout, zero past the edges and past K up
to a multiple of 16), into shared memory as pairs along K; each warp runs ``mma.sync.m16n8k16``
over its 16-row × 8-column fragments (K / 16 instructions per fragment, fp32 accumulators); the
accumulators are staged in shared memory and leave by rows, a warp's store 32 consecutive outputs
of one row, through the workload's epilogue (bias, activation, residual, scaling, a 16-bit
output). No K loop, no ring, no barrier but the two around the staging: small blocks (about 40 KB
of shared memory at 64 × 128) keep several resident per SM, so one block's stores overlap
another's loads and mmas.

A raw CUDA prototype of this structure (WMMA, the same tiles) ran fp16 products with K of 12-32 at
0.84-0.93 of cuBLAS where the lab's choices ran at 0.64-0.68
(reports/results/NVIDIA_H200/store_skew/). Written as a TIR kernel (TVMScript, ``T.ptx_legacy.mma``)
as decode_gemm is: TVM 0.27's tensorization reaches mma operands only through ldmatrix into "warp"
buffers and registers no bf16 mma intrinsic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm import s_tir
from tvm.script import tirx as T

from .common import ceil_div
from .errors import ScheduleParamError
from .gemm_decode import masked_half, pack_halves
from .registry import Launch, register
from .step_config import StepConfig
from .wgmma_epilogue import kernel_entry
from .workloads import LAYOUTS, Gemm, epilogue_value

PTX_TYPE = {"float16": "fp16", "bfloat16": "bf16"}
PAIR_PAD = 4  # words of padding per shared row of pairs: the fragments' reads fall in distinct banks


@dataclass(frozen=True)
class ShortKTcConfig(StepConfig):
    """A ``block_m × block_n`` tile of C per block of ``warps_m × warps_n`` warps; a warp owns
    (block_m / warps_m) × (block_n / warps_n) outputs, as m16 × n8 mma fragments."""

    dtypes = ("float16", "bfloat16")
    layouts = LAYOUTS   # A and B read element by element where they are stored
    epilogues = True    # in the write-back from the staged tile
    min_arch = "sm_80"  # mma.sync m16n8k16 with bf16 inputs
    arch_features = "mma.sync m16n8k16"
    max_k: ClassVar[int] = 64  # the whole K in shared memory and in one pass of mmas

    block_m: int = 64
    block_n: int = 128
    warps_m: int = 4
    warps_n: int = 2

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def frags_m(self) -> int:
        return self.block_m // self.warps_m // 16

    @property
    def frags_n(self) -> int:
        return self.block_n // self.warps_n // 8

    @staticmethod
    def k_padded(wl) -> int:
        """K rounded up to the mma's 16 (zeros past K)."""
        return ceil_div(wl.K, 16) * 16

    def shared_words(self, wl) -> int:
        """4-byte words of shared memory: A's rows and B's columns as pairs along K, or the staged
        fp32 tile (block_m × (block_n + 4)), whichever is larger (the staging reuses the operands')."""
        pairs = (self.block_m + self.block_n) * (self.k_padded(wl) // 2 + PAIR_PAD)
        return max(pairs, self.block_m * (self.block_n + 4))

    @classmethod
    def scope_refusal(cls, wl) -> str | None:
        if getattr(wl, "K", 0) > cls.max_k:
            return f"short_k_tc_gemm takes the whole K in one pass: K ≤ {cls.max_k}, not {wl.K}"
        if getattr(wl, "batched", False):
            return f"short_k_tc_gemm takes one product, not a batch: {wl}"
        return None

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"short_k_tc_gemm takes float16 or bfloat16 inputs, not {wl.dtype}")
        refusal = self.scope_refusal(wl)
        if refusal:
            raise ScheduleParamError(refusal)
        if self.block_m % (16 * self.warps_m) or self.block_n % (8 * self.warps_n):
            raise ScheduleParamError(f"short_k_tc_gemm: block_m={self.block_m} must be a multiple of 16 × warps_m="
                                     f"{self.warps_m} and block_n={self.block_n} of 8 × warps_n={self.warps_n}")
        if self.block_n % 32:
            raise ScheduleParamError(f"short_k_tc_gemm: block_n={self.block_n} must be a multiple of 32 (a warp "
                                     "stores 32 consecutive outputs of a row)")

    def launch(self, wl: Gemm) -> Launch:
        return Launch(grid=(ceil_div(wl.N, self.block_n), ceil_div(wl.M, self.block_m), 1),
                      block=(32, self.warps, 1), shared_bytes=4 * self.shared_words(wl), dynamic_shared=True,
                      threads_from="32 × warps_m × warps_n",
                      shared_from="(block_m + block_n) × K pairs, or the staged block_m × block_n tile")


def short_k_tc_kernel(wl: Gemm, cfg: ShortKTcConfig):
    """The PrimFunc (:func:`~schedules.wgmma_epilogue.kernel_entry`'s arguments)."""
    M, N, K = wl.M, wl.N, wl.K
    BM, BN, WM_, WN_ = cfg.block_m, cfg.block_n, cfg.warps_m, cfg.warps_n
    WARPS, THREADS = cfg.warps, 32 * cfg.warps
    MT, NT = cfg.frags_m, cfg.frags_n
    KP = cfg.k_padded(wl)
    KW = KP // 2                      # pairs along K
    RW = KW + PAIR_PAD                # words per shared row of pairs
    B_BASE = BM * RW                  # B's columns after A's rows
    CW = BN + 4                       # words per staged row
    WORDS = cfg.shared_words(wl)
    A_ROUNDS, B_ROUNDS = ceil_div(BM * KW, THREADS), ceil_div(BN * KW, THREADS)
    TA, TB = wl.trans_a, wl.trans_b
    PT = PTX_TYPE[wl.dtype]
    EPI, BIAS, RES = wl.has_epilogue, wl.bias, wl.residual
    ACC = MT * NT * 4

    def a_bits(A, m, k):
        """op(A)[m, k]'s bits, 0 outside (:func:`~schedules.gemm_decode.masked_half`)."""
        ok = T.And(m < M, k < K)
        return masked_half(A, k, m, ok, K, M) if TA else masked_half(A, m, k, ok, M, K)

    def b_bits(B, k, n):
        ok = T.And(k < K, n < N)
        return masked_half(B, n, k, ok, N, K) if TB else masked_half(B, k, n, ok, K, N)

    @T.macro
    def load(S, A, B, row0, col0, tid):
        """A's block_m rows and B's block_n columns into shared memory as pairs along K; the lanes
        of a warp walk along the stored rows (K for A stored M × K, M for A stored K × M; N for B
        stored K × N, K for B stored N × K)."""
        for i in T.unroll(A_ROUNDS):
            e: T.let[T.int32] = i * THREADS + tid
            if e < BM * KW:
                r: T.let[T.int32] = e % BM if TA else e // KW
                w: T.let[T.int32] = e // BM if TA else e % KW
                S[r * RW + w] = pack_halves(a_bits(A, row0 + r, 2 * w), a_bits(A, row0 + r, 2 * w + 1))
        for i in T.unroll(B_ROUNDS):
            e: T.let[T.int32] = i * THREADS + tid
            if e < BN * KW:
                c: T.let[T.int32] = e // KW if TB else e % BN
                w: T.let[T.int32] = e % KW if TB else e // BN
                S[B_BASE + c * RW + w] = pack_halves(b_bits(B, 2 * w, col0 + c), b_bits(B, 2 * w + 1, col0 + c))

    @T.macro
    def compute(S, acc, af, bf, wr, wc, lane):
        """Per 16 of K: each m16 fragment's A words (rows g and g + 8, pairs c and c + 4) and each n8
        fragment's B words (column g, pairs c and c + 4), then the warp's MT × NT mmas."""
        for kk in T.unroll(KP // 16):
            for i in T.unroll(MT):
                for h in T.unroll(2):
                    for v in T.unroll(2):
                        af[i * 4 + 2 * h + v] = S[(wr + i * 16 + lane // 4 + 8 * v) * RW + kk * 8 + 4 * h + lane % 4]
            for j in T.unroll(NT):
                for h in T.unroll(2):
                    bf[j * 2 + h] = S[B_BASE + (wc + j * 8 + lane // 4) * RW + kk * 8 + 4 * h + lane % 4]
            for i in T.unroll(MT):
                for j in T.unroll(NT):
                    T.ptx_legacy.mma("m16n8k16", "row", "col", PT, PT, "fp32", af.data, i * 4, bf.data, j * 2,
                                     acc.data, (i * NT + j) * 4, False, dtype="float32")

    @T.macro
    def body(A, B, bias, R, C):
        with T.launch_thread("blockIdx.x", ceil_div(N, BN)) as bx:
            by = T.launch_thread("blockIdx.y", ceil_div(M, BM))
            lane = T.launch_thread("threadIdx.x", 32)
            warp = T.launch_thread("threadIdx.y", WARPS)
            S = T.alloc_buffer((WORDS,), "uint32", scope="shared.dyn")
            acc = T.alloc_buffer((ACC,), "float32", scope="local")
            af = T.alloc_buffer((MT * 4,), "uint32", scope="local")
            bf = T.alloc_buffer((NT * 2,), "uint32", scope="local")
            row0: T.let[T.int32] = by * BM
            col0: T.let[T.int32] = bx * BN
            wr: T.let[T.int32] = warp % WM_ * (BM // WM_)
            wc: T.let[T.int32] = warp // WM_ * (BN // WN_)
            for e in T.unroll(ACC):
                acc[e] = T.float32(0)
            load(S, A, B, row0, col0, warp * 32 + lane)
            T.cuda.cta_sync()
            compute(S, acc, af, bf, wr, wc, lane)
            T.cuda.cta_sync()  # every warp has read A and B: the words become the staged tile
            for i in T.unroll(MT):
                for j in T.unroll(NT):
                    for e in T.unroll(4):  # c0, c1: row g, columns 2c, 2c + 1; c2, c3: row g + 8
                        S[(wr + i * 16 + lane // 4 + 8 * (e // 2)) * CW + wc + j * 8 + lane % 4 * 2 + e % 2] = \
                            T.reinterpret("uint32", acc[(i * NT + j) * 4 + e])
            T.cuda.cta_sync()
            for rr in T.serial(ceil_div(BM, WARPS)):
                r: T.let[T.int32] = rr * WARPS + warp
                if T.And(r < BM, row0 + r < M):
                    for j in T.unroll(BN // 32):
                        col: T.let[T.int32] = col0 + j * 32 + lane
                        if col < N:
                            value: T.let[T.float32] = T.reinterpret("float32", S[r * CW + j * 32 + lane])
                            if EPI:
                                C[row0 + r, col] = epilogue_value(wl, value, bias[col] if BIAS else None,
                                                                  R[row0 + r, col] if RES else None)
                            else:
                                C[row0 + r, col] = value

    return kernel_entry(wl, body)


@register("short_k_tc_gemm", "gemm", ShortKTcConfig, aliases=("short_k_tc",), tags=("float16",))
def short_k_tc_gemm(wl: Gemm, cfg: ShortKTcConfig = ShortKTcConfig()):
    """Short K (≤ 64), 16-bit inputs, large output, on the tensor cores in one pass: a block loads
    its A rows and B columns once (2-byte loads: any layout and row pitch, zeros past the edges and
    past K), runs ``mma.sync.m16n8k16`` over the whole K, stages its fp32 tile in shared memory and
    writes it by rows (a warp's store 32 consecutive outputs of one row) through the epilogue.

    short_k_gemm widens the inputs and spends an FMA per output per k, which at K of 20-60 costs
    more than storing C; the TMA kernels pad K to 64, copy misaligned operands first and store
    a 128-row tile at a time from two warpgroups. Here the mmas cost K / 16 instructions per
    128 outputs of a warp, and small blocks of 8 warps keep the store path busy."""
    cfg.check(wl)
    return s_tir.Schedule(short_k_tc_kernel(wl, cfg))
