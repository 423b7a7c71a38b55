"""best_fp8_gemm and the FP8 model (schedules.dispatch_fp8): the choice is a valid FP8 configuration for
each scaling and shape; a K that is not a multiple of 16 is taken by padding A and B along K (the
copy kernels in the generated CUDA, their cost in the model, the padded product equal to the
unpadded one in float64); the model spreads a wide, shallow product over the SMs; the choice says
when no FP8 calibration was fitted; the calibration sweep's FP8 part and its fit; one-line refusals;
and on a GPU, the choice against float64."""

import copy
import dataclasses

import numpy as np
import pytest

from schedules import ScheduleParamError, dispatch, dispatch_fp8, get, parse_workload
from schedules.common import GpuSpec
from schedules.fp8_block_scales import scales_by_chunk, scales_by_tma
from schedules.gemm_fp8 import Fp8BlockConfig, Fp8TmaConfig
from schedules.gpus import PROFILES
from schedules.reference import reference
from tests.helpers import build_spec, run_on_gpu

BEST = "best_fp8_gemm"
MISALIGNED = "gemm:1000x520x1000:float8_e4m3fn:nt:scale=row:out=bfloat16"  # K = 1000: rows of 1000 bytes
H200 = PROFILES["H200"]


@pytest.fixture(scope="module")
def padded():
    return build_spec(get(BEST), MISALIGNED)


@pytest.mark.parametrize("workload, step, cls", [
    ("gemm:4096x4096x4096:float8_e4m3fn:nt:out=bfloat16", "fp8_tma_gemm", Fp8TmaConfig),
    ("gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row", "fp8_tma_gemm", Fp8TmaConfig),
    ("gemm:64x64x64:float8_e5m2:nt:out=float16:bias", "fp8_tma_gemm", Fp8TmaConfig),
    ("gemm:8192x8192x8192:float8_e4m3fn:nt:scale=block:out=bfloat16", "fp8_block_scaled_gemm", Fp8BlockConfig),
    ("gemm:300x200x1008:float8_e4m3fn:nt:scale=block", "fp8_block_scaled_gemm", Fp8BlockConfig),
])
def test_the_choice_is_a_valid_fp8_configuration(workload, step, cls):
    wl = parse_workload(workload)
    res = get(BEST).resolve(wl)
    assert res.step.name == step and type(res.step_config) is cls and not res.step_config.pad_k
    get(step).validate(wl, res.step_config)  # builds for this GPU, within its limits
    assert res.chosen.startswith(step) and "stages" in res.chosen
    ranked = dispatch_fp8.rank(wl)
    assert (ranked[0].step, ranked[0].config) == (step, res.step_config)
    assert all(e.step == step for e in ranked) and len(ranked) == (4 if cls is Fp8BlockConfig else 12)


def test_a_misaligned_k_is_padded_along_k_and_the_copy_is_counted(padded):
    wl = parse_workload(MISALIGNED)
    res = get(BEST).resolve(wl)
    assert res.step.name == "fp8_tma_gemm" and res.step_config.pad_k and "K padded to 16" in res.chosen
    assert res.step_config.copied(wl) == (True, True)
    # the model: both copies (read K, write 1008 per row) with their launches, in every candidate's time
    est = dispatch_fp8.rank(wl)[0]
    copy_us = est.terms["pad_us"]
    assert copy_us == pytest.approx(2 * dispatch.CALIBRATION["launch_us"] + 2 * 1000 * (1000 + 520) / 4000e3)
    assert est.time_us > copy_us + dispatch.CALIBRATION["launch_us"]
    aligned = parse_workload(MISALIGNED.replace("x1000:", "x1008:", 1))
    assert dispatch_fp8.rank(aligned)[0].terms["pad_us"] == 0 and not get(BEST).resolve(aligned).step_config.pad_k
    # the kernel: two copy kernels into rows of 1008 bytes (zero past K), the product read from them
    kernels = {k.name: k for k in padded.device.kernels}
    assert len(kernels) == 3 and all(k.spills == 0 for k in kernels.values())
    cuda = padded.device.cuda
    assert "main_kernel(__nv_fp8_e4m3* __restrict__ A_ptr, uint4* __restrict__ A_pad_ptr)" in cuda
    assert "main_kernel_1(__nv_fp8_e4m3* __restrict__ B_ptr, uint4* __restrict__ B_pad_ptr)" in cuda
    assert "% 63) < 62)" in cuda and "__nv_fp8_e4m3(0x0p+0f" in cuda  # 63 16-byte pieces a row, the last half zero
    bm = res.step_config.block_m  # the A box: 128 of K by the tile's rows
    assert f"T.tensormap_encode_tiled(A_map, A_pad.data, 1008, 1000, 1008, 128, {bm}" in padded.scheduled
    assert "T.tensormap_encode_tiled(B_map, B_pad.data, 1008, 520, 1008, 128, 64" in padded.scheduled
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in padded.device.ptx


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_zero_padding_along_k_leaves_the_float64_product_unchanged(scaling):
    """The padded kernel's premise, on the CPU: the product of the copies (K = 1000 zero-padded to 1008,
    the same scales: ⌈1008/128⌉ = ⌈1000/128⌉ blocks) is the workload's float64 reference, exactly."""
    from reports.engine.measure import numpy_dtype

    wl = parse_workload(f"gemm:40x136x1000:float8_e4m3fn:b=float8_e5m2:nt:scale={scaling}:out=bfloat16:bias")
    padded_wl = parse_workload(str(wl).replace("x1000:", "x1008:", 1))
    rng = np.random.default_rng(5)
    ins = [rng.uniform(-1, 1, size=s).astype(numpy_dtype(d)) for s, d in wl.arg_shapes()[:-1]]
    a, b = (np.pad(x, ((0, 0), (0, 8))) for x in ins[:2])
    assert a.shape == (40, 1008) and not a[:, 1000:].view(np.uint8).any()  # +0.0: zero bytes, as the copy writes
    assert [s for s, _ in padded_wl.arg_shapes()[2:-1]] == [s for s, _ in wl.arg_shapes()[2:-1]]
    np.testing.assert_array_equal(reference(padded_wl, [a, b, *ins[2:]]), reference(wl, ins))


def test_the_model_spreads_a_wide_shallow_product_over_the_sms():
    """256 × 8192: 128 × 256 tiles make 64 work units, half the 132 SMs; 128 × 128 ones 128. The
    model must take the second at about half the time; at 8192³, where every tile fills whole rounds,
    the larger tile (more multiply-adds per byte) wins."""
    wide = parse_workload("gemm:256x8192x4096:float8_e4m3fn:nt:out=bfloat16")
    ranked = [e for e in dispatch_fp8.rank(wide, H200) if not e.config.pingpong]  # the cooperative tiles
    best = ranked[0]
    assert (best.config.block_m, best.config.block_n) == (128, 128) and best.terms["blocks"] == 128
    big = next(e for e in ranked if (e.config.block_m, e.config.block_n, e.config.cluster_m) == (128, 256, 1))
    assert big.terms["blocks"] == 64 and 1.6 < big.time_us / best.time_us < 2.2
    square = next(e for e in dispatch_fp8.rank(parse_workload("gemm:8192x8192x8192:float8_e4m3fn:nt:out=bfloat16"), H200)
                  if not e.config.pingpong)
    assert (square.config.block_m, square.config.block_n) == (128, 256)
    # FP8 at twice the 16-bit rate: the same shape's compute-bound time is about half fp16's
    fp16 = dispatch.rank(parse_workload("gemm:8192x8192x8192:float16"), "fp16", H200)[0]
    assert 0.45 < square.terms["compute_us"] / fp16.terms["compute_us"] < 0.6


def test_pingpong_hides_all_but_the_last_epilogue_behind_the_other_consumers_mainloop():
    """A ping-pong candidate's compute: n tiles of max(mainloop, (mainloop + epilogue) / 2) plus the
    last epilogue; the epilogue is pingpong_epilogue times the cooperative store of the tile; an
    unmeasured ping-pong tile runs at its cooperative twin's efficiency (128 × N: the same m64nN
    wgmmas); a consumer holds the whole tile's accumulators (block scales: two sets)."""
    c8 = dispatch_fp8.constants()
    ranked = dispatch_fp8.rank(parse_workload("gemm:4096x4096x4096:float8_e4m3fn:nt:out=bfloat16"), H200)
    pp = next(e for e in ranked if e.candidate.key == "fp8 64x256 pp")
    coop = next(e for e in ranked if e.candidate.key == "fp8 128x256")
    t = pp.terms
    assert t["pingpong"] and t["waves"] == 8 and t["acc_regs"] == 128 and t["consumer_regs"] == 232
    assert t["efficiency"] == c8["efficiency"].get("fp8 64x256 pp", coop.terms["efficiency"])
    assert t["epilogue_us"] == pytest.approx(c8["pingpong_epilogue"] * coop.terms["epilogue_us"] / 2)  # half the tile
    mainloop = 2 * 64 * 256 * 4096 / (t["peak_sm_tflops"] * 1e6 * t["efficiency"])
    assert t["epilogue_us"] < mainloop  # so each but the last hides entirely
    fill = dispatch.CALIBRATION["fill_us"]
    assert t["compute_us"] == pytest.approx(fill + 8 * mainloop + t["epilogue_us"])
    assert t["epilogue_hidden_us"] == pytest.approx(7 * t["epilogue_us"]) and coop.terms["epilogue_hidden_us"] == 0
    block = dispatch_fp8.rank(parse_workload("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16"), H200)
    bpp = next(e for e in block if e.config.pingpong)
    assert bpp.candidate.key.startswith("fp8_block 64x128") and bpp.terms["acc_regs"] == 2 * 64
    assert bpp.terms["efficiency"] == pytest.approx(dispatch_fp8.efficiency_of(bpp.candidate, c8)
                                                    * c8["pingpong_block_promotion"])
    assert "ping-pong consumers" in dispatch_fp8.describe(pp.candidate)


@pytest.mark.parametrize("shape, tile, blocks", [
    ("4096x4096x4096", (128, 256, 1), 128),  # 512 tiles: 4 rounds on 132 SMs as on 128
    ("3072x3072x4096", (128, 128, 1), 116),  # 576 tiles: 5 rounds, 116 blocks (4 take 4 tiles)
    ("4096x4096x4096", (256, 128, 2), 128),  # 2x1 clusters: 256 cluster units on 66 clusters, 64 clusters
    ("4224x4096x4096", (128, 256, 1), 0),  # 528 tiles = 4 x 132: every SM in every round
    ("256x8192x4096", (128, 128, 1), 0),  # 128 tiles: one round, the grid is the tiles already
])
def test_tensor_and_row_candidates_launch_the_fewest_blocks_that_keep_the_rounds(shape, tile, blocks):
    """balanced_blocks: per tensor or row, a candidate's grid is the fewest blocks (whole clusters) that
    take the work units in as many rounds as the whole GPU would, so none idles in the last round; the
    model's time is unchanged by it (it counts rounds); block scales keep every SM (measured: no gain)."""
    for scaling in ("", ":scale=row"):
        wl = parse_workload(f"gemm:{shape}:float8_e4m3fn:nt{scaling}:out=bfloat16")
        cand = next(c for c in dispatch_fp8.candidates(wl, H200) if not c.config.pingpong and (
            c.config.block_m, c.config.block_n, c.config.cluster_m) == tile)
        assert cand.config.sms == blocks
        assert (f", {blocks} blocks" in dispatch_fp8.describe(cand)) is bool(blocks)
        whole = dispatch_fp8.estimate(wl, dispatch.Candidate(cand.step, dataclasses.replace(cand.config, sms=0), cand.family,
                                                             cand.key), H200)
        assert dispatch_fp8.estimate(wl, cand, H200).time_us == pytest.approx(whole.time_us)
    block = parse_workload(f"gemm:{shape}:float8_e4m3fn:nt:scale=block:out=bfloat16")
    assert all(c.config.sms == 0 for c in dispatch_fp8.candidates(block, H200))


def test_block_scales_cost_their_promotion_factor():
    wl = "gemm:8192x8192x8192:float8_e4m3fn:nt{}:out=bfloat16"
    tensor, block = (next(e for e in dispatch_fp8.rank(parse_workload(wl.format(s)), H200) if e.candidate.key.endswith(
        "128x128")) for s in ("", ":scale=block"))
    factor = dispatch_fp8.constants()["block_promotion"]
    assert block.terms["efficiency"] == pytest.approx(tensor.terms["efficiency"] * factor)
    assert block.time_us > tensor.time_us / factor * 0.95


@pytest.mark.parametrize("K", [4096, 1024, 1152, 1920, 2000, 704])
def test_the_cooperative_block_candidates_run_the_unrolled_unpipelined_kernel(K):
    """The cooperative block-scaled candidates are fp8_block_scaled_gemm's defaults: one partial set
    per K tile (not pipelined), 4 stages, the K loop in unrolled chunks of 8 K tiles, whatever K's
    tiles (the rest after the chunks); measured faster than the pipelined kernel on an H200. They ask for
    chunk_scales (1.031x on 12 products, an H200), which the kernel takes where ⌈K/128⌉ % 4 == 0."""
    wl = parse_workload(f"gemm:1024x1024x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16")
    coop = [c.config for c in dispatch_fp8.candidates(wl) if not c.config.pingpong]
    assert coop and all(not c.pipelined and c.stages == 4 and c.k_chunk == 8 and c.block_m == c.block_n == 128
                        and c.chunk_scales for c in coop)
    assert all(scales_by_chunk(wl, c) is (-(-K // 128) % 4 == 0) for c in coop)


def assert_cooperative_store(wl, takes):
    """The cooperative candidates for ``wl`` store by the TMA unit (staged store off) where ``takes``, by the
    staged store elsewhere; the ping-pong ones never by the TMA unit; every candidate builds (validates); the
    choice's description says which."""
    cands = dispatch_fp8.candidates(wl)
    coop = [c for c in cands if not c.config.pingpong]
    assert coop and all(c.config.tma_store is takes and c.config.staged_store is not takes for c in coop)
    assert not any(c.config.tma_store for c in cands if c.config.pingpong)
    for c in cands:
        get(c.step).validate(wl, c.config)
    assert ("TMA store" in dispatch_fp8.describe(coop[0])) is takes


@pytest.mark.parametrize("N, out, takes", [(4096, "bfloat16", True), (520, "float32", True),
                                             (1001, "bfloat16", False), (1002, "float16", False)])
def test_the_cooperative_block_candidates_store_by_the_tma_unit_where_a_tensor_map_takes_d(N, out, takes):
    """Where D's row pitch is a multiple of 16 bytes the cooperative block-scaled candidates write D by
    the TMA unit (tma_store, staged_store off: 1.048x over 16 products on an H200); elsewhere (N·itemsize
    not a multiple of 16: 1001 or 1002 16-bit columns) they keep the staged store, and still build; the
    ping-pong candidates never take it. The choice's description says which."""
    assert_cooperative_store(parse_workload(f"gemm:1024x{N}x2048:float8_e4m3fn:nt:scale=block:out={out}"), takes)


@pytest.mark.parametrize("tail, takes", [(":out=bfloat16", True), (":out=float16", True), ("", False),
                                         (":scale=row:out=bfloat16", False), (":out=bfloat16:bias:gelu_tanh", False),
                                         (":out=bfloat16:gelu_tanh", False), ("x", False)])
def test_the_per_tensor_candidates_store_by_the_tma_unit_only_without_an_epilogue_into_16_bits(tail, takes):
    """Per-tensor scales, no epilogue, a 16-bit D whose rows a tensor map takes: the cooperative candidates
    write D by the TMA unit, the scales applied in the boxes (1.017x over 12 products on an H200); with row
    scales, an epilogue, an fp32 D or a pitch not a multiple of 16 bytes (N 1001: tail "x") they keep the
    staged store, the ping-pong ones always; every candidate builds."""
    N = 1001 if tail == "x" else 4096
    wl = parse_workload(f"gemm:2048x{N}x2048:float8_e4m3fn:nt" + (":out=bfloat16" if tail == "x" else tail))
    assert_cooperative_store(wl, takes)


def test_the_pingpong_tiles_run_a_ring_of_4_stages_but_64x128():
    """Per-tensor and row scales: the ping-pong 128 × 128 and 64 × 256 at 4 stages (faster than the
    deepest ring, 6 and 5, on an H200: fp8_pingpong_stages), 64 × 128 at 8; the cooperative tiles at
    the deepest ring (128 × 128: 6)."""
    wl = parse_workload("gemm:4096x4096x4096:float8_e4m3fn:nt:scale=row:out=bfloat16")
    stages = {(c.config.block_m, c.config.block_n, c.config.pingpong): c.config.stages
              for c in dispatch_fp8.candidates(wl) if c.config.cluster_m == 1}
    assert stages == {(128, 256, False): 4, (128, 128, False): 6, (256, 128, False): 4, (128, 128, True): 4,
                      (64, 256, True): 4, (64, 128, True): 8}


def test_the_block_scaled_pingpong_candidates_without_clusters_take_the_scales_by_tma():
    """scales_in_ring on the ping-pong 64 × 128 candidates without clusters (faster on 5 of 6 shapes on an
    H100; with clusters the kernel spills), never on the cooperative ones (slower); the kernel itself
    keeps the consumers' loads where ⌈K/128⌉ is not a multiple of 4."""
    for K, tma in ((4096, True), (1104, False)):
        wl = parse_workload(f"gemm:1024x1024x{K}:float8_e4m3fn:nt:scale=block:out=bfloat16")
        ring = {(c.config.pingpong, c.config.cluster_m): c.config.scales_in_ring for c in dispatch_fp8.candidates(wl)}
        assert ring == {(False, 1): False, (False, 2): False, (True, 1): True, (True, 2): False}
        pp = next(c.config for c in dispatch_fp8.candidates(wl) if c.config.pingpong and c.config.cluster_m == 1)
        assert scales_by_tma(wl, pp) is tma


def test_the_choice_says_when_no_fp8_calibration_was_fitted(capsys):
    from scripts.schedlab import main

    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal.pop("fp8", None)
    on_h200 = dispatch_fp8.calibrated_elsewhere(H200, cal)
    assert on_h200.startswith("no FP8 calibration")
    cal["fp8"] = {"calibrated_on": dict(cal["calibrated_on"]), "efficiency": {"fp8 128x256": 0.5}}
    assert dispatch_fp8.calibrated_elsewhere(H200, cal) is None  # a sweep fitted on this GPU
    assert dispatch_fp8.constants(cal)["efficiency"]["fp8 128x256"] == 0.5
    assert dispatch_fp8.constants(cal)["efficiency"]["fp8 128x128"] == dispatch_fp8.FP8_DEFAULTS["efficiency"]["fp8 128x128"]
    if "fp8" not in dispatch.CALIBRATION:  # the packaged calibration: until an FP8 sweep is committed
        assert get(BEST).resolve(parse_workload(MISALIGNED)).calibrated_on.startswith("no FP8 calibration")
        assert main(["show", BEST, "--shape", "1000x520x1000", "--explain"]) == 0
        out = capsys.readouterr().out
        assert "chosen: fp8_tma_gemm" in out and "no FP8 calibration sweep fitted" in out and "K padded to 16" in out


@pytest.mark.parametrize("workload, word", [
    ("gemm:256x256x256:float16:nt", "best_fp8_gemm takes float8_e4m3fn, float8_e5m2 inputs, not float16"),
    ("gemm:256x256x256:float8_e4m3fn", "takes the nt layout only, not nn"),
])
def test_what_it_cannot_take_is_refused_in_one_line(workload, word):
    with pytest.raises(ScheduleParamError, match=word) as e:
        get(BEST).validate(parse_workload(workload))
    assert "\n" not in str(e.value)
    with pytest.raises(ScheduleParamError, match="pad_k=true copies A and B") as e:  # the step itself, unpadded
        get("fp8_tma_gemm").validate(parse_workload(MISALIGNED))
    assert "\n" not in str(e.value)
    with pytest.raises(ScheduleParamError, match="no fp8 kernel of the lab takes .*needs sm_90a") as e:
        dispatch_fp8.rank(parse_workload(MISALIGNED), PROFILES["A100"])
    assert "\n" not in str(e.value)


def test_the_calibration_sweep_measures_fp8_and_the_fit_recovers_its_constants(capsys):
    """Measurements made up from the FP8 model with known constants: the sweep's own jobs, the fit
    finds the efficiencies and the promotion factor again and leaves every other constant as it was."""
    import pandas as pd

    from reports.experiments import calibrate
    from scripts.schedlab import main

    truth = copy.deepcopy(dispatch.CALIBRATION)
    pingpong = {f"fp8 {t} pp": 0.7 + 0.01 * n for n, t in enumerate(("128x128", "128x128 c2", "64x256", "64x256 c2",
                                                                    "64x128", "64x128 c2"))}
    truth["fp8"] = {"efficiency": {**{k: round(0.8 * v, 3) for k, v in dispatch_fp8.FP8_DEFAULTS["efficiency"].items()},
                                   **pingpong},
                    "block_promotion": 0.5, "pingpong_block_promotion": 0.4}
    gpu = GpuSpec()
    shapes = [(2048, 2048, 4096), (12288, 2048, 4096), (3001, 1999, 5003), (128, 12288, 4096)]
    jobs = calibrate.calibration_jobs(shapes=shapes, precisions=("fp8",), gpu=gpu, cal=truth)
    scales = {parse_workload(j["workload"]).scaling for j in jobs}
    assert scales == {"tensor", "block"} and sum(j["name"] == "cublas" for j in jobs) == 2 * len(shapes)
    assert {j["extra"]["sweep_precision"] for j in jobs} == {"fp8"}
    assert any(j.get("params", {}).get("pad_k") for j in jobs)  # K = 5003: the padded kernels are measured too
    rows = []
    for job in (j for j in jobs if j["name"] != "cublas"):
        wl, extra = parse_workload(job["workload"]), job["extra"]
        cand = dispatch.Candidate(job["name"], get(job["name"]).config(**job["params"]), extra["family"], extra["key"])
        rows.append(dict(job, **extra, status="ok", time_ms=dispatch_fp8.estimate(wl, cand, gpu, truth).time_us / 1e3))
    df = pd.DataFrame(rows)
    df.attrs.update(gpu_spec=gpu.__dict__, ceilings={"copy_gbps": gpu.memory_gbps}, provenance={"gpu": "NVIDIA H200"})
    cal, report = calibrate.fit(df, gpu)
    assert {k: v for k, v in cal.items() if k != "fp8"} == {k: v for k, v in dispatch.CALIBRATION.items() if k != "fp8"}
    assert cal["fp8"]["efficiency"] == truth["fp8"]["efficiency"] and cal["fp8"]["block_promotion"] == 0.5
    assert cal["fp8"]["pingpong_block_promotion"] == 0.4 and report["fp8"]["pingpong_block_promotion"]["fitted"]
    assert any(j.get("params", {}).get("pingpong") for j in jobs)  # the ping-pong kernels are measured too
    assert cal["fp8"]["calibrated_on"] == {"gpu": "NVIDIA H200", "arch": "sm_90", "sms": 132}
    assert report["fp8"]["median_abs_log_error"]["after"] < 1e-3 and report["fp8"]["block_promotion"]["fitted"]
    assert dispatch_fp8.calibrated_elsewhere(H200, cal) is None
    # block-scaled points alone (a sweep --where chunk_scales=true): the promotions, the efficiencies as they were
    block = df[df["workload"].str.contains("scale=block")].copy()
    block.attrs.update(df.attrs)
    cal, report = calibrate.fit(block, gpu)
    assert dispatch_fp8.constants(cal)["efficiency"] == dispatch_fp8.constants()["efficiency"] and not report["fp8"]["fitted_efficiencies"]
    assert report["fp8"]["block_promotion"]["fitted"] and cal["fp8"]["block_promotion"] != dispatch_fp8.constants()["block_promotion"]
    assert "; the efficiencies as they were: " + dispatch_fp8.constants()["source"] in cal["fp8"]["source"]
    # the command line: fp8 by name, for the calibration set only
    assert main(["sweep", "--precisions", "fp9", "--out", "out/x"]) == 2
    assert "--precisions: 'fp9' is not one of fp32, tf32, fp16, fp8" in capsys.readouterr().err
    assert main(["sweep", "--set", "fp32", "--precisions", "fp8", "--out", "out/x"]) == 2
    assert "--precisions is for --set calibration" in capsys.readouterr().err


# --- on the GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["gemm:2048x1536x4096:float8_e4m3fn:nt:scale=row:out=bfloat16",
                                      MISALIGNED, "gemm:1000x520x1000:float8_e4m3fn:b=float8_e5m2:nt:scale=block"])
def test_the_choice_is_right_on_the_gpu(harness, workload):
    spec = get(BEST)
    tol = spec.tolerance_for(parse_workload(workload))
    err = run_on_gpu(harness, spec, workload)
    print(f"{BEST} ({spec.resolve(parse_workload(workload)).chosen}) on {workload}: relative error {err:.3g} "
          f"(tolerance {tol:.3g})")
    assert err <= tol
