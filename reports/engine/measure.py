"""Checking and timing on the GPU: device buffers, fresh random inputs, the float64 check, the timer.

Timing: warm-up, then many runs each timed by a pair of CUDA events, the L2 cache emptied before
each run, and the median reported. The standard eviction reads 256 MiB (``flush="read"``): the
inputs are cold and L2 holds no dirty lines. Triton's ``do_bench`` writes 256 MiB instead
(``flush="write"``); the dirty lines it leaves are written back while the timed kernel runs, which
costs a memory-bound kernel about a tenth of its time (measured on an H200: a 64 µs GEMV became
72 µs, cuBLAS's gemv 79 → 86 µs), so the write flush understates bandwidth. Where torch is missing,
TVM's ``time_evaluator`` (median of repeats, no flush) is the fallback, and the result says so.

Correctness: fresh random inputs in [-1, 1) for every check, the output poisoned with NaN before the
run, and ‖out − ref‖ / ‖ref‖ against a float64 product of the same inputs (computed on the GPU where
torch is there); a NaN or infinity left anywhere fails the check.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
import tvm

from tuning.measure import L2_FLUSH_BYTES, event_times_ms, l2_reader

from schedules.reference import LONG_SUM, count_not_finite, product_error, reference  # noqa: F401  (the check)


def have_torch_cuda() -> bool:
    try:
        import torch  # optional: without it TVM's timer and host checks
    except ImportError:
        return False
    return torch.cuda.is_available()


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int
    method: str

    def to_dict(self):
        return asdict(self)


def numpy_dtype(dtype: str):
    """NumPy's type for a workload type: ml_dtypes' for bfloat16 and the 8-bit floats."""
    if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes  # optional: bfloat16 and 8-bit float host arrays only

        return getattr(ml_dtypes, dtype)
    return np.dtype(dtype)


def random_inputs(workload, rng=None):
    """Fresh random host inputs in [-1, 1) (a new seed every call unless ``rng`` is given)."""
    rng = rng or np.random.default_rng()
    return [rng.uniform(-1, 1, size=shape).astype(numpy_dtype(dtype)) for shape, dtype in workload.arg_shapes()[:-1]]


class CudaHarness:
    """Device buffers and an event timer. Uses torch (DLPack views for TVM) when it is there."""

    FLUSH_TEXT = {"read": "L2 emptied before each run by reading 256 MiB",
                  "write": "L2 flushed before each run by writing 256 MiB (triton do_bench's flush)",
                  None: "no L2 flush"}

    def __init__(self, flush: str | bool | None = "read"):
        self.tvm = tvm
        self.dev = tvm.cuda(0)
        self.torch = None
        self.flush = "read" if flush is True else (flush or None)
        if self.flush not in self.FLUSH_TEXT:
            raise ValueError(f"flush must be 'read', 'write' or None, got {flush!r}")
        self.before_run = None
        if have_torch_cuda():
            import torch  # optional: CUDA events and device buffers where torch is installed

            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            self.torch = torch
            if self.flush:
                if self.flush == "write":
                    self.before_run = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda").zero_
                else:
                    self.before_run = l2_reader(torch)

    # buffers ----------------------------------------------------------------------------------
    def empty(self, shape, dtype):
        if self.torch is not None:
            return self.torch.empty(shape, dtype=getattr(self.torch, dtype), device="cuda")
        return self.tvm.runtime.empty(shape, dtype, self.dev)

    def to_device(self, array):
        if self.torch is not None:
            for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):  # torch cannot read ml_dtypes' arrays
                if array.dtype == numpy_dtype(name):
                    return self.torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(
                        "cuda", getattr(self.torch, name))
            return self.torch.from_numpy(np.ascontiguousarray(array)).to("cuda")
        return self.tvm.runtime.tensor(array, self.dev)

    def poison(self, buf):
        if self.torch is not None:
            buf.fill_(float("nan"))
        else:
            buf.copyfrom(np.full(buf.shape, np.nan, dtype=buf.dtype))

    def tvm_view(self, buf):
        return self.tvm.runtime.from_dlpack(buf) if self.torch is not None else buf

    def to_host(self, buf):
        """The buffer where the check computes: torch tensors stay on the GPU; TVM buffers come to
        the host as numpy arrays."""
        self.sync()
        return buf if self.torch is not None else buf.numpy()

    def to_numpy(self, buf):
        self.sync()
        if self.torch is not None:
            return buf.float().cpu().numpy() if buf.dtype == self.torch.bfloat16 else buf.cpu().numpy()
        return buf.numpy()

    def sync(self):
        if self.torch is not None:
            self.torch.cuda.synchronize()
        else:
            self.dev.sync()

    # timing -----------------------------------------------------------------------------------
    def bench(self, fn, budget_s: float = 0.4, min_reps: int = 10, max_reps: int = 200,
              tvm_module=None, tvm_args=None) -> Timing:
        if self.torch is None:
            return self._bench_tvm(tvm_module, tvm_args, budget_s)
        torch = self.torch
        fn()
        self.sync()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        self.sync()
        estimate_ms = max(start.elapsed_time(end) / 3, 1e-3)
        for _ in range(min(25, max(1, int(20 / estimate_ms)))):  # warm-up: ~20 ms of runs
            fn()
        reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / (estimate_ms + 0.05))))
        times = event_times_ms(torch, fn, reps, self.before_run)
        method = f"cuda events, {self.FLUSH_TEXT[self.flush]}"
        return Timing(statistics.median(times), min(times), max(times), reps, method)

    def _bench_tvm(self, module, args, budget_s) -> Timing:
        if module is None:
            raise RuntimeError("timing a non-TVM function needs torch")
        f = module.time_evaluator("main", self.dev, number=1, repeat=3, min_repeat_ms=0)
        once = f(*args).median
        number = max(1, int(0.01 / max(once, 1e-7)))
        repeat = int(min(200, max(10, budget_s / max(once * number, 1e-7))))
        r = module.time_evaluator("main", self.dev, number=number, repeat=repeat, min_repeat_ms=0)(*args)
        times = [t * 1e3 for t in r.results]
        return Timing(statistics.median(times), min(times), max(times), repeat,
                      f"tvm time_evaluator, {number} runs per repeat, no L2 flush")


_BUFFERS: dict = {}  # one workload's device buffers, reused by the jobs that follow on it


def device_buffers(harness: CudaHarness, workload):
    """(inputs, output) device buffers for ``workload``; the last workload's are reused (the values
    are refilled by :func:`refill` before every check)."""
    key = (id(harness.torch), str(workload))
    if key not in _BUFFERS:
        _BUFFERS.clear()
        shapes = workload.arg_shapes()
        inputs = [harness.empty(shape, dtype) for shape, dtype in shapes[:-1]]
        out = harness.empty(*shapes[-1])
        _BUFFERS[key] = (inputs, out)
    return _BUFFERS[key]


def refill(harness: CudaHarness, inputs, rng=None):
    """New random values in [-1, 1) in every input buffer (8-bit floats: float32 values in [-1, 1)
    rounded to the type, which has no random fill of its own)."""
    if harness.torch is not None:
        for x in inputs:
            if x.element_size() == 1 and x.is_floating_point():
                x.copy_(harness.torch.empty(x.shape, dtype=harness.torch.float32, device=x.device).uniform_(-1, 1))
            else:
                x.uniform_(-1, 1)
        return
    rng = rng or np.random.default_rng()
    for x in inputs:
        x.copyfrom(rng.uniform(-1, 1, size=x.shape).astype(numpy_dtype(str(x.dtype))))


def bench_cpu(fn, budget_s: float = 0.5, min_reps: int = 3, max_reps: int = 50) -> Timing:
    fn()
    t0 = time.perf_counter()
    fn()
    estimate = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / estimate)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(times), min(times), max(times), reps, "host clock")
