"""Library baselines timed in the same harness as the schedules: NumPy and PyTorch on the CPU,
cuBLAS through PyTorch on CUDA (one call per workload kind, input type and output type, the same
types as the lab's kernels), and TVM's own default GPU rules (``s_tir.dlight``).

A GEMM's operand layout reaches the libraries as it reaches the kernels: the stored buffers, a
transposed operand passed as a transposed view (``.T`` / ``.mT``: no copy, the library reads the
strides and runs its own transposed product), and a batch of products (bmm) as one batched call
(``np.matmul`` / ``torch.bmm`` on the strided 3-D buffers)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm.s_tir import dlight as dl

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
    has no bfloat16 product, and its float16 one is an emulation nobody would call)."""
    if workload.dtype != "float32":
        raise Unavailable(f"{name} is timed on float32 workloads only, not {workload.dtype}")
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
    """What cuBLAS's own result is checked to: its tf32 mode rounds the inputs to 10 mantissa bits."""
    return 2e-3 if tf32 else 1e-4


def cublas_call(harness, workload, inputs, out, tf32: bool = False):
    """``(fn, description)``: a closure running cuBLAS (through torch) on the device buffers, with
    the workload's input type and the kernels' output type (fp32, also for fp16/bf16 inputs:
    cuBLAS's mixed-precision GEMM, as the lab's kernels compute), and what it calls."""
    torch = harness.torch
    if torch is None:
        raise Unavailable("the cuBLAS baseline needs torch with CUDA")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = inputs
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
    if a.dtype == out.dtype:
        return (lambda: mm(a, b, out=out)), f"{mm_name}, {a.dtype} → {out.dtype}{mode}{layout}"
    try:  # fp16/bf16 inputs, fp32 output: torch ≥ 2.8's out_dtype (cublasGemmEx with an fp32 C)
        mm(a, b, out_dtype=out.dtype, out=out)
        return (lambda: mm(a, b, out_dtype=out.dtype, out=out)), \
            f"{mm_name}(out_dtype={out.dtype}), {a.dtype} → {out.dtype}{layout}"
    except (TypeError, RuntimeError):
        return (lambda: out.copy_(mm(a, b))), f"{mm_name} {a.dtype} → {a.dtype}, widened to {out.dtype}{layout}"
