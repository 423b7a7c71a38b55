"""What a workload computes, in float64: the reference every check of the lab compares with (the
measurement engine's check of each kernel, the tuner's check of its best), and the error those
checks bound. Pure computation on host arrays or torch tensors; no I/O."""

from __future__ import annotations

import numpy as np

LONG_SUM = 16384  # sums longer than this are checked relative to ‖|A|·|B|‖ (see product_error)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def reference(workload, inputs):
    """The float64 product of ``inputs`` (numpy arrays or torch tensors, computed where they are),
    as stored: a GEMM's operands are read through its layout (op(A)·op(B), a transposed operand
    as a view of the stored one), a batch of products (bmm) as one batched product."""
    a, b = (x.double() if _is_torch(x) else np.asarray(x, dtype=np.float64) for x in inputs)
    if workload.kind == "gemv_t":
        a = a.t() if _is_torch(a) else a.T
    elif workload.kind == "gemm":
        a, b = workload.operands(a, b)
    return a @ b


def _norm(x) -> float:
    if _is_torch(x):
        import torch

        return float(torch.linalg.vector_norm(x))
    return float(np.linalg.norm(x))


def count_not_finite(out) -> int:
    if _is_torch(out):
        import torch

        return int((~torch.isfinite(out)).sum())
    return int((~np.isfinite(np.asarray(out, dtype=np.float64))).sum())


def product_error(workload, out, inputs, ref=None) -> float:
    """The error the checks bound: ‖out − ref‖ / ‖ref‖ against float64. For a single output, or
    sums longer than 16384 terms, ‖ref‖ can be small through cancellation (one y of a sum of ±
    products) while the rounding of the sum grows like √K, so there the error is taken relative to
    ‖|A|·|B|‖, the size of the products being added (the usual backward-error scale). NaN when any
    output is not finite (never written). Works on numpy arrays and on torch tensors (on the GPU)."""
    if count_not_finite(out):
        return float("nan")
    ref = reference(workload, inputs) if ref is None else ref
    out64 = out.double() if _is_torch(out) else np.asarray(out, dtype=np.float64)
    sum_length = workload.K if workload.kind == "gemm" else (
        inputs[0].shape[0] if workload.kind == "gemv_t" else inputs[0].shape[-1])
    diff = _norm(out64 - ref)
    outputs = ref.numel() if _is_torch(ref) else ref.size
    if outputs > 1 and sum_length <= LONG_SUM:
        return diff / max(_norm(ref), np.finfo(float).tiny)
    scale = reference(workload, [x.abs() if _is_torch(x) else np.abs(np.asarray(x, dtype=np.float64))
                                 for x in inputs])
    return diff / max(_norm(scale), np.finfo(float).tiny)
