"""persistent_gemm's ping-pong consumers (``pingpong=True``, schedules/pingpong.py) on 16-bit inputs: each consumer
warpgroup owns a whole tile and the two take the block's tiles in turn, handing the tensor cores over on named
barriers; the kernel compiles for sm_90a without spills and without serialized wgmmas, with the hand-off, one
arrival per ring slot and the whole tile's rows per consumer; what the structure cannot take is refused in one
line; the cooperative kernel's CUDA does not change; and on a GPU the products are right (epilogues, 16-bit
outputs, several tiles per block in odd counts, clusters, a batch, padded copies, the transposed layouts)."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from tests.helpers import cached_build, rounded_output_bound, run_on_gpu

STEP = "persistent_gemm"
LAYER = "gemm:4096x4096x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh"
PINGPONG = dict(pingpong=True, block_m=128, block_n=128, stages=6, staged_store=True)
built = cached_build


def test_each_consumer_takes_whole_tiles_in_turn():
    """Two m64n128k16 wgmmas per K step from one consumer (its 128 rows), the turn waited for on barrier 1 + w
    and passed on barrier 2 - w (256 threads), one arrival per ring slot's empty barrier, TMA tiles, mbarrier
    waits and setmaxnreg as in the cooperative kernel; 0 spills and no serialized wgmmas (C7514)."""
    b = built(STEP, LAYER, **PINGPONG)
    assert "for 'sm_90a'" in b.device.ptxas_log and "C7514" not in b.device.ptxas_log
    assert len(b.device.kernels) == 1 and b.device.kernels[0].spills == 0
    ptx = b.device.ptx
    for mark in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d", "mbarrier.try_wait",
                 "setmaxnreg.dec", "setmaxnreg.inc", "bar.sync", "bar.arrive", "tanh.approx.f32"):
        assert mark in ptx, mark
    assert "m64n256k16" not in ptx
    cuda = b.device.cuda
    assert "tvm_builtin_ptx_bar_arrive_arrive(((uint)2 - " in cuda
    assert "tvm_builtin_ptx_bar_sync_count_sync(((uint)1 + " in cuda
    assert "bars_ptr[6]))), (uint)1);" in cuda and "(uint)2);" not in cuda  # bars[6:12]: empty, one reader each
    cooperative = built(STEP, LAYER, staged_store=True)
    assert "bar_arrive" not in cooperative.device.cuda and "bars_ptr[4]))), (uint)2);" in cooperative.device.cuda
    launch = get(STEP).validate(parse_workload(LAYER), get(STEP).config(**PINGPONG))
    assert launch.grid == (132, 1, 1) and launch.block == (384, 1, 1)
    assert launch.shared_bytes == 6 * (128 + 128) * 128 + 1024 + 2 * 4 * 2560
    assert get(STEP).config(**PINGPONG).describe() == "128x128x64 s6 ws 2c pers pingpong"


def test_a_64_row_tile_and_clusters_build_without_spills():
    """64 × 256 (one m64n256k16 per K step) and 128 × 128 in 2×1 clusters (B multicast, both blocks' slots
    released by each block's reading consumer: two arrivals), a residual prefetched for the tile's rows."""
    wide = built(STEP, LAYER.replace("bias:gelu_tanh", "residual"), **dict(PINGPONG, block_m=64, block_n=256, stages=5))
    pair = built(STEP, LAYER, **dict(PINGPONG, cluster_m=2))
    for b in (wide, pair):
        assert all(k.spills == 0 for k in b.device.kernels) and "C7514" not in b.device.ptxas_log
        assert "bar.arrive" in b.device.ptx
    assert "m64n256k16" in wide.device.ptx and "prefetch.global.L2" in wide.device.ptx
    assert ".multicast::cluster" in pair.device.ptx and "bars_ptr[6]))), (uint)2);" in pair.device.cuda


def test_each_consumer_stages_its_tile_in_its_own_warps_areas():
    """Both consumers store a whole tile's rows from row 0, so the staging area is the warp's among all eight consumer
    warps (tid / 32 - 4), not among one warpgroup's four (which two consumers storing at once would share)."""
    area = "(((((int)threadIdx.x) >> 5) * 2560) - 10240)"
    assert area in built(STEP, "gemm:1000x520x2000:float16", **dict(PINGPONG, sms=5)).device.cuda
    assert area in built(STEP, LAYER, **PINGPONG).device.cuda


@pytest.mark.parametrize("params, word", [
    (dict(PINGPONG, block_m=256, stages=4), "a consumer warpgroup owns the whole tile: block_m must be 64 or 128"),
    (dict(PINGPONG, block_n=192, stages=5), "holds the whole 128x192 tile's 192 accumulators"),
    (dict(PINGPONG, persistent=False), "pingpong needs persistent=true"),
    (dict(PINGPONG, consumers=1), "pingpong takes 2 consumer warpgroups"),
    (dict(PINGPONG, stages=7), "shared memory"),
    (dict(PINGPONG, split_k=2), "split_k is for the cooperative consumers"),
    (dict(PINGPONG, stream_k=True), "stream_k is for the cooperative consumers"),
    (dict(PINGPONG, staged_store=False, tma_store=True), "tma_store is for the cooperative consumers"),
    (dict(PINGPONG, block_n=80, block_m=64, stages=8), "staged_store stages C 32 columns at a time"),
])
def test_what_pingpong_cannot_take_is_refused_in_one_line(params, word):
    spec = get(STEP)
    with pytest.raises(ScheduleParamError, match=word) as e:
        spec.validate(parse_workload(LAYER), spec.config(**params))
    assert "\n" not in str(e.value)


def test_the_cooperative_kernel_is_unchanged_by_the_knob():
    """pingpong=False is the default, and its kernel is the one without the knob: same CUDA."""
    assert get(STEP).config().pingpong is False
    assert built(STEP, LAYER, staged_store=True).device.cuda == built(STEP, LAYER, staged_store=True,
                                                                      pingpong=False).device.cuda


GPU_CASES = [
    (LAYER, PINGPONG),
    # several tiles per block in odd and even counts (sms: a small persistent grid), fp32 C from the fragments
    ("gemm:1000x520x2000:float16", dict(PINGPONG, staged_store=False, sms=5)),
    ("gemm:1000x520x2000:bfloat16:nt:out=bfloat16:residual", dict(PINGPONG, block_m=64, block_n=256, stages=5, sms=7)),
    ("gemm:1100x520x2048:bfloat16:nt:out=bfloat16:bias:silu", dict(PINGPONG, cluster_m=2, sms=6)),
    ("bmm:3x500x704x256:float16", dict(PINGPONG, sms=4)),
    ("gemm:1001x777x3001:float16", dict(PINGPONG, pad_operands=True, sms=5)),
    ("gemm:1000x520x2000:float16:tn", dict(PINGPONG, staged_store=False, sms=3)),
    ("gemm:1000x520x2000:bfloat16:tt:out=bfloat16:relu", dict(PINGPONG, block_m=64, block_n=128, stages=8, sms=9)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", GPU_CASES)
def test_pingpong_products_are_right(harness, workload, params):
    err = run_on_gpu(harness, get(STEP), workload, **params)
    print(f"{STEP} {params} on {workload}: relative error {err:.3g}")
    assert err <= rounded_output_bound(workload)
