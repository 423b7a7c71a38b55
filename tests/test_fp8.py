"""8-bit float inputs (float8_e4m3fn, float8_e5m2), fp8_tma_gemm and fp8_block_scaled_gemm: the
workload grammar (a mixed pair, the scales per tensor, row or block) and its one-line refusals, the arguments in torch._scaled_mm's order, the float64
reference of the dequantized inputs and its tolerance, the workload's own definition on the CPU,
the kernel compiled for sm_90a without spills with the instructions it is about (FP8 wgmma on
TMA tiles, mbarrier waits, setmaxnreg), refusals of what the TMA path cannot take, the benchmark's
jobs, and on a GPU the products against float64 at several shapes (ragged ones included) and
torch._scaled_mm with the same scales."""

import math

import numpy as np
import pytest

from schedules import Gemm, ScheduleParamError, get, parse_workload
from schedules.reference import FP8_SUM_BITS, epilogue_inputs, fp8_sum_tolerance, output_tolerance, reference
from tests.helpers import build_spec, run_on_gpu

STEP = "fp8_tma_gemm"
BLOCK_STEP = "fp8_block_scaled_gemm"
BIG = "gemm:4096x4096x4096:float8_e4m3fn:nt"
# a mixed pair, row-wise scales, the whole epilogue, a bf16 output, ragged M, N and K tiles, 2×1 clusters
MIXED = "gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16:bias:gelu_tanh:residual"


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get_built(workload, step=STEP, **params):
        key = (step, workload, tuple(sorted(params.items())))
        if key not in cache:
            cache[key] = build_spec(get(step), workload, **params)
        return cache[key]

    return get_built


# --- the workload ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canonical", [
    ("gemm:64x64x64:float8_e4m3fn:nt", "gemm:64x64x64:float8_e4m3fn:nt"),
    ("gemm:64x64x64:float8_e4m3fn:b=float8_e4m3fn:nt:scale=tensor", "gemm:64x64x64:float8_e4m3fn:nt"),
    ("gemm:64x64x64:float8_e4m3fn:b=float8_e5m2:nt:out=bfloat16:scale=row:bias",
     "gemm:64x64x64:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16:bias"),
    ("gemm:64x64x64:float8_e5m2", "gemm:64x64x64:float8_e5m2"),
    ("gemm:300x200x1000:float8_e4m3fn:scale=block:nt", "gemm:300x200x1000:float8_e4m3fn:nt:scale=block"),
])
def test_fp8_workloads_round_trip(text, canonical):
    wl = parse_workload(text)
    assert str(wl) == canonical and parse_workload(str(wl)) == wl
    assert wl.fp8 and wl.scaled and wl.has_epilogue and wl.scaling in ("tensor", "row", "block")
    assert parse_workload("gemm:64x64x64:float16").scaling is None


@pytest.mark.parametrize("text, word", [
    ("gemm:8x8x8:float16:b=float8_e5m2", "b=TYPE names B's type right after an 8-bit float A's"),
    ("gemm:8x8x8:float8_e4m3fn:nt:b=float8_e5m2", "right after"),
    ("gemm:8x8x8:float8_e4m3fn:b=float16", "B's type 'float16' is not one of float8_e4m3fn, float8_e5m2"),
    ("gemm:8x8x8:float8_e4m3fn:scale=col", "scale='col' is not one of tensor, row, block"),
    ("gemm:8x8x8:float8_e4m3fn:scale=row:scale=row", "scale= is given twice"),
    ("gemm:8x8x8:scale=row", "scale= is for 8-bit float inputs"),
    ("gemv:8x8:float8_e4m3fn", "8-bit float inputs are for gemm workloads, not gemv"),
    ("bmm:2x8x8x8:float8_e5m2:nt", "8-bit float inputs are for gemm workloads, not bmm"),
])
def test_fp8_nonsense_is_a_one_line_error(text, word):
    with pytest.raises(ScheduleParamError, match=word.replace("(", r"\(")) as e:
        parse_workload(text)
    assert "\n" not in str(e.value)
    with pytest.raises(ScheduleParamError, match="a mixed pair is two 8-bit floats"):
        Gemm(8, 8, 8, "bfloat16", b_dtype="float8_e5m2")


class _TensorLike(np.ndarray):
    """What scaled_mm_call uses of a torch tensor (t, copy_, device), on a numpy array."""
    device = "cpu"

    def t(self):
        return self.T.view(_TensorLike)

    def copy_(self, other):
        self[...] = other
        return self


@pytest.mark.parametrize("K, padded", [(2304, True), (768, True), (2048, False)])
def test_cublas_block_scales_go_with_k_blocks_padded_to_4_where_they_are_not(K, padded):
    """cuBLASLt reads B's 128 × 128 block scales with a row pitch of ⌈K/128⌉ rounded up to 4
    (torch._scaled_mm takes only the unpadded shape: its output failed the float64 check at K 2304
    and 768 on an H200): there the baseline first calls torch._scaled_mm_v2 with the recipes named and
    B's scales copied into padded rows (as the (padded K blocks) × N-block view torch's tests pass), the
    values those of each call; elsewhere, or with a torch without _scaled_mm_v2, torch._scaled_mm with
    the layouts as before. (torch stood in for by numpy.)"""
    from types import SimpleNamespace

    from reports.engine.baselines import scaled_mm_call

    seen = []

    def record(scale_a, scale_b, use_fast_accum, out, call):
        seen.append((call, scale_b.shape, tuple(x // 4 for x in scale_b.strides), np.array(scale_b), scale_a.strides))
        if use_fast_accum:
            raise RuntimeError("scaled_gemm doesn't support fast accum with 1x128 blockwise scaling")
        return out

    def scaled_mm(a, b, scale_a, scale_b, out=None, out_dtype=None, use_fast_accum=False):
        return record(scale_a, scale_b, use_fast_accum, out, "v1")

    def scaled_mm_v2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                     contraction_dim=(), use_fast_accum=False, *, out=None):
        assert (recipe_a, recipe_b, swizzle_a, swizzle_b, bias) == ([4], [5], [], [], None)
        return record(scale_a[0], scale_b[0], use_fast_accum, out, "v2")

    def empty_strided(shape, strides, dtype, device):
        assert strides == (1, shape[0])  # scale_a column-major
        return np.zeros(shape[::-1], np.float32).T.view(_TensorLike)

    recipes = SimpleNamespace(BlockWise1x128=SimpleNamespace(value=4), BlockWise128x128=SimpleNamespace(value=5))
    fake = SimpleNamespace(_scaled_mm=scaled_mm, _scaled_mm_v2=scaled_mm_v2, empty_strided=empty_strided,
                           nn=SimpleNamespace(functional=SimpleNamespace(ScalingType=recipes)),
                           zeros=lambda shape, dtype, device: np.zeros(shape, np.float32).view(_TensorLike))
    wl = parse_workload(f"gemm:256x384x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16")
    kb, rng = -(-K // 128), np.random.default_rng(0)
    a, b = (np.zeros(shape, np.uint8).view(_TensorLike) for shape in ((256, K), (384, K)))
    sa, sb = (rng.random(shape, dtype=np.float32).view(_TensorLike) for shape in ((256, kb), (3, kb)))
    out = np.zeros((256, 384), np.float32).view(_TensorLike)
    fn, what = scaled_mm_call(fake, wl, [a, b, sa, sb], out)
    assert ("padded to a multiple of 4" in what) is padded and "use_fast_accum=False" in what
    call, shape, strides, values, a_strides = seen[-1]
    assert a_strides == (4, 4 * 256) or not padded  # scale_a column-major
    if padded:  # the (padded K blocks) × N-block view of rows padded to a multiple of 4: cuBLASLt's pitch
        pk = kb + -kb % 4
        assert call == "v2" and what.startswith("torch._scaled_mm_v2(")
        assert shape == (pk, 3) and strides == (1, pk) and np.array_equal(values[:kb], sb.T)
        assert not values[kb:].any()
        sb[...] = 2.0  # each call copies the scales it is given
        fn()
        assert np.all(seen[-1][3][:kb] == 2.0)
        del fake._scaled_mm_v2  # an older torch: torch._scaled_mm's layouts, not padded
        assert "padded" not in scaled_mm_call(fake, wl, [a, b, sa, sb], out)[1]
    else:
        assert call == "v1" and shape == (3, kb) and "scale_b" not in what


def test_the_arguments_are_scaled_mms_and_the_kernels():
    """A, B, scale_a, scale_b, [bias], [R], D: the scales float32, (1,) per tensor, (M, 1) and (1, N)
    per row (torch._scaled_mm's shapes); the kernel's PrimFunc takes exactly these."""
    from schedules.gemm_fp8 import Fp8TmaConfig, fp8_kernel

    wl = parse_workload("gemm:96x80x64:float8_e4m3fn:nt:out=float16")
    assert wl.arg_names() == ["A", "B", "scale_a", "scale_b", "D"]
    assert wl.arg_shapes() == [((96, 64), "float8_e4m3fn"), ((80, 64), "float8_e4m3fn"), ((1,), "float32"),
                               ((1,), "float32"), ((96, 80), "float16")]
    assert wl.operand_count == 4 and wl.min_bytes == 96 * 64 + 80 * 64 + 2 * 96 * 80
    for text in (MIXED, "gemm:96x80x64:float8_e5m2:nt:scale=row:bias"):
        wl = parse_workload(text)
        func = fp8_kernel(wl, Fp8TmaConfig())
        params = [(p.name, tuple(int(x) for x in p.shape), str(p.dtype)) for p in func.params]
        assert params == [(n, tuple(s), d) for n, (s, d) in zip(wl.arg_names(), wl.arg_shapes())]
        assert params[2][1:] == ((wl.M, 1), "float32") and params[3][1:] == ((1, wl.N), "float32")
    # block scales: per 1×128 of A (M, ⌈K/128⌉) and per 128×128 of B (⌈N/128⌉, ⌈K/128⌉)
    wl = parse_workload("gemm:300x200x1000:float8_e4m3fn:nt:scale=block")
    assert wl.scale_shapes == ((300, 8), (2, 8))
    func = fp8_kernel(wl, get(BLOCK_STEP).config())
    assert [tuple(int(x) for x in p.shape) for p in func.params] == [s for s, _ in wl.arg_shapes()]


# --- the reference and the tolerance ------------------------------------------------------------------
def _inputs(wl, seed=0, low=0.0):
    """Host inputs of ``wl`` in ±[low, 1) (8-bit floats through ml_dtypes)."""
    from reports.engine.measure import numpy_dtype

    rng = np.random.default_rng(seed)
    return [(np.sign(rng.uniform(-1, 1, size=s)) * rng.uniform(low, 1, size=s)).astype(numpy_dtype(d))
            for s, d in wl.arg_shapes()[:-1]]


def test_the_reference_is_the_scaled_product_of_the_dequantized_inputs():
    wl = parse_workload("gemm:24x40x64:float8_e4m3fn:b=float8_e5m2:nt:scale=row:bias:relu")
    a, b, sa, sb, bias = _inputs(wl)
    assert a.dtype.itemsize == 1 and b.dtype.itemsize == 1
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    want = np.maximum(exact * (sa.astype(np.float64) * sb.astype(np.float64)) + bias.astype(np.float64), 0)
    np.testing.assert_array_equal(reference(wl, [a, b, sa, sb, bias]), want.astype(np.float32).astype(np.float64))
    assert epilogue_inputs(wl, [a, b, sa, sb, bias])[0] is not None  # the bias, not a scale
    per_tensor = parse_workload("gemm:24x40x64:float8_e4m3fn:nt")
    a, b, sa, sb = _inputs(per_tensor, seed=1)
    want = (a.astype(np.float64) @ b.astype(np.float64).T) * (float(sa[0]) * float(sb[0]))
    np.testing.assert_array_equal(reference(per_tensor, [a, b, sa, sb]), want.astype(np.float32))  # as stored


def test_block_scales_multiply_each_128_of_k_inside_the_sum():
    wl = parse_workload("gemm:5x130x300:float8_e5m2:b=float8_e4m3fn:nt:scale=block")
    a, b, sa, sb = (x.astype(np.float64) for x in _inputs(wl, seed=4))
    want = np.array([[sum(a[i, k] * b[j, k] * sa[i, k // 128] * sb[j // 128, k // 128] for k in range(300))
                      for j in range(130)] for i in range(5)])
    got = reference(wl, _inputs(wl, seed=4))
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=1e-7)


def test_the_tolerance_grows_with_k_from_the_tensor_cores_fp8_sums():
    """2^-13·√K (+ fp32's 1e-5): the FP8 tensor cores keep ~13 fraction bits of each k32 sum; a 16-bit
    output adds its rounding on top, as for every other step."""
    assert FP8_SUM_BITS == 13
    assert fp8_sum_tolerance(4096) == pytest.approx(2 ** -13 * 64 + 1e-5)
    assert fp8_sum_tolerance(16384) == pytest.approx(2 * fp8_sum_tolerance(4096) - 1e-5)
    spec = get(STEP)
    f32, bf16 = parse_workload(BIG), parse_workload(BIG + ":out=bfloat16")
    assert spec.tolerance_for(f32) == pytest.approx(fp8_sum_tolerance(4096))
    assert spec.tolerance_for(bf16) == pytest.approx(output_tolerance(bf16, fp8_sum_tolerance(4096)))
    assert 1e-2 < spec.tolerance_for(bf16) < 2e-2
    # promoted to fp32 registers every 128 of K (block scales): the bound stops growing
    block = get(BLOCK_STEP)
    for K in (4096, 16384):
        wl = parse_workload(f"gemm:256x256x{K}:float8_e4m3fn:nt:scale=block")
        assert block.tolerance_for(wl) == pytest.approx(2 ** -13 * math.sqrt(128) + 1e-5)


@pytest.mark.parametrize("text", ["gemm:48x40x96:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=float32:bias:silu:residual",
                                  "gemm:40x136x300:float8_e4m3fn:nt:scale=block:out=float16:bias"])
def test_the_workloads_definition_computes_the_reference_on_the_cpu(text):
    """The TE definition (A, B, the scales, the epilogue block D) built for the CPU matches the
    float64 reference. Inputs in ±[1/8, 1): TVM 0.27's LLVM conversion of e4m3 reads the
    subnormals (and zero) wrong (0x00 → 0.0078125), which CUDA's __nv_fp8_e4m3 does not."""
    import tvm

    wl = parse_workload(text)
    ins = _inputs(wl, seed=2, low=0.125)
    out = tvm.runtime.empty(wl.arg_shapes()[-1][0], wl.out_dtype, tvm.cpu())
    tvm.compile(wl.prim_func(), target="llvm")(*[tvm.runtime.tensor(x) for x in ins], out)
    ref = reference(wl, ins)
    assert np.linalg.norm(out.numpy().astype(np.float64) - ref) / np.linalg.norm(ref) < 1e-3 * (wl.out_dtype != "float32") + 1e-6


# --- the kernel ---------------------------------------------------------------------------------------
def test_compiles_for_sm90a_without_spills_with_fp8_wgmma_on_tma_tiles(built):
    b = built(BIG)
    assert "for 'sm_90a'" in b.device.ptxas_log
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    ptx = b.device.ptx
    for mark in ("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", "cp.async.bulk.tensor.2d", "mbarrier.try_wait",
                 "setmaxnreg.dec", "setmaxnreg.inc", "wgmma.wait_group"):
        assert mark in ptx, mark
    assert ".e5m2" not in ptx and ".multicast::cluster" not in ptx
    # both descriptors K-major with the 128-byte swizzle: layout 1 << 62, SBO 1024 B (64 << 32), LBO 1 << 16
    assert f"{(1 << 62) | (64 << 32) | (1 << 16)}ULL" in b.device.cuda
    # per K tile: four k32 steps, each 32 bytes further along the 128-byte rows of A and of B (at 16 KiB)
    for offset in (16384, 16416, 16448, 16480):
        assert f"+ (uint){offset})" in b.device.cuda
    # UINT8 tensor maps of 128-byte boxes: A (128 K, 128 rows), B (128 K, 64 rows)
    assert 'A_map, A.data, 4096, 4096, 4096, 128, 128, 1, 1, descriptor_dtype="uint8"' in b.scheduled
    assert 'B_map, B.data, 4096, 4096, 4096, 128, 64, 1, 1, descriptor_dtype="uint8"' in b.scheduled
    launch = get(STEP).validate(parse_workload(BIG))
    assert launch.grid == (132, 1, 1) and launch.block == (384, 1, 1)
    # 4 stages of 48 KiB (2x the K of fp16's ring) and the consumer warps' staging areas (8 x 16 x 40 floats)
    assert launch.shared_bytes == 4 * (128 + 256) * 128 + 1024 + 20480


def test_a_mixed_pair_with_row_scales_an_epilogue_and_clusters_compiles(built):
    b = built(MIXED, cluster_m=2)
    assert all(k.spills == 0 for k in b.device.kernels) and len(b.device.kernels) == 1
    ptx = b.device.ptx
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2" in ptx and ".multicast::cluster" in ptx
    cuda = b.device.cuda
    assert "*(nv_bfloat162*)(D_ptr" in cuda  # adjacent outputs stored as one 4-byte pair
    assert "scale_a_ptr[" in cuda and "(float2*)(scale_b_ptr" in cuda and "bias_ptr[" in cuda and "R_ptr[" in cuda
    assert "tanhf" in cuda or "tanh(" in cuda


def test_block_scales_are_promoted_every_k_tile(built):
    """fp8_block_scaled_gemm: each K tile's wgmmas into fresh partial sums (m64n128k32: a 128 × 128
    tile leaves room for two accumulator sets), waited for (wait_group 0), the slot released, the
    next K tile's barrier waited for (CUTLASS's wait, no .acquire), then the partial sums added to
    the running sum times the scales of the thread's rows and column block, then the epilogue; 2×1
    clusters. The K loop runs in unrolled chunks of unroll_k K tiles (K = 2000: 16 K tiles, two
    chunks of 8 in a loop of 8 copies), the descriptors the ring's word plus offsets; 4 stages."""
    b = built(MIXED.replace("scale=row", "scale=block"), BLOCK_STEP, cluster_m=2)
    one = built(MIXED.replace("scale=row", "scale=block"), BLOCK_STEP, cluster_m=2, unroll_k=1)
    assert all(k.spills == 0 for k in b.device.kernels + one.device.kernels) and len(b.device.kernels) == 1
    ptx = b.device.ptx
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2" in ptx and ".multicast::cluster" in ptx
    assert "wgmma.wait_group.sync.aligned 0" in ptx and "wgmma.wait_group.sync.aligned 1" not in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    cuda = b.device.cuda
    mma = "tvm_builtin_ptx_wgmma_fp8_ss_mma_async_sync_aligned_m64n128k32_f32_e4m3_e5m2_1_1("
    assert cuda.count(mma) == 4 * 8 + 1 and one.device.cuda.count(mma) == 4 + 1  # the calls and the definition
    assert "((ring >> (uint)4) & (uint)16383)" in cuda  # descriptors from the ring's word
    # a wait per K tile: the unit's first before the loop, each next one inside the 8 copies (the chunk's last
    # only while a next K tile exists), so 1 + 8 calls and the definition
    assert cuda.count("tma_gemm_wait(") == 1 + 1 + 8
    first = cuda.index(mma, cuda.index(mma) + 1)  # the first call
    done = cuda.index("wgmma_wait_group_wait_group_sync_aligned_0();", first)
    wait = cuda.index("tma_gemm_wait((", done)
    assert done < wait < cuda.index("acc_ptr[0] = (acc_ptr[0] + (part_ptr[0] * (sa_r_ptr[0] * sb_r_ptr[0])));", done)
    assert "acc_ptr[3] = (acc_ptr[3] + (part_ptr[3] * (sa_r_ptr[1] * sb_r_ptr[0])));" in cuda  # row + 8: its own scale
    assert "sab_ptr" not in cuda  # nothing scales the stored outputs again
    launch = get(BLOCK_STEP).validate(parse_workload("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block"))
    assert launch.shared_bytes == 4 * (128 + 128) * 128 + 1024 + 20480


@pytest.mark.parametrize("K, copies, waits", [(1152, 8 + 1, 1 + 8), (768, 6, 1 + 5)])
def test_the_k_loop_runs_in_chunks_and_waits_once_for_each_k_tile(built, K, copies, waits):
    """9 K tiles: a chunk of 8 in a loop, then 1 more, the last K tile (no wait for a next one); 6 (fewer than a
    chunk): 6 copies, the last without a wait. The unit's first K tile is waited for before them; no spills."""
    b = built(f"gemm:512x512x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16", BLOCK_STEP)
    assert all(k.spills == 0 for k in b.device.kernels)
    cuda = b.device.cuda
    assert cuda.count("tvm_builtin_ptx_wgmma_fp8_ss_mma_async_sync_aligned_m64n128k32_f32_e4m3_e4m3_1_1(") == 4 * copies + 1
    assert cuda.count("tma_gemm_wait(") == 1 + waits  # the definition and the calls


def test_the_chunk_length_follows_the_registers_left_beside_two_accumulator_sets():
    """k_chunk (unroll_k 0): 8 K tiles at 128 × 128 (104 registers spare), 4 at 128 × 192 (40), 2 with three
    consumers (32); longer chunks spilled there. An explicit unroll_k wins and is printed."""
    spec = get(BLOCK_STEP)
    assert spec.config().k_chunk == 8 and spec.config(block_n=192).k_chunk == 4
    assert spec.config(**{k: v for k, v in THREE_CONSUMERS.items() if k != "unroll_k"}).k_chunk == 2
    assert spec.config(unroll_k=3).k_chunk == 3 and spec.config(unroll_k=3).describe().endswith(" unroll 3")
    assert "unroll" not in spec.config().describe()


@pytest.mark.parametrize("K, vectors", [(4096, True), (1536, True), (1152, False)])
def test_chunk_scales_reads_16_bytes_of_a_row_once_for_4_k_tiles(built, K, vectors):
    """chunk_scales=true: a chunk's scales loaded at its start, 16 bytes a load (4 K tiles of a row of A's
    M × ⌈K/128⌉ scales, of B's block), not a K tile ahead one by one: 3 vector loads (2 rows of A, 1 block of
    B) per 4 K tiles, in the chunks (8) and the remainder (1536: 12 K tiles, 8 + 4); where ⌈K/128⌉ is not a
    multiple of 4 (1152: 9) the loads are the default's. No spills (nvcc, sm_90a)."""
    wl = f"gemm:1000x520x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16"
    b, plain = built(wl, BLOCK_STEP, chunk_scales=True), built(wl, BLOCK_STEP)
    assert all(k.spills == 0 for k in b.device.kernels)
    body = b.device.cuda.rsplit("setmaxnreg_inc", 1)[1]
    loads = body.count("= *(float4*)(scale_a_ptr") + body.count("= *(float4*)(scale_b_ptr")
    per_chunk = 6  # one chunk's copy: 2 rows of A and B's block, 8 K tiles
    remainder = 3 if K // 128 % 8 else 0
    assert loads == (per_chunk + remainder if vectors else 0)
    assert ("ld.global.nc.v4.f32" in b.device.ptx) == vectors
    if vectors:
        assert "scale_a_ptr[" not in body  # no scalar loads of A's scales
    else:
        assert b.device.cuda == plain.device.cuda
    with pytest.raises(ScheduleParamError, match="chunk_scales is for the unpipelined cooperative kernel"):
        get(BLOCK_STEP).validate(parse_workload(wl), get(BLOCK_STEP).config(chunk_scales=True, pipelined=True))


@pytest.mark.parametrize("wl, step, params", [
    ("gemm:1000x520x2048:float8_e4m3fn:nt:scale=block:out=bfloat16", BLOCK_STEP, dict(chunk_scales=True)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:out=bfloat16", STEP, {}),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block", BLOCK_STEP,
     dict(pingpong=True, block_m=64, block_n=128, stages=8, scales_in_ring=True))])
def test_the_consumers_take_their_warpgroup_index_from_lane_0(built, wl, step, params):
    """Every FP8 kernel's consumer warpgroup takes its index from lane 0 by __shfl_sync, not from
    threadIdx.x / 128 itself, so that ptxas knows it warp-uniform (at 4096³ the cooperative block
    kernel's R2UR 107 -> 31, nvdisasm). The kernels compile (nvcc, sm_90a) without spills."""
    b = built(wl, step, **params)
    assert all(k.spills == 0 for k in b.device.kernels)
    assert "tma_warp_group() - 1" in b.device.cuda
    assert "__shfl_sync(0xffffffff, (int)(threadIdx.x / 128), 0)" in b.device.cuda


@pytest.mark.parametrize("wl", ["gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16",
                                "gemm:1000x1000x512:float8_e4m3fn:nt:out=float32:bias:relu"])
def test_tma_store_applies_the_row_or_tensor_scales_in_the_boxes(built, wl):
    """fp8_tma_gemm with tma_store=true: the scales are applied as each box is written (per row: B's scales
    at the lane's 8 columns read a box ahead, 8 bytes a load, and A's at its rows once a tile, from no other
    place; per tensor: the product of the two scalars), and the boxes go to the TMA unit. Compiles (nvcc,
    sm_90a) without spills; the ping-pong kernel, a staged store beside it and a D whose row pitch is not a
    multiple of 16 bytes are refused in one line."""
    b = built(wl, STEP, **TMA_STORE)
    assert all(k.spills == 0 for k in b.device.kernels)
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in b.device.ptx
    cuda = b.device.cuda
    body = cuda[cuda.rindex("main_kernel("):]
    assert "D_ptr" not in body  # D only through the tensor map
    if "scale=row" in wl:  # the tile's boxes, unrolled: B's scales a box ahead (the first before the loop), a
        # column pair a load; A's of the lane's 2 rows of each m64 subtile once a tile
        cfg = get(STEP).config()
        boxes = cfg.m_subtiles * cfg.block_n // 32
        assert body.count("= *(float2*)(scale_b_ptr") == 4 * boxes and "= scale_b_ptr[" not in body
        assert body.count("= scale_a_ptr[") == 2 * cfg.m_subtiles
    else:
        assert "scale_a_ptr[0] * scale_b_ptr[0]" in body and "scale_b_ptr[" not in body.replace("scale_b_ptr[0]", "")
    spec = get(STEP)
    for params, word in ((dict(TMA_STORE, **PINGPONG), "tma_store is for the cooperative consumers"),
                         (dict(tma_store=True), "tma_store and staged_store are two ways")):
        with pytest.raises(ScheduleParamError, match=word) as e:
            spec.validate(parse_workload(wl), spec.config(**params))
        assert "\n" not in str(e.value)
    with pytest.raises(ScheduleParamError, match="must be a multiple of 8"):
        spec.validate(parse_workload("gemm:1000x1001x512:float8_e4m3fn:nt:out=bfloat16"), spec.config(**TMA_STORE))


def test_tma_store_hands_each_box_of_the_block_scaled_tile_to_the_tma_unit(built):
    """tma_store=true (with staged_store=false): each consumer warp writes its 16 × 32 boxes of the tile into
    shared memory and one lane issues the bulk tensor store; the warps wait for the TMA unit only before they
    refill a box and at the end. Compiles (nvcc, sm_90a) without spills; the ping-pong kernel and a staged store
    beside it are refused in one line."""
    wl = "gemm:1000x520x2048:float8_e4m3fn:nt:scale=block:out=bfloat16"
    b = built(wl, BLOCK_STEP, chunk_scales=True, tma_store=True, staged_store=False)
    assert all(k.spills == 0 for k in b.device.kernels)
    ptx = b.device.ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in ptx
    assert "cp.async.bulk.wait_group.read" in ptx and "fence.proxy.async.shared::cta" in ptx
    spec = get(BLOCK_STEP)
    for params, word in ((dict(TMA_STORE, **BLOCK_PINGPONG), "tma_store is for the cooperative consumers"),
                         (dict(tma_store=True), "tma_store and staged_store are two ways")):
        with pytest.raises(ScheduleParamError, match=word):
            spec.validate(parse_workload(wl), spec.config(**params))


def test_scales_in_ring_loads_each_k_tiles_scales_by_tma_beside_it(built):
    """scales_in_ring=true: the producer thread loads each K tile's scales by TMA (a box of 16-byte
    rows, 4 K tiles each, for the tile's 128 rows and its B block) into the slot's scale area, on its
    own expect_tx of the slot's full barrier (2 arrivals); the consumers read them with ld.shared
    and load no scale from global memory. Where ⌈K/128⌉ is not a multiple of 4 (a tensor map's row
    pitch) the consumers load them as without it."""
    wl = "gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16"
    ring, glob = built(wl, BLOCK_STEP, pipelined=True, scales_in_ring=True), built(wl, BLOCK_STEP, pipelined=True)
    assert all(k.spills == 0 for k in ring.device.kernels + glob.device.kernels)
    assert ring.device.cuda.count("(uint)2064);") == 1  # the scales' expect_tx: (128 + 1) · 16 bytes
    tma = "cp_async_bulk_tensor_g2s_cluster_async_bulk_tensor_2d_shared__cluster_global_mbarrier__complete_tx__bytes(("
    assert ring.device.cuda.count(tma) == glob.device.cuda.count(tma) + 2
    init = "mbarrier_init_init_shared_b64(tvm_builtin_cuda_cvta_generic_to_shared((&(bars_ptr[0]))), (uint){});"
    assert init.format(2) in ring.device.cuda and init.format(1) in glob.device.cuda
    consumers = [b.device.cuda.rsplit("setmaxnreg_inc", 1)[1] for b in (ring, glob)]
    assert "scale_a_ptr[" not in consumers[0] and "scale_a_ptr[" in consumers[1]  # their global loads of scales
    launch = get(BLOCK_STEP).validate(parse_workload(wl), get(BLOCK_STEP).config(scales_in_ring=True))
    assert launch.shared_bytes == 4 * (128 + 128) * 128 + 1024 + 20480 + 4 * 2176  # + each slot's (128 + 1) · 16, to 128
    odd_k = built("gemm:1000x520x704:float8_e4m3fn:nt:scale=block", BLOCK_STEP, scales_in_ring=True)  # 6 K tiles
    assert odd_k.device.cuda.count(tma) == glob.device.cuda.count(tma) and "scale_a_ptr[" in odd_k.device.cuda


@pytest.mark.parametrize("K", [384, 704, 1152, 4096])
def test_pipelined_promotion_runs_behind_the_next_k_tiles_wgmmas(built, K):
    """pipelined=True: two partial-sum sets, K tile kt+1's wgmmas issued before ``wait_group 1``
    and K tile kt's promotion; chunks of pipe_tiles (4) K tiles unrolled, each ended by ``wait_group
    0`` (KT 3, 6 with a partial last K tile, 9 and 32: odd chunks and remainders). No spills, and
    ptxas does not serialize the wgmmas (C7514: a K loop of pairs with a wgmma in flight across its
    back edge did)."""
    b = built(f"gemm:4096x4096x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16", BLOCK_STEP, pipelined=True)
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    assert "C7514" not in b.device.ptxas_log and "C7517" not in b.device.ptxas_log
    ptx = b.device.ptx
    assert "wgmma.wait_group.sync.aligned 1" in ptx and "wgmma.wait_group.sync.aligned 0" in ptx
    cuda = b.device.cuda
    assert "acc_ptr[0] = (acc_ptr[0] + (part1_ptr[0] * (sa_r_ptr[0] * sb_r_ptr[0])));" in cuda
    assert "acc_ptr[0] = (acc_ptr[0] + (part_ptr[0] * (sa_r_ptr[0] * sb_r_ptr[0])));" in cuda
    # the next K tile's wgmmas are issued before this one's wait: a wait_group 1 follows part1's wgmmas
    assert cuda.index("aligned_m64n128k32_f32_e4m3_e4m3_1_1(part1_ptr[0]") < cuda.index("aligned_1();")
    kt, chunk = -(-K // 128), 4
    assert cuda.count("wait_group_sync_aligned_0();") == (2 if kt > chunk and kt % chunk else 1)


def test_block_scales_of_a_192_column_tile_are_read_per_64_column_group(built):
    """block_n=192: a tile starts at column 0 or 64 of B's 128-column scale blocks, so each thread
    reads B's scale per 64-column group (3 per K tile), the block computed from the tile's first
    column; 8-column group j takes group j // 8's. Two 96-register sets, no spills."""
    b = built("gemm:1000x1000x704:float8_e4m3fn:nt:scale=block:out=bfloat16", BLOCK_STEP, block_n=192, stages=5)
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    assert "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3" in b.device.ptx
    cuda = b.device.cuda
    assert "float sb_r_ptr[6];" in cuda  # 3 groups: this K tile's and the next's
    assert "(part_ptr[32] * (sa_r_ptr[0] * sb_r_ptr[1]))" in cuda  # j = 8: columns 64.. take group 1's scale
    assert "* 192) + 64) / 128)" in cuda  # group 1's block: (col0 + 64) / 128


def test_three_consumers_promote_a_192_row_tile(built):
    """block_m=192 with three consumer warpgroups (64 rows each) and producer_regs=24: 160 registers a
    consumer, two 64-register sets; while one consumer promotes, two others' wgmmas keep the tensor
    cores busy."""
    b = built("gemm:1000x520x704:float8_e4m3fn:nt:scale=block", BLOCK_STEP, **THREE_CONSUMERS)
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    assert "setmaxnreg.inc.sync.aligned.u32 160" in b.device.ptx and "setmaxnreg.dec.sync.aligned.u32 24" in b.device.ptx


def test_pipelined_is_a_knob_of_the_block_scaled_step_only():
    cfg = get(BLOCK_STEP).config(pipelined=True)
    assert cfg.describe() == "block-scaled fp8 128x128x128 s4 ws 2c pers pipelined"
    assert get(BLOCK_STEP).config(pipelined=True, pipe_tiles=8).describe().endswith(" pipelined/8")
    assert get(BLOCK_STEP).config().describe() == "block-scaled fp8 128x128x128 s4 ws 2c pers"


PINGPONG = dict(pingpong=True, block_m=128, block_n=128, stages=6)  # a consumer's whole tile: 128 accumulators
BLOCK_PINGPONG = dict(pingpong=True, block_m=64, block_n=128, stages=8)  # two 64-register sets per consumer
THREE_CONSUMERS = dict(block_m=192, consumers=3, producer_regs=24, stages=4)  # 160 registers a consumer: chunks of 2


def test_pingpong_consumers_take_whole_tiles_in_turn(built):
    """pingpong=True: each consumer warpgroup owns a whole 128 × 128 tile (m64n128k32, two m64
    subtiles), each ring slot is read by one consumer (its empty barrier counts one arrival), and
    named barriers hand the tensor cores from one consumer to the other (bar.sync / bar.arrive,
    256 threads); TMA tiles, mbarrier waits and setmaxnreg as in the cooperative kernel; no spills."""
    b = built(BIG + ":out=bfloat16", **PINGPONG)
    assert "for 'sm_90a'" in b.device.ptxas_log and "C7514" not in b.device.ptxas_log  # wgmmas not serialized
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    ptx = b.device.ptx
    for mark in ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "cp.async.bulk.tensor.2d", "mbarrier.try_wait",
                 "setmaxnreg.dec", "setmaxnreg.inc", "bar.sync", "bar.arrive"):
        assert mark in ptx, mark
    assert "m64n256k32" not in ptx
    cuda = b.device.cuda
    assert "tvm_builtin_ptx_bar_arrive_arrive(((uint)2 - " in cuda  # consumer w passes the turn on barrier 2 - w
    assert "tvm_builtin_ptx_bar_sync_count_sync(((uint)1 + " in cuda  # ... and waits for it on barrier 1 + w
    # empty barriers (bars[6:12]) count one arrival: one consumer reads each slot (cooperative: both)
    assert "bars_ptr[6]))), (uint)1);" in cuda and "(uint)2);" not in cuda
    launch = get(STEP).validate(parse_workload(BIG), get(STEP).config(**PINGPONG))
    assert launch.grid == (132, 1, 1) and launch.block == (384, 1, 1)
    assert launch.shared_bytes == 6 * (128 + 128) * 128 + 1024 + 20480
    assert get(STEP).config(**PINGPONG).describe() == "fp8 128x128x128 s6 ws 2c pers pingpong"


def test_block_scaled_pingpong_promotes_a_64_row_tile_per_consumer_with_clusters(built):
    """Each consumer promotes its own 64 × 128 tile every K tile after ``wait_group 0`` (no
    accumulator read while a wgmma is in flight: ptxas would serialize the wgmmas, C7514), and
    passes the turn once the unit's last wgmmas are issued, before the last promotion."""
    b = built(MIXED.replace("scale=row", "scale=block"), BLOCK_STEP, cluster_m=2, sms=8, **BLOCK_PINGPONG)
    assert all(k.spills == 0 for k in b.device.kernels) and len(b.device.kernels) == 1
    assert "C7514" not in b.device.ptxas_log and "wgmma.wait_group.sync.aligned 1" not in b.device.ptx
    cuda = b.device.cuda
    assert cuda.index("tvm_builtin_ptx_bar_arrive_arrive((") < cuda.index("wgmma_wait_group_wait_group_sync_aligned_0();")
    ptx = b.device.ptx
    for mark in ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2", ".multicast::cluster", "bar.sync",
                 "bar.arrive", "wgmma.wait_group.sync.aligned 0", "mbarrier.try_wait", "setmaxnreg.inc"):
        assert mark in ptx, mark
    assert "acc_ptr[0] = (acc_ptr[0] + (part_ptr[0] * (sa_r_ptr[0] * sb_r_ptr[0])));" in b.device.cuda


@pytest.mark.parametrize("step, params, word", [
    (STEP, dict(PINGPONG, block_m=256), "a consumer warpgroup owns the whole tile: block_m must be 64 or 128"),
    (STEP, dict(PINGPONG, block_n=256, stages=4), "holds the whole 128x256 tile's 256 accumulators"),
    (STEP, dict(PINGPONG, persistent=False), "pingpong needs persistent=true"),
    (STEP, dict(PINGPONG, consumers=3), "pingpong takes 2 consumer warpgroups"),
    (STEP, dict(PINGPONG, stages=8), "shared memory"),
    (BLOCK_STEP, dict(PINGPONG), "two accumulator sets of 128 registers"),
])
def test_what_pingpong_cannot_take_is_refused_in_one_line(step, params, word):
    wl = "gemm:256x256x256:float8_e4m3fn:nt" + (":scale=block" if step == BLOCK_STEP else "")
    spec = get(step)
    with pytest.raises(ScheduleParamError, match=word) as e:
        spec.validate(parse_workload(wl), spec.config(**params))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("workload, params, word", [
    ("gemm:256x256x200:float8_e4m3fn:nt", {}, r"row pitch of A and B \(K\) is 200 bytes; TMA needs a multiple of 16"),
    ("gemm:256x256x256:float8_e4m3fn", {}, "takes the nt layout only, not nn .*FP8 wgmma reads both operands K-major"),
    ("gemm:256x256x256:float8_e4m3fn:tn", {}, "not tn .*no transpose immediates"),
    ("gemm:256x256x256:float16:nt", {}, "fp8_tma_gemm takes float8_e4m3fn, float8_e5m2 inputs, not float16"),
    ("gemm:256x256x256:float8_e4m3fn:nt", dict(block_k=64), "block_k must be 128"),
    ("gemm:256x256x256:float8_e4m3fn:nt", dict(split_k=2), "split_k must be 1"),
    ("gemm:256x256x256:float8_e4m3fn:nt", dict(pad_operands=True), "pad_operands is for the 16-bit steps"),
    ("gemm:256x256x256:float8_e4m3fn:nt", dict(stages=5), "shared memory"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", {}, "applies tensor or row scales, not scale=block"),
    ("gemm:256x256x256:float8_e4m3fn:nt", dict(step=BLOCK_STEP), "applies block scales, not scale=tensor"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, block_n=96), "multiple of 64"),
    ("gemm:576x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, block_m=192, consumers=3, stages=4),
     "two accumulator sets of 64 registers"),  # producer_regs 40: 152 a consumer
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, block_n=256), "two accumulator sets"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, pipelined=True, consumer_regs=200),
     "three accumulator sets of 64 registers"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, pipelined=True, pipe_tiles=1),
     "pipe_tiles must be ≥ 2"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(BLOCK_PINGPONG, step=BLOCK_STEP, pipelined=True),
     "pipelined is for the cooperative consumers"),
    ("gemm:256x256x256:float8_e4m3fn:nt:scale=block", dict(step=BLOCK_STEP, unroll_k=-3), "unroll_k must be"),
])
def test_what_the_tma_path_cannot_take_is_refused_in_one_line(workload, params, word):
    params = dict(params)
    spec = get(params.pop("step", STEP))
    with pytest.raises(ScheduleParamError, match=word) as e:
        spec.validate(parse_workload(workload), spec.config(**params))
    assert "\n" not in str(e.value)


def test_the_16_bit_steps_refuse_fp8_by_its_type():
    wl = parse_workload("gemm:256x256x256:float8_e4m3fn:nt")
    for name in ("persistent_gemm", "best_fp16_gemm", "naive_gemm"):
        assert not get(name).accepts(wl)
        with pytest.raises(ScheduleParamError, match=f"{name} takes .* inputs, not float8_e4m3fn"):
            get(name).validate(wl)
    assert get(STEP).accepts(wl) and not get(STEP).accepts(parse_workload("gemm:256x256x256:float8_e4m3fn"))


def test_the_benchmark_runs_both_scalings_beside_scaled_mm_and_show_defaults_to_nt(capsys):
    from reports.experiments import bench_gemm
    from scripts.schedlab import _workload_for, main

    jobs = bench_gemm.make_jobs(["4096x4096x4096"], ["fp8"])
    assert {(j["workload"], j["name"]) for j in jobs} == {
        (f"gemm:4096x4096x4096:float8_e4m3fn:nt{s}:out=bfloat16", n)
        for s in ("", ":scale=row") for n in ("cublas", STEP, "best_fp8_gemm")} | {
        ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", n)
        for n in ("cublas", "dequant_bf16_cublas", BLOCK_STEP, "best_fp8_gemm")}
    assert sum(j["params"] == {"cluster_m": 2} for j in jobs) == 2
    assert "fp8" not in bench_gemm.PRECISIONS  # by name only: the default benchmark is unchanged
    assert main(["bench-gemm", "--precisions", "fp8", "--random", "3"]) == 2
    assert "for the fixed shapes only" in capsys.readouterr().err
    assert str(_workload_for(get(STEP), None)) == "gemm:1024x512x2048:float8_e4m3fn:nt"
    assert str(_workload_for(get(STEP), "64x64x64:out=bfloat16")) == "gemm:64x64x64:float8_e4m3fn:nt:out=bfloat16"
    assert str(_workload_for(get(BLOCK_STEP), None)) == "gemm:1024x512x2048:float8_e4m3fn:nt:scale=block"


def test_block_scales_are_also_compared_with_the_per_tensor_rate_and_with_dequantizing_into_bf16():
    """Block scales' two other baselines: cuBLASLt's per-tensor rate at the same shape
    (``pct_cublas_tensor``) and the inputs dequantized into bf16 for cuBLAS (``speedup_vs_dequant``);
    neither for per-tensor or per-row scales. The bench tables show both."""
    from reports.engine import results as R
    from reports.engine.baselines import dequant_tolerance, gpu_baselines
    from reports.experiments import bench_gemm

    tensor, block = BIG + ":out=bfloat16", BIG + ":scale=block:out=bfloat16"
    assert "dequant_bf16_cublas" in gpu_baselines(parse_workload(block))
    assert "dequant_bf16_cublas" not in gpu_baselines(parse_workload(tensor))
    assert R.per_tensor_twin(block) == tensor and R.per_tensor_twin(tensor) is None
    rows = [{"workload": w, "name": n, "role": r, "status": "ok", "time_ms": t, "precision": "fp8"}
            for w, n, r, t in ((tensor, "cublas", "baseline", 0.8), (block, "cublas", "baseline", 1.0),
                               (block, "dequant_bf16_cublas", "baseline", 3.0), (block, BLOCK_STEP, "schedule", 1.25),
                               (tensor, STEP, "schedule", 0.9))]
    df = R.frame(rows).set_index(["workload", "name"])
    assert df.loc[(block, BLOCK_STEP), "pct_cublas_tensor"] == pytest.approx(64.0)
    assert df.loc[(block, BLOCK_STEP), "speedup_vs_dequant"] == pytest.approx(2.4)
    assert df.loc[(block, BLOCK_STEP), "pct_cublas"] == pytest.approx(80.0)
    assert math.isnan(df.loc[(tensor, STEP), "pct_cublas_tensor"]) and math.isnan(df.loc[(tensor, STEP), "speedup_vs_dequant"])
    frame = R.frame(rows)
    table = bench_gemm.table(frame)
    assert list(table.loc[frame["name"] == BLOCK_STEP, ["% LT per-tensor", "× dequant+bf16"]].iloc[0]) == ["64.0", "2.40"]
    assert "% LT per-tensor" not in bench_gemm.table(R.frame(rows[:1] + rows[-1:]))
    # the inputs' rounding to bf16 (u = 2^-8 each, 2u allowed), then the bf16 output's
    assert dequant_tolerance(parse_workload(block)) == pytest.approx((2 / 256 + 1e-4) * (1 + 1 / 256) + 2 / 256)


# --- on the GPU ----------------------------------------------------------------------------------------
TMA_STORE = dict(tma_store=True, staged_store=False)
GPU_CASES = [
    (BIG, {}),
    ("gemm:1000x520x2000:float8_e4m3fn:nt", {}),  # ragged M, N and last K tile (2000 = 15·128 + 80)
    ("gemm:64x64x64:float8_e4m3fn:nt:out=bfloat16", {}),  # one partial tile
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16", {}),
    ("gemm:2048x1536x1008:float8_e5m2:b=float8_e4m3fn:nt:scale=row:out=float16:bias:gelu_tanh:residual", {}),
    (MIXED, {"cluster_m": 2}),
    # ping-pong: whole tiles per consumer, several per block (sms: odd and even counts), ragged edges
    (BIG + ":out=bfloat16", PINGPONG),
    ("gemm:1000x520x2000:float8_e4m3fn:nt", dict(PINGPONG, block_m=64, block_n=256, stages=5, sms=7)),
    ("gemm:64x64x64:float8_e4m3fn:nt:out=bfloat16", PINGPONG),  # one partial tile: the second consumer idles
    (MIXED, dict(PINGPONG, cluster_m=2, sms=6)),
    # tma_store with the scales applied in the boxes: per tensor, per row (ragged M and N clipped by the map,
    # several tiles a block so boxes are reused, a mixed pair), the whole epilogue with clusters, 16- and 32-bit D
    (BIG + ":out=bfloat16", TMA_STORE),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16", dict(TMA_STORE, sms=5)),
    (MIXED, dict(TMA_STORE, cluster_m=2)),
    ("gemm:1000x1000x512:float8_e4m3fn:nt:out=float32:bias:relu", dict(TMA_STORE, block_n=128, sms=7)),
    ("gemm:2048x1536x1008:float8_e5m2:b=float8_e4m3fn:nt:scale=row:out=float16:bias:gelu_tanh:residual",
     dict(TMA_STORE, block_n=128)),
    # 256 × 128: two m64 subtiles per consumer warpgroup (A's row scales of each), with and without clusters
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=row:out=bfloat16", dict(TMA_STORE, block_m=256, block_n=128, sms=5)),
    (BIG + ":out=bfloat16", dict(TMA_STORE, block_m=256, block_n=128, cluster_m=2)),
]
BLOCK_GPU_CASES = [
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", {}),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", {}),  # ragged: clamped scale indices
    (MIXED.replace("scale=row", "scale=block"), {"cluster_m": 2}),
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", BLOCK_PINGPONG),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(BLOCK_PINGPONG, sms=5, cluster_m=2)),
    # pipelined: chunks of 4 K tiles (32), remainders (KT 6: 4 + 2; 9: 4 + 4 + 1), a single odd chunk (KT 3),
    # partial last K tiles (2000, 704), several units per block (sms), clusters, pipe_tiles 2 and 8
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(pipelined=True)),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(pipelined=True)),
    ("gemm:512x384x384:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(pipelined=True, sms=2)),
    ("gemm:1000x520x704:float8_e4m3fn:nt:scale=block", dict(pipelined=True, sms=5, cluster_m=2)),
    ("gemm:1024x768x1152:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(pipelined=True, sms=7)),
    ("gemm:1024x768x1152:float8_e4m3fn:nt:scale=block", dict(pipelined=True, pipe_tiles=2, sms=3)),
    ("gemm:1024x1024x8192:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(pipelined=True, pipe_tiles=8)),
    (MIXED.replace("scale=row", "scale=block"), {"cluster_m": 2, "pipelined": True}),
    # 128 × 192 (tiles starting at column 0 or 64 of B's scale blocks; ragged N), three consumers of 192 × 128
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(block_n=192, stages=5)),
    ("gemm:1000x1000x704:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(block_n=192, stages=5, sms=5)),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", THREE_CONSUMERS),
    ("gemm:1000x520x704:float8_e4m3fn:nt:scale=block", dict(THREE_CONSUMERS, sms=5, cluster_m=2)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block", dict(pipelined=True, pipe_tiles=8, sms=7)),  # KT 16, last partial
    # the scales by TMA beside each K tile (scales_in_ring): cooperative, pipelined, ping-pong, clusters, 128 × 192
    # (tiles across two B blocks), ragged M and N (rows of the boxes zero-filled), K tiles 16 and 32
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(scales_in_ring=True, sms=5)),
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(pipelined=True, scales_in_ring=True)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block", dict(BLOCK_PINGPONG, scales_in_ring=True, sms=5)),
    (MIXED.replace("scale=row", "scale=block"), {"cluster_m": 2, "pipelined": True, "scales_in_ring": True}),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(block_n=192, stages=4, scales_in_ring=True)),
    # 9 tile rows in 2×1 clusters: the padded 10th row's scale boxes lie wholly past M (zero-filled, bytes counted)
    ("gemm:1100x520x2048:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(cluster_m=2, pipelined=True, scales_in_ring=True)),
    # the default kernel: a chunk of 8 K tiles and a remainder of 1 (9 K tiles), few blocks; K padded to 16
    ("gemm:1024x768x1152:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(sms=7)),
    ("gemm:1000x520x1000:float8_e4m3fn:nt:scale=block", dict(pad_k=True, sms=5)),
    # chunk_scales: 4 K tiles of a row's scales a load (32 K tiles; ragged M, N with 8 + 4; clusters; 128 × 192)
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(chunk_scales=True)),
    ("gemm:1000x520x1536:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(chunk_scales=True, sms=5)),
    ("gemm:1100x520x2048:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(chunk_scales=True, cluster_m=2)),
    ("gemm:1000x1000x1536:float8_e4m3fn:nt:scale=block", dict(chunk_scales=True, block_n=192, stages=4)),
    # tma_store: D by the TMA unit from per-warp boxes (ragged M and N clipped by the map; several tiles a block so
    # boxes are reused; the whole epilogue; an fp32 output; clusters; the per-K-tile loader and the pipelined kernel)
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(TMA_STORE, chunk_scales=True)),
    ("gemm:1000x520x1536:float8_e4m3fn:b=float8_e5m2:nt:scale=block", dict(TMA_STORE, chunk_scales=True, sms=5)),
    (MIXED.replace("scale=row", "scale=block"), dict(TMA_STORE, cluster_m=2)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(TMA_STORE, pipelined=True, sms=7)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", GPU_CASES + [(w, dict(p, step=BLOCK_STEP)) for w, p in BLOCK_GPU_CASES])
def test_correct_against_the_dequantized_float64_product(harness, workload, params):
    params = dict(params)
    spec = get(params.pop("step", STEP))
    tol = spec.tolerance_for(parse_workload(workload))
    err = run_on_gpu(harness, spec, workload, **params)
    print(f"{spec.name}{params or ''} on {workload}: relative error {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol


def test_staged_store_reads_the_accumulators_back_along_rows_and_stores_d_by_rows(built):
    # a 16-bit D with N even: pairs of outputs, two rows of 64 bytes per store; the scales, the bias,
    # the activation and R applied to the values read back
    assert get(STEP).config().staged_store and get(BLOCK_STEP).config().staged_store  # the FP8 steps' default
    b = built(MIXED)
    assert all(k.spills == 0 for k in b.device.kernels) and "bar.warp.sync" in b.device.ptx
    assert "st.shared.v2.f32" in b.device.ptx and "ld.shared.f32" in b.device.ptx
    cuda = b.device.cuda
    assert "*(nv_bfloat162*)(D_ptr" in cuda and "R_ptr[" in cuda and "scale_a_ptr[" in cuda
    # row scales read ahead of their use: B's at the lane's column pairs once a tile, none beside the stores
    assert "*(float2*)(scale_b_ptr" in cuda and "scale_b_ptr[" not in cuda
    body = cuda[cuda.rindex("main_kernel("):]
    assert "__syncthreads()" not in body[body.index("setmaxnreg"):]
    plain = built(MIXED, staged_store=False)  # the fragments' own stores: 8 rows of 16 bytes per instruction
    assert "st.shared.v2.f32" not in plain.device.ptx and all(k.spills == 0 for k in plain.device.kernels)
    assert get(STEP).config().shared_bytes(1) == get(STEP).config(staged_store=False).shared_bytes(1) + 20480


STAGED_GPU_CASES = [
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:out=bfloat16", {}),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16:bias:gelu_tanh:residual",
     dict(cluster_m=2)),
    ("gemm:1000x1001x512:float8_e4m3fn:nt:out=float32:bias:relu", {}),
    ("gemm:999x777x1024:float8_e4m3fn:nt:out=float16", dict(pingpong=True, block_n=128)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(step=BLOCK_STEP)),
    ("gemm:1000x520x2000:float8_e4m3fn:nt:scale=block:out=bfloat16", dict(BLOCK_PINGPONG, step=BLOCK_STEP)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", STAGED_GPU_CASES)
def test_the_fragments_own_stores_are_right(harness, workload, params):
    params = dict(params)
    spec = get(params.pop("step", STEP))
    err = run_on_gpu(harness, spec, workload, staged_store=False, **params)
    assert err <= spec.tolerance_for(parse_workload(workload))


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", [
    ("cublas", "gemm:1024x512x2048:float8_e4m3fn:nt:out=bfloat16"),
    ("cublas", "gemm:1024x512x2048:float8_e4m3fn:nt:scale=row:out=bfloat16"),
    ("cublas", "gemm:1024x512x2048:float8_e4m3fn:nt:scale=block:out=bfloat16"),
    ("cublas", "gemm:1024x512x2304:float8_e4m3fn:nt:scale=block:out=bfloat16"),  # ceil(K/128) % 4 != 0
    ("dequant_bf16_cublas", "gemm:1024x512x2048:float8_e4m3fn:nt:scale=block:out=bfloat16"),
    ("dequant_bf16_cublas", "gemm:1000x520x2000:float8_e4m3fn:nt:scale=block:out=bfloat16")])  # 2000 = 15·128 + 80
def test_scaled_mm_with_the_same_scales_and_dequantizing_into_bf16_are_right(name, workload):
    """The benchmark's baselines through the same measurement path: torch._scaled_mm (checked to the
    same FP8 bound: it is asked for fast accumulation where cuBLASLt takes it) and, for block scales,
    the inputs dequantized into bf16 for cuBLAS (checked to the bound of their bf16 rounding)."""
    from reports.engine.baselines import Unavailable
    from reports.engine.harness import check_in_process

    try:
        row = check_in_process(name, workload, time=True, budget_s=0.02)
    except Unavailable as e:
        pytest.skip(str(e))
    print(f"{name} on {workload}: {row.get('cublas_call')}, relative error {row.get('rel_error'):.3g}")
    assert row["status"] == "ok", row.get("error")
    assert ("torch._scaled_mm" if name == "cublas" else "dequantized") in row["cublas_call"]
    assert row["precision"] == "fp8" and math.isfinite(row["time_ms"]) and row["time_ms"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("scale, params", [("row", None), ("tensor", TMA_STORE)])
def test_the_kernel_taken_out_of_the_lab_runs_on_torch_fp8_tensors(scale, params):
    """compile_kernel: A, B as torch.float8 tensors, the scales as torch._scaled_mm takes them; D written
    by the warps (the staged store) or by the TMA unit through a tensor map of the caller's tensor."""
    torch = pytest.importorskip("torch")
    from reports.engine.kernel import compile_kernel

    k = compile_kernel(STEP, f"gemm:1024x512x2048:float8_e4m3fn:nt:scale={scale}:out=bfloat16", params)
    a = torch.empty(1024, 2048, device="cuda").uniform_(-1, 1).to(torch.float8_e4m3fn)
    b = torch.empty(512, 2048, device="cuda").uniform_(-1, 1).to(torch.float8_e4m3fn)
    sa = torch.rand((1024, 1) if scale == "row" else (1,), device="cuda") + 0.5
    sb = torch.rand((1, 512) if scale == "row" else (1,), device="cuda") + 0.5
    d = k(a, b, sa, sb)
    ref = ((a.double() @ b.double().t()) * (sa.double() * sb.double())).to(torch.bfloat16).double()
    err = float((d.double() - ref).norm() / ref.norm())
    print(f"compile_kernel({STEP}) on torch tensors: relative error {err:.3g} (tolerance {k.tolerance:.3g})")
    assert d.dtype == torch.bfloat16 and err <= k.tolerance
    mine = torch.full_like(d, float("nan"))  # the caller's output tensor: written where it lies
    assert k(a, b, sa, sb, out=mine) is mine and torch.equal(mine, d)
