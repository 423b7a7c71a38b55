"""The SIMT tiles' staged store (FastTileConfig.staged_store): C leaves through a shared tile, a
warp's 32 lanes on 32 consecutive columns, where the fragments' own stores (a thread's 4 columns,
the lanes 16 bytes apart) write a quarter of each sector on rows that are not whole float4s. CPU:
the shared tile in the launch and in the kernel, the dense thread tile (no vthreads), the
refusals; GPU: the products right on misaligned and ragged shapes, every layout, a batch, 16-bit
inputs and outputs, epilogues, the cp.async ring."""

import re

import pytest

from schedules import ScheduleParamError, get, parse_workload
from schedules.gemm_fast import WarpTileConfig
from tests.helpers import cached_build, rounded_output_bound, run_on_gpu

MISALIGNED = "gemm:300x333x129"  # N % 4 = 1: the fragments' float4 stores become scalar ones


def test_the_launch_counts_the_staged_tile_in_dynamic_shared_memory():
    plain, staged = WarpTileConfig(), WarpTileConfig(staged_store=True)
    wl = parse_workload(MISALIGNED)
    assert staged.launch(wl).shared_bytes - plain.launch(wl).shared_bytes == 4 * 128 * 128
    assert staged.launch(wl).dynamic_shared and not plain.launch(wl).dynamic_shared
    # the ring beside it is dynamic too: a static ring of 35 KB and the 16 KB tile of 64 × 64 failed to launch
    # (CUDA_ERROR_INVALID_VALUE: TVM opts in to more than 48 KB only for a dynamic part that large)
    assert staged.dynamic_shared and not plain.dynamic_shared


def test_the_kernel_stages_a_tile_of_the_block_and_stores_rows_of_it():
    """One 128 × 128 float tile in dynamic shared memory, 64 accumulators a thread, no spills; C is
    stored from it 64 times a thread (the tile over 256 threads: with vthreads, each of the four
    staged a tile of its own and every element was stored four times), each store at a lane's column."""
    b = cached_build("warp_tiled_gemm", MISALIGNED, staged_store=True)
    assert all(k.spills == 0 for k in b.device.kernels)
    cuda = b.device.cuda
    assert "extern __shared__" in cuda and "vthread" not in b.scheduled
    assert re.search(r"float C\w*local\w*\[64\]", cuda)
    stores = re.findall(r"C_ptr\[([^\n]*)\] = \(\(float\*\)buf_dyn_shmem_ptr\)\[", cuda)
    assert len(stores) == 128 * 128 // 256
    assert all("threadIdx.x" in s for s in stores)


def test_the_default_tiles_keep_their_vthreads():
    b = cached_build("warp_tiled_gemm", MISALIGNED)
    assert "extern __shared__" not in b.device.cuda
    assert "vthread" in b.scheduled


def test_split_k_is_refused_in_one_line():
    with pytest.raises(ScheduleParamError) as e:
        get("warp_tiled_gemm").validate(parse_workload(MISALIGNED), WarpTileConfig(staged_store=True, split_k=2))
    assert "split_k > 1" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.gpu
@pytest.mark.parametrize("step, workload, params", [
    ("warp_tiled_gemm", MISALIGNED, {}),
    ("warp_tiled_gemm", "gemm:1000x2541x149", dict(block_m=64, block_n=64, warps_m=2, warps_n=1)),
    ("warp_tiled_gemm", "gemm:517x1031x333:float32:nt", {}),
    ("warp_tiled_gemm", "gemm:517x1031x333:float32:tt", dict(pad_operands=True)),
    ("warp_tiled_gemm", "bmm:3x200x301x77", {}),
    ("warp_tiled_gemm", "gemm:300x333x129:float32:bias:gelu_tanh:residual", {}),
    ("async_pipeline_gemm", "gemm:700x1001x300", dict(block_k=16, stages=4)),
    ("async_pipeline_gemm", "gemm:700x1001x300", dict(block_k=16, stages=4, fragment_pipeline=True)),
    ("warp_tiled_gemm", "gemm:2470x2541x149", dict(block_m=64, block_n=64, block_k=16, warps_m=2, warps_n=1,
                                                   stages=4, async_copy=True)),  # failed to launch at 23d8942
    ("skinny_gemm", "gemm:300x333x129:bfloat16:out=bfloat16:bias:silu",
     dict(block_m=32, block_n=64, thread_m=4, thread_n=4, vector=4, warps_m=2, warps_n=1)),
])
def test_staged_simt_products_are_right(harness, step, workload, params):
    error = run_on_gpu(harness, get(step), workload, staged_store=True, **params)
    assert error < rounded_output_bound(workload)


def test_the_dispatcher_offers_staged_twins_only_where_rows_of_c_are_not_whole_float4s():
    from schedules import dispatch

    def staged(shape):
        return [c for c in dispatch.simt_candidates(parse_workload(shape)) if c.config.staged_store]

    twins = staged("gemm:718x16134x115")
    assert twins and all(c.config.split_k == 1 and c.config.thread_n > 1 for c in twins)
    assert not staged("gemm:718x16132x115")  # N % 4 == 0: the fragments' float4 stores are whole


def test_the_model_stages_a_wide_short_product_on_misaligned_rows():
    """718 × 16134 × 115 (an H100 draw's fp32 floor, 59.9% of cuBLAS unstaged): its C is most of the
    work, written at a quarter of the store rate by the fragments; staged it ran 1.51x faster."""
    from schedules import dispatch, gpus

    best = dispatch.rank(parse_workload("gemm:718x16134x115"), "fp32", gpus.profile("H100"))[0]
    assert best.config.staged_store
    aligned = dispatch.rank(parse_workload("gemm:718x16132x115"), "fp32", gpus.profile("H100"))[0]
    assert not aligned.config.staged_store


@pytest.mark.parametrize("tile, extents", [(dict(thread_m=8, thread_n=8), [2, 4, 4]),
                                           (dict(block_m=64, block_n=64, thread_m=4, thread_n=4), [4, 8])])
def test_the_staged_lanes_put_a_cycles_reads_of_b_on_every_bank_once(tile, extents):
    """8 floats a thread along N (32 bytes): the lanes along N split in 2 × 4 around the lanes along M,
    so that the 8 lanes of a shared-memory cycle read 4 different B rows 32 bytes apart (128 bytes: every
    bank once) where 8 side by side read 256 bytes, two to a bank (1.08x the unstaged body's time at
    128 × 128 on the H100; 1.03x in this order). 4 floats a thread (16 bytes) keep the plain order."""
    from schedules.common import new_schedule
    from schedules.gemm_fast import _lane_order

    cfg = WarpTileConfig(**tile, staged_store=True)
    assert cfg.lanes_m * cfg.lanes_n == 32
    wl = parse_workload(MISALIGNED)
    sch = new_schedule(wl.prim_func())
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    _, ti, _ = sch.split(i, [None, cfg.lanes_m, cfg.thread_m])
    _, tj, _ = sch.split(j, [None, cfg.lanes_n, cfg.thread_n])
    lanes = _lane_order(sch, ti, tj, cfg)
    assert [int(sch.get(loop).extent) for loop in lanes] == extents
