"""CPU-side checks of every registered schedule: it compiles for sm_90 with nvcc, without spills,
its IR shows what its step is about, its launch is the one its configuration specifies, and
shapes that are not tile multiples build."""

import re

import pytest

from reports.engine.kernel import launches_of
from schedules import all_schedules, get
from tests.helpers import ODD_WORKLOADS, build_spec, default_workload

SPECS = [s for s in all_schedules() if "tuned" not in s.tags]  # tuned_gemm needs a tuning record: test_tuning
CLASSIC = [s for s in all_schedules(ladder="gemm") if s.step <= 9] + \
    [get(n) for n in ("warp_gemv", "vectorized_gemv", "multi_row_gemv", "gemv_dispatch")]


def test_two_ladders_numbered_in_teaching_order_without_gaps():
    from schedules.registry import LADDERS

    for ladder, names in LADDERS.items():
        specs = all_schedules(ladder=ladder)
        assert [s.name for s in specs] == [n for n in names if n in {s.name for s in specs}]
        assert [s.step for s in specs] == list(range(1, len(specs) + 1)), ladder  # 1..N, no gaps, no duplicates
        assert len(set(names)) == len(names)
        assert all(s.label == f"{ladder} {s.step}" for s in specs)
    gemm = {s.step: s.name for s in all_schedules(ladder="gemm") if s.step <= 9}
    assert gemm == {1: "naive_gemm", 2: "thread_1d_gemm", 3: "thread_2d_gemm", 4: "shared_cache_gemm",
                    5: "register_cache_gemm", 6: "uncoalesced_gemm", 7: "block_tiling_gemm",
                    8: "thread_tiling_gemm", 9: "double_buffer_gemm"}
    assert [s.name for s in all_schedules(ladder="gemv")][:3] == ["warp_gemv", "vectorized_gemv", "multi_row_gemv"]
    for alias, name in (("v0", "naive_gemm"), ("v3", "shared_cache_gemm"), ("cutlass", "thread_tiling_gemm"),
                        ("wgmma", "wgmma_gemm")):
        assert get(alias).name == name


def test_a_step_outside_the_ladders_cannot_be_registered_without_a_place():
    from schedules import ScheduleParamError
    from schedules.registry import ScheduleSpec, register_spec

    with pytest.raises(ScheduleParamError, match="not in the gemm ladder .*: a plugin step names its place with after="):
        register_spec(ScheduleSpec("my_gemm", "gemm", lambda wl, cfg: None, object))


def test_schedlab_list_shows_the_two_ladders(capsys):
    from scripts.schedlab import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.index("GEMM ladder") < out.index("gemm 1  naive_gemm") < out.index("GEMV ladder") < \
        out.index("gemv 1  warp_gemv")
    labels = [line.split()[:2] for line in out.splitlines() if line.startswith("  ")]
    assert len({tuple(x) for x in labels}) == len(labels)  # no two steps share a number


def test_registry_entries_are_documented():
    for spec in SPECS:
        assert spec.summary, f"{spec.name} has no docstring"
        assert get(spec.name) is spec
        for alias in spec.aliases:
            assert get(alias) is spec


def test_classic_defaults():
    assert (get("shared_cache").config().tile_m, get("shared_cache").config().tile_k) == (16, 8)
    c = get("register_cache").config()
    assert (c.tile_m, c.tile_n, c.tile_k) == (32, 32, 4)
    c = get("block_tiling_gemm").config()
    assert (c.tile_m, c.tile_n, c.tile_k) == (16, 16, 16)
    c = get("thread_tiling_gemm").config()
    assert (c.block_m, c.block_n, c.block_k, c.thread_m, c.thread_n) == (128, 128, 8, 8, 8)
    assert get("thread_1d_gemm").config().rows_per_block == 32


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get_built(name, workload=None):
        spec = get(name)
        workload = workload or default_workload(spec)
        if (name, workload) not in cache:
            cache[(name, workload)] = build_spec(spec, workload)
        return cache[(name, workload)]

    return get_built


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_compiles_with_nvcc_without_spills(spec, built):
    b = built(spec.name)
    assert b.device.cubin, "ptxas produced no cubin"
    assert ".entry main_kernel" in b.device.ptx
    assert b.device.kernels, "no ptxas report"
    for k in b.device.kernels:
        assert k.spills == 0, f"{k.name} spills {k.spills} bytes"
        assert 0 < k.registers <= 255


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_launch_dimensions_are_as_configured(spec, built):
    from schedules import parse_workload

    launch = spec.validate(parse_workload(default_workload(spec)))
    got = built(spec.name).launch
    assert tuple(got.get(f"threadIdx.{a}", 1) for a in "xyz") == launch.block
    assert tuple(got.get(f"blockIdx.{a}", 1) for a in "xyz") == launch.grid


def test_shared_cache_step_uses_shared_memory_and_barriers(built):
    b = built("shared_cache_gemm")
    assert re.search(r"__shared__ .*float A_shared", b.device.cuda) and re.search(r"__shared__ .*float B_shared", b.device.cuda)
    assert b.device.cuda.count("__syncthreads()") >= 2
    assert b.kernel.shared_bytes == 4 * 8 * (16 + 16)
    assert "C_local" not in b.device.cuda  # step 4 still accumulates in global memory


def test_register_step_accumulates_in_a_local_buffer(built):
    b = built("register_cache_gemm")
    assert re.search(r"float C_local(_ptr)?\[1\]", b.device.cuda)
    assert 'alloc_local' in b.lowered or '"local"' in b.lowered
    assert b.kernel.shared_bytes == 4 * 4 * (32 + 32)


def test_thread_tiling_keeps_an_8x8_register_tile_and_vector_loads(built):
    b = built("thread_tiling_gemm")
    assert re.search(r"float C_local(_ptr)?\[64\]", b.device.cuda)
    assert "ld.global.nc.v4.f32" in b.device.ptx or "ld.global.v4.f32" in b.device.ptx
    assert "ld.shared.v4.f32" in b.device.ptx


def test_double_buffering_doubles_the_shared_tiles(built):
    single, double = built("thread_tiling_gemm"), built("double_buffer_gemm")
    assert double.kernel.shared_bytes == 2 * single.kernel.shared_bytes == 2 * 4 * 8 * 256


def test_uncoalesced_differs_from_2d_only_in_the_thread_mapping(built):
    a, b = built("thread_2d_gemm"), built("uncoalesced_gemm")
    assert a.launch == b.launch
    assert a.device.cuda != b.device.cuda


def test_the_fused_epilogue_is_one_kernel_storing_d_from_the_registers(built):
    """gemm 33 on a bf16 linear layer with GELU tanh and a residual (helpers.EPILOGUE_WORKLOAD): the
    elementwise block is inlined into the write-back of the accumulators; nothing writes C."""
    b = built("fused_epilogue_gemm")
    assert len(b.device.kernels) == 1 and len(launches_of(b.host)) == 1
    assert 'sblock("D")' not in b.scheduled and "C = T.sblock_alloc_buffer" not in b.scheduled
    assert re.search(r"D\[v0, v1\] = T.Cast\(\"bfloat16\", .*C(_pad)?_local\[v0, v1\].*T.tanh", b.scheduled)
    body = b.device.cuda[b.device.cuda.index("main_kernel("):]
    assert "tanhf(" in body and "bias_ptr" in body and "R_ptr" in body and "C_ptr" not in body


def test_the_unfused_epilogue_reads_c_back_in_a_second_kernel(built):
    """gemm 32 on the same workload: the product stores C in fp32, a second kernel reads it back."""
    b = built("unfused_epilogue_gemm")
    product, elementwise = launches_of(b.host)
    assert product.name == "main_kernel" and elementwise.block == (256, 1, 1)
    assert 'sblock("D")' in b.scheduled and "C = T.sblock_alloc_buffer((1000, 500))" in b.scheduled
    cuda = b.device.cuda
    second = cuda[cuda.rindex(f"{elementwise.name}("):]  # its definition
    assert "tanhf(" in second and "C_ptr" in second and "tanhf(" not in cuda[:cuda.rindex(f"{elementwise.name}(")]
    assert max(k.registers for k in b.device.kernels) == b.kernel.registers


@pytest.mark.parametrize("name", ["warp_gemv", "vectorized_gemv", "multi_row_gemv", "gemv_dispatch"])
def test_gemv_reduces_with_warp_shuffles(name, built):
    b = built(name)
    assert "__shfl_down_sync" in b.device.cuda
    assert "shfl.sync.down" in b.device.ptx


def test_vectorized_gemv_loads_float4_only_when_rows_are_aligned(built):
    assert "ld.global.nc.v4.f32" in built("vectorized_gemv", "gemv:16384x128").device.ptx
    assert ".v4.f32" not in built("vectorized_gemv", "gemv:16384x17").device.ptx


def test_multi_row_gemv_shuffles_within_half_warps(built):
    cuda = built("multi_row_gemv", "gemv:16384x16").device.cuda
    assert "__shfl_down_sync" in cuda and ", 16, 32)" not in cuda.split("__shfl_down_sync", 1)[1][:80]


@pytest.mark.parametrize("case", [(s, w) for s in CLASSIC for w in ODD_WORKLOADS[s.kind]],
                         ids=lambda c: f"{c[0].name}-{c[1]}")
def test_odd_shapes_build(case):
    spec, workload = case
    b = build_spec(spec, workload)
    assert b.device.cubin
    assert all(k.spills == 0 for k in b.device.kernels)
