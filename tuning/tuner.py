"""The tuner: search a space for the fastest configuration of a workload, measuring candidates with
MetaSchedule's builder (parallel local processes) and runner (local, or every RPC server under a
tracker key), recording every trial so that a run can be resumed.

Strategies:
- ``exhaustive``: every configuration of the space (MetaSchedule has no such strategy: the
  decisions of the space's sampling instructions are enumerated, each set replayed onto the
  workload, postprocessed and measured like any other candidate); for small spaces (``classic``).
- ``random``: MetaSchedule's replay-trace (random decisions).
- ``evolutionary``: MetaSchedule's evolutionary search guided by a cost model (``--cost-model``).
- ``ordered``: the design spaces in the space's own order, the fastest ones' other decisions right
  after them (:class:`tuning.searches.OrderedSearch`; the ``dispatch`` space's default).

A time limit for the whole command (``search_end``, ``verify_by``: set by ``schedlab tune
--time-limit``) cuts the search at its moment, builds and the candidate being timed included; what
was measured before it is recorded (:mod:`tuning.deadline`).

Resuming: a run is named ``space/strategy[/cost model]``; its trials are lines of
``DIR/trials.jsonl``. A later run with the same name continues until it has ``trials`` of them, and
any candidate already measured in that space (by any run) is answered from the log, not measured
again. The search strategy is told those answers, so the search itself continues rather than
restarts.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from schedules import parse_workload
from schedules.tensor_intrinsics import import_tensor_intrinsics
from schedules.reference import output_tolerance
from schedules.tuned import launch_of

from . import database as DB
from . import records as R
from .cost_models import make_cost_model
from .cuda_compile import cuda_available, cuda_target, setup_cuda_env
from .deadline import Background, Cutoff, check_seconds, runner_cut
from .measure import (make_parallel_builder, checked_evaluator_local, checked_evaluator_rpc, cold_evaluator_local,
                      cold_evaluator_rpc, classify_error, verify_evaluator_local, verify_evaluator_rpc, FULL_TOLERANCE,
                      TIMERS)
from .names import STRATEGIES
from .searches import ExhaustiveSearch, OrderedSearch, candidate_from_decisions
from .spaces import enumerate_decisions, get_space, knob_values, sample_insts
from .tracker import count_rpc_servers, parse_tracker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# set by ``schedlab tune``'s Ctrl-C handler: the search stops before its next batch, and a batch that
# was being measured is not recorded (its build or run processes may have been killed with it)
INTERRUPTED = threading.Event()
FAILED_SECS = 1e10  # what MetaSchedule records for a failed candidate


@dataclass
class TuneOptions:
    workload: str = "gemm:1024x512x2048"
    space: str = "tiled"
    strategy: str = "evolutionary"
    cost_model: str = "ridge"
    trials: int = 64
    db: str = "out/tune"
    target: str = "cuda"  # cuda | llvm
    arch: str | None = None
    batch: int = 16  # candidates per round
    builders: int | None = None  # parallel build processes (default: the CPU count)
    rpc_tracker: str | None = None  # HOST:PORT
    rpc_key: str | None = None
    rpc_servers: int | None = None  # measure on this many servers at once (default: all under the key)
    build_timeout: float = 60.0
    run_timeout: float = 30.0
    timer: str = "cold"  # cold: L2 flushed before every timed run (as the harness); warm: MetaSchedule's
    number: int = 3  # warm timer: runs per repeat (at least min_repeat_ms long), repeats
    repeat: int = 3
    min_repeat_ms: int = 20
    cold_repeat: int = 20  # cold timer: at most this many timed runs (fewer for slow candidates)
    seed: int = 0
    time_limit_s: float | None = None  # the search's own limit (seconds from its start)
    search_end: float | None = None  # the moment (time.time()) the search stops, its work in flight cut
    verify_by: float | None = None  # the moment the float64 check of the best must be over (else skipped)
    population: int = 256
    verify: bool = True
    seed_hand: bool = True  # measure the space's hand-written configurations first
    run_name: str | None = None

    def name(self) -> str:
        if self.run_name:
            return self.run_name
        base = f"{self.space}/{self.strategy}"
        return base + (f"/{self.cost_model}" if self.strategy == "evolutionary" else "")


# --- environment, target, builder, runner ------------------------------------------------------
def setup_env():
    """Worker processes inherit these: the repository on the path (they unpickle our functions),
    TVM's nvcc compile mode and a real CUDA root."""
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in paths if p])
    setup_cuda_env()


def make_target(kind: str = "cuda", arch: str | None = None):
    if kind == "cuda":
        return cuda_target(arch)
    if kind == "llvm":
        return tvm.target.Target({"kind": "llvm", "num-cores": max(1, min(4, os.cpu_count() or 1))})
    raise ValueError(f"unknown target {kind!r} (cuda or llvm)")


def check_device(opts: TuneOptions) -> None:
    """Refuse (one line) to tune for a device that is not here: on a host without a GPU every CUDA
    candidate would fail to load, and the log would call those trials done. Over RPC the servers
    are the device (the tracker is asked when the runner is made)."""
    if opts.target == "cuda" and not opts.rpc_tracker and not cuda_available():
        raise ValueError("--target cuda: this machine has no CUDA GPU to measure on: run on a GPU machine, measure "
                         "on remote GPUs with --rpc-tracker/--rpc-key, or tune for the CPU with --target llvm")


def make_builder(opts: TuneOptions, stop=None):
    """Parallel local build processes that live for the whole run (see measure.make_parallel_builder);
    ``stop``: Ctrl-C's event, or a Cutoff that also ends them at a time limit."""
    return make_parallel_builder(opts.builders or os.cpu_count() or 1, opts.build_timeout, stop=stop or INTERRUPTED)


def effective_timer(opts: TuneOptions) -> str:
    """The timer the trials are measured with: ``opts.timer`` on CUDA; CPU targets time warm."""
    if opts.timer not in TIMERS:
        raise ValueError(f"unknown timer {opts.timer!r} (known: {', '.join(TIMERS)})")
    return opts.timer if opts.target == "cuda" else "warm"


def make_runner(opts: TuneOptions, verify: bool = False):
    cold = effective_timer(opts) == "cold" and not verify
    if cold:
        config = ms.runner.EvaluatorConfig(number=1, repeat=opts.cold_repeat, min_repeat_ms=0,
                                           enable_cpu_cache_flush=False)
        evaluators = cold_evaluator_local, cold_evaluator_rpc
    else:
        config = ms.runner.EvaluatorConfig(number=opts.number, repeat=opts.repeat,
                                           min_repeat_ms=opts.min_repeat_ms, enable_cpu_cache_flush=False)
        evaluators = ((verify_evaluator_local, verify_evaluator_rpc) if verify
                      else (checked_evaluator_local, checked_evaluator_rpc))
    # the workload rides with the checks: an epilogue or an output type is checked against its own reference
    evaluators = tuple(functools.partial(e, workload=opts.workload) for e in evaluators)
    if opts.rpc_tracker:
        if not opts.rpc_key:
            raise ValueError("--rpc-tracker needs --rpc-key")
        host, port = parse_tracker(opts.rpc_tracker)
        servers = opts.rpc_servers or count_rpc_servers(host, port, opts.rpc_key)
        if servers < 1:
            raise ValueError(f"no RPC server is registered under key {opts.rpc_key!r} at {opts.rpc_tracker}")
        rpc_config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=opts.rpc_key,
                                         session_timeout_sec=int(max(opts.run_timeout, 10)))
        return ms.runner.RPCRunner(rpc_config=rpc_config, evaluator_config=config, max_workers=servers,
                                   f_run_evaluator=evaluators[1]), servers
    return ms.runner.LocalRunner(timeout_sec=opts.run_timeout, evaluator_config=config,
                                 f_run_evaluator=evaluators[0]), 1


def _strategy(opts: TuneOptions):
    if opts.strategy == "random":
        return ms.search_strategy.ReplayTrace(max_fail_count=200)
    if opts.strategy == "evolutionary":
        return ms.search_strategy.EvolutionarySearch(
            population_size=opts.population, init_min_unmeasured=min(50, opts.population // 2))
    if opts.strategy in ("exhaustive", "ordered"):
        return ms.search_strategy.ReplayTrace()  # unused; the context needs one
    raise ValueError(f"unknown strategy {opts.strategy!r} (known: {', '.join(STRATEGIES)})")


def ordered_search(space, wl, ctx, design_spaces, mod) -> OrderedSearch:
    """The ``ordered`` strategy over ``design_spaces``: each first at its seed's decisions, or, where it
    has no seed, at the first seed's (for the fast bodies: unroll 256, the hand-written steps' depth),
    or at the decisions it was generated with."""
    seeds = [s if isinstance(s, tuple) else (0, s) for s in (space.seeds(wl) if space.seeds else [])]
    by_index = {index: list(combo) for index, combo in reversed(seeds)}
    default = list(seeds[0][1]) if seeds else None

    def first(n, trace, insts):
        if n in by_index and len(by_index[n]) == len(insts):
            return by_index[n]
        if default is not None and len(default) == len(insts):
            return default
        out = []
        for inst in insts:
            d = trace.get_decision(inst)
            out.append(int(d) if inst.kind.name == "SampleCategorical" else [int(x) for x in d])
        return out

    return OrderedSearch(design_spaces, mod, list(ctx.space_generator.postprocs), first, enumerate_decisions,
                         candidate_from_decisions, sample_insts)


def seed_candidates(space, wl, ctx, design_spaces, mod):
    """The space's seed configurations (the hand-written steps' tile sizes, AutoTVM-style: the
    template's default config measured first) as candidates."""
    if space.seeds is None or not design_spaces:
        return []
    out = []
    for seed in space.seeds(wl):
        # a decision list for design space 0, or (design space index, decision list)
        index, combo = seed if isinstance(seed, tuple) else (0, seed)
        if index >= len(design_spaces):
            continue
        trace = design_spaces[index].trace
        insts = sample_insts(trace)
        if len(combo) != len(insts):
            continue
        try:
            cand, _, failed = candidate_from_decisions(mod, list(ctx.space_generator.postprocs), trace, insts, combo)
        except Exception:  # noqa: BLE001 - a seed that does not fit this workload
            continue
        if cand is not None:
            out.append(cand)
    return out


# --- the main loop -----------------------------------------------------------------------------
@dataclass
class RunState:
    run: str
    trials: int
    done: int = 0
    measured: int = 0
    reused: int = 0
    failed: int = 0
    best_gflops: float = 0.0
    best_ms: float | None = None
    started: float = field(default_factory=time.time)
    keys: set = field(default_factory=set)
    elapsed_s: float = 0.0
    last_trial: int = 0  # the highest trial number of the run (a lost log line leaves a gap, not a repeat)


def tune(opts: TuneOptions, on_trial=None) -> dict:
    """Run (or resume) one tuning run. ``on_trial(row, state)`` is called after every trial.
    Returns a summary: the run's best (verified) trial, counts and trials per minute."""
    setup_env()
    wl = parse_workload(opts.workload)
    if getattr(wl, "layout", "nn") != "nn" or getattr(wl, "batched", False):
        raise ValueError(f"schedlab tune tunes nn GEMMs without a batch (its spaces assume A M×K, B K×N), not {wl}")
    wl_text = str(wl)
    check_device(opts)
    target = make_target(opts.target, opts.arch)
    space = get_space(opts.space)
    func = wl.prim_func()
    mod = tvm.IRModule({"main": func})
    run = opts.name()
    check_directory(opts, wl_text)  # before anything is written there
    os.makedirs(opts.db, exist_ok=True)
    database = DB.open_database(opts.db, say=log)
    past = R.trials(opts.db, wl_text)
    mine = [r for r in past if r.get("run") == run and r.get("status") != "verify"]
    cache = {r["key"]: r for r in past if r.get("space") == opts.space and r.get("key")
             and r.get("status") not in ("invalid", "verify")}
    state = RunState(run, opts.trials, done=len(mine), keys={r["key"] for r in mine if r.get("key")},
                     last_trial=max((r.get("trial", 0) for r in mine), default=0))
    for r in mine:
        if r.get("status") == "ok" and r["gflops"] > state.best_gflops:
            state.best_gflops, state.best_ms = r["gflops"], r["time_ms"]
    prior_elapsed = max((r.get("elapsed_s", 0.0) for r in mine), default=0.0)
    remaining = opts.trials - state.done
    cut = Cutoff(INTERRUPTED, opts.search_end)
    builder = runner = None
    if remaining > 0 and opts.search_end:
        # under a time limit the build and run processes start up (TVM's import in each) while the search is
        # prepared; else one after the other, as before (a Ctrl-C then never lands in two start-ups at once)
        builder = make_builder(opts, cut)
        builder.start()
        runner = Background(lambda: make_runner(opts))
    elif remaining > 0:
        builder = make_builder(opts, cut)
    try:
        return _prepare(opts, wl, mod, func, target, space, run, database, mine, cache, state, prior_elapsed,
                        remaining, cut, builder, runner, on_trial)
    finally:
        if builder is not None:
            builder.shutdown()
        if runner is not None:
            runner.join()


def _prepare(opts, wl, mod, func, target, space, run, database, mine, cache, state, prior_elapsed, remaining, cut,
             builder, runner, on_trial):
    """The search's context and design spaces, MetaSchedule's databases, then the search (or, with
    nothing left to do, only the final check)."""
    wl_text = str(wl)
    import_tensor_intrinsics()  # what TuneContext imports, at a tenth of the cost
    ctx = ms.TuneContext(mod, target=target, space_generator=space.generator(target),
                         search_strategy=_strategy(opts), task_name=run,
                         rand_state=opts.seed + 7919 * len(mine), num_threads=os.cpu_count() or 1)
    design_spaces = ctx.generate_design_space()
    cost_model = make_cost_model(opts.cost_model, opts.seed) if opts.strategy == "evolutionary" else None
    workload_entry = database.commit_workload(mod)
    memory = ms.database.MemoryDatabase()
    mem_workload = memory.commit_workload(mod)
    # this run's own earlier results seed the strategy (resume continues the search)
    for r in mine:
        if r.get("status") == "ok" and r.get("trace"):
            try:
                sch = s_tir.Schedule(mod)
                s_tir.schedule.Trace.apply_json_to_schedule(r["trace"], sch)
                memory.commit_tuning_record(ms.database.TuningRecord(
                    sch.trace, mem_workload, [r["time_ms"] / 1e3], target,
                    ms.arg_info.ArgInfo.from_prim_func(func)))
            except Exception:  # noqa: BLE001 - a trace that no longer applies: skip it
                pass

    _write_provenance(opts, target)
    summary = {"run": run, "workload": wl_text, "space": opts.space, "strategy": opts.strategy,
               "cost_model": opts.cost_model if opts.strategy == "evolutionary" else None,
               "target": str(target.kind.name), "options": asdict(opts)}
    summary["costs"] = {}
    if remaining <= 0:
        return _finish(opts, wl, mod, target, state, summary, prior_elapsed, t_start=time.time(), new_elapsed=0,
                       cut=cut)
    return _search(opts, wl, mod, func, target, space, run, database, memory, workload_entry, mem_workload,
                   cache, state, summary, prior_elapsed, ctx, design_spaces, cost_model, remaining, builder, on_trial,
                   cut, runner)


def _search(opts, wl, mod, func, target, space, run, database, memory, workload_entry, mem_workload, cache,
            state, summary, prior_elapsed, ctx, design_spaces, cost_model, remaining, builder, on_trial, cut, started):
    wl_text = str(wl)
    costs = {"builds": [], "runs": []}  # (seconds, candidates) per batch built; seconds per candidate timed
    trials_path = os.path.join(opts.db, R.TRIALS_FILE)

    t_runner = time.time()
    runner, servers = started.get() if started is not None else make_runner(opts)
    # a worker process's start-up: the check's runner pays it again
    costs["start_s"] = time.time() - (started.started if started is not None else t_runner)
    summary["rpc_servers"] = servers if opts.rpc_tracker else 0
    if opts.strategy == "exhaustive":
        search = ExhaustiveSearch(ctx, design_spaces, mod)
    elif opts.strategy == "ordered":
        search = ordered_search(space, wl, ctx, design_spaces, mod)
    else:
        search = None
        ctx.pre_tuning(max_trials=remaining * 4 + opts.batch, num_trials_per_iter=opts.batch,
                       design_spaces=design_spaces, database=memory, cost_model=cost_model)
    device_type = "cuda" if target.kind.name == "cuda" else "cpu"
    pending = seed_candidates(space, wl, ctx, design_spaces, mod) if opts.seed_hand else []
    t_start = time.time()
    stale, generating = 0, 0.0
    while state.done < opts.trials:
        if opts.time_limit_s and time.time() - t_start > opts.time_limit_s:
            summary["stopped"] = f"time limit of {opts.time_limit_s:g} s reached"
            break
        if cut.left() <= generating:  # not even the next batch's proposal fits
            summary["stopped"] = "the command's time limit: the search's share is spent"
            break
        if INTERRUPTED.is_set():
            summary["stopped"] = "interrupted"
            break
        want = min(opts.batch, opts.trials - state.done)
        seeded = bool(pending)
        t_gen = time.time()
        if pending:
            cands, rejected, pending = pending[:want], [], []
        elif search is not None:
            cands, rejected = search.generate(opts.batch)
        else:
            cands, rejected = ctx.generate_measure_candidates() or [], []
            cands = cands[:want]
        generating = max(generating, time.time() - t_gen) if not seeded else generating
        if not cands and not rejected:
            summary["stopped"] = "the strategy has no more candidates"
            break
        logged = state.keys
        rows_rejected = []
        for trace, reason in rejected:
            key = R.trace_key(wl_text, opts.space, trace.as_json(remove_postproc=True))
            if key not in logged:
                rows_rejected.append(dict(key=key, status="invalid", reason=reason,
                                          knobs=knob_values(trace, space.knobs)))
        keys = [R.trace_key(wl_text, opts.space, c.sch.trace.as_json(remove_postproc=True)) for c in cands]
        todo = [n for n, key in enumerate(keys) if key not in cache and key not in keys[:n]]
        measured = _measure([cands[n] for n in todo], target, device_type, builder, runner, stop=cut, costs=costs)
        if INTERRUPTED.is_set():  # a batch cut short (its workers may have died with Ctrl-C): not recorded
            summary["stopped"] = "interrupted"
            break
        results = {keys[n]: res for n, res in zip(todo, measured)}
        if cut.expired():  # the time limit: what was measured before it is kept, the work cut short is not
            _record_partial(cands, keys, results, cache, rows_rejected, seeded, opts, run, wl_text, space, wl,
                            database, workload_entry, target, trials_path, state, t_start, prior_elapsed, on_trial)
            summary["stopped"] = "the command's time limit: the search's share is spent (work in flight cut short)"
            break
        progressed = False
        runner_results = []
        for cand, key in zip(cands, keys):
            if key in results and key not in cache:
                res, reused = results[key], False
            else:
                res, reused = _from_row(cache[key]), True
            runner_results.append(ms.runner.RunnerResult(
                res["secs"] if res["status"] == "ok" else None,
                None if res["status"] == "ok" else (res.get("reason") or res["status"])))
            if key in logged or state.done >= opts.trials:
                continue  # this run has it already (a resumed run meets its old candidates again)
            row = _trial_row(res, cand, space, wl, key, reused)
            if seeded:
                row["seed"] = True  # a hand-written configuration (the reselection always retimes these)
            if not reused:
                cache[key] = row
                secs = res["secs"] if res["status"] == "ok" else [FAILED_SECS]
                try:
                    database.commit_tuning_record(cand.sch.trace, workload_entry, secs, target, cand.args_info)
                except Exception:  # noqa: BLE001
                    pass
                if res["status"] == "ok":
                    memory.commit_tuning_record(ms.database.TuningRecord(
                        cand.sch.trace, mem_workload, secs, target, cand.args_info))
            _log(trials_path, opts, run, wl_text, row, state, t_start, prior_elapsed, on_trial)
            progressed = True
        for row in rows_rejected:
            if state.done < opts.trials:
                _log(trials_path, opts, run, wl_text, row, state, t_start, prior_elapsed, on_trial)
                progressed = True
        if opts.verify_by and opts.search_end and costs["builds"] and costs["runs"]:
            # the check after the search, at this run's measured costs: the search may run up to it
            check = check_seconds(measured_costs(costs, opts.builders or os.cpu_count() or 1))
            cut.until = max(opts.search_end, opts.verify_by - check)
        if hasattr(search, "notify"):
            search.notify(cands, [cache[k]["time_ms"] / 1e3 if cache.get(k, {}).get("status") == "ok" else None
                                  for k in keys])
        stale = 0 if progressed or search is not None else stale + 1
        if search is None and cands and not seeded:
            ctx.notify_runner_results(cands, runner_results)
            if cost_model is not None:
                cost_model.update(ctx, cands, runner_results)
        if stale >= 5:
            summary["stopped"] = "the strategy keeps proposing measured candidates (space exhausted?)"
            break
    if search is None:
        try:
            ctx.post_tuning()
        except Exception:  # noqa: BLE001
            pass
    new_elapsed = time.time() - t_start
    summary["costs"] = measured_costs(costs, opts.builders or os.cpu_count() or 1)
    return _finish(opts, wl, mod, target, state, summary, prior_elapsed, t_start, new_elapsed, builder, cut)


def _record_partial(cands, keys, results, cache, rows_rejected, seeded, opts, run, wl_text, space, wl, database,
                    workload_entry, target, trials_path, state, t_start, prior_elapsed, on_trial):
    """Record the candidates of a batch cut short by the time limit that were measured (or answered
    from the log) before the cut, and the rejected ones; those cut short (None) are measured next time."""
    for cand, key in zip(cands, keys):
        res = results.get(key) if key not in cache else _from_row(cache[key])
        if res is None or key in state.keys or state.done >= opts.trials:
            continue
        reused = key in cache
        row = _trial_row(res, cand, space, wl, key, reused)
        if seeded:
            row["seed"] = True
        if not reused:
            cache[key] = row
            try:
                database.commit_tuning_record(cand.sch.trace, workload_entry,
                                              res["secs"] if res["status"] == "ok" else [FAILED_SECS], target,
                                              cand.args_info)
            except Exception:  # noqa: BLE001
                pass
        _log(trials_path, opts, run, wl_text, row, state, t_start, prior_elapsed, on_trial)
    for row in rows_rejected:
        if state.done < opts.trials:
            _log(trials_path, opts, run, wl_text, row, state, t_start, prior_elapsed, on_trial)


def measured_costs(costs: dict, builders: int) -> dict:
    """Seconds per build (a batch's wall time over its rounds of ``builders``) and per timed candidate."""
    out = {}
    rounds = sum(-(-n // builders) for _, n in costs["builds"])
    if rounds:
        out["build_s"] = sum(s for s, _ in costs["builds"]) / rounds
    if costs["runs"]:
        out["run_s"] = float(np.median(costs["runs"]))
    if costs.get("start_s"):
        out["start_s"] = costs["start_s"]
    return out


def _from_row(row):
    """A logged trial as a measurement result."""
    if row.get("status") == "ok":
        return {"status": "ok", "secs": [row["time_ms"] / 1e3]}
    return {"status": row.get("status", "run"), "reason": row.get("reason", "")}


def _measure(cands, target, device_type, builder, runner, stop=None, costs=None) -> list[dict | None]:
    """Build and run ``cands``: a result per candidate, None for those Ctrl-C or the time limit left
    unmeasured (``stop``: a Cutoff; builds under way and the candidate being timed are cut short at
    its moment). ``costs``: lists the batch's build time and each candidate's run time are added to."""
    if not cands:
        return []
    stop = stop or INTERRUPTED
    t0 = time.time()
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
    if costs is not None and not stop.is_set():
        costs["builds"].append((time.time() - t0, len(cands)))
    out: list[dict | None] = [None] * len(cands)
    to_run, idx = [], []
    for n, (c, b) in enumerate(zip(cands, built)):
        if b.error_msg and stop.is_set() and b.error_msg.startswith("interrupted"):
            continue  # a build cut short: no verdict
        if b.error_msg:
            status, reason = classify_error(b.error_msg, "build")
            out[n] = {"status": status, "reason": reason}
        else:
            to_run.append(ms.runner.RunnerInput(b.artifact_path, device_type, c.args_info))
            idx.append(n)
    if isinstance(runner, ms.runner.LocalRunner):
        # LocalRunner runs one candidate after another; asked one at a time, it stops at Ctrl-C
        # (its worker dies with it, and it would start a new one, paying TVM's start-up, for each)
        # and at the time limit (runner_cut ends the worker timing a candidate then)
        futures = []
        with runner_cut(stop if isinstance(stop, Cutoff) else None, runner):
            for rin in to_run:
                if stop.is_set():
                    break
                t_run = time.time()
                futures += runner.run([rin])
                if costs is not None and not stop.is_set():
                    costs["runs"].append(time.time() - t_run)
    else:
        futures = runner.run(to_run) if to_run else []
    cut_short = isinstance(stop, Cutoff) and stop.expired()
    for rin in to_run[len(futures):]:
        _remove_artifact(rin.artifact_path)
    for n, fut, rin in zip(idx, futures, to_run):
        try:
            res = fut.result()
            err, secs = res.error_msg, [float(s) for s in (res.run_secs or [])]
        except Exception as e:  # noqa: BLE001
            err, secs = f"{type(e).__name__}: {e}", []
        if err and cut_short and n == idx[len(futures) - 1]:
            _remove_artifact(rin.artifact_path)  # the candidate being timed at the cut: no verdict
            continue
        if err:
            status, reason = classify_error(err, "run")
            out[n] = {"status": status, "reason": reason}
        elif not secs:
            out[n] = {"status": "run", "reason": "no timings"}
        else:
            out[n] = {"status": "ok", "secs": secs}
        _remove_artifact(rin.artifact_path)
    return out


def _remove_artifact(path):
    try:
        shutil.rmtree(os.path.dirname(str(path)), ignore_errors=True)
    except Exception:  # noqa: BLE001
        pass


def _trial_row(res, cand, space, wl, key, reused) -> dict:
    row = {"key": key, "status": res["status"], "reused": reused,
           "knobs": knob_values(cand.sch.trace, space.knobs)}
    if res["status"] == "ok":
        t = float(np.median(res["secs"]))
        row.update(time_ms=t * 1e3, gflops=wl.flops / t / 1e9, trace=R.plain(cand.sch.trace.as_json()))
    else:
        row["reason"] = res.get("reason", "")
    return row


def _log(path, opts, run, wl_text, row, state: RunState, t_start, prior_elapsed, on_trial):
    state.done += 1
    state.last_trial += 1
    state.keys.add(row["key"])
    if row.get("reused"):
        state.reused += 1
    elif row["status"] == "ok":
        state.measured += 1
    if row["status"] != "ok":
        state.failed += 1
    elif row["gflops"] > state.best_gflops:
        state.best_gflops, state.best_ms = row["gflops"], row["time_ms"]
    state.elapsed_s = prior_elapsed + time.time() - t_start
    full = {"run": run, "workload": wl_text, "space": opts.space, "strategy": opts.strategy,
            "cost_model": opts.cost_model if opts.strategy == "evolutionary" else None,
            "trial": state.last_trial, "elapsed_s": round(state.elapsed_s, 3),
            "best_gflops": state.best_gflops, **row}
    R.append_jsonl(path, full)
    if on_trial:
        on_trial(full, state)


def recorded_provenance(db: str) -> dict:
    """DIR/provenance.json ({} where there is none, or it is unreadable)."""
    try:
        with open(os.path.join(db, "provenance.json")) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def recorded_timer(db: str) -> str | None:
    """The timer a tuning directory's trials were measured with (directories from before the
    choice existed were measured warm)."""
    prov = recorded_provenance(db)
    return str(prov.get("timer", "warm")) if prov else None


def check_timer(opts: TuneOptions, past: list) -> None:
    """Refuse to mix timers in one directory: cold and warm times of the same kernel differ by up to
    a third at small shapes, so resumed trials would not compare with new ones."""
    had = recorded_timer(opts.db)
    now = effective_timer(opts)
    if had and had != now and any(r.get("status") == "ok" for r in past):
        raise ValueError(f"{opts.db} holds trials timed with the {had} timer; this run would time {now}: "
                         f"use another --db, or --timer {had}")


def check_target(opts: TuneOptions, past: list) -> None:
    """A tuning directory keeps one target (recorded in its provenance.json): its trials, failures
    included, answer for candidates of any later run in it, and a CUDA kernel's verdict says nothing
    about the CPU's. A run for another target is refused; it takes its own --db."""
    had = recorded_provenance(opts.db).get("target")
    if had and had != opts.target and past:
        raise ValueError(f"{opts.db} holds trials measured for --target {had}; this run is for --target "
                         f"{opts.target}: a tuning directory keeps one target, use another --db")


def check_directory(opts: TuneOptions, workload: str) -> None:
    """Refuse (one line) a run that would mix targets or timers in ``opts.db``; reads only."""
    past = R.trials(opts.db)
    check_target(opts, past)
    check_timer(opts, [r for r in past if r.get("workload") == workload])


def _write_provenance(opts, target):
    """DIR/provenance.json: where the trials were measured (the report reads it)."""
    if opts.rpc_tracker:
        device = f"RPC servers under key {opts.rpc_key} at {opts.rpc_tracker}"
    elif target.kind.name == "cuda":
        try:
            device = tvm.cuda(0).device_name if tvm.cuda(0).exist else "no GPU"
        except Exception:  # noqa: BLE001
            device = "no GPU"
    else:
        device = f"CPU ({platform.processor() or platform.machine()})"
    R.save_json(os.path.join(opts.db, "provenance.json"), {
        "gpu": device, "tvm": tvm.__version__, "host": platform.node(), "target": str(target.kind.name),
        "timer": effective_timer(opts),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})


# --- verification and the best configuration ---------------------------------------------------
def schedule_from_trace(wl, trace_json):
    sch = s_tir.Schedule(tvm.IRModule({"main": wl.prim_func()}))
    s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    return sch


def verify_runner(opts: TuneOptions):
    """The runner of :func:`verify`: one run, the full float64 comparison in place of timings."""
    vopts = TuneOptions(**{**asdict(opts), "number": 1, "repeat": 1, "min_repeat_ms": 0,
                           "run_timeout": max(opts.run_timeout, 120.0), "rpc_servers": 1})
    return make_runner(vopts, verify=True)[0]


def verify(opts: TuneOptions, wl, target, trace_json, builder, runner, stop=None) -> tuple[float | None, str]:
    """Build the candidate again and compare its full output with float64 on the measuring device
    (``runner``: :func:`verify_runner`). Returns (the relative error, inf for outputs that are not
    finite; "") or, when the check could not run (the build or the run failed: a timeout, a worker
    killed by Ctrl-C), (None, why): no verdict."""
    sch = schedule_from_trace(wl, trace_json)
    device_type = "cuda" if target.kind.name == "cuda" else "cpu"
    res = _measure([ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod))], target,
                   device_type, builder, runner, stop=stop)[0]
    if res is None:
        return None, "interrupted" if INTERRUPTED.is_set() else "cut short by the time limit"
    if res["status"] != "ok":
        return None, f"{res['status']}: {res.get('reason', '')}"
    return float(res["secs"][0]), ""


def _finish(opts, wl, mod, target, state, summary, prior_elapsed, t_start, new_elapsed, builder=None, cut=None):
    wl_text = str(wl)
    cut = cut or Cutoff(INTERRUPTED)
    cut.until = opts.verify_by  # the check's own moment (the search's has passed)
    check_s = check_seconds(summary.get("costs") or {})
    rows = [r for r in R.trials(opts.db, wl_text, state.run)]
    verified_bad = {r["key"] for r in R.trials(opts.db, wl_text) if r.get("status") == "verify"
                    and not r.get("passed")}
    verified_ok = {r["key"]: r.get("rel_error") for r in R.trials(opts.db, wl_text)
                   if r.get("status") == "verify" and r.get("passed")}
    ok = sorted((r for r in rows if r.get("status") == "ok" and r["key"] not in verified_bad),
                key=lambda r: r["time_ms"])
    best, checker, own_builder = None, None, None
    for cand in ok[:5]:
        if INTERRUPTED.is_set():  # no check on workers Ctrl-C may have killed: the candidates stay pending
            break
        if not opts.verify:
            best = dict(cand, rel_error=None)
            break
        if cand["key"] in verified_ok:
            best = dict(cand, rel_error=verified_ok[cand["key"]])
            break
        if cut.left() < check_s:  # no time for the check: the best as the sampled check passed it
            best = dict(cand, rel_error=None)
            summary["check"] = "the float64 check of the best was skipped: the command's time limit"
            break
        if checker is None:
            checker = verify_runner(opts)
            if builder is None:
                builder = own_builder = make_parallel_builder(1, opts.build_timeout, stop=cut)
        err, why = verify(opts, wl, target, cand["trace"], builder, checker, stop=cut)
        if INTERRUPTED.is_set():  # a check cut short is no verdict
            break
        if cut.expired():  # cut short by the time limit: no verdict, the best as the sampled check passed it
            best = dict(cand, rel_error=None)
            summary["check"] = "the float64 check of the best was cut short by the command's time limit"
            break
        if err is None:
            log(f"the float64 check of trial {cand.get('trial')} of {state.run} could not run ({why[:200]}); it is "
                "checked again next time")
            continue
        passed = err <= output_tolerance(wl, FULL_TOLERANCE)  # a 16-bit output: with its rounding
        R.append_jsonl(os.path.join(opts.db, R.TRIALS_FILE),
                       {"run": state.run, "workload": wl_text, "space": opts.space, "status": "verify",
                        "key": cand["key"], "rel_error": err, "passed": passed})
        if passed:
            best = dict(cand, rel_error=err)
            break
    if own_builder is not None:
        own_builder.shutdown()
    measured = [r for r in rows if not r.get("reused") and r.get("status") != "verify"]
    elapsed = max((r.get("elapsed_s", 0.0) for r in rows), default=0.0)
    summary.update(trials=len([r for r in rows if r.get("status") != "verify"]), measured_now=state.measured,
                   reused_now=state.reused, failed=sum(1 for r in rows if r.get("status") not in ("ok", "verify")),
                   elapsed_s=elapsed, session_s=new_elapsed,
                   trials_per_minute=(60.0 * len(measured) / elapsed) if elapsed > 0 else None,
                   session_trials_per_minute=(60.0 * (state.measured + state.failed) / new_elapsed)
                   if new_elapsed > 0 else None)
    if best is not None:
        summary["best"] = {k: best.get(k) for k in ("key", "knobs", "time_ms", "gflops", "rel_error", "trial")}
        save_best(opts.db, wl, target, state.run, opts.space, best)
    return summary


def save_best(db_dir, wl, target, run, space, best: dict):
    """Write DIR/best_<workload>.json when ``best`` beats what is there (or nothing is)."""
    path = R.best_path(db_dir, str(wl))
    old = None
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
    if old and old.get("time_ms", float("inf")) <= best["time_ms"] and old.get("key") != best["key"]:
        return path
    sch = schedule_from_trace(wl, best["trace"])
    R.save_json(path, {
        "workload": str(wl), "space": space, "run": run, "key": best["key"], "knobs": best["knobs"],
        "time_ms": best["time_ms"], "gflops": best["gflops"], "rel_error": best.get("rel_error"),
        "target": str(target), "tvm": tvm.__version__, "launch": launch_of(sch),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "trace": best["trace"]})
    return path


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)
