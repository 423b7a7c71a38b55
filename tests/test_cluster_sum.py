"""Split-K summed in a thread-block cluster (``cluster_sum`` on the warp-specialized TMA kernel):
every (tile, K slice) unit is taken once, a cluster holding one tile's slices; the kernel compiles
for sm_90a as one kernel, with the cluster barriers and distributed shared-memory loads and no
workspace; the knob is refused where it cannot apply; (on a GPU) the products are right. The
dispatcher does not offer it (slower than the sum kernel: schedules/cluster_sum.py)."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from schedules.cluster_sum import ClusterSliceUnits
from tests.helpers import build_spec, rounded_output_bound, run_on_gpu


def _plain(expr):
    """An index expression of constants (the kernel's decoding at a given block, folded), as a Python int."""
    return expr if isinstance(expr, int) else int(expr.value)


@pytest.mark.parametrize("tiles,splits", [(1, 2), (7, 3), (32, 4), (64, 2), (5, 8)])
def test_each_cluster_holds_the_slices_of_one_tile(tiles, splits):
    units = ClusterSliceUnits(tiles, tiles * splits, 16, 4, splits, 0, lambda t, rank: (t, rank))
    seen = set()
    for b in range(tiles * splits):
        assert _plain(units.count(b)) == 1  # one unit per block
        u = _plain(units.unit(b, 0))
        tile, part = u % tiles, u // tiles
        assert tile == b // splits and part == b % splits  # consecutive blocks: one tile's slices
        seen.add(u)
    assert seen == set(range(tiles * splits))


@pytest.fixture(scope="module")
def fused_build():
    # 61 rows against a 4096 x 4096 weight with a residual and a bf16 output: 64 tiles of 128 x 64, 2 slices
    return build_spec(get("persistent_gemm"), "gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual",
                      block_n=64, stages=8, split_k=2, cluster_sum=True)


def test_cluster_sum_is_one_kernel_without_a_workspace(fused_build):
    from reports.engine.kernel import launches_of

    b = fused_build
    assert "for 'sm_90a'" in b.device.ptxas_log
    assert len(b.device.kernels) == 1 and all(k.spills == 0 for k in b.device.kernels)
    ptx = b.device.ptx
    assert "barrier.cluster.arrive" in ptx and "mapa.shared::cluster" in ptx
    assert "ld.shared::cluster.v4.f32" in ptx and "st.shared.v4.f32" in ptx  # the sums, 16 bytes at a time
    assert "bar.sync" in ptx  # the consumers of slices 1.. meet before they park their sums in the ring
    assert "P = T.alloc_buffer" not in b.lowered  # no partials in global memory
    cfg = get("persistent_gemm").config(block_n=64, stages=8, split_k=2, cluster_sum=True)
    # 64 tiles x 2 slices; the ring's shared memory as without the knob (a float32 view of it had
    # retyped the allocation: 4x the bytes, refused at launch)
    (launch,) = launches_of(b.host)
    assert launch.grid[0] == 64 * 2 and launch.dynamic_shared_bytes == cfg.shared_bytes(2) == 8 * 24576 + 1024
    assert cfg.workspace_bytes(parse_workload("gemm:61x4096x4096:bfloat16:nt")) == 0
    assert cfg.describe().endswith("sk2 csum")


def test_cluster_sum_is_refused_where_it_cannot_apply():
    wl = parse_workload("gemm:128x1024x4096:float16")
    step = get("persistent_gemm")
    for params, match in [(dict(split_k=1), "2 to 8 K slices"), (dict(split_k=16), "2 to 8 K slices"),
                          (dict(split_k=2, cluster_m=2, block_n=128), "no 2x1 cluster"),
                          (dict(split_k=2, block_n=256, stages=2), "parks a partial tile")]:
        with pytest.raises(ScheduleParamError, match=match):
            step.validate(wl, step.config(cluster_sum=True, **params))
    with pytest.raises(ScheduleParamError, match="batch"):
        step.validate(parse_workload("bmm:4x256x128x4096:float16"), step.config(split_k=2, cluster_sum=True))
    with pytest.raises(ScheduleParamError, match="split_k must be 1"):  # the FP8 kernel: no split-K at all
        get("fp8_tma_gemm").validate(parse_workload("gemm:256x256x4096:float8_e4m3fn:nt"),
                                     get("fp8_tma_gemm").config(split_k=2, cluster_sum=True))


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [
    ("gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual", dict(block_n=64, stages=8, split_k=2)),
    ("gemm:61x2560x2560:bfloat16:nt:out=bfloat16:bias", dict(block_n=128, stages=6, split_k=4)),
    ("gemm:61x4096x4096:bfloat16:nt:out=bfloat16", dict(block_n=128, stages=6, split_k=6)),  # 6 slices of 11 K tiles:
    # the last one's 2 past K not loaded; two waves of clusters
    ("gemm:16x3584x18944:bfloat16:nt:out=bfloat16:residual", dict(block_n=128, stages=6, split_k=8)),
    ("gemm:200x1000x8200:float16", dict(block_n=128, stages=6, split_k=3)),  # ragged tiles, a short last slice
    ("gemm:300x520x4100:float16", dict(block_n=64, stages=8, split_k=5, staged_store=True,
                                                 pad_operands=True)),  # fp32 C staged
    ("gemm:256x1024x3000:bfloat16:nt:out=bfloat16:bias:gelu_tanh", dict(block_n=256, stages=4, split_k=2)),
    ("gemm:100x777x2001:float16:out=float16:residual", dict(block_n=128, stages=6, split_k=4, pad_operands=True)),
])
def test_cluster_sum_is_right(harness, workload, params):
    assert run_on_gpu(harness, get("persistent_gemm"), workload, cluster_sum=True, **params) < \
        rounded_output_bound(workload)
