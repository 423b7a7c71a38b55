"""The shape-general choice (schedules.dispatch): degenerate shapes go to their family, the choice
follows the GPU's properties, every choice is a valid configuration that compiles, --explain shows
the model's figures, the fit recovers known constants, and the random-shape drawer is reproducible."""

import copy
import dataclasses
import json
import os
import re

import pytest

from schedules import dispatch, dispatch_short_k, dispatch_store, get, gpus, parse_workload
from schedules.common import GpuSpec
from schedules.errors import ScheduleParamError

TABLE = ["gemm:4096x4096x4096", "gemm:1024x512x2048", "gemm:3000x1000x2500", "gemm:5000x1x3000",
         "gemm:1x5000x3000", "gemm:8000x3x6000", "gemm:3x8000x6000", "gemm:256x256x16384", "gemm:3000x4000x5",
         "gemm:1x1x1", "gemm:7x5x3", "gemm:999x777x555", "gemm:16384x16384x2"]


def family(w, precision="fp32"):
    return dispatch.rank(parse_workload(w), precision)[0].candidate.family


def test_degenerate_shapes_go_to_their_family():
    assert dispatch.choose(parse_workload("gemm:5000x1x3000"), "fp32")[0] == "gemv_dispatch"
    assert dispatch.choose(parse_workload("gemm:1x5000x3000"), "fp32")[0] == "column_gemv_t"
    assert dispatch.choose(parse_workload("gemm:5000x1x3000:float16"), "fp16")[0] == "gemv_dispatch"
    # few outputs, a long K: split-K; a short K: none
    step, cfg = dispatch.choose(parse_workload("gemm:256x256x16384"), "fp32")
    assert cfg.splits(parse_workload("gemm:256x256x16384")) >= 8
    step, cfg = dispatch.choose(parse_workload("gemm:3000x4000x5"), "fp32")
    assert cfg.splits(parse_workload("gemm:3000x4000x5")) == 1
    # a skinny output gets a skinny tile
    _, cfg = dispatch.choose(parse_workload("gemm:8000x3x6000"), "fp32")
    assert cfg.block_n <= 16
    _, cfg = dispatch.choose(parse_workload("gemm:3x8000x6000"), "fp32")
    assert cfg.block_m <= 16
    # rows a tensor map cannot describe: padded copies for the TMA kernel, or cp.async with narrower copies
    step, cfg = dispatch.choose(parse_workload("gemm:2000x2000x2001:float16"), "fp16")
    assert step == "wgmma_gemm" or (step == "persistent_gemm" and cfg.pad_operands)
    assert dispatch.choose(parse_workload("gemm:4096x4096x4096:float16"), "fp16")[0] in ("persistent_gemm",
                                                                                         "cluster_gemm")
    assert dispatch.choose(parse_workload("gemm:4096x4096x4096"), "tf32")[0] == "tma_tf32_gemm"


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("workload", TABLE)
def test_every_choice_is_valid_and_respects_the_gpu(workload, precision):
    if precision == "fp16":
        workload += ":float16"
    wl = parse_workload(workload)
    step, cfg = dispatch.choose(wl, precision)
    launch = get(step).validate(wl, cfg)
    assert launch.threads <= 1024 and launch.shared_bytes <= 227 * 1024


def test_the_choice_follows_the_gpus_properties():
    wl = parse_workload("gemm:1024x512x2048")
    big = GpuSpec(sms=132)
    small = GpuSpec(name="small", sms=16)
    split_big = dispatch.choose(wl, "fp32", big)[1].splits(wl)
    split_small = dispatch.choose(wl, "fp32", small)[1].splits(wl)
    assert split_small < split_big  # fewer SMs are filled with fewer K slices


@pytest.mark.parametrize("workload, precision", [("gemm:1024x512x2048", "fp32"), ("gemm:8000x3x6000", "fp32"),
                                                 ("gemm:5000x1x3000", "fp32"), ("gemm:2000x2000x2001:float16", "fp16"),
                                                 ("gemm:1000x520x2000:float16", "fp16"),
                                                 ("gemm:1000x520x2000", "tf32")])
def test_the_choice_compiles_without_spills(workload, precision):
    from tests.helpers import build_spec

    name = {"fp32": "best_gemm", "fp16": "best_fp16_gemm", "tf32": "best_tf32_gemm"}[precision]
    b = build_spec(get(name), workload)
    assert b.device.cubin and all(k.spills == 0 for k in b.device.kernels)


@pytest.mark.parametrize("workload, precision", [("gemm:8000x3x6000", "tf32"), ("gemm:1024x512x2048", "fp32")])
def test_a_best_step_builds_exactly_what_it_chose(workload, precision):
    """Build options travel with the choice: a padded, split-K TMA kernel needs its pass options
    (without them TVM's storage planner lets the partial sums share the padded copy's memory)."""
    from reports.engine import build as B
    from tests.helpers import build_spec

    name = {"fp32": "best_gemm", "fp16": "best_fp16_gemm", "tf32": "best_tf32_gemm"}[precision]
    wl = parse_workload(workload)
    best = get(name).config()
    choice = best.choose(wl)
    step, chosen = choice.step, choice.config
    assert B.built_config(best, wl) == chosen and B.built_config(best) == best
    a, b = build_spec(get(name), workload), build_spec(get(step), workload, **chosen.__dict__)
    assert a.device.cuda == b.device.cuda and a.lowered == b.lowered


def test_explain_prints_the_choice_and_the_runners_up(capsys):
    from scripts.schedlab import main

    assert main(["show", "best_gemm", "--shape", "1024x512x2048", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "chosen: split_k_gemm" in out and "est. µs" in out and "waves" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 5 and rows[0].split()[0] == "1"
    times = [float(r.split()[1]) for r in rows]
    assert times == sorted(times)
    assert main(["show", "naive_gemm", "--explain"]) == 2
    capsys.readouterr()
    # the same as JSON: the text's figures, each candidate's configuration whole
    assert main(["show", "best_gemm", "--shape", "1024x512x2048", "--explain", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"] == "gemm:1024x512x2048" and data["precision"] == "fp32" and data["gpu"]["sms"] > 0
    assert [c["rank"] for c in data["candidates"]] == [1, 2, 3, 4, 5] and data["valid_candidates"] >= 5
    assert [round(c["time_us"], 1) for c in data["candidates"]] == times
    best = data["candidates"][0]
    assert out.count(best["description"]) >= 2 and best["step"] == "split_k_gemm" and best["params"]["split_k"] > 1
    assert best["terms"]["blocks"] > 0 and data["calibration"] == dispatch.CALIBRATION["source"]
    assert main(["show", "naive_gemm", "--json"]) == 2  # --json is for --explain


def test_the_fit_recovers_the_constants_it_was_given():
    """Measurements made up from the model with known constants: the fit finds them again."""
    import pandas as pd

    from reports.experiments import calibrate
    from reports.experiments.calibrate import calibration_jobs, calibration_shapes
    from schedules.calibration import CALIBRATION

    truth = copy.deepcopy(CALIBRATION)
    truth.update(launch_us=3.0, w_sat=12, warp_gamma=0.7, l2_factor=4.0, k_step_us=0.8, simt_async_factor=0.9)
    truth["efficiency"].update({"simt 128x128 t8x8": 0.8, "simt 64x64 t4x4": 0.6})
    truth["simt_copy_factor"] = {"1": 1.0, "0.5": 0.8, "0.25": 0.6}  # narrow loads, on misaligned shapes
    gpu = GpuSpec()
    rows = []
    # the sweep's own choice of kernels, on every other shape of it (half the fit's time; each
    # constant still has points that decide it)
    for job in calibration_jobs(calibration_shapes()[::4], precisions=("fp32",), gpu=gpu, cal=truth):
        if job["name"] == "cublas":
            continue
        wl, extra = parse_workload(job["workload"]), job["extra"]
        cand = dispatch.Candidate(job["name"], get(job["name"]).config(**job["params"]), extra["family"], extra["key"])
        rows.append(dict(job, **extra, status="ok", time_ms=dispatch.estimate(wl, cand, gpu, truth).time_us / 1e3))
    df = pd.DataFrame(rows)
    df.attrs.update(gpu_spec=gpu.__dict__, ceilings={"copy_gbps": gpu.memory_gbps}, provenance={"gpu": "NVIDIA H200"})
    cal, report = calibrate.fit(df, gpu)
    assert cal["calibrated_on"] == {"gpu": "NVIDIA H200", "arch": "sm_90", "sms": 132}  # the GPU it describes
    # each efficiency is solved exactly from the model's form, so the constants come back exactly
    # (the L2 factor excepted: no kernel here is bound by L2, it is not identifiable from these)
    assert cal["w_sat"] == 12 and cal["launch_us"] == 3.0 and cal["fill_us"] == truth["fill_us"]
    assert cal["warp_gamma"] == 0.7  # how soft the occupancy knee is, found with w_sat
    assert cal["k_step_us"] == 0.8  # the K loop's latency floor (small blocks, few outputs, long K)
    assert cal["efficiency"]["simt 128x128 t8x8"] == pytest.approx(0.8, rel=0.01)
    assert cal["simt_copy_factor"]["0.25"] == pytest.approx(0.6, rel=0.01)
    assert cal["simt_async_factor"] == pytest.approx(0.9, rel=0.01)  # cp.async rings against their kind
    assert report["median_abs_log_error"]["after"] < 1e-3 and report["p90_abs_log_error"]["after"] < 1e-2
    regret = report["regret"]["after"]  # the fitted model picks the fastest, or one within 10%
    assert regret["share_within_10pct"] == 1.0 and regret["geomean"] < 1.01


def test_a_blocks_k_loop_costs_at_least_its_latency_floor():
    """Few outputs per block over a long K: the K tiles follow one another through a two-deep
    pipeline, each waiting at least k_step_us for its loads; with much arithmetic per tile the
    floor does not bind."""
    small, big = parse_workload("gemm:140x142x1491"), parse_workload("gemm:4096x4096x4096")
    cand = next(e.candidate for e in dispatch.rank(small, "fp32")
                if e.candidate.step == "warp_tiled_gemm" and e.candidate.config.block_k == 8
                and not e.candidate.config.async_copy)
    for wl, binds in ((small, True), (big, False)):
        cal = copy.deepcopy(dispatch.CALIBRATION)
        cal["k_step_us"] = 0.0
        free = dispatch.estimate(wl, cand, GpuSpec(), cal).terms
        cal["k_step_us"] = step = dispatch.CALIBRATION["k_step_us"]
        floor = dispatch.estimate(wl, cand, GpuSpec(), cal).terms
        k_tiles = -(-wl.K // cand.config.block_k)
        if binds:
            assert floor["compute_us"] >= floor["waves"] * k_tiles * step > free["compute_us"]
        else:
            assert floor["compute_us"] == free["compute_us"]


def test_a_cp_async_ring_waits_for_its_loads_less_often():
    """A cp.async ring of S shared buffers keeps S - 1 K tiles in flight: where the latency floor
    binds, it is paid a half or a third as often as with the register double buffer; the ring
    stages nothing in registers (registers of its own, an estimate without staged loads), costs
    shared memory per stage, and its kind's efficiency times one fitted factor. 16-bit inputs get
    no ring (cp.async copies at least 4 bytes; a transposed tile would need 2-byte copies)."""
    wl = parse_workload("gemm:140x142x1491")
    rings = {(c.config.stages, c.config.async_copy): c for c in dispatch.candidates(wl, "fp32")
             if c.key == "simt 64x64 t4x4" and c.config.block_k == 8 and c.config.split_k == 1
             and not c.config.staged_store}
    assert set(rings) == set(dispatch.SIMT_PIPELINES)
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal["efficiency"]["simt 64x64 t4x4"] = 1.0  # the arithmetic quick, so that the K steps count
    cal["fill_us"], cal["sm_store_gbps"], cal["k_step_us"], cal["simt_async_factor"] = 0.0, 1e9, 1.0, 0.9
    regs, three, four = (dispatch.estimate(wl, rings[p], GpuSpec(), cal).terms for p in dispatch.SIMT_PIPELINES)
    k_tiles = -(-wl.K // 8)
    assert regs["compute_us"] >= k_tiles  # one round trip per K tile
    assert three["compute_us"] == pytest.approx((k_tiles + 1) / 2, rel=0.01)
    assert four["compute_us"] == pytest.approx((k_tiles + 2) / 3, rel=0.01)
    assert four["efficiency"] == pytest.approx(0.9 * regs["efficiency"]) and four["pipeline"] == "async"
    ring = rings[(4, True)].config
    assert dispatch.simt_register_key(ring) == "t4x4 async" and "cp.async ring of 4" in dispatch.describe(rings[(4, True)])
    cal["regs"] = {}
    assert dispatch.simt_registers(ring, cal) < dispatch.simt_registers(rings[(2, False)].config, cal)
    assert ring.shared_floats() == 2 * rings[(2, False)].config.shared_floats()
    half = parse_workload("gemm:2000x13x3001:float16")
    assert dispatch.candidates(half, "fp16") and not any(getattr(c.config, "async_copy", False)
                                                         for c in dispatch.candidates(half, "fp16"))
    with pytest.raises(ScheduleParamError, match="cp.async"):
        get("skinny_gemm").validate(half, get("skinny_gemm").config(stages=3, async_copy=True))


def test_simt_registers_come_from_the_sweep_or_an_estimate():
    """The occupancy term's registers per thread: the sweep's median per thread tile (one
    outlier, a padded variant, does not move it), and for a tile the sweep never built an estimate
    from the tile (a one-column tile had been taken for 128, a quarter of its blocks per SM)."""
    import pandas as pd

    from reports.experiments.calibrate import _sweep_registers

    rows = [{"family": "simt", "name": "skinny_gemm", "params": {"thread_m": 8, "thread_n": 1}, "registers": r}
            for r in (40, 45, 206)]
    assert _sweep_registers(pd.DataFrame(rows)) == {"t8x1": 48}
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal["regs"] = {}
    cfg = get("skinny_gemm").config(thread_m=8, thread_n=1, block_m=32, block_n=128, warps_m=4, warps_n=4)
    assert dispatch.simt_registers(cfg, cal) == 48  # 8 accumulators + 9 fragment values + 24, in steps of 8
    assert dispatch.blocks_per_sm(cfg.threads, 48, 0, GpuSpec()) == 2  # blocks of 512 threads per SM (1 at 128 registers)


def test_a_deeper_k_tile_shares_its_tiles_efficiency_and_counts_its_steps_and_registers():
    """A K tile of 16 or 32 runs the same inner loop as 8: it shares the tiles' efficiency (one
    kind for the fit), and differs where the model says why: fewer K steps against the latency
    floor, and registers of its own (the sweep's, or an estimate counting the loads it stages),
    hence its occupancy."""
    wl = parse_workload("gemm:9954x21x61")
    cands = {(c.config.block_m, c.config.block_n, c.config.block_k, c.config.splits(wl), c.config.pad_operands,
              c.config.async_copy): c for c in dispatch.candidates(wl, "fp32") if c.family == "simt"}
    c8, c32 = cands[(256, 8, 8, 1, False, False)], cands[(256, 8, 32, 1, False, False)]
    assert c8.key == c32.key == "simt 256x8 t4x4"
    assert (dispatch.simt_register_key(c8.config), dispatch.simt_register_key(c32.config)) == ("t4x4", "t4x4 k32")
    assert "K tile 32" in dispatch.describe(c32) and "K tile" not in dispatch.describe(c8)
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal["regs"].pop("t4x4 k32", None)
    # 16 accumulators, 8 fragment values, 32 × (256 + 8) / 128 = 66 staged loads, 24: 114 → 120
    assert dispatch.simt_registers(c32.config, cal) == 120
    cal["efficiency"][c8.key] = 1.0  # the arithmetic quick, so that the K steps count
    cal["fill_us"], cal["sm_store_gbps"], cal["k_step_us"] = 0.0, 1e9, 1.0
    t8, t32 = (dispatch.estimate(wl, c, GpuSpec(), cal).terms for c in (c8, c32))
    assert t8["compute_us"] >= 8 and 2 <= t32["compute_us"] < t8["compute_us"]  # 61 deep: 8 tiles of 8, 2 of 32
    assert t32["per_sm"] < t8["per_sm"]  # more registers and shared memory per block
    # an 8 × 8 thread tile goes to 16 deep at most
    big = parse_workload("gemm:2048x2048x2048")
    deep = {(c.config.thread_m * c.config.thread_n, c.config.block_k) for c in dispatch.candidates(big, "fp32")}
    assert (64, 16) in deep and (64, 32) not in deep and (16, 32) in deep


def test_the_random_drawer_is_reproducible_and_covers_odd_and_tiny_shapes():
    from reports.experiments.bench_random import draw_shapes, needed_bytes, shape_properties

    a, _ = draw_shapes(60, seed=7)
    b, _ = draw_shapes(60, seed=7)
    c, _ = draw_shapes(60, seed=8)
    assert a == b and a != c and len(a) == 60
    assert all(1 <= d <= 16384 for s in a for d in s)
    props = shape_properties(a)
    assert props["not_multiple_of_8"] >= 20 and props["dim_le_4"] >= 3
    # shapes that cannot fit are drawn again, and counted
    small, redrawn = draw_shapes(20, seed=7, memory_bytes=needed_bytes(2000, 2000, 2000))
    assert len(small) == 20 and redrawn > 0 and all(needed_bytes(*s) <= needed_bytes(2000, 2000, 2000) for s in small)


def test_the_floor_report_names_the_worst_tenth_and_their_classes():
    import os

    from reports import load_results
    from reports.experiments.bench_random import floor, floor_classes, markdown, shape_classes

    sc = lambda text, sms=132: shape_classes(parse_workload(text), sms)  # noqa: E731
    assert sc("gemm:4096x4096x4096") == ["regular"]
    assert sc("gemm:1x13x60:float16") == ["degenerate", "thin", "short K", "misaligned"]
    assert sc("gemm:1876x383x7343") == ["long K, few tiles", "misaligned"]  # 15 × 3 tiles on 132 SMs
    assert sc("gemm:1876x384x7344", sms=40) == ["regular"]  # 45 tiles fill 40 SMs
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "reports", "results", "NVIDIA_H200", "bench_random")
    df = load_results(folder)
    worst = floor(df)
    for prec, g in worst.groupby("precision"):
        pct = [float(x) for x in g["% cuBLAS"]]
        lab = df[(df["precision"] == prec) & df["name"].str.startswith("best_")]["pct_cublas"]
        assert len(g) == 6 and pct == sorted(pct) and pct[0] == pytest.approx(lab.min(), abs=0.05)
        assert max(pct) <= lab.quantile(0.11)
    counts = floor_classes(df).set_index("precision")
    assert counts.loc["fp16", "thin"].startswith(f"{(worst[worst.precision == 'fp16']['class'].str.contains('thin')).sum()} of")
    assert "## The floor" in markdown(df)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("workload", TABLE[1:] + ["gemm:2000x2000x2001", "gemm:33x5000x4000", "gemm:200x3x9000"])
def test_every_choice_is_right_on_the_gpu(workload, precision):
    from reports.engine.harness import check_in_process

    name = {"fp32": "best_gemm", "fp16": "best_fp16_gemm", "tf32": "best_tf32_gemm"}[precision]
    row = check_in_process(name, workload + (":float16" if precision == "fp16" else ""))
    assert row["status"] == "ok", row.get("error")


def test_the_calibration_sweep_measures_each_kind_at_its_other_k_tiles():
    """The sweep's jobs: for the two best SIMT kinds of a shape, besides their best variant, one
    at each other K tile (they share the kind's efficiency, so the fit needs them side by side);
    a stored row names its kind as the dispatcher does now."""
    from reports.experiments.calibrate import calibration_jobs, candidate_of

    jobs = calibration_jobs(shapes=[(1500, 700, 300)], precisions=("fp32",))
    simt = [j for j in jobs if j.get("extra", {}).get("family") == "simt"]
    best_two = list(dict.fromkeys(j["extra"]["key"] for j in simt))[:2]
    for key in best_two:
        depths = {j["params"].get("block_k", 8) for j in simt if j["extra"]["key"] == key}
        assert depths == set(dispatch.SIMT_BLOCK_K) or (depths == {8, 16} and " t8x8" in key), (key, depths)
        pipelines = {(j["params"].get("stages", 2), j["params"].get("async_copy", False)) for j in simt
                     if j["extra"]["key"] == key}
        assert pipelines == set(dispatch.SIMT_PIPELINES), (key, pipelines)  # and with each K pipeline
    row = {"name": "skinny_gemm", "family": "simt", "key": "simt 256x8 t4x4 k32",
           "params": {"block_m": 256, "block_n": 8, "block_k": 32, "warps_m": 4, "warps_n": 1}}
    assert candidate_of(row).key == "simt 256x8 t4x4"


def test_a_sweep_can_measure_only_some_kernels():
    """``schedlab sweep --where async_copy=true``: the configurations with those parameters, with
    cuBLAS beside them on their own workloads only; a condition that is not PARAM=VALUE stops it."""
    from reports.experiments.calibrate import calibration_jobs
    from reports.experiments.sweep import where

    jobs = calibration_jobs(shapes=[(1500, 700, 300), (2000, 3, 4000)], precisions=("fp32", "fp16"))
    kept = where(jobs, ["async_copy=true"])
    kernels = [j for j in kept if not j["name"].startswith("cublas")]
    assert kernels and all(j["params"]["async_copy"] is True for j in kernels)
    assert len(kernels) == sum(1 for j in jobs if (j.get("params") or {}).get("async_copy"))
    assert not any(j["workload"].endswith("float16") for j in kept)  # fp16 inputs get no cp.async ring
    blas = {(j["workload"], j["extra"]["sweep_precision"]) for j in kept if j["name"].startswith("cublas")}
    assert blas == {(j["workload"], j["extra"]["sweep_precision"]) for j in kernels}
    eights = [j for j in where(jobs, ["block_k=8", "async_copy=true"]) if not j["name"].startswith("cublas")]
    assert eights and all("block_k" not in j["params"] for j in eights)  # the default's value matches too
    assert len(eights) == sum(1 for j in kernels if j["params"].get("block_k", 8) == 8)
    assert not where(jobs, ["block_k=7"])
    with pytest.raises(SystemExit):
        where(jobs, ["async_copy"])


def test_the_cp_async_wgmma_kernels_store_c_slower():
    """Steps 19 and 25 store C a float at a time from the fragments: their epilogue runs at
    scalar_store_factor of the store rate (a short K makes it their whole time); the TMA kernels,
    which store pairs, do not pay it."""
    wl = parse_workload("gemm:6000x3000x8:float16")
    by_family = {}
    for c in dispatch.candidates(wl, "fp16"):
        by_family.setdefault(c.family, c)
    cal = copy.deepcopy(dispatch.CALIBRATION)
    times = {}
    for factor in (1.0, 0.25):
        cal["scalar_store_factor"] = factor
        times[factor] = {f: dispatch.estimate(wl, c, GpuSpec(), cal).time_us for f, c in by_family.items()}
    assert times[0.25]["cp"] > 1.5 * times[1.0]["cp"]  # the store is most of a one-K-tile kernel
    assert times[0.25]["tma"] == times[1.0]["tma"]


def test_narrow_copies_slow_only_the_k_tiles_past_the_rings_prologue():
    """A cp.async wgmma kernel's 2-byte copies (K odd: A's rows start anywhere) cost copy_factor on
    its K tiles past the stages - 1 whose copies the prologue issues together: none with a short K,
    all from twice that on. With it the choice on a small misaligned fp16 product is the cp.async
    kernel (H100, 1240x403x113: 11.2 µs against the TMA kernel with padded copies' 16.1), and a long
    K is charged as before."""
    assert [dispatch_short_k.narrow_copy_share(k, 4) for k in (1, 3, 4, 5, 6, 40)] == [0, 0, pytest.approx(1 / 3),
                                                                         pytest.approx(2 / 3), 1, 1]
    gpu = gpus.profile("h200")
    cal = copy.deepcopy(dispatch.CALIBRATION)
    for shape, k_tiles in (("1240x403x113", 2), ("541x26x13745", 215)):
        wl = parse_workload(f"gemm:{shape}:float16")
        cp = next(c for c in dispatch.candidates(wl, "fp16", gpu) if c.family == "cp" and c.config.block_m == 64
                  and c.config.block_n == 64)
        assert cp.config.copy_widths(wl)[0] == 2
        times = {}
        for factor in (0.17, 1.0):
            cal["copy_factor"]["2"] = factor
            times[factor] = dispatch.estimate(wl, cp, gpu, cal).time_us
        if k_tiles <= 3:
            assert times[0.17] == times[1.0]  # the prologue's copies: no steady state to slow
        else:
            assert times[0.17] > 4 * times[1.0]
    choice = dispatch.rank(parse_workload("gemm:1240x403x113:float16"), "fp16", gpu)[0].candidate
    assert choice.family == "cp", dispatch.describe(choice)


def test_an_efficiency_is_solved_only_where_the_arithmetic_weighs(monkeypatch):
    """The fit solves an efficiency from a measured time only where the arithmetic is at least
    SOLVE_SHARE of the compute term; with a K of 8 the pipeline fill and the stores are most of it,
    and a small error in them would move the solved value a lot."""
    from reports.experiments import calibrate

    cal = copy.deepcopy(dispatch.CALIBRATION)
    gpu = GpuSpec()

    def solve(shape, share):
        wl = parse_workload(f"gemm:{shape}")
        cand = next(c for c in dispatch.candidates(wl, "fp32") if c.key == "simt 32x128 t8x1"
                    and c.config.split_k == 1 and not c.config.async_copy and c.config.block_k == 8)
        t = dispatch.estimate(wl, cand, gpu, cal).time_us * 1.2
        monkeypatch.setattr(calibrate, "SOLVE_SHARE", share)
        return calibrate._solve_unknown(wl, cand, t, gpu, cal, lambda p, v: p["efficiency"].update({cand.key: v}))[0]

    share = calibrate.SOLVE_SHARE
    assert 0 < share < 1
    assert solve("2048x2048x2048", share) is not None  # the K loop is the work: solved
    assert solve("2000x3001x12", share) is None  # storing C is: not solved,
    assert solve("2000x3001x12", 0.0) is not None  # though the time alone would have allowed it


def test_the_wgmma_kernels_saturate_an_sm_at_their_own_warps():
    """wgmma_w_sat: a lone cp.async wgmma block of 8 warps runs at its SM's full rate where the wgmma
    kernels saturate at 4 warps, at (8/16)^warp_gamma of it at the SIMT tiles' w_sat of 16; the SIMT
    tiles keep w_sat either way."""
    wl = parse_workload("gemm:1000x100x4096:float16")  # 8 blocks of 128 x 128: one per SM
    cp = next(c for c in dispatch.candidates(wl, "fp16") if c.key == "cp 128x128")
    wl32 = parse_workload("gemm:1000x100x4096")
    simt = next(c for c in dispatch.candidates(wl32, "fp32") if c.family == "simt")
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal.update(w_sat=16, warp_gamma=0.6, fill_us=0.0, sm_store_gbps=1e12, k_step_us=0.0)
    est = {}
    for sat in (4, 16):
        cal["wgmma_w_sat"] = sat
        est[sat] = (dispatch.estimate(wl, cp, GpuSpec(), cal).terms["compute_us"],
                    dispatch.estimate(wl32, simt, GpuSpec(), cal).terms["compute_us"])
    assert est[16][0] == pytest.approx(est[4][0] / 0.5 ** 0.6)
    assert est[16][1] == est[4][1]


def test_a_cp_wgmma_block_waits_a_memory_latency_per_ring_of_k_tiles():
    """cp_latency_us (schedules.dispatch_latency): one 64 × 64 cp.async block an SM walking 64 K tiles with
    3 in flight takes at least 64 / 3 latencies, whatever its compute; a round of 4 K tiles does not reach
    the floor; the TMA tiles have none; 0 (absent) leaves the model as it was."""
    from schedules.dispatch_latency import ring_latency_us

    wl = parse_workload("gemm:61x6144x4096:bfloat16:nt:out=bfloat16")  # 96 blocks of 64 x 64: one an SM
    cp = next(c for c in dispatch.candidates(wl, "bf16") if c.key == "cp 64x64")
    tma = next(c for c in dispatch.candidates(wl, "bf16") if c.family == "tma_small")
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal.pop("cp_latency_us", None)
    without = dispatch.estimate(wl, cp, GpuSpec(), cal).terms["compute_us"]
    cal["cp_latency_us"] = 1.5
    with_floor = dispatch.estimate(wl, cp, GpuSpec(), cal).terms["compute_us"]
    assert with_floor == pytest.approx(max(without, 64 * 1.5 / (cp.config.stages - 1)))
    assert with_floor > without  # a long K streamed by one block an SM: the floor binds
    assert ring_latency_us(96, 3, 4, 4, GpuSpec(), cal) == pytest.approx(4 * 1.5 / 3)  # and scales with K tiles
    assert ring_latency_us(400, 2, 64, 4, GpuSpec(), cal) == pytest.approx(2 * 64 * 1.5 / 3)  # two rounds of 2 an SM
    assert ring_latency_us(96, 3, 64, 4, GpuSpec(), {}) == 0.0
    cal.pop("cp_latency_us")
    tma_without = dispatch.estimate(wl, tma, GpuSpec(), cal).terms["compute_us"]
    cal["cp_latency_us"] = 1.5
    assert dispatch.estimate(wl, tma, GpuSpec(), cal).terms["compute_us"] == tma_without


def test_an_sm_with_few_warps_runs_at_a_power_of_its_share_of_w_sat():
    """The occupancy knee: an SM holding half the warps it takes to hide the latencies computes at
    0.5^warp_gamma of its full rate (0.5 with the hard knee, warp_gamma = 1); at or past w_sat, at
    its full rate either way."""
    cal = copy.deepcopy(dispatch.CALIBRATION)
    cal.update(w_sat=16, fill_us=0.0, sm_store_gbps=1e12)
    gpu = GpuSpec()
    busy = {}
    for gamma in (1.0, 0.6):
        cal["warp_gamma"] = gamma
        for warps in (8, 16, 32):  # one block per SM, 132 blocks
            busy[gamma, warps] = dispatch._waves_compute(gpu.sms, 1, warps, 1e6, 1.0, 1.0, gpu, cal, 0)[1]
    assert busy[1.0, 8] == pytest.approx(2 * busy[1.0, 16])
    assert busy[0.6, 8] == pytest.approx(busy[0.6, 16] / 0.5 ** 0.6)
    assert busy[0.6, 16] == busy[1.0, 16] == busy[0.6, 32] == busy[1.0, 32]
    assert 0 < dispatch.CALIBRATION["warp_gamma"] <= 1  # a fitted knee is softer than linear, never harder


def test_split_k_is_offered_only_where_its_partial_sums_fit_in_l2():
    """A large output fills the GPU with whole tiles: split-K's partials (4 bytes × splits × M × N)
    would not fit in L2, and the dispatcher does not offer it (8192³: 805 MB for split-K 3); a few
    hundred outputs over a long K keep every split factor. The calibration's regret judges the
    model's pick among the same kernels."""
    gpu = GpuSpec()
    big, small = parse_workload("gemm:8192x8192x8192"), parse_workload("gemm:300x200x20000")
    every = [dispatch.estimate(big, c, gpu) for c in dispatch.candidates(big, "fp32")]
    assert any(e.terms["splits"] > 1 for e in every)  # the candidates exist; the filter removes them
    ranked = dispatch.rank(big, "fp32", gpu)
    assert ranked and all(e.terms["splits"] == 1 for e in ranked if e.candidate.family == "simt")
    assert all(4 * e.terms["splits"] * big.M * big.N <= gpu.l2_bytes or e.terms["splits"] == 1 for e in ranked)
    assert dispatch.choose(big, "fp32", gpu)[1].split_k == 1
    assert max(e.terms["splits"] for e in dispatch.rank(small, "fp32", gpu)) >= 32
    roomy = GpuSpec(name="a GPU with a 2 GB L2", l2_bytes=2 << 30)  # read from the device at run time
    assert any(e.terms["splits"] > 1 for e in dispatch.rank(big, "fp32", roomy))


def test_a_calibration_sweep_can_take_one_class_and_measures_another_split():
    """``schedlab sweep --set calibration --part "thin and wide"``: that class's shapes alone; the
    best two kinds of a shape are also measured at a second split-K factor."""
    from reports.experiments.calibrate import CLASSES, calibration_jobs, calibration_shapes

    name = next(n for n in CLASSES if n.startswith("thin and wide"))
    assert calibration_shapes("thin and wide") == list(CLASSES[name])
    assert set(calibration_shapes("thin and wide")) < set(calibration_shapes("classes"))
    with pytest.raises(ValueError):
        calibration_shapes("no such class")
    jobs = calibration_jobs(shapes=[(300, 200, 20000)], precisions=("fp32",))
    simt = [j for j in jobs if j.get("extra", {}).get("family") == "simt"]
    best = simt[0]["extra"]["key"]
    splits = {j["params"].get("split_k", 1) for j in simt if j["extra"]["key"] == best}
    assert 1 in splits and len(splits - {1}) >= 2, splits


def test_the_calibration_sweep_times_the_one_column_skinny_tile_beside_the_16_by_128_tile_split():
    """``--part "skinny against split"``: misaligned products a few hundred rows or columns wide over a K of
    hundreds, where the model ranks the 32 x 64 one-column tile within a few percent of the 16 x 128 4 x 4
    tile with split-K and they measured up to 1.5x apart: every shape's jobs time both tiles."""
    from reports.experiments.calibrate import calibration_jobs, calibration_shapes

    shapes = calibration_shapes("skinny against split")
    assert shapes and set(shapes) < set(calibration_shapes("classes"))
    assert all(any(parse_workload(f"gemm:{m}x{n}x{k}").misaligned_rows()) for m, n, k in shapes)
    jobs = calibration_jobs(shapes=shapes, precisions=("fp32",), gpu=gpus.profile("NVIDIA H200"))
    for m, n, k in shapes:
        tiles = {(p.get("block_m"), p.get("block_n"), p.get("thread_n"))
                 for j in jobs if j["workload"] == f"gemm:{m}x{n}x{k}" and j.get("name") == "skinny_gemm"
                 for p in [{**dataclasses.asdict(get("skinny_gemm").config()), **j["params"]}]}
        assert (32, 64, 1) in tiles and (16, 128, 4) in tiles, (m, n, k, tiles)
    assert any(j["name"] == "skinny_gemm" and j["params"].get("split_k", 1) > 1 and j["params"].get("block_n") == 128
               and j["params"].get("thread_n", 4) == 4 for j in jobs)  # and the 16 x 128 tile split somewhere


def test_one_column_tiles_split_over_k_carry_their_own_factor_and_the_fit_recovers_it():
    """The one-column SIMT tiles (t8x1, t4x1) where they split K run at ``simt_column_split_factor`` of
    their kind's efficiency (their efficiency solved where K is whole): the factor slows exactly those
    candidates, and the fit, given times made with a factor, solves it back beside the efficiency."""
    from reports.experiments import calibrate
    from schedules.calibration import CALIBRATION

    gpu = gpus.profile("NVIDIA H200")
    wl = parse_workload("gemm:330x2901x170")
    simt = [c for c in dispatch.candidates(wl, "fp32", gpu) if c.family == "simt"]
    column_split = [c for c in simt if c.config.thread_n == 1 and c.config.splits(wl) > 1]
    column_whole = [c for c in simt if c.config.thread_n == 1 and c.config.splits(wl) == 1]
    others = [c for c in simt if c.config.thread_n > 1 and c.config.splits(wl) > 1]
    assert column_split and column_whole and others
    base, slow = copy.deepcopy(CALIBRATION), copy.deepcopy(CALIBRATION)
    base["simt_column_split_factor"], slow["simt_column_split_factor"] = 1.0, 0.5
    for c in column_split:
        assert dispatch.estimate(wl, c, gpu, slow).terms["efficiency"] == pytest.approx(
            0.5 * dispatch.estimate(wl, c, gpu, base).terms["efficiency"])
    for c in column_whole + others:  # whole-K one-column tiles and split tiles of several columns: untouched
        assert dispatch.estimate(wl, c, gpu, slow).time_us == pytest.approx(dispatch.estimate(wl, c, gpu, base).time_us)
    # made-up measurements with the factor 0.8; the efficiency of the 32 x 64 tile solved on its whole-K points
    # (no K-loop latency floor: with it, the whole-K points are latency-bound and solve nothing)
    truth = copy.deepcopy(CALIBRATION)
    truth.update(simt_column_split_factor=0.8, k_step_us=0.0)
    pts = []
    for text in ("gemm:330x2901x170", "gemm:1301x190x450", "gemm:150x3001x777", "gemm:95x9001x130"):
        w = parse_workload(text)
        for c in dispatch.candidates(w, "fp32", gpu):
            # the whole K at every K tile, split in two at one: the efficiency's median is the whole-K points'
            if c.key == "simt 32x64 t8x1" and not c.config.async_copy and not c.config.pad_operands and (
                    c.config.splits(w) == 1 or (c.config.split_k == 2 and c.config.block_k == 8)):
                pts.append((w, "fp32", c, dispatch.estimate(w, c, gpu, truth).time_us))
    assert {c.config.splits(w) > 1 for w, _, c, _ in pts} == {True, False}
    cal = copy.deepcopy(CALIBRATION)
    cal.update(simt_column_split_factor=1.0, k_step_us=0.0)
    calibrate._fit_efficiencies(pts, cal, gpu)
    calibrate._fit_column_split_factor(pts, cal, gpu)
    assert cal["efficiency"]["simt 32x64 t8x1"] == pytest.approx(truth["efficiency"]["simt 32x64 t8x1"], rel=0.02)
    assert cal["simt_column_split_factor"] == pytest.approx(0.8, rel=0.02)


def test_the_calibration_sweep_measures_the_fitted_widths_on_weights_stored_n_by_k():
    """``--part "weights stored"``: nt products in fp16 alone (no fp32/tf32 rows: their kernels stay
    fitted on nn), whose jobs time TMA tiles of the widths fitted to whole rounds and 256-row tiles wider
    than 128, the keys the fit then solves (no nn product offers them)."""
    from reports.experiments.calibrate import calibration_jobs, calibration_shapes

    shapes = calibration_shapes("weights stored")
    assert shapes and all(len(s) == 4 and s[3] == "nt" for s in shapes)
    assert set(shapes) < set(calibration_shapes("classes")) and not set(shapes) & set(calibration_shapes("grid"))
    jobs = calibration_jobs(shapes=shapes, precisions=("fp32", "tf32", "fp16"), gpu=gpus.profile("NVIDIA H200"))
    assert jobs and all(parse_workload(j["workload"]).layout == "nt" and parse_workload(j["workload"]).dtype == "float16"
                        for j in jobs)
    keys = {j["extra"]["key"] for j in jobs if j.get("extra", {}).get("family") == "tma"}
    fitted = {k for k in keys if int(k.split("x")[-1]) % 64 or k.startswith("tma 256x") and k != "tma 256x128"}
    assert len(fitted) >= 3, keys


def test_the_calibration_is_package_data_that_a_fit_writes_and_the_model_reads(tmp_path):
    """The model's constants are a JSON file shipped with the package (not generated Python):
    what ``schedlab calibrate --write`` writes is what the dispatcher reads back, value for value."""
    from reports.experiments.calibrate import write_calibration
    from schedules.calibration import calibration_path, load_calibration

    assert calibration_path().endswith("calibration.json") and load_calibration() == dispatch.CALIBRATION
    changed = copy.deepcopy(dispatch.CALIBRATION)
    changed["w_sat"] = 12
    path = write_calibration(changed, str(tmp_path / "calibration.json"))
    assert load_calibration(path) == changed and isinstance(load_calibration(path)["w_sat"], int)


def test_a_users_calibration_file_replaces_the_packaged_one_whole(tmp_path, monkeypatch, capsys):
    """SCHEDLAB_CALIBRATION names the file the dispatcher reads (what ``calibrate --write FILE``
    wrote); a file that cannot be read, or lacks a constant, is refused in one line naming it."""
    from schedules.calibration import ENV, CalibrationError, calibration_path, load_calibration
    from scripts.schedlab import main

    mine = dict(dispatch.CALIBRATION, source="my fit")
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    monkeypatch.setenv(ENV, str(tmp_path / "mine.json"))
    assert load_calibration() == mine and load_calibration(calibration_path()) == dispatch.CALIBRATION
    partial = {k: v for k, v in mine.items() if k != "launch_us"}
    for name, text, why in (("none.json", None, "cannot read it"), ("bad.json", "{", "not a JSON file"),
                            ("list.json", "[]", "not a calibration"),
                            ("partial.json", json.dumps(partial), "not a whole calibration (no launch_us)")):
        if text is not None:
            (tmp_path / name).write_text(text)
        monkeypatch.setenv(ENV, str(tmp_path / name))
        with pytest.raises(CalibrationError, match=re.escape(why)) as e:
            load_calibration()
        assert str(e.value).startswith(f"{ENV}={tmp_path / name}: ") and "\n" not in str(e.value)
    monkeypatch.delenv(ENV)
    # --write names a file, never the package's own by default; a directory is refused before the fit
    assert main(["calibrate", "reports/results/NVIDIA_H200/calibration", "--write", str(tmp_path)]) == 2
    assert "--write" in capsys.readouterr().err and sorted(os.listdir(tmp_path)) == sorted(
        ["mine.json", "bad.json", "list.json", "partial.json"])


def test_a_persistent_grid_streams_as_slowly_as_its_busiest_sms():
    """A persistent kernel's SMs walk units i, i + SMs, ...: the ones with ⌈units / SMs⌉ set the
    time of a bandwidth-bound product; handed-out blocks are not charged, nor grids smaller than the
    GPU down to half its SMs (an SM streams up to twice its share: 96 tiles of 128 × 128 measured
    48 µs at 61 rows against a 4096 × 14336 weight, 128 of 128 × 64 59 µs); below that they are
    (61 × 4096 × 4096 on 64 × 128 tiles: 32 blocks 23.3 µs, 64 blocks 16.0)."""
    gpu = GpuSpec()
    assert dispatch.stream_spread(264, gpu, persistent=True) == 1.0
    assert dispatch.stream_spread(224, gpu, persistent=True) == pytest.approx(264 / 224)
    assert dispatch.stream_spread(224, gpu, persistent=False) == 1.0
    assert dispatch.stream_spread(96, gpu, persistent=True) == 1.0
    assert dispatch.stream_spread(66, gpu, persistent=True) == 1.0
    assert dispatch.stream_spread(32, gpu, persistent=True) == pytest.approx(132 / 64)
    assert dispatch.stream_spread(32, gpu, persistent=False) == pytest.approx(132 / 64)
    wl = parse_workload("gemm:80x57344x8192:bfloat16:nt:out=bfloat16")
    wide = [e for e in dispatch.rank(wl, "bf16", gpu) if e.step == "persistent_gemm"
            and (e.config.block_m, e.config.block_n, e.config.split_k, e.config.stream_k) == (128, 256, 1, False)]
    assert wide and wide[0].terms["spread"] == pytest.approx(264 / 224)
    top = dispatch.rank(parse_workload("gemm:61x4096x14336:bfloat16:nt:out=bfloat16:residual"), "bf16", gpu)[0]
    assert top.step == "persistent_gemm" and top.config.block_n == 128


def test_a_few_rows_take_64_row_tiles_of_one_consumer_warpgroup():
    """At most 64 rows: the persistent TMA kernel's candidates are its one-consumer 64 × 128 and 64 × 256
    tiles (split-K as before, no stream-K), at half the two-consumer 128-row tile's calibrated rate;
    from 65 rows the two-consumer tiles. On the H200's 61-row layers the choice is a 64-row tile
    (reports/results/NVIDIA_H200/few_rows_tma: 1.05-1.43x faster than the 128-row tiles chosen before)."""
    from schedules.calibration import CALIBRATION, tile_efficiency
    from schedules.gpus import profile

    h200 = profile("H200")
    few = parse_workload("gemm:61x4096x14336:bfloat16:nt:out=bfloat16:residual")
    tma = [c for c in dispatch.candidates(few, "bf16", h200) if c.step == "persistent_gemm"]
    assert tma and {(c.config.block_m, c.config.consumers) for c in tma} == {(64, 1)}
    assert {c.config.block_n for c in tma} == {128, 256} and not any(c.config.stream_k for c in tma)
    assert {c.config.split_k for c in tma} > {1, 2}
    one = next(c for c in tma if c.config.block_n == 128 and c.config.split_k == 1)
    est = dispatch.estimate(few, one, h200)
    assert est.terms["efficiency"] == pytest.approx(0.5 * tile_efficiency(CALIBRATION, "tma 128x128"))
    top = dispatch.rank(few, "bf16", h200)[0]
    assert top.step == "persistent_gemm" and (top.config.block_m, top.config.consumers) == (64, 1)
    assert "tma 64x" in dispatch.describe(top.candidate)
    # from 65 rows, and (not yet run there) a batch or padded copies of misaligned rows: the two-consumer tiles
    for text, precision in (("gemm:65x4096x14336:bfloat16:nt:out=bfloat16:residual", "bf16"),
                            ("bmm:8x32x4096x4096:bfloat16", "bf16"), ("gemm:40x4097x1000:float16", "fp16")):
        tma = [c for c in dispatch.candidates(parse_workload(text), precision, h200) if c.step == "persistent_gemm"]
        assert tma and all(c.config.block_m >= 128 and c.config.consumers == 2 for c in tma), text


def test_the_tma_choice_stages_a_float32_c_whose_rows_are_not_16_byte_aligned():
    # odd N: straight from the fragments no pair of outputs leaves as one store, and each 4-byte
    # store half-fills its sectors; through the warps' staging areas a store is one 128-byte row
    # segment. The model's store term is not changed by it (unmeasured), so the tile is the same
    wl = parse_workload("gemm:6790x1715x177:float16")
    step, cfg = dispatch.choose(wl, "fp16")
    assert step == "persistent_gemm" and cfg.staged_store and cfg.pad_operands and cfg.block_n >= 128
    assert "C staged" in dispatch.describe(dispatch.rank(wl, "fp16")[0].candidate)
    for c in dispatch.candidates(wl, "fp16"):
        if c.step == "persistent_gemm":
            assert c.config.staged_store == (c.config.split_k == 1 and c.config.block_n >= 128)
    # not where rows of a float32 C are 16-byte aligned, nor split-K's partial sums
    for w, p in (("gemm:6790x1716x177:float16", "fp16"), ("gemm:6790x1714x177:float16", "fp16")):
        assert any(getattr(c.config, "staged_store", False) for c in dispatch.candidates(parse_workload(w), p)) \
            == (int(w.split("x")[1]) % 4 != 0)


@pytest.mark.parametrize("w,p", [("gemm:2048x2048x2048:bfloat16:nt:out=bfloat16", "bf16"),
                                 ("gemm:2048x2047x2048:float16:nt:bias", "fp16"),
                                 ("gemm:4096x6144x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh", "bf16")])
def test_the_tma_choice_stages_a_16_bit_output_or_an_epilogue_on_any_n(w, p):
    # bf16 pairs straight from the fragments leave as 8 rows x 16 bytes, half of each sector: every
    # whole-tile TMA candidate 128 or more wide stores D through the staging areas, aligned or not
    for c in dispatch.candidates(parse_workload(w), p):
        if c.step == "persistent_gemm":
            assert c.config.staged_store == (c.config.split_k == 1 and c.config.block_n >= 128), c


def test_runs_of_outputs_on_unaligned_rows_cost_two_sectors_a_sector():
    """Rows of C not 16-byte aligned: a kernel whose warps store runs of consecutive outputs (the
    staged store, the TF32 kernel's 8-column groups) writes about two sectors per sector of output
    (run_unaligned_store, 0.5), not the quarter rate of scalar stores strided across the lanes."""
    cal, gpu = dispatch.CALIBRATION, GpuSpec()
    odd, even = parse_workload("gemm:3000x5001x64:float16"), parse_workload("gemm:3000x5000x64:float16")
    runs = cal.get("run_unaligned_store", dispatch_store.RUN_UNALIGNED_STORE)
    assert runs == 0.5 and dispatch._store_factor(odd, cal, runs=True) == runs
    assert dispatch._store_factor(odd, cal) == cal["unaligned_store"] < runs
    assert dispatch._store_factor(even, cal, runs=True) == dispatch._store_factor(even, cal) == 1.0
    est = {}
    for staged in (True, False):
        cfg = get("persistent_gemm").config(block_m=128, block_n=128, pad_operands=True, staged_store=staged)
        est[staged] = dispatch.estimate(odd, dispatch.Candidate("persistent_gemm", cfg, "tma", "tma 128x128"), gpu, cal)
    inputs, out = 2 * (3000 * 64 + 64 * 5001), 4 * 3000 * 5001  # bytes: A and B once, C in fp32
    ratio = (inputs + out / cal["unaligned_store"]) / (inputs + out / runs)
    assert est[False].terms["dram_us"] / est[True].terms["dram_us"] == pytest.approx(ratio)
    assert est[True].time_us < est[False].time_us


def test_runs_on_rows_that_are_not_whole_sectors_cost_two_sectors_a_sector():
    """An fp32 C with N % 8 = 4 has rows 16-byte aligned, every other one starting mid-sector: the
    Hopper kernels' stores from the accumulator fragments (a sector of a row: 4 lanes x 2 floats)
    and the staged store's runs straddle sectors there (run_unaligned_store); rows of whole sectors,
    and the SIMT kernels' 16-byte vectors, are charged nothing."""
    cal, gpu = dispatch.CALIBRATION, GpuSpec()
    runs = cal.get("run_unaligned_store", dispatch_store.RUN_UNALIGNED_STORE)
    half, whole = parse_workload("gemm:5000x11356x16:float16"), parse_workload("gemm:5000x11352x16:float16")
    assert dispatch._store_factor(half, cal, sectors=True) == dispatch._store_factor(half, cal, runs=True) == runs
    assert dispatch._store_factor(half, cal) == 1.0
    assert dispatch._store_factor(whole, cal, sectors=True) == dispatch._store_factor(whole, cal, runs=True) == 1.0
    # a 16-bit output's rows are whole sectors at N % 16 == 0
    for n, factor in ((4104, runs), (4096, 1.0)):
        assert dispatch._store_factor(parse_workload(f"gemm:64x{n}x64:bfloat16:out=bfloat16"), cal, runs=True) == factor
    cands = {"tma": dispatch.Candidate("persistent_gemm", get("persistent_gemm").config(block_m=128, block_n=128),
                                       "tma", "tma 128x128"),
             "cp": dispatch.Candidate("wgmma_gemm", get("wgmma_gemm").config(block_m=128, block_n=128), "cp", "cp 128x128")}
    for fam, cand in cands.items():
        terms = {wl.N: dispatch.estimate(wl, cand, gpu, cal).terms for wl in (half, whole)}
        moved = {n: t["dram_us"] / t["spread"] * gpu.memory_gbps * 1e3 for n, t in terms.items()}  # bytes at full rate
        per_c = {n: (moved[n] - 2 * (5000 * 16 + 16 * n)) / (4 * 5000 * n) for n in moved}  # per byte of C
        assert per_c[11352] == pytest.approx(1.0) and per_c[11356] == pytest.approx(1 / runs), fam
    # the model then leaves the fragments' stores for short_k_gemm's 16-byte vectors on the rows of half sectors;
    # short_k_tc_gemm, which stores staged rows, takes both (on 16305x6904x3 fp16, rows of whole sectors, it ran
    # 103.6 µs where the TMA kernel ran 172.8: reports/results/NVIDIA_H200/short_k_tc)
    def first(wl, leave=()):
        return next(e.step for e in dispatch.rank(wl, "fp16") if e.candidate.family not in leave)

    assert first(whole, ("short_k_tc",)) == "persistent_gemm" and first(half, ("short_k_tc",)) == "short_k_gemm"
    assert first(whole) == first(half) == "short_k_tc_gemm"
