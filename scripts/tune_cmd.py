"""``schedlab tune``: search a space of schedule configurations for the fastest one, resumably.

    schedlab tune --workload gemm:1892x1042x7208 --time-limit 300 --db DIR    # the whole command in 5 min
    schedlab tune --workload gemm:1024x512x2048 --space fast --trials 256 --db DIR
    schedlab tune --workload gemm:1024x512x2048 --space classic              # all 36, exhaustively
    schedlab tune ... --rpc-tracker 127.0.0.1:9190 --rpc-key h100              # measure on RPC servers

Every trial is appended to DIR/trials.jsonl (and MetaSchedule's JSONDatabase in DIR); running the
same command again resumes: measured candidates are not measured again. The best verified
configuration goes to DIR/best_<workload>.json; ``SCHEDLAB_TUNED=DIR schedlab run --schedules
tuned_gemm`` (or ``schedlab show tuned_gemm``) uses it. The default space, ``dispatch``, starts from
the dispatcher's top candidates and searches their split-K, block tile, K tile and ring depth. On a
GPU the dispatcher's choice (best_gemm), the tuned best and cuBLAS are then timed side by side in
``schedlab run``'s harness, and the report says how far tuning moved the dispatcher's choice.
``--time-limit S`` bounds the whole command: the search stops (its work in flight cut short, what
it measured kept) early enough for the check, the comparison and the report to fit
(:mod:`tuning.deadline`). ``--compare`` adds, at the same budget, MetaSchedule's own auto-generated
space (``default``), random search of the same space (``random``) and TVM's dlight schedule
(``dlight``, one fixed schedule); ``--report`` writes the convergence chart and tables.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time

from scripts.steps_index import list_steps
from tuning.names import COST_MODELS, SPACE_NAMES, STRATEGIES  # names only: no TVM before a command runs

COMPARISONS = ("default", "random", "dlight")
DEFAULT_TRIALS = 64  # trials of a run without --time-limit
TIME_LIMITED_TRIALS = 1024  # with one: more than a 5-minute search measures (the dispatch space has 192)


def add_parser(subparsers):
    s = subparsers.add_parser("tune", help="Tune a schedule space with MetaSchedule, resumably, locally or over RPC.",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    s.add_argument("--workload", default="gemm:1024x512x2048", help="gemm:MxNxK (default %(default)s)")
    s.add_argument("--space", default="dispatch", help=f"search space: {', '.join(sorted(SPACE_NAMES))}, or a step "
                   "whose configuration declares a search_space (a plugin's, say) (default %(default)s: the "
                   "dispatcher's top candidates and their split-K, tile, K tile and ring neighbours)")
    s.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="exhaustive | random | evolutionary | ordered (default: ordered for dispatch, exhaustive for "
                   "classic and a step's space, else evolutionary)")
    s.add_argument("--cost-model", default="ridge", choices=COST_MODELS,
                   help="for the evolutionary strategy (default %(default)s; xgb needs xgboost)")
    s.add_argument("--trials", type=int, default=None,
                   help=f"trial budget of each run (default {DEFAULT_TRIALS}; with --time-limit, "
                   f"{TIME_LIMITED_TRIALS}: the time, or the space running out, ends the search)")
    s.add_argument("--db", default="out/tune", help="tuning directory: database, trial log, best configs")
    s.add_argument("--target", default="cuda", choices=("cuda", "llvm"))
    s.add_argument("--arch", default=None, help="CUDA arch (default: the GPU's, else sm_90)")
    s.add_argument("--timer", default="cold", choices=("cold", "warm"),
                   help="cold: each timed run alone after an L2 flush, as schedlab run times (default); warm: "
                   "MetaSchedule's back-to-back runs, inputs in L2. CPU targets time warm")
    s.add_argument("--batch", type=int, default=16, help="candidates built and measured per round")
    s.add_argument("--builders", type=int, default=None, help="parallel build processes (default: CPU count)")
    s.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="measure on RPC servers of this tracker")
    s.add_argument("--rpc-key", default=None, help="the servers' key at the tracker")
    s.add_argument("--compare", default="none",
                   help="comma-separated, run at the same budget (a time limit shared equally): default,random,dlight, "
                   "or none (default %(default)s)")
    s.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="the whole command ends within S seconds: the search stops early enough for the float64 "
                   "check, the comparison in the harness and the report (work in flight cut short, what was "
                   "measured kept)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--population", type=int, default=256, help="evolutionary population size")
    s.add_argument("--no-verify", action="store_true", help="skip the float64 check of the best")
    s.add_argument("--report", nargs="?", const="", default=None, metavar="DIR",
                   help="write the tuning report (default DIR/report); add --hand to time hand schedules")
    s.add_argument("--hand", action="store_true", help="in the report, time tuned_gemm beside the hand "
                   "schedules, cuBLAS and dlight (schedlab run's harness)")
    s.add_argument("--reselect", type=int, default=0, metavar="K",
                   help="before the report: time each run's K fastest configurations and the hand seeds in "
                   "schedlab run's harness and keep the fastest there as tuned_gemm (needs a GPU)")
    s.add_argument("--no-harness", action="store_true", help="after the search, do not time the dispatcher's "
                   "choice (best_gemm), the tuned best and cuBLAS side by side in schedlab run's harness (done by "
                   "default where a GPU is here)")
    s.add_argument("--report-only", action="store_true", help="no tuning: write the report of what DIR holds")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_tune)
    return s


def _options(args, **over):
    from tuning.spaces import get_space  # heavy (TVM, MetaSchedule): the command's modules
    from tuning.tuner import TuneOptions

    strategy = args.strategy or get_space(args.space).strategy
    base = dict(workload=args.workload, space=args.space, strategy=strategy, cost_model=args.cost_model,
                trials=trial_budget(args), db=args.db, target=args.target, arch=args.arch, batch=args.batch, timer=args.timer,
                builders=args.builders, rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key, seed=args.seed,
                population=args.population, verify=not args.no_verify)  # --time-limit: the command's (search_end)
    base.update(over)
    return TuneOptions(**base)


def trial_budget(args) -> int:
    """Trials of each run: --trials where given; else 64, or, with --time-limit, enough that the time
    limit ends the search rather than the count (a time-limited search should use the time it is given)."""
    if args.trials is not None:
        return args.trials
    return TIME_LIMITED_TRIALS if args.time_limit is not None else DEFAULT_TRIALS


def _progress_cb(quiet, trials, label):
    if quiet:
        return None
    from reports.engine.progress import Progress  # heavy (the reports package): the command's module

    bar = {}

    def cb(row, state):
        if "p" not in bar:
            bar["p"] = Progress(trials, label)
            bar["p"].done = state.done - 1
        what = row["status"] if row["status"] != "ok" else f"{row['gflops']:.0f} GFLOP/s"
        if row.get("reused"):
            what += " (from the log)"
        bar["p"].update(f"best {state.best_gflops:.0f} GFLOP/s · this one {what}")

    return cb


def _print_summary(s):
    best = s.get("best")
    rate = s.get("session_trials_per_minute")
    line = (f"{s['run']} on {s['workload']}: {s.get('trials', 0)} trials "
            f"({s.get('measured_now', 0)} measured now, {s.get('reused_now', 0)} from the log, "
            f"{s.get('failed', 0)} failed in all)")
    if rate:
        line += f", {rate:.1f} trials/min this session"
    print(line)
    if s.get("stopped"):
        print(f"  stopped: {s['stopped']}")
    if s.get("check"):
        print(f"  {s['check']}")
    if best:
        err = best.get("rel_error")
        print(f"  best: {best['time_ms']:.4g} ms, {best['gflops']:.0f} GFLOP/s, rel. error vs float64 "
              f"{'not checked' if err is None else format(err, '.2e')}; knobs {json.dumps(best['knobs'])}")
    else:
        print("  no valid configuration found")


def check_space(args):
    """Refuse (one line, before anything is made or imported) a --space that is neither a named space
    nor a step whose configuration declares a search space (a plugin's steps count once named)."""
    if args.space in SPACE_NAMES:
        return
    steps = [s for s in list_steps(args) if s.get("search_space")]
    if args.space not in {n for s in steps for n in (s["name"], *s["aliases"])}:
        known = ", ".join([*sorted(SPACE_NAMES), *(s["name"] for s in steps)])
        raise ValueError(f"unknown space {args.space!r} (known: {known}; a step is a space once its "
                         "configuration declares a search_space)")


def check_space_fits(args, wl):
    """Refuse (one line) a space that cannot tune this workload on this target: the CUDA spaces on
    --target llvm, and the dispatch space on anything but an fp32 product (the dispatcher's SIMT
    kernels are what it searches)."""
    from tuning.spaces import get_space  # heavy (TVM, MetaSchedule): the command's modules

    space = get_space(args.space)
    if args.target == "llvm" and space.template is not None and not space.cpu:
        raise ValueError(f"space {args.space!r} is for CUDA targets only; for --target llvm use --space classic")
    if args.space == "dispatch" and wl.dtype != "float32":
        raise ValueError(f"space 'dispatch' tunes fp32 products (the dispatcher's SIMT kernels), not {wl.dtype}: "
                         "use --space default")
    if args.space == "dispatch":
        from schedules.errors import ScheduleParamError
        from tuning.spaces import dispatch_candidates

        try:
            dispatch_candidates(wl)
        except ScheduleParamError as e:  # a matrix-vector product: the dispatcher has no SIMT tile for it
            raise ValueError(f"{e}: use --space default") from None


def cmd_tune(args):
    check_space(args)
    # heavy (TVM, MetaSchedule, pandas): the command's modules
    from reports.engine.files import ensure_out_dir
    from tuning.records import DirectoryLock
    from tuning.tuner import INTERRUPTED

    wl, compare, runs = _checked(args)  # everything that can be refused, before anything is made
    ensure_out_dir(args.db, "--db")
    message = (f"schedlab tune: interrupted; every finished trial is in {args.db}/trials.jsonl: the same "
               "command resumes")
    # Ctrl-C (and SIGTERM) stops the search between batches (a half-measured batch is dropped): a
    # KeyboardInterrupt raised inside MetaSchedule's C++ callbacks would surface as an unrelated RuntimeError
    INTERRUPTED.clear()
    previous = {sig: signal.signal(sig, lambda *_: INTERRUPTED.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with DirectoryLock(args.db):
            code = _tune(args, wl, compare, runs)
    except KeyboardInterrupt:
        code = None
        INTERRUPTED.set()
    except Exception:  # noqa: BLE001 - after Ctrl-C, a failure of the workers it killed is the interruption
        if not INTERRUPTED.is_set():
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if INTERRUPTED.is_set():
        print(message, file=sys.stderr)
        return 130
    return code


def _checked(args):
    """The workload, the comparisons and the runs' options, once every argument, the device, the
    RPC tracker and the tuning directory's target and timer are found fit; ValueError (one line)
    otherwise. Reads only: a refused command leaves no --db folder or lock behind."""
    # heavy (TVM, MetaSchedule): the command's modules
    from schedules import parse_workload
    from tuning.tracker import parse_tracker, probe_tracker
    from tuning.tuner import check_device, check_directory

    wl = parse_workload(args.workload)
    for name, value, least in (("--trials", args.trials, 1), ("--batch", args.batch, 1),
                               ("--builders", args.builders, 1), ("--population", args.population, 2)):
        if value is not None and value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    if wl.kind != "gemm":
        raise ValueError("schedlab tune tunes GEMM workloads (gemm:MxNxK)")
    if wl.layout != "nn" or wl.batched:
        raise ValueError(f"schedlab tune tunes nn GEMMs without a batch (gemm:MxNxK[:dtype]), not {wl}")
    compare = [c for c in (args.compare or "").split(",") if c and c != "none"]
    for c in compare:
        if c not in COMPARISONS:
            raise ValueError(f"--compare {c!r} is not one of {', '.join(COMPARISONS)} (or none)")
    if args.target == "llvm":
        compare = [c for c in compare if c != "dlight"]
    if args.report_only:
        if not os.path.isdir(args.db):
            raise ValueError(f"--db {args.db}: no tuning directory there")
        return wl, compare, []
    if args.rpc_tracker and not args.rpc_key:
        raise ValueError("--rpc-tracker needs --rpc-key")
    check_space_fits(args, wl)
    runs = [_options(args)]
    if "random" in compare and runs[0].strategy != "random":
        runs.append(_options(args, strategy="random"))
    if "default" in compare and args.target == "cuda":
        runs.append(_options(args, space="default", strategy="evolutionary"))
    check_device(runs[0])
    if args.rpc_tracker:
        probe_tracker(*parse_tracker(args.rpc_tracker))  # before any search starts
    for opts in runs:
        check_directory(opts, str(wl))
    return wl, compare, runs


def _tune(args, wl, compare, runs):
    # heavy (TVM, MetaSchedule, pandas, matplotlib): the command's modules
    from reports.experiments.tuned import reselect, write_report
    from reports.views.page import write_tuning_page

    if args.report_only:
        if args.reselect:
            for r in reselect(args.db, str(wl), args.report or os.path.join(args.db, "report"), args.reselect):
                print(f"  tuner #{r['rank']} ({r['run']}): tuner {r['tuner_ms']:.4g} ms, harness "
                      f"{r['harness_ms'] if r['harness_ms'] is None else format(r['harness_ms'], '.4g')} ms "
                      f"({r['status']})")

        out = args.report or os.path.join(args.db, "report")
        paths = write_report(args.db, str(wl), out, hand=args.hand)
        print(f"report: {paths['markdown']}, {write_tuning_page(args.db, str(wl), out)}")
        return 0
    from tuning.deadline import Plan, record_costs, recorded_costs

    plan = Plan(args.time_limit, args.target)
    plan.learn(recorded_costs(args.db), measured=False)
    return _search_then_tail(args, wl, compare, runs, plan, record_costs)


def _tail_steps(args, compare, runs, plan) -> dict:
    """The steps after the search, in order, with the seconds each is expected to take (Plan's costs)."""
    from reports.engine.build import cuda_available
    from reports.experiments.tuned import HAND_SCHEDULES

    builders = max(1, (os.cpu_count() or 2) - 1)
    steps = {"check": plan.check_s() * len(runs)}
    if "dlight" in compare:
        steps["dlight"] = plan.costs["build_s"] + plan.costs["run_s"] + 5.0
    if args.target == "cuda" and not args.rpc_tracker and not args.no_harness and cuda_available():
        tuned = args.reselect * len(runs) + len(runs) if args.reselect else 1  # the reselection, or the saved best
        steps["harness"] = plan.harness_s(2 + tuned, builders)
    if args.hand:
        steps["hand"] = plan.harness_s(len(HAND_SCHEDULES) + 3, builders)
    steps["report"] = plan.costs["report_s"]
    return steps


def _after(steps: dict, name: str) -> float:
    """Seconds kept for the steps after ``name``."""
    names = list(steps)
    return sum(steps[n] for n in names[names.index(name) + 1:])


def _search_then_tail(args, wl, compare, runs, plan, record_costs):
    # heavy (TVM, MetaSchedule, pandas, matplotlib): the command's modules
    from reports.experiments.tuned import dispatcher_comparison, write_report
    from reports.views.page import write_tuning_page
    from reports.views.tuning_report import load_runs
    from tuning.dlight import measure_dlight
    from tuning.records import best_path
    from tuning.tuner import INTERRUPTED, tune

    steps = _tail_steps(args, compare, runs, plan)
    if plan.end is not None:
        # the searches share what is left once the steps after them are kept, equally (--compare: the same budget)
        share = (plan.left() - sum(steps.values())) / len(runs)
        if share < 1.0:
            print(f"schedlab tune: --time-limit {args.time_limit:g}: {max(plan.left(), 0):.0f} s are left, and the "
                  f"steps after the search are expected to take {sum(steps.values()):.0f} s: the search gets none",
                  file=sys.stderr)
    summaries = []
    for n, opts in enumerate(runs):
        if plan.end is not None:
            opts.search_end = time.time() + max(0.0, (plan.left() - sum(steps.values())) / (len(runs) - n))
            opts.verify_by = plan.until(_after(steps, "check") + steps["check"] * (len(runs) - n - 1) / len(runs))
        s = tune(opts, on_trial=_progress_cb(args.quiet, opts.trials, opts.name()))
        if INTERRUPTED.is_set():  # cmd_tune says so, in one line
            return 130
        summaries.append(s)
        plan.learn(s.get("costs") or {})
        _print_summary(s)
    plan.steps["check"] = "done"
    if "dlight" in compare:
        if plan.fits(steps["dlight"], _after(steps, "dlight")):
            d = measure_dlight(runs[0], until=plan.until(_after(steps, "dlight")))
            if INTERRUPTED.is_set():
                return 130
            r = d.get("result") or {}
            print(f"dlight on {wl}: " + (f"{r['time_ms']:.4g} ms, {r['gflops']:.0f} GFLOP/s" if r.get("status") == "ok"
                                         else f"{r.get('status')}: {r.get('reason', d.get('skipped', ''))}"))
            plan.steps["dlight"] = "done" if r else f"skipped: {d.get('skipped')}"
        else:
            plan.steps["dlight"] = "skipped: no time left for it within the time limit"
    if "harness" in steps:
        if plan.fits(min(steps["harness"], 30.0), _after(steps, "harness")):
            t0 = time.time()
            try:
                compared = dispatcher_comparison(args.db, str(wl), k=args.reselect,
                                                 until=plan.until(_after(steps, "harness")))
            except RuntimeError as e:  # the harness's workers did not start in the time left
                compared = {}
                plan.steps["harness"] = f"failed: {str(e).splitlines()[0][:200]}"
            else:
                plan.steps["harness"] = "done"
            jobs = 2 + (args.reselect * len(runs) + len(runs) if args.reselect else 1)
            spent, builders = time.time() - t0, max(1, (os.cpu_count() or 2) - 1)
            if compared and all(compared[k].get("status") == "ok" for k in ("best_gemm", "tuned_gemm", "cublas")):
                # the builds' share of what it took (a round of builds), for the next command in this directory
                left = spent - plan.costs["harness_start_s"] - jobs * plan.costs["harness_time_s"]
                plan.learn({"harness_build_s": max(left / -(-jobs // builders), 5.0)})
        else:
            plan.steps["harness"] = "skipped: no time left for it within the time limit"
    path = best_path(args.db, str(wl))
    if os.path.exists(path):
        with open(path) as f:
            best = json.load(f)
        print(f"best configuration of {wl} so far ({best['run']}): {best['time_ms']:.4g} ms, "
              f"{best['gflops']:.0f} GFLOP/s -> {path}")
        print(f"  use it: SCHEDLAB_TUNED={args.db} schedlab run --workload {wl} --schedules tuned_gemm")
    # the report (Markdown, convergence chart) and its page, at the end of every run
    out = args.report or os.path.join(args.db, "report")
    hand = args.hand and plan.fits(steps.get("hand", 0.0), _after(steps, "hand"))
    if args.hand:
        plan.steps["hand"] = "done" if hand else "skipped: no time left for it within the time limit"
    command = {"limit_s": args.time_limit, "elapsed_s": plan.elapsed(), "steps": dict(plan.steps),
               "trials": sum(s.get("trials", 0) for s in summaries)}
    if load_runs(args.db, str(wl)):
        t0 = time.time()
        paths = write_report(args.db, str(wl), out, hand=hand, until=plan.until(_after(steps, "hand")) if hand else None,
                             command=command)
        t_report = time.time()
        page = write_tuning_page(args.db, str(wl), out)
        plan.learn({"report_s": time.time() - t_report + (0 if hand else t_report - t0)})
        print(f"report: {paths.get('markdown')}, {page}", file=sys.stderr)
        _print_move(args.db, str(wl))
    else:
        print(f"schedlab tune: no trials of {wl} in {args.db} to report", file=sys.stderr)
    command["elapsed_s"] = plan.elapsed()
    with open(os.path.join(args.db, "last_summary.json"), "w") as f:
        json.dump({"runs": summaries, "command": command}, f, indent=1, default=str)
    record_costs(args.db, plan.measured)
    print(f"schedlab tune: {command['elapsed_s']:.0f} s" + (f" of the {args.time_limit:g} s limit"
                                                            if args.time_limit else ""), file=sys.stderr)
    return 0


def _print_move(db: str, workload: str):
    """The command's last word: how far tuning moved the dispatcher's choice (the report's section)."""
    from reports.views.tuning_report import dispatcher_move, load_runs

    move = dispatcher_move(db, workload, load_runs(db, workload))
    for t in move["tuner"]:
        print(f"  tuning moved the dispatcher's choice, in the tuner's timer ({t['run']}): {t['dispatcher_ms']:.4g} ms "
              f"-> {t['tuned_ms']:.4g} ms ({t['speedup']:.2f}x) in {t['trials']} trials, {t['search_s']:.0f} s of search")
    h = move["harness"]
    if h and h.get("speedup"):
        pct = (f", {h['dispatcher_pct_cublas']:.1f}% -> {h['tuned_pct_cublas']:.1f}% of cuBLAS"
               if h.get("dispatcher_pct_cublas") and h.get("tuned_pct_cublas") else "")
        print(f"  in schedlab run's harness: {h['dispatcher_step']} {h['dispatcher_ms']:.4g} ms -> tuned_gemm {h['tuned_ms']:.4g} ms "
              f"({h['speedup']:.2f}x{pct})")
    elif h:
        print(f"  in schedlab run's harness: {h['dispatcher_step']} {h.get('dispatcher_status')}, tuned_gemm "
              f"{h.get('tuned_status')}, "
              f"cuBLAS {h.get('cublas_status')}")
