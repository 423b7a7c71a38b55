"""Building and measuring candidates through MetaSchedule's builder and runners (local or RPC).

These functions run inside MetaSchedule's worker processes (pickled by reference), so they live in
an importable module and import what they need themselves.

- :func:`build_in_target_scope`: the default build, inside ``with target:`` (TVM's CUDA compile
  hook reads ``Target.current()``; the default LocalBuilder fails on a host without a driver).
- :func:`checked_evaluator_local` / :func:`checked_evaluator_rpc`: before timing, run the candidate
  once into a NaN-poisoned output and compare sampled outputs with a float64 dot product; a wrong or
  unwritten output raises (the trial is recorded as failed, with the reason). Then time it warm:
  MetaSchedule's runner, back-to-back runs, inputs resident in L2.
- :func:`cold_evaluator_local` / :func:`cold_evaluator_rpc`: the same check, then time it cold, as
  ``schedlab run``'s harness does: one run per timing with L2 emptied before each, fewer repeats for
  slow candidates. At 1024×512×2048 the two timers rank close configurations differently (L2 holds
  the whole problem there). Where torch reaches the GPU the local runner times with the harness's
  own timer (:func:`event_times_ms`: CUDA events, L2 emptied by *reading* 256 MiB,
  :func:`l2_reader`); over RPC, or without torch, with ``time_evaluator``'s ``cache_flush_bytes``, a
  device copy whose dirty lines are written back while the timed run reads (on products of ~20 µs
  that copy moved the tuner's times up to 25% from the harness's, either way).
- :func:`verify_evaluator_local` / :func:`verify_evaluator_rpc`: the full float64 check of the best
  candidate; returns the relative error in place of run times.

Each evaluator takes the workload's text (``workload=``, bound with ``functools.partial`` by the
tuner) where the arguments' shapes do not say everything: an epilogue or a 16-bit output is checked
against its own float64 reference (:func:`schedules.reference.reference`).
"""

from __future__ import annotations

import concurrent.futures
import math

import numpy as np

SAMPLES = 512
SAMPLE_TOLERANCE = 1e-4
FULL_TOLERANCE = 1e-5
L2_FLUSH_BYTES = 256 << 20  # what each flush reads (l2_reader) or copies (time_evaluator): more than any GPU's L2
COLD_BUDGET_S = 0.25  # cold timing: repeats capped so one candidate's timed runs take about this long
WARMUP_MS = 30  # cold timing: back-to-back runs before the timed ones, so the clocks are up
TIMERS = ("cold", "warm")
CUDA_DEVICE_TYPE = 2  # DLPack's kCUDA


class WrongResult(RuntimeError):
    pass


def module_pass_config(mod) -> dict:
    """The PassContext options a scheduled module needs beyond the defaults: a K loop pipelined
    with async stages (a cp.async ring, FastTileConfig.async_copy) needs the async copies injected
    and the shared tiles kept float-typed (FastTileConfig.pass_config), as the harness builds it."""
    from schedules.tuned import ring_options

    return ring_options(mod.script())


def build_in_target_scope(mod, target, _params):
    """Build a candidate as the harness builds kernels: inside ``with target:``, CUDA compiled by
    the lab's compiler (tuning.cuda_compile), not TVM's default flags, with the pass options the
    module needs (:func:`module_pass_config`)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from schedules.common import with_build_annotations

    from .cuda_compile import use_lab_compiler

    use_lab_compiler()
    mod = with_build_annotations(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod))
    extra = module_pass_config(mod)
    if not extra:
        with target:
            return tvm.compile(mod, target=target).mod
    current = tvm.transform.PassContext.current()
    config = {**{str(k): v for k, v in current.config.items()}, **extra}
    with tvm.transform.PassContext(opt_level=current.opt_level, config=config), target:
        return tvm.compile(mod, target=target).mod


def _host_dtype(dtype):
    """The NumPy type of a TVM tensor's dtype (bfloat16: ml_dtypes')."""
    if str(dtype) == "bfloat16":
        import ml_dtypes  # optional: bfloat16 host arrays only

        return ml_dtypes.bfloat16
    return np.dtype(str(dtype))


def _run_once(rt_mod, device, args):
    out = args[-1]
    out.copyfrom(np.full(out.shape, np.nan, dtype=_host_dtype(out.dtype)))
    rt_mod[rt_mod.entry_name](*args)
    device.sync()
    return [a.numpy() for a in args]


def _workload(text):
    from schedules.workloads import parse_workload  # in the worker that runs it

    return parse_workload(text) if text else None


def _reference_at(inputs, rows, cols, wl=None):
    a, b = (x.astype(np.float64) for x in inputs[:2])
    if b.ndim == 1:  # gemv: y = A x
        return a[rows] @ b
    prod = np.einsum("sk,ks->s", a[rows], b[:, cols])
    if wl is None or not wl.has_epilogue:
        return prod
    from schedules.reference import apply_epilogue, epilogue_inputs  # in the worker that runs it

    bias, res = epilogue_inputs(wl, inputs)
    return apply_epilogue(wl, prod, None if bias is None else bias[cols], None if res is None else res[rows, cols])


def sampled_check(rt_mod, device, args, samples: int = SAMPLES, tol: float = SAMPLE_TOLERANCE, workload=None):
    """Raise WrongResult unless every output is finite and ``samples`` random outputs match float64
    (``workload``: its text, for an epilogue and an output type; the tolerance then widened by the
    output's rounding, :func:`schedules.reference.output_tolerance`)."""
    wl = _workload(workload)
    if wl is not None:
        from schedules.reference import output_tolerance  # in the worker that runs it

        tol = output_tolerance(wl, tol)
    *inputs, out = _run_once(rt_mod, device, args)
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise WrongResult(f"wrong result: {int((~np.isfinite(out)).sum())} of {out.size} outputs not "
                          "written or not finite")
    rng = np.random.default_rng(0)
    rows = rng.integers(0, out.shape[0], samples)
    cols = rng.integers(0, out.shape[1], samples) if out.ndim == 2 else None
    ref = _reference_at(inputs, rows, cols, wl)
    got = (out[rows, cols] if out.ndim == 2 else out[rows]).astype(np.float64)
    err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    if not err <= tol:
        raise WrongResult(f"wrong result: relative error {err:.3g} over {tol:g} on {samples} sampled outputs")
    return err


def full_error(rt_mod, device, args, workload=None) -> float:
    """‖out − ref‖/‖ref‖ of one run against float64, as the measurement engine checks every
    kernel (:func:`schedules.reference.product_error`: the |A|·|B| scale where ‖ref‖ can cancel);
    inf when an output is not finite. ``workload``: its text, for an epilogue and an output type
    (the arguments are then A, B, [bias], [R], D); without it, the plain product (nn, no batch)
    that the arguments' shapes describe."""
    from schedules.reference import product_error  # in the worker that runs it, as the functions here do
    from schedules.workloads import Gemm, Gemv

    *inputs, out = _run_once(rt_mod, device, args)
    if not np.all(np.isfinite(np.asarray(out, dtype=np.float64))):
        return float("inf")
    wl = _workload(workload)
    if wl is None:
        a, b = inputs[:2]
        dtype = str(a.dtype)
        wl = Gemm(a.shape[0], b.shape[1], a.shape[1], dtype=dtype) if b.ndim == 2 else Gemv(*a.shape, dtype=dtype)
    return float(product_error(wl, out, inputs))


def _uniform_inputs(args):
    """Overwrite the inputs with uniform [-1, 1) values (the measure fill may be all-equal)."""
    rng = np.random.default_rng(1)
    for a in args[:-1]:
        a.copyfrom(rng.uniform(-1, 1, size=a.shape).astype(_host_dtype(a.dtype)))


def cold_costs(rt_mod, device, evaluator_config, repeated_args, flush_bytes: int = L2_FLUSH_BYTES,
               budget_s: float = COLD_BUDGET_S, warmup_ms: int = WARMUP_MS) -> list[float]:
    """Seconds per run, each run timed alone after an L2 flush: one probe run; then, for a kernel
    faster than ``budget_s``, ``warmup_ms`` of back-to-back untimed runs (so that no candidate is
    timed while the GPU's clocks ramp up) and up to ``evaluator_config.repeat`` timed runs, as many
    as fit in ``budget_s``; a slow kernel gets the probe and one more run. ``time_evaluator`` runs the kernel once untimed
    before it times, and its flush is a device copy (it leaves dirty lines that the timed run
    writes back; the harness reads instead, so its times are a little shorter)."""
    def timer(repeat):
        return rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=repeat, min_repeat_ms=0,
                                     cache_flush_bytes=flush_bytes)

    costs = []
    for args in repeated_args:
        device.sync()
        probe = float(timer(1)(*args).results[0])
        if probe >= budget_s:
            costs += [probe, float(timer(1)(*args).results[0])]
            continue
        rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=1, min_repeat_ms=warmup_ms,
                              cache_flush_bytes=0)(*args)
        n = max(2, min(int(evaluator_config.repeat), int(budget_s / max(probe, 1e-7))))
        costs += [float(t) for t in timer(n)(*args).results]
    return costs


def cuda_torch():
    """torch where it reaches a CUDA GPU from this process (events, device buffers), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def l2_reader(torch, nbytes: int = L2_FLUSH_BYTES):
    """A function that empties the L2 cache by reading ``nbytes`` (a sum on the GPU): the next run's
    inputs come from DRAM, and L2 holds no dirty lines to write back while it runs."""
    cache = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
    return lambda: cache.sum(dtype=torch.int64)


def event_times_ms(torch, fn, reps: int, before_run=None) -> list[float]:
    """Milliseconds of each of ``reps`` runs of ``fn``, each between a pair of CUDA events and
    ``before_run`` (the L2 flush) before it, all enqueued before one wait: the harness's timer, and
    the tuner's cold one where torch reaches the GPU."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        if before_run is not None:
            before_run()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


_READERS: list = []  # a runner worker's L2 reader, made on its first cold trial (256 MiB of device memory)


def event_cold_costs(torch, rt_mod, evaluator_config, repeated_args, budget_s: float = COLD_BUDGET_S,
                     warmup_ms: int = WARMUP_MS, flush=None) -> list[float]:
    """:func:`cold_costs` with the harness's timer (:func:`event_times_ms`, L2 emptied before each
    timed run by ``flush``, default the worker's :func:`l2_reader`): one probe; for a kernel faster
    than ``budget_s``, ``warmup_ms`` of back-to-back untimed runs, then up to
    ``evaluator_config.repeat`` timed runs, as many as fit in ``budget_s``; a slow kernel, the probe
    and one more. Seconds per run."""
    if flush is None:
        if not _READERS:
            _READERS.append(l2_reader(torch))
        flush = _READERS[0]
    f = rt_mod[rt_mod.entry_name]
    costs = []
    for args in repeated_args:
        def run(args=args):
            f(*args)
        torch.cuda.synchronize()
        probe_ms = event_times_ms(torch, run, 1, flush)[0]
        if probe_ms >= budget_s * 1e3:
            costs += [probe_ms / 1e3, event_times_ms(torch, run, 1, flush)[0] / 1e3]
            continue
        for _ in range(min(1000, math.ceil(warmup_ms / max(probe_ms, 1e-3)))):
            run()
        n = max(2, min(int(evaluator_config.repeat), int(budget_s * 1e3 / max(probe_ms, 1e-4))))
        costs += [t / 1e3 for t in event_times_ms(torch, run, n, flush)]
    return costs


def _check_then_time(time_runs, rt_mod, device, evaluator_config, repeated_args, workload=None):
    """Uniform inputs, the sampled float64 check (raises on a wrong result), then ``time_runs``."""
    _uniform_inputs(repeated_args[0])
    sampled_check(rt_mod, device, repeated_args[0], workload=workload)
    return time_runs(rt_mod, device, evaluator_config, repeated_args)


def checked_evaluator_local(rt_mod, device, evaluator_config, repeated_args, workload=None):
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    return _check_then_time(run_evaluator_common, rt_mod, device, evaluator_config, repeated_args, workload)


def checked_evaluator_rpc(session, rt_mod, device, evaluator_config, repeated_args, workload=None):
    return checked_evaluator_local(rt_mod, device, evaluator_config, repeated_args, workload)


def cold_evaluator_local(rt_mod, device, evaluator_config, repeated_args, workload=None):
    torch = cuda_torch() if device.dlpack_device_type() == CUDA_DEVICE_TYPE else None
    if torch is None:
        return _check_then_time(cold_costs, rt_mod, device, evaluator_config, repeated_args, workload)

    def events(m, _device, config, args):
        return event_cold_costs(torch, m, config, args)
    return _check_then_time(events, rt_mod, device, evaluator_config, repeated_args, workload)


def cold_evaluator_rpc(session, rt_mod, device, evaluator_config, repeated_args, workload=None):
    """A remote module: timed by time_evaluator on its host (this process's torch cannot reach it)."""
    return _check_then_time(cold_costs, rt_mod, device, evaluator_config, repeated_args, workload)


def verify_evaluator_local(rt_mod, device, evaluator_config, repeated_args, workload=None):
    _uniform_inputs(repeated_args[0])
    return [full_error(rt_mod, device, repeated_args[0], workload)]


def verify_evaluator_rpc(session, rt_mod, device, evaluator_config, repeated_args, workload=None):
    return verify_evaluator_local(rt_mod, device, evaluator_config, repeated_args, workload)


def classify_error(msg: str | None, stage: str) -> tuple[str, str]:
    """(status, one-line reason) from a builder/runner error message."""
    text = (msg or "").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hint = next((ln for ln in reversed(lines) if "WrongResult" in ln or "wrong result" in ln), None)
    if hint:
        return "wrong", hint[hint.find("wrong result"):][:300]
    for key, label in (("Timeout", "timeout"), ("illegal", "GPU fault"), ("CUDA_ERROR", "CUDA error"),
                       ("too many resources", "too many resources for launch")):
        for ln in lines:
            if key in ln:
                return stage, f"{label}: {ln[:250]}"
    last = lines[-1] if lines else "unknown error"
    return stage, last[:300]


def warm_up_worker():
    """Pay TVM's one-time compiler start-up (over ten seconds on some hosts) when a build worker
    starts, not on its first candidate."""
    import os

    import tvm
    from tvm import te

    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    a = te.placeholder((4,), "float32", name="a")
    b = te.compute((4,), lambda i: a[i] + 1.0, name="b")
    tvm.compile(te.create_prim_func([a, b]), target="llvm")


def build_and_export(mod, target) -> str:
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export

    return default_export(build_in_target_scope(mod, target, None))


def guard_pool_lock():
    """Make TVM's process pools release their lock however their shutdown goes.

    ``PopenPoolExecutor.shutdown`` (TVM 0.27) takes the executor's lock and kills each worker process
    before releasing it; a kill that raises (a worker Ctrl-C already ended: its process reaped, or
    gone) leaves the lock held and the executor not marked shut down, so the next shutdown, the one
    its ``__del__`` makes at garbage collection included, waits for the lock forever: ``schedlab
    tune`` hung after Ctrl-C once in three tries (in MetaSchedule's runner's pools and the builder's).
    The same method, each kill's error dropped (its process is gone) and the lock released in a
    ``with``, replaces it once per process."""
    from tvm.support.popen_pool import PopenPoolExecutor

    if getattr(PopenPoolExecutor.shutdown, "releases_its_lock", False):
        return

    def shutdown(self, wait=True):
        with self._lock:
            for worker in self._worker_map.values():
                try:
                    worker.kill()
                except Exception:  # noqa: BLE001 - a worker whose process is gone already
                    pass
        self._threadpool.shutdown(wait=wait)
        self._shutdown = True

    shutdown.releases_its_lock = True
    PopenPoolExecutor.shutdown = shutdown


def kill_workers(pool) -> None:
    """End the worker processes of a TVM process pool (and their children) by signal, leaving the
    pool's bookkeeping alone: a thread waiting for a worker's answer holds the worker's pipe, so
    closing it (what the pool's shutdown does first) would wait until the job ends; once the process
    is gone that thread gets its end of file, and the pool's shutdown then only cleans up."""
    from tvm.support.popen_pool import kill_child_processes

    for worker in list(getattr(pool, "_worker_map", {}).values()):
        proc = getattr(worker, "_proc", None)
        if proc is None or proc.poll() is not None:
            continue
        try:
            kill_child_processes(proc.pid)
        except Exception:  # noqa: BLE001 - children already gone
            pass
        try:
            proc.kill()
        except OSError:
            pass


def make_parallel_builder(max_workers: int, timeout_sec: float, stop=None):
    """A MetaSchedule builder over a pool of build processes that stays up for the whole run
    (MetaSchedule's LocalBuilder starts a fresh pool for every batch, paying TVM's start-up again).
    ``stop`` (a threading.Event; Ctrl-C sets it): no further build starts once it is set, and the
    pool's processes are ended (Ctrl-C reaches them too; a pool would start new ones for the
    builds still queued, each paying TVM's start-up, only for them to be dropped). ``stop`` may also
    be a :class:`tuning.deadline.Cutoff`: at the command's time limit the builds under way are ended
    the same way (their processes signalled first: :func:`kill_workers`)."""
    from tvm.support.popen_pool import PopenPoolExecutor
    from tvm.ir.utils import derived_object

    guard_pool_lock()
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    def result_of(fut):
        try:
            return BuilderResult(fut.result(), None)
        except TimeoutError:
            return BuilderResult(None, f"Timeout: build killed after {timeout_sec:g} s")
        except Exception as e:  # noqa: BLE001 - the candidate's build error
            return BuilderResult(None, f"{type(e).__name__}: {e}")

    @derived_object
    class ParallelBuilder(PyBuilder):
        def __init__(self):
            super().__init__()
            self.pool = None  # started on the first build

        def build(self, build_inputs):
            results = [None] * len(build_inputs)
            queued, running = list(enumerate(build_inputs)), {}
            while (queued or running) and not (stop is not None and stop.is_set()):
                if self.pool is None:
                    self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_sec,
                                                  initializer=warm_up_worker)
                while queued and len(running) < max_workers:
                    n, b = queued.pop(0)
                    running[self.pool.submit(build_and_export, b.mod, b.target)] = n
                done, _ = concurrent.futures.wait(running, timeout=0.2,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    results[running.pop(fut)] = result_of(fut)
            if queued or running:  # stopped
                if running and self.pool is not None:
                    kill_workers(self.pool)  # builds under way end now, not when they are done
                self.shutdown()
                results = [r or BuilderResult(None, "interrupted: build not finished") for r in results]
            return results

        def start(self):
            """Start the build processes now (TVM's start-up, ``warm_up_worker``, runs in them while the
            caller goes on), not on the first build."""
            if self.pool is None:
                self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_sec,
                                              initializer=warm_up_worker)
                for _ in range(max_workers):
                    self.pool.submit(int)

        def shutdown(self):
            pool, self.pool = self.pool, None
            if pool is not None:
                pool.shutdown()

    return ParallelBuilder()
