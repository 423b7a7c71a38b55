"""Epilogues and output types: the workload grammar, the float64 reference of each activation
(rounded to the output type last), the tolerance that rounding implies, which steps take an
epilogue and which refuse it in one line, the dispatcher's choice and byte count, the baselines'
plan and expressions (on CPU tensors), the tuner's sampled check and spaces; a few steps ×
epilogues compiled with nvcc (0 spills), the Hopper kernels (gemm 19-23) among them, computing it on
their accumulators (split-K: in the sum); and, on the GPU, every kind of step and baseline checked
against float64.

The IR of the two epilogue steps (one kernel storing D against two, C read back) is checked in
test_schedules.py, which builds them with an epilogue already."""

import math
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from schedules import Epilogue, Gemm, ScheduleParamError, dispatch, get, parse_workload
from schedules.reference import (UNIT_ROUNDOFF, activation, apply_epilogue, output_tolerance, product_error,
                                 reference, round_to)
from tests.helpers import build_spec

LLM = "gemm:2048x8192x1024:bfloat16:nt:out=bfloat16:bias:gelu_tanh"


# --- the grammar ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canonical", [
    (LLM, LLM),
    ("gemm:64x64x64:out=float16", "gemm:64x64x64:out=float16"),
    ("gemm:64x64x64:out=float32:bias", "gemm:64x64x64:bias"),
    ("gemm:64x64x64:float16:gelu", "gemm:64x64x64:float16:gelu_erf"),  # PyTorch's default GELU
    ("gemm:64x64x64:silu:bias", "gemm:64x64x64:bias:silu"),
    ("gemm:64x64x64:residual:beta=0.5:alpha=2", "gemm:64x64x64:residual:alpha=2:beta=0.5"),
    ("gemm:64x64x64:alpha=1.0", "gemm:64x64x64"),  # an epilogue that does nothing is none
    ("bmm:4x64x32x16:float16:tn:out=bfloat16:bias:relu:residual:alpha=0.125:beta=-3",
     "bmm:4x64x32x16:float16:tn:out=bfloat16:bias:relu:residual:alpha=0.125:beta=-3"),
])
def test_epilogue_strings_round_trip_in_one_order(text, canonical):
    wl = parse_workload(text)
    assert str(wl) == canonical
    assert parse_workload(str(wl)) == wl


def test_the_defaults_keep_todays_workloads():
    wl = parse_workload("gemm:1024x512x2048:float16:nt")
    assert (wl.out_dtype, wl.epilogue, wl.has_epilogue) == ("float32", None, False)
    assert wl == Gemm(1024, 512, 2048, "float16", layout="nt")
    assert wl.arg_names() == ["A", "B", "C"]
    func = wl.prim_func()
    assert len(func.params) == 3 and 'sblock("D")' not in func.script()


@pytest.mark.parametrize("text, words", [
    ("gemm:8x8x8:bias:bias", "bias is given twice"),
    ("gemm:8x8x8:relu:gelu_tanh", "one activation"),
    ("gemm:8x8x8:beta=2", "needs the word residual"),
    ("gemm:8x8x8:residual:alpha=nan", "alpha must be a finite number"),
    ("gemm:8x8x8:alpha=inf", "finite"),
    ("gemm:8x8x8:alpha=big", "alpha must be a number"),
    ("gemm:8x8x8:out=int8", "output type 'int8' is not one of float32, float16, bfloat16"),
    ("gemm:8x8x8:out=float16:out=float16", "out= is given twice"),
    ("gemm:8x8x8:gelu2", "'gelu2' is not a dtype"),
    ("gemm:8x8x8:bias:nt", "come before out= and the epilogue"),
    ("gemv:64x64:bias", "not gemv"),
    ("gemv_t:64x64:out=float16", "not gemv_t"),
])
def test_nonsense_is_a_one_line_error(text, words):
    with pytest.raises(ScheduleParamError) as e:
        parse_workload(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_constructors_check_too():
    with pytest.raises(ScheduleParamError, match="needs residual"):
        Epilogue(beta=2.0)
    with pytest.raises(ScheduleParamError, match="finite"):
        Epilogue(alpha=float("nan"))
    with pytest.raises(ScheduleParamError, match="activation 'tanh'"):
        Epilogue(activation="tanh")
    with pytest.raises(ScheduleParamError, match="output type"):
        Gemm(8, 8, 8, out_dtype="float64")
    assert Epilogue(activation="gelu").activation == "gelu_erf"
    assert Gemm(8, 8, 8, epilogue=Epilogue()) == Gemm(8, 8, 8)  # an identity epilogue is stored as None


def test_arguments_bytes_and_the_two_blocks():
    wl = parse_workload("bmm:2x64x48x32:bfloat16:nt:out=bfloat16:bias:silu:residual")
    assert wl.arg_names() == ["A", "B", "bias", "R", "D"]
    assert wl.arg_shapes() == [((2, 64, 32), "bfloat16"), ((2, 48, 32), "bfloat16"), ((48,), "bfloat16"),
                               ((2, 64, 48), "bfloat16"), ((2, 64, 48), "bfloat16")]
    # inputs once, the bias once, R once and D once, in 2 bytes
    assert wl.min_bytes == 2 * (2 * (64 * 32 + 48 * 32) + 48 + 2 * 2 * 64 * 48)
    assert parse_workload("gemm:64x48x32:out=bfloat16").min_bytes == 4 * (64 * 32 + 32 * 48) + 2 * 64 * 48
    text = wl.prim_func().script()
    assert 'sblock("C")' in text and 'sblock("D")' in text and "T.sigmoid" in text
    assert 'D: T.Buffer((2, 64, 48), "bfloat16")' in text


# --- the float64 reference -------------------------------------------------------------------------
def _erf(x):
    return np.vectorize(math.erf)(x)


FORMULAS = {  # each activation written out directly, element by element
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "gelu_erf": lambda x: x * 0.5 * (1 + _erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("act", sorted(FORMULAS))
def test_reference_applies_each_activation_in_float64_and_rounds_last(act):
    rng = np.random.default_rng(0)
    wl = parse_workload(f"gemm:9x7x5:bfloat16:tn:out=bfloat16:bias:{act}:residual:alpha=0.75:beta=-1.5")
    a, b, bias, r = (rng.uniform(-2, 2, s).astype(ml_dtypes.bfloat16) for s, _ in wl.arg_shapes()[:-1])
    a64, b64, bias64, r64 = (x.astype(np.float64) for x in (a, b, bias, r))
    exact = FORMULAS[act](0.75 * (a64.T @ b64) + bias64) - 1.5 * r64
    want = exact.astype(ml_dtypes.bfloat16).astype(np.float64)
    got = reference(wl, [a, b, bias, r])
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, exact)  # rounded to bf16, not left in float64
    torch = pytest.importorskip("torch")

    got_torch = reference(wl, [torch.from_numpy(x.astype(np.float32)).bfloat16() for x in (a, b, bias, r)])
    np.testing.assert_array_equal(got_torch.numpy(), want)


def test_activation_works_on_torch_and_numpy_alike():
    torch = pytest.importorskip("torch")

    x = np.linspace(-6, 6, 97)
    for act, formula in FORMULAS.items():
        np.testing.assert_allclose(activation(act, x), formula(x), rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(activation(act, torch.from_numpy(x)).numpy(), formula(x), rtol=1e-15, atol=1e-15)


def test_output_tolerance_is_the_rounding_of_both_sides():
    assert UNIT_ROUNDOFF["bfloat16"] == 2.0 ** -8 and UNIT_ROUNDOFF["float16"] == 2.0 ** -11
    fp32, bf16 = parse_workload("gemm:8x8x8:bias"), parse_workload("gemm:8x8x8:bfloat16:out=bfloat16")
    assert output_tolerance(fp32, 1e-5) == 1e-5
    assert output_tolerance(bf16, 1e-4) == pytest.approx(1e-4 + 2 * 2.0 ** -8, rel=1e-3)
    assert get("fused_epilogue_gemm").tolerance_for(bf16) == pytest.approx(1e-4 + 2 * 2.0 ** -8, rel=1e-3)
    assert get("warp_tiled_gemm").tolerance_for(fp32) == 1e-5


def test_the_check_passes_an_fp32_epilogue_rounded_last_and_fails_a_wrong_one():
    """What a fused kernel computes (fp32 sums, the epilogue in fp32, bf16 last) is within the
    tolerance; the same without the bias, or with the erf GELU for the tanh one at large inputs, is
    not (the check can fail)."""
    rng = np.random.default_rng(1)
    wl = parse_workload("gemm:64x48x256:bfloat16:out=bfloat16:bias:gelu_tanh:residual")
    ins = [rng.uniform(-1, 1, s).astype(ml_dtypes.bfloat16) for s, _ in wl.arg_shapes()[:-1]]
    a, b, bias, r = (x.astype(np.float32) for x in ins)
    x = a @ b + bias
    kernel = (0.5 * x * (1 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x ** 3))) + r)
    tol = get("fused_epilogue_gemm").tolerance_for(wl)
    assert product_error(wl, kernel.astype(ml_dtypes.bfloat16), ins) < tol / 4
    no_bias = a @ b
    wrong = 0.5 * no_bias * (1 + np.tanh(0.7978845608 * (no_bias + 0.044715 * no_bias ** 3))) + r
    assert product_error(wl, wrong.astype(ml_dtypes.bfloat16), ins) > tol


def test_apply_epilogue_on_sampled_outputs_matches_the_whole():
    from tuning.measure import _reference_at

    rng = np.random.default_rng(2)
    wl = parse_workload("gemm:32x24x16:out=float16:bias:silu:residual:alpha=2:beta=0.5")
    ins = [rng.uniform(-1, 1, s).astype(d) for s, d in wl.arg_shapes()[:-1]]
    rows, cols = rng.integers(0, 32, 50), rng.integers(0, 24, 50)
    np.testing.assert_allclose(_reference_at(ins, rows, cols, wl), reference(wl, ins)[rows, cols], rtol=2.0 ** -10)
    assert round_to(np.array([1 + 2 ** -9]), "bfloat16")[0] == 1.0
    assert apply_epilogue(wl, np.zeros((1, 24)), np.ones(24), np.ones((1, 24)), rounded=False)[0, 0] == \
        pytest.approx(1 / (1 + math.exp(-1)) + 0.5)


# --- which steps take an epilogue --------------------------------------------------------------------
HOPPER = ("wgmma_gemm", "tma_gemm", "warp_specialized_gemm", "persistent_gemm", "cluster_gemm")
TAKERS = ("vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm", "rasterized_gemm",
          "skinny_gemm", "best_gemm", "tensor_core_gemm", "best_fp16_gemm", "best_tf32_gemm",
          "unfused_epilogue_gemm", "fused_epilogue_gemm", "tuned_gemm", "decode_gemm", "fp8_tma_gemm",
          "fp8_block_scaled_gemm", "best_fp8_gemm", "wgmma_tf32_gemm", "short_k_gemm", "thin_tc_gemm", "short_k_tc_gemm",
          # the row-form GEMV steps (a GEMM form read along its rows), on each row's sum; not split_k_gemv's partials
          "gemv_dispatch", "warp_gemv", "vectorized_gemv", "multi_row_gemv", "multi_warp_gemv") + HOPPER
REFUSERS = ("naive_gemm", "double_buffer_gemm", "tma_tf32_gemm", "split_k_gemv", "column_gemv_t")


def test_the_fast_steps_and_best_take_epilogues_and_the_others_refuse_in_one_line():
    from schedules import all_schedules

    assert {s.name for s in all_schedules() if s.epilogues} == set(TAKERS)
    for name in REFUSERS:
        layout = "tn" if name == "column_gemv_t" else "nn"  # a GEMV form too: read down A's columns, or along its rows
        fp16 = parse_workload(f"gemm:256x1x512:float16:{layout}:out=float16:bias:relu")
        spec = get(name)
        assert not spec.accepts(fp16)
        with pytest.raises(ScheduleParamError) as e:
            spec.validate(fp16, spec.config())
        assert "does not take the epilogue bias:relu or a float16 output" in str(e.value), name
        assert "\n" not in str(e.value)
    for name in HOPPER:  # a plain product still, and a linear layer's
        assert get(name).accepts(parse_workload("gemm:256x256x512:float16"))
        assert get(name).accepts(parse_workload("bmm:2x256x256x512:bfloat16:nt:out=bfloat16:bias:gelu_tanh:residual"))


def test_the_dispatcher_chooses_only_kernels_that_take_the_epilogue():
    for text in (LLM, "gemm:2048x8192x1024:float16:nt:out=float16:bias:gelu_tanh", "gemm:4096x1x4096:bias:relu",
                 "gemm:64x4096x4096:bfloat16:out=bfloat16:silu", "gemm:1024x512x2048:float16:out=float16"):
        wl = parse_workload(text)
        best = "best_gemm" if wl.dtype == "float32" else "best_fp16_gemm"
        ranked = dispatch.rank(wl, "fp32" if wl.dtype == "float32" else "fp16" if wl.dtype == "float16" else "bf16")
        assert all(get(e.step).epilogues for e in ranked)
        resolved = get(best).resolve(wl)
        assert resolved.step.epilogues and resolved.step.accepts(wl)
    assert get("best_fp16_gemm").resolve(parse_workload("gemm:2048x8192x1024:float16:out=float16:bias")).step.name \
        in HOPPER


def test_a_large_bf16_layer_with_bias_and_gelu_goes_to_a_hopper_kernel():
    """The TMA and wgmma kernels take the epilogue, so a linear layer is ranked among the same kernels
    as its plain product, and the choice is a Hopper tensor-core kernel, not a WMMA or SIMT tile."""
    wl = parse_workload("gemm:4096x28672x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh")
    step, cfg = dispatch.choose(wl, "bf16")
    assert step in HOPPER and get(step).accepts(wl)
    assert get("best_fp16_gemm").resolve(wl).step.name == step
    families = {e.candidate.family for e in dispatch.rank(wl, "bf16")}
    assert {"tma", "cp"} <= families and "wmma" not in families
    plain = dispatch.rank(parse_workload("gemm:4096x28672x4096:bfloat16:nt"), "bf16")

    def unstaged(c):  # the same kernels, stored another way: the epilogue's TMA tiles through shared memory
        # (staged_store), the plain product's float32 C by the TMA unit (tma_store)
        cfg = c.config
        for knob in ("staged_store", "tma_store"):
            cfg = replace(cfg, **{knob: False}) if getattr(cfg, knob, False) else cfg
        return c.step, cfg, c.family, c.key

    assert {unstaged(e.candidate) for e in dispatch.rank(wl, "bf16")} == {unstaged(e.candidate) for e in plain}
    assert any(getattr(e.candidate.config, "staged_store", False) for e in dispatch.rank(wl, "bf16"))


def test_the_model_counts_the_output_type_and_the_epilogue_reads():
    base = parse_workload("gemm:4096x4096x256")
    cand = dispatch.simt_candidates(base)[0]
    terms = {t: dispatch.estimate(parse_workload(f"gemm:4096x4096x256{t}"), cand).terms["dram_us"]
             for t in ("", ":out=bfloat16", ":residual", ":out=bfloat16:bias")}
    out_us = 2 * 4096 * 4096 / (dispatch.current_gpu().memory_gbps * 1e3)  # 2 bytes less per output
    assert terms[""] - terms[":out=bfloat16"] == pytest.approx(out_us)
    assert terms[":residual"] - terms[""] == pytest.approx(2 * out_us)  # R read, 4 bytes an output
    assert terms[":out=bfloat16:bias"] > terms[":out=bfloat16"]
    # the TMA kernels: the same DRAM bytes, and each tile's stores (R read beside D) in the compute term
    tma = next(c for c in dispatch.candidates(parse_workload("gemm:4096x4096x256:bfloat16"), "bf16")
               if c.family == "tma" and c.config.split_k == 1)
    est = {t: dispatch.estimate(parse_workload(f"gemm:4096x4096x256:bfloat16{t}"), tma).terms
           for t in ("", ":out=bfloat16", ":out=bfloat16:residual", ":out=bfloat16:bias")}
    spread = est[""]["spread"]  # the persistent kernel's last round of tiles (dispatch.stream_spread)
    assert all(e["spread"] == spread for e in est.values())
    assert est[""]["dram_us"] - est[":out=bfloat16"]["dram_us"] == pytest.approx(out_us * spread)
    assert est[":out=bfloat16:residual"]["dram_us"] - est[":out=bfloat16"]["dram_us"] == pytest.approx(out_us * spread)
    assert est[":out=bfloat16:bias"]["dram_us"] > est[":out=bfloat16"]["dram_us"]
    assert est[""]["compute_us"] > est[":out=bfloat16"]["compute_us"] < est[":out=bfloat16:residual"]["compute_us"]


# --- nvcc: a few steps × epilogues, no spills --------------------------------------------------------
# (tensor_core_gemm with an epilogue: test_gemm_fast.py; the two epilogue steps: test_schedules.py)
NVCC_CASES = [("split_k_gemm", "gemm:256x192x2048:bias:silu:residual:alpha=0.5:beta=2"),
              ("skinny_gemm", "gemm:4096x3x1024:bfloat16:out=bfloat16:bias:gelu_tanh")]


@pytest.fixture(scope="module")
def built():
    return {case: build_spec(get(case[0]), case[1]) for case in NVCC_CASES}


def kernel_bodies(cuda: str) -> dict:
    """Each kernel's definition in a CUDA source, by name."""
    out = {}
    for chunk in cuda.split('extern "C" __global__')[1:]:
        m = re.match(r"\s*void (?:__launch_bounds__\(\d+\) )?(\w+)\(", chunk)
        end = re.search(r"\)\s*([;{])", chunk[m.end():]) if m else None
        if end and end.group(1) == "{":  # a definition, not a declaration
            out[m.group(1)] = chunk
    return out


def test_fused_steps_compile_without_spills_and_store_the_epilogue(built):
    for (name, workload), b in built.items():
        assert b.device.cubin and all(k.spills == 0 for k in b.device.kernels), (name, b.device.kernels)
    (skinny,) = kernel_bodies(built[NVCC_CASES[1]].device.cuda).values()  # one kernel
    assert "tanhf(" in skinny and "nv_bfloat16* __restrict__ D_ptr" in skinny and "C_ptr" not in skinny
    sk = built[NVCC_CASES[0]]
    bodies = kernel_bodies(sk.device.cuda)
    assert len(bodies) == 2  # the partial products, then the sum with the epilogue
    partial, final = (k.name for k in sorted(sk.device.kernels, key=lambda k: k.registers, reverse=True))
    assert "expf(" in bodies[final] and "R_ptr" in bodies[final]  # SiLU and R after the final sum
    assert "expf(" not in bodies[partial] and "R_ptr" not in bodies[partial]  # never on a partial sum


# --- the Hopper kernels: the epilogue on the accumulators ----------------------------------------------
FULL = "out=bfloat16:bias:gelu_tanh:residual:alpha=0.5:beta=2"
RAGGED = f"gemm:1000x504x2000:bfloat16:{FULL}"  # M, N not multiples of the 128 × 256 tile
SPLIT = ("persistent_gemm", f"gemm:256x504x4096:bfloat16:{FULL}", (("split_k", 4),))
HOPPER_NVCC = [("wgmma_gemm", RAGGED, ()), ("tma_gemm", RAGGED, ()), ("warp_specialized_gemm", RAGGED, ()), SPLIT,
               # a 16-bit output alone (in narrower tiles: quicker to compile), a batch, split-K's sum
               ("wgmma_gemm", "bmm:2x256x256x512:float16:out=float16", (("block_n", 128),)),
               ("tma_gemm", "gemm:512x256x512:float16:out=float16", (("block_n", 128),)),
               ("warp_specialized_gemm", "gemm:256x256x2048:float16:out=float16", (("block_n", 128), ("split_k", 2)))]


@pytest.fixture(scope="module")
def hopper_built():
    return {case: build_spec(get(case[0]), case[1], **dict(case[2])) for case in HOPPER_NVCC}


def test_the_hopper_kernels_compute_the_epilogue_in_registers_and_store_16_bits(hopper_built):
    """gemm 19-21 on a linear layer: one kernel reads the bias (once per column a thread holds:
    one 4-byte load per 8-column group of the 256-column tile), reads R and writes D as pairs of
    bf16 (one 4-byte access), GELU tanh and both scales in it; no C anywhere; compiled by nvcc for
    sm_90a without spills. A plain 16-bit output: the product rounded and stored as half2 pairs."""
    for (name, workload, _), b in hopper_built.items():
        assert "for 'sm_90a'" in b.device.ptxas_log and all(k.spills == 0 for k in b.device.kernels), name
        assert "C_ptr" not in b.device.cuda and "wgmma.mma_async" in b.device.ptx
    for name in ("wgmma_gemm", "tma_gemm", "warp_specialized_gemm"):
        (body,) = kernel_bodies(hopper_built[name, RAGGED, ()].device.cuda).values()
        assert "tanhf(" in body and "* 0x1p-1f" in body and "* 0x1p+1f" in body  # GELU, alpha = 0.5, beta = 2
        assert "nv_bfloat16* __restrict__ bias_ptr" in body and "nv_bfloat16* __restrict__ D_ptr" in body
        assert body.count("*(nv_bfloat162*)(bias_ptr") == 256 // 8, name  # once per column pair
        pairs = {x: body.count(f"*(nv_bfloat162*)({x}_ptr") for x in ("R", "D")}
        assert pairs["R"] == pairs["D"] >= 2 * 256 // 8, (name, pairs)  # R read beside each pair of D
    for case in HOPPER_NVCC[4:]:
        cuda = hopper_built[case].device.cuda
        assert "half* __restrict__ D_ptr" in cuda and "bias_ptr" not in cuda and "R_ptr" not in cuda
        assert re.search(r"\*\(half[24]\*\)\(D_ptr", cuda), case  # the pairs (the split-K sum: fours) in 16 bits


def test_with_split_k_the_slices_write_fp32_partials_and_the_sum_applies_the_epilogue(hopper_built):
    b = hopper_built[SPLIT]
    bodies = kernel_bodies(b.device.cuda)
    assert len(bodies) == 2
    (product,) = [k for k in bodies.values() if "wgmma" in k]
    (final,) = [k for k in bodies.values() if "wgmma" not in k]
    assert "float* __restrict__ P_ptr" in product and "*(float2*)(P_ptr" in product
    assert "tanhf(" not in product and "bias_ptr" not in product and "D_ptr" not in product
    assert "tanhf(" in final and "*(nv_bfloat164*)(bias_ptr" in final and "*(nv_bfloat164*)(R_ptr" in final
    assert "*(nv_bfloat164*)(D_ptr" in final  # four outputs of a row per thread, 8 bytes


@pytest.mark.parametrize("name, workload", [("wgmma_gemm", "gemm:128x256x64:float16:out=float16:residual"),
                                            ("persistent_gemm", "bmm:2x128x256x64:bfloat16:nt:bias:relu")])
def test_the_hopper_kernels_take_the_workloads_arguments(name, workload):
    """The TVMScript kernels' signature follows the workload: A, B, [bias], [R], D, in the output type."""
    wl = parse_workload(workload)
    func = get(name).build(wl).mod["main"]
    assert [p.name for p in func.params] == wl.arg_names()
    assert [(tuple(int(n) for n in p.shape), p.dtype) for p in func.params] == wl.arg_shapes()


# --- baselines -----------------------------------------------------------------------------------------
def test_the_baseline_plan():
    from reports.engine.baselines import fused_library_call, gpu_baselines
    from reports.experiments.run import default_baselines

    assert gpu_baselines(parse_workload("gemm:64x64x64:bfloat16")) == ["cublas"]
    assert gpu_baselines(parse_workload("gemm:64x64x64:bfloat16:out=bfloat16")) == ["cublas"]
    assert gpu_baselines(parse_workload(LLM)) == ["cublas", "cublaslt_fused", "torch_eager"]
    assert fused_library_call(parse_workload(LLM)) == "torch._addmm_activation(bias, a, b, use_gelu=True)"
    assert fused_library_call(parse_workload("gemm:64x64x64:float16:out=float16:bias")) == "torch.addmm(bias, a, b)"
    for no_lt in ("gemm:64x64x64:bfloat16:out=bfloat16:bias:gelu_erf", "gemm:64x64x64:bfloat16:out=bfloat16:silu",
                  "gemm:64x64x64:float16:out=float16:bias:residual", "gemm:64x64x64:bfloat16:bias:relu",
                  "bmm:2x64x64x64:float16:out=float16:bias"):
        assert gpu_baselines(parse_workload(no_lt)) == ["cublas", "torch_eager"], no_lt
    wl = parse_workload("gemm:64x64x64:bias:relu")
    assert default_baselines(wl, [get("fused_epilogue_gemm")]) == ["cublas", "cublaslt_fused", "torch_eager",
                                                                     "tvm_dlight"]
    assert default_baselines(parse_workload("gemm:64x64x64"), [get("warp_tiled_gemm")])[:3] == \
        ["numpy_cpu", "torch_cpu", "cublas"]
    from reports.experiments.run import plan

    jobs, left_out = plan([LLM])  # schedlab run --workload LLM: the steps that take it, the others named
    names = [j["name"] for j in jobs]
    assert {"fused_epilogue_gemm", "unfused_epilogue_gemm", "skinny_gemm", "best_fp16_gemm"} <= set(names)
    assert names[-4:] == ["cublas", "cublaslt_fused", "torch_eager", "tvm_dlight"]
    assert {"naive_gemm", "tensor_core_gemm"} <= set(left_out[LLM]) and "persistent_gemm" in names


@pytest.mark.parametrize("text, name", [
    ("gemm:48x40x32:nt:bias:relu:alpha=0.5", "cublaslt_fused"),
    ("gemm:48x40x32:bias", "cublaslt_fused"),
    ("gemm:48x40x32:tn:bias:gelu_tanh:residual:alpha=2:beta=-0.5", "torch_eager"),
    ("gemm:48x40x32:silu", "torch_eager"),
    ("bmm:3x48x40x32:bias:gelu_erf:residual", "torch_eager"),
])
def test_the_baseline_expressions_compute_the_epilogue_on_cpu_tensors(text, name):
    """The same closures the GPU rows time, on CPU tensors in fp32 (PyTorch's CPU GELU of
    _addmm_activation is the erf form, so the tanh one is checked on the GPU only)."""
    torch = pytest.importorskip("torch")

    from reports.engine.baselines import eager_tolerance, epilogue_call

    wl = parse_workload(text)
    ins = [torch.empty(s, dtype=torch.float32).uniform_(-1, 1) for s, _ in wl.arg_shapes()[:-1]]
    out = torch.full(wl.arg_shapes()[-1][0], float("nan"))
    fn, call = epilogue_call(torch, wl, ins, out, name)
    fn()
    assert product_error(wl, out, ins) < min(eager_tolerance(wl), 1e-5), call


def test_the_baselines_product_finds_its_way_once_not_on_every_timed_call():
    """product_into_call (the eager epilogue's and the dequantize baseline's product): where torch's mm has no
    out_dtype, the failed try happens once, when the closure is made; each timed call runs one product."""
    from reports.engine.baselines import product_into_call

    calls = []

    class Out:
        dtype = "bfloat16"

        def copy_(self, x):
            calls.append("copy")

    def mm(a, b, **kw):
        calls.append(sorted(kw))
        if "out_dtype" in kw:
            raise TypeError("mm() got an unexpected keyword argument 'out_dtype'")
        return "product"

    class A:
        dtype = "float32"

    fn, how = product_into_call(None, mm, A(), None, Out())
    assert how == "converted" and calls == [["out", "out_dtype"]]
    calls.clear()
    fn()
    fn()
    assert calls == [[], "copy", [], "copy"]
    A.dtype = "bfloat16"
    fn, how = product_into_call(None, mm, A(), None, Out())
    calls.clear()
    fn()
    assert how == "same types" and calls == [["out"]]


def test_bench_gemm_puts_an_epilogue_shape_beside_the_fused_library_and_eager():
    from reports.experiments.bench_gemm import make_jobs

    jobs = make_jobs(["2048x8192x1024:nt:out=bfloat16:bias:gelu_tanh"], ["bf16", "fp16"])
    names = {(j["workload"], j["name"]) for j in jobs}
    bf16, fp16 = LLM, "gemm:2048x8192x1024:float16:nt:out=bfloat16:bias:gelu_tanh"
    assert {(bf16, n) for n in ("cublas", "cublaslt_fused", "torch_eager", "unfused_epilogue_gemm",
                                "fused_epilogue_gemm", "best_fp16_gemm")} <= names
    assert (bf16, "persistent_gemm") in names  # the Hopper ladder takes the epilogue
    assert (fp16, "tensor_core_gemm") in names and (fp16, "cublaslt_fused") not in names  # bf16 out of fp16 inputs
    assert make_jobs(["64x64x64:bfloat16:bias"], ["fp16"]) == []  # the entry names bf16 inputs


def test_results_compare_with_the_fused_library_and_eager():
    from reports.engine import results as R

    rows = [{"workload": LLM, "name": n, "role": r, "status": "ok", "time_ms": t, "precision": "bf16"}
            for n, r, t in (("cublas", "baseline", 1.0), ("cublaslt_fused", "baseline", 1.2), ("torch_eager", "baseline", 2.0),
                            ("fused_epilogue_gemm", "schedule", 1.5))]
    df = R.frame(rows).set_index("name")
    assert df.loc["fused_epilogue_gemm", "pct_cublaslt"] == pytest.approx(80.0)
    assert df.loc["fused_epilogue_gemm", "speedup_vs_eager"] == pytest.approx(2.0 / 1.5)
    assert df.loc["fused_epilogue_gemm", "pct_cublas"] == pytest.approx(100 / 1.5)


# --- the GPU -------------------------------------------------------------------------------------------
GPU_STEPS = [("fused_epilogue_gemm", LLM), ("unfused_epilogue_gemm", LLM),
             ("fused_epilogue_gemm", "gemm:1000x500x2001:float16:out=float16:bias:gelu_erf:residual:alpha=0.5"),
             ("unfused_epilogue_gemm", "bmm:3x136x264x72:tn:bias:silu"),
             ("best_fp16_gemm", LLM), ("best_fp16_gemm", "gemm:2048x8192x1024:float16:nt:out=float16:bias:gelu_tanh"),
             ("best_fp16_gemm", "gemm:4096x4096x4096:bfloat16:out=bfloat16"),
             ("best_gemm", "gemm:1024x512x2048:bias:relu:residual:beta=2"), ("best_gemm", "gemm:4096x1x4096:bias:silu"),
             ("best_tf32_gemm", "gemm:1000x500x2001:out=bfloat16:bias:gelu_tanh"),
             ("split_k_gemm", "gemm:256x192x2048:bias:silu:residual:alpha=0.5:beta=2"),
             ("skinny_gemm", "gemm:4096x3x1024:bfloat16:out=bfloat16:bias:gelu_tanh"),
             ("async_pipeline_gemm", "gemm:1024x512x2048:nt:out=float16:bias:gelu_erf"),
             ("tensor_core_gemm", "gemm:1000x500x2001:float16:out=bfloat16:relu:residual")]


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", GPU_STEPS)
def test_epilogue_steps_are_right_on_gpu(name, workload):
    from reports.engine.harness import check_in_process

    row = check_in_process(name, workload)
    assert row["status"] == "ok", row.get("error")
    assert row["rel_error"] <= row["tolerance"]


# the Hopper kernels: bf16 and fp16 outputs (and one fp32), every part of the epilogue, ragged edges (M, N
# not tile multiples; N odd: one output at a time), a cluster with padded tile rows, split-K (the sum
# applying the epilogue; its four outputs running into the next row where N % 4 != 0), padded operands, bmm
HOPPER_GPU = [("wgmma_gemm", RAGGED, {}), ("tma_gemm", RAGGED, {}), ("warp_specialized_gemm", RAGGED, {}),
              ("wgmma_gemm", "bmm:3x200x136x72:float16:nt:out=float16:bias:gelu_erf:residual:alpha=0.5", {}),
              ("wgmma_gemm", "gemm:77x33x15:bfloat16:out=bfloat16:bias:silu", {}),
              ("tma_gemm", "gemm:1000x520x2000:float16:out=float16:bias:gelu_tanh:residual:alpha=0.5:beta=2", {}),
              ("persistent_gemm", f"bmm:3x200x136x72:bfloat16:tn:{FULL}", {}),
              ("cluster_gemm", "gemm:1100x504x2000:float16:bias:gelu_tanh:residual:beta=-1", {}),
              ("persistent_gemm", f"gemm:256x504x4096:bfloat16:{FULL}", {"split_k": 4}),
              ("warp_specialized_gemm", "gemm:250x250x20000:float16:out=float16:bias:silu:residual",
               {"split_k": 8, "pad_operands": True}),
              ("persistent_gemm", "gemm:1001x777x3001:float16:out=float16:bias:relu:residual", {"pad_operands": True}),
              ("wgmma_tf32_gemm", f"gemm:1000x504x2000:{FULL}", {}), ("wgmma_tf32_gemm", "gemm:700x384x1000:bias:silu", {}),
              ("best_tf32_gemm", "gemm:4096x4096x4096:out=bfloat16:bias:gelu_tanh", {})]


def test_the_tf32_wgmma_kernel_takes_the_epilogue():
    """wgmma_gemm's kernel with tf32 inputs: the same epilogue on the accumulators, a bf16 output,
    no spills; best_tf32_gemm can now choose it for a large layer with an epilogue."""
    from schedules import dispatch

    b = build_spec(get("wgmma_tf32_gemm"), "gemm:512x256x512:out=bfloat16:bias:gelu_tanh")
    assert all(k.spills == 0 for k in b.device.kernels) and "tf32" in b.device.ptx
    assert "tanhf" in b.device.cuda and "nv_bfloat16" in b.device.cuda
    assert any(c.step == "wgmma_tf32_gemm"
               for c in dispatch.candidates(parse_workload("gemm:4096x4096x4096:out=bfloat16:bias:gelu_tanh"), "tf32"))


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload, params", HOPPER_GPU)
def test_the_hopper_kernels_epilogue_is_right_on_gpu(name, workload, params):
    from reports.engine.harness import check_in_process

    row = check_in_process(name, workload, params)
    assert row["status"] == "ok", row.get("error")
    assert row["rel_error"] <= row["tolerance"]


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", [
    ("cublas", LLM), ("cublaslt_fused", LLM), ("torch_eager", LLM), ("cublas", "gemm:2048x2048x2048:bfloat16:out=bfloat16"),
    ("cublaslt_fused", "gemm:1024x1024x512:float16:out=float16:bias:relu:alpha=0.5"),
    ("torch_eager", "bmm:2x256x192x320:bfloat16:out=bfloat16:bias:silu:residual:beta=0.5"),
    ("cublaslt_fused", "gemm:1024x1024x512:bias")])
def test_epilogue_baselines_are_right_on_gpu(name, workload):
    from reports.engine.harness import check_in_process

    row = check_in_process(name, workload, time=True, budget_s=0.02)
    assert row["status"] == "ok", row.get("error")
    assert row["time_ms"] > 0 and row["cublas_call"]


@pytest.mark.gpu
def test_a_kernel_takes_the_bias_and_returns_a_bf16_output():
    torch = pytest.importorskip("torch")

    from reports import compile_kernel

    k = compile_kernel("fused_epilogue_gemm", "gemm:256x512x128:bfloat16:nt:out=bfloat16:bias:gelu_tanh")
    assert k.arg_names == ["A", "B", "bias", "D"]
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    out = k(a, w, bias)
    assert out.dtype == torch.bfloat16 and out.shape == (256, 512)
    want = torch.nn.functional.gelu(a.float() @ w.float().T + bias.float(), approximate="tanh")
    assert float((out.float() - want).norm() / want.norm()) < k.tolerance
    from reports.engine.kernel import KernelArgumentError

    with pytest.raises(KernelArgumentError, match="takes 3 inputs"):
        k(a, w)


# --- tuning ---------------------------------------------------------------------------------------------
def test_the_tuners_spaces_tune_the_epilogue_with_the_product():
    """A design space of the hand-written ``tiled`` template on an epilogue workload: the elementwise
    block is inlined into the register write-back (no C buffer, no block D left to schedule)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from schedules.tensor_intrinsics import import_tensor_intrinsics
    from tuning.cuda_compile import cuda_target
    from tuning.spaces import get_space

    import_tensor_intrinsics()  # what TuneContext imports, at a tenth of the cost (23 s of CPU under pytest)
    wl = parse_workload("gemm:256x128x64:out=float16:bias:gelu_tanh:residual")
    target = cuda_target("sm_90")
    ctx = ms.TuneContext(tvm.IRModule({"main": wl.prim_func()}), target=target,
                         space_generator=get_space("tiled").generator(target), task_name="epilogue", num_threads=1)
    (space,) = ctx.generate_design_space()
    text = space.mod.script()
    assert 'sblock("D")' not in text and "C = T.sblock_alloc_buffer" not in text
    assert re.search(r'D\[v0, v1\] = T.Cast\("float16", .*C_local\[v0, v1\].*T.tanh', text)
