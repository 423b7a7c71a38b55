"""thin_tc_gemm (gemm 35): thin 16-bit products on the tensor cores in every layout and row pitch.
It compiles for sm_90 and sm_80 without spills with the instructions of its paths (mma.sync; a
weight stored K × rows read by ldmatrix.trans; narrower cp.async where a pitch is not a multiple of
16 bytes), each operand is read the way its layout and pitch allow, the dispatcher chooses it for
thin misaligned products and not for large ones or where decode_gemm takes the product, and (on a
GPU) it is right against float64 in each layout, for M or N thin, aligned or not, with an epilogue
and a 16-bit output."""

import pytest

from schedules import ScheduleParamError, dispatch, get, parse_workload
from schedules.common import GpuSpec, use_gpu
from schedules.decode_plan import Access
from schedules.gemm_thin import ThinConfig, access_of, thin_form
from schedules.gpus import profile
from tests.helpers import build_spec, run_on_gpu

# (workload, what its PTX holds): a transposed weight with an odd pitch (4-byte cp.async, split-K), a
# K-contiguous one with an odd pitch and X transposed (2-byte loads), and a transposed weight in 16-byte
# pieces (ldmatrix.trans) with an epilogue into a 16-bit output
BUILDS = [("gemm:8x495x2471:float16", ("cp.async.ca.shared.global",)),
          ("gemm:3078x53x207:bfloat16", ("cp.async.ca.shared.global", "ld.global.nc.u16")),
          ("gemm:22x7856x97:bfloat16:tn:out=bfloat16:bias:gelu_tanh:residual",
           ("ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global"))]


@pytest.fixture(scope="module")
def built():
    return {text: build_spec(get("thin_tc_gemm"), text) for text, _ in BUILDS}


@pytest.mark.parametrize("workload, holds", BUILDS)
def test_compiles_for_sm90_without_spills_with_its_instructions(built, workload, holds):
    b, wl = built[workload], parse_workload(workload)
    p = ThinConfig().plan(wl)
    assert "for 'sm_90" in b.device.ptxas_log
    assert len(b.device.kernels) == 1 + (p.splits > 1) and all(k.spills == 0 for k in b.device.kernels)
    ptype = {"bfloat16": "bf16", "float16": "f16"}[wl.dtype]
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptype}.{ptype}.f32" in b.device.ptx
    assert all(h in b.device.ptx for h in holds)
    access = access_of(wl)
    assert ("ldmatrix" in b.device.ptx) == (access.w_trans and not access.w_odd)
    if wl.has_epilogue:  # the kernel that writes D stores the output type
        assert "nv_bfloat16" in b.device.cuda.split("extern \"C\" __global__")[-1]


def test_the_same_source_assembles_for_sm80(built):
    from reports.engine.build import compile_cuda_source

    code = compile_cuda_source(built[BUILDS[2][0]].device.cuda, "sm_80")  # ldmatrix.trans, an epilogue
    assert "mma.sync.aligned.m16n8k16" in code.ptx and "ldmatrix" in code.ptx
    assert all(k.spills == 0 for k in code.kernels)


@pytest.mark.parametrize("workload, access", [
    # M thin: the weight is B; nn stores it K × N (transposed tile), N odd: 4-byte copies from the even
    # element before each K row, realigned; X = A, K odd: 2-byte loads
    ("gemm:22x7853x97:float16", Access(w_trans=True, w_bytes=4, x_trans=False, x_bytes=2, w_odd=True)),
    # N thin in nn: the weight is A (K-contiguous, 8 bytes per row piece at K % 4 = 0), X = B stored K × N
    ("gemm:3078x53x204:float16", Access(w_trans=False, w_bytes=8, x_trans=True, x_bytes=2)),
    ("gemm:1000x24x1000:float16:tn", Access(w_trans=True, w_bytes=16, x_trans=True, x_bytes=2)),
    ("gemm:40x1000x514:bfloat16:tt", Access(w_trans=False, w_bytes=4, x_trans=True, x_bytes=2)),
    ("gemm:40x1000x512:bfloat16:nt", Access()),  # decode_gemm's own
])
def test_each_operand_is_read_as_its_layout_and_pitch_allow(workload, access):
    assert access_of(parse_workload(workload)) == access


def test_an_odd_pitch_can_be_read_by_2_byte_loads():
    wl = parse_workload("gemm:22x7853x97:float16")
    assert access_of(wl, odd_copy=2) == Access(w_trans=True, w_bytes=2, x_trans=False, x_bytes=2)
    p = ThinConfig(odd_copy=2).plan(wl)  # loads a thread waits for: two slots, four pieces per warp where K has them
    assert p.stages == 2 and not p.w_odd
    with pytest.raises(ScheduleParamError, match="odd_copy"):
        get("thin_tc_gemm").validate(wl, ThinConfig(odd_copy=3))


def test_what_is_refused_in_one_line():
    spec = get("thin_tc_gemm")
    assert thin_form(parse_workload("gemm:9954x21x61:float16")) == ("columns", 21, 9954)
    for text, word in (("gemm:65x6144x4096:bfloat16", "M ≤ 64"), ("bmm:2x16x6144x97:float16", "batch"),
                       ("gemm:16x6144x97", "float16")):
        with pytest.raises(ScheduleParamError, match=word) as err:
            spec.validate(parse_workload(text))
        assert "\n" not in str(err.value)


@pytest.fixture
def h200():
    from schedules.common import current_gpu

    before = current_gpu()
    yield use_gpu(profile("H200"))
    use_gpu(before)


# (22x7853x97 bf16 tn with a bias was here: the cp.async wgmma tiles the model now ranks first ran it in 7.8-8.0 µs,
# thin_tc_gemm in 9.1, on an H100: reports/results/NVIDIA_H100_80GB_HBM3/choices_wgmma_w_sat/)
@pytest.mark.parametrize("workload", ["gemm:9954x21x61:float16", "gemm:8x495x2471:float16"])
def test_best_fp16_chooses_it_for_thin_misaligned_products(h200, workload):
    wl = parse_workload(workload)
    choice = get("best_fp16_gemm").config().choose(wl)
    assert choice.step == "thin_tc_gemm" and "thin t" in choice.text
    text = dispatch.explain(wl, "bf16" if wl.dtype == "bfloat16" else "fp16")
    assert "chosen: thin_tc_gemm [thin t" in text


@pytest.mark.parametrize("workload", ["gemm:4096x4096x4096:float16", "gemm:16x6144x4096:bfloat16:nt",
                                      "bmm:4x16x6144x97:float16"])
def test_not_for_large_products_decode_shapes_or_batches(h200, workload):
    wl = parse_workload(workload)
    assert all(e.step != "thin_tc_gemm" for e in dispatch.rank(wl, "fp16" if wl.dtype == "float16" else "bf16"))


def test_the_model_charges_narrow_copies_and_their_latency(h200):
    """The same shape with 16-byte rows and odd ones: the odd one (the weight in 4-byte copies, X in
    2-byte loads) is estimated slower, its weight at a smaller bandwidth share."""
    est = {}
    for text in ("gemm:18x8192x2048:float16", "gemm:18x8191x2047:float16"):
        wl = parse_workload(text)
        est[text] = next(e for e in dispatch.rank(wl, "fp16") if e.step == "thin_tc_gemm")
    wide, narrow = est.values()
    assert wide.terms["copy_bytes"] == (16, 16) and narrow.terms["copy_bytes"] == (4, 2)
    assert narrow.time_us > wide.time_us and narrow.terms["efficiency"] < wide.terms["efficiency"]


def test_the_calibration_fits_its_weight_read_factors(h200):
    """Times made up from the model with a transposed weight at 0.5 of the bandwidth share and
    4-byte copies at 0.7 (8-byte ones at 0.6, below them): the fit finds the first two again, and
    gives 8-byte copies at least the 4-byte share."""
    import copy

    from reports.experiments import calibrate
    from schedules.common import GpuSpec

    gpu, base = GpuSpec(), copy.deepcopy(dispatch.CALIBRATION)
    base.pop("thin_trans_factor", None)
    base.pop("thin_copy_factor", None)
    true = copy.deepcopy(base)
    true.update(thin_trans_factor=0.5, thin_copy_factor={"4": 0.7, "8": 0.6})
    shapes = ("gemm:16x16000x2500:float16", "gemm:3x12000x1500:float16",       # transposed, 16 bytes
              "gemm:13x7001x999:float16", "gemm:30x6002x1501:float16",         # transposed, 4 bytes
              "gemm:12000x3x1500:float16", "gemm:9000x5x2500:float16:nt")      # K-contiguous, 8 bytes
    pts = []
    for text in shapes:
        wl = parse_workload(text)
        for c in dispatch.thin_candidates(wl):
            pts.append((wl, "fp16", c, dispatch.estimate(wl, c, gpu, true).time_us))
    widths = {(access_of(wl, c.config.odd_copy).w_bytes, access_of(wl, c.config.odd_copy).w_trans) for wl, _, c, _ in pts}
    assert {(16, True), (4, True), (8, False)} <= widths
    cal = copy.deepcopy(base)
    calibrate._fit_thin_factors(pts, cal, gpu)
    # one factor per token group: the groups with 16-byte transposed points (3 and 16 tokens) solved,
    # the others at the median over every group's points
    assert set(cal["thin_trans_factor"]) == {"1", "2", "4", "8"}
    assert all(v == pytest.approx(0.5, rel=0.01) for v in cal["thin_trans_factor"].values())
    assert cal["thin_copy_factor"]["4"] == pytest.approx(0.7, rel=0.01)
    assert cal["thin_copy_factor"]["8"] == cal["thin_copy_factor"]["4"]  # not below the narrower copies


def test_the_calibration_fits_the_waited_steps_and_each_groups_transposed_share(h200):
    """Times made up from the model with a waited-for block step of 0.3 µs per 8 tokens (X read
    transposed), 0.9 µs per 8 tokens where the weight is realigned on the way (an odd K), and a transposed weight at 33-64 tokens
    streaming at 1.3 times decode's share while fewer tokens keep 0.4: the fit finds each again."""
    import copy

    from reports.experiments import calibrate
    from schedules.common import GpuSpec

    gpu, base = GpuSpec(), copy.deepcopy(dispatch.CALIBRATION)
    for name in ("thin_trans_factor", "thin_copy_factor", "thin_wait_step_us"):
        base.pop(name, None)
    true = copy.deepcopy(base)
    true.update(thin_trans_factor={"1": 0.4, "2": 0.4, "4": 0.4, "8": 1.3}, thin_wait_step_us={"even_per_8_tokens": 0.3, "odd_per_8_tokens": 0.9})
    shapes = ("gemm:8000x40x6000:float16", "gemm:3000x60x12000:float16",  # X transposed, weight as stored
              "gemm:5000x50x7001:float16", "gemm:6001x44x5001:float16",   # ... the weight realigned (odd K)
              "gemm:40x4000x6000:float16", "gemm:64x2400x9000:float16",   # transposed at 33-64 tokens
              "gemm:7x3000x3000:float16", "gemm:16x16000x2500:float16")   # ... at fewer
    pts = []
    for text in shapes:
        wl = parse_workload(text)
        for c in dispatch.thin_candidates(wl):
            pts.append((wl, "fp16", c, dispatch.estimate(wl, c, gpu, true).time_us))
    cal = copy.deepcopy(base)
    calibrate._fit_thin_factors(pts, cal, gpu)
    assert cal["thin_wait_step_us"]["even_per_8_tokens"] == pytest.approx(0.3, rel=0.02)
    assert cal["thin_wait_step_us"]["odd_per_8_tokens"] == pytest.approx(0.9, rel=0.02)
    assert cal["thin_trans_factor"]["8"] == pytest.approx(1.3, rel=0.02)
    assert cal["thin_trans_factor"]["1"] == pytest.approx(0.4, rel=0.02)
    # the waited step is what makes X read transposed slow at many tokens: the estimate follows it
    wl = parse_workload("gemm:5000x50x7001:float16")
    c = dispatch.thin_candidates(wl)[0]
    assert dispatch.estimate(wl, c, gpu, cal).terms["step_us"] >= 7 * 0.9  # 50 tokens: 7 tiles


GPU_CASES = [("gemm:37x3000x1000:float16", {}),        # nn, M thin, aligned: transposed weight in 16 bytes
             ("gemm:22x7853x97:float16", {}),          # nn, M thin, odd pitches: the transposed tile realigned
             ("gemm:22x7853x97:float16", {"odd_copy": 2}),  # ... or by 2-byte loads
             ("gemm:9954x21x61:bfloat16", {}),         # nn, N thin, odd K: realigned fragments, X transposed
             ("gemm:9954x21x61:bfloat16", {"odd_copy": 2}),
             ("gemm:2000x24x1000:float16", {}),        # nn, N thin, aligned
             ("gemm:1000x40x514:float16:nt", {}),      # nt, N thin, 4-byte cp.async
             ("gemm:8x495x2476:bfloat16:nt", {}),      # nt, M thin, 8-byte cp.async, split-K
             ("gemm:40x1000x512:float16:tn", {}),      # tn, M thin, aligned: both transposed
             ("gemm:1001x17x300:bfloat16:tn", {}),     # tn, N thin, misaligned transposed weight
             ("gemm:13x3002x777:float16:tt", {"split_k": 3}),  # tt, M thin, misaligned
             ("gemm:3078x53x207:float16:tt", {}),      # tt, N thin: 4-byte transposed weight, 2-byte X
             ("gemm:8x495x2471:bfloat16:out=bfloat16:bias:silu", {}),  # split-K's sum computes it
             ("gemm:22x7853x97:bfloat16:tn:out=bfloat16:bias:gelu_tanh:residual", {})]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", GPU_CASES, ids=lambda c: str(c))
def test_right_on_the_gpu(harness, workload, params):
    err = run_on_gpu(harness, get("thin_tc_gemm"), workload, **params)
    tol = get("thin_tc_gemm").tolerance_for(parse_workload(workload))
    assert err < max(tol, 1e-5), f"{workload} {params}: relative error {err:.3g}"


@pytest.mark.gpu
def test_an_inf_in_the_next_row_stays_out_of_an_odd_pitch_row():
    """K odd and the weight K-contiguous (A of a thin-N nn product, stored M×K, 61 elements a row):
    the 4-byte copy that holds an even row's last element would also hold the next row's first, which
    the mma multiplies by X's zero padding; an inf there must not turn the row's outputs into NaN."""
    import torch

    from reports.engine.kernel import compile_kernel

    k = compile_kernel("thin_tc_gemm", "gemm:300x20x61:float16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(300, 61, dtype=torch.float16, device="cuda", generator=gen)
    b = torch.randn(61, 20, dtype=torch.float16, device="cuda", generator=gen)
    a[1::2, 0] = float("inf")  # the first element of every odd row: right after an even row's last
    out = k(a, b)
    torch.cuda.synchronize()
    even = out[0::2].double()
    want = a[0::2].double() @ b.double()
    assert torch.isfinite(even).all()
    assert torch.allclose(even, want, rtol=0, atol=1e-3 * float(want.abs().max()))


def test_sweeps_of_two_gpus_are_fitted_together_each_point_on_its_own(tmp_path):
    """Two sweeps written as results folders, one made up from the model on an H100 and one on an
    H200 with the same constants (a waited-for step of 0.3 µs per 8 tokens, 33-64 tokens transposed at 1.3): read
    together (load_sweeps), each point is estimated on the GPU that measured it, so the fit finds the
    constants again; estimated on one GPU for both, it could not."""
    import copy
    import dataclasses

    from reports.engine import results as R
    from reports.experiments import calibrate

    truth = copy.deepcopy(dispatch.CALIBRATION)
    truth.update(thin_trans_factor={"1": 0.4, "2": 0.4, "4": 0.4, "8": 1.3}, thin_wait_step_us={"even_per_8_tokens": 0.3, "odd_per_8_tokens": 0.9})
    dirs = []
    for name, shapes in (("H100", ("gemm:8000x40x6000:float16", "gemm:40x4000x6000:float16")),
                         ("H200", ("gemm:3000x60x12000:float16", "gemm:64x2400x9000:float16"))):
        gpu = profile(name)
        rows = []
        for text in shapes:
            wl = parse_workload(text)
            for c in dispatch.thin_candidates(wl):
                rows.append({"id": f"{text}|{c.config}", "workload": text, "name": c.step, "status": "ok",
                             "params": calibrate.params_of(c.step, c.config), "key": c.key, "family": c.family,
                             "sweep_precision": "fp16", "time_ms": dispatch.estimate(wl, c, gpu, truth).time_us / 1e3})
        meta = {"gpu_spec": dataclasses.asdict(gpu), "ceilings": {"copy_gbps": gpu.memory_gbps},
                "provenance": {"gpu": gpu.name, "commit": "abc1234", "date": "2026-11-28"}}
        dirs.append(str(tmp_path / name))
        R.write_results(R.frame(rows, meta), dirs[-1])
    df = calibrate.load_sweeps(dirs)
    assert [g["name"] for g in df.attrs["sweep_gpus"]] == [profile("H100").name, profile("H200").name]
    pts = calibrate.points(df, [GpuSpec(**g) for g in df.attrs["sweep_gpus"]])
    assert {p[4].name for p in pts} == {profile("H100").name, profile("H200").name}
    cal = copy.deepcopy(dispatch.CALIBRATION)
    calibrate._fit_thin_factors(pts, cal, None)
    assert cal["thin_wait_step_us"]["even_per_8_tokens"] == pytest.approx(0.3, rel=0.02)
    assert cal["thin_trans_factor"]["8"] == pytest.approx(1.3, rel=0.02)
    assert calibrate.regret(pts, truth, None)["shapes"] == 4  # a shape per GPU
    one = copy.deepcopy(dispatch.CALIBRATION)
    calibrate._fit_thin_factors([p[:4] for p in pts], one, profile("H200"))  # every point on the H200
    assert one["thin_trans_factor"]["8"] != pytest.approx(1.3, rel=0.02)
