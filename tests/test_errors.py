"""Bad input gets a one-line error naming the parameter, before anything is built."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from scripts.schedlab import main


@pytest.mark.parametrize("text, word", [
    ("gemm:0x512x2048", "M"), ("gemm:1024x-1x8", "N"), ("gemm:4x4x0", "K"), ("gemv:16384x0", "N"),
    ("gemm:1024x512", "malformed"), ("gemm:axbxc", "malformed"), ("conv:1x2x3", "malformed"),
    ("gemm:2x2x2:int8", "dtype"),
])
def test_bad_workloads(text, word):
    with pytest.raises(ScheduleParamError, match=word):
        parse_workload(text)


def test_too_many_threads_names_the_tile():
    with pytest.raises(ScheduleParamError, match=r"tile_m × tile_n = 2048 threads per block exceeds"):
        get("thread_2d_gemm").build(parse_workload("gemm:64x64x64"), tile_m=64, tile_n=32)


def test_too_much_shared_memory_names_the_tiles():
    with pytest.raises(ScheduleParamError, match=r"block_k × \(block_m \+ block_n\).*shared memory"):
        get("thread_tiling_gemm").build(parse_workload("gemm:256x256x256"), block_k=64)


def test_non_positive_parameter():
    with pytest.raises(ScheduleParamError, match="tile_k must be positive"):
        get("shared_cache_gemm").build(parse_workload("gemm:64x64x64"), tile_k=0)


def test_unknown_parameter_and_schedule():
    with pytest.raises(ScheduleParamError, match="unknown parameter 'tile_q'"):
        get("shared_cache_gemm").config(tile_q=3)
    with pytest.raises(ScheduleParamError, match="unknown schedule 'v99'"):
        get("v99")


def test_schedule_for_the_other_kind():
    with pytest.raises(ScheduleParamError, match="is for gemv"):
        get("warp_gemv").validate(parse_workload("gemm:8x8x8"))


def test_grid_limit_of_the_naive_step():
    with pytest.raises(ScheduleParamError, match="grid y = 70000 blocks"):
        get("naive_gemm").validate(parse_workload("gemm:70000x2x2"))


def test_a_kernel_whose_indices_pass_int32_is_refused_in_one_line(capsys):
    """Every buffer fits int32 indices but the padded tiles do not: TVM's int32 check, in one line."""
    assert main(["show", "warp_tiled_gemm", "--shape", "46340x46340x8", "--stage", "lowered"]) == 2
    err = capsys.readouterr().err.strip()
    assert "index space exceeds int32" in err and len(err.splitlines()) == 1 and "Check failed" not in err, err


@pytest.mark.parametrize("argv, word", [
    (["show", "nope"], "unknown schedule 'nope'"),
    (["show", "naive_gemm", "--stage", "sass"], "--stage 'sass'"),
    (["show", "naive_gemm", "--shape", "12x3"], "malformed"),
    (["show", "naive_gemm", "--shape", "0x3x3"], "shape M must be a positive"),
    (["show", "shared_cache_gemm", "--param", "tile_m=64", "--param", "tile_n=64"], "4096 threads per block"),
    (["show", "shared_cache_gemm", "--param", "tile_m"], "NAME=VALUE"),
    (["show", "shared_cache_gemm", "--param", "tile_m=big"], "tile_m must be int"),
    (["show", "tensor_core_gemm", "--param", "intrinsics=tf32"], "intrinsics must be 'wmma' or 'mma'"),
    (["run", "--workload", "gemm:1x2", "--out", "/tmp/never"], "malformed"),
    (["run", "--schedules", "v99", "--out", "/tmp/never"], "unknown schedule"),
    (["show", "warp_tiled_gemm", "--shape", "65536x65536x8"], "65536x65536 = 4294967296 elements exceeds the int32 index"),
])
def test_cli_errors_are_one_line(argv, word, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and len(err.splitlines()) == 1, err
