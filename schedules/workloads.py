"""Workloads: what is computed (TE definitions), independent of how it is scheduled.

A workload string names a kind and its sizes: ``gemm:MxNxK`` (C = A·B, A is M×K and B is K×N,
row-major, fp32), ``gemv:MxN`` (y = A·x, A is M×N row-major, fp32) or ``gemv_t:MxN`` (y = Aᵀ·x, the
same A read column-wise: x has M entries, y has N). A ``:float16`` or ``:bfloat16`` suffix makes the
inputs 16-bit; the sum and the output stay float32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm import te

from .errors import ScheduleParamError


@dataclass(frozen=True)
class Gemm:
    M: int
    N: int
    K: int
    dtype: str = "float32"
    acc_dtype: str = "float32"

    kind = "gemm"

    def __post_init__(self):
        for name in ("M", "N", "K"):
            _check_positive(f"gemm {name}", getattr(self, name))

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def min_bytes(self) -> int:
        """Fewest bytes through device memory: each input read once, the output written once."""
        ib = _itemsize(self.dtype)
        return ib * (self.M * self.K + self.K * self.N) + _itemsize(self.acc_dtype) * self.M * self.N

    def prim_func(self):
        A = te.placeholder((self.M, self.K), self.dtype, name="A")
        B = te.placeholder((self.K, self.N), self.dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        if self.dtype == self.acc_dtype:
            body = lambda i, j: te.sum(A[i, k] * B[k, j], axis=k)  # noqa: E731
        else:
            body = lambda i, j: te.sum(  # noqa: E731
                A[i, k].astype(self.acc_dtype) * B[k, j].astype(self.acc_dtype), axis=k)
        C = te.compute((self.M, self.N), body, name="C")
        return te.create_prim_func([A, B, C]).with_attr("global_symbol", "main")

    def arg_shapes(self):
        return [((self.M, self.K), self.dtype), ((self.K, self.N), self.dtype),
                ((self.M, self.N), self.acc_dtype)]

    def __str__(self):
        suffix = "" if self.dtype == "float32" else f":{self.dtype}"
        return f"gemm:{self.shape}{suffix}"


@dataclass(frozen=True)
class Gemv:
    M: int
    N: int
    dtype: str = "float32"
    acc_dtype: str = "float32"

    kind = "gemv"

    def __post_init__(self):
        _check_positive("gemv M", self.M)
        _check_positive("gemv N", self.N)

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N

    @property
    def min_bytes(self) -> int:
        return _itemsize(self.dtype) * (self.M * self.N + self.N) + _itemsize(self.acc_dtype) * self.M

    def prim_func(self):
        A = te.placeholder((self.M, self.N), self.dtype, name="A")
        x = te.placeholder((self.N,), self.dtype, name="x")
        k = te.reduce_axis((0, self.N), name="k")
        if self.dtype == self.acc_dtype:
            body = lambda i: te.sum(A[i, k] * x[k], axis=k)  # noqa: E731
        else:
            body = lambda i: te.sum(  # noqa: E731
                A[i, k].astype(self.acc_dtype) * x[k].astype(self.acc_dtype), axis=k)
        y = te.compute((self.M,), body, name="y")
        return te.create_prim_func([A, x, y]).with_attr("global_symbol", "main")

    def arg_shapes(self):
        return [((self.M, self.N), self.dtype), ((self.N,), self.dtype), ((self.M,), self.acc_dtype)]

    def __str__(self):
        suffix = "" if self.dtype == "float32" else f":{self.dtype}"
        return f"{self.kind}:{self.shape}{suffix}"


@dataclass(frozen=True)
class GemvT(Gemv):
    """y = Aᵀ·x with A M×N row-major: y[j] = Σ_i A[i, j]·x[i] (x has M entries, y has N)."""

    kind = "gemv_t"

    @property
    def min_bytes(self) -> int:
        return _itemsize(self.dtype) * (self.M * self.N + self.M) + _itemsize(self.acc_dtype) * self.N

    def prim_func(self):
        A = te.placeholder((self.M, self.N), self.dtype, name="A")
        x = te.placeholder((self.M,), self.dtype, name="x")
        i = te.reduce_axis((0, self.M), name="i")
        if self.dtype == self.acc_dtype:
            body = lambda j: te.sum(A[i, j] * x[i], axis=i)  # noqa: E731
        else:
            body = lambda j: te.sum(  # noqa: E731
                A[i, j].astype(self.acc_dtype) * x[i].astype(self.acc_dtype), axis=i)
        y = te.compute((self.N,), body, name="y")
        return te.create_prim_func([A, x, y]).with_attr("global_symbol", "main")

    def arg_shapes(self):
        return [((self.M, self.N), self.dtype), ((self.M,), self.dtype), ((self.N,), self.acc_dtype)]


Workload = Gemm | Gemv | GemvT

_DTYPES = ("float32", "float16", "bfloat16")


def parse_workload(text: str) -> Workload:
    """``gemm:1024x512x2048``, ``gemv:16384x16``, ``gemv_t:16384x16``, optionally ``:float16`` or
    ``:bfloat16`` for 16-bit inputs."""
    m = re.fullmatch(r"\s*(gemm|gemv_t|gemv)\s*:\s*([0-9x×]+)\s*(?::\s*(\w+))?\s*", text or "")
    if not m:
        raise ScheduleParamError(
            f"workload {text!r} is malformed: expected gemm:MxNxK, gemv:MxN or gemv_t:MxN (e.g. gemm:1024x512x2048)")
    kind, dims, dtype = m.group(1), parse_shape(m.group(2), 3 if m.group(1) == "gemm" else 2), m.group(3)
    dtype = dtype or "float32"
    if dtype not in _DTYPES:
        raise ScheduleParamError(f"workload dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    cls = {"gemm": Gemm, "gemv": Gemv, "gemv_t": GemvT}[kind]
    return cls(*dims, dtype=dtype)


def parse_shape(text: str, ndim: int) -> tuple[int, ...]:
    """``"1024x512x2048"`` → (1024, 512, 2048); the count of sizes must be ``ndim``."""
    parts = re.split(r"[x×]", text.strip()) if text else []
    if len(parts) != ndim or not all(re.fullmatch(r"-?\d+", p) for p in parts):
        want = "x".join("MNK"[:ndim])
        raise ScheduleParamError(f"shape {text!r} is malformed: expected {want} with {ndim} whole numbers")
    dims = tuple(int(p) for p in parts)
    for name, v in zip("MNK", dims):
        _check_positive(f"shape {name}", v)
    return dims


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ScheduleParamError(f"{name} must be a positive whole number, got {value!r}")


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[dtype]
