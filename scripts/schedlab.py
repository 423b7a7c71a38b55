"""The ``schedlab`` command: list the schedules, show a schedule's IR at any stage, run the lab.

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


class CliError(Exception):
    pass


def _params(items):
    from reports.build import parse_params

    try:
        return parse_params(items)
    except ValueError as e:
        raise CliError(str(e)) from None


def cmd_list(args):
    import tuning.tuned  # noqa: F401  (registers tuned_gemm)
    from schedules import all_schedules

    specs = all_schedules(args.kind)
    width = max(len(s.name) for s in specs)
    for s in specs:
        alias = f" (also {', '.join(s.aliases)})" if s.aliases else ""
        print(f"{s.step:>3}  {s.kind}  {s.name:<{width}}  {s.summary}{alias}")


def cmd_show(args):
    import tuning.tuned  # noqa: F401  (registers tuned_gemm)
    from schedules import get, parse_workload

    if args.stage not in STAGES:
        raise CliError(f"--stage {args.stage!r} is not one of {', '.join(STAGES)}")
    spec = get(args.schedule)
    shape = args.shape or DEFAULT_SHAPES[spec.kind]
    if ":" not in shape and "float32" not in spec.input_dtypes:  # tensor cores: half inputs by default
        shape += f":{spec.input_dtypes[0]}"
    wl = parse_workload(f"{spec.kind}:{shape}")
    cfg = spec.config(**_params(args.param))
    spec.validate(wl, cfg)
    sch = spec.builder(wl, cfg)
    if args.stage == "scheduled":
        print(f"# {spec.name} on {wl}: {spec.summary}\n# {cfg}")
        print(sch.mod.script())
        print("# trace (the schedule as replayable Python)")
        print(sch.trace)
        return
    from reports import build as B

    built = B.build_config(sch, cfg, B.cuda_target(args.arch))
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
    results = runner.run(workloads, names or None, baselines, out_dir=args.out, timeout=args.timeout,
                         params=params, progress=not args.quiet, fork=args.fork)
    if args.publish:
        dest = os.path.join(ROOT, "reports", "results", slug(results["provenance"]["gpu"]), args.publish)
        runner.write_results(results, dest, ir=False)
        print(f"published to {os.path.relpath(dest, ROOT)}", file=sys.stderr)
    with open(os.path.join(args.out, "table.md")) as f:
        print(f.read())
    failed = [r for r in results["rows"] if r.get("status") not in ("ok", "no-gpu", "unavailable")]
    return 1 if failed and args.strict else 0


def make_parser():
    p = argparse.ArgumentParser(prog="schedlab", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("list", help="every schedule, its workload kind and what it does")
    s.add_argument("--kind", choices=tuple(DEFAULT_SHAPES))
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("show", help="a schedule's IR: scheduled TIR, lowered TIR, CUDA source or PTX")
    s.add_argument("schedule")
    s.add_argument("--shape", help="MxNxK for GEMM, MxN for GEMV")
    s.add_argument("--stage", default="scheduled", help="|".join(STAGES))
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    s.add_argument("--arch", default=None, help="CUDA arch (default: the GPU's, else sm_90)")
    s.set_defaults(fn=cmd_show)
    s = sub.add_parser("run", help="build, check and time every schedule beside the baselines")
    s.add_argument("--workload", action="append", help="gemm:MxNxK or gemv:MxN (repeatable)")
    s.add_argument("--schedules", action="append", help="names, comma-separated (default: all)")
    s.add_argument("--baselines", default=None, help="comma-separated: numpy_cpu,torch_cpu,cublas,tvm_dlight")
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    s.add_argument("--out", default="out/run", help="where results, tables, charts and IR files go")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per schedule")
    s.add_argument("--publish", metavar="NAME", help="also write the report to reports/results/<gpu>/NAME")
    s.add_argument("--strict", action="store_true", help="exit 1 if any row failed")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--fork", action="store_true",
                   help="fork each schedule's process from one warm parent (faster; still one process each)")
    s.set_defaults(fn=cmd_run)
    from scripts.tune_cmd import add_parser as add_tune_parser

    add_tune_parser(sub)
    s = sub.add_parser("bench-gemm", add_help=False,
                       help="the fast GEMM schedules beside dlight and cuBLAS (scripts/bench_gemm.py; --help there)")
    s.set_defaults(fn=cmd_bench)
    s = sub.add_parser("bench-gemv", add_help=False,
                       help="the GEMV family beside dlight, cuBLAS and the copy bandwidth (scripts/bench_gemv.py)")
    s.set_defaults(fn=cmd_bench)
    return p


def cmd_bench(args):
    """Hand the rest of the command line to the benchmark script (its own --help)."""
    import importlib

    module = importlib.import_module(f"scripts.bench_{args.command.split('-')[1]}")
    return module.main(args.rest)


def main(argv=None):
    args, rest = make_parser().parse_known_args(argv)
    if rest and not args.command.startswith("bench-"):
        make_parser().parse_args(argv)  # the usual error for unknown arguments
    args.rest = rest
    from schedules import ScheduleParamError

    try:
        return args.fn(args) or 0
    except (CliError, ScheduleParamError, ValueError) as e:
        print(f"schedlab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
