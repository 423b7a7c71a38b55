"""Tiles of any width that is a multiple of 16, for a B stored N×K (persistent_gemm's narrow B
pieces, schedules.tma_common.b_box_rows), and the dispatcher's widths fitted to whole rounds of the
SMs (schedules.dispatch_fitted): the boxes and byte counts of a narrow tile, its wgmma, no spills
(256 rows with up to 192 accumulators a thread), the refusals, the widths offered; on a GPU, the
products right, ragged tiles, clusters, split-K, stream-K and epilogues included."""

import re

import pytest

from schedules import ScheduleParamError, dispatch, get, gpus, parse_workload
from schedules.dispatch_fitted import fitted_stages, fitted_tiles
from schedules.tma_common import b_box_rows
from tests.helpers import cached_build, rounded_output_bound, run_on_gpu

LAYER = "gemm:2000x3584x3584:bfloat16:nt:out=bfloat16"
def built(workload, **params):
    return cached_build("persistent_gemm", workload, **params)


@pytest.mark.parametrize("block_n, rows", [(64, 64), (128, 64), (256, 64), (224, 56), (160, 40), (144, 48),
                                           (80, 40), (96, 48), (112, 56), (176, 16), (208, 16), (240, 48)])
def test_b_boxes_are_whole_swizzle_atoms_that_divide_the_tile(block_n, rows):
    assert b_box_rows(block_n) == rows
    assert rows % 8 == 0 and block_n % rows == 0 and rows <= 64


def test_a_narrow_tile_loads_b_in_boxes_of_its_divisor_and_multiplies_at_its_width():
    """128 × 224: four boxes of 56 B rows a K tile, (128 + 224) · 128 bytes announced per slot,
    m64n224k16 wgmmas, no spills."""
    b = built(LAYER, block_m=128, block_n=224, stages=4, staged_store=True)
    assert all(k.spills == 0 for k in b.device.kernels)
    ptx, cuda = b.device.ptx, b.device.cuda
    assert "wgmma.mma_async.sync.aligned.m64n224k16.f32.bf16.bf16" in ptx
    # per K tile the A box and four B boxes (nvcc unrolls the producer's loop as for 128 × 256's five)
    wide = built(LAYER, block_m=128, block_n=256, stages=4, staged_store=True).device.ptx
    assert ptx.count("cp.async.bulk.tensor.2d") == wide.count("cp.async.bulk.tensor.2d")
    # B's tensor map in boxes of 64 K × 56 rows; the pieces land 56 · 128 = 7168 bytes apart after the A tile
    assert re.search(r"tensormap_encode_tiled\(B_map, [^)]*, 64, 56, 1, 1,", b.host)
    for piece in range(4):
        assert f"(kt & 3) * 45056) + {16384 + piece * 7168}))" in cuda


@pytest.mark.parametrize("params", [dict(block_m=256, block_n=160, stages=4),
                                    dict(block_m=256, block_n=192, stages=3, staged_store=True),
                                    dict(block_m=256, block_n=144, stages=4)])
def test_256_rows_hold_up_to_192_accumulators_without_spills(params):
    b = built("gemm:1000x4608x3584:bfloat16:nt:out=bfloat16:bias:gelu_tanh", **params)
    assert all(k.spills == 0 for k in b.device.kernels)
    assert f"m64n{params['block_n']}k16" in b.device.ptx


@pytest.mark.parametrize("workload, params, word", [
    ("gemm:1024x1024x1024:float16", dict(block_n=224), "multiple of 16"),  # B stored K×N: 64-column panels
    ("gemm:1024x1024x1024:float16:tn", dict(block_n=160), "multiple of 16"),
    (LAYER, dict(block_n=232), "multiple of 16"),
    (LAYER, dict(block_n=144, staged_store=True), "32 columns at a time"),
    (LAYER, dict(block_n=144, cluster_m=2), "even number of B pieces"),
    (LAYER, dict(block_m=256, block_n=256, stages=3), "registers a consumer gets"),
])
def test_widths_the_kernel_cannot_take_are_refused_in_one_line(workload, params, word):
    spec = get("persistent_gemm")
    with pytest.raises(ScheduleParamError, match=word) as e:
        spec.validate(parse_workload(workload), spec.config(**params))
    assert "\n" not in str(e.value)


def test_fp8_keeps_64_row_pieces():
    spec = get("fp8_tma_gemm")
    with pytest.raises(ScheduleParamError, match=r"block_n must be 64, 128, 192 or 256, got 224"):
        spec.validate(parse_workload("gemm:1024x1024x1024:float8_e4m3fn:nt:out=bfloat16"), spec.config(block_n=224))


def test_widths_are_fitted_to_whole_rounds_only_for_a_b_stored_n_by_k():
    """2000 rows on 132 SMs: 16 tile rows of 128 (8 of 256); 3584 columns in two rounds of 128-row
    tiles: 16 columns of 224 (128 × 256 takes two rounds too); 2560 columns in one round of
    256-row tiles: 16 of 160 (256 × 192: 8 × 14 tiles, one round)."""
    fixed = dispatch.TMA_TILES
    tiles = fitted_tiles(parse_workload(LAYER), 132, fixed)
    assert (128, 224, fitted_stages(128, 224)) in tiles
    for bm, bn, st in tiles:
        rows, widest = -(-2000 // bm), 256 if bm == 128 else 192
        assert bn % 32 == 0 and 64 < bn <= widest and (bm, bn) not in {(m, n) for m, n, _ in fixed}
        rounds = -(-rows * -(-3584 // bn) // 132)
        assert rows * -(-3584 // (bn - 32)) > rounds * 132  # 32 columns narrower: a round more
        assert rounds <= -(-rows * -(-3584 // widest) // 132)  # no more rounds than the widest tile of its rows
    assert (256, 160) in [t[:2] for t in fitted_tiles(parse_workload("gemm:2000x2560x10240:bfloat16:nt"), 132, fixed)]
    # 1234 x 6000: 128 x 256 in two rounds (10 x 24 tiles); no width is offered that takes three
    assert all(bm == 256 or -(-10 * -(-6000 // bn) // 132) <= 2
               for bm, bn, _ in fitted_tiles(parse_workload("gemm:1234x6000x3000:bfloat16:nt"), 132, fixed))
    assert fitted_tiles(parse_workload("gemm:2000x3584x3584:bfloat16"), 132, fixed) == []  # nn: B n-major
    assert fitted_tiles(parse_workload("bmm:4x2000x3584x3584:bfloat16:nt"), 132, fixed) == []
    assert all(fitted_stages(bm, bn) * (bm + bn) * 128 + 1024 <= 227 * 1024 for bm, bn, _ in tiles)


def test_the_dispatcher_takes_a_fitted_width_where_it_saves_a_round():
    """2000 × 3584 × 3584 (bf16, nt) on an H200: 128 × 256 tiles take two rounds for 1.7 of work;
    128 × 224 tiles two rounds of less work each: the model's choice (it failed before the fitted
    widths: 128 × 256)."""
    gpu = gpus.profile("NVIDIA H200")
    best = dispatch.rank(parse_workload(LAYER), "bf16", gpu)[0]
    assert (best.config.block_m, best.config.block_n) == (128, 224)
    assert best.terms["waves"] == 2
    square = dispatch.rank(parse_workload("gemm:4096x4096x4096:bfloat16:nt:out=bfloat16"), "bf16", gpu)[0]
    assert square.config.block_n % 64 == 0  # whole rounds already: no narrower tile


def test_a_wide_256_row_tile_runs_at_its_own_rate_or_the_best_two_consumer_rate():
    """256 × 160 and 256 × 192 at the rates the "weights stored" sweep fitted them; a 256-row tile wider than
    the widest calibrated one at the best calibrated two-consumer rate (before that sweep, 128 × 256's carried
    256 × 160 and 256 × 192). 2000 × 2560 × 10240 goes to 256 × 160 tiles (8 × 16, one round) where it took
    128 × 160 (16 × 16, two rounds) at 256 × 128's rate; measured 136.3 against 146.1 µs (H200)."""
    from schedules.calibration import CALIBRATION, tile_efficiency

    eff = CALIBRATION["efficiency"]
    assert {"tma 256x160", "tma 256x192"} <= set(eff)
    best_rate = max(v for k, v in eff.items() if re.fullmatch(r"tma (128|256)x\d+", k))
    assert tile_efficiency(CALIBRATION, "tma 256x224") == best_rate
    assert eff["tma 256x160"] < tile_efficiency(CALIBRATION, "tma 256x176") < eff["tma 256x192"]  # between them
    best = dispatch.rank(parse_workload("gemm:2000x2560x10240:bfloat16:nt:out=bfloat16"), "bf16",
                         gpus.profile("NVIDIA H200"))[0]
    assert (best.config.block_m, best.config.block_n, best.terms["waves"]) == (256, 160, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", [
    (LAYER, dict(block_m=128, block_n=224, stages=4, staged_store=True)),
    ("gemm:1000x4600x3584:bfloat16:nt:out=bfloat16", dict(block_m=256, block_n=144, stages=4)),  # ragged N
    ("gemm:1000x4610x1000:float16:nt", dict(block_m=128, block_n=160, stages=5, cluster_m=2)),  # 40-row multicast
    ("gemm:304x1000x2000:bfloat16:tt:out=bfloat16", dict(block_m=128, block_n=208, stages=4)),  # A m-major
    ("gemm:777x1000x3000:float16:nt", dict(block_m=256, block_n=176, stages=4, split_k=2)),
    ("gemm:1000x3000x2000:bfloat16:nt:out=bfloat16:bias:gelu_tanh", dict(block_m=128, block_n=224, stages=4,
                                                                         stream_k=True, staged_store=True)),
    ("gemm:2000x2560x2560:bfloat16:nt:out=bfloat16:residual", dict(block_m=256, block_n=160, stages=4)),
    ("gemm:1000x4608x3584:bfloat16:nt:out=bfloat16:bias:gelu_tanh", dict(block_m=256, block_n=192, stages=3,
                                                                         staged_store=True)),
    ("gemm:500x1001x640:float16:nt", dict(block_m=128, block_n=80, stages=6, pad_operands=True)),
])
def test_narrow_tiles_are_right(harness, workload, params):
    assert run_on_gpu(harness, get("persistent_gemm"), workload, **params) < rounded_output_bound(workload)


@pytest.mark.gpu
def test_best_fp16_gemm_on_a_fitted_width_is_right(harness):
    assert run_on_gpu(harness, get("best_fp16_gemm"), LAYER) < rounded_output_bound(LAYER)
