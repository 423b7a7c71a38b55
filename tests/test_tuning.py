"""The tuner on the CPU (llvm target): the classic space has exactly 36 configurations, the trial
log and MetaSchedule's database survive a SIGKILL and a resumed run measures nothing twice,
measurement through an RPC tracker and server works end to end, tuned_gemm replays the best
configuration. Bounded: small workloads, few trials, every subprocess with a time limit."""

import json
import re
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WL = "gemm:32x32x32"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _tune_cmd(db, trials, strategy="exhaustive", extra=()):
    return [sys.executable, "-m", "scripts.schedlab", "tune", "--target", "llvm", "--space", "classic",
            "--workload", WL, "--strategy", strategy, "--trials", str(trials), "--batch", "2",
            "--builders", "1", "--db", str(db), "--compare", "none", "--quiet", *extra]


def _lines(path):
    with open(path, "rb") as f:
        return f.read().splitlines()


def test_classic_space_is_the_36_autotvm_configurations():
    import tvm
    from tvm import s_tir

    from schedules import parse_workload
    from tuning.spaces import classic_template, enumerate_decisions, knob_values, space_size

    sch = s_tir.Schedule(tvm.IRModule({"main": parse_workload("gemm:256x256x256").prim_func()}))
    classic_template(sch)
    assert space_size(sch.trace) == 36
    combos = list(enumerate_decisions(sch.trace))
    assert len(combos) == 36
    knobs = knob_values(sch.trace, ["tile_y", "tile_x", "tile_k", "vector"])
    assert knobs["tile_y"] in (8, 16, 32) and knobs["tile_k"] in (8, 16) and knobs["vector"] in (1, 4)


def test_tiled_space_reuses_the_register_tiled_steps():
    """The tiled template's trace, with the hand step's tile sizes, builds the same loop nest shape
    as step 8 (the helpers are shared, not copied)."""
    import tvm
    from tvm import s_tir

    from schedules import parse_workload
    from tuning.spaces import sample_insts, tiled_template

    sch = s_tir.Schedule(tvm.IRModule({"main": parse_workload("gemm:256x256x256").prim_func()}))
    tiled_template(sch)
    kinds = [i.kind.name for i in sample_insts(sch.trace)]
    assert kinds == ["SamplePerfectTile"] * 3 + ["SampleCategorical"] * 3
    names = {b.name_hint for b in [sch.get(sch.get_sblock(n)) for n in ("A_shared", "B_shared", "C_local")]}
    assert names == {"A_shared", "B_shared", "C_local"}


def test_the_option_names_are_the_tuners():
    """The command line offers tuning.names without importing the tuner: the same names it defines."""
    from tuning import cost_models, names, spaces, tuner

    assert tuple(spaces.SPACES) == names.SPACE_NAMES
    assert tuner.STRATEGIES == names.STRATEGIES and cost_models.COST_MODELS == names.COST_MODELS


def test_tvms_tensor_intrinsics_import_in_seconds():
    """What every tuning process pays before its first trial (MetaSchedule's TuneContext imports them):
    about 50 s of CPU here before, when each TVMScript parse rescanned sys.modules for every stack
    frame; the intrinsics are registered and inspect is left as it was."""
    code = ("import inspect, time; import tvm; from tvm import s_tir\n"
            "from schedules.tensor_intrinsics import import_tensor_intrinsics\n"
            "getmodule, t0 = inspect.getmodule, time.process_time()\n"
            "intrinsics = import_tensor_intrinsics()\n"
            "s_tir.TensorIntrin.get(intrinsics.cuda.WMMA_SYNC_16x16x16_f16f16f32_INTRIN)\n"
            "print(time.process_time() - t0, inspect.getmodule is getmodule)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    cpu, restored = out.stdout.split()
    assert float(cpu) < 20 and restored == "True", out.stdout


def test_sigkill_mid_run_then_resume(tmp_path):
    """Kill a tuner with SIGKILL once it has recorded trials (while it is measuring more), garble a
    line in the middle of its log and cut the last one short, then resume: the damage is said in one
    line and the log kept aside; nothing valid is lost, the database opens, the lost trial is
    measured again under a new number (it used to repeat one) without a second database record."""
    from tuning import records as R

    db = tmp_path / "db"
    trials_path = db / R.TRIALS_FILE
    proc = subprocess.Popen(_tune_cmd(db, 8), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if trials_path.exists() and len(_lines(trials_path)) >= 3:
                break
            if proc.poll() is not None:
                pytest.fail("the tuner ended before it could be killed")
            time.sleep(0.2)
        else:
            pytest.fail("no trials recorded within 90 s")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = _lines(trials_path)
    before = [json.loads(x) for x in lines if x.strip()]
    assert 3 <= len(before) < 8
    # garbage in the middle (the second trial lost) and a write cut short at the end, then resume
    lines[1] = b'{"run": "classic/exh\x00\xff garbage'
    trials_path.write_bytes(b"\n".join(lines) + b'\n{"run": "classic/exhaustive", "tri')
    done = subprocess.run(_tune_cmd(db, 8), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("tuning database:")]
    assert len(said) == 1 and f"trials.jsonl lines 2 and {len(before) + 1} are damaged" in said[0], done.stderr
    assert len(list(db.glob("trials.jsonl.damaged-*"))) == 1
    rows = [json.loads(x) for x in _lines(trials_path)]
    trials = [r for r in rows if r.get("status") != "verify"]
    numbers = [r["trial"] for r in trials]
    assert len(trials) == 8 and numbers == sorted(set(numbers)) and 2 not in numbers  # none repeated
    keys = [r["key"] for r in trials]
    assert len(set(keys)) == 8, "a candidate was measured twice"
    assert keys[:len(before) - 1] == [r["key"] for r in before if r is not before[1]]  # kept as recorded
    assert before[1]["key"] in keys[len(before) - 1:]  # the lost trial, measured again
    assert len(_lines(db / R.RECORD_FILE)) == 8  # one database record per candidate
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(work_dir=str(db))  # readable as is
    assert len(database) == 8
    assert os.path.exists(R.best_path(str(db), WL))
    # a third run has nothing left to do and measures nothing
    again = subprocess.run(_tune_cmd(db, 8), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0
    assert "0 measured now" in again.stdout and "tuning database:" not in again.stderr


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rpc_tracker_and_server_end_to_end(tmp_path):
    """A tracker and a server on 127.0.0.1 (own process groups), a small llvm tuning run measured
    through them, then both stopped by killing their process groups."""
    from tuning.tracker import count_rpc_servers
    from tuning.tuner import TuneOptions, tune

    port = _free_port()
    key = "schedlab-test"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
             "--port-end", str(port + 1)], env=_env(), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.5)
        sport = _free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(sport),
             "--port-end", str(sport + 1), "--tracker", f"127.0.0.1:{port}", "--key", key], env=_env(),
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if count_rpc_servers("127.0.0.1", port, key) >= 1:
                    break
            except Exception:  # noqa: BLE001 - tracker not up yet
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the RPC server did not register with the tracker")
        opts = TuneOptions(workload=WL, space="classic", strategy="random", trials=3, batch=3, builders=1,
                           db=str(tmp_path / "db"), target="llvm", rpc_tracker=f"127.0.0.1:{port}",
                           rpc_key=key, run_timeout=30, number=1, repeat=1, min_repeat_ms=0,
                           time_limit_s=90)
        summary = tune(opts)
        assert summary["rpc_servers"] == 1
        assert summary["trials"] == 3
        assert summary["best"]["gflops"] > 0
        assert summary["best"]["rel_error"] < 1e-5
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


def test_fast_space_spans_the_fast_steps_with_the_models_choices_first():
    """The fast space: one design space per valid structural combination (the dispatcher's top
    choices first, best_gemm's own first of all), each with one sampled knob (unroll),
    postprocessed by MetaSchedule's CUDA postprocessors, and its CUDA compiles with nvcc without
    spills."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from reports.engine import build as B
    from schedules import parse_workload
    from schedules import dispatch
    from schedules.tensor_intrinsics import import_tensor_intrinsics
    from tuning.spaces import SEEDS, fast_configs, get_space, knob_values, model_seeds, sample_insts
    from tuning.tuner import candidate_from_decisions, launch_of, make_target

    wl = parse_workload("gemm:1024x512x2048")
    cfgs = fast_configs(wl)
    step, hand = dispatch.choose(wl, "fp32")
    assert (cfgs[0].split_k, cfgs[0].block_m, cfgs[0].block_n) == (hand.split_k, hand.block_m, hand.block_n)
    assert cfgs[0].split_k > 1  # 32 output tiles for 132 SMs: the model splits K
    assert [(c.block_m, c.block_n, c.split_k) for c in cfgs[:SEEDS]] == \
        [(c.block_m, c.block_n, c.split_k) for c in model_seeds(wl)]
    assert len(cfgs) >= 100 and len(set(cfgs)) == len(cfgs)
    assert {1, 2, 4, 8} <= {c.split_k for c in cfgs} and {c.stages for c in cfgs[SEEDS:]} == {1, 2}
    # a model seed may be a cp.async ring (3 or 4 shared buffers), which the grid itself does not span
    assert {c.stages for c in cfgs[:SEEDS]} <= {1, 2} | {s for s, ring in dispatch.SIMT_PIPELINES if ring}
    assert {(c.block_m, c.block_n) for c in cfgs} >= {(128, 128), (64, 64), (128, 64)}

    import_tensor_intrinsics()  # what TuneContext imports, at a tenth of the cost under pytest
    B.setup_cuda_env()
    target = make_target("cuda", "sm_90")
    mod = tvm.IRModule({"main": wl.prim_func()})
    ctx = ms.TuneContext(mod, target=target, space_generator=get_space("fast").generator(target),
                         search_strategy=ms.search_strategy.ReplayTrace(), task_name="t", num_threads=1)
    spaces = ctx.generate_design_space()
    assert len(spaces) == len(cfgs)
    single = next(n for n, c in enumerate(cfgs) if c.split_k == 1 and c.block_m == 64)
    for index, kernels in ((0, 2), (single, 1)):  # split-K: partial products + the summing kernel
        trace = spaces[index].trace
        insts = sample_insts(trace)
        assert [i.kind.name for i in insts] == ["SampleCategorical"]
        cand, _, failed = candidate_from_decisions(mod, list(ctx.space_generator.postprocs), trace, insts, [2])
        assert failed is None
        knobs = knob_values(cand.sch.trace, ["unroll"])
        assert knobs["split_k"] == str(cfgs[index].split_k) and knobs["unroll"] == 256
        assert knobs["block"] == f"{cfgs[index].block_m}x{cfgs[index].block_n}"
        la = launch_of(cand.sch)  # the main kernel's, not mixed with split-K's summing kernel (256 threads)
        assert la["threadIdx.x"] * la.get("threadIdx.y", 1) * la.get("threadIdx.z", 1) == cfgs[index].threads
        built = B.build(cand.sch.mod, target)
        assert len(built.device.kernels) == kernels
        assert all(k.spills == 0 for k in built.device.kernels), built.device.ptxas_log


def test_tuned_gemm_replays_the_saved_best(tmp_path, monkeypatch):
    """A saved best configuration (here: a classic trace, without measuring) is usable by name."""
    import tvm
    from tvm import s_tir

    from schedules import get, parse_workload
    from tuning import records as R
    from tuning.spaces import classic_template, knob_values

    wl = parse_workload("gemm:64x64x64")
    sch = s_tir.Schedule(tvm.IRModule({"main": wl.prim_func()}))
    classic_template(sch)
    knobs = knob_values(sch.trace, ["tile_y", "tile_x", "tile_k", "vector"])
    # the saved launch is only a note: the launch check reads the replayed trace (one thread per output)
    R.save_json(R.best_path(str(tmp_path), str(wl)),
                {"workload": str(wl), "run": "test", "time_ms": 1.0, "gflops": 1.0, "knobs": {},
                 "launch": {"blockIdx.x": 2, "threadIdx.x": 4096, "threadIdx.y": 8},
                 "trace": R.plain(sch.trace.as_json())})
    monkeypatch.setenv("SCHEDLAB_TUNED", str(tmp_path))

    spec = get("tuned_gemm")
    launch = spec.validate(wl)
    assert launch.threads == knobs["tile_y"] * knobs["tile_x"]
    built = spec.build(wl)
    tvm.ir.assert_structural_equal(built.mod, sch.mod)
    with pytest.raises(Exception, match="no tuned configuration"):
        spec.validate(parse_workload("gemm:128x64x64"))


@pytest.mark.gpu
def test_tune_tiled_on_the_gpu_beats_or_matches_its_hand_seed(tmp_path):
    """On a GPU: the tiled space's first trials are the hand-written steps' configuration, every
    candidate is checked before timing, the best is verified against float64 and replayable."""
    from tuning.tuner import TuneOptions, tune

    opts = TuneOptions(workload="gemm:512x512x512", space="tiled", strategy="random", trials=8, batch=8,
                       db=str(tmp_path), target="cuda", time_limit_s=120)
    s = tune(opts)
    assert s["trials"] == 8
    assert s["best"]["rel_error"] < 1e-5
    from tuning import records as R

    rows = R.trials(str(tmp_path), "gemm:512x512x512", s["run"])
    seed = rows[0]
    assert seed["knobs"]["tile_i"] == [4, 2, 16, 4] and seed["status"] == "ok"
    assert s["best"]["gflops"] >= seed["gflops"]


@pytest.mark.gpu
def test_tune_fast_on_the_gpu_starts_from_best_gemm(tmp_path):
    """On a GPU: the fast space's first trial is best_gemm's own configuration; the evolutionary
    search goes on from there, and its best is verified against float64."""
    from tuning import records as R
    from tuning.tuner import TuneOptions, tune

    wl = "gemm:512x512x1024"
    opts = TuneOptions(workload=wl, space="fast", strategy="evolutionary", trials=12, batch=6,
                       db=str(tmp_path), target="cuda", time_limit_s=180)
    s = tune(opts)
    assert s["trials"] == 12
    assert s["best"]["rel_error"] < 1e-5
    rows = R.trials(str(tmp_path), wl, s["run"])
    seed = rows[0]
    from schedules import dispatch, parse_workload

    _, chosen = dispatch.choose(parse_workload(wl), "fp32")  # best_gemm's configuration for the shape
    assert seed["status"] == "ok" and seed["knobs"]["block"] == f"{chosen.block_m}x{chosen.block_n}"
    assert seed["knobs"]["unroll"] == chosen.unroll
    assert s["best"]["gflops"] >= seed["gflops"]


def test_reselect_needs_a_gpu_and_says_so(tmp_path):
    """Without a GPU, --reselect refuses with one clear line and leaves the saved best alone."""
    proc = subprocess.run([sys.executable, "-m", "scripts.schedlab", "tune", "--db", str(tmp_path),
                           "--workload", "gemm:64x64x64", "--report-only", "--reselect", "3"],
                          env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("a GPU is present")
    assert proc.returncode != 0
    assert "no CUDA GPU" in proc.stderr
    assert not list(tmp_path.glob("best_*.json"))


class _FakeModule:
    """Stands in for a built module: ``time_evaluator`` returns ``per_run`` for every timed run and
    records how it was asked to time."""

    entry_name = "main"

    def __init__(self, per_run):
        self.per_run, self.calls = per_run, []

    def time_evaluator(self, name, dev, number, repeat, min_repeat_ms, cache_flush_bytes):
        self.calls.append(dict(number=number, repeat=repeat, flush=cache_flush_bytes, min_ms=min_repeat_ms))
        per_run = self.per_run

        class Result:
            results = [per_run] * repeat

        return lambda *args: Result()


class _Device:
    def sync(self):
        pass


def test_cold_timer_flushes_before_single_runs_and_spends_little_on_slow_candidates():
    """A fast kernel: probe, warm-up (unflushed, back to back), then `repeat` single flushed runs;
    a slow one: the probe and one more run, no warm-up."""
    from types import SimpleNamespace

    from tuning.measure import L2_FLUSH_BYTES, cold_costs

    config = SimpleNamespace(repeat=20)
    fast, slow = _FakeModule(30e-6), _FakeModule(1.5)
    fast_costs = cold_costs(fast, _Device(), config, [("a", "b", "c")])
    slow_costs = cold_costs(slow, _Device(), config, [("a", "b", "c")])
    assert len(fast_costs) == 20 and len(slow_costs) == 2
    probe, warmup, timed = fast.calls
    assert warmup["flush"] == 0 and warmup["min_ms"] > 0  # the clocks ramp up before anything is timed
    for c in (probe, timed, *slow.calls):
        assert c["number"] == 1 and c["min_ms"] == 0 and c["flush"] == L2_FLUSH_BYTES >= 128 << 20
    assert [c["repeat"] for c in slow.calls] == [1, 1]


def test_a_tuning_directory_keeps_one_timer(tmp_path):
    """Resuming with the other timer is refused (its times would not compare); a new directory, the
    same timer, or a directory without measured trials is fine; CPU targets always time warm."""
    from tuning.records import save_json
    from tuning.tuner import TuneOptions, check_timer, effective_timer

    ok_row = [{"status": "ok", "time_ms": 1.0}]
    cold = TuneOptions(db=str(tmp_path), target="cuda", timer="cold")
    check_timer(cold, ok_row)  # nothing recorded yet
    save_json(str(tmp_path / "provenance.json"), {"gpu": "x"})  # written before timers existed: warm
    with pytest.raises(ValueError, match="warm timer"):
        check_timer(cold, ok_row)
    check_timer(cold, [{"status": "build"}])  # no measured trial to mix with
    check_timer(TuneOptions(db=str(tmp_path), target="cuda", timer="warm"), ok_row)
    assert effective_timer(TuneOptions(target="llvm", timer="cold")) == "warm"
    with pytest.raises(ValueError, match="unknown timer"):
        effective_timer(TuneOptions(timer="lukewarm"))


def test_reselection_takes_each_runs_fastest_distinct_valid_configurations():
    from reports.experiments.tuned import reselect_candidates

    def row(run, key, ms, **kw):
        return {"run": run, "key": key, "time_ms": ms, "status": "ok", "trace": [["step"]], **kw}

    rows = [row("fast", "a", 1.0), row("fast", "b", 1.1), row("fast", "c", 1.2), row("fast", "bad", 0.5),
            row("default", "d", 2.0), row("default", "a", 0.9), row("default", "e", 3.0),
            row("classic", "f", 9.0), {"run": "fast", "key": "x", "status": "build"},
            {"run": "dlight", "key": "dlight", "time_ms": 0.1, "status": "ok"},
            {"status": "verify", "key": "bad", "passed": False}]
    picked = [(r["run"], r["key"]) for r in reselect_candidates(rows, 2)]
    assert picked == [("default", "a"), ("fast", "b"), ("fast", "c"), ("default", "d"), ("classic", "f")]
    # the hand seed is timed again however the tuner ranked it: marked in new logs ...
    rows.append(row("fast", "seed", 1.5, seed=True, trial=1))
    picked = reselect_candidates(rows, 2)
    assert (picked[-1]["key"], picked[-1]["seed"]) == ("seed", True) and len(picked) == 6
    # ... and, in logs from before the mark, trial 1 of a run over a seeded space
    old = [dict(r, space=r["run"], trial=n + 1) for n, r in enumerate(rows[:8]) if r["run"] != "fast"]
    old.append(row("fast", "first", 1.5, space="fast", trial=1))
    assert [r["key"] for r in reselect_candidates(old, 1) if r.get("seed")] == ["first"]
    # the dispatch space measures 8 seeds first: only each run's first (the dispatcher's choice) when asked
    seeded = [row("dispatch", f"s{n}", 2.0 + n, seed=True, trial=n) for n in range(1, 9)] + [row("dispatch", "t", 1.0,
                                                                                                 trial=9)]
    assert [(r["key"], r["seed"]) for r in reselect_candidates(seeded, 1, seeds=1)] == [("t", False), ("s1", True)]
    # one configuration at three unroll depths counts once (its fastest depth): the next one is timed too
    twins = [row("dispatch", f"u{u}", 1.0 + u / 1e4, knobs={"split_k": "16", "unroll": u}) for u in (16, 256, 1024)]
    other = row("dispatch", "o", 1.5, knobs={"split_k": "32", "unroll": 256})
    assert [r["key"] for r in reselect_candidates(twins + [other], 2)] == ["u16", "o"]


def test_the_final_choice_table_compares_every_run_in_the_harness(tmp_path):
    from reports.views.tuning_report import _reselect_table, slug
    from tuning.records import save_json

    wl = "gemm:64x64x64"
    cands = [{"rank": 1, "run": "fast", "tuner_ms": 0.010, "harness_ms": 0.020, "status": "ok", "rel_error": 1e-7,
              "knobs": {"block": "64x64"}},
             {"rank": 2, "run": "fast", "tuner_ms": 0.011, "harness_ms": 0.016, "status": "ok", "rel_error": 1e-7,
              "knobs": {"block": "32x64"}},
             {"rank": 3, "run": "default", "tuner_ms": 0.012, "harness_ms": 0.032, "status": "ok", "rel_error": 1e-7,
              "knobs": {}},
             {"rank": 4, "run": "classic", "tuner_ms": 0.05, "harness_ms": None, "status": "error",
              "error": "timed out", "knobs": {}}]
    save_json(str(tmp_path / f"reselect_{slug(wl)}.json"), {"workload": wl, "per_run": 2, "candidates": cands})
    text = "\n".join(_reselect_table(str(tmp_path), wl))
    chosen = [ln for ln in text.splitlines() if "(chosen" in ln]
    assert len(chosen) == 1 and chosen[0].startswith("| fast") and "0.016" in chosen[0]
    default = next(ln for ln in text.splitlines() if re.match(r"^\|\s*default\s*\|", ln))
    assert "0.032" in default and "0.50×" in default and f"{2 * 64**3 / 0.032e-3 / 1e12:.2f}" in default
    assert "error: timed out" in text


def test_the_tuner_builds_cuda_with_the_labs_compiler(monkeypatch):
    """A candidate the tuner times must be the binary the harness times: the tuner's build
    registers the lab's compile hook (TVM's own passes ptxas other flags), and the harness's hook
    compiles through the same function."""
    import tvm_ffi

    from reports.engine import build as B
    from schedules import parse_workload, get
    from tuning import cuda_compile as C
    from tuning.measure import build_in_target_scope
    from tuning.tuner import make_target

    calls = []
    real = C.compile_to_cubin
    monkeypatch.setattr(C, "compile_to_cubin", lambda code, arch: calls.append(arch) or real(code, arch))
    wl = parse_workload("gemm:64x64x64")
    spec = get("shared_cache_gemm")
    mod = spec.build(wl, spec.config()).mod
    try:
        build_in_target_scope(mod, make_target("cuda", "sm_90"), None)  # no driver: TVM keeps the source
        hook = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
        code = B.build(spec.build(wl, spec.config())).device.cuda
        assert calls == ["sm_90"]  # the harness's build went through the shared function
        assert bytes(hook(code))[:4] == b"\x7fELF" and calls == ["sm_90", "sm_90"]  # and so does the tuner's hook
    finally:  # this process's later builds report through the harness's hook again
        tvm_ffi.register_global_func("tvm_callback_cuda_compile", B._HOOK, override=True)
    assert C.PTXAS_FLAGS == ("-v", "-O3") and "register-usage-level" not in " ".join(C.PTXAS_FLAGS)


@pytest.mark.parametrize("shape", ["1024x512x2048", "4096x4096x4096", "100x300x150"])
def test_the_fast_spaces_seed_is_best_gemms_own_kernel(shape):
    """The search starts from the dispatcher's choice: the first seed's CUDA is best_gemm's to the
    byte (the unroll knob is annotated where the hand step puts its own), so the tuner's final
    choice in the harness cannot be a look-alike that is slower than best_gemm. At 100×300×150 the
    choice keeps its K tiles in a cp.async ring, which the tuner's builder injects as the harness
    does (tuning.measure.module_pass_config)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from reports.engine import build as B
    from schedules import dispatch, get, parse_workload
    from schedules.tensor_intrinsics import import_tensor_intrinsics
    from tuning.measure import module_pass_config
    from tuning.spaces import get_space, sample_insts
    from tuning.tuner import candidate_from_decisions, make_target

    import_tensor_intrinsics()  # what TuneContext imports, at a tenth of the cost under pytest
    B.setup_cuda_env()
    target = make_target("cuda", "sm_90")
    wl = parse_workload(f"gemm:{shape}")
    mod = tvm.IRModule({"main": wl.prim_func()})
    space = get_space("fast")
    ctx = ms.TuneContext(mod, target=target, space_generator=space.generator(target),
                         search_strategy=ms.search_strategy.ReplayTrace(), task_name="t", num_threads=1)
    seeds = space.seeds(wl)
    assert len(seeds) >= 2  # the model's top choices, not only its first
    index, decisions = seeds[0]
    trace = ctx.generate_design_space()[index].trace
    cand, _, failed = candidate_from_decisions(mod, list(ctx.space_generator.postprocs), trace,
                                               sample_insts(trace), decisions)
    assert failed is None
    spec = get("best_gemm")
    hand = B.build_config(spec.build(wl, spec.config()), spec.config(), target, wl)
    seed = B.build(cand.sch.mod, target, pass_config=module_pass_config(cand.sch.mod))
    assert seed.device.cuda == hand.device.cuda
    ring = dispatch.choose(wl, "fp32")[1].async_copy
    copies = re.compile(r"cp\.async\.c[ag]\.shared")  # the copy instruction (not only commit/wait groups)
    assert bool(copies.search(seed.device.cuda)) == ring and ring == (shape == "100x300x150")
    if ring:  # and the tuner's own builder injects the copies too
        import tvm_ffi

        from tuning.measure import build_in_target_scope

        try:
            built = build_in_target_scope(cand.sch.mod, target, None)
        finally:  # this process's later builds report through the harness's hook again
            tvm_ffi.register_global_func("tvm_callback_cuda_compile", B._HOOK, override=True)
        assert copies.search(built.imports[0].inspect_source())


@pytest.mark.parametrize("workload", ["gemm:24x40x56", "gemm:24x40x56:float16:out=float16:bias:gelu_tanh:residual"])
def test_the_tuners_float64_checks_run_on_a_built_kernel(workload):
    """The checks the tuner's workers run on a candidate (the sampled check before timing, the full
    one on its best), on a kernel built for the CPU: they take the workload (its epilogue and output
    type), pass a right product and fail a wrong one."""
    import numpy as np
    import tvm

    from schedules import parse_workload
    from tuning.measure import WrongResult, _host_dtype, full_error, sampled_check, verify_evaluator_local

    wl = parse_workload(workload)
    rt_mod = tvm.compile(tvm.IRModule({"main": wl.prim_func()}), target="llvm").mod
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.zeros(shape, dtype=_host_dtype(dtype)), dev) for shape, dtype in wl.arg_shapes()]
    assert verify_evaluator_local(rt_mod, dev, None, [args], workload)[0] < 1e-5
    assert sampled_check(rt_mod, dev, args, workload=workload) < 1e-5
    assert full_error(rt_mod, dev, args, workload) < 1e-5
    args[0].copyfrom(np.ones(args[0].shape, dtype=_host_dtype(args[0].dtype)))  # the inputs now differ from ...
    wrong = tvm.compile(tvm.IRModule({"main": parse_workload("gemm:24x40x56:float16:out=float16:bias:relu:residual")
                                      .prim_func()}), target="llvm").mod if wl.has_epilogue else None
    if wrong is not None:  # ... and the kernel computes another epilogue: both checks see it
        assert full_error(wrong, dev, args, workload) > 1e-3
        with pytest.raises(WrongResult):
            sampled_check(wrong, dev, args, workload=workload)


def test_the_time_limit_bounds_the_whole_command_and_keeps_what_was_measured(tmp_path):
    """``--time-limit 40``: the command (its imports, the worker processes' start-up, the search, the
    check, the report) ends within it, plus a margin of 6 s for the interpreter's exit and a loaded
    machine's scheduling; the search is cut with work in flight (a batch being built or timed), and
    every trial recorded before the cut is in MetaSchedule's database too. The directory's recorded
    costs (as an earlier command would have left them) keep the time set aside for the steps after
    the search small; the command records what it measured for the next one. (On a machine so loaded
    that the start-ups alone take the search's share, nothing is measured: only the limit is checked.)"""
    from tuning import records as R

    db = tmp_path / "db"
    os.makedirs(db)
    seeded = {"build_s": 0.5, "run_s": 0.5, "report_s": 3.0, "start_s": 3.0}
    (db / "costs.json").write_text(json.dumps(seeded))
    # 768³ on the CPU: each of the 36 trials times a kernel of about a GFLOP, so that no machine finishes the
    # space within the limit (at 384³ an idle machine ran all 36 in 29 s, and the limit cut nothing)
    cmd = [sys.executable, "-m", "scripts.schedlab", "tune", "--target", "llvm", "--space", "classic", "--workload",
           "gemm:768x768x768", "--trials", "36", "--batch", "2", "--builders", "1", "--db", str(db), "--time-limit",
           "40", "--quiet"]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    wall = time.time() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    assert wall < 40 + 6, (wall, done.stderr[-2000:])
    summary = json.loads((db / "last_summary.json").read_text())
    assert summary["command"]["limit_s"] == 40 and summary["command"]["elapsed_s"] < 40, summary["command"]
    assert "stopped: the command's time limit" in done.stdout, done.stdout
    path = db / R.TRIALS_FILE
    rows = [r for r in (json.loads(x) for x in _lines(path)) if r.get("status") != "verify"] if path.exists() else []
    from tvm.s_tir import meta_schedule as ms

    assert len(ms.database.JSONDatabase(work_dir=str(db))) == len(rows)  # every recorded trial, nothing cut short
    costs = json.loads((db / "costs.json").read_text())
    assert costs["start_s"] != seeded["start_s"]  # this command's, for the next one
    if not rows:
        pytest.skip("nothing was measured before the cut: the start-ups took the search's share on this loaded machine")
    assert len(rows) < 36 and "work in flight cut short" in done.stdout, done.stdout
    assert costs["build_s"] != seeded["build_s"] and costs["run_s"] != seeded["run_s"]


def test_the_dispatch_space_starts_from_the_dispatchers_top_candidates_and_searches_their_knobs():
    """The dispatch space: the dispatcher's top 8 (best_gemm's own choice first), then candidates one or
    two knobs away from one of them (split-K, block tile, K tile, ring depth), in the model's order."""
    from schedules import dispatch, parse_workload
    from tuning.spaces import DISPATCH_SEEDS, FAST_UNROLL, dispatch_candidates, dispatch_seeds, simt_knobs

    wl = parse_workload("gemm:346x2154x357")
    cands = dispatch_candidates(wl)
    ranked = [e for e in dispatch.rank(wl, "fp32") if e.candidate.family == "simt"]
    assert [c.candidate for c in cands[:DISPATCH_SEEDS]] == [e.candidate for e in ranked[:DISPATCH_SEEDS]]
    assert cands[0].candidate == dispatch.rank(wl, "fp32")[0].candidate  # best_gemm's choice
    seeds = [simt_knobs(c.config) for c in cands[:DISPATCH_SEEDS]]
    apart = [min(sum(simt_knobs(c.config)[k] != v for k, v in seed.items()) for seed in seeds)
             for c in cands[DISPATCH_SEEDS:]]
    assert apart == sorted(apart) and set(apart) == {1, 2} and len(cands) > 100
    varied = set()  # the knob in which each neighbour one knob away differs from its seed
    for c, d in zip(cands[DISPATCH_SEEDS:], apart):
        mine = simt_knobs(c.config)
        if d == 1:
            varied |= {k for seed in seeds if sum(mine[x] != v for x, v in seed.items()) == 1
                       for k, v in seed.items() if mine[k] != v}
    assert {"split_k", "tile", "block_k", "pipeline"} <= varied, varied
    times = [c.time_us for c, d in zip(cands[DISPATCH_SEEDS:], apart) if d == 1]
    assert times == sorted(times)  # the model's order within a distance
    assert dispatch_seeds(wl) == [(n, [FAST_UNROLL.index(256)]) for n in range(DISPATCH_SEEDS)]


def test_the_dispatch_space_puts_simt_tiles_beside_a_matrix_vector_choice():
    """1x148x92 (a fresh draw's worst fp32 shape): best_gemm's choice is a GEMV kernel, which the
    dispatch space cannot tune; the space then starts from the SIMT tiles the model ranks highest."""
    from schedules import dispatch, parse_workload
    from tuning.spaces import DISPATCH_SEEDS, dispatch_candidates, dispatch_configs

    wl = parse_workload("gemm:1x148x92")
    assert dispatch.rank(wl, "fp32")[0].candidate.family == "gemv"
    cands = dispatch_candidates(wl)
    assert cands and all(c.candidate.family == "simt" for c in cands)
    times = [c.time_us for c in cands[:DISPATCH_SEEDS]]
    assert times == sorted(times) and len(dispatch_configs(wl)) > DISPATCH_SEEDS


def test_the_ordered_search_measures_structures_in_order_and_expands_each_new_best():
    """Each design space once, in order, at its first decisions; the other decisions of a design space
    right after it measures fastest so far; the rest of them once every design space was measured."""
    from tuning.searches import OrderedSearch

    class Space:
        def __init__(self, n):
            self.trace = n

    made = []

    def make(mod, postprocs, trace, insts, combo):
        cand = (trace, tuple(combo))
        made.append(cand)
        return cand, trace, None

    search = OrderedSearch([Space(n) for n in range(3)], None, [], lambda n, t, i: [0], lambda t: [[0], [1], [2]],
                           make, lambda t: [])
    first, _ = search.generate(2)
    assert first == [(0, (0,)), (1, (0,))]
    search.notify(first, [2.0, 1.0])  # design space 1 is the fastest: its other decisions come next
    second, _ = search.generate(3)
    assert second == [(1, (1,)), (1, (2,)), (2, (0,))]
    search.notify(second, [None, 3.0, 0.5])  # 2 is faster still
    third, _ = search.generate(10)
    assert third == [(2, (1,)), (2, (2,)), (0, (1,)), (0, (2,))]
    assert search.generate(5) == ([], [])


def test_the_report_says_how_far_tuning_moved_the_dispatchers_choice(tmp_path):
    """In the tuner's timer (the dispatch run's first seed against its best: the ratio, the trials, the
    search's time) and in the harness (best_gemm, the tuned best and cuBLAS, each as % of cuBLAS), in
    the Markdown report and its JSON; the steps a time limit left out are named."""
    from reports.views.tuning_report import DISPATCHER_FILE, slug, write_report
    from tuning import records as R

    wl, db = "gemm:64x64x64", str(tmp_path)

    def trial(n, ms, **kw):
        return {"run": "dispatch/ordered", "workload": wl, "space": "dispatch", "trial": n, "key": f"k{n}", "status": "ok",
                "time_ms": ms, "gflops": 2 * 64**3 / ms / 1e6, "knobs": {"split_k": str(n)}, "elapsed_s": 10.0 * n, **kw}

    for row in (trial(1, 0.04, seed=True), trial(2, 0.05, seed=True), trial(3, 0.025), trial(4, 0.03)):
        R.append_jsonl(os.path.join(db, R.TRIALS_FILE), row)
    R.save_json(os.path.join(db, DISPATCHER_FILE.format(slug(wl))), {
        "workload": wl, "selected_from": 3, "provenance": {"gpu": "NVIDIA H200", "date": "today"},
        "best_gemm": {"status": "ok", "time_ms": 0.05, "pct_cublas": 60.0, "chosen": "split_k_gemm [simt 64x64]"},
        "tuned_gemm": {"status": "ok", "time_ms": 0.031, "pct_cublas": 96.8}, "cublas": {"status": "ok", "time_ms": 0.03}})
    command = {"limit_s": 300.0, "elapsed_s": 287.0, "trials": 4, "steps": {"check": "done", "hand": "skipped: no time"}}
    paths = write_report(db, wl, os.path.join(db, "report"), command=command)
    text = open(paths["markdown"]).read()
    section = text[text.index("## How far tuning moved the dispatcher's choice"):]
    line = next(ln for ln in section.splitlines() if ln.startswith("| dispatch/ordered"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:7] == ["0.04", "0.025", "1.60×", "3", "4", "40"], cells  # from, to, ratio, at, trials, seconds
    assert "60.0% of cuBLAS" in section and "96.8% of cuBLAS" in section and "1.61× (0.05 ms → 0.031 ms)" in section
    assert "287 s of wall time" in section and "time limit 300 s" in section and "hand: skipped: no time" in section
    from reports.views.page import tuning_page

    page = next(t for t in tuning_page(db, wl, os.path.join(db, "report"))["tables"] if t["id"] == "dispatcher")
    assert [r[6] for r in page["rows"]] == ["1.60×", "1.61×"] and page["rows"][1][5] == 96.8
    saved = json.load(open(paths["markdown"].replace(".md", ".json")))
    move = saved["dispatcher_move"]
    assert move["tuner"][0]["speedup"] == pytest.approx(1.6) and move["tuner"][0]["trials"] == 4
    assert move["harness"]["tuned_pct_cublas"] == 96.8 and saved["command"]["elapsed_s"] == 287.0


def test_tune_random_tables_the_worst_shapes_from_their_tuning_directories(tmp_path):
    """tune-random's rows: the k fp32 shapes furthest below cuBLAS, each with the dispatcher's and the
    tuned kernel's % of cuBLAS from its tuning command's harness comparison, the wall time (over the
    limit said so), the trials; an earlier command of the same draw (--ranks) keeps its rows."""
    import pandas as pd

    from reports.experiments import tune_random as TR
    from tuning import records as R

    df = pd.DataFrame([{"workload": "gemm:346x2154x357", "name": "best_gemm", "precision": "fp32", "pct_cublas": 67.0},
                       {"workload": "gemm:1892x1042x7208", "name": "best_gemm", "precision": "fp32", "pct_cublas": 70.0},
                       {"workload": "gemm:64x64x64", "name": "best_gemm", "precision": "fp32", "pct_cublas": 99.0},
                       {"workload": "gemm:346x2154x357", "name": "cublas", "precision": "fp32", "pct_cublas": 100.0}])
    worst = TR.worst_fp32(df, 2)
    assert list(worst["workload"]) == ["gemm:346x2154x357", "gemm:1892x1042x7208"]
    db = str(tmp_path / "tune")
    os.makedirs(db)
    R.save_json(os.path.join(db, "dispatcher_gemm_346x2154x357.json"), {
        "best_gemm": {"status": "ok", "time_ms": 0.1, "pct_cublas": 66.0}, "cublas": {"status": "ok", "time_ms": 0.066},
        "tuned_gemm": {"status": "ok", "time_ms": 0.068, "pct_cublas": 97.1, "run": "dispatch/ordered"}})
    R.save_json(os.path.join(db, "last_summary.json"), {"runs": [{"trials": 150}], "command": {"elapsed_s": 296.0}})
    row = TR.shape_row(worst.iloc[0].to_dict(), "gemm:346x2154x357", db, {"code": 0, "wall_s": 301.5, "error": ""}, 132)
    assert (row["dispatcher_pct_cublas"], row["tuned_pct_cublas"], row["trials"]) == (66.0, 97.1, 150)
    assert "short K" not in row["class"] and row["bench_pct_cublas"] == 67.0
    info = {"provenance": {"gpu": "NVIDIA H200", "tvm": "0.27", "commit": "abc", "date": "today"}, "random": 100,
            "seed": 0, "bench": "out/r", "time_limit_s": 300.0, "reselect": 3}
    text = TR.markdown(info, [row])
    assert "1 of 1 shapes tuned to ≥ 95% of cuBLAS" in text and "(1 over it)" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| 346x2154x357"))
    assert "97.1" in line and "1.47×" in line and "302 (over)" in line
    path = tmp_path / "tune_random.json"
    path.write_text(json.dumps({**info, "shapes": [row]}))
    assert TR.earlier_rows(str(path), info) == [json.loads(json.dumps(row))]
    assert TR.earlier_rows(str(path), {**info, "seed": 1}) == []
    assert TR.parse_ranks("2", 5) == {2} and TR.parse_ranks(None, 3) == {1, 2, 3}
    with pytest.raises(ValueError, match="between 1 and --worst 5"):
        TR.parse_ranks("6", 5)


@pytest.mark.gpu
def test_tune_with_a_time_limit_on_the_gpu_says_how_far_it_moved_the_dispatchers_choice(tmp_path):
    """On a GPU: ``schedlab tune --time-limit 120 --reselect 2`` on a shape of a weak class (short K,
    a thin block tile chosen) ends within its limit, starts from the dispatcher's choice, and times
    best_gemm, the tuned best and cuBLAS side by side in the harness; the tuned best is never slower
    there than best_gemm's own configuration (it is among the reselected), and the report and the
    command's last lines say how far tuning moved the choice."""
    wl, db = "gemm:346x2154x357", tmp_path / "db"
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "scripts.schedlab", "tune", "--workload", wl, "--time-limit", "120",
                           "--reselect", "2", "--db", str(db), "--quiet"], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    wall = time.time() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    assert wall < 120 + 6, (wall, done.stderr[-3000:])
    compared = json.loads((db / "dispatcher_gemm_346x2154x357.json").read_text())
    assert all(compared[k]["status"] == "ok" for k in ("best_gemm", "tuned_gemm", "cublas")), compared
    assert compared["tuned_gemm"]["time_ms"] <= compared["best_gemm"]["time_ms"] * 1.05  # timing noise only
    assert compared["tuned_gemm"]["pct_cublas"] > 0 and compared["tuned_gemm"]["rel_error"] < 1e-5
    from tuning import records as R

    first = R.trials(str(db), wl, "dispatch/ordered")[0]
    from schedules import dispatch, parse_workload

    chosen = dispatch.rank(parse_workload(wl), "fp32")[0].config
    assert first["seed"] and first["knobs"]["block"] == f"{chosen.block_m}x{chosen.block_n}"
    report = (db / "report" / "tuning_gemm_346x2154x357.md").read_text()
    assert "## How far tuning moved the dispatcher's choice" in report and "% of cuBLAS" in report
    assert "in schedlab run's harness: best_gemm" in done.stdout, done.stdout


def test_a_time_limited_tune_is_ended_by_its_time_not_by_the_default_trial_count():
    """``schedlab tune --time-limit 300`` without ``--trials`` searches until the time (or the space)
    runs out: the default count of 64 ended such a search at 135 s of 300 on a GPU, short of what the
    rest of the time would have measured. --trials, where given, still bounds it; without a time limit
    the default stays 64."""
    from scripts.schedlab import make_parser
    from scripts.tune_cmd import DEFAULT_TRIALS, TIME_LIMITED_TRIALS, trial_budget
    from tuning.spaces import DISPATCH_SIZE

    parse = make_parser().parse_args
    assert trial_budget(parse(["tune"])) == DEFAULT_TRIALS == 64
    assert trial_budget(parse(["tune", "--time-limit", "300"])) == TIME_LIMITED_TRIALS > DISPATCH_SIZE
    assert trial_budget(parse(["tune", "--time-limit", "300", "--trials", "20"])) == 20
    assert trial_budget(parse(["tune", "--trials", "7"])) == 7
