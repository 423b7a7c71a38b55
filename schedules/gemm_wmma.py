"""gemm 18: tensor cores through WMMA (fp16 inputs, fp32 accumulation), written as a schedule.

The WMMA recipe of TVM's dlight rule ``MatmulTensorization``, with its tile sizes as parameters and
a cp.async multi-stage pipeline: :class:`TensorCoreConfig` (warp and fragment tiles), the tensor
intrinsics it tensorizes with (TVM's registered WMMA and ldmatrix + ``mma.sync`` intrinsics, plus
the A-transposed ``wmma_sync`` variants the lab registers itself) and :func:`tensor_core_tiled`.
The grouped block order and the cp.async ring are gemm_fast.py's (:func:`~schedules.gemm_fast.rasterize`,
:func:`~schedules.gemm_fast.async_pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import ceil_div, fuse_epilogue, inline_padding, new_schedule
from .errors import ScheduleParamError
from .gemm_fast import async_pipeline, rasterize
from .gpus import arch_number
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm


@dataclass(frozen=True)
class TensorCoreConfig(StepConfig):
    """WMMA tiles: a warp owns frags_m × frags_n 16×16 accumulators; a block warps_m × warps_n
    warps; K advances by chunk_k × 16 per shared-memory stage."""

    dtypes = ("float16",)  # input types the step takes (a class attribute, not a parameter)
    layouts = LAYOUTS  # transposed operands through the intrinsics' col_major / .trans loads
    batched = True     # a bmm: the batch on blockIdx.y
    epilogues = True   # computed on the way out of the shared staging tile (fuse_epilogue)
    warps_m: int = 2
    warps_n: int = 2
    frags_m: int = 4
    frags_n: int = 4
    chunk_k: int = 2
    stages: int = 3
    async_copy: bool = True
    group_m: int = 8
    pad: int = 8  # halves of padding per shared row (storage_align), against ldmatrix bank conflicts
    fragment_pipeline: bool = False  # with async_copy: also double-buffer the WMMA fragments
    intrinsics: str = "wmma"  # "wmma" (wmma.load/mma/store) or "mma" (ldmatrix + mma.sync m16n8k16)

    @property
    def block_m(self) -> int:
        return 16 * self.warps_m * self.frags_m

    @property
    def block_n(self) -> int:
        return 16 * self.warps_n * self.frags_n

    @property
    def block_k(self) -> int:
        return 16 * self.chunk_k

    def arch_refusal(self, arch: str) -> str | None:
        """WMMA builds from sm_70 on; cp.async (``async_copy``) and mma.sync m16n8k16 (``intrinsics="mma"``)
        need sm_80."""
        if self.intrinsics == "mma" and arch_number(arch) < 80:
            return f"needs sm_80 or newer (mma.sync m16n8k16), not {arch}"
        return super().arch_refusal(arch)

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"tensor-core steps take float16 inputs (gemm:MxNxK:float16), not {wl.dtype}")
        if self.async_copy and self.stages < 2:
            raise ScheduleParamError("async_copy needs stages >= 2")
        if self.intrinsics not in ("wmma", "mma"):
            raise ScheduleParamError(f"intrinsics must be 'wmma' or 'mma', got {self.intrinsics!r}")

    def shared_halves(self) -> int:
        per_stage = self.block_m * (self.block_k + self.pad) + self.block_k * (self.block_n + self.pad)
        return per_stage * max(self.stages, 2)

    def launch(self, wl: Gemm) -> Launch:
        tiles = ceil_div(wl.M, self.block_m) * ceil_div(wl.N, self.block_n)
        acc = 4 * self.block_m * (self.block_n + 4)
        return Launch(grid=(tiles, wl.batches, 1), block=(32, self.warps_m * self.warps_n, 1),
                      shared_bytes=max(2 * self.shared_halves(), acc),
                      threads_from="32 × warps_m × warps_n",
                      shared_from="(A + B tiles) × stages halves (dynamic shared memory)",
                      dynamic_shared=True)


def _tensor_intrinsics(kind: str, trans_a: bool = False, trans_b: bool = False) -> dict:
    """TVM's registered tensor intrinsics for fp16 × fp16 → fp32 on shared.dyn tiles kept in the
    operands' stored layout: A row-major (m, k) or, ``trans_a``, (k, m); B (k, n) or, ``trans_b``,
    (n, k). WMMA loads a transposed tile as a ``col_major`` fragment; TVM 0.27 registers
    ``wmma_sync`` for a transposed B only, so the lab registers the A-transposed variants
    (:func:`_wmma_sync_intrin`). ldmatrix + mma.sync has all four (``.trans`` loads)."""
    from tvm.s_tir.tensor_intrin import cuda as tc

    if kind == "wmma":
        group = tc.get_wmma_intrin_group(load_scope="shared.dyn", store_scope="shared.dyn",
                                         in_dtype="float16", out_dtype="float32", trans_b=trans_b)
        if trans_a:
            group = dict(group, load_a=tc.WMMA_LOAD_16x16x16_F16_A_TRANS_DYN_INTRIN,
                         compute=_wmma_sync_intrin(trans_a, trans_b))
        return group
    ta, tb = "_TRANS" if trans_a else "", "_TRANS" if trans_b else ""
    compute = "MMA_f16f16f32" + ("_TRANS_A" if trans_a else "") + ("_TRANS_B" if trans_b else "") + "_INTRIN"
    return {"load_a": getattr(tc, f"LDMATRIX_f16_A{ta}_DYN_INTRIN"), "load_b": getattr(tc, f"LDMATRIX_f16_B{tb}_DYN_INTRIN"),
            "compute": getattr(tc, compute), "init": tc.MMA_fill_16x16_f32_INTRIN,
            "store": tc.MMA_store_16x16_f32_shared_dyn_INTRIN}


def _wmma_sync_intrin(trans_a: bool, trans_b: bool) -> str:
    """Name of a 16×16×16 fp16 → fp32 ``wmma.mma.sync`` intrinsic whose A fragment is stored (k, m)
    (loaded ``col_major``), and B (n, k) if ``trans_b``: TVM's own ``get_wmma_sync_intrin`` with the
    A indices swapped as well, registered once. The instruction is the same ``tvm_mma_sync``; the
    fragments' layouts come from their loads (``InferFragment``)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T
    from tvm.s_tir.tensor_intrin.cuda import get_wmma_fragment_index

    name = f"schedlab_wmma_sync_16x16x16_f16f16f32{'_trans_a' if trans_a else ''}{'_trans_b' if trans_b else ''}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    def swap(flag, i, j):
        return (j, i) if flag else (i, j)

    a_shape, b_shape = swap(trans_a, 16, 16), swap(trans_b, 16, 16)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, a_shape, "float16", align=64, offset_factor=16, scope="wmma.matrix_a")
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=16, scope="wmma.matrix_b")
        C = T.match_buffer(c, (16, 16), "float32", align=64, offset_factor=16, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads(C[0:16, 0:16], A[0:16, 0:16], B[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            for i, j, k in T.grid(16, 16, 16):
                with T.sblock(""):
                    vii, vjj, vkk = T.axis.remap("SSR", [i, j, k])
                    a0, a1 = T.meta_var(swap(trans_a, vii, vkk))
                    b0, b1 = T.meta_var(swap(trans_b, vkk, vjj))
                    C[vii, vjj] = C[vii, vjj] + T.Cast("float32", A[a0, a1]) * T.Cast("float32", B[b0, b1])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        b1 = T.int32()
        b0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, a_shape, "float16", align=64, offset_factor=16, scope="wmma.matrix_a",
                           strides=[a1, a0])
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=16, scope="wmma.matrix_b",
                           strides=[b1, b0])
        C = T.match_buffer(c, (16, 16), "float32", align=64, offset_factor=16, scope="wmma.accumulator",
                           strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:16, 0:16], A[0:16, 0:16], B[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            T.evaluate(T.tvm_mma_sync(C.data, get_wmma_fragment_index(C, c1, 16, 16),
                                      A.data, get_wmma_fragment_index(A, a1, 16, 16),
                                      B.data, get_wmma_fragment_index(B, b1, 16, 16),
                                      C.data, get_wmma_fragment_index(C, c1, 16, 16), dtype="void"))

    TensorIntrin.register(name, desc, impl)
    return name


def tensor_core_tiled(wl: Gemm, cfg: TensorCoreConfig, fuse: bool = True):
    """fp16 × fp16 → fp32 on tensor cores through WMMA intrinsics (dlight MatmulTensorization's
    recipe for C = A·B with B row-major, tile sizes from ``cfg``).

    Any operand layout: the shared tiles keep the stored layout (16-byte cp.async along the stored
    rows), and a transposed tile reaches the tensor cores through the transposing loads (WMMA
    ``col_major`` fragments, ``ldmatrix.trans``), not through a copy. A batch (``bmm``) is one more
    spatial loop, on blockIdx.y. An epilogue or a 16-bit output is computed as the fp32 tile leaves
    the shared staging buffer for global memory (:func:`~schedules.common.fuse_epilogue`; ``fuse=False``
    leaves its block "D" to the caller)."""
    sch = new_schedule(wl.prim_func())
    block = sch.get_sblock("C")
    sch.pad_einsum(block, ([1] if wl.batched else []) + [cfg.block_m, cfg.block_n, cfg.block_k])
    *b, i, j, k = sch.get_loops(block)
    i, i_in = sch.split(i, [None, 16])
    j, j_in = sch.split(j, [None, 16])
    k, k_in = sch.split(k, [None, 16])
    sch.reorder(i, j, k, i_in, j_in, k_in)
    mma = sch.blockize(i_in)  # one 16×16×16 tensor-core operation
    i0, i1, i2 = sch.split(i, [None, cfg.warps_m, cfg.frags_m])
    j0, j1, j2 = sch.split(j, [None, cfg.warps_n, cfg.frags_n])
    k0, k1 = sch.split(k, [None, cfg.chunk_k])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.bind(rasterize(sch, i0, j0, cfg.group_m, ceil_div(wl.M, cfg.block_m)), "blockIdx.x")
    if b:
        sch.bind(b[0], "blockIdx.y")
    warp = sch.fuse(i1, j1)
    sch.bind(warp, "threadIdx.y")
    warps = cfg.warps_m * cfg.warps_n

    copies = []
    for index in (0, 1):
        copy = sch.cache_read(mma, index, "shared.dyn")
        sch.compute_at(copy, k0, preserve_unit_loops=True)
        _, ty, tx, vec = sch.split(sch.fuse(*sch.get_loops(copy)[-2:]), [None, warps, 32, 8])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
        if cfg.pad:
            sch.storage_align(copy, 0, axis=-2, factor=16, offset=cfg.pad)
        copies.append(copy)
    inline_padding(sch, writes=())

    fragment = {"wmma": ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"),
                "mma": ("warp", "warp", "warp")}[cfg.intrinsics]
    frag_a = sch.cache_read(mma, 0, fragment[0])
    frag_b = sch.cache_read(mma, 1, fragment[1])
    sch.compute_at(frag_a, k1, preserve_unit_loops=True)
    sch.compute_at(frag_b, k1, preserve_unit_loops=True)
    to_global = sch.cache_write(mma, 0, "shared.dyn")
    acc = sch.cache_write(mma, 0, fragment[2])
    sch.storage_align(acc, 0, -2, 16, 4)  # the fp32 staging tile, rows padded by 4
    sch.reverse_compute_at(acc, warp, preserve_unit_loops=True)
    sch.reverse_compute_at(to_global, warp, preserve_unit_loops=True)
    init = sch.decompose_reduction(mma, k0)

    inner = {}
    for frag, name in ((frag_a, "load_a"), (frag_b, "load_b"), (acc, "store")):
        r, c = sch.get_loops(frag)[-2:]
        r0, r1 = sch.split(r, [None, 16])
        c0, c1 = sch.split(c, [None, 16])
        sch.reorder(r0, c0, r1, c1)
        if name != "store":
            sch.unroll(r0)
            sch.unroll(c0)
        inner[name] = r1
    intrins = _tensor_intrinsics(cfg.intrinsics, wl.trans_a, wl.trans_b)
    if cfg.intrinsics == "mma":
        # warp fragments in the per-lane layout that ldmatrix / mma.sync use: 32 lanes × 8 values
        # (a transposed operand's fragment is indexed as stored: the .trans intrinsics read it so)
        from tvm.s_tir.tensor_intrin.cuda import shared_16x16_to_ldmatrix_32x8_layout as lane_layout

        if wl.batched:
            def index_map(b, i, j):
                return (b, i // 16, j // 16, *lane_layout(i % 16, j % 16))
        else:
            def index_map(i, j):
                return (i // 16, j // 16, *lane_layout(i % 16, j % 16))

        sch.transform_layout(frag_a, ("write", 0), index_map)
        sch.transform_layout(frag_b, ("write", 0), index_map)
        sch.transform_layout(acc, ("read", 0), index_map)
    for name, loop in inner.items():
        sch.tensorize(loop, intrins[name])
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], intrins["init"])
    sch.tensorize(sch.get_loops(block)[-3], intrins["compute"])
    inline_padding(sch, reads=())
    _, tx, vec = sch.split(sch.fuse(*sch.get_loops(to_global)[-2:]), [None, 32, 4])
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)
    if fuse:  # an epilogue: applied as the staged tile is copied out, before the store
        fuse_epilogue(sch)

    if cfg.async_copy:
        async_pipeline(sch, k0, k1 if cfg.fragment_pipeline else None, cfg.stages)
    elif cfg.stages >= 2:
        for copy in copies:
            sch.annotate(copy, "tirx.manifest_shared_memory_local_stage", 1)
            sch.annotate(copy, "double_buffer_scope", 0)
        sch.annotate(k0, "software_pipeline_order", [0, 3, 1, 4, 5, 2, 6])
        sch.annotate(k0, "software_pipeline_stage", [0, 0, 0, 0, 0, 1, 1])
        sch.annotate(k1, "software_pipeline_order", [0, 1, 2])
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
    return sch


@register("tensor_core_gemm", "gemm", TensorCoreConfig, aliases=("tensor_core", "wmma"), tags=("float16",))
def tensor_core_gemm(wl: Gemm, cfg: TensorCoreConfig = TensorCoreConfig()):
    """Tensor cores: fp16 inputs, fp32 accumulation, through TVM's WMMA intrinsics (tensorize):
    each warp keeps 4 × 4 accumulators of 16×16 in tensor-core fragments (a 64×64 warp tile), 2 × 2
    warps per 128×128 block, K by 32, cp.async into a 3-stage ring of padded shared tiles (dynamic
    shared memory), grouped block order; C leaves through a padded shared tile.

    One warp-wide ``wmma.mma.sync`` does 16×16×16 multiply-adds where an FMA does one. Workload
    ``gemm:MxNxK:float16`` (output fp32). ``intrinsics="mma"`` uses ldmatrix + ``mma.sync.m16n8k16``
    instead (TVM's MMA intrinsics); on an H200 it measured 10% slower than WMMA at 4096³. Neither
    reaches Hopper's wgmma rate (TVM 0.27 has no wgmma intrinsic), so cuBLAS stays about 2× ahead.
    """
    return tensor_core_tiled(wl, cfg)
