"""The tuner's cold timer is the harness's timer: CUDA events around single runs, L2 emptied by
reading before each (``tuning.measure.event_cold_costs``), so that a search ranks configurations as
``schedlab run`` will time them; over RPC (a module this process's torch cannot reach) it stays
with ``time_evaluator``."""

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


def test_a_remote_module_is_timed_by_time_evaluator_not_by_local_events(monkeypatch):
    """Over RPC this process's torch cannot see the module's GPU: the copy-flushed time_evaluator stays."""
    calls = []
    monkeypatch.setattr(measure, "event_cold_costs", lambda *a, **k: calls.append("events") or [1.0])
    monkeypatch.setattr(measure, "cold_costs", lambda *a, **k: calls.append("time_evaluator") or [1.0])
    monkeypatch.setattr(measure, "_uniform_inputs", lambda args: None)
    monkeypatch.setattr(measure, "sampled_check", lambda *a, **k: None)
    measure.cold_evaluator_rpc(None, object(), SimpleNamespace(dlpack_device_type=lambda: 2), None, [()])
    assert calls == ["time_evaluator"]


def test_a_local_cpu_device_never_reaches_for_cuda_events(monkeypatch):
    calls = []
    monkeypatch.setattr(measure, "event_cold_costs", lambda *a, **k: calls.append("events") or [1.0])
    monkeypatch.setattr(measure, "cold_costs", lambda *a, **k: calls.append("time_evaluator") or [1.0])
    monkeypatch.setattr(measure, "_uniform_inputs", lambda args: None)
    monkeypatch.setattr(measure, "sampled_check", lambda *a, **k: None)
    monkeypatch.setattr(measure, "cuda_torch", lambda: pytest.fail("asked for torch on a CPU device"))
    measure.cold_evaluator_local(object(), SimpleNamespace(dlpack_device_type=lambda: 1), None, [()])
    assert calls == ["time_evaluator"]


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
