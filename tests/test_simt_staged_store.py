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
    assert not staged.dynamic_shared  # the ring stays where it was (static): only C's tile is dynamic


def test_the_kernel_stages_a_tile_of_the_block_and_stores_rows_of_it():
    """One 128 × 128 float tile in dynamic shared memory (not one per vthread: four times that), 64
    accumulators a thread, no spills; each store of C reads the tile at a lane's own column."""
    b = cached_build("warp_tiled_gemm", MISALIGNED, staged_store=True)
    assert all(k.spills == 0 for k in b.device.kernels)
    cuda = b.device.cuda
    assert "extern __shared__" in cuda and "vthread" not in b.scheduled
    assert re.search(r"float C\w*local\w*\[64\]", cuda)
    stores = re.findall(r"C_ptr\[[^\n]*\] = C\w*shared_dyn\w*\[([^\n]*)\];", cuda)
    assert stores and all("threadIdx.x" in s for s in stores)
    highest = max(int(x) for s in stores for x in re.findall(r"\+ (\d+)\)\]?$", s) or [0])
    assert highest < 128 * 128


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
    ("skinny_gemm", "gemm:300x333x129:bfloat16:out=bfloat16:bias:silu",
     dict(block_m=32, block_n=64, thread_m=4, thread_n=4, vector=4, warps_m=2, warps_n=1)),
])
def test_staged_simt_products_are_right(harness, step, workload, params):
    error = run_on_gpu(harness, get(step), workload, staged_store=True, **params)
    assert error < rounded_output_bound(workload)
