"""The ``schedlab`` command: list the steps, show a step's IR at any stage, diff two steps, run the
lab, benchmark, sweep, tune, and write report pages.

Without installation: ``python -m scripts.schedlab ...`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STAGES = ("scheduled", "lowered", "cuda", "ptx")
DEFAULT_SHAPES = {"gemm": "1024x512x2048", "gemv": "16384x128", "gemv_t": "16384x4096"}
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    pass


def _params(items):
    from reports.build import parse_params

    try:
        return parse_params(items)
    except ValueError as e:
        raise CliError(str(e)) from None


def cmd_list(args):
    from schedules import all_schedules
    from schedules.registry import LADDERS

    for ladder in LADDERS:
        specs = [s for s in all_schedules(ladder=ladder) if args.kind in (None, s.kind)]
        if not specs:
            continue
        width = max(len(s.name) for s in specs)
        print(f"{ladder.upper()} ladder")
        for s in specs:
            alias = f" (also {', '.join(s.aliases)})" if s.aliases else ""
            kind = "" if s.kind == ladder else f"[{s.kind}] "
            print(f"  {s.label:>8}  {s.name:<{width}}  {kind}{s.summary}{alias}")
        print()


def _workload_for(spec, shape):
    from schedules.workloads import workload_for

    shape = shape or DEFAULT_SHAPES[spec.kind]
    # tensor cores: half inputs where the shape names none (MxNxK, MxNxK:nt, bmm:BxMxNxK...)
    return workload_for(spec.kind, shape, "float32" if "float32" in spec.input_dtypes else spec.input_dtypes[0])


def cmd_show(args):
    from schedules import get

    if args.stage not in STAGES:
        raise CliError(f"--stage {args.stage!r} is not one of {', '.join(STAGES)}")
    spec = get(args.schedule)
    wl = _workload_for(spec, args.shape)
    cfg = spec.config(**_params(args.param))
    resolved = spec.resolve(wl, cfg)
    spec.validate(wl, cfg, resolved=resolved)
    if args.explain:
        explain = cfg.explain(wl)
        if explain is None:
            raise CliError(f"{spec.name} makes no shape-driven choice to explain (--explain is for the best_* steps)")
        print(explain)
        return
    sch = resolved.schedule(wl)
    if args.stage == "scheduled":
        print(f"# {spec.label} {spec.name} on {wl}: {spec.summary}\n# {cfg}")
        print(sch.mod.script())
        print("# trace (the schedule as replayable Python)")
        print(sch.trace)
        return
    from reports import build as B
    from schedules.common import pass_config_of

    built = B.build(sch, B.cuda_target(args.arch), pass_config=pass_config_of(resolved.step_config))
    if args.stage == "lowered":
        print(built.lowered)
    elif args.stage == "cuda":
        print(built.device.cuda)
    else:
        print(built.device.ptx)
        print("// ptxas report")
        for k in built.device.kernels:
            print(f"// {k.name}: {k.registers} registers, {k.shared_bytes} bytes smem, {k.stack_bytes} bytes "
                  f"stack, {k.spill_store_bytes} bytes spill stores, {k.spill_load_bytes} bytes spill loads")


def cmd_diff(args):
    from reports.diff import diff

    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") if args.color == "auto" else args.color == "always"
    sys.stdout.write(diff(args.a, args.b, args.shape, args.stage, args.arch, color=color,
                          default_shapes=DEFAULT_SHAPES))


def cmd_run(args):
    from reports import runner
    from reports.provenance import slug

    workloads = args.workload or list(runner.DEFAULT_WORKLOADS)
    names = [n for item in args.schedules or () for n in item.split(",") if n]
    baselines = None if args.baselines is None else [b for b in args.baselines.split(",") if b]
    params = {}
    if args.param:
        if len(names) != 1:
            raise CliError("--param needs exactly one schedule in --schedules")
        from schedules import get

        params = {get(names[0]).name: _params(args.param)}
    df = runner.run(workloads, names or None, baselines, out_dir=args.out, timeout=args.timeout, params=params,
                    progress=not args.quiet, workers=args.workers, report=not args.no_report)
    if args.publish:
        dest = os.path.join(ROOT, "reports", "results", slug(df.attrs["provenance"]["gpu"]), args.publish)
        runner.write_all(df, dest, report=not args.no_report, ir=False)
        print(f"published to {os.path.relpath(dest, ROOT)}", file=sys.stderr)
    with open(os.path.join(args.out, "table.md")) as f:
        print(f.read())
    if not args.no_report:
        print(f"report: {os.path.join(args.out, 'report.html')}", file=sys.stderr)
    failed = df[~df["status"].isin(["ok", "no-gpu", "unavailable"])]
    return 1 if len(failed) and args.strict else 0


def cmd_report(args):
    from reports.page import report

    print(report(args.dir))


def make_parser():
    p = argparse.ArgumentParser(prog="schedlab", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("list", help="the GEMM and GEMV ladders: every step, its number and what it changes")
    s.add_argument("--kind", choices=tuple(DEFAULT_SHAPES))
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("show", help="a step's IR: scheduled TIR, lowered TIR, CUDA source or PTX")
    s.add_argument("schedule")
    s.add_argument("--shape", help="MxNxK[:dtype] for GEMM, MxN[:dtype] for GEMV")
    s.add_argument("--stage", default="scheduled", help="|".join(STAGES))
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    s.add_argument("--arch", default=None, help="CUDA arch (default: the GPU's, else sm_90)")
    s.add_argument("--explain", action="store_true",
                   help="for a best_* step: its choice for the shape and the model's figures for the next best")
    s.set_defaults(fn=cmd_show)
    s = sub.add_parser("diff", help="what B changes against A: schedule primitives, ptxas resources, IR diff")
    s.add_argument("a")
    s.add_argument("b", nargs="?", help="default: A, compared with the step before it in its ladder")
    s.add_argument("--shape", help="MxNxK[:dtype] for GEMM, MxN[:dtype] for GEMV")
    s.add_argument("--stage", default="scheduled", help="|".join(STAGES))
    s.add_argument("--arch", default=None, help="CUDA arch (default: the GPU's, else sm_90)")
    s.add_argument("--color", default="auto", choices=("auto", "always", "never"))
    s.set_defaults(fn=cmd_diff)
    s = sub.add_parser("run", help="build, check and time every step beside the baselines")
    s.add_argument("--workload", action="append", help="gemm:MxNxK or gemv:MxN, optionally :float16 (repeatable)")
    s.add_argument("--schedules", action="append", help="names, comma-separated (default: all)")
    s.add_argument("--baselines", default=None, help="comma-separated: numpy_cpu,torch_cpu,cublas,cublas_tf32,tvm_dlight")
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    s.add_argument("--out", default="out/run", help="where results, tables, charts, report.html and IR files go")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per schedule and phase")
    s.add_argument("--workers", type=int, default=None, help="parallel build processes (default: CPU count - 1)")
    s.add_argument("--publish", metavar="NAME", help="also write the results to reports/results/<gpu>/NAME")
    s.add_argument("--no-report", action="store_true", help="no report.html")
    s.add_argument("--strict", action="store_true", help="exit 1 if any row failed")
    s.add_argument("--quiet", action="store_true", help="no progress")
    s.set_defaults(fn=cmd_run)
    s = sub.add_parser("report", help="write report.html for a results directory or a tuning directory")
    s.add_argument("dir")
    s.set_defaults(fn=cmd_report)
    from scripts.tune_cmd import add_parser as add_tune_parser

    add_tune_parser(sub)
    for name, module, text in (("bench-gemm", "bench_gemm", "the lab's GEMM choices beside dlight and cuBLAS"),
                               ("bench-gemv", "bench_gemv", "the GEMV steps beside dlight, cuBLAS and the copy bandwidth"),
                               ("sweep", "sweep", "configurations of the GEMM steps (the dispatcher's calibration data)"),
                               ("calibrate", "calibrate", "fit the dispatcher's model to a calibration sweep")):
        s = sub.add_parser(name, add_help=False, help=f"{text} (--help there)")
        s.set_defaults(fn=cmd_module, module=module)
    return p


def cmd_module(args):
    """Hand the rest of the command line to a benchmark module (its own --help)."""
    import importlib

    return importlib.import_module(f"reports.{args.module}").main(args.rest)


def main(argv=None):
    args, rest = make_parser().parse_known_args(argv)
    if rest and not hasattr(args, "module"):
        make_parser().parse_args(argv)  # the usual error for unknown arguments
    args.rest = rest
    from reports.files import OutputError
    from reports.results import ResultsError
    from schedules import ScheduleParamError

    try:
        return args.fn(args) or 0
    except (CliError, ScheduleParamError, ValueError, OutputError, ResultsError) as e:
        print(f"schedlab: error: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("schedlab: interrupted; the files written so far are marked incomplete where they are results",
              file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
