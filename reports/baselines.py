"""Baselines timed in the same harness as the schedules: NumPy and PyTorch on the CPU, PyTorch on
CUDA (cuBLAS, TF32 off), and TVM's own default GPU rules (``s_tir.dlight``)."""

from __future__ import annotations

import numpy as np

from .measure import CudaHarness, bench_cpu

BASELINES = {
    "numpy_cpu": "NumPy on the CPU (its BLAS)",
    "torch_cpu": "PyTorch on the CPU",
    "cublas": "PyTorch on CUDA: cuBLAS, TF32 off",
    "tvm_dlight": "TVM's default GPU rules (s_tir.dlight), a fair TVM baseline",
}
GPU_BASELINES = ("cublas", "tvm_dlight")


class Unavailable(RuntimeError):
    """A baseline this machine cannot run (a missing optional package): not a failure."""


def _torch():
    try:
        import torch
    except ImportError:
        raise Unavailable("torch is not installed") from None
    return torch


def dlight_module(workload, target):
    import tvm
    from tvm.s_tir import dlight as dl

    mod = tvm.IRModule({"main": workload.prim_func()})
    with target:
        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                       dl.gpu.Fallback())(mod)


def run_cpu_baseline(name, workload, inputs):
    """Returns (output, Timing) for a CPU library baseline."""
    a, b = inputs
    if workload.kind == "gemv_t":
        a = a.T  # y = Aᵀ·x: the same product on a transposed view
    if name == "numpy_cpu":
        out = np.empty(workload.arg_shapes()[-1][0], dtype=np.float32)
        fn = lambda: np.matmul(a, b, out=out)  # noqa: E731
    elif name == "torch_cpu":
        torch = _torch()

        a, b = (torch.from_numpy(x) for x in inputs)
        if workload.kind == "gemv_t":
            a = a.t()
        out_t = torch.empty(workload.arg_shapes()[-1][0], dtype=torch.float32)
        fn = (lambda: torch.matmul(a, b, out=out_t)) if workload.kind == "gemm" else \
             (lambda: torch.mv(a, b, out=out_t))
        out = out_t.numpy()
    else:
        raise ValueError(f"unknown CPU baseline {name!r}")
    fn()
    result = out.copy()
    return result, bench_cpu(fn)


def cublas_call(harness: CudaHarness, workload, bufs):
    """A closure that runs the cuBLAS product on device buffers ``bufs = [a, b, out]``."""
    torch = harness.torch
    if torch is None:
        raise Unavailable("the cuBLAS baseline needs torch with CUDA")
    a, b, out = bufs
    if workload.kind == "gemm":
        return lambda: torch.matmul(a, b, out=out)
    if workload.kind == "gemv_t":
        a = a.t()  # a column-major view: cuBLAS runs its transposed GEMV on the same bytes
    if a.dtype == out.dtype:
        return lambda: torch.mv(a, b, out=out)
    # fp16 inputs, fp32 output: cuBLAS's mixed GEMM (fp32 accumulate, fp32 result) where torch has
    # it, else the fp16 mv (fp32 accumulate, fp16 result) plus a widening copy
    b2 = b.unsqueeze(1)
    try:
        torch.mm(a, b2, out_dtype=out.dtype)
        return lambda: out.copy_(torch.mm(a, b2, out_dtype=out.dtype).squeeze(1))
    except (TypeError, RuntimeError):
        return lambda: out.copy_(torch.mv(a, b))
