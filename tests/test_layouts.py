"""Operand layouts (nn, nt, tn, tt: C = op(A)·op(B), t = stored transposed) and batched products
(bmm): the workload grammar and its one-line errors, the stored shapes, the compute definitions
and the float64 reference and CPU baselines on the CPU, the wgmma kernels' copies against the
shared layouts their descriptors describe, every GEMM step × layout (and every batched step × layout
on a bmm) built for sm_90(a) with nvcc without spills, and, on a GPU, every one of them checked
against float64 through the lab's measurement path."""

import operator
import re

import numpy as np
import pytest

from schedules import LAYOUTS, Gemm, ScheduleParamError, all_schedules, dispatch, get, parse_workload
from tests.helpers import build_spec, cached_build

# the epilogue steps build warp_tiled_gemm's and tensor_core_gemm's products, built for every layout here;
# test_epilogue.py builds them with epilogues; the FP8 steps take nt alone (test_fp8.py)
GEMM_STEPS = [s for s in all_schedules(ladder="gemm") if not {"tuned", "epilogue", "fp8"} & set(s.tags)]
ODD = {"float32": "67x45x33", "float16": "136x264x72"}  # not tile multiples (TMA: M, N, K % 8 == 0 in fp16)
BMM_ODD = {"float32": "3x67x45x33", "float16": "3x136x264x72"}


def odd_workload(spec, layout, batched=False):
    dtype = spec.input_dtypes[0]
    shape = (BMM_ODD if batched else ODD)[dtype]
    if spec.name == "tma_tf32_gemm":
        shape = "67x44x36"  # a tensor map's row pitch is a multiple of 16 bytes
    if spec.name in ("decode_gemm", "thin_tc_gemm"):
        shape = "13x264x72"  # a decode-sized product: a few rows (13) against a weight
    if spec.name == "short_k_tc_gemm":
        shape = "136x264x40"  # a short K (≤ 64)
    return str(parse_workload(f"{'bmm' if batched else 'gemm'}:{shape}:{dtype}:{layout}"))


# --- the grammar ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canonical", [
    ("gemm:1024x512x2048", "gemm:1024x512x2048"),
    ("gemm:1024x512x2048:nn", "gemm:1024x512x2048"),
    ("gemm:1024x512x2048:float32:nn", "gemm:1024x512x2048"),
    ("gemm:1024x512x2048:float32:nt", "gemm:1024x512x2048:nt"),
    ("gemm:4096x4096x4096:float16", "gemm:4096x4096x4096:float16"),
    ("gemm:4096x4096x4096:float16:tn", "gemm:4096x4096x4096:float16:tn"),
    ("gemm:64x48x32:bfloat16:tt", "gemm:64x48x32:bfloat16:tt"),
    ("bmm:32x512x512x64:float16:nt", "bmm:32x512x512x64:float16:nt"),
    ("bmm:1x8x8x8", "bmm:1x8x8x8"),
    (" bmm : 4x5x6x7 : tn ", "bmm:4x5x6x7:tn"),
    ("gemv:16384x16", "gemv:16384x16"),
    ("gemv_t:16384x128:float16", "gemv_t:16384x128:float16"),
])
def test_workload_strings_round_trip_and_leave_out_the_defaults(text, canonical):
    wl = parse_workload(text)
    assert str(wl) == canonical
    assert parse_workload(str(wl)) == wl


def test_defaults_keep_existing_workloads_as_they_were():
    wl = parse_workload("gemm:1024x512x2048")
    assert (wl.layout, wl.batch, wl.batched, wl.batches) == ("nn", None, False, 1)
    assert wl == Gemm(1024, 512, 2048)
    assert parse_workload("bmm:1x8x8x8") != parse_workload("gemm:8x8x8")  # a batch of one has 3-D operands
    assert parse_workload("bmm:5x8x16x32:float16:nt") == Gemm(8, 16, 32, "float16", layout="nt", batch=5)


@pytest.mark.parametrize("text, word", [
    ("gemm:8x8x8:xy", "layout 'xy' is not one of nn, nt, tn, tt"),
    ("gemm:8x8x8:NT", "layout 'NT' is not one of"),
    ("gemm:8x8x8:float16:nx", "layout 'nx'"),
    ("gemm:8x8x8:nt:float16", "at most one dtype, then"),
    ("gemm:8x8x8:nt:tn", "at most one dtype, then"),
    ("gemm:8x8x8:float64", "not a dtype"),
    ("bmm:0x8x8x8", "bmm batch must be a positive"),
    ("bmm:-2x8x8x8", "bmm batch must be a positive"),
    ("bmm:8x8x8", "malformed"),
    ("gemm:2x8x8x8", "malformed"),
    ("gemv:8x8:nt", "a layout is for gemm and bmm"),
])
def test_bad_layouts_and_batches_are_one_line_errors(text, word):
    with pytest.raises(ScheduleParamError, match=word) as e:
        parse_workload(text)
    assert len(str(e.value).splitlines()) == 1


def test_the_constructor_checks_layout_and_batch_too():
    with pytest.raises(ScheduleParamError, match="layout 'ab'"):
        Gemm(8, 8, 8, layout="ab")
    with pytest.raises(ScheduleParamError, match="bmm batch"):
        Gemm(8, 8, 8, batch=0)


@pytest.mark.parametrize("argv, word", [
    (["show", "naive_gemm", "--shape", "8x8x8:xy"], "layout 'xy'"),
    (["show", "wgmma_gemm", "--shape", "bmm:0x64x64x64"], "bmm batch must be a positive"),
    (["run", "--workload", "bmm:0x2x2x2", "--out", "/tmp/never"], "bmm batch"),
    (["run", "--workload", "gemm:8x8x8:float16:ab", "--out", "/tmp/never"], "layout 'ab'"),
    (["show", "tma_tf32_gemm", "--shape", "bmm:2x256x256x256:nt"], "tma_tf32_gemm does not take a batch"),
    (["show", "naive_gemm", "--shape", "bmm:2x8x8x8"], "naive_gemm does not take a batch"),
])
def test_cli_refuses_before_building_in_one_line(argv, word, capsys):
    from scripts.schedlab import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and len(err.splitlines()) == 1, err


def test_show_takes_layouts_and_batches_with_the_steps_default_input_type():
    from schedules.workloads import workload_for

    assert str(workload_for("gemm", "4096x4096x4096:nt", "float16")) == "gemm:4096x4096x4096:float16:nt"
    assert str(workload_for("gemm", "bmm:2x64x64x64:tn", "float16")) == "bmm:2x64x64x64:float16:tn"
    assert str(workload_for("gemm", "64x64x64:float32:tt", "float16")) == "gemm:64x64x64:tt"
    assert str(workload_for("gemm", "64x64x64")) == "gemm:64x64x64"


# --- stored shapes, definitions, reference, baselines ------------------------------------------------
def test_arg_shapes_are_the_stored_shapes():
    M, N, K = 5, 3, 7
    want = {"nn": ((M, K), (K, N)), "nt": ((M, K), (N, K)), "tn": ((K, M), (K, N)), "tt": ((K, M), (N, K))}
    for layout, (a, b) in want.items():
        wl = Gemm(M, N, K, layout=layout)
        assert [s for s, _ in wl.arg_shapes()] == [a, b, (M, N)]
        bmm = Gemm(M, N, K, "float16", layout=layout, batch=4)
        assert bmm.arg_shapes() == [((4, *a), "float16"), ((4, *b), "float16"), ((4, M, N), "float32")]
        assert bmm.flops == 4 * wl.flops


def _explicit(wl, a, b):
    """op(A)·op(B) of the stored operands, written out with einsum on the stored indices."""
    sa = "ki" if wl.trans_a else "ik"
    sb = "jk" if wl.trans_b else "kj"
    p = "z" if wl.batched else ""
    return np.einsum(f"{p}{sa},{p}{sb}->{p}ij", a.astype(np.float64), b.astype(np.float64))


WORKLOADS = [f"gemm:13x7x9:{lay}" for lay in LAYOUTS] + [f"bmm:3x13x7x9:{lay}" for lay in LAYOUTS]


@pytest.mark.parametrize("text", WORKLOADS)
def test_the_compute_definition_reads_the_stored_operands(text):
    """The TE definition every step schedules, compiled as it is for the CPU, computes op(A)·op(B)
    of the stored operands, and the float64 reference the checks use agrees."""
    import tvm

    from reports.engine import measure as M

    wl = parse_workload(text)
    a, b = M.random_inputs(wl, np.random.default_rng(0))
    f = tvm.compile(wl.prim_func(), target="llvm")
    dev = tvm.cpu(0)
    out = tvm.runtime.empty(wl.c_shape, "float32", dev)
    f(tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    want = _explicit(wl, a, b)
    np.testing.assert_allclose(M.reference(wl, [a, b]), want, rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    assert M.product_error(wl, out.numpy(), [a, b]) < 1e-6
    other = Gemm(wl.M, wl.N, wl.K, layout={"nn": "tt", "nt": "tn", "tn": "nt", "tt": "nn"}[wl.layout], batch=wl.batch)
    if wl.M == wl.K and wl.N == wl.K:  # (square only) another layout on the same bytes is another product
        assert M.product_error(other, out.numpy(), [a, b]) > 1e-2
    wrong = want.copy()
    wrong[..., 0, :] *= -1
    assert M.product_error(wl, wrong, [a, b]) > 1e-2


@pytest.mark.parametrize("text", WORKLOADS + ["gemm:300x1x200:tn", "gemm:1x300x200:nt"])
def test_numpy_baseline_runs_on_the_same_layout(text):
    from reports.engine import baselines, measure as M

    wl = parse_workload(text)
    inputs = M.random_inputs(wl)
    assert [x.shape for x in inputs] == [s for s, _ in wl.arg_shapes()[:-1]]
    out, timing = baselines.run_cpu_baseline("numpy_cpu", wl, inputs)
    assert out.shape == wl.c_shape and timing.median_ms > 0
    np.testing.assert_allclose(out, _explicit(wl, *inputs), rtol=1e-4, atol=1e-5)
    assert M.product_error(wl, out, inputs) < 1e-6


def test_views_not_copies():
    """The operands handed to the libraries are views of the stored buffers (nothing copied in a
    timed closure)."""
    wl = parse_workload("bmm:2x5x3x7:tt")
    a, b = (np.zeros(s, np.float32) for s, _ in wl.arg_shapes()[:-1])
    oa, ob = wl.operands(a, b)
    assert oa.shape == (2, 5, 7) and ob.shape == (2, 7, 3)
    assert np.shares_memory(oa, a) and np.shares_memory(ob, b)


def test_the_measuring_worker_allocates_the_stored_shapes():
    from reports.engine import harness, measure as M

    class Host:  # stands in for CudaHarness: host buffers
        torch = None

        def empty(self, shape, dtype):
            return np.empty(shape, dtype)

    wl = parse_workload("bmm:2x5x3x7:float16:tn")
    inputs, out = M.device_buffers(Host(), wl)
    assert [x.shape for x in inputs] == [(2, 7, 5), (2, 7, 3)] and out.shape == (2, 5, 3)
    row = harness.measure_job({"workload": "gemm:40x30x20:nt", "name": "numpy_cpu"})
    assert row["status"] == "ok" and row["rel_error"] < 1e-6


# --- wgmma: the copies land where the descriptors say --------------------------------------------
class _IntT:
    """Stands in for ``tvm.script.tirx`` in the copy formulas: plain integers."""

    bitwise_xor = staticmethod(operator.xor)

    @staticmethod
    def And(*a):
        return all(a)


def _canonical(kmajor, mn, k, block_k, vec):
    """Where wgmma reads element (m or n, k) of a tile in the 128-byte-swizzled layouts its
    descriptors describe: k-major (128-byte rows of K per m/n, 16-byte chunks XOR row % 8; the
    layout of nn's A and of tf32's B, measured right on the H200) or m/n-major (64-wide panels,
    128-byte K rows, chunks XOR k % 8; nn's fp16 B)."""
    if kmajor:
        return mn * block_k + ((k // vec) ^ (mn % 8)) * vec + k % vec
    return (mn // 64) * (64 * block_k) + k * 64 + (((mn % 64) // 8) ^ (k % 8)) * 8 + mn % 8


@pytest.mark.parametrize("step", ["wgmma_gemm", "wgmma_tf32_gemm"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("params", [{}, {"block_m": 64, "block_n": 128}, {"copy_bytes": 4}, {"copy_bytes": 8}],
                         ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_wgmma_copies_fill_the_layout_the_descriptors_describe(step, layout, params, monkeypatch):
    from schedules import gemm_wgmma as G

    spec = get(step)
    wl = parse_workload(f"gemm:512x512x256:{spec.input_dtypes[0]}:{layout}")
    cfg = spec.config(**params)
    spec.validate(wl, cfg)
    monkeypatch.setattr(G, "T", _IntT)
    vec, bk = 16 // cfg.itemsize, cfg.block_k
    plans = G.operand_plans(wl, cfg)
    # 16-bit: transpose bits instead of copies (A m-major for t, B k-major for t); tf32: always k-major
    tf32 = wl.dtype == "float32"
    assert [p.kmajor for p in plans] == [tf32 or not wl.trans_a, tf32 or wl.trans_b]
    assert [p.kind == "elements" for p in plans] == [tf32 and wl.trans_a, tf32 and not wl.trans_b]
    for plan in plans:
        where = {}
        for q in range(plan.copies * cfg.threads):
            dst, i0, i1, ok = G.copy_piece(plan.kind, q, 0, 0, 0, plan.rows, plan.ext, wl.K, bk, vec, plan.vector,
                                           plan.pieces)
            assert ok
            for e in range(plan.vector):  # a copy: consecutive stored elements to consecutive shared ones
                mn, k = (i0, i1 + e) if plan.kind == "rows" else (i1 + e, i0)
                assert (mn, k) not in where
                where[(mn, k)] = dst + e
                assert dst + e == _canonical(plan.kmajor, mn, k, bk, vec), (plan, mn, k)
        assert len(where) == plan.rows * bk and sorted(where.values()) == list(range(plan.rows * bk))


def test_wgmma_uses_the_transpose_bits_for_16_bit_layouts():
    bits = {}
    for layout in LAYOUTS:
        b = build_spec(get("wgmma_gemm"), f"gemm:256x256x128:float16:{layout}", block_n=128)
        flags = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 [^;]*, 1, 1, (\d), (\d);",
                               b.device.ptx))
        bits[layout] = flags
        assert "cp.async.ca" not in b.device.ptx  # whole 16-byte chunks: nothing transposed by copies
    # imm-trans-a: A stored K×M (m-major); imm-trans-b: B stored K×N (n-major)
    assert bits == {"nn": {("0", "1")}, "nt": {("0", "0")}, "tn": {("1", "1")}, "tt": {("1", "0")}}


# --- every step × layout builds ------------------------------------------------------------------
built = cached_build


def _assert_compiles(spec, workload, **params):
    b = built(spec.name, workload, **params)
    assert b.device.cubin and b.device.kernels
    for k in b.device.kernels:
        assert k.spills == 0, f"{spec.name} on {workload}: {k.name} spills {k.spills} bytes"
        assert 0 < k.registers <= 255
    launch = spec.validate(parse_workload(workload), spec.config(**params))
    assert tuple(b.launch.get(f"blockIdx.{a}", 1) for a in "xyz") == launch.grid
    return b


def test_every_gemm_step_takes_every_layout():
    """All but decode_gemm, which streams its weight and the few rows with 16-byte copies along K:
    both operands K-contiguous, PyTorch's Linear (Y = X·Wᵀ, nt)."""
    assert [(s.name, s.layouts) for s in GEMM_STEPS if s.layouts != LAYOUTS] == [("decode_gemm", ("nt",))]
    with pytest.raises(ScheduleParamError, match="nt layout only"):
        get("decode_gemm").validate(parse_workload("gemm:13x264x72:float16:tn"))


@pytest.mark.parametrize("spec, layout", [(s, lay) for s in GEMM_STEPS for lay in LAYOUTS if lay in s.layouts],
                         ids=lambda v: getattr(v, "name", v))
def test_every_step_builds_for_every_layout_without_spills(spec, layout):
    _assert_compiles(spec, odd_workload(spec, layout))


BATCHED = [s for s in GEMM_STEPS if s.batched]


def test_the_batched_steps():
    assert {"best_gemm", "best_fp16_gemm", "tensor_core_gemm", "wgmma_gemm", "wgmma_tf32_gemm",
            "warp_tiled_gemm", "split_k_gemm", "skinny_gemm", "tma_gemm", "warp_specialized_gemm",
            "persistent_gemm", "cluster_gemm"} <= {s.name for s in BATCHED}
    assert not {s.name for s in BATCHED} & {s.name for s in GEMM_STEPS if s.step <= 9}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("spec", BATCHED, ids=lambda s: s.name)
def test_every_batched_step_builds_a_bmm_for_every_layout(spec, layout):
    b = _assert_compiles(spec, odd_workload(spec, layout, batched=True))
    grid = [b.launch.get(f"blockIdx.{a}", 1) for a in "xyz"]
    assert 3 in grid or grid[0] % 3 == 0  # the batch on its own grid axis, or folded into x


def test_tensor_core_step_loads_transposed_tiles_through_its_intrinsics():
    for layout, a_col, b_col in (("nn", False, False), ("nt", False, True), ("tn", True, False), ("tt", True, True)):
        cuda = built("tensor_core_gemm", f"gemm:256x256x256:float16:{layout}").device.cuda
        assert ("matrix_a, 16, 16, 16, half, nvcuda::wmma::col_major" in cuda) == a_col
        assert ("matrix_b, 16, 16, 16, half, nvcuda::wmma::col_major" in cuda) == b_col
        ptx = built("tensor_core_gemm", f"gemm:256x256x256:float16:{layout}", intrinsics="mma").device.ptx
        # ldmatrix: A is transposed when stored K×M; B when stored K×N (mma.sync reads B k-major)
        assert ("ldmatrix.sync.aligned.m8n8.x4.trans.shared" in ptx) == (a_col or not b_col), layout
        assert ("ldmatrix.sync.aligned.m8n8.x4.shared" in ptx) == (not a_col or b_col), layout


def test_the_thread_tiled_and_fast_steps_load_transposed_operands_with_vector_loads():
    for name in ("thread_tiling_gemm", "warp_tiled_gemm"):
        for layout in LAYOUTS:
            ptx = built(name, f"gemm:1024x512x2048:{layout}").device.ptx
            assert re.search(r"ld\.global(\.nc)?\.v4\.(f32|u32|b32)", ptx) and "ld.shared.v4.f32" in ptx, (name, layout)
    # tn: A arrives k-major (no transpose: vector shared stores); nt: B is transposed (scalar stores)
    tn = built("warp_tiled_gemm", "gemm:1024x512x2048:tn").device.ptx
    nt = built("warp_tiled_gemm", "gemm:1024x512x2048:nt").device.ptx
    assert tn.count("st.shared.v4.f32") > nt.count("st.shared.v4.f32")
    cp = built("async_pipeline_gemm", "gemm:1024x512x2048:tn").device.ptx
    assert "cp.async.cg.shared.global" in cp and "cp.async.ca.shared.global" not in cp  # 16-byte copies of both


# --- GEMV forms and the dispatcher ---------------------------------------------------------------
@pytest.mark.parametrize("text, step", [
    ("gemm:300x1x200", "gemv_dispatch"), ("gemm:300x1x200:nt", "gemv_dispatch"),
    ("gemm:300x1x200:tn", "column_gemv_t"), ("gemm:300x1x200:tt", "column_gemv_t"),
    ("gemm:1x300x200", "column_gemv_t"), ("gemm:1x300x200:tn", "column_gemv_t"),
    ("gemm:1x300x200:nt", "gemv_dispatch"), ("gemm:1x300x200:tt", "gemv_dispatch"),
    ("gemm:1x1x200:tt", "gemv_dispatch"),
])
def test_gemv_forms_follow_the_stored_matrix(text, step):
    wl = parse_workload(text)
    assert dispatch.choose(wl, "fp32")[0] == step
    other = "column_gemv_t" if step == "gemv_dispatch" else "gemv_dispatch"
    with pytest.raises(ScheduleParamError, match="is for"):
        get(other).validate(wl)
    _assert_compiles(get(step), text)
    _assert_compiles(get("best_gemm"), text)


def test_no_gemv_form_for_a_batch():
    assert dispatch.gemv_candidates(parse_workload("bmm:4x300x1x200")) == []
    with pytest.raises(ScheduleParamError, match="is for gemv"):
        get("gemv_dispatch").validate(parse_workload("bmm:4x300x1x200"))


def test_the_dispatcher_chooses_among_the_kernels_that_take_the_layout():
    for layout in LAYOUTS:  # the 16-bit TMA kernels take every layout (wgmma's transpose bits)
        ranked = dispatch.rank(parse_workload(f"gemm:4096x4096x4096:float16:{layout}"), "fp16")
        assert ranked[0].step == "persistent_gemm"
    # tf32: the TMA kernel for nn and nt (B read k-major), its transposing copy of A costs tn/tt a pass
    ranked = {lay: dispatch.rank(parse_workload(f"gemm:4096x4096x4096:{lay}"), "tf32") for lay in LAYOUTS}
    assert {lay: r[0].step for lay, r in ranked.items()} == dict.fromkeys(LAYOUTS, "tma_tf32_gemm")
    assert ranked["tn"][0].terms["reduce_us"] > 0 == ranked["nt"][0].terms["reduce_us"]
    for text in ("gemm:4096x4096x4096:tt", "bmm:16x1024x1024x128:float16:nt", "bmm:8x1024x512x2048:tn"):
        wl = parse_workload(text)
        for e in dispatch.rank(wl, "fp32" if wl.dtype == "float32" else "fp16"):
            get(e.step).validate(wl, e.config)


def test_a_batch_multiplies_the_blocks_like_split_k():
    one = parse_workload("gemm:512x512x64:float16")
    many = parse_workload("bmm:32x512x512x64:float16")
    for cand in dispatch.candidates(many, "fp16"):
        e1, e32 = dispatch.estimate(one, cand), dispatch.estimate(many, cand)
        assert e32.terms["blocks"] == 32 * e1.terms["blocks"]
        # the bytes 32 times over; a persistent kernel's last round of tiles (stream_spread) as its units give it
        spread1, spread32 = e1.terms.get("spread", 1.0), e32.terms.get("spread", 1.0)
        assert e32.terms["dram_us"] / spread32 == pytest.approx(32 * e1.terms["dram_us"] / spread1)
    # one 512x512 product fills a fraction of the GPU; 32 of them take the bigger tiles' time per block
    assert dispatch.rank(many, "fp16")[0].terms["blocks"] >= 132


@pytest.mark.parametrize("name", ["best_gemm", "best_fp16_gemm", "best_tf32_gemm"])
def test_the_best_steps_take_a_bmm_and_every_layout(name):
    spec = get(name)
    for text in ("bmm:32x512x512x64", "bmm:16x1024x1024x128:tn", "gemm:4096x4096x4096:tt", "gemm:1024x512x2048:nt"):
        w = parse_workload(text)
        wl = Gemm(w.M, w.N, w.K, spec.input_dtypes[0], layout=w.layout, batch=w.batch)
        spec.validate(wl)
        choice = spec.config().choose(wl)
        step, cfg = choice.step, choice.config
        get(step).validate(wl, cfg)


# --- the benchmark -------------------------------------------------------------------------------
def test_layout_benchmark_jobs_and_tables():
    import pandas as pd

    from reports.experiments import bench_layouts as L
    from reports.engine import results as R

    jobs = L.make_jobs()
    names = {(j["workload"], j["name"]) for j in jobs}
    for shape in ("4096x4096x4096", "1024x512x2048"):
        for layout in LAYOUTS:
            for dtype, choice in (("float32", "best_gemm"), ("float16", "best_fp16_gemm")):
                wl = str(parse_workload(f"gemm:{shape}:{dtype}:{layout}"))
                assert {(wl, "cublas"), (wl, choice)} <= names
    for name in ("thread_2d_gemm", "shared_cache_gemm", "warp_tiled_gemm"):
        assert {("gemm:1024x512x2048", name), ("gemm:1024x512x2048:nt", name)} <= names
    for shape in ("32x512x512x64", "16x1024x1024x128", "64x128x128x64"):
        assert (f"bmm:{shape}:float16", "best_fp16_gemm") in names and (f"bmm:{shape}:float16", "cublas") in names
    assert len(names) == len(jobs)
    # the tables from made-up timings: % of cuBLAS of the same layout, % of the own nn figure
    rows = []
    for j in jobs:
        wl = parse_workload(j["workload"])
        t = 1.0 if j["name"] == "cublas" else (1.05 if wl.layout == "nn" else 1.08)
        rows.append({"workload": j["workload"], "name": j["name"], "status": "ok", "time_ms": t,
                     "role": "baseline" if j["name"] == "cublas" else "schedule",
                     "precision": "fp32" if wl.dtype == "float32" else "fp16"})
    df = R.frame(rows, {"provenance": {"gpu": "test", "tvm": "0.27", "commit": "x", "date": "now"}})
    s = L.layout_summary(df)
    assert len(s) == 16 and set(s["layout"]) == set(LAYOUTS)
    nt = s[(s["layout"] == "nt") & (s["precision"] == "fp32") & (s["shape"] == "4096x4096x4096")].iloc[0]
    assert nt["% cuBLAS (same layout)"] == "92.6" and nt["% of own nn"] == "97.2"
    assert "≥90% cuBLAS: yes" in nt["targets"] and "within 5% of nn: yes" in nt["targets"]
    assert len(L.lesson_table(df)) == 4 and len(L.bmm_table(df)) == 6
    md = L.markdown(df)
    assert "cuBLAS of the same layout" in md and "## Batched products" in md
    assert isinstance(L.bmm_table(df), pd.DataFrame)


def test_layout_benchmark_without_gpu_builds_and_times_nothing(tmp_path, monkeypatch):
    import json

    from reports.experiments import bench_layouts as L
    from scripts.schedlab import main

    monkeypatch.setattr(L, "LAYOUT_SHAPES", ("128x96x64",))
    monkeypatch.setattr(L, "BMM_SHAPES", ("2x64x64x64",))
    monkeypatch.setattr(L, "LESSON_SHAPE", "128x96x64")
    assert main(["bench-gemm", "--layouts", "--out", str(tmp_path), "--quiet"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert {r["status"] for r in rows if r["name"] != "cublas"} == {"no-gpu"}
    assert {r["workload"] for r in rows} >= {"gemm:128x96x64:tt", "bmm:2x64x64x64:float16:nt"}
    assert "## The layout lesson" in (tmp_path / "table.md").read_text()


# --- on a GPU: every step × layout and bmm against float64 ---------------------------------------
GPU_CASES = [(s.name, odd_workload(s, lay)) for s in GEMM_STEPS for lay in s.layouts] + \
    [(s.name, odd_workload(s, lay, batched=True)) for s in BATCHED for lay in s.layouts]


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", GPU_CASES, ids=lambda c: str(c))
def test_every_step_and_layout_is_right_on_gpu(name, workload):
    from reports.engine.harness import check_in_process

    row = check_in_process(name, workload)
    assert row["status"] == "ok", f"{name} on {workload}: {row.get('error')}"


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["gemm:4096x4096x4096:float16:nt", "gemm:4096x4096x4096:float16:tn",
                                      "gemm:1024x512x2048:tt", "bmm:16x1024x1024x128:float16:nt",
                                      "bmm:64x128x128x64:float16"])
def test_the_choices_are_right_at_benchmark_shapes_on_gpu(workload):
    from reports.engine.harness import check_in_process

    name = "best_gemm" if parse_workload(workload).dtype == "float32" else "best_fp16_gemm"
    row = check_in_process(name, workload)
    assert row["status"] == "ok", f"{name} on {workload}: {row.get('error')}"


@pytest.mark.gpu
@pytest.mark.parametrize("workload", [f"gemm:256x192x320:{lay}" for lay in LAYOUTS] +
                         [f"gemm:256x192x320:float16:{lay}" for lay in LAYOUTS] +
                         ["bmm:4x256x192x320:float16:nt", "bmm:4x256x192x320:tn"])
def test_cublas_of_the_same_layout_and_bmm(workload):
    from reports.engine.harness import check_in_process

    row = check_in_process("cublas", workload, time=True, budget_s=0.02)
    assert row["status"] == "ok", row.get("error")
    wl = parse_workload(workload)
    assert ("torch.bmm" in row["cublas_call"]) == wl.batched
    assert (wl.layout in row["cublas_call"]) == (wl.layout != "nn")
