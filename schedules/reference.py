"""What a workload computes, in float64: the reference every check of the lab compares with (the
measurement engine's check of each kernel, the tuner's check of its best), and the error those
checks bound. Pure computation on host arrays or torch tensors; no I/O.

A GEMM with an epilogue (:class:`schedules.workloads.Epilogue`) is checked against the same
epilogue applied in float64 to the float64 product: ``act(alpha·(A·B) + bias) + beta·R`` with each
activation computed exactly (GELU's erf form with erf, its tanh form by its formula, SiLU as
x·sigmoid(x)), then rounded to the output type last, as an exact kernel would store it.

An FP8 product (8-bit float inputs) is checked against the float64 product of its dequantized
inputs, the 8-bit values read exactly as the numbers they are, scaled by scale_a·scale_b (per tensor,
or per row of A and column of the product, broadcast as torch._scaled_mm's shapes broadcast) before
the epilogue; its bound is :func:`fp8_sum_tolerance`."""

from __future__ import annotations

import math

import numpy as np

FP8_SUM_BITS = 13  # fraction bits kept where the FP8 tensor cores add a wgmma's products (fp8_sum_tolerance)
LONG_SUM = 16384  # sums longer than this are checked relative to ‖|A|·|B|‖ (see product_error)
# the unit roundoff u of each output type: round-to-nearest with p significand bits (the implicit
# one included) moves a value by at most u = 2^-p of itself
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float64": 2.0 ** -53}


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _f64(x):
    return x.double() if _is_torch(x) else np.asarray(x, dtype=np.float64)


def reference(workload, inputs):
    """The float64 output of ``workload`` on ``inputs`` (numpy arrays or torch tensors, computed
    where they are), as stored: a GEMM's operands are read through its layout (op(A)·op(B), a
    transposed operand as a view of the stored one), a batch of products (bmm) as one batched
    product; a GEMM's epilogue applied after it (:func:`apply_epilogue`: its extra inputs, bias
    then R, follow A and B in ``inputs``) and the result rounded to its output type."""
    scaling = getattr(workload, "scaling", None)
    if scaling == "block":
        prod = _scaled_product(workload, *(_f64(x) for x in inputs[:4]))
    else:
        prod = _product(workload, *(_f64(x) for x in inputs[:2]))
    if not getattr(workload, "has_epilogue", False):
        return prod
    if scaling in ("tensor", "row"):
        prod = prod * (_f64(inputs[2]) * _f64(inputs[3]))
    bias, res = epilogue_inputs(workload, inputs)
    return apply_epilogue(workload, prod, bias, res)


def _product(workload, a, b):
    """op(A)·op(B) of float64 stored operands (A read transposed for a transposed GEMV)."""
    if workload.kind == "gemv_t":
        a = a.t() if _is_torch(a) else a.T
    elif workload.kind == "gemm":
        a, b = workload.operands(a, b)
    return a @ b


def _scaled_product(workload, a, b, sa, sb):
    """Σ over K blocks of scale_a·scale_b·(op(A)·op(B) over the block) (block scaling, float64):
    op(A) with each 1×128 piece multiplied by its scale, op(B) with each 128×128 block by its, then
    one product (each scaled operand is exact in float64: 4 + 24 significant bits)."""
    a, b = workload.operands(a, b)
    K, N, bk = workload.K, workload.N, 128
    if _is_torch(a):
        sa_k = sa.repeat_interleave(bk, dim=1)[:, :K]  # (M, K)
        sb_kn = sb.repeat_interleave(bk, dim=0)[:N].repeat_interleave(bk, dim=1)[:, :K].t()  # (K, N)
    else:
        sa_k = np.repeat(sa, bk, axis=1)[:, :K]
        sb_kn = np.repeat(np.repeat(sb, bk, axis=0)[:N], bk, axis=1)[:, :K].T
    return (a * sa_k) @ (b * sb_kn)


def epilogue_inputs(workload, inputs):
    """(bias, R) from a GEMM's inputs ``[A, B, scale_a?, scale_b?, bias?, R?]`` (None for the ones it
    has not), in float64."""
    rest = list(inputs[getattr(workload, "operand_count", 2):])
    bias = _f64(rest.pop(0)) if workload.bias else None
    res = _f64(rest.pop(0)) if workload.residual else None
    return bias, res


def activation(name: str | None, x):
    """An activation of float64 ``x`` (numpy or torch), computed exactly: ReLU max(x, 0); GELU erf
    x·Φ(x) = 0.5·x·(1 + erf(x/√2)); GELU tanh 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); SiLU
    x·sigmoid(x) = x / (1 + e^−x)."""
    if name is None:
        return x
    torch = _is_torch(x)
    if torch:
        import torch as T

        erf, tanh, exp = T.erf, T.tanh, T.exp
    else:
        erf, tanh, exp = _erf_array, np.tanh, np.exp
    if name == "relu":
        return x.clamp(min=0) if torch else np.maximum(x, 0.0)
    if name == "gelu_erf":
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if name == "silu":
        return x / (1.0 + exp(-x))
    raise ValueError(f"unknown activation {name!r}")


def _erf_array(x):
    """erf of a float64 array: torch's (on the CPU) where torch is installed, else math.erf element
    by element (NumPy has none)."""
    try:
        import torch  # optional: a vectorized float64 erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return torch.erf(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))).numpy()


def apply_epilogue(workload, prod, bias=None, residual=None, rounded: bool = True):
    """``act(alpha·prod + bias) + beta·R`` in float64 on the product ``prod`` (any shape that
    ``bias`` broadcasts against along its last axis: a whole output, or sampled outputs with the
    bias sampled at their columns), then, with ``rounded``, rounded to the workload's output type."""
    ep = workload.epilogue
    x = prod
    if ep is not None:
        if ep.alpha != 1.0:
            x = x * ep.alpha
        if ep.bias:
            x = x + bias
        x = activation(ep.activation, x)
        if ep.residual:
            x = x + ep.beta * residual
    return round_to(x, workload.out_dtype) if rounded else x


def round_to(x, dtype: str):
    """float64 ``x`` rounded to ``dtype`` (float32, float16, bfloat16) and widened back to float64:
    torch's types on torch tensors, NumPy's and ml_dtypes' (bfloat16) on arrays."""
    if dtype == "float64":
        return x
    if _is_torch(x):
        import torch

        return x.to(getattr(torch, dtype)).double()
    if dtype == "bfloat16":
        import ml_dtypes  # optional: bfloat16 host arrays only

        return np.asarray(x, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float64)
    return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def output_tolerance(workload, tolerance: float) -> float:
    """The check's bound for an output rounded to a narrower type than the sum: ``tolerance`` is what
    the float32 result D̃ may differ from the exact D (‖D̃ − D‖ ≤ t·‖D‖), and both the kernel's output
    and the reference are then rounded to the output type, each element by at most u of itself
    (:data:`UNIT_ROUNDOFF`). So ‖round(D̃) − round(D)‖ ≤ ‖round(D̃) − D̃‖ + ‖D̃ − D‖ + ‖D − round(D)‖ ≤
    u·‖D̃‖ + t·‖D‖ + u·‖D‖ ≤ (t·(1 + u) + 2u)·‖D‖: the bound returned (bfloat16, u = 2^-8: 7.9e-3 above
    t; float16, u = 2^-11: 9.8e-4). A float32 output keeps ``tolerance``."""
    out = getattr(workload, "out_dtype", "float32")
    if out == "float32":
        return tolerance
    u = UNIT_ROUNDOFF[out]
    return tolerance * (1.0 + u) + 2.0 * u


def fp8_sum_tolerance(K: int, promoted: int | None = None) -> float:
    """The ‖out − ref‖/‖ref‖ bound of an FP8 product's fp32 result (before any output rounding),
    from how Hopper's FP8 tensor cores add: each wgmma (k32) aligns its 32 products and the running
    sum to the largest exponent among them and keeps about 13-14 fraction bits (DeepSeek-V3's report,
    §3.3.2, measured ≈14 bits on H800), so every product added loses up to u = 2^-13 of the running
    sum's magnitude, not of its own. With random signs these losses add like a random walk: after k
    products the sum is √k·σ in size, so the K losses add up to u·σ·√(Σk) ≈ u·σ·K/√2 (rms, the loss of
    each being at most u·|sum|, rms u/√3 of it), against a result √K·σ: u·√K/√6 relative. The bound
    is u·√K (2.4× that) plus fp32's own 1e-5 (the scales' products, the epilogue): K = 4096, 7.8e-3;
    K = 8192, 1.1e-2. The products themselves are exact (3 + 3 mantissa bits); a 16-bit output adds
    its rounding (:func:`output_tolerance`).

    ``promoted``: the partial sums leave the tensor cores every ``promoted`` of K and are added in
    fp32 registers (block scaling, 128): each block's loss is u·σ·128/√6, the K/128 of them add like
    a random walk to u·σ·√(128·K)/√6 against √K·σ: the bound u·√128 (+ 1e-5) whatever K, 1.4e-3."""
    return 2.0 ** -FP8_SUM_BITS * math.sqrt(min(K, promoted or K)) + 1e-5


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


def _abs(x):
    if _is_torch(x):  # 8-bit floats have no abs or product in torch: in float64 (other types keep theirs)
        return x.double().abs() if x.element_size() == 1 else x.abs()
    return np.abs(_f64(x))


def product_error(workload, out, inputs, ref=None) -> float:
    """The error the checks bound: ‖out − ref‖ / ‖ref‖ against float64. For a single output, or
    sums longer than 16384 terms, ‖ref‖ can be small through cancellation (one y of a sum of ±
    products) while the rounding of the sum grows like √K, so there the error is taken relative to
    ‖|A|·|B|‖, the size of the products being added (the usual backward-error scale; with an
    epilogue, ‖|alpha|·|A|·|B| + |bias|‖ + |beta|·‖R‖, the size of what it adds). NaN when any
    output is not finite (never written). Works on numpy arrays and on torch tensors (on the GPU)."""
    if count_not_finite(out):
        return float("nan")
    ref = reference(workload, inputs) if ref is None else ref
    out64 = _f64(out)
    sum_length = workload.K if workload.kind == "gemm" else (
        inputs[0].shape[0] if workload.kind == "gemv_t" else inputs[0].shape[-1])
    diff = _norm(out64 - ref)
    outputs = ref.numel() if _is_torch(ref) else ref.size
    if outputs > 1 and sum_length <= LONG_SUM:
        return diff / max(_norm(ref), np.finfo(float).tiny)
    if getattr(workload, "scaling", None) == "block":
        scale = _scaled_product(workload, *(_abs(x) for x in inputs[:4]))
    else:
        scale = _product(workload, *(_abs(x) for x in inputs[:2]))
    if getattr(workload, "scaling", None) in ("tensor", "row"):  # |scale_a|·|scale_b|·|A|·|B|: the products' size
        scale = scale * (_abs(inputs[2]) * _abs(inputs[3]))
    if getattr(workload, "epilogue", None) is not None:
        ep = workload.epilogue
        bias, res = epilogue_inputs(workload, inputs)
        scale = abs(ep.alpha) * scale + (_abs(bias) if bias is not None else 0.0)
        extra = abs(ep.beta) * _norm(res) if res is not None else 0.0
        return diff / max(_norm(scale) + extra, np.finfo(float).tiny)
    return diff / max(_norm(scale), np.finfo(float).tiny)
