"""short_k_tc_gemm (gemm 36): short-K 16-bit products on the tensor cores in one pass. Its CUDA
compiles for sm_80 and sm_90a without spills, its PTX holds exactly the mmas of one pass over the
padded K (no K loop), it refuses what it does not take in one line, and it matches float64 on the GPU
in every layout, both 16-bit types and with epilogues."""

import re

import pytest

from schedules import get, parse_workload
from schedules.errors import ScheduleParamError

from tests.helpers import build_spec, cached_build, run_on_gpu


@pytest.mark.parametrize("workload, params, mmas", [
    ("gemm:6113x8145x27:float16", {}, 1 * 8 * 2),                                     # K 27 -> 32: two k16 steps
    ("gemm:1000x777x40:bfloat16:tn", {"block_m": 128, "block_n": 128}, 2 * 8 * 3),    # 40 -> 48
    ("gemm:300x500x16:float16:nt:out=bfloat16:bias:gelu", {"block_n": 256, "warps_m": 2, "warps_n": 4}, 2 * 8 * 1),
])
def test_the_ptx_is_one_pass_of_mmas_without_spills(workload, params, mmas):
    built = cached_build("short_k_tc_gemm", workload, **params)
    ptx = built.device.ptx
    kinds = set(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(\w+)\.", ptx))
    assert kinds == {"bf16" if parse_workload(workload).dtype == "bfloat16" else "f16"}
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16", ptx)) == mmas  # the whole K unrolled, once
    (kernel,) = built.device.kernels
    assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0


def test_it_compiles_for_ampere_too():
    from reports.engine.build import build_named

    built = build_named("short_k_tc_gemm", "gemm:999x1001x33:bfloat16:tt:out=float16:residual", {}, arch="sm_80")
    assert "mma.sync.aligned.m16n8k16" in built[-1].device.ptx


def test_what_it_does_not_take_is_refused_in_one_line():
    spec = get("short_k_tc_gemm")
    for workload, words in [("gemm:1024x1024x65:float16", "K ≤ 64"), ("gemm:1024x1024x32", "float16 or bfloat16"),
                            ("bmm:4x256x256x32:float16", "batch")]:
        with pytest.raises(ScheduleParamError) as e:
            spec.validate(parse_workload(workload))
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(ScheduleParamError, match="multiple of 16"):
        build_spec(spec, "gemm:1000x1000x32:float16", block_m=48)


GPU_CASES = [("gemm:6113x8145x27:float16", {}),            # rows of C not whole sectors, odd K
             ("gemm:1000x777x40:bfloat16:tn", {"block_m": 128, "block_n": 128}),
             ("gemm:777x1000x64:float16:nt", {"block_n": 256, "warps_m": 2, "warps_n": 4}),
             ("gemm:333x555x1:float16:tt", {}),                # K of one
             ("gemm:1x1x1:bfloat16", {}),
             ("gemm:70x130x17:float16:out=bfloat16:bias:gelu", {}),
             ("gemm:500x300x31:bfloat16:nt:out=bfloat16:bias:silu:residual", {}),
             ("gemm:2047x129x48:float16:out=float16:alpha=0.5:beta=2:residual", {})]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", GPU_CASES, ids=lambda c: str(c))
def test_right_on_the_gpu(harness, workload, params):
    err = run_on_gpu(harness, get("short_k_tc_gemm"), workload, **params)
    tol = get("short_k_tc_gemm").tolerance_for(parse_workload(workload))
    assert err < max(tol, 1e-5), f"{workload} {params}: relative error {err:.3g}"


def test_the_dispatcher_takes_it_for_short_k_16_bit_products_whose_rows_are_not_whole_vectors():
    """Its model (schedules.dispatch_short_k: launch + fill + pass + store + load) against the others': chosen for
    6113 × 8145 × 27 fp16 (cuBLAS 87.0 µs; it ran 59.9-62.4, the TMA kernel the model chose before 133.2), not
    for 4096 × 4096 × 64 (rows of whole 16 bytes: the TMA kernel ran 22.3, it 33.3), nor for fp32 inputs, K over
    64, or fewer blocks than SMs."""
    from schedules import dispatch
    from schedules.gpus import profile

    h200 = profile("H200")

    def chosen(text, precision="fp16"):
        return dispatch.choose(parse_workload(text), precision, h200)[0]

    assert chosen("gemm:6113x8145x27:float16") == "short_k_tc_gemm"
    assert "chosen: short_k_tc_gemm [short_k_tc " in dispatch.explain(parse_workload("gemm:6113x8145x27:float16"), "fp16")
    assert chosen("gemm:9677x8909x23:bfloat16:tn", "bf16") == "short_k_tc_gemm"
    for text, precision in [("gemm:4096x4096x64:float16", "fp16"), ("gemm:6113x8145x27", "fp32"),
                            ("gemm:6113x8145x65:float16", "fp16"), ("gemm:300x300x20:float16", "fp16")]:
        assert chosen(text, precision) != "short_k_tc_gemm", text
    est = next(e for e in dispatch.rank(parse_workload("gemm:6113x8145x27:float16"), "fp16", h200)
               if e.candidate.step == "short_k_tc_gemm")
    terms = est.terms
    assert est.time_us == pytest.approx(dispatch.CALIBRATION["launch_us"] + dispatch.CALIBRATION["fill_us"]
                                        + terms["pass_us"] + terms["store_us"] + terms["l2_us"])
    # every block loads its whole tiles (K padded to 16): a 3-column output pays for 128 columns of B per block
    thin = parse_workload("gemm:14693x3x38:float16")
    cand = next(c for c in dispatch.candidates(thin, "fp16", h200) if c.key == "short_k_tc 64x128")
    assert dispatch.estimate(thin, cand, h200).terms["l2_us"] == pytest.approx(
        2 * 48 * (64 + 128) * 230 / (h200.memory_gbps * 1e3 * terms["load_efficiency"]))
    # a 16-bit output halves the bytes stored
    half = next(e for e in dispatch.rank(parse_workload("gemm:6113x8145x27:float16:out=float16"), "fp16", h200)
                if e.candidate.key == est.candidate.key)
    assert half.terms["store_us"] < 0.55 * terms["store_us"]


def test_the_calibration_sweep_times_every_tile_and_the_fit_recovers_its_three_constants():
    """The short-K class of the calibration sweep measures each short_k_tc_gemm tile on its 16-bit shapes, and
    times made up from the model with known constants give them back (the store and load shares and a block's pass)."""
    import copy

    from reports.experiments.calibrate import calibration_jobs, calibration_shapes
    from reports.experiments.fit_short_k_tc import fit_short_k_tc
    from schedules import dispatch
    from schedules.dispatch_short_k import SHORT_K_TC_TILES
    from schedules.gpus import profile

    h200 = profile("H200")
    jobs = calibration_jobs(shapes=calibration_shapes("short K"), precisions=("fp16",), gpu=h200)
    timed = {f"{j['params'].get('block_m', 64)}x{j['params'].get('block_n', 128)}"
             for j in jobs if j["name"] == "short_k_tc_gemm"}
    assert timed == {f"{bm}x{bn}" for bm, bn, _, _ in SHORT_K_TC_TILES}
    truth = copy.deepcopy(dispatch.CALIBRATION)
    truth.update(short_k_tc_store_efficiency=0.9, short_k_tc_load_efficiency=0.6, short_k_tc_pass_us=2.5)
    points = []
    for text in ("gemm:6113x8145x27:float16", "gemm:3001x2003x31:float16", "gemm:14693x3x38:float16",
                 "gemm:4096x4096x64:bfloat16:nt", "gemm:2000x3000x4:float16:out=float16"):
        wl = parse_workload(text)
        for c in dispatch.candidates(wl, "fp16" if wl.dtype == "float16" else "bf16", h200):
            if c.family == "short_k_tc":
                points.append((wl, c, dispatch.estimate(wl, c, h200, truth).time_us, h200))
    fitted = fit_short_k_tc(points, dispatch.CALIBRATION)
    assert fitted == pytest.approx({"short_k_tc_store_efficiency": 0.9, "short_k_tc_load_efficiency": 0.6,
                                    "short_k_tc_pass_us": 2.5})
    assert fit_short_k_tc(points[:5], dispatch.CALIBRATION) == {}  # too few points: the defaults stand
