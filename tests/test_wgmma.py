"""Step 21, wgmma_gemm: it compiles for sm_90a without spills, its PTX holds the warpgroup MMA
and the asynchronous copies it claims, shapes it cannot copy in 16-byte pieces are refused with the
reason, and (on a GPU) its products are right at tile multiples, odd shapes and other block shapes."""

import re

import pytest

from reports.engine import build as B
from schedules import ScheduleParamError, get, parse_workload
from tests.helpers import build_spec, run_on_gpu
from tuning.cuda_compile import arch_for

SPEC = get("wgmma_gemm")
BIG = "gemm:4096x4096x4096:float16"
ODD = ["gemm:1000x520x2000:float16", "gemm:8x8x8:float16", "gemm:130x264x72:float16"]
OTHER_BLOCKS = [dict(mma_overlap=False), dict(block_n=128, stages=3), dict(block_m=256, block_n=128), dict(block_m=64, block_n=256),
                dict(block_m=128, block_n=64)]

_CACHE = {}


def built(workload, **params):
    key = (workload, tuple(sorted(params.items())))
    if key not in _CACHE:
        _CACHE[key] = build_spec(SPEC, workload, **params)
    return _CACHE[key]


def test_registered_after_the_wmma_step_for_16_bit_inputs():
    assert SPEC.step == get("tensor_core_gemm").step + 1 and get("wgmma") is SPEC and get("warpgroup_mma") is SPEC
    assert SPEC.input_dtypes == ("float16", "bfloat16")
    with pytest.raises(ScheduleParamError, match="float16"):
        SPEC.validate(parse_workload("gemm:4096x4096x4096"))


@pytest.mark.parametrize("params", [{}] + OTHER_BLOCKS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_compiles_for_sm90a_without_spills(params):
    b = built(BIG, **params)
    assert "for 'sm_90a'" in b.device.ptxas_log
    (k,) = b.device.kernels
    assert k.spills == 0 and k.registers <= 255
    cfg = SPEC.config(**params)
    assert b.launch == {"blockIdx.x": (4096 // cfg.block_m) * (4096 // cfg.block_n), "threadIdx.x": cfg.threads}


def test_ptx_has_the_warpgroup_mma_on_swizzled_descriptors_and_async_copies():
    b = built(BIG)
    ptx = b.device.ptx
    cfg = SPEC.config()
    # four k16 steps per 64-deep K tile, m64n256k16, B n-major (imm-trans-b = 1)
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16 [^;]*, 1, 1, 0, 1;", ptx)
    assert mmas == [str(cfg.block_n)] * 4
    assert "wgmma.fence.sync.aligned" in ptx and "wgmma.commit_group.sync.aligned" in ptx
    assert "wgmma.wait_group.sync.aligned 1" in ptx  # one tile's wgmmas left running (mma_overlap) ...
    assert "wgmma.wait_group.sync.aligned 0" in ptx  # ... until the last
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, ", ptx)  # 16-byte copies, zero-fill size
    assert "fence.proxy.async.shared::cta" in ptx  # generic-proxy copies made visible to the tensor cores
    assert "cp.async.wait_group 1" in ptx  # a 4-stage ring: one tile read, one computed, one copy may be in flight
    waiting = built(BIG, mma_overlap=False).device.ptx  # each tile's wgmmas waited for: one copy more ahead
    assert "wgmma.wait_group.sync.aligned 1" not in waiting and "cp.async.wait_group 2" in waiting
    # the 128-byte swizzle: descriptors encode layout type 1 (SW128) and a 1024-byte stride
    assert "layout_type_ = uint8_t(1); break; // 128B swizzle" in b.device.cuda
    assert re.search(r"ptx_wgmma_encode_matrix_descriptor\([^;]*, 1, 64, 3\)", b.device.cuda)


def test_dynamic_shared_memory_is_the_ring_plus_alignment():
    cfg = SPEC.config()
    launch = SPEC.validate(parse_workload(BIG), cfg)
    assert launch.dynamic_shared
    assert launch.shared_bytes == 2 * (cfg.stages * (cfg.block_m + cfg.block_n) * 64 + 512) == 197632


def test_other_kernels_stay_on_plain_sm90():
    assert arch_for("asm volatile(\"wgmma.fence.sync.aligned;\");", "sm_90") == "sm_90a"
    assert arch_for("__global__ void k() {}", "sm_90") == "sm_90"
    assert arch_for("wgmma.fence.sync.aligned;", "sm_80") == "sm_80"
    b = build_spec(get("tensor_core_gemm"), "gemm:1024x512x2048:float16")
    assert "for 'sm_90'" in b.device.ptxas_log


@pytest.mark.parametrize("workload,params,match", [("gemm:64x64x60:float16", dict(copy_bytes=16), "does not fit A"),
                                                   ("gemm:64x60x64:float16", dict(copy_bytes=16), "does not fit B"),
                                                   ("gemm:64x64x64:float16", dict(copy_bytes=3), "does not fit")])
def test_copies_wider_than_the_rows_allow_are_refused(workload, params, match):
    with pytest.raises(ScheduleParamError, match=match):
        SPEC.validate(parse_workload(workload), SPEC.config(**params))
    SPEC.validate(parse_workload(workload))  # the default takes the widest that fits


@pytest.mark.parametrize("params,match", [(dict(block_n=96), "block_n"), (dict(block_m=96), "block_m"),
                                          (dict(stages=1), "stages"), (dict(stages=2), "stages"),
                                          (dict(block_m=192, block_n=64), "divide")])
def test_bad_configurations_are_refused(params, match):
    with pytest.raises(ScheduleParamError, match=match):
        SPEC.validate(parse_workload(BIG), SPEC.config(**params))


@pytest.mark.parametrize("workload", ODD)
def test_odd_shapes_build(workload):
    assert built(workload).device.cubin


def test_narrow_rows_get_the_widest_copies_they_allow():
    """Rows whose length is not a multiple of 16 bytes: copies as wide as the pitch allows (8 or 4
    bytes through cp.async, 2 through registers), not a refusal and not scalar everywhere."""
    cases = {"gemm:1000x520x2000:float16": (16, 16), "gemm:1000x516x2004:float16": (8, 8),
             "gemm:1000x502x2002:bfloat16": (4, 4), "gemm:1000x500x2001:float16": (2, 8)}
    for workload, widths in cases.items():
        wl = parse_workload(workload)
        assert SPEC.config().copy_widths(wl) == widths, workload
        SPEC.validate(wl)
    b = built("gemm:1000x500x2001:float16")
    assert "cp.async.ca.shared.global [%r" in b.device.ptx.replace("  ", " ") or "cp.async.ca.shared.global" in b.device.ptx
    assert "cp.async.cg" not in b.device.ptx  # no 16-byte copy fits these rows
    with pytest.raises(ScheduleParamError, match="copy_bytes=16 does not fit A"):
        SPEC.validate(parse_workload("gemm:64x64x66:float16"), SPEC.config(copy_bytes=16))


def test_two_byte_copies_issue_their_loads_together():
    """Odd row lengths (K and N odd: 2-byte pieces through registers): a thread's loads of a tile
    are issued before their shared stores (each into its register, zero outside the matrix); with
    each store right after its load (the form before), a warp waited for every load in turn."""
    b = built("gemm:159x75x273:float16", block_m=64, block_n=64, stages=4, mma_overlap=False)
    ops = re.findall(r"\b(ld\.global\S*|st\.shared\S*)", b.device.ptx)
    runs, run = [], 0  # loads with no shared store between them (the form before: one each)
    for op in ops:
        if op.startswith("ld.global"):
            run += 1
        elif run:
            runs, run = runs + [run], 0
    assert len(runs) >= 4 and min(runs) >= 16, runs  # 32 copies of A and of B per thread and tile
    (k,) = b.device.kernels
    assert k.spills == 0


@pytest.mark.parametrize("block_m, block_n", [(128, 192), (128, 256)])
def test_every_two_byte_copy_is_made_when_the_operands_take_different_counts(block_m, block_n):
    """K and N odd on a 128 x 192 tile: each thread copies 32 pieces of A and 48 of B a K tile, in groups
    that divide both (16); every one of them is loaded, in the ring's prologue (two K tiles) and its loop."""
    b = built("gemm:1001x501x2001:float16", block_m=block_m, block_n=block_n)
    per_tile = 32 + 32 * block_n // block_m
    assert len(re.findall(r"ld\.global\.nc\.u16", b.device.ptx)) == 3 * per_tile


# --- on the GPU -------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["gemm:1024x512x2048:float16", BIG] + ODD +
                         ["gemm:1000x516x2004:float16", "gemm:1000x502x2002:bfloat16", "gemm:1000x500x2001:float16",
                          "gemm:77x33x15:bfloat16", "gemm:159x75x273:float16", "gemm:300x213x79:bfloat16:tn"])
def test_correct(harness, workload):
    # fp16 products are exact in fp32; only the fp32 sums round
    assert run_on_gpu(harness, SPEC, workload) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("params", OTHER_BLOCKS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("workload", ["gemm:2048x2048x2048:float16", "gemm:1000x520x2000:float16"])
def test_other_block_shapes_are_correct(harness, workload, params):
    assert run_on_gpu(harness, SPEC, workload, **params) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("block_m, block_n", [(128, 192), (64, 64)])
def test_two_byte_copies_are_right_when_the_operands_take_different_counts(harness, block_m, block_n):
    # 128 x 192: 32 copies of A and 48 of B per thread and K tile, in groups of 16
    assert run_on_gpu(harness, SPEC, "gemm:1001x501x2001:float16", block_m=block_m, block_n=block_n) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["gemm:1024x512x2048:float16", "gemm:3000x1000x2500:float16"])
def test_best_fp16_is_correct(harness, workload):
    assert run_on_gpu(harness, get("best_fp16_gemm"), workload) < 1e-4


# --- TF32 (step 23) -----------------------------------------------------------------------------
TF32 = get("wgmma_tf32_gemm")


def test_tf32_step_reads_both_operands_k_major_and_transposes_b_on_the_way_in():
    b = build_spec(TF32, "gemm:4096x4096x4096")
    (k,) = b.device.kernels
    assert k.spills == 0 and "for 'sm_90a'" in b.device.ptxas_log
    # k8 steps, no transpose immediates (tf32 has none): scale-d, scale-a, scale-b only
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k8\.f32\.tf32\.tf32 [^;]*, p\w*, 1, 1;", b.device.ptx)
    assert len(mmas) == 4  # four k8 steps per 32-deep tile
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4, ", b.device.ptx)  # B: one element per copy
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, ", b.device.ptx)  # A: 16-byte rows
    # B's descriptor: k-major like A (leading offset unused, 1024 bytes between 8-row groups)
    assert len(re.findall(r"ptx_wgmma_encode_matrix_descriptor\([^;]*, 1, 64, 3\)", b.device.cuda)) == 2


def test_tf32_step_takes_any_row_and_runs_by_name_only():
    assert TF32.config().copy_widths(parse_workload("gemm:64x64x66")) == (8, 4)
    assert TF32.config().copy_widths(parse_workload("gemm:64x64x67")) == (4, 4)
    with pytest.raises(ScheduleParamError, match="float32"):
        TF32.validate(parse_workload(BIG))
    TF32.validate(parse_workload("gemm:3000x1000x2500"))  # N is copied element by element: any N
    from reports.experiments.run import plan

    jobs, _ = plan(["gemm:1024x512x2048"], baseline_names=[])
    assert "wgmma_tf32_gemm" not in {j["name"] for j in jobs}
    jobs, _ = plan(["gemm:1024x512x2048"], ["wgmma_tf32_gemm"])
    assert [j["name"] for j in jobs] == ["wgmma_tf32_gemm", "numpy_cpu", "torch_cpu", "cublas", "cublas_tf32",
                                         "tvm_dlight"]  # named: beside cuBLAS in TF32 mode
    # its results are checked to tf32's rounding, every other step's to its input type's
    fp32, fp16 = parse_workload("gemm:64x64x64"), parse_workload("gemm:64x64x64:float16")
    assert TF32.tolerance_for(fp32) == 2e-3 and get("best_gemm").tolerance_for(fp32) == 1e-5
    assert SPEC.tolerance_for(fp16) == 1e-4
    assert TF32.precision("float32") == "tf32" and get("best_gemm").precision("float32") == "fp32"


def test_bench_compares_tf32_with_cublas_in_tf32_mode():
    from reports.experiments.bench_gemm import make_jobs

    jobs = make_jobs(["4096x4096x4096", "1000x500x2001"])
    names = [(j["workload"], j["name"]) for j in jobs]
    assert ("gemm:4096x4096x4096", "cublas_tf32") in names and ("gemm:4096x4096x4096", "wgmma_tf32_gemm") in names
    assert ("gemm:1000x500x2001", "wgmma_tf32_gemm") in names  # K % 4 != 0: 4-byte copies of A
    assert ("gemm:1000x500x2001", "best_tf32_gemm") in names and ("gemm:1000x500x2001", "cublas_tf32") in names


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [("gemm:1024x512x2048", {}), ("gemm:4096x4096x4096", {}),
                                             ("gemm:3000x1000x2500", {}), ("gemm:130x264x72", {}), ("gemm:8x8x8", {}),
                                             ("gemm:1000x500x2000", dict(block_n=128, stages=3, mma_overlap=False))])
def test_tf32_is_correct_to_tf32_rounding(harness, workload, params):
    err = run_on_gpu(harness, TF32, workload, **params)
    # right to tf32's rounding, and not fp32-exact: the tensor cores did read tf32
    assert err < TF32.tolerance_for(parse_workload(workload))
    assert err > 1e-5 or workload == "gemm:8x8x8"
