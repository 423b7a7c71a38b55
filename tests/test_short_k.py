"""short_k_gemm (gemm 34): a short K with a large output, where storing C is the work. Its interior
blocks store C as unguarded 16-byte vectors, its CUDA compiles for sm_90, it matches float64 on the
GPU, the dispatcher chooses it for a short K and not for a long one, and a K over its limit is
refused in one line."""

import copy
import re

import pytest

from schedules import dispatch, get, parse_workload
from schedules.dispatch_short_k import SHORT_K_TILES
from schedules.errors import ScheduleParamError

from tests.helpers import build_spec, run_on_gpu

# M = 1000 is not a multiple of the blocks' 32 or 128 rows; N = 512 is one of their 128 columns
WORKLOAD = "gemm:1000x512x16"


def _cuda(name, workload, **params):
    return build_spec(get(name), workload, **params).device.cuda


@pytest.fixture(scope="module")
def short_k_built():
    """Built as every kernel of the lab is: TVM's CUDA, compiled by nvcc for sm_90 with ptxas's report."""
    return build_spec(get("short_k_gemm"), WORKLOAD)


@pytest.fixture(scope="module")
def short_k_cuda(short_k_built):
    return short_k_built.device.cuda


def unguarded_stores(cuda: str, out: str = "C") -> list[str]:
    """The stores into ``out`` that no per-thread bounds test encloses: no enclosing ``if`` of the
    kernel (found by the generated code's 2-space nesting) tests a threadIdx (a test of blockIdx
    alone, the partition into interior and edge blocks, is no per-element test)."""
    lines = cuda[cuda.index("main_kernel("):].splitlines()
    found = []
    for n, line in enumerate(lines):
        if not re.match(rf"\s*\*?\(?\w*\*?\)?\(?{out}_ptr", line.strip()) and f"({out}_ptr +" not in line.split("=")[0]:
            continue
        depth, tests = len(line) - len(line.lstrip()), []
        for above in reversed(lines[:n]):
            indent = len(above) - len(above.lstrip())
            if above.strip() and indent < depth:
                depth = indent
                tests.append(above.strip())
        if not any(t.startswith(("if (", "} else")) and "threadIdx" in t for t in tests):
            found.append(line.strip())
    return found


def test_interior_blocks_store_unguarded_vectors(short_k_cuda):
    """The blocks of whole block-rows store C as float4s under no bounds test; warp_tiled_gemm on
    the same product tests every row it stores, in every block."""
    stores = unguarded_stores(short_k_cuda)
    assert stores and all(s.startswith("*(float4*)(C_ptr") for s in stores)
    assert "if (((int)blockIdx.y) < 31) {" in short_k_cuda  # 1000 rows: 31 whole blocks of 32
    assert "__syncthreads" not in short_k_cuda and "__shared__" not in short_k_cuda
    assert unguarded_stores(_cuda("warp_tiled_gemm", WORKLOAD)) == []


def test_a_16_bit_output_leaves_as_16_byte_vectors():
    cuda = _cuda("short_k_gemm", "gemm:1000x512x16:float16:out=float16:bias", thread_n=8, block_n=256)
    stores = unguarded_stores(cuda, "D")
    assert stores and all(s.startswith("*(uint4*)(D_ptr") or s.startswith("*(half8*)(D_ptr") for s in stores), stores


def test_compiles_for_sm_90(short_k_built):
    kernel = short_k_built.kernel
    assert short_k_built.device.cubin and kernel.registers > 0
    assert kernel.spill_store_bytes == 0 and kernel.shared_bytes == 0 and kernel.barriers == 0


def test_padded_fp16_loads_are_predicated_not_branches():
    # the guarded loads of padded fp16 operands end in a float16 zero, which TVM writes as
    # __float2half_rn(0.0f): inline cvt assembly that kept each load a branch (650 of them at
    # 229x4755x36); compiled with the constants folded to their bits, the loads are predicated
    b = build_spec(get("short_k_gemm"), "gemm:229x4755x36:float16", block_m=32, block_n=256, thread_m=4, thread_n=8)
    assert "__float2half_rn(" not in b.device.cuda and "__ushort_as_half((unsigned short)0x0000U)" in b.device.cuda
    assert b.device.ptx.count("bra.uni") < 10 and b.device.ptx.count("@%p") >= 100


@pytest.mark.parametrize("value", [0.0, -0.0, 0.5, -3.0, 65504.0, 2.0 ** -24, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                                   1e-9, 70000.0])
def test_folded_half_constants_are_the_same_values(value):
    import numpy as np

    from tuning.cuda_compile import fold_half_constants

    text = fold_half_constants(f"x = __float2half_rn({float(np.float32(value)).hex()}f/*{value}*/);")
    bits = int(re.search(r"0x([0-9a-f]{4})U", text).group(1), 16)
    with np.errstate(over="ignore"):
        want = np.float16(np.float32(value))
    # round to nearest even, as __float2half_rn: ties at 1 + 2^-11 go down, at 1 + 3 * 2^-11 up; overflow to inf
    assert str(np.array([bits], np.uint16).view(np.float16)[0]) == str(want)


def test_a_k_over_the_limit_is_refused_in_one_line():
    with pytest.raises(ScheduleParamError) as err:
        get("short_k_gemm").validate(parse_workload("gemm:1024x1024x65"))
    assert "K ≤ 64" in str(err.value) and "\n" not in str(err.value)
    assert get("short_k_gemm").config_cls.scope_refusal(parse_workload("gemm:1024x1024x65"))


def test_the_dispatcher_chooses_it_for_a_short_k_only():
    assert dispatch.choose(parse_workload("gemm:8192x8192x16"), "fp32")[0] == "short_k_gemm"
    assert dispatch.choose(parse_workload("gemm:4096x4096x4096"), "fp32")[0] != "short_k_gemm"
    assert not dispatch.short_k_candidates(parse_workload("gemm:4096x4096x65"))


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [
    (WORKLOAD, {}),
    ("gemm:1001x777x13:tn", {}),  # a row of C not 16-byte aligned: narrower stores, a partial block-column
    ("bmm:3x100x60x64:nt", dict(block_m=64, thread_m=8)),
    ("gemm:1000x512x16:float16:out=float16:bias:relu", dict(thread_n=8, block_n=256)),
])
def test_matches_float64(harness, workload, params):
    assert run_on_gpu(harness, get("short_k_gemm"), workload, **params) < 1e-4


def test_the_calibration_fits_its_store_efficiency():
    """The sweep measures every short_k_gemm tile on its short-K shapes, and the fit recovers the
    store efficiency from times the model would give at another one."""
    from reports.experiments import calibrate
    from schedules.common import GpuSpec

    jobs = calibrate.calibration_jobs(shapes=[(8192, 8192, 16)], precisions=("fp32",))
    assert {j["extra"]["key"] for j in jobs if j["name"] == "short_k_gemm"} == {
        f"short_k {bm}x{bn} t{tm}x{tn}" for bm, bn, tm, tn in SHORT_K_TILES}
    gpu, base = GpuSpec(), copy.deepcopy(dispatch.CALIBRATION)
    # tiles as fast as the tiled kernels' 4x4 (0.6), whatever the packaged fit says: the stores are
    # then the whole cost of these shapes, the points the fit solves on
    base["efficiency"].update({f"short_k {bm}x{bn} t{tm}x{tn}": 0.6 for bm, bn, tm, tn in SHORT_K_TILES})
    true = copy.deepcopy(base)
    true["short_k_store_efficiency"] = 0.7
    pts = [(wl, "fp32", c, dispatch.estimate(wl, c, gpu, true).time_us)
           for wl in (parse_workload("gemm:8192x8192x16"), parse_workload("gemm:6000x3000x8"))
           for c in dispatch.short_k_candidates(wl)]
    cal = copy.deepcopy(base)
    calibrate._fit_short_k_store(pts, cal, gpu)
    assert cal["short_k_store_efficiency"] == pytest.approx(0.7, abs=0.005)


def test_the_model_charges_its_walk_over_k_in_waves():
    """A block waits for each K step's loads (k_step_us per 4 k values), and its blocks run in
    waves of what one SM holds at the tile's registers: with a few waves and K = 64 that walk, not
    the store, sets the time."""
    from schedules.common import GpuSpec
    from schedules.dispatch_short_k import short_k_registers, short_k_waves
    from schedules.gemm_short_k import ShortKConfig

    gpu, cal = GpuSpec(), dispatch.CALIBRATION
    wide = ShortKConfig(block_m=32, block_n=256, thread_m=4, thread_n=8)
    assert short_k_registers(wide) == 80  # 3 blocks of 256 threads per SM: 396 a wave on 132 SMs
    assert short_k_waves(parse_workload("gemm:1000x4000x20"), wide, gpu) == 2  # 32 × 16 = 512 blocks
    assert short_k_waves(parse_workload("gemm:1000x4000x20"), wide, gpu, batches=2) == 3
    wl = parse_workload("gemm:100x5000x64")
    for c in dispatch.short_k_candidates(wl):
        e = dispatch.estimate(wl, c, gpu, cal)
        walk = e.terms["waves"] * (cal["fill_us"] + 16 * cal["k_step_us"])
        assert e.terms["latency_us"] == pytest.approx(walk)
        assert e.time_us == pytest.approx(cal["launch_us"] + walk)  # its stores take about a µs
        short = dispatch.estimate(parse_workload("gemm:100x5000x8"), c, gpu, cal)
        assert short.terms["latency_us"] == pytest.approx(e.terms["waves"] * (cal["fill_us"] + 2 * cal["k_step_us"]))
    assert dispatch.choose(wl, "fp32", gpu)[0] != "short_k_gemm"


def test_the_occupancy_reads_the_sweeps_registers_per_tile_input_width_and_k():
    """The blocks an SM holds come from what ptxas reported in the sweep (the median per thread tile,
    input width, and K up to two K steps or more: nvcc hoists the unrolled K's loads), as the SIMT
    tiles': an fp32 4 × 8 tile the formula put at 80 registers (3 blocks of 256 threads per SM) ran
    at 121-198 on large drawn outputs, one or two blocks per SM, and took 1.34x the model's time
    (3917x10903x57 on an H100). 16-bit inputs have their own medians; a tile the sweep never built
    keeps the formula."""
    import pandas as pd

    from reports.experiments.calibrate import _sweep_registers
    from schedules.common import GpuSpec
    from schedules.dispatch_short_k import short_k_registers, short_k_waves
    from schedules.gemm_short_k import ShortKConfig

    wide = {"block_m": 32, "block_n": 256, "thread_m": 4, "thread_n": 8}
    rows = [{"family": "short_k", "name": "short_k_gemm", "params": wide, "dtype": dtype, "k": k, "registers": r}
            for dtype, k, regs in (("float32", 32, (80, 104, 122, 128)), ("float32", 5, (56, 64)),
                                   ("float16", 27, (64, 64, 79)))
            for r in regs]
    regs = _sweep_registers(pd.DataFrame(rows))
    assert regs == {"short_k t4x8 deep": 120, "short_k t4x8": 64, "short_k t4x8 16-bit deep": 64}
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal["regs"] = regs
    cfg, gpu = ShortKConfig(**wide), GpuSpec()
    assert (short_k_registers(cfg, cal, 4, 57), short_k_registers(cfg, cal, 4, 8), short_k_registers(cfg, cal, 2, 57),
            short_k_registers(cfg, cal, 2, 8), short_k_registers(cfg)) == (120, 64, 64, 80, 80)  # unswept: the formula
    wl, half = parse_workload("gemm:3917x10903x57"), parse_workload("gemm:3917x10903x57:float16")
    # 123 x 43 = 5289 blocks: 2 per SM at 120 registers (21 waves of 264), 3 at 80 (14 of 396), 4 at 64 (11 of 528)
    assert (short_k_waves(wl, cfg, gpu, cal=cal), short_k_waves(wl, cfg, gpu), short_k_waves(half, cfg, gpu, cal=cal)) \
        == (21, 14, 11)
    c = next(c for c in dispatch.short_k_candidates(wl) if c.key == "short_k 32x256 t4x8")
    e = dispatch.estimate(wl, c, gpu, cal)
    assert e.terms["waves"] == 21 and e.terms["latency_us"] == pytest.approx(21 * (cal["fill_us"] + 15 * cal["k_step_us"]))


def test_16_bit_inputs_pay_their_widening_at_a_quarter_of_the_fma_rate():
    """Each thread converts its fragments of A and B at every k: M·N·K·(1/thread_m + 1/thread_n)
    conversions at the time of 4 flops each. The fp16 estimate is the fp32 one (less the bytes) plus
    that; 732 × 6210 × 45 fp16 ran 34.1 µs on short_k_gemm (fp32 inputs: 23.7) and 19.0 on the TMA
    kernel with padded copies (H200), which the model chose then; short_k_tc_gemm, which it chooses now, ran 14.2
    (19.6 the TMA kernel, 17.1 cuBLAS, in the same run: reports/results/NVIDIA_H200/short_k_tc)."""
    from schedules import gpus
    from schedules.dispatch_short_k import SHORT_K_CONVERT_FLOPS

    gpu, cal = gpus.profile("H200"), dispatch.CALIBRATION
    half, single = parse_workload("gemm:732x6210x45:float16"), parse_workload("gemm:732x6210x45")
    for c in (c for c in dispatch.short_k_candidates(half) if c.family == "short_k"):
        e = dispatch.estimate(half, c, gpu, cal)
        cfg = c.config
        converts = 732 * 6210 * 48 * (1 / cfg.thread_m + 1 / cfg.thread_n)
        assert e.terms["convert_us"] == pytest.approx(SHORT_K_CONVERT_FLOPS * converts / (cal["fp32_sm_tflops"] * 1e6 * gpu.sms))
        assert dispatch.estimate(single, c, gpu, cal).terms["convert_us"] == 0.0
    ranked = dispatch.rank(half, "fp16", gpu)
    assert ranked[0].step == "short_k_tc_gemm"
    assert next(e for e in ranked if e.candidate.family != "short_k_tc").step == "persistent_gemm"


def test_the_sweep_class_of_rows_not_whole_sectors_times_every_tile():
    """``--part "rows of C"``: large outputs over a short K whose rows of C are not whole 32-byte sectors (an fp32
    C with N % 8 != 0), every short_k_gemm tile timed on each."""
    from reports.experiments import calibrate

    shapes = calibrate.calibration_shapes("rows of C")
    assert shapes and all(n % 8 and k <= 64 and m * n >= 20_000_000 for m, n, k in shapes)
    jobs = calibrate.calibration_jobs(part="rows of C", precisions=("fp32",))
    for m, n, k in shapes:
        assert {j["extra"]["key"] for j in jobs if j["workload"] == f"gemm:{m}x{n}x{k}" and j["name"] == "short_k_gemm"} \
            == {f"short_k {bm}x{bn} t{tm}x{tn}" for bm, bn, tm, tn in SHORT_K_TILES}
