"""SIMT tiles fitted to the narrow side of a thin fp32 product (schedules.dispatch_thin.thin_simt_tiles): the
widths offered (24, 32, 48 for an output 17-48 wide or high, mirrored for a few rows), none for 16-bit inputs
or other shapes, the load width each thread tile takes, their rates, the dispatcher's choice on a drawn
product that a 64-wide tile had served at 69% of cuBLAS; the skinny tiles offered to a small 16-bit output over a
long K; the kernels build without spills; on a GPU, ragged tiles and split-K right."""

import pytest

from schedules import dispatch, get, gpus, parse_workload
from schedules.dispatch_thin import SMALL_LONG_K, SMALL_OUTPUT, THIN_SIMT_EFFICIENCY, THIN_SIMT_TILES, small_product, thin_simt_tiles
from schedules.gemm_fast import simt_vector
from tests.helpers import cached_build, run_on_gpu

H100 = gpus.profile("NVIDIA H100 80GB HBM3")
H200 = gpus.profile("NVIDIA H200")


@pytest.mark.parametrize("shape, widths", [
    ("15810x24x7910", {24}), ("6612x48x10318", {48}), ("9820x31x812", {32}), ("3161x17x1388", {24}),
    ("23x783x12514", {24}), ("46x3881x450", {48}), ("30x3000x40", {32}),
])
def test_the_narrowest_width_that_covers_the_thin_side_is_offered(shape, widths):
    wl = parse_workload(f"gemm:{shape}")
    tiles = thin_simt_tiles(wl)
    few_rows = wl.M < wl.N
    assert {(bm if few_rows else bn) for bm, bn, *_ in tiles} == widths
    assert len(tiles) == (1 if widths == {48} else 2)
    for bm, bn, tm, tn, wm, wn in tiles:
        # 32 lanes a warp, the thread tiles dividing the block's
        assert (bm // tm) * (bn // tn) == 32 * wm * wn
        assert bm % tm == 0 and bn % tn == 0


@pytest.mark.parametrize("workload", ["gemm:15810x16x7910", "gemm:15810x49x7910", "gemm:1000x1000x1000",
                                      "gemm:15810x24x7910:float16", "gemm:24x15810x7910:bfloat16:nt"])
def test_no_fitted_tile_outside_17_to_48_or_for_16_bit_inputs(workload):
    assert thin_simt_tiles(parse_workload(workload)) == []


def test_a_thread_tile_loads_as_wide_as_both_its_sides_allow():
    assert [simt_vector(*t) for t in [(8, 8), (8, 6), (6, 8), (8, 4), (4, 1), (8, 1), (5, 8)]] == [4, 2, 2, 4, 1, 1, 1]


def test_every_fitted_tile_and_its_mirror_has_a_rate():
    for tiles in THIN_SIMT_TILES.values():
        for bm, bn, tm, tn, _, _ in tiles:
            for key in (f"simt {bm}x{bn} t{tm}x{tn}", f"simt {bn}x{bm} t{tn}x{tm}"):
                assert 0.3 < THIN_SIMT_EFFICIENCY[key] < 1.1


def test_the_dispatcher_takes_a_fitted_width_for_a_thin_fp32_product():
    """15810 × 24 × 7910 (seed 35's fp32 floor: 64 × 64 tiles, 69% of cuBLAS): a 24-wide tile now, at its
    table rate; a square product keeps the general tiles."""
    best = dispatch.rank(parse_workload("gemm:15810x24x7910"), "fp32", H100)[0]
    assert best.step == "split_k_gemm" and best.config.block_n == 24
    assert best.terms["efficiency"] <= THIN_SIMT_EFFICIENCY[dispatch.simt_key(best.config)]
    square = dispatch.rank(parse_workload("gemm:2048x2048x2048"), "fp32", H100)[0]
    assert square.config.block_n in (64, 128)


@pytest.mark.parametrize("shape, offered", [
    ("159x75x273", True), ("71x75x1019", True), ("96x302x437", True),   # small outputs, K of 256 or more
    ("323x69x131", False), ("756x77x716", False), ("177x414x1087", False),  # K too short, outputs too large
])
def test_a_small_16_bit_output_over_a_long_k_is_offered_the_skinny_tiles(shape, offered):
    """Eight 64 x 64 tiles' worth of outputs or fewer over a K of 256 or more: the skinny SIMT tiles (split
    over K) are candidates beside the tensor-core kernels, and on 159 x 75 x 273 the model takes one of them
    (the cp.async wgmma tile it took before ran at 42% of cuBLAS, the SIMT split at 100-112%)."""
    wl = parse_workload(f"gemm:{shape}:float16")
    assert small_product(wl) == offered == (wl.M * wl.N <= SMALL_OUTPUT and wl.K >= SMALL_LONG_K)
    steps = {c.step for c in dispatch.candidates(wl, "fp16", H200)}
    assert ("skinny_gemm" in steps) == offered
    if shape == "159x75x273":
        best = dispatch.rank(wl, "fp16", H200)[0]
        assert best.step == "skinny_gemm" and best.config.split_k > 1


@pytest.mark.parametrize("workload, params", [
    ("gemm:1000x21x777", dict(block_m=128, block_n=24, thread_m=8, thread_n=6, vector=2, warps_m=2, warps_n=1)),
    ("gemm:45x1000x777", dict(block_m=48, block_n=128, thread_m=6, thread_n=8, vector=2, warps_m=1, warps_n=4)),
])
def test_fitted_tiles_build_without_spills(workload, params):
    b = cached_build("split_k_gemm", workload, split_k=4, block_k=8, **params)
    assert all(k.spills == 0 for k in b.device.kernels)
    assert b.kernel.registers <= 255


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", [
    ("gemm:1000x21x777", dict(block_m=128, block_n=24, thread_m=8, thread_n=6, vector=2, warps_m=2, warps_n=1,
                              split_k=4)),
    ("gemm:1003x31x901", dict(block_m=256, block_n=32, thread_m=8, thread_n=8, vector=4, warps_m=4, warps_n=1,
                              split_k=3)),
    ("gemm:45x1000x777", dict(block_m=48, block_n=128, thread_m=6, thread_n=8, vector=2, warps_m=1, warps_n=4,
                              split_k=5)),
    ("gemm:700x47x300", dict(block_m=128, block_n=48, thread_m=8, thread_n=6, vector=2, warps_m=4, warps_n=1,
                             split_k=1)),
])
def test_fitted_tiles_are_right(harness, workload, params):
    step = "split_k_gemm" if params["split_k"] > 1 else "warp_tiled_gemm"
    assert run_on_gpu(harness, get(step), workload, block_k=8, **params) < 1e-4


@pytest.mark.gpu
def test_best_gemm_on_a_thin_product_is_right(harness):
    assert run_on_gpu(harness, get("best_gemm"), "gemm:3001x23x2001") < 1e-4
