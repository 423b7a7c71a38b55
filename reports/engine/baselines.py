"""Library baselines timed in the same harness as the schedules: NumPy and PyTorch on the CPU,
cuBLAS through PyTorch on CUDA (one call per workload kind, input type and output type, the same
types as the lab's kernels), and TVM's own default GPU rules (``s_tir.dlight``).

A GEMM with an epilogue (bias, activation, residual, scaling) gets three library rows
(:func:`gpu_baselines`): ``cublas``, the product alone in the workload's types (checked against the
product without the epilogue: the floor a fused kernel is measured against); ``cublaslt_fused``,
cuBLASLt's own fused epilogue where PyTorch reaches it (``torch.addmm`` for a bias,
``torch._addmm_activation`` for a bias with ReLU or GELU: on CUDA the cuBLASLt GELU epilogue, which is
the tanh form); and ``torch_eager``, the unfused sequence eager PyTorch runs (the product, then ``+
bias``, then the activation, then ``+ beta·R``, each a kernel of its own that reads its input back
and rounds to the output type). The last two are checked against the workload's own float64
reference.

A GEMM's operand layout reaches the libraries as it reaches the kernels: the stored buffers, a
transposed operand passed as a transposed view (``.T`` / ``.mT``: no copy, the library reads the
strides and runs its own transposed product), and a batch of products (bmm) as one batched call
(``np.matmul`` / ``torch.bmm`` on the strided 3-D buffers)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm.s_tir import dlight as dl

from schedules.reference import UNIT_ROUNDOFF, fp8_sum_tolerance, output_tolerance
from schedules.workloads import SCALE_BLOCK

from .measure import bench_cpu


class Unavailable(RuntimeError):
    """A baseline this machine cannot run (a missing optional package): not a failure."""


def _torch():
    try:
        import torch  # optional: the torch baselines say "unavailable" without it
    except ImportError:
        raise Unavailable("torch is not installed") from None
    return torch


def dlight_module(workload, target):
    mod = tvm.IRModule({"main": workload.prim_func()})
    with target:
        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                       dl.gpu.Fallback())(mod)


def run_cpu_baseline(name, workload, inputs):
    """(output, Timing) of a CPU library baseline. They are timed on float32 workloads only (NumPy
    has no bfloat16 product, and its float16 one is an emulation nobody would call), without an
    epilogue or another output type."""
    if workload.dtype != "float32":
        raise Unavailable(f"{name} is timed on float32 workloads only, not {workload.dtype}")
    if getattr(workload, "has_epilogue", False):
        raise Unavailable(f"{name} is timed on plain products only, not {workload}")
    a, b = inputs
    out_shape = workload.arg_shapes()[-1][0]
    if name == "numpy_cpu":
        a = a.T if workload.kind == "gemv_t" else a
        if workload.kind == "gemm":
            a, b = workload.operands(a, b)  # transposed views of the stored operands
        out = np.empty(out_shape, dtype=np.float32)
        fn = lambda: np.matmul(a, b, out=out)  # noqa: E731
    elif name == "torch_cpu":
        torch = _torch()
        at, bt = (torch.from_numpy(x) for x in inputs)
        at = at.t() if workload.kind == "gemv_t" else at
        if workload.kind == "gemm":
            at, bt = workload.operands(at, bt)
        out_t = torch.empty(out_shape, dtype=torch.float32)
        fn = (lambda: torch.matmul(at, bt, out=out_t)) if workload.kind == "gemm" else \
             (lambda: torch.mv(at, bt, out=out_t))
        out = out_t.numpy()
    else:
        raise ValueError(f"unknown CPU baseline {name!r}")
    fn()
    result = out.copy()
    return result, bench_cpu(fn)


def cublas_tolerance(workload, tf32: bool = False) -> float:
    """What cuBLAS's own result is checked to: its tf32 mode rounds the inputs to 10 mantissa bits;
    8-bit inputs are summed as the FP8 kernels sum them (fast accumulation,
    :func:`schedules.reference.fp8_sum_tolerance`); a 16-bit output adds its rounding
    (:func:`schedules.reference.output_tolerance`)."""
    if getattr(workload, "fp8", False):
        return output_tolerance(workload, fp8_sum_tolerance(workload.K, 128 if workload.scaling == "block" else None))
    return output_tolerance(workload, 2e-3 if tf32 else 1e-4)


# --- epilogues ---------------------------------------------------------------------------------
FUSED_ACTIVATIONS = {None: None, "relu": False, "gelu_tanh": True}  # activation → _addmm_activation's use_gelu


def fused_library_call(workload) -> str | None:
    """The PyTorch call that reaches cuBLASLt's fused epilogue for ``workload``, or None where there
    is none: a 2-D product (no batch) with a bias, no residual, an activation of ReLU, the tanh
    GELU or none, and the output in the input type (what ``addmm`` returns)."""
    ep = getattr(workload, "epilogue", None)
    if (workload.kind != "gemm" or workload.batched or ep is None or not ep.bias or ep.residual
            or ep.activation not in FUSED_ACTIVATIONS or workload.out_dtype != workload.dtype):
        return None
    if ep.activation is None:
        return "torch.addmm(bias, a, b)"
    return f"torch._addmm_activation(bias, a, b, use_gelu={FUSED_ACTIVATIONS[ep.activation]})"


def gpu_baselines(workload) -> list[str]:
    """The library rows a workload gets on the GPU: cuBLAS of its types; for block-scaled 8-bit
    inputs, also the dequantize-then-bf16 product (:func:`dequant_call`); for an epilogue, also
    cuBLASLt's fused epilogue where it has one and the eager unfused sequence."""
    names = ["cublas"]
    if getattr(workload, "scaling", None) == "block":
        names.append("dequant_bf16_cublas")
    if fused_library_call(workload) is not None:
        names.append("cublaslt_fused")
    if getattr(workload, "epilogue", None) is not None:
        names.append("torch_eager")
    return names


def eager_ops(workload) -> list[str]:
    """The kernels eager PyTorch runs after the product, in order (each rounds to the output type)."""
    ep = workload.epilogue
    if ep is None:
        return []
    return ((["mul_(alpha)"] if ep.alpha != 1.0 else []) + (["add_(bias)"] if ep.bias else [])
            + ([f"{ep.activation}_"] if ep.activation else []) + (["add_(R, alpha=beta)"] if ep.residual else []))


def eager_tolerance(workload) -> float:
    """What the eager sequence is checked to: cuBLAS's bound, plus one rounding to the output type
    per kernel after the product (each moves an intermediate by at most u of itself; the
    intermediates are within 2× the output's norm and a later activation amplifies a change by at
    most 1.13, GELU's steepest slope: 2.5·u per kernel)."""
    u = UNIT_ROUNDOFF[workload.out_dtype]
    return cublas_tolerance(workload) + 2.5 * u * len(eager_ops(workload))


def product_into_call(torch, mm, a, b, out):
    """``(fn, how)``: a closure writing the product into ``out`` in ``out``'s type, and how: directly
    where the types agree, through ``out_dtype`` (cublasGemmEx with another C type) where torch has
    it, else computed in the input type and converted. The way is found once, here (a torch without
    ``out_dtype`` fails the try once), so that a timed call runs only the way that works."""
    if a.dtype == out.dtype:
        return (lambda: mm(a, b, out=out)), "same types"
    try:
        mm(a, b, out_dtype=out.dtype, out=out)
        return (lambda: mm(a, b, out_dtype=out.dtype, out=out)), "out_dtype"
    except (TypeError, RuntimeError):
        return (lambda: out.copy_(mm(a, b))), "converted"


def epilogue_call(torch, workload, inputs, out, name: str):
    """``(fn, description)`` of an epilogue baseline on tensors of any device: ``cublaslt_fused``
    (one addmm / _addmm_activation call) or ``torch_eager`` (the product, then one in-place kernel per
    epilogue operation, in the output type). On CPU tensors PyTorch's GELU of ``_addmm_activation`` is
    the erf form; on CUDA, cuBLASLt's tanh form."""
    a, b = workload.operands(*inputs[:2])
    rest = list(inputs[getattr(workload, "operand_count", 2):])  # after A, B and the scales of 8-bit inputs
    bias = rest.pop(0) if workload.bias else None
    res = rest.pop(0) if workload.residual else None
    ep = workload.epilogue
    if name == "cublaslt_fused":
        call = fused_library_call(workload)
        if call is None:
            raise Unavailable(f"cuBLASLt has no fused epilogue for {workload} through PyTorch")
        if ep.activation is None:
            return (lambda: torch.addmm(bias, a, b, alpha=ep.alpha, out=out)), call
        use_gelu = FUSED_ACTIVATIONS[ep.activation]
        return (lambda: torch._addmm_activation(bias, a, b, alpha=ep.alpha, use_gelu=use_gelu, out=out)), call
    if name != "torch_eager":
        raise ValueError(f"unknown epilogue baseline {name!r}")
    if ep is None:
        raise Unavailable(f"{workload} has no epilogue: its eager sequence is the product (cublas)")
    mm = torch.bmm if workload.batched else torch.mm
    act = {"relu": torch.relu_, "gelu_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
           "gelu_erf": lambda x: torch.ops.aten.gelu_(x), "silu": lambda x: torch.nn.functional.silu(x, inplace=True)}

    fp8 = getattr(workload, "fp8", False)
    if fp8:  # the product: torch._scaled_mm with the scales, as the cublas row calls it
        product, _ = scaled_mm_call(torch, workload.product_only(), inputs[:4], out)
    else:
        product, _ = product_into_call(torch, mm, a, b, out)

    def run():
        product()
        if ep.alpha != 1.0:
            out.mul_(ep.alpha)
        if bias is not None:
            out.add_(bias)
        if ep.activation:
            act[ep.activation](out)
        if res is not None:
            out.add_(res, alpha=ep.beta)

    first = "torch._scaled_mm" if fp8 else "torch.bmm" if workload.batched else "torch.mm"
    return run, "eager: " + ", ".join([first] + eager_ops(workload))


def dequant_tolerance(workload) -> float:
    """What the dequantize-then-bf16 product is checked to: its operands are the dequantized inputs
    rounded to bfloat16, each element within u = 2^-8 of itself, uniformly for the check's random
    inputs (an RMS of u/√3 an operand, about 0.82·u for their product's elements): 2u, with cuBLAS's
    fp32 sum's 1e-4, then the output's rounding (:func:`schedules.reference.output_tolerance`)."""
    return output_tolerance(workload, 2 * UNIT_ROUNDOFF["bfloat16"] + 1e-4)


def dequant_call(torch, workload, inputs, out):
    """``(fn, description)`` for block-scaled 8-bit inputs: what runs without an FP8 GEMM. A and B
    are dequantized into bfloat16 buffers (each 1×128 piece of A times its scale, each 128×128
    block of B times its, in float32, then rounded), then cuBLAS's bf16 GEMM writes the output; the
    dequantization is timed with the product, and reads the scales of each check."""
    if torch is None:
        raise Unavailable("dequant_bf16_cublas needs torch with CUDA")
    if getattr(workload, "scaling", None) != "block":
        raise Unavailable(f"the dequantize-then-bf16 baseline is for block-scaled 8-bit inputs, not {workload}")
    a8, b8, sa, sb = inputs[:4]
    M, N, K = workload.M, workload.N, workload.K
    kb, block = sa.shape[1], SCALE_BLOCK
    a16, b16 = (torch.empty((R, K), dtype=torch.bfloat16, device=a8.device) for R in (M, N))

    def dequant(x, scale, dst):  # scale: one row per row of x, one column per 128 of K
        if K % block == 0:  # the scales broadcast over each 128 of a row: no expanded copy
            full = x.view(x.shape[0], kb, block).to(torch.float32) * scale.view(x.shape[0], kb, 1)
        else:
            full = x.to(torch.float32) * scale.repeat_interleave(block, 1)[:, :K]
        dst.copy_(full.view(x.shape[0], K))

    product, how = product_into_call(torch, torch.mm, a16, b16.t(), out)

    def run():
        dequant(a8, sa, a16)
        dequant(b8, sb.repeat_interleave(block, 0)[:N], b16)  # a row of B's block scales per 128 rows
        product()

    alone = " (the product alone: no epilogue)" if workload.epilogue is not None else ""
    return run, (f"A and B dequantized with their block scales into bfloat16 (float32 products), then "
                 f"torch.mm bfloat16 → {out.dtype} ({how}){alone}")


def cublas_call(harness, workload, inputs, out, tf32: bool = False):
    """``(fn, description)``: a closure running cuBLAS (through torch) on the device buffers, with
    the workload's input type and output type (fp32 by default, also for fp16/bf16 inputs:
    cuBLAS's mixed-precision GEMM, as the lab's kernels compute; a 16-bit output where the workload
    names one), and what it calls. An epilogue is not applied: the product alone."""
    torch = harness.torch
    if torch is None:
        raise Unavailable("the cuBLAS baseline needs torch with CUDA")
    if getattr(workload, "fp8", False):
        if tf32:
            raise Unavailable("cuBLAS's TF32 mode is for float32 inputs")
        return scaled_mm_call(torch, workload, inputs, out)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = inputs[:2]
    if tf32 and workload.dtype != "float32":
        raise Unavailable("cuBLAS's TF32 mode is for float32 inputs")
    mode = " (TF32)" if tf32 else ""
    if workload.kind == "gemv_t":
        a = a.t()  # a column-major view: cuBLAS runs its transposed product on the same bytes
    if workload.kind != "gemm":  # GEMV as an (M x N)·(N x 1) product into a view of y
        b, out = b.unsqueeze(1), out.unsqueeze(1)
    layout = ""
    if workload.kind == "gemm":
        # a transposed operand as a transposed view of its buffer (made here, outside the timed
        # closure; no copy): cuBLAS reads the strides and runs its transposed product (op = T)
        a, b = workload.operands(a, b)
        layout = "" if workload.layout == "nn" else f", {workload.layout} (transposed views)"
    batched = getattr(workload, "batched", False)
    mm, mm_name = (torch.bmm, "torch.bmm") if batched else (torch.mm, "torch.mm")
    alone = " (the product alone: no epilogue)" if getattr(workload, "epilogue", None) is not None else ""
    if a.dtype == out.dtype:
        return (lambda: mm(a, b, out=out)), f"{mm_name}, {a.dtype} → {out.dtype}{mode}{layout}{alone}"
    try:  # fp16/bf16 inputs, fp32 output: torch ≥ 2.8's out_dtype (cublasGemmEx with an fp32 C)
        mm(a, b, out_dtype=out.dtype, out=out)
        return (lambda: mm(a, b, out_dtype=out.dtype, out=out)), \
            f"{mm_name}(out_dtype={out.dtype}), {a.dtype} → {out.dtype}{layout}{alone}"
    except (TypeError, RuntimeError):
        return (lambda: out.copy_(mm(a, b))), \
            f"{mm_name} {a.dtype} → {a.dtype}, converted to {out.dtype}{layout}{alone}"


def scaled_mm_call(torch, workload, inputs, out):
    """``(fn, description)`` for 8-bit float inputs: ``torch._scaled_mm`` (cuBLASLt's FP8 GEMM) on A
    (M×K, row-major) and B stored N×K passed as its K×N column-major view, with the workload's
    scale tensors (per tensor: shape (1,); per row: (M, 1) and (1, N); per block: (M, ⌈K/128⌉) and
    B's (⌈N/128⌉, ⌈K/128⌉), also tried as the (⌈K/128⌉, ⌈N/128⌉) view and with scale_a copied
    column-major, the layouts cuBLASLt's block scaling may ask for; a copy is made inside the call,
    so that it reads the values of each check) and output type, into the output buffer, the product
    alone (no epilogue). Where ⌈K/128⌉ is not a multiple of 4, first ``torch._scaled_mm_v2`` with the
    recipes named (1×128 and 128×128 blocks) and B's scales copied into rows padded to a multiple of 4:
    cuBLASLt reads them with that pitch, and torch._scaled_mm takes only the unpadded shape (its output
    failed the float64 check at K 2304 and 768 on an H200). Fast accumulation (``use_fast_accum=True``:
    the partial sums stay in the tensor cores' accumulator, as fp8_tma_gemm keeps them) where cuBLASLt
    takes it with these scales, else its default."""
    a, b = workload.operands(*inputs[:2])
    sa, sb = inputs[2], inputs[3]
    alone = " (the product alone: no epilogue)" if workload.epilogue is not None else ""

    def v1(x, y, fast, **into):
        return torch._scaled_mm(a, b, scale_a=x, scale_b=y, out_dtype=out.dtype, use_fast_accum=fast, **into)

    calls = [(v1, "torch._scaled_mm", lambda: (sa, sb), "")]
    if workload.scaling == "block":
        col = torch.empty_strided(tuple(sa.shape), (1, sa.shape[0]), dtype=sa.dtype, device=sa.device)

        def col_major():
            col.copy_(sa)
            return col

        calls += [(v1, "torch._scaled_mm", prep, how) for prep, how in (
            (lambda: (sa, sb.t()), ", scale_b as its K×N-block view"),
            (lambda: (col_major(), sb), ", scale_a copied column-major"),
            (lambda: (col_major(), sb.t()), ", scale_a copied column-major, scale_b as its K×N-block view"))]
        kb = sb.shape[1]
        recipes = getattr(getattr(torch, "nn", None), "functional", None)
        recipes = getattr(recipes, "ScalingType", None)
        if kb % 4 and recipes is not None and hasattr(torch, "_scaled_mm_v2"):
            padded = torch.zeros((sb.shape[0], kb + -kb % 4), dtype=sb.dtype, device=sb.device)

            def pad_b():
                padded[:, :kb].copy_(sb)
                return padded.t()

            rec = [recipes.BlockWise1x128.value], [recipes.BlockWise128x128.value]

            def v2(x, y, fast, **into):
                return torch._scaled_mm_v2(a, b, [x], rec[0], [], [y], rec[1], [], None, out.dtype, (), fast, **into)

            calls.insert(0, (v2, "torch._scaled_mm_v2", lambda: (col_major(), pad_b()),
                             ", 1×128 and 128×128 recipes, scale_a copied column-major, scale_b copied with its K "
                             "blocks padded to a multiple of 4"))
    errors = []
    for fast in (True, False):
        for call, name, prep, how in calls:
            what = (f"{name}({workload.scaling} scales{how}, use_fast_accum={fast}), {a.dtype} x {b.dtype} "
                    f"→ {out.dtype}, {workload.layout}{alone}")

            def into(call=call, prep=prep, fast=fast):
                return call(*prep(), fast, out=out)

            def copied(call=call, prep=prep, fast=fast):
                return out.copy_(call(*prep(), fast))

            for fn, extra in ((into, ""), (copied, ", copied into the output")):
                try:
                    fn()
                    return fn, what + extra
                except (TypeError, ValueError, RuntimeError, NotImplementedError) as e:  # torch: not these scales
                    errors.append(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    raise Unavailable(f"torch._scaled_mm does not take {workload}: {errors[0][:200]}")
