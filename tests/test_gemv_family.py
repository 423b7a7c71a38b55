"""The GEMV family: every schedule builds for sm_90 without spills and emits what its docstring
promises (shuffles, a shared-memory second stage, float4 only where rows are 16-byte aligned);
on a GPU, every form matches a float64 reference."""

from __future__ import annotations

import re

import numpy as np
import pytest

from reports.engine.build import build, cuda_available, cuda_target
from schedules import Gemv, GemvT, ScheduleParamError, dispatch, get, parse_workload
from schedules.gemv import GEMV_FAMILY, GemvDispatchConfig, aligned_vector, split_k_gemv
from tests.helpers import build_spec, rounded_output_bound, run_on_gpu

TARGET = cuda_target("sm_90")
GEMV_SCHEDULES = GEMV_FAMILY
ODD_SHAPES = [(1, 17), (1, 4097), (16384, 17), (37, 17), (5, 4097), (16384, 4097), (3, 1), (1, 65536)]
gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")


def _build(name, wl, **params):
    spec = get(name)
    return build(spec.build(wl, **params), TARGET)


def _kernel_bodies(cuda):
    return cuda[cuda.find("{"):]


@pytest.mark.parametrize("name", GEMV_SCHEDULES)
@pytest.mark.parametrize("shape", [(16384, 16), (16384, 128), (16384, 4096), (8192, 8192)])
def test_gemv_builds_without_spills_and_shuffles(name, shape):
    built = _build(name, Gemv(*shape))
    assert all(k.spills == 0 for k in built.device.kernels), built.device.ptxas_log
    assert "__shfl_down_sync" in built.device.cuda or "__shfl_sync" in built.device.cuda
    assert "shfl.sync" in built.device.ptx


@pytest.mark.parametrize("warps_per_row", [2, 4, 8])
def test_multi_warp_second_stage_goes_through_shared_memory(warps_per_row):
    built = _build("multi_warp_gemv", Gemv(64, 8192), warps_per_row=warps_per_row)
    cu = built.device.cuda
    assert "__shared__" in cu and "__syncthreads" in cu and "__shfl_down_sync" in cu
    assert built.kernel.shared_bytes > 0 and built.kernel.spills == 0


@pytest.mark.parametrize("n", [16, 17, 18, 128, 4096, 4097, 4098])
def test_float4_loads_only_where_rows_are_16_byte_aligned(n):
    for name in ("vectorized_gemv", "gemv_dispatch"):
        cu = _kernel_bodies(_build(name, Gemv(64, n)).device.cuda)
        assert ("float4" in cu) == (n % 4 == 0), (name, n)
        if n % 4 == 2:
            assert "float2" in cu


def test_fp16_uses_128_bit_loads_and_fp32_sum():
    built = _build("gemv_dispatch", Gemv(1024, 4096, dtype="float16"))
    cu = built.device.cuda
    assert "uint4" in cu and "half* __restrict__ A" in cu and "float* __restrict__ y" in cu
    assert built.kernel.spills == 0


@pytest.mark.parametrize("shape", ODD_SHAPES)
@pytest.mark.parametrize("name", GEMV_SCHEDULES)
def test_odd_shapes_build(name, shape):
    built = _build(name, Gemv(*shape))
    assert built.kernel.spills == 0


def _bodies(cuda):
    parts = cuda.split('extern "C" __global__')
    return [p for p in parts[1:] if "{" in p]   # parts[0] is the header; declarations have no body


@pytest.mark.parametrize("shape", [(1, 65536), (3, 5000), (7, 65537), (1, 17), (5, 4098), (256, 65536)])
def test_split_k_partials_are_reduced_across_threads(shape):
    """Guards a TVM 0.27 pitfall: an rfactor block with a T.where predicate silently loses its
    cross-thread reduction (every thread then updates y_rf in place, a race)."""
    built = _build("split_k_gemv", Gemv(*shape))
    bodies = _bodies(built.device.cuda)
    assert len(bodies) == 2 and all("__shfl_down_sync" in b for b in bodies)
    first = next(b for b in bodies if "A_ptr" in b)
    assert "red_buf_staging" in first and "__syncthreads" in first
    assert all(k.spills == 0 for k in built.device.kernels)


@pytest.mark.parametrize("shape", [(1, 17), (1000, 17), (16385, 64), (3, 1), (16384, 16), (60, 13)])
def test_narrow_transposed_reduces_rows_across_threads(shape):
    built = _build("column_gemv_t", GemvT(*shape), single_pass=False, serial_columns=False)  # two kernels, however few rows
    first = next(b for b in _bodies(built.device.cuda) if "A_ptr" in b)
    assert "red_buf" in first
    # one thread per column: no column predicate, whose loss on the reduction's store once wrote
    # partial sums past their row (wrong sums on the GPU for 1x13x60 as a GEMM)
    assert "threadIdx.x) <" not in first
    assert f"__launch_bounds__({shape[1] * (256 // shape[1])})" in built.device.cuda


@pytest.mark.parametrize("shape", [(16384, 16), (16384, 4096), (8192, 8192), (1, 17), (1000, 4097), (3, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_transposed_builds(shape, dtype):
    built = _build("column_gemv_t", GemvT(*shape, dtype=dtype), single_pass=False, serial_columns=False)
    assert len(built.device.kernels) == 2 and all(k.spills == 0 for k in built.device.kernels)
    cu = built.device.cuda
    if shape[1] % 4 == 0 and shape[1] > 64 and dtype == "float32":   # wide A: 128-bit loads
        assert "float4" in cu
    if shape[1] <= 64:   # narrow A: the block's rows are reduced in shared memory, one partial per block
        assert "__shared__" in cu


@pytest.mark.parametrize("shape, threads", [((92, 148), (37, 6)), ((92, 149), (1, 256)), ((8, 7), (7, 36)),
                                            ((64, 65536), (64, 4)), ((60, 13), (13, 19))])
def test_a_small_transposed_gemv_is_one_kernel(shape, threads):
    """Rows that a block's threads cover with 16 each or fewer: one kernel (no partials, one launch),
    the columns in groups of N's largest divisor up to 64 (no column predicate before the rows'
    cross-thread sum), the rows padded to whole blocks and read as zeros."""
    wl = GemvT(*shape)
    cfg = get("column_gemv_t").config(serial_columns=False)  # few rows take the serial kernel by default (below)
    assert cfg.one_kernel(wl) and cfg.single_pass_threads(wl) == threads and cfg.kernels(wl) == 1
    built = _build("column_gemv_t", wl, serial_columns=False)
    assert len(built.device.kernels) == 1 and built.device.kernels[0].spills == 0
    body = _bodies(built.device.cuda)[0]
    assert "red_buf" in body and "threadIdx.x) <" not in body
    launch = get("column_gemv_t").validate(wl, cfg)
    assert launch.grid == (shape[1] // threads[0], 1, 1) and launch.block == (*threads, 1)
    assert (built.launch["blockIdx.x"], built.launch["threadIdx.x"], built.launch["threadIdx.y"]) == \
        (launch.grid[0], *threads)
    # more rows than that: the two kernels, and the model counts both launches
    big = GemvT(16 * max(threads[1], 1024 // threads[0]) + 1, shape[1])  # past the single pass's 1024 threads
    assert not cfg.one_kernel(big) and len(_build("column_gemv_t", big, serial_columns=False).device.kernels) == 2
    from schedules import dispatch
    for rows, kernels in ((wl.M, 1), (big.M, 2)):  # as the GEMM c = a·B (B stored rows × columns)
        gemm = parse_workload(f"gemm:1x{shape[1]}x{rows}")
        est = dispatch.estimate(gemm, dispatch.Candidate("column_gemv_t", cfg, "gemv", "gemv column"))
        assert est.terms["kernels"] == kernels


@pytest.mark.parametrize("shape, dtype, vector", [((33, 9466), "float32", 2), ((9, 4013), "float32", 1),
                                                  ((12, 4096), "float32", 4), ((2, 8570), "float16", 2),
                                                  ((12, 13), "float32", 1), ((5, 65536), "float16", 8),
                                                  ((64, 16381), "float32", 1)])
def test_few_rows_are_summed_by_each_thread_with_no_sum_across_threads(shape, dtype, vector):
    """At most serial_rows rows: one kernel whose threads each add every row of their columns (no
    cross-thread sum, so no shared memory, and a column predicate where N is not whole blocks), a
    block of threads along the columns only, blocks enough for the SMs; the single pass it replaces
    put 256 threads on each column of a prime N (1x4013x9: 4013 blocks for 36 thousand products)."""
    wl = GemvT(*shape, dtype=dtype)
    cfg = get("column_gemv_t").config()
    assert cfg.serial(wl) and cfg.kernels(wl) == 1 and cfg.vector_for(wl) == vector
    built = _build("column_gemv_t", wl)
    assert len(built.device.kernels) == 1 and built.device.kernels[0].spills == 0
    body = _bodies(built.device.cuda)[0]
    assert "red_buf" not in body and "__shared__" not in body and "threadIdx.y" not in body
    launch = get("column_gemv_t").validate(wl)
    tx = launch.block[0]
    assert launch.block[1:] == (1, 1) and launch.grid == (-(-shape[1] // (tx * vector)), 1, 1)
    assert (built.launch["blockIdx.x"], built.launch["threadIdx.x"]) == (launch.grid[0], tx)
    lanes = -(-shape[1] // vector)
    if lanes <= 32:  # narrow: one block, a thread a column vector (a power of two of them)
        assert tx == 1 << (lanes - 1).bit_length() and launch.grid[0] == 1
    else:  # a warp or more a block, and about a block per SM or more where the columns allow
        assert 32 <= tx <= 256 and (launch.grid[0] >= 132 // 2 or tx == 32)
    more = GemvT(cfg.serial_wave_rows + 1, shape[1], dtype=dtype)  # more rows: the forms before it
    assert not cfg.serial(more) and "red_buf" in _build("column_gemv_t", more).device.cuda


@pytest.mark.parametrize("shape, serial", [((12, 8344), True), ((14, 152), False), ((16, 8344), False),
                                           ((28, 11071), True), ((33, 9466), True), ((43, 4265), False),
                                           ((64, 4096), False), ((65, 4013), False)])
def test_more_than_a_few_rows_go_serial_only_where_the_single_pass_takes_waves_of_blocks(shape, serial):
    """Past serial_rows (12) the single pass was faster on an H200 (14-43 rows: by 1-11%, 7 of 9) except where
    its column groups are so narrow that its blocks run in waves: 11071 = 3 x 3691 gave it 3690 blocks
    of 3 x 85 threads (14.8 us; serial 5.6), 8344 = 8 x 1043 gave 1043 blocks, one wave (4.7; 5.0)."""
    wl = GemvT(*shape)
    cfg = get("column_gemv_t").config()
    waves = cfg.single_pass_waves(wl)
    assert cfg.serial(wl) == serial
    if shape[0] > cfg.serial_rows:
        assert (waves > 1) == serial or shape[0] > cfg.serial_wave_rows


@pytest.mark.parametrize("shape, dtype, warps", [((167, 1010), "float32", 8), ((466, 526), "float16", 8),
                                                 ((1000, 1000), "float32", 4), ((1000, 1000), "float16", 2),
                                                 ((16384, 1000), "float32", None), ((100, 60), "float32", None)])
def test_a_few_rows_of_256_bytes_to_4_kib_take_several_warps_each(shape, dtype, warps):
    """Rows of 256 B - 4 KiB, fewer than the GPU holds warps: up to 8 warps a row with no lane idle
    (one warp a row left most warp slots empty: 167x1x1010 11.6 µs, 8 warps 5.4 on an H100); many
    rows keep one warp a row, short rows several rows a warp."""
    cfg = get("gemv_dispatch").config()
    builder, chosen = cfg.pick(Gemv(*shape, dtype=dtype))
    if warps is None:
        assert builder.__name__ in ("vectorized_gemv", "warp_gemv", "multi_row_gemv"), builder.__name__
        return
    assert builder.__name__ == "multi_warp_gemv" and chosen.warps_per_row == warps
    lanes = -(-shape[1] // chosen.vector)
    assert 32 * warps <= lanes < 2 * 32 * warps or warps == 8  # no lane idle, and no fewer warps than fit
    built = _build("gemv_dispatch", Gemv(*shape, dtype=dtype))
    assert built.kernel.spills == 0 and built.launch["blockIdx.x"] == shape[0]


@pytest.mark.parametrize("shape", [(372, 130), (330, 13), (446, 2567), (2076, 334), (738, 289)])
def test_the_single_pass_takes_up_to_1024_threads_before_a_second_kernel(shape):
    """Rows that 256 threads would cover with more than 16 each: as many more threads along them as
    16 rows each takes, up to 1024 a block, in one kernel (before, two: 1x130x372 took 9.6-11.4 us
    against cuBLAS's 7.3 on an H200); more rows than 1024 threads cover: the two kernels still."""
    wl = GemvT(*shape)
    cfg = get("column_gemv_t").config()
    tx, ty = cfg.single_pass_threads(wl)
    assert ty == max(256 // tx, -(-shape[0] // 16)) and tx * ty <= 1024 and -(-shape[0] // ty) <= 16
    assert cfg.one_kernel(wl) and not get("column_gemv_t").config(single_pass_max_threads=256).one_kernel(wl)
    built = _build("column_gemv_t", wl)
    assert len(built.device.kernels) == 1 and built.device.kernels[0].spills == 0
    assert (built.launch["threadIdx.x"], built.launch["threadIdx.y"]) == (tx, ty)
    deep = GemvT(16 * (1024 // tx) + 1, shape[1])
    assert not cfg.one_kernel(deep) and len(_build("column_gemv_t", deep).device.kernels) == 2


@pytest.mark.parametrize("shape, dtype, one", [((1512, 5333), "float32", False), ((1512, 5333), "float16", False),
                                               ((683, 1289), "float32", False), ((820, 566), "float32", True),
                                               ((120, 503), "float16", True), ((185, 1498), "float32", True)])
def test_one_kernel_only_where_its_narrow_column_groups_waste_less_than_a_launch(shape, dtype, one):
    """N without a divisor of 8 or more up to 64 (5333 is prime) gives the one kernel column groups
    narrower than a sector: a warp's load of a row piece moves 32 bytes for 4 (1 column of fp32),
    8x the matrix from L2. Measured on an H100 (1x5333x1512: one kernel 68.4 µs, two 18.9, cuBLAS
    17.3; 1x566x820, whose 2-column groups waste 5.6 MB: 7.0 against 10.6), so the one kernel is
    kept only where the bytes it wastes cost less than the second kernel's launch at the memory
    bandwidth (8.6 MB with the H100 profile)."""
    from schedules.gemv import second_launch_bytes

    wl = GemvT(*shape, dtype=dtype)
    cfg = get("column_gemv_t").config()
    rows_fit = -(-shape[0] // cfg.single_pass_threads(wl)[1]) <= 16
    assert rows_fit  # every case here would have been one kernel on the rows alone
    waste = cfg.sector_waste_bytes(wl)
    assert cfg.one_kernel(wl) == one == (waste <= second_launch_bytes())
    assert cfg.kernels(wl) == (1 if one else 2)
    if not one:
        assert waste > 7 * shape[0] * shape[1] * (2 if dtype == "float16" else 4) - 1  # a column or two a block
    assert get("column_gemv_t").config().sector_waste_bytes(GemvT(100, 4096)) == 0  # 64-column groups: whole sectors


def test_workload_strings():
    assert str(parse_workload("gemv_t:16384x16")) == "gemv_t:16384x16"
    wl = parse_workload("gemv:16384x4096:float16")
    assert (wl.kind, wl.dtype, wl.acc_dtype) == ("gemv", "float16", "float32")
    assert wl.min_bytes == 2 * (16384 * 4096 + 4096) + 4 * 16384
    t = parse_workload("gemv_t:8x4")
    assert t.kind == "gemv_t" and t.arg_shapes() == [((8, 4), "float32"), ((8,), "float32"), ((4,), "float32")]


@pytest.mark.parametrize("shape", [(16384, 16), (16384, 32), (16384, 64), (16384, 128), (16384, 1024),
                                   (16384, 4096), (8192, 8192), (1, 17), (16384, 17), (256, 65536), (1, 65536),
                                   (16, 65536), (7, 65537)])
def test_dispatch_choices_are_valid(shape):
    wl = Gemv(*shape)
    builder, cfg = GemvDispatchConfig().pick(wl)
    spec = get(builder.__name__)
    spec.validate(wl, cfg)
    vector = cfg.vector_for(wl) if hasattr(cfg, "vector_for") else cfg.vector
    assert vector == aligned_vector(wl.N, 4)


@pytest.mark.parametrize("shape", [(1, 4), (1, 17), (3, 5), (1, 64)])
def test_short_rows_pad_no_rows_past_the_matrix(shape):
    """A few short rows: a block covers no more rows than the matrix has. With one row TVM's lowering
    of the rows' reduction folds the store's index to 0 and drops its row test, so the padded rows'
    threads would store their zero sums over the row's (gemm:1x1x4 came out wrong on an H200)."""
    wl = Gemv(*shape)
    step, cfg = GemvDispatchConfig().pick(wl)
    if step.__name__ == "multi_row_gemv":
        assert cfg.rows_per_warp * cfg.warps_per_block <= 1 << (shape[0] - 1).bit_length()
    if shape[0] == 1:  # one row: no thread of the block stands for a row past it
        cuda = _kernel_bodies(_build("gemv_dispatch", wl).device.cuda)
        assert "threadIdx.y" not in cuda and "threadIdx.z" not in cuda


# --- GPU: numbers against float64 --------------------------------------------------------------

def test_grouped_rows_put_a_groups_loads_in_flight_together():
    """rows_unroll: a thread's slice is read a group of rows at a time (the largest divisor of the
    slice's rows up to rows_unroll), their vector loads issued back to back before the adds; with 1,
    the slice's loop as it comes interleaves a load and an add."""
    wl = GemvT(6254, 2294)  # the matrix of x·B for x 1 x 6254: float2 loads (N % 4 = 2), two kernels
    cfg = get("column_gemv_t").config()
    assert not cfg.one_kernel(wl) and cfg.slice_rows(wl) == 64 and cfg.row_group(wl) == 8
    assert get("column_gemv_t").config(rows_unroll=12).row_group(wl) == 8  # 12 does not divide 64
    assert get("column_gemv_t").config(rows_per_slice=24, rows_unroll=16).row_group(wl) == 12

    def loads_first(**params):
        ptx = _build("column_gemv_t", wl, **params).device.ptx
        body = ptx[ptx.find(".entry main_kernel("):]
        seq = "".join("L" if "ld.global" in line else "F" if "fma" in line else "" for line in body.splitlines())
        return len(seq) - len(seq.lstrip("L"))

    assert loads_first() >= 8 > loads_first(rows_unroll=1)


def test_many_partials_a_column_are_added_by_more_threads_each_unrolled():
    """column_gemv_t's second kernel: 256 threads a block, and where a column's partials would leave a
    thread more than 16 to add, more threads along them (up to 1024), each thread's partials unrolled.
    x·B for x 1 x 8575 and B 8575 x 270: 536 partials a column, 9 blocks; with 8 threads along them
    each added 67 one after the other (the kernel's loop not unrolled)."""
    from schedules.gemv import final_partial_threads

    assert final_partial_threads(32, 536) == 32 and final_partial_threads(32, 128) == 8
    assert final_partial_threads(32, 4096) == 32 and final_partial_threads(8, 536) == 64
    built = _build("column_gemv_t", GemvT(8575, 270))
    bounds = re.findall(r"__launch_bounds__\((\d+)\) (\w+)", built.device.cuda)
    assert sorted(set(bounds)) == [("1024", "main_kernel_1"), ("256", "main_kernel")]
    body = built.device.ptx[built.device.ptx.find(".entry main_kernel_1("):]
    assert body.count("ld.global") >= 17  # a thread's 17 partials, unrolled


def _run_on_gpu(name, wl, **params):
    from reports.engine.measure import CudaHarness, product_error, random_inputs

    built = _build(name, wl, **params)
    h = CudaHarness(flush=False)
    inputs = random_inputs(wl)
    out_shape, out_dtype = wl.arg_shapes()[-1]
    bufs = [h.to_device(x) for x in inputs] + [h.empty(out_shape, out_dtype)]
    h.poison(bufs[-1])
    built.executable["main"](*[h.tvm_view(b) for b in bufs])
    out = h.to_numpy(bufs[-1])
    assert np.all(np.isfinite(out)), "outputs left unwritten (NaN)"
    return product_error(wl, out, inputs)


GPU_SHAPES = [(1, 1), (1, 4), (1, 17), (1, 4097), (3, 5), (16384, 16), (16384, 17), (1000, 130), (513, 4098),
              (167, 1010), (16384, 4096), (7, 65537)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("name", GEMV_SCHEDULES)
def test_gemv_matches_float64(name, shape):
    assert _run_on_gpu(name, Gemv(*shape)) < 1e-6


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (16384, 16), (1000, 4097), (8192, 8192), (37, 130), (60, 13),
                                   (1000, 17), (999, 50), (92, 148), (92, 149), (97, 64), (64, 65536), (8, 7),
                                   (33, 9466), (9, 4013), (64, 4100), (372, 130), (330, 13), (2076, 334), (8575, 270)])
@pytest.mark.parametrize("form", [{}, {"serial_columns": False}, {"serial_columns": False, "single_pass": False},
                                  {"serial_columns": False, "single_pass": False, "rows_unroll": 1}],
                         ids=["default", "single_pass", "two_kernels", "ungrouped_rows"])  # few rows: serial (the default), or not
def test_transposed_matches_float64(shape, form):
    assert _run_on_gpu("column_gemv_t", GemvT(*shape), **form) < 1e-6


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16384, 4096), (1, 17), (999, 4104), (5, 65536)])
@pytest.mark.parametrize("form", ["gemv", "gemv_t"])
def test_fp16_inputs_fp32_sum_match_float64_of_the_same_halves(form, shape):
    wl = (Gemv if form == "gemv" else GemvT)(*shape, dtype="float16")
    name = "gemv_dispatch" if form == "gemv" else "column_gemv_t"
    assert _run_on_gpu(name, wl) < 1e-6


# A GEMM form with an epilogue or a 16-bit output (a decode step's one token): each step gemv_dispatch picks
EPILOGUE_FORMS = ["gemm:1x4096x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh",  # rows of 8 KiB: several warps a row
                  "gemm:1x2560x2560:float16:nt:out=float16:bias:residual",     # 5 KiB rows, R read beside the sum
                  "gemm:1x3000x1000:bfloat16:nt:out=bfloat16",                 # 2 KiB rows: one warp a row
                  "gemm:1x3001x24:float32:nt:out=float16:alpha=0.5:relu",      # 96 B rows: several rows a warp
                  "gemm:1x36x3149:float32:nt:bias:silu"]                       # few long rows: not split-K


@pytest.mark.parametrize("workload", EPILOGUE_FORMS)
def test_a_gemm_forms_epilogue_is_computed_on_the_blocks_sums(workload):
    """The row-form GEMV steps take a GEMM form's epilogue and output type: each row's sum stays in
    shared memory (C never reaches global memory) and the block's first threads write D once, reading
    the bias and R there. gemv_dispatch never sends such a form to split_k_gemv, whose partial sums a
    second kernel adds (it takes no epilogue): 1x36x3149 plain goes there, with a bias to several warps
    a row. Built with nvcc for sm_90, no spills."""
    wl = parse_workload(workload)
    assert get("gemv_dispatch").epilogues and not get("split_k_gemv").epilogues
    builder, _ = GemvDispatchConfig().pick(wl)
    assert builder is not split_k_gemv
    built = build_spec(get("gemv_dispatch"), workload)
    cu = _kernel_bodies(built.device.cuda)
    assert "C_shared" in cu and "__syncthreads" in cu, cu[:400]
    assert ("bias_ptr[" in cu) == (":bias" in workload) and ("R_ptr[" in cu) == ("residual" in workload)
    assert all(k.spills == 0 for k in built.device.kernels), built.device.ptxas_log
    if wl.out_dtype != "float32":
        assert {"bfloat16": "nv_bfloat16* __restrict__ D_ptr", "float16": "half* __restrict__ D_ptr"}[wl.out_dtype] in built.device.cuda
    assert GemvDispatchConfig().pick(parse_workload("gemm:1x36x3149:float32:nt"))[0] is split_k_gemv


def test_a_one_token_layer_stays_with_the_gemv_family_with_or_without_an_epilogue():
    """One row of activations against a weight stored N×K: the dispatcher offers the GEMV steps alone, whatever
    the epilogue and output type (on an H100 they beat decode_gemm, thin_tc_gemm and the tiles on all 24
    one-token layers timed); a column form keeps its other candidates."""
    for workload in ("gemm:1x4096x4096:bfloat16:nt:out=bfloat16", "gemm:1x4096x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh"):
        wl = parse_workload(workload)
        assert {c.step for c in dispatch.candidates(wl, "bf16")} == {"gemv_dispatch"}
    # read down its columns (B stored K×N): the GEMV step there takes no epilogue, the tiles take the product
    wl = parse_workload("gemm:1x4096x4096:bfloat16:nn:out=bfloat16:bias")
    assert "column_gemv_t" not in {c.step for c in dispatch.candidates(wl, "bf16")}
    assert {c.step for c in dispatch.candidates(parse_workload("gemm:1x4096x4096:bfloat16:nn"), "bf16")} > {"column_gemv_t"}


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("workload", EPILOGUE_FORMS)
def test_a_gemm_forms_epilogue_matches_float64(harness, workload):
    assert run_on_gpu(harness, get("gemv_dispatch"), workload) <= rounded_output_bound(workload)


@pytest.mark.parametrize("workload, kernels", [("gemm:36x1x3149", 2), ("gemm:36x1x1000", 1), ("gemm:100x1x3149", 1)])
def test_the_gemv_dispatch_counts_split_ks_second_kernel(workload, kernels):
    """gemv_dispatch sends a few very long rows (≥ 4 KiB, fewer than split_k_max_rows) to split_k_gemv,
    whose chunk sums a second kernel adds: the dispatcher's model charges that launch too."""
    wl = parse_workload(workload)
    cfg = get("gemv_dispatch").config()
    assert cfg.kernels(wl) == kernels
    built = _build("gemv_dispatch", wl)
    assert len(built.device.kernels) == kernels
    est = next(e for e in dispatch.rank(wl, "fp32") if e.step == "gemv_dispatch")
    cal = dispatch.CALIBRATION
    assert est.terms["kernels"] == kernels
    assert est.time_us == pytest.approx(cal["launch_us"] * kernels + est.terms["memory_us"])


@pytest.mark.parametrize("params, says", [({"single_pass_max_threads": 4096}, "exceeds the limit of 1024"),
                                          ({"serial_rows": -3}, "serial_rows must be positive"),
                                          ({"serial_wave_rows": 0}, "serial_wave_rows must be positive")])
def test_the_few_row_forms_refuse_nonsense_in_one_line(params, says):
    """A single pass asked for more threads than a block holds (13 columns x 188 rows' worth), or a
    row limit that is not a positive count: refused before anything is built, in one line."""
    spec = get("column_gemv_t")
    with pytest.raises(ScheduleParamError, match=says) as err:
        spec.validate(parse_workload("gemm:1x13x3000"), spec.config(**params))
    assert "\n" not in str(err.value)


if __name__ == "__main__":  # the GPU tests without pytest (the device may lack it)
    import itertools
    import sys

    failures = 0
    cases = [(test_gemv_matches_float64, (n, s)) for n, s in itertools.product(GEMV_SCHEDULES, GPU_SHAPES)]
    cases += [(test_transposed_matches_float64, (s,)) for s in [(1, 1), (1, 17), (16384, 16), (1000, 4097),
                                                                 (8192, 8192), (37, 130)]]
    cases += [(test_fp16_inputs_fp32_sum_match_float64_of_the_same_halves, (f, s))
              for f in ("gemv", "gemv_t") for s in [(16384, 4096), (1, 17), (999, 4104), (5, 65536)]]
    for fn, args in cases:
        try:
            fn(*args)
            print("ok  ", fn.__name__, args)
        except Exception as e:  # noqa: BLE001
            failures += 1
            print("FAIL", fn.__name__, args, str(e).strip().splitlines()[-1][:200] if str(e).strip() else repr(e))
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)
