"""Workloads: what is computed (TE definitions), independent of how it is scheduled.

A workload string names a kind and its sizes: ``gemm:MxNxK`` (C = A·B, A is M×K and B is K×N,
row-major, fp32), ``bmm:BxMxNxK`` (a batch of B such products, each operand a row-major 3-D tensor:
the strided batch layout, batch outermost), ``gemv:MxN`` (y = A·x, A is M×N row-major, fp32) or
``gemv_t:MxN`` (y = Aᵀ·x, the same A read column-wise: x has M entries, y has N). A ``:float16`` or
``:bfloat16`` suffix makes the inputs 16-bit; the sum and the output stay float32.

GEMM and BMM take an operand layout last, in the BLAS convention C = op(A)·op(B): ``:nn`` (the
default), ``:nt``, ``:tn`` or ``:tt``, where ``t`` means the operand is stored transposed: A as K×M
row-major, B as N×K row-major (``gemm:4096x4096x4096:float16:nt``, ``gemm:1024x512x2048:tn``). The
compute definition indexes the stored operands, and ``arg_shapes()`` gives the stored shapes. A
string leaves out what is default (fp32, nn, no batch), so ``str(workload)`` reads back through
:func:`parse_workload` to the same workload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm import te

from .errors import ScheduleParamError


LAYOUTS = ("nn", "nt", "tn", "tt")  # BLAS: C = op(A)·op(B); "t": the operand is stored transposed


@dataclass(frozen=True)
class Gemm:
    """C = op(A)·op(B) (``layout``), or a batch of ``batch`` such products (a BMM: operands and
    output with a leading batch dimension; ``batch=None`` is a plain GEMM with 2-D operands)."""

    M: int
    N: int
    K: int
    dtype: str = "float32"
    acc_dtype: str = "float32"
    layout: str = "nn"
    batch: int | None = None

    kind = "gemm"  # the ladder's kind: a BMM is a GEMM with a batch (steps say whether they take one)

    def __post_init__(self):
        for name in ("M", "N", "K"):
            _check_positive(f"gemm {name}", getattr(self, name))
        if self.layout not in LAYOUTS:
            raise ScheduleParamError(f"gemm layout {self.layout!r} is not one of {', '.join(LAYOUTS)} "
                                     f"(C = op(A)·op(B); t: the operand is stored transposed)")
        if self.batch is not None:
            _check_positive("bmm batch", self.batch)

    # the layout -------------------------------------------------------------------------------
    @property
    def trans_a(self) -> bool:
        """A is stored transposed: K×M row-major (M contiguous)."""
        return self.layout[0] == "t"

    @property
    def trans_b(self) -> bool:
        """B is stored transposed: N×K row-major (K contiguous)."""
        return self.layout[1] == "t"

    @property
    def batched(self) -> bool:
        return self.batch is not None

    @property
    def batches(self) -> int:
        """Products computed: the batch, or 1."""
        return self.batch or 1

    @property
    def a_shape(self) -> tuple[int, ...]:
        """A as stored: M×K, or K×M when transposed (with the batch first for a BMM)."""
        return self._batch_dims() + ((self.K, self.M) if self.trans_a else (self.M, self.K))

    @property
    def b_shape(self) -> tuple[int, ...]:
        """B as stored: K×N, or N×K when transposed (with the batch first for a BMM)."""
        return self._batch_dims() + ((self.N, self.K) if self.trans_b else (self.K, self.N))

    @property
    def c_shape(self) -> tuple[int, ...]:
        return self._batch_dims() + (self.M, self.N)

    def _batch_dims(self) -> tuple[int, ...]:
        return (self.batch,) if self.batched else ()

    @property
    def shape(self) -> str:
        return ("" if not self.batched else f"{self.batch}x") + f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.batches * self.M * self.N * self.K

    @property
    def min_bytes(self) -> int:
        """Fewest bytes through device memory: each input read once, the output written once."""
        ib = itemsize(self.dtype)
        return self.batches * (ib * (self.M * self.K + self.K * self.N) + itemsize(self.acc_dtype) * self.M * self.N)

    def prim_func(self):
        A = te.placeholder(self.a_shape, self.dtype, name="A")
        B = te.placeholder(self.b_shape, self.dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        ta, tb, batched = self.trans_a, self.trans_b, self.batched

        def a_at(b, i, k):  # op(A)[i, k], read from A as stored
            idx = (k, i) if ta else (i, k)
            return A[(b, *idx)] if batched else A[idx]

        def b_at(b, k, j):  # op(B)[k, j]
            idx = (j, k) if tb else (k, j)
            return B[(b, *idx)] if batched else B[idx]

        if self.dtype == self.acc_dtype:
            prod = lambda b, i, j: a_at(b, i, k) * b_at(b, k, j)  # noqa: E731
        else:
            prod = lambda b, i, j: a_at(b, i, k).astype(self.acc_dtype) * b_at(b, k, j).astype(self.acc_dtype)  # noqa: E731
        if batched:
            body = lambda b, i, j: te.sum(prod(b, i, j), axis=k)  # noqa: E731
        else:
            body = lambda i, j: te.sum(prod(None, i, j), axis=k)  # noqa: E731
        C = te.compute(self.c_shape, body, name="C")
        return te.create_prim_func([A, B, C]).with_attr("global_symbol", "main")

    def arg_shapes(self):
        """The stored shapes of A, B and C (see :attr:`a_shape`, :attr:`b_shape`)."""
        return [(self.a_shape, self.dtype), (self.b_shape, self.dtype), (self.c_shape, self.acc_dtype)]

    def misaligned_rows(self) -> tuple[bool, bool]:
        """(A, B): whether the operand's stored rows are not a whole number of 16 bytes: no tensor
        map can describe them and no load from them can be 16 bytes wide (the kernels that need
        either copy such an operand into a padded buffer first, ``pad_operands``)."""
        item = itemsize(self.dtype)
        return (self.a_shape[-1] * item) % 16 != 0, (self.b_shape[-1] * item) % 16 != 0

    def operands(self, a, b):
        """op(A), op(B) of stored operands ``a``, ``b`` (numpy arrays or torch tensors): views with
        the last two axes swapped where the layout stores one transposed (no copy)."""
        return (_swap_last(a) if self.trans_a else a), (_swap_last(b) if self.trans_b else b)

    def __str__(self):
        suffix = ("" if self.dtype == "float32" else f":{self.dtype}") + ("" if self.layout == "nn" else f":{self.layout}")
        return f"{'bmm' if self.batched else 'gemm'}:{self.shape}{suffix}"


def _swap_last(x):
    """x with its last two axes swapped, as a view (numpy: swapaxes; torch: transpose)."""
    return x.transpose(-1, -2) if type(x).__module__.startswith("torch") else x.swapaxes(-1, -2)


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
        return itemsize(self.dtype) * (self.M * self.N + self.N) + itemsize(self.acc_dtype) * self.M

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
        return itemsize(self.dtype) * (self.M * self.N + self.M) + itemsize(self.acc_dtype) * self.N

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
    """``gemm:1024x512x2048``, ``bmm:32x512x512x64``, ``gemv:16384x16``, ``gemv_t:16384x16``;
    optionally ``:float16`` or ``:bfloat16`` for 16-bit inputs, and for gemm/bmm an operand layout
    ``:nn`` (default), ``:nt``, ``:tn`` or ``:tt`` after it (``gemm:4096x4096x4096:float16:tn``)."""
    m = re.fullmatch(r"\s*(gemm|bmm|gemv_t|gemv)\s*:\s*([0-9x×-]+)\s*((?::\s*[^:\s]*\s*)*)", text or "")
    if not m:
        raise ScheduleParamError(
            f"workload {text!r} is malformed: expected gemm:MxNxK, bmm:BxMxNxK, gemv:MxN or gemv_t:MxN, then "
            f"optionally :dtype and (gemm, bmm) :layout (e.g. gemm:1024x512x2048:float16:nt)")
    kind = m.group(1)
    dims = parse_shape(m.group(2), {"gemm": 3, "bmm": 4}.get(kind, 2))
    fields = [f.strip() for f in m.group(3).split(":")[1:]]
    dtype, layout = None, None
    for field in fields:
        if field in _DTYPES and dtype is None and layout is None:
            dtype = field
        elif field in LAYOUTS and layout is None:
            layout = field
        elif field in _DTYPES or field in LAYOUTS:
            raise ScheduleParamError(f"workload {text!r}: at most one dtype, then at most one layout "
                                     f"(e.g. gemm:64x64x64:float16:nt)")
        elif re.fullmatch(r"[A-Za-z]{2}", field):
            raise ScheduleParamError(f"workload {text!r}: layout {field!r} is not one of {', '.join(LAYOUTS)}")
        else:
            raise ScheduleParamError(f"workload {text!r}: {field!r} is not a dtype ({', '.join(_DTYPES)}) "
                                     f"or a layout ({', '.join(LAYOUTS)})")
    dtype = dtype or "float32"
    if layout is not None and kind not in ("gemm", "bmm"):
        raise ScheduleParamError(f"workload {text!r}: a layout is for gemm and bmm workloads, not {kind}")
    if kind == "bmm":
        return Gemm(*dims[1:], dtype=dtype, layout=layout or "nn", batch=dims[0])
    if kind == "gemm":
        return Gemm(*dims, dtype=dtype, layout=layout or "nn")
    return {"gemv": Gemv, "gemv_t": GemvT}[kind](*dims, dtype=dtype)


def workload_for(kind: str, text: str, dtype: str = "float32") -> Workload:
    """A workload from a shape given for a step of ``kind`` (``schedlab show --shape``): ``text`` is
    ``MxNxK[:dtype][:layout]`` or a whole workload string (``bmm:32x512x512x64:nt``); where it
    names no input type, ``dtype`` is put in (a tensor-core step's half inputs)."""
    head, _, rest = text.strip().partition(":")
    if head in ("gemm", "bmm", "gemv", "gemv_t"):
        kind, text = head, rest
    fields = text.split(":")
    if dtype != "float32" and not any(f.strip() in _DTYPES for f in fields[1:]):
        fields.insert(1, dtype)
    return parse_workload(f"{kind}:{':'.join(fields)}")


_DIM_NAMES = {2: "MN", 3: "MNK", 4: "BMNK"}


def parse_shape(text: str, ndim: int) -> tuple[int, ...]:
    """``"1024x512x2048"`` → (1024, 512, 2048); the count of sizes must be ``ndim`` (4 for a BMM:
    batch first)."""
    names = _DIM_NAMES.get(ndim, "MNK")
    parts = re.split(r"[x×]", text.strip()) if text else []
    if len(parts) != ndim or not all(re.fullmatch(r"-?\d+", p) for p in parts):
        want = "x".join(names[:ndim])
        raise ScheduleParamError(f"shape {text!r} is malformed: expected {want} with {ndim} whole numbers")
    dims = tuple(int(p) for p in parts)
    for name, v in zip(names, dims):
        _check_positive(f"shape {name}" if name != "B" else "bmm batch", v)
    return dims


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ScheduleParamError(f"{name} must be a positive whole number, got {value!r}")


def itemsize(dtype: str) -> int:
    """Bytes per element of a workload's input or output type."""
    return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[dtype]
