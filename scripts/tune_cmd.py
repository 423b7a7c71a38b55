"""``schedlab tune``: search a space of schedule configurations for the fastest one, resumably.

    schedlab tune --workload gemm:1024x512x2048 --space fast --trials 256 --db DIR
    schedlab tune --workload gemm:1024x512x2048 --space classic              # all 36, exhaustively
    schedlab tune ... --rpc-tracker 127.0.0.1:9190 --rpc-key h100              # measure on RPC servers

Every trial is appended to DIR/trials.jsonl (and MetaSchedule's JSONDatabase in DIR); running the
same command again resumes: measured candidates are not measured again. The best verified
configuration goes to DIR/best_<workload>.json; ``SCHEDLAB_TUNED=DIR schedlab run --schedules
tuned_gemm`` (or ``schedlab show tuned_gemm``) uses it. ``--compare`` adds, at the same trial
budget, MetaSchedule's own auto-generated space (``default``), random search of the same space
(``random``) and TVM's dlight schedule (``dlight``, one fixed schedule); ``--report`` writes the
convergence chart and tables.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys

from scripts.steps_index import list_steps
from tuning.names import COST_MODELS, SPACE_NAMES, STRATEGIES  # names only: no TVM before a command runs

COMPARISONS = ("default", "random", "dlight")


def add_parser(subparsers):
    s = subparsers.add_parser("tune", help="Tune a schedule space with MetaSchedule, resumably, locally or over RPC.",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    s.add_argument("--workload", default="gemm:1024x512x2048", help="gemm:MxNxK (default %(default)s)")
    s.add_argument("--space", default="fast", help=f"search space: {', '.join(sorted(SPACE_NAMES))}, or a step whose "
                   "configuration declares a search_space (a plugin's, say) (default %(default)s)")
    s.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="exhaustive | random | evolutionary (default: exhaustive for classic and a step's space, "
                   "else evolutionary)")
    s.add_argument("--cost-model", default="ridge", choices=COST_MODELS,
                   help="for the evolutionary strategy (default %(default)s; xgb needs xgboost)")
    s.add_argument("--trials", type=int, default=64, help="trial budget of each run (default %(default)s)")
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
    s.add_argument("--compare", default="default,dlight",
                   help="comma-separated, run at the same budget: default,random,dlight, or none (default %(default)s)")
    s.add_argument("--time-limit", type=float, default=None, metavar="S", help="stop each run after S seconds")
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
    s.add_argument("--report-only", action="store_true", help="no tuning: write the report of what DIR holds")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_tune)
    return s


def _options(args, **over):
    from tuning.spaces import get_space  # heavy (TVM, MetaSchedule): the command's modules
    from tuning.tuner import TuneOptions

    strategy = args.strategy or get_space(args.space).strategy
    base = dict(workload=args.workload, space=args.space, strategy=strategy, cost_model=args.cost_model,
                trials=args.trials, db=args.db, target=args.target, arch=args.arch, batch=args.batch, timer=args.timer,
                builders=args.builders, rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key, seed=args.seed,
                time_limit_s=args.time_limit, population=args.population, verify=not args.no_verify)
    base.update(over)
    return TuneOptions(**base)


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
    from tuning.records import best_path
    from tuning.tuner import INTERRUPTED, measure_dlight, tune

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
    summaries = []
    for opts in runs:
        s = tune(opts, on_trial=_progress_cb(args.quiet, opts.trials, opts.name()))
        if INTERRUPTED.is_set():  # cmd_tune says so, in one line
            return 130
        summaries.append(s)
        _print_summary(s)
    if "dlight" in compare:
        d = measure_dlight(runs[0])
        if INTERRUPTED.is_set():
            return 130
        r = d.get("result") or {}
        print(f"dlight on {wl}: " + (f"{r['time_ms']:.4g} ms, {r['gflops']:.0f} GFLOP/s" if r.get("status") == "ok"
                                     else f"{r.get('status')}: {r.get('reason', d.get('skipped', ''))}"))
    path = best_path(args.db, str(wl))
    if os.path.exists(path):
        with open(path) as f:
            best = json.load(f)
        print(f"best configuration of {wl} so far ({best['run']}): {best['time_ms']:.4g} ms, "
              f"{best['gflops']:.0f} GFLOP/s -> {path}")
        print(f"  use it: SCHEDLAB_TUNED={args.db} schedlab run --workload {wl} --schedules tuned_gemm")
    with open(os.path.join(args.db, "last_summary.json"), "w") as f:
        json.dump(summaries, f, indent=1, default=str)
    # the report (Markdown, convergence chart) and its page, at the end of every run
    out = args.report or os.path.join(args.db, "report")
    paths = write_report(args.db, str(wl), out, hand=args.hand)
    print(f"report: {paths.get('markdown')}, {write_tuning_page(args.db, str(wl), out)}", file=sys.stderr)
    return 0
