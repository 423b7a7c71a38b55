"""The fast GEMM steps (gemm 10 on): they build for sm_90 without spills, the IR shows what each step
claims (cp.async, tensor-core instructions, padded shared tiles, two split-K kernels), odd shapes
build, bad parameters are refused, and (on a GPU) the results are right."""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from reports.engine import build as B  # noqa: E402
from schedules import ScheduleParamError, get, parse_workload  # noqa: E402
from schedules import dispatch, gemm_fast  # noqa: E402
from tests.helpers import run_on_gpu  # noqa: E402

FP32_STEPS = ["vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm",
              "rasterized_gemm", "best_gemm"]
TC_STEPS = ["tensor_core_gemm"]
DEFAULT = "gemm:1024x512x2048"
ODD = ["gemm:3x5x7", "gemm:1000x500x2001", "gemm:1x4097x1"]
# the tensor-core step is built here with an epilogue and a 16-bit output (its plain product is built by
# test_schedules.py and test_layouts.py): the same WMMA kernel, storing GELU(C + bias) in fp16
TC_WORKLOAD = "gemm:1024x512x2048:float16:out=float16:bias:gelu_erf"


def fp16(workload):
    return workload + ":float16"


def build(name, workload, **params):
    _, wl, _, resolved = B.resolve_named(name, workload, params)
    return B.build_resolved(resolved, wl, B.cuda_target("sm_90"))


_CACHE = {}


def built(name, workload, **params):
    key = (name, workload, tuple(sorted(params.items())))
    if key not in _CACHE:
        _CACHE[key] = build(name, workload, **params)
    return _CACHE[key]


# --- build, resources ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", FP32_STEPS + TC_STEPS)
def test_step_builds_for_sm90_without_spills(name):
    wl = TC_WORKLOAD if name in TC_STEPS else DEFAULT
    b = built(name, wl)
    assert b.device.kernels, "no kernel compiled"
    for k in b.device.kernels:
        assert k.spills == 0, f"{k.name} spills {k.spills} bytes"
        assert k.registers <= 255


def test_steps_follow_the_classic_ones():
    steps = {name: get(name).step for name in FP32_STEPS + TC_STEPS}
    assert min(steps.values()) == 10 and get("double_buffer_gemm").step == 9
    assert len(set(steps.values())) == len(steps)
    for name in steps:
        assert get(name).doc.strip(), f"{name} has no docstring"


# --- what each step claims is in the IR -------------------------------------------------------
def test_async_step_emits_cp_async():
    b = built("async_pipeline_gemm", DEFAULT)
    assert "cp.async" in b.device.cuda
    assert "cp.async" in b.device.ptx
    assert "cp.async.wait_group" in b.device.ptx or "cp.async.wait_all" in b.device.ptx


def test_register_staged_steps_do_not_use_cp_async():
    for name in ("vectorized_shared_gemm", "warp_tiled_gemm"):
        assert "cp.async" not in built(name, DEFAULT).device.cuda


def test_vectorized_step_has_128_bit_global_loads_and_shared_stores():
    ptx = built("vectorized_shared_gemm", DEFAULT).device.ptx
    assert re.search(r"ld\.global(\.nc)?\.v4\.", ptx)  # float4 copies are emitted as .v4.u32
    assert re.search(r"st\.shared\.v4\.", ptx)


def _shared_sizes(cuda):
    """Floats per static shared array (StorageRewrite may retype one as float4)."""
    found = re.finditer(r"__shared__ (?:alignas\(\d+\) )?(float4?) (\w+)\[(\d+)\]", cuda)
    return {m.group(2): int(m.group(3)) * (4 if m.group(1) == "float4" else 1) for m in found}


def test_shared_padding_is_visible():
    cfg = get("vectorized_shared_gemm").config()
    sizes = _shared_sizes(built("vectorized_shared_gemm", DEFAULT).device.cuda)
    a = next(v for k, v in sizes.items() if k.startswith("A_shared"))
    b = next(v for k, v in sizes.items() if k.startswith("B_shared"))
    assert a == cfg.block_m * (cfg.block_k + cfg.pad) > cfg.block_m * cfg.block_k
    assert b == cfg.block_k * (cfg.block_n + cfg.pad) > cfg.block_k * cfg.block_n
    unpadded = _shared_sizes(built("vectorized_shared_gemm", DEFAULT, pad=1).device.cuda)
    assert sum(unpadded.values()) < sum(sizes.values())


def test_warp_tiling_launches_warps_on_y_and_z():
    b = built("warp_tiled_gemm", DEFAULT)
    cfg = get("warp_tiled_gemm").config()
    assert b.launch["threadIdx.x"] == 32
    assert b.launch["threadIdx.y"] == cfg.warps_n and b.launch["threadIdx.z"] == cfg.warps_m


def test_split_k_is_two_kernels_with_partials():
    b = built("split_k_gemm", DEFAULT)
    assert len(b.device.kernels) == 2
    cfg = get("split_k_gemm").config()
    assert "blockIdx.y" in b.device.cuda  # the K slice of the partial-product kernel
    assert b.launch.get("blockIdx.y", 1) in (cfg.split_k, 1)


def test_rasterization_changes_block_order():
    plain = built("async_pipeline_gemm", "gemm:4096x4096x4096").lowered
    grouped = built("rasterized_gemm", "gemm:4096x4096x4096").lowered
    assert plain != grouped
    group = get("rasterized_gemm").config().group_m
    assert f"blockIdx_x % {group}" in grouped or f"blockIdx_x % {group * 32}" in grouped


@pytest.mark.parametrize("tiles_m, group", [(1, 1), (8, 8), (12, 6), (13, 13), (16, 8), (30, 6), (89, 1), (98, 7)])
def test_groups_divide_the_block_rows(tiles_m, group):
    assert gemm_fast.group_rows(8, tiles_m) == group
    assert tiles_m % group == 0 and gemm_fast.group_rows(1, tiles_m) == 1


def test_a_ragged_grid_launches_only_real_tiles_with_no_row_test_in_the_inner_loop():
    """1500 rows are 12 block-rows: in groups of 8 the grid padded to 16 and every multiply-add
    of the K loop sat behind a test of the block's row; in groups of 6 the grid is the 240 tiles."""
    b = build("rasterized_gemm", "gemm:1500x2500x3333")
    assert b.launch["blockIdx.x"] == 12 * 20
    loop = b.device.cuda[b.device.cuda.index("for (int k_0"):]
    block_only = [c for c in re.findall(r"if \((.*)\) \{", loop) if "threadIdx" not in c and "k_0" not in c]
    assert block_only == []  # the loads' row and K checks remain; a test of the block alone does not


def test_tensor_core_step_emits_mma_instructions():
    ptx = built("tensor_core_gemm", TC_WORKLOAD).device.ptx
    assert "wmma.mma.sync" in ptx and "wmma.load.a" in ptx
    ptx = built("tensor_core_gemm", TC_WORKLOAD, intrinsics="mma").device.ptx
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix.sync" in ptx


def test_tensor_core_step_computes_the_epilogue_on_its_way_out():
    """One kernel: the fp32 tile leaves the shared staging buffer as GELU(C + bias) in fp16; no C in
    global memory (fuse_epilogue)."""
    b = built("tensor_core_gemm", TC_WORKLOAD)
    assert len(b.device.kernels) == 1
    body = b.device.cuda[b.device.cuda.index("main_kernel("):]
    assert "erff(" in body and "bias_ptr" in body and "half* __restrict__ D_ptr" in body and "C_ptr" not in body


def test_tf32_is_not_offered():
    """TVM 0.27 registers no tf32 tensor intrinsic (wmma groups accept float16/int8 inputs only)."""
    from schedules.tensor_intrinsics import import_tensor_intrinsics

    tc = import_tensor_intrinsics().cuda  # TVM's import, at a tenth of the cost under pytest

    with pytest.raises(AssertionError):
        tc.get_wmma_intrin_group("shared", "shared", "float32", "float32", False)
    assert not [n for n in dir(tc) if "TF32" in n.upper()]


# --- odd shapes -------------------------------------------------------------------------------
@pytest.mark.parametrize("workload", ODD)
@pytest.mark.parametrize("name", FP32_STEPS + TC_STEPS)
def test_odd_shapes_build(name, workload):
    wl = fp16(workload) if name in TC_STEPS else workload
    b = built(name, wl)
    assert all(k.spills == 0 for k in b.device.kernels)


# --- parameters -------------------------------------------------------------------------------
def test_bad_parameters_are_refused_with_their_names():
    wl = parse_workload(DEFAULT)
    with pytest.raises(ScheduleParamError, match="warps_m"):
        get("warp_tiled_gemm").validate(wl, get("warp_tiled_gemm").config(warps_m=3))
    with pytest.raises(ScheduleParamError, match="async_copy"):
        get("async_pipeline_gemm").validate(wl, get("async_pipeline_gemm").config(stages=1))
    with pytest.raises(ScheduleParamError, match="float16"):
        get("tensor_core_gemm").validate(wl)
    with pytest.raises(ScheduleParamError, match="float32"):
        get("warp_tiled_gemm").validate(parse_workload(fp16(DEFAULT)))


def test_loads_are_as_wide_as_the_rows_allow():
    """float4 where K (for A) or N (for B) is a multiple of 4, float2 where it is even: not scalar
    everywhere because 4 does not divide."""
    ptx = built("warp_tiled_gemm", "gemm:1000x502x2002").device.ptx
    assert re.search(r"ld\.global\.nc\.v2\.", ptx) and not re.search(r"ld\.global\.nc\.v4\.", ptx)
    ptx = built("warp_tiled_gemm", "gemm:1000x500x2001").device.ptx
    assert re.search(r"ld\.global\.nc\.v4\.", ptx)  # B's rows (N = 500) still take float4


def test_padded_copies_make_misaligned_operands_load_full_width():
    """pad_operands: A (K = 2001) and B (N = 503) copied into tile-padded buffers by kernels of
    their own, then loaded 16 bytes wide; an aligned operand is not copied."""
    b = built("warp_tiled_gemm", "gemm:1000x503x2001", pad_operands=True)
    assert len(b.device.kernels) == 3 and all(k.spills == 0 for k in b.device.kernels)
    assert re.search(r"ld\.global\.nc\.v4\.", b.device.ptx) and not re.search(r"ld\.global\.nc\.v2\.", b.device.ptx)
    assert "A_pad" in b.device.cuda and "B_pad" in b.device.cuda
    b = built("split_k_gemm", "gemm:1000x500x2001", pad_operands=True)
    assert len(b.device.kernels) == 3  # A's copy, the product, the sum of the slices (B needs no copy)
    cfg = get("warp_tiled_gemm").config(pad_operands=True)
    assert cfg.copied(parse_workload("gemm:64x64x64")) == (False, False)
    assert cfg.load_vectors(parse_workload("gemm:1000x503x2001")) == (4, 4)
    assert get("warp_tiled_gemm").config().load_vectors(parse_workload("gemm:1000x503x2001")) == (1, 1)


# --- on the GPU -------------------------------------------------------------------------------
def _run(harness, name, workload, **params):
    return run_on_gpu(harness, get(name), workload, **params)



GPU_FP32_CASES = ([(name, wl) for name in FP32_STEPS for wl in (DEFAULT, "gemm:1000x500x2001", "gemm:1000x502x2002")]
                  + [(name, wl) for name in ("best_gemm", "split_k_gemm") for wl in ("gemm:3x5x7", "gemm:1x4097x1")])


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload", GPU_FP32_CASES)
def test_fp32_steps_are_correct(harness, name, workload):
    assert _run(harness, name, workload) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload,params", [
    ("warp_tiled_gemm", "gemm:1000x503x2001", dict(pad_operands=True)),
    ("split_k_gemm", "gemm:300x77x9001", dict(pad_operands=True)),
    ("skinny_gemm", "gemm:2000x13x3001:float16", dict(pad_operands=True, split_k=8)),
    ("skinny_gemm", "gemm:9x7x15001", dict(block_m=32, block_n=128, thread_m=8, thread_n=1, warps_m=4, warps_n=4,
                                           vector=1, split_k=128, pad_operands=True)),
])
def test_padded_copies_are_right(harness, name, workload, params):
    assert _run(harness, name, workload, **params) < 1e-5


DEEPER_K_CASES = [
    ("skinny_gemm", "gemm:9954x21x61", dict(block_m=256, block_n=8, warps_m=4, warps_n=1)),
    ("skinny_gemm", "gemm:432x838x158", dict(block_m=32, block_n=128, thread_m=8, thread_n=1, warps_m=4, warps_n=4,
                                             vector=1, split_k=2)),
    ("skinny_gemm", "gemm:2001x53x207", dict(block_m=32, block_n=64, thread_m=8, thread_n=1, warps_m=4, warps_n=2,
                                             vector=1, split_k=3, pad_operands=True)),
    ("skinny_gemm", "gemm:7x3001x1001:float16", dict(block_m=8, block_n=256, warps_m=1, warps_n=4, split_k=3)),
    ("warp_tiled_gemm", "gemm:1000x503x2001", dict(block_m=64, block_n=64, thread_m=4, thread_n=4, warps_m=4,
                                                  warps_n=2, pad_operands=True)),
    ("split_k_gemm", "gemm:777x1000x3000", dict(block_m=128, block_n=64, warps_m=4, warps_n=1, split_k=5)),
]


def _deeper_k_cases():
    """Each case at each K tile past 8 that the dispatcher offers its thread tile."""
    for name, wl, params in DEEPER_K_CASES:
        cfg = get(name).config(**params)
        for bk in dispatch.simt_depths(cfg.thread_m, cfg.thread_n):
            if bk > 8:
                yield name, wl, params, bk


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload,params,block_k", list(_deeper_k_cases()))
def test_deeper_k_tiles_are_right(harness, name, workload, params, block_k):
    """A K tile of 16 or 32 (the dispatcher's choice for a short K), each the dispatcher offers
    the thread tile: the tail of K, split-K slices and padded copies still line up with it."""
    assert _run(harness, name, workload, block_k=block_k, **params) < 1e-5


ASYNC_RING_CASES = [  # the dispatcher's cp.async rings on its SIMT tiles: K tails, split-K, padded copies, layouts
    ("skinny_gemm", "gemm:3001x53x211", dict(block_m=32, block_n=128, thread_m=8, thread_n=1, warps_m=4, warps_n=4,
                                             vector=1, block_k=16)),
    ("skinny_gemm", "gemm:9954x21x61", dict(block_m=256, block_n=8, warps_m=4, warps_n=1, split_k=2)),
    ("skinny_gemm", "gemm:3001x53x211:nt", dict(block_m=32, block_n=64, thread_m=8, thread_n=1, warps_m=4, warps_n=2,
                                                vector=1, block_k=32)),
    ("skinny_gemm", "gemm:45x3001x1001", dict(block_m=16, block_n=128, warps_m=1, warps_n=4, block_k=32,
                                              split_k=3, pad_operands=True)),
    ("skinny_gemm", "gemm:300x77x9001", dict(block_m=16, block_n=128, thread_n=1, warps_m=4, warps_n=4, vector=1,
                                             split_k=16)),
    ("warp_tiled_gemm", "gemm:1000x503x2001", dict(block_m=64, block_n=64, thread_m=4, thread_n=4, warps_m=4,
                                                  warps_n=2, block_k=16, pad_operands=True)),
    ("warp_tiled_gemm", "gemm:1000x503x2001", dict(block_m=64, block_n=64, thread_m=4, thread_n=4, warps_m=4,
                                                  warps_n=2, block_k=32)),  # narrow cp.async copies
    ("split_k_gemm", "gemm:777x1000x3000", dict(block_m=128, block_n=64, warps_m=4, warps_n=1, split_k=5, block_k=16)),
    ("warp_tiled_gemm", "gemm:1000x500x2001:tn", dict(block_m=128, block_n=128, block_k=16)),
    ("skinny_gemm", "gemm:2000x24x3000:nt", dict(split_k=4)),
    ("skinny_gemm", "bmm:3x500x40x700:tt", dict(block_k=32)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("name,workload,params", ASYNC_RING_CASES)
def test_async_rings_are_right(harness, name, workload, params, stages):
    """A cp.async ring of 3 or 4 shared buffers (the dispatcher's choice where a block waits on its
    loads): predicated copies of the K tail and of rows past M or N, split-K slices, padded
    copies, transposed operands (single-float copies) and batches."""
    assert _run(harness, name, workload, stages=stages, async_copy=True, **params) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("workload", [DEFAULT] + ODD)
@pytest.mark.parametrize("intrinsics", ["wmma", "mma"])
def test_tensor_core_step_is_correct(harness, workload, intrinsics):
    # fp16 inputs are exact in fp32 products; only the fp32 sum rounds
    assert _run(harness, "tensor_core_gemm", fp16(workload), intrinsics=intrinsics) < 1e-4


if __name__ == "__main__":  # the GPU checks without pytest (e.g. on a machine that lacks it)
    from reports.engine.measure import CudaHarness

    h, failed = CudaHarness(flush=False), 0
    cases = [(lambda n=n, w=w: test_fp32_steps_are_correct(h, n, w), f"{n} {w}") for n, w in GPU_FP32_CASES]
    cases += [(lambda w=w, i=i: test_tensor_core_step_is_correct(h, w, i), f"tensor_core_gemm[{i}] {w}")
              for w in [DEFAULT] + ODD for i in ("wmma", "mma")]
    for fn, name in cases:
        try:
            fn()
            print(f"PASS {name}", flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {str(e).splitlines()[0][:200]}", flush=True)
    print(f"{len(cases) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
