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

A GEMM may also name its output type and an epilogue, the elementwise work a linear layer does after
its product, after the input type and layout: ``:out=bfloat16`` (``float32``, the default,
``float16`` or ``bfloat16``), then the epilogue's words, ``bias`` (a length-N vector added to every
row), an activation (``relu``, ``gelu_tanh``, ``gelu_erf`` or ``gelu``, which is ``gelu_erf`` as in
PyTorch, ``silu``), ``residual`` (a tensor R shaped like the output, added last), ``alpha=X`` (the
product's scale) and ``beta=X`` (R's scale, with ``residual`` only)::

    gemm:2048x8192x1024:bfloat16:nt:out=bfloat16:bias:gelu_tanh
    D = act(alpha·op(A)·op(B) + bias) + beta·R       (in float32, rounded to the output type last)

Bias and R are stored in the output type. A GEMV workload takes neither (write it as a GEMM with one
column: ``gemm:Mx1xK``).

8-bit float inputs (FP8): ``:float8_e4m3fn`` or ``:float8_e5m2`` makes both operands that type; a
mixed pair names B's type after A's, ``:b=TYPE`` (``gemm:4096x4096x4096:float8_e4m3fn:b=float8_e5m2:nt``:
A e4m3, B e5m2; all four pairings are Hopper's). An FP8 product always carries two float32 scales,
applied to the fp32 sum before the epilogue, as ``torch._scaled_mm`` takes them::

    D = act(alpha·(scale_a·scale_b)·(op(A)·op(B)) + bias) + beta·R

``:scale=tensor`` (the default, left out of the string): one scale per operand, kernel arguments of
shape (1,); ``:scale=row``: one per row of A, shape (M, 1), and one per column of the product (per
row of B stored N×K), shape (1, N); ``:scale=block`` (DeepSeek-V3's): one per 1×128 piece of A
along K, shape (M, ⌈K/128⌉), and one per 128×128 block of B (128 columns of the product by 128 of
K), shape (⌈N/128⌉, ⌈K/128⌉), applied inside the sum: C = Σ_kb scale_a[:, kb]·scale_b[·, kb]·(A·B
over K block kb), and D the epilogue of C. The arguments are A, B, scale_a, scale_b, [bias], [R], D, and
the output type (``out=``) is float32 unless named (``out=bfloat16`` is the usual FP8 linear layer).
FP8 tensor cores read both operands K-major: the FP8 steps take the ``nt`` layout.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import tvm
from tvm import te

from .errors import ScheduleParamError


LAYOUTS = ("nn", "nt", "tn", "tt")  # BLAS: C = op(A)·op(B); "t": the operand is stored transposed
ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu")
ACTIVATION_ALIASES = {"gelu": "gelu_erf"}  # PyTorch's default GELU is the erf form
OUT_DTYPES = ("float32", "float16", "bfloat16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")  # 8-bit floats: 4-bit exponent / 3-bit mantissa, 5 / 2
SCALINGS = ("tensor", "row", "block")  # an FP8 product's scales: per operand; per row of A and column of B; per block
SCALE_BLOCK = 128  # block scaling: 1×128 pieces of A, 128×128 blocks of B (along K, and N)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # the tanh form of GELU: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
GELU_TANH_CUBIC = 0.044715


@dataclass(frozen=True)
class Epilogue:
    """What a GEMM does to its product before the single write of its output:
    ``D = act(alpha·(A·B) + bias) + beta·R``, computed in float32 (the accumulator's type) and rounded
    to the output type last. ``bias``: a length-N vector added to every row; ``activation``: one of
    :data:`ACTIVATIONS` (or None); ``residual``: a tensor R shaped like the output, added after the
    activation, scaled by ``beta`` (which needs it). The defaults do nothing."""

    bias: bool = False
    activation: str | None = None
    residual: bool = False
    alpha: float = 1.0
    beta: float = 1.0

    def __post_init__(self):
        act = ACTIVATION_ALIASES.get(self.activation, self.activation)
        if act is not None and act not in ACTIVATIONS:
            raise ScheduleParamError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)} "
                                     f"(or gelu, which is gelu_erf)")
        object.__setattr__(self, "activation", act)
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ScheduleParamError(f"epilogue {name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in ("bias", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise ScheduleParamError(f"epilogue {name} must be True or False, got {getattr(self, name)!r}")
        if self.beta != 1.0 and not self.residual:
            raise ScheduleParamError(f"epilogue beta={_number(self.beta)} scales the residual: it needs residual")

    @property
    def identity(self) -> bool:
        """True when it changes nothing (every field at its default)."""
        return self == Epilogue()

    def words(self) -> list[str]:
        """Its spec words, in the grammar's order (defaults left out)."""
        out = (["bias"] if self.bias else []) + ([self.activation] if self.activation else [])
        out += ["residual"] if self.residual else []
        out += [f"alpha={_number(self.alpha)}"] if self.alpha != 1.0 else []
        out += [f"beta={_number(self.beta)}"] if self.beta != 1.0 else []
        return out

    def __str__(self):
        return ":".join(self.words())


def _number(x: float) -> str:
    """A float as the grammar prints it: the shortest text that reads back to it, without ``.0``."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class Gemm:
    """C = op(A)·op(B) (``layout``), or a batch of ``batch`` such products (a BMM: operands and
    output with a leading batch dimension; ``batch=None`` is a plain GEMM with 2-D operands).
    ``out_dtype`` and ``epilogue``: the output's type and what is done to the product before it is
    written (:class:`Epilogue`); an epilogue that does nothing is stored as None."""

    M: int
    N: int
    K: int
    dtype: str = "float32"
    acc_dtype: str = "float32"
    layout: str = "nn"
    batch: int | None = None
    out_dtype: str = "float32"
    epilogue: Epilogue | None = None
    b_dtype: str | None = None  # B's input type where it differs from A's (FP8 pairs); None: dtype
    scaling: str | None = None  # FP8 inputs: "tensor" (default), "row" or "block" scales; None otherwise

    kind = "gemm"  # the ladder's kind: a BMM is a GEMM with a batch (steps say whether they take one)

    def __post_init__(self):
        for name in ("M", "N", "K"):
            _check_positive(f"gemm {name}", getattr(self, name))
        if self.layout not in LAYOUTS:
            raise ScheduleParamError(f"gemm layout {self.layout!r} is not one of {', '.join(LAYOUTS)} "
                                     f"(C = op(A)·op(B); t: the operand is stored transposed)")
        if self.batch is not None:
            _check_positive("bmm batch", self.batch)
        if self.out_dtype not in OUT_DTYPES:
            raise ScheduleParamError(f"gemm output type {self.out_dtype!r} is not one of {', '.join(OUT_DTYPES)}")
        if self.epilogue is not None and not isinstance(self.epilogue, Epilogue):
            raise ScheduleParamError(f"gemm epilogue must be an Epilogue or None, got {self.epilogue!r}")
        if self.epilogue is not None and self.epilogue.identity:
            object.__setattr__(self, "epilogue", None)
        if self.b_dtype == self.dtype:
            object.__setattr__(self, "b_dtype", None)
        fp8 = self.dtype in FP8_DTYPES
        if self.b_dtype is not None and not (fp8 and self.b_dtype in FP8_DTYPES):
            raise ScheduleParamError(f"gemm B type {self.b_dtype!r} beside A's {self.dtype}: a mixed pair is two "
                                     f"8-bit floats ({', '.join(FP8_DTYPES)})")
        if fp8 and self.scaling is None:
            object.__setattr__(self, "scaling", "tensor")
        if self.scaling is not None and not fp8:
            raise ScheduleParamError(f"gemm scale={self.scaling} is for 8-bit float inputs ({', '.join(FP8_DTYPES)}), "
                                     f"not {self.dtype}")
        if fp8 and self.batched:
            raise ScheduleParamError(f"8-bit float inputs are for a GEMM, not a batch of products (bmm:{self.shape})")
        if self.scaling is not None and self.scaling not in SCALINGS:
            raise ScheduleParamError(f"gemm scale={self.scaling!r} is not one of {', '.join(SCALINGS)}")

    # the output and its epilogue --------------------------------------------------------------
    @property
    def has_epilogue(self) -> bool:
        """Whether the output is more than the accumulated product: an epilogue, an output type
        other than the accumulator's (a rounding), or an FP8 product's scales. Such a product's
        PrimFunc has two blocks, the product "C" (an intermediate buffer) and the elementwise "D"
        that writes the output."""
        return self.epilogue is not None or self.out_dtype != self.acc_dtype or self.scaled

    # FP8 inputs and their scales ----------------------------------------------------------------
    @property
    def fp8(self) -> bool:
        """Whether the inputs are 8-bit floats (:data:`FP8_DTYPES`)."""
        return self.dtype in FP8_DTYPES

    @property
    def dtype_b(self) -> str:
        """B's input type (A's unless a mixed FP8 pair names another)."""
        return self.b_dtype or self.dtype

    @property
    def scaled(self) -> bool:
        """Whether the product takes scales (FP8 inputs: always)."""
        return self.scaling is not None

    @property
    def scale_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(scale_a, scale_b) shapes, as torch._scaled_mm takes them: (1,), (1,) per tensor; (M, 1),
        (1, N) per row of A and column of the product; per block (M, ⌈K/128⌉) for 1×128 pieces of A
        and (⌈N/128⌉, ⌈K/128⌉) for 128×128 blocks of B."""
        if self.scaling == "row":
            return (self.M, 1), (1, self.N)
        if self.scaling == "block":
            kb = -(-self.K // SCALE_BLOCK)
            return (self.M, kb), (-(-self.N // SCALE_BLOCK), kb)
        return (1,), (1,)

    @property
    def operand_count(self) -> int:
        """Inputs that make the product before the epilogue's: A, B and, scaled, scale_a, scale_b."""
        return 4 if self.scaled else 2

    @property
    def bias(self) -> bool:
        return self.epilogue is not None and self.epilogue.bias

    @property
    def residual(self) -> bool:
        return self.epilogue is not None and self.epilogue.residual

    @property
    def activation(self) -> str | None:
        return self.epilogue.activation if self.epilogue is not None else None

    @property
    def bias_shape(self) -> tuple[int, ...]:
        """The bias: one value per output column, shared by every row (and every product of a batch)."""
        return (self.N,)

    def product_only(self) -> "Gemm":
        """The same product without the epilogue, into the same output type."""
        return Gemm(self.M, self.N, self.K, self.dtype, self.acc_dtype, self.layout, self.batch, self.out_dtype,
                    b_dtype=self.b_dtype, scaling=self.scaling)

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
        """Fewest bytes through device memory: each input read once, the output written once (in its
        type), and the epilogue's inputs read once (the bias, R)."""
        ia, ib, ob = itemsize(self.dtype), itemsize(self.dtype_b), itemsize(self.out_dtype)
        out = self.batches * (ia * self.M * self.K + ib * self.K * self.N + ob * self.M * self.N)
        return out + self.epilogue_bytes

    @property
    def epilogue_bytes(self) -> int:
        """Bytes the epilogue reads besides the product: the bias once, R once (in the output type)."""
        ob = itemsize(self.out_dtype)
        return ob * (self.N * self.bias + self.batches * self.M * self.N * self.residual)

    def prim_func(self):
        A = te.placeholder(self.a_shape, self.dtype, name="A")
        B = te.placeholder(self.b_shape, self.dtype_b, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        ta, tb, batched = self.trans_a, self.trans_b, self.batched

        def a_at(b, i, k):  # op(A)[i, k], read from A as stored
            idx = (k, i) if ta else (i, k)
            return A[(b, *idx)] if batched else A[idx]

        def b_at(b, k, j):  # op(B)[k, j]
            idx = (j, k) if tb else (k, j)
            return B[(b, *idx)] if batched else B[idx]

        sa, sb = self._scale_placeholders()
        if self.dtype == self.acc_dtype:
            prod = lambda b, i, j: a_at(b, i, k) * b_at(b, k, j)  # noqa: E731
        elif self.scaling == "block":  # the scales of k's block of A's row and of B's (column, K) block
            bk = SCALE_BLOCK
            prod = lambda b, i, j: (a_at(b, i, k).astype(self.acc_dtype) * b_at(b, k, j).astype(self.acc_dtype)  # noqa: E731
                                    * (sa[i, k // bk] * sb[j // bk, k // bk]))
        else:
            prod = lambda b, i, j: a_at(b, i, k).astype(self.acc_dtype) * b_at(b, k, j).astype(self.acc_dtype)  # noqa: E731
        if batched:
            body = lambda b, i, j: te.sum(prod(b, i, j), axis=k)  # noqa: E731
        else:
            body = lambda i, j: te.sum(prod(None, i, j), axis=k)  # noqa: E731
        C = te.compute(self.c_shape, body, name="C")
        if not self.has_epilogue:
            return te.create_prim_func([A, B, C]).with_attr("global_symbol", "main")
        extra, D = self._epilogue_block(C, sa, sb)
        return te.create_prim_func([A, B, *extra, D]).with_attr("global_symbol", "main")

    def _scale_placeholders(self):
        """(scale_a, scale_b) placeholders of an FP8 product (float32, :attr:`scale_shapes`), or Nones."""
        if not self.scaled:
            return None, None
        sa_shape, sb_shape = self.scale_shapes
        return te.placeholder(sa_shape, "float32", name="scale_a"), te.placeholder(sb_shape, "float32", name="scale_b")

    def _epilogue_block(self, C, sa=None, sb=None):
        """The elementwise block "D" that reads the product C (float32) back and writes the output:
        act(alpha·(scale_a·scale_b)·C + bias) + beta·R in float32, rounded to ``out_dtype`` last (block
        scales are applied inside the sum, C). Returns the epilogue's input placeholders (scale_a,
        scale_b, bias, R: those it has) and D."""
        ep = self.epilogue or Epilogue()
        bias = te.placeholder(self.bias_shape, self.out_dtype, name="bias") if ep.bias else None
        res = te.placeholder(self.c_shape, self.out_dtype, name="R") if ep.residual else None
        row = self.scaling == "row"

        def body(*idx):
            x = C[idx]
            if sa is not None and self.scaling != "block":
                x = x * (sa[idx[-2], 0] * sb[0, idx[-1]] if row else sa[0] * sb[0])
            return epilogue_value(self, x, None if bias is None else bias[idx[-1]],
                                  None if res is None else res[idx])

        D = te.compute(self.c_shape, body, name="D")
        return [t for t in (sa, sb, bias, res) if t is not None], D

    def arg_names(self) -> list[str]:
        """The PrimFunc's arguments in order: A, B, C; or with an epilogue or another output type A,
        B, [scale_a, scale_b], [bias], [R], D (the scales of FP8 inputs: torch._scaled_mm's order)."""
        if not self.has_epilogue:
            return ["A", "B", "C"]
        return ["A", "B"] + ["scale_a", "scale_b"] * self.scaled + ["bias"] * self.bias + ["R"] * self.residual + ["D"]

    def arg_shapes(self):
        """The stored shape and type of each argument, in :meth:`arg_names`' order: A and B (see
        :attr:`a_shape`, :attr:`b_shape`), the scales (float32, :attr:`scale_shapes`), the bias and R
        (output type), the output."""
        shapes = [(self.a_shape, self.dtype), (self.b_shape, self.dtype_b)]
        if not self.has_epilogue:
            return shapes + [(self.c_shape, self.acc_dtype)]
        shapes += [(shape, "float32") for shape in self.scale_shapes] if self.scaled else []
        shapes += [(self.bias_shape, self.out_dtype)] * self.bias + [(self.c_shape, self.out_dtype)] * self.residual
        return shapes + [(self.c_shape, self.out_dtype)]

    def misaligned_rows(self) -> tuple[bool, bool]:
        """(A, B): whether the operand's stored rows are not a whole number of 16 bytes: no tensor
        map can describe them and no load from them can be 16 bytes wide (the kernels that need
        either copy such an operand into a padded buffer first, ``pad_operands``)."""
        return ((self.a_shape[-1] * itemsize(self.dtype)) % 16 != 0,
                (self.b_shape[-1] * itemsize(self.dtype_b)) % 16 != 0)

    def operands(self, a, b):
        """op(A), op(B) of stored operands ``a``, ``b`` (numpy arrays or torch tensors): views with
        the last two axes swapped where the layout stores one transposed (no copy)."""
        return (_swap_last(a) if self.trans_a else a), (_swap_last(b) if self.trans_b else b)

    def __str__(self):
        suffix = "" if self.dtype == "float32" else f":{self.dtype}"
        suffix += "" if self.b_dtype is None else f":b={self.b_dtype}"
        suffix += "" if self.layout == "nn" else f":{self.layout}"
        suffix += "" if self.scaling in (None, "tensor") else f":scale={self.scaling}"
        suffix += "" if self.out_dtype == "float32" else f":out={self.out_dtype}"
        suffix += "" if self.epilogue is None else f":{self.epilogue}"
        return f"{'bmm' if self.batched else 'gemm'}:{self.shape}{suffix}"


def epilogue_value(wl: Gemm, x, bias=None, r=None):
    """The epilogue of one output as a TIR expression: ``act(alpha·x + bias) + beta·r`` on the
    accumulated product ``x`` (float32), ``bias`` and ``r`` its bias and R values (in the output
    type; None where the workload has none), computed in float32 and rounded to ``out_dtype`` last.
    The block "D" of :meth:`Gemm.prim_func` and the kernels that compute it in their registers
    (schedules/wgmma_epilogue.py) both write it so."""
    acc, ep = wl.acc_dtype, wl.epilogue or Epilogue()
    if ep.alpha != 1.0:
        x = x * tvm.tirx.const(ep.alpha, acc)
    if bias is not None:
        x = x + bias.astype(acc)
    x = activation_expr(ep.activation, x, acc)
    if r is not None:
        r = r.astype(acc)
        x = x + (r if ep.beta == 1.0 else r * tvm.tirx.const(ep.beta, acc))
    return x if wl.out_dtype == acc else x.astype(wl.out_dtype)


def activation_expr(activation: str | None, x, dt: str = "float32"):
    """The activation on a TIR expression ``x`` of type ``dt``: ReLU max(x, 0); GELU erf 0.5·x·(1 +
    erf(x/√2)); GELU tanh 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); SiLU x·sigmoid(x)."""
    if activation is None:
        return x
    c = lambda v: tvm.tirx.const(v, dt)  # noqa: E731
    if activation == "relu":
        return tvm.tirx.Max(x, c(0.0))
    if activation == "gelu_erf":
        return c(0.5) * x * (c(1.0) + tvm.tirx.erf(x * c(1.0 / math.sqrt(2.0))))
    if activation == "gelu_tanh":
        return c(0.5) * x * (c(1.0) + tvm.tirx.tanh(c(SQRT_2_OVER_PI) * (x + c(GELU_TANH_CUBIC) * x * x * x)))
    if activation == "silu":
        return x * tvm.tirx.sigmoid(x)
    raise ScheduleParamError(f"activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")


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
    epilogue = None  # a GEMV takes no epilogue (class attributes: what the lab asks of any workload)
    has_epilogue = False

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

    @property
    def out_dtype(self) -> str:
        return self.acc_dtype

    def arg_names(self) -> list[str]:
        return ["A", "x", "y"]

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

_DTYPES = ("float32", "float16", "bfloat16", *FP8_DTYPES)


def parse_workload(text: str) -> Workload:
    """``gemm:1024x512x2048``, ``bmm:32x512x512x64``, ``gemv:16384x16``, ``gemv_t:16384x16``;
    optionally ``:float16`` or ``:bfloat16`` for 16-bit inputs, and for gemm/bmm an operand layout
    ``:nn`` (default), ``:nt``, ``:tn`` or ``:tt`` after it (``gemm:4096x4096x4096:float16:tn``),
    then an output type and an epilogue (``:out=bfloat16:bias:gelu_tanh``, see the module's
    docstring). 8-bit float inputs (``:float8_e4m3fn``, ``:float8_e5m2``) may name B's type after
    A's (``:b=float8_e5m2``) and their scales (``:scale=row``; ``tensor`` by default). Nonsense is
    a one-line ScheduleParamError."""
    m = re.fullmatch(r"\s*(gemm|bmm|gemv_t|gemv)\s*:\s*([0-9x×-]+)\s*((?::\s*[^:\s]*\s*)*)", text or "")
    if not m:
        raise ScheduleParamError(
            f"workload {text!r} is malformed: expected gemm:MxNxK, bmm:BxMxNxK, gemv:MxN or gemv_t:MxN, then "
            f"optionally :dtype and (gemm, bmm) :layout (e.g. gemm:1024x512x2048:float16:nt)")
    kind = m.group(1)
    dims = parse_shape(m.group(2), {"gemm": 3, "bmm": 4}.get(kind, 2))
    fields = [f.strip() for f in m.group(3).split(":")[1:]]
    dtype, layout, out, words, b_dtype, scaling = None, None, None, {}, None, None
    for field in fields:
        if (field in _DTYPES or field in LAYOUTS or field.startswith("b=")) and (out is not None or words):
            raise ScheduleParamError(f"workload {text!r}: the input type and layout come before out= and the "
                                     f"epilogue (e.g. gemm:64x64x64:bfloat16:nt:out=bfloat16:bias)")
        if field in _DTYPES and dtype is None and layout is None:
            dtype = field
        elif field in LAYOUTS and layout is None:
            layout = field
        elif field in _DTYPES or field in LAYOUTS:
            raise ScheduleParamError(f"workload {text!r}: at most one dtype, then at most one layout "
                                     f"(e.g. gemm:64x64x64:float16:nt)")
        elif field.startswith("b="):
            if dtype not in FP8_DTYPES or b_dtype is not None or layout is not None:
                raise ScheduleParamError(f"workload {text!r}: b=TYPE names B's type right after an 8-bit float A's "
                                         f"(e.g. gemm:64x64x64:float8_e4m3fn:b=float8_e5m2:nt), once")
            b_dtype = field[2:]
            if b_dtype not in FP8_DTYPES:
                raise ScheduleParamError(f"workload {text!r}: B's type {b_dtype!r} is not one of {', '.join(FP8_DTYPES)}")
        elif field.startswith("scale="):
            if scaling is not None:
                raise ScheduleParamError(f"workload {text!r}: scale= is given twice")
            scaling = field[6:]
            if scaling not in SCALINGS:
                raise ScheduleParamError(f"workload {text!r}: scale={scaling!r} is not one of {', '.join(SCALINGS)}")
        elif field.startswith("out="):
            if out is not None:
                raise ScheduleParamError(f"workload {text!r}: out= is given twice")
            out = field[4:]
            if out not in OUT_DTYPES:
                raise ScheduleParamError(f"workload {text!r}: output type {out!r} is not one of {', '.join(OUT_DTYPES)}")
        elif _epilogue_word(text, field, words):
            continue
        elif re.fullmatch(r"[A-Za-z]{2}", field):
            raise ScheduleParamError(f"workload {text!r}: layout {field!r} is not one of {', '.join(LAYOUTS)}")
        else:
            raise ScheduleParamError(
                f"workload {text!r}: {field!r} is not a dtype ({', '.join(_DTYPES)}), a layout ({', '.join(LAYOUTS)}), "
                f"out=TYPE, scale=tensor|row|block or an epilogue word (bias, {', '.join(ACTIVATIONS)}, gelu, residual, "
                f"alpha=X, beta=X)")
    dtype = dtype or "float32"
    if dtype in FP8_DTYPES and kind != "gemm":
        raise ScheduleParamError(f"workload {text!r}: 8-bit float inputs are for gemm workloads, not {kind}")
    if scaling is not None and dtype not in FP8_DTYPES:
        raise ScheduleParamError(f"workload {text!r}: scale= is for 8-bit float inputs ({', '.join(FP8_DTYPES)})")
    if layout is not None and kind not in ("gemm", "bmm"):
        raise ScheduleParamError(f"workload {text!r}: a layout is for gemm and bmm workloads, not {kind}")
    if (out is not None or words) and kind not in ("gemm", "bmm"):
        raise ScheduleParamError(f"workload {text!r}: an output type and an epilogue are for gemm and bmm workloads, "
                                 f"not {kind} (a matrix-vector product with one: gemm:Mx1xK:...)")
    if "beta" in words and "residual" not in words:
        raise ScheduleParamError(f"workload {text!r}: beta scales the residual: it needs the word residual")
    epilogue = Epilogue(**words) if words else None
    extra = dict(out_dtype=out or "float32", epilogue=epilogue, b_dtype=b_dtype, scaling=scaling)
    if kind == "bmm":
        return Gemm(*dims[1:], dtype=dtype, layout=layout or "nn", batch=dims[0], **extra)
    if kind == "gemm":
        return Gemm(*dims, dtype=dtype, layout=layout or "nn", **extra)
    return {"gemv": Gemv, "gemv_t": GemvT}[kind](*dims, dtype=dtype)


def _epilogue_word(text: str, field: str, words: dict) -> bool:
    """Record an epilogue word of a workload string into ``words`` (Epilogue's fields); False when
    ``field`` is not one. A word given twice, a second activation, or a scale that is not a finite
    number is a one-line error."""
    act = ACTIVATION_ALIASES.get(field, field)
    if field == "bias" or field == "residual":
        key, value = field, True
    elif act in ACTIVATIONS:
        key, value = "activation", act
    elif re.fullmatch(r"(alpha|beta)=.*", field):
        key, raw = field.split("=", 1)
        try:
            value = float(raw)
        except ValueError:
            raise ScheduleParamError(f"workload {text!r}: {key} must be a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ScheduleParamError(f"workload {text!r}: {key} must be a finite number, got {raw!r}")
    else:
        return False
    if key in words:
        what = "one activation" if key == "activation" else f"{key} once"
        raise ScheduleParamError(f"workload {text!r}: an epilogue takes {what} ({field!r} after {words[key]!r})"
                                 if key == "activation" else f"workload {text!r}: {key} is given twice")
    words[key] = value
    return True


def workload_for(kind: str, text: str, dtype: str = "float32") -> Workload:
    """A workload from a shape given for a step of ``kind`` (``schedlab show --shape``): ``text`` is
    ``MxNxK[:dtype][:layout][:out=TYPE][:epilogue words]`` or a whole workload string
    (``bmm:32x512x512x64:nt``); where it names no input type, ``dtype`` is put in (a tensor-core
    step's half inputs)."""
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
    return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}[dtype]
