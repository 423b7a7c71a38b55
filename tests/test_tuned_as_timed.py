"""The tuner measures the kernel the lab runs. Its cold timer is the harness's timer: CUDA events around single runs, L2 emptied by
reading before each (``tuning.measure.event_cold_costs``), so that a search ranks configurations as
``schedlab run`` will time them; over RPC (a module this process's torch cannot reach) it stays
with ``time_evaluator``. And a saved trace is replayed (``tuned_gemm``) with the build options the
tuner built it with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuning import measure


class _Clock:
    """A fake GPU: each kernel run advances the clock by ``per_run_ms``; the log records flushes,
    runs and event records in order."""

    def __init__(self, per_run_ms):
        self.now, self.per_run_ms, self.log = 0.0, per_run_ms, []

    def torch(self):
        clock = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at = None

            def record(self):
                self.at = clock.now
                clock.log.append("event")

            def elapsed_time(self, end):
                return end.at - self.at

        return SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: clock.log.append("sync")))

    def module(self):
        clock = self

        class Module:
            entry_name = "main"

            def __getitem__(self, name):
                assert name == "main"

                def run(*args):
                    clock.now += clock.per_run_ms
                    clock.log.append("run")
                return run

            def time_evaluator(self, *a, **k):
                raise AssertionError("the event timer must not fall back to time_evaluator")
        return Module()

    def flush(self):
        self.log.append("flush")


def _timed_runs(log):
    """The runs that sit between two event records (the timed ones), and whether a flush came
    just before each one's first event."""
    out = []
    for i, entry in enumerate(log):
        if entry == "run" and i > 0 and log[i - 1] == "event":
            out.append(i >= 2 and log[i - 2] == "flush")
    return out


def test_event_cold_costs_flushes_before_every_timed_run_and_warms_up_unflushed():
    clock = _Clock(per_run_ms=0.03)  # a 30 us kernel
    costs = measure.event_cold_costs(clock.torch(), clock.module(), SimpleNamespace(repeat=20), [("a", "b", "c")],
                                     flush=clock.flush)
    assert len(costs) == 20 and all(c == pytest.approx(30e-6) for c in costs)
    timed = _timed_runs(clock.log)
    assert len(timed) == 21 and all(timed)  # the probe and 20 timed runs, each right after a flush
    assert clock.log.count("flush") == 21
    untimed = clock.log.count("run") - 21
    assert untimed == 1000  # warm-up: 30 ms of back-to-back runs (capped at 1000), none flushed or timed


def test_event_cold_costs_spends_two_runs_on_a_slow_kernel():
    clock = _Clock(per_run_ms=1500.0)
    costs = measure.event_cold_costs(clock.torch(), clock.module(), SimpleNamespace(repeat=20), [("a",)],
                                     flush=clock.flush)
    assert costs == [pytest.approx(1.5), pytest.approx(1.5)]
    assert clock.log.count("run") == 2 and clock.log.count("flush") == 2


@pytest.fixture
def timers(monkeypatch):
    """Which timer the evaluators reach for (the check before it stubbed out): a list of names."""
    calls = []
    monkeypatch.setattr(measure, "event_cold_costs", lambda *a, **k: calls.append("events") or [1.0])
    monkeypatch.setattr(measure, "cold_costs", lambda *a, **k: calls.append("time_evaluator") or [1.0])
    monkeypatch.setattr(measure, "_uniform_inputs", lambda args: None)
    monkeypatch.setattr(measure, "sampled_check", lambda *a, **k: None)
    return calls


def _device(dlpack_type):
    return SimpleNamespace(dlpack_device_type=lambda: dlpack_type)


def test_a_remote_module_is_timed_by_time_evaluator_not_by_local_events(timers):
    """Over RPC this process's torch cannot see the module's GPU: the copy-flushed time_evaluator stays."""
    measure.cold_evaluator_rpc(None, object(), _device(measure.CUDA_DEVICE_TYPE), None, [()])
    assert timers == ["time_evaluator"]


def test_a_local_gpu_is_timed_by_events_where_torch_reaches_it(timers, monkeypatch):
    monkeypatch.setattr(measure, "cuda_torch", lambda: object())
    measure.cold_evaluator_local(object(), _device(measure.CUDA_DEVICE_TYPE), None, [()])
    monkeypatch.setattr(measure, "cuda_torch", lambda: None)  # torch missing, or no CUDA in it
    measure.cold_evaluator_local(object(), _device(measure.CUDA_DEVICE_TYPE), None, [()])
    assert timers == ["events", "time_evaluator"]


def test_a_local_cpu_device_never_reaches_for_cuda_events(timers, monkeypatch):
    monkeypatch.setattr(measure, "cuda_torch", lambda: pytest.fail("asked for torch on a CPU device"))
    measure.cold_evaluator_local(object(), _device(1), None, [()])
    assert timers == ["time_evaluator"]


@pytest.mark.gpu
def test_the_tuners_cold_timer_agrees_with_the_harness_on_a_small_product():
    """On a GPU: a ~20 us product (split-K over a long K, where a copy flush's dirty lines moved the
    tuner's times up to 25% from the harness's) timed by the tuner's cold timer and by the harness:
    the medians agree within 8%."""
    import statistics

    import torch
    import tvm

    from reports.engine.kernel import compile_kernel
    from reports.engine.measure import CudaHarness
    from schedules import parse_workload

    kernel = compile_kernel("best_gemm", parse_workload("gemm:121x206x4260"))
    a, b = (torch.rand(s, device="cuda") - 0.5 for s in ((121, 4260), (4260, 206)))
    kernel(a, b)  # checked by the kernel object's argument checks, built and loaded
    func = kernel._func
    views = [tvm.runtime.from_dlpack(t) for t in (a, b, torch.empty(121, 206, device="cuda"))]

    class Module:
        entry_name = "main"

        def __getitem__(self, name):
            return func

    tuner = statistics.median(measure.event_cold_costs(torch, Module(), SimpleNamespace(repeat=50), [views]))
    harness = CudaHarness(flush="read").bench(lambda: func(*views)).median_ms / 1e3
    assert 0.92 < tuner / harness < 1.08, (tuner, harness)


def _ring_trace(wl):
    """A trace of the tuner's dispatch space with a cp.async ring (as the search saves it)."""
    import json

    from tvm import s_tir

    from tuning import records as R
    from tuning.spaces import dispatch_template

    for sch in dispatch_template(s_tir.Schedule(wl.prim_func())):
        trace = R.plain(sch.trace.as_json())
        if "async_copy=true" in json.dumps(trace):
            return trace, sch
    pytest.fail(f"no configuration with a cp.async ring offered for {wl}")


def test_a_tuned_ring_is_replayed_with_the_build_options_the_tuner_timed_it_with(tmp_path):
    """tuned_gemm replays a saved trace with a cp.async ring built as the tuner built it (cp.async
    injected into the ring's copies, the module's own options): without them the ring's loads
    were built as ordinary loads, and the harness timed another kernel (121x206x4260 on an H200:
    17.8 us in the tuner, 24.4 replayed)."""
    import json

    from reports.engine.build import build_resolved, cuda_target
    from schedules import parse_workload
    from schedules.common import pass_config_of
    from schedules.registry import get
    from schedules.tuned import TunedConfig, ring_options
    from tuning.measure import module_pass_config

    wl = parse_workload("gemm:121x206x4260")
    trace, sch = _ring_trace(wl)
    best = tmp_path / "best.json"
    best.write_text(json.dumps({"workload": str(wl), "trace": trace, "target": '{"kind":"cuda"}'}))
    resolved = get("tuned_gemm").resolve(wl, TunedConfig(source=str(best)))
    tuner_options = module_pass_config(sch.mod)
    assert tuner_options and tuner_options["tirx.use_async_copy"]
    assert resolved.pass_config == tuner_options == pass_config_of(TunedConfig(source=str(best)), wl)
    assert ring_options("a module without a ring") == {}
    built = build_resolved(resolved, wl, cuda_target("sm_90"))
    assert "cp.async.ca.shared.global" in built.device.cuda  # the ring's copies are asynchronous
