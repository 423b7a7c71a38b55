"""The ``schedlab`` command: list the steps, show a step's IR at any stage, diff two steps, run the
lab, benchmark, sweep, tune, write report pages and compare two runs.

Without installation: ``python -m scripts.schedlab ...`` from the repository root.

Every subcommand and its options are defined here, in one argparse tree; a command's module (TVM,
pandas, matplotlib) is imported only when that command runs, so ``schedlab --help`` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts import tune_cmd  # noqa: E402  (after the path above)
from scripts.steps_index import list_steps, plugin_sources, plugins_configured  # noqa: E402

STAGES = ("scheduled", "lowered", "cuda", "ptx")
DEFAULT_SHAPES = {"gemm": "1024x512x2048", "gemv": "16384x128", "gemv_t": "16384x4096"}
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
DESCRIPTION = ("The schedlab command: list the steps, show a step's IR at any stage, diff two steps, run the lab, "
               "benchmark, sweep, tune, write report pages and compare two runs.")
EPILOG = ("Run `schedlab COMMAND --help` for a command's options. --plugin FILE (repeatable, before or after the "
          "command) adds the steps a Python file registers; so do the files and modules named in SCHEDLAB_PLUGINS and "
          "installed packages' schedlab.plugins entry points (docs/plugins.md).")
PLUGIN_HELP = "a Python file (or module) that registers steps of your own (repeatable; docs/plugins.md)"


class CliError(Exception):
    pass


def _params(items):
    from reports.engine.build import parse_params  # heavy (TVM): a command's module

    try:
        return parse_params(items)
    except ValueError as e:
        raise CliError(str(e)) from None


def _version() -> str:
    """The lab's version and the TVM it is pinned to, from the installed packages' metadata (no
    import of TVM); ``(not installed)`` when run from a checkout without installing."""
    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "(not installed)"

    return f"schedlab {version('tvm-schedlab')} (apache-tvm {version('apache-tvm')}, apache-tvm-ffi {version('apache-tvm-ffi')})"


def cmd_list(args):
    steps = [s for s in list_steps(args) if args.kind in (None, s["kind"])]
    if args.json:
        print(json.dumps(steps, indent=1))
        return
    for ladder in dict.fromkeys(s["ladder"] for s in steps):  # the ladders in order, each with a step of the kind
        specs = [s for s in steps if s["ladder"] == ladder]
        width = max(len(s["name"]) for s in specs)
        number = max(8, *(len(s["label"]) for s in specs))
        print(f"{ladder.upper()} ladder")
        for s in specs:
            alias = f" (also {', '.join(s['aliases'])})" if s["aliases"] else ""
            kind = "" if s["kind"] == ladder else f"[{s['kind']}] "
            plugin = f" [plugin {s['plugin']}]" if s.get("plugin") else ""
            print(f"  {s['label']:>{number}}  {s['name']:<{width}}  {kind}{s['summary']}{alias}{plugin}")
        print()


def _workload_for(spec, shape):
    from schedules.workloads import workload_for  # heavy (TVM): a command's module

    shape = shape or DEFAULT_SHAPES[spec.kind]
    # tensor cores: half inputs where the shape names none (MxNxK, MxNxK:nt, bmm:BxMxNxK...)
    wl = workload_for(spec.kind, shape, "float32" if "float32" in spec.input_dtypes else spec.input_dtypes[0])
    layouts = spec.layouts
    if wl.kind == "gemm" and len(layouts) == 1 and not any(f.strip() in ("nn", "nt", "tn", "tt") for f in shape.split(":")):
        wl = dataclasses.replace(wl, layout=layouts[0])  # a step of one layout (FP8: nt): the shape names none
    scalings = spec.config_cls.scalings
    if getattr(wl, "fp8", False) and len(scalings) == 1 and "scale=" not in shape:
        wl = dataclasses.replace(wl, scaling=scalings[0])  # a step of one scaling (block): the shape names none
    return wl


def cmd_show(args):
    from schedules import get  # heavy (TVM): a command's module

    if args.stage not in STAGES:
        raise CliError(f"--stage {args.stage!r} is not one of {', '.join(STAGES)}")
    spec = get(args.schedule)
    wl = _workload_for(spec, args.shape)
    cfg = spec.config(**_params(args.param))
    resolved = spec.resolve(wl, cfg)
    spec.validate(wl, cfg, resolved=resolved)
    if args.json and not args.explain:
        raise CliError("--json is for --explain (the IR is text)")
    if args.explain:
        explain = cfg.explanation(wl) if args.json else cfg.explain(wl)
        if explain is None:
            raise CliError(f"{spec.name} makes no shape-driven choice to explain (--explain is for the best_* steps)")
        print(json.dumps(explain, indent=1, default=str) if args.json else explain)
        return
    if args.stage == "scheduled":
        sch = resolved.schedule(wl)
        print(f"# {spec.label} {spec.name} on {wl}: {spec.summary}\n# {cfg}")
        print(sch.mod.script())
        print("# trace (the schedule as replayable Python)")
        print(sch.trace)
        return
    from reports.engine import build as B  # heavy (TVM, the CUDA compiler hook): only to compile

    built = B.build_resolved(resolved, wl, B.cuda_target(args.arch))
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


def cmd_export(args):
    from reports.engine.files import ensure_out_dir  # heavy (TVM, the CUDA compiler hook): a command's module
    from reports.engine.kernel import compile_kernel
    from schedules import get

    spec = get(args.schedule)
    wl = _workload_for(spec, args.shape)
    ensure_out_dir(args.out)
    kernel = compile_kernel(spec.name, wl, _params(args.param), args.arch)
    paths = kernel.export(args.out)
    print(f"{kernel!r}")
    for launch in kernel.launches:
        print(f"  {launch.name}: grid {launch.grid}, block {launch.block}, "
              f"{launch.dynamic_shared_bytes} bytes of dynamic shared memory")
    for key in ("so", "cuda", "ptx", "cubin", "launch"):
        if key in paths:
            print(f"  {key:>6}: {paths[key]}")
    if "so" not in paths:
        print("  no kernel.so: this machine has no NVIDIA driver for TVM to embed the cubin (launch.json says more)",
              file=sys.stderr)


def cmd_diff(args):
    from reports.views.diff import diff  # heavy (TVM): a command's module

    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") if args.color == "auto" else args.color == "always"
    sys.stdout.write(diff(args.a, args.b, args.shape, args.stage, args.arch, color=color,
                          default_shapes=DEFAULT_SHAPES))


def cmd_run(args):
    from reports.engine.provenance import slug  # heavy (TVM, pandas): a command's modules
    from reports.experiments import run as runner
    from reports.views.tables import summary

    workloads = args.workload or list(runner.DEFAULT_WORKLOADS)
    names = [n.strip() for item in args.schedules or () for n in item.split(",") if n.strip()]
    if args.schedules is not None and not names:
        raise CliError("--schedules names no schedule (leave it out to run every step)")
    baselines = None if args.baselines is None else [b for b in args.baselines.split(",") if b]
    params = {}
    if args.param:
        if len(names) != 1:
            raise CliError("--param needs exactly one schedule in --schedules")
        from schedules import get  # heavy (TVM): a command's module

        params = {get(names[0]).name: _params(args.param)}
    df = runner.run(workloads, names or None, baselines, out_dir=args.out, timeout=args.timeout, params=params,
                    progress=not args.quiet, workers=args.workers, report=not args.no_report)
    dest = report = None
    if args.publish:  # under the working directory (the checkout's reports/results from its root), never the package
        dest = os.path.join(args.results_root, slug(df.attrs["provenance"]["gpu"]), args.publish)
        runner.write_all(df, dest, report=not args.no_report, ir=False)
        print(f"published to {dest}", file=sys.stderr)
    if not args.no_report:
        report = os.path.join(args.out, "report.html")
    if args.json:
        print(json.dumps(summary(df, out_dir=args.out, report=report, published=dest), indent=1))
    else:
        with open(os.path.join(args.out, "table.md")) as f:
            print(f.read())
    if report:
        print(f"report: {report}", file=sys.stderr)
    failed = df[~df["status"].isin(["ok", "no-gpu", "unavailable"])]
    return 1 if len(failed) and args.strict else 0


def cmd_report(args):
    from reports.views.page import report  # heavy (TVM, pandas): a command's module

    path, written = report(args.dir, out=args.out, force=args.force)
    print(path if written else f"{path} (unchanged: the same page was there)")


def cmd_compare(args):
    from reports.experiments import compare  # heavy (TVM, pandas, matplotlib): a command's module
    from reports.views.comparison import markdown

    c = compare.compare(args.a, args.b, by=args.by)
    if args.out:
        paths = compare.write(c, args.out)
        print(f"written: {', '.join(paths.values())}", file=sys.stderr)
    print(json.dumps(c.to_json(), indent=1) if args.json else markdown(c))


def cmd_bench_gemm(args):
    from reports.experiments import bench_gemm  # heavy (TVM, pandas): a command's module

    text = ",".join(bench_gemm.PRECISIONS) if args.precisions is None else args.precisions
    precisions = [p.strip() for p in text.split(",") if p.strip()]
    known = bench_gemm.PRECISIONS + bench_gemm.EXTRA_PRECISIONS
    for p in precisions:
        if p not in known:
            raise ValueError(f"--precisions: {p!r} is not one of {', '.join(known)}")
    extra = [p for p in precisions if p in bench_gemm.EXTRA_PRECISIONS]
    if extra and (args.layouts or args.random):
        raise ValueError(f"--precisions {','.join(extra)}: for the fixed shapes only, not --layouts or --random")
    if args.layouts:
        from reports.experiments import bench_layouts  # heavy: as above

        if args.out == "out/bench_gemm":
            args.out = "out/bench_layouts"
        return bench_layouts.command(args)
    if args.llm:
        from reports.experiments import bench_llm  # heavy: as above

        given = [o for o, v in (("--shapes", args.shapes), ("--precisions", args.precisions), ("--random", args.random),
                                ("--layouts", args.layouts), ("--steps", args.steps)) if v]
        if given:
            raise CliError(f"--llm times bf16 language-model layers: it takes --models, --rows, --forms and --no-epilogue, "
                           f"not {', '.join(given)}")
        if args.out == "out/bench_gemm":
            args.out = "out/bench_llm"
        return bench_llm.command(args)
    if args.models or args.rows or args.forms or args.no_epilogue:
        raise CliError("--models, --rows, --forms and --no-epilogue go with --llm")
    if args.random:
        from reports.experiments import bench_random  # heavy: as above

        return bench_random.command(args, precisions)
    return bench_gemm.command(args, precisions)


def cmd_tune_random(args):
    from reports.experiments import tune_random  # heavy (TVM, pandas): a command's module

    return tune_random.command(args)


def cmd_bench_gemv(args):
    from reports.experiments import bench_gemv  # heavy (TVM, pandas): a command's module

    return bench_gemv.command(args)


def cmd_sweep(args):
    from reports.experiments import calibrate, sweep  # heavy (TVM, pandas): a command's module

    if args.precisions is not None and args.set != "calibration":
        raise CliError(f"--precisions is for --set calibration, not --set {args.set}")
    text = ",".join(calibrate.PRECISIONS) if args.precisions is None else args.precisions
    args.precisions = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in args.precisions:
        if p not in calibrate.SWEEP_PRECISIONS:
            raise CliError(f"--precisions: {p!r} is not one of {', '.join(calibrate.SWEEP_PRECISIONS)}")
    return sweep.command(args)


def cmd_calibrate(args):
    from reports.experiments import calibrate  # heavy (TVM, pandas): a command's module

    return calibrate.command(args)


def add_bench_args(s, out_default: str):
    """The options every benchmark shares (bench-gemm, bench-gemv, sweep)."""
    s.add_argument("--out", default=out_default, help="where results.json/.csv, table.md and charts go")
    s.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="parallel build processes (default: CPU count - 1)")
    s.add_argument("--budget", type=float, default=0.3, help="seconds of timed runs per kernel")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per kernel, per phase")
    s.add_argument("--quiet", action="store_true", help="no progress")


def _command(sub, name: str, text: str, description: str | None = None):
    """A subcommand whose one-line help is ``text`` and whose --help opens with ``description``."""
    return sub.add_parser(name, help=text, description=description or text)


def _target_options(s, arch: bool = True):
    """--gpu (and --arch): the GPU a command plans and builds for, where it is not this machine's."""
    s.add_argument("--gpu", default=None, metavar="NAME",
                   help="plan and build for this GPU: A100, RTX 3090, RTX 4090, H100, H200, B200, RTX 5090, or an "
                        "architecture such as sm_86 (default: $SCHEDLAB_GPU, else this machine's GPU, else an H100)")
    if arch:
        s.add_argument("--arch", default=None, help="CUDA arch, e.g. sm_80 (default: that of --gpu, else this machine's "
                                                    "GPU's, else sm_90); alone, it names that architecture's GPU")


def _select_gpu(args):
    """--gpu NAME / --arch sm_XY: plan and build for that GPU (its profile, schedules.gpus), in this
    process and the processes it starts."""
    gpu, arch = getattr(args, "gpu", None), getattr(args, "arch", None)
    if gpu or (arch and hasattr(args, "gpu")):
        from reports.engine.build import select_gpu  # heavy (TVM): only where a GPU is named

        select_gpu(gpu, arch)


def make_parser():
    p = argparse.ArgumentParser(prog="schedlab", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=_version())
    p.add_argument("--plugin", action="append", dest="plugin_before", metavar="FILE", help=PLUGIN_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    s = _command(sub, "list", "List the GEMM and GEMV ladders: every step, its number and what it changes.")
    s.add_argument("--kind", choices=tuple(DEFAULT_SHAPES))
    s.add_argument("--json", action="store_true", help="print the steps as JSON (one object per step)")
    s.set_defaults(fn=cmd_list)
    s = _command(sub, "show", "Show a step's IR: scheduled TIR, lowered TIR, CUDA source or PTX.")
    s.add_argument("schedule")
    s.add_argument("--shape", help="MxNxK[:dtype] for GEMM, MxN[:dtype] for GEMV")
    s.add_argument("--stage", default="scheduled", help="|".join(STAGES))
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    _target_options(s)
    s.add_argument("--explain", action="store_true",
                   help="for a best_* step: its choice for the shape and the model's figures for the next best")
    s.add_argument("--json", action="store_true", help="with --explain: the choice and the figures as JSON")
    s.set_defaults(fn=cmd_show)
    s = _command(sub, "export", "Export a step compiled for one workload: the module (kernel.so, where the "
                 "CUDA driver is), its CUDA source, PTX and cubin, and launch.json (entry points in launch order "
                 "with their grid, block and dynamic shared memory, the arguments, the chosen configuration).")
    s.add_argument("schedule")
    s.add_argument("--shape", help="MxNxK[:dtype][:layout] for GEMM, MxN[:dtype] for GEMV")
    s.add_argument("--out", required=True, help="the directory to write into")
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    _target_options(s)
    s.set_defaults(fn=cmd_export)
    s = _command(sub, "diff", "Show what step B changes against step A: the schedule primitives, the ptxas "
                 "resources and a diff of their IR.")
    s.add_argument("a")
    s.add_argument("b", nargs="?", help="default: A, compared with the step before it in its ladder")
    s.add_argument("--shape", help="MxNxK[:dtype] for GEMM, MxN[:dtype] for GEMV")
    s.add_argument("--stage", default="scheduled", help="|".join(STAGES))
    _target_options(s)
    s.add_argument("--color", default="auto", choices=("auto", "always", "never"))
    s.set_defaults(fn=cmd_diff)
    s = _command(sub, "run", "Build, check and time every step beside the baselines.")
    s.add_argument("--workload", action="append", help="gemm:MxNxK or gemv:MxN, optionally :float16, a layout, "
                   ":out=TYPE and an epilogue (docs/epilogues.md; repeatable)")
    s.add_argument("--schedules", action="append", help="names, comma-separated (default: all)")
    s.add_argument("--baselines", default=None, help="comma-separated: numpy_cpu,torch_cpu,cublas,cublas_tf32,cublaslt_fused,"
                   "torch_eager,dequant_bf16_cublas (block-scaled 8-bit inputs),tvm_dlight")
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    s.add_argument("--out", default="out/run", help="where results, tables, charts, report.html and IR files go")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per schedule and phase")
    s.add_argument("--workers", type=int, default=None, help="parallel build processes (default: CPU count - 1)")
    s.add_argument("--publish", metavar="NAME", help="also write the results to RESULTS_ROOT/<gpu>/NAME")
    s.add_argument("--results-root", default=os.path.join("reports", "results"), metavar="RESULTS_ROOT",
                   help="where --publish writes (default: reports/results under the working directory)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON (one object per row, with "
                   "the run's provenance and where its files are) instead of the Markdown table")
    s.add_argument("--no-report", action="store_true", help="no report.html")
    s.add_argument("--strict", action="store_true", help="exit 1 if any row failed")
    s.add_argument("--quiet", action="store_true", help="no progress")
    _target_options(s, arch=False)
    s.set_defaults(fn=cmd_run)
    s = _command(sub, "report", "Write report.html for a results directory or a tuning directory.",
                 "Write report.html for a results directory or a tuning directory, in that directory or in --out. "
                 "An identical page already there is left untouched; a published folder (under reports/results/) "
                 "is written into only with --force.")
    s.add_argument("dir")
    s.add_argument("--out", default=None, metavar="DIR", help="write the page (and a tuning report) here instead")
    s.add_argument("--force", action="store_true", help="write into a published folder (reports/results/...)")
    s.set_defaults(fn=cmd_report)
    s = _command(sub, "compare", "Compare two results folders row by row (two GPUs, two commits, two settings).",
                 "Two results folders of the same kind joined on each row's id: per row the ratio of B's throughput "
                 "to A's (A's time / B's time) and each side's % of cuBLAS, per group the geometric mean of the "
                 "ratios; a Markdown table (or JSON) on stdout, and with --out also compare.md, compare.json and a "
                 "chart, compare.png.")
    s.add_argument("a", metavar="A", help="a results folder (or its results.json)")
    s.add_argument("b", metavar="B", help="the results folder compared with A")
    s.add_argument("--by", default="precision", help="the column whose groups get a geometric mean (default: "
                   "precision; e.g. kind, dtype, role, name, ladder)")
    s.add_argument("--out", default=None, help="also write compare.md, compare.json and compare.png here")
    s.add_argument("--json", action="store_true", help="print the comparison as JSON instead of Markdown")
    s.set_defaults(fn=cmd_compare)
    tune_cmd.add_parser(sub)
    s = _command(sub, "bench-gemm", "Benchmark the lab's GEMM choices beside dlight and cuBLAS.",
                 "The lab's GEMM choices and tensor-core steps beside TVM's dlight rules and cuBLAS of the same "
                 "precision, on fixed shapes; with --random N, on N shapes nobody chose; with --layouts, the operand "
                 "layouts nn, nt, tn and tt and batched products beside cuBLAS of the same layout. Every result is "
                 "checked against float64 first, then timed.")
    add_bench_args(s, "out/bench_gemm")
    s.add_argument("--shapes", default=None, help="comma-separated MxNxK[:layout][:out=TYPE][:epilogue] (default: the "
                   "benchmark's six shapes)")
    s.add_argument("--precisions", default=None, help="comma-separated: fp32,tf32,fp16,bf16 (default: all four), fp8 (by name: e4m3, nt, bf16 out, "
                        "per-tensor, row and block scales, beside torch._scaled_mm)")
    s.add_argument("--steps", action="store_true", help="also the fast fp32 steps at their defaults")
    s.add_argument("--random", type=int, default=0, metavar="N", help="N random shapes instead (bench_random)")
    s.add_argument("--layouts", action="store_true",
                   help="the operand layouts nn/nt/tn/tt (4096³, 1024x512x2048; fp32, fp16) and fp16 bmm at "
                        "attention-like shapes beside cuBLAS of the same layout, instead (bench_layouts)")
    s.add_argument("--seed", type=int, default=0, help="with --random: the drawing's seed")
    s.add_argument("--llm", action="store_true", help="language-model linear layers (bf16 in and out, weight N×K, "
                   "1 to 8192 rows, with its model's epilogue, without, and with a bias and GELU) beside cuBLAS, "
                   "cuBLASLt's fused epilogue and eager PyTorch (bench_llm)")
    s.add_argument("--models", default=None, help="with --llm: comma-separated models (default: llama-3.1-8b, "
                   "qwen2.5-7b, phi-2; also llama-3.1-70b)")
    s.add_argument("--rows", default=None, help="with --llm: comma-separated row counts M (default: "
                   "1,16,61,256,1000,2000,4096,8192)")
    s.add_argument("--forms", default=None, help="with --llm: comma-separated forms of each layer: model (its model's "
                   "epilogue), plain (none), bias_gelu (a bias and the tanh GELU, past 64 rows); default: all three")
    s.add_argument("--no-epilogue", action="store_true", help="with --llm: every layer as the product alone (bf16 out): "
                   "--forms plain")
    s.set_defaults(fn=cmd_bench_gemm)
    s = _command(sub, "tune-random", "Tune the dispatcher's worst fp32 shapes of a random draw, each within a time limit.",
                 "The draw of bench-gemm --random N --seed S: its K fp32 shapes where the dispatcher's choice is "
                 "furthest from cuBLAS (from --from DIR, that run's results, or timed here), each tuned by schedlab tune "
                 "--time-limit T; per shape the dispatcher's and the tuned kernel's % of cuBLAS in schedlab run's "
                 "harness, the wall time and the trials. Needs a GPU.")
    s.add_argument("--random", type=int, default=100, metavar="N", help="shapes in the draw (default %(default)s)")
    s.add_argument("--seed", type=int, default=0, help="the draw's seed (default %(default)s)")
    s.add_argument("--worst", type=int, default=5, metavar="K", help="shapes to tune (default %(default)s)")
    s.add_argument("--time-limit", type=float, default=300.0, metavar="S",
                   help="each shape's schedlab tune, whole (default %(default)g)")
    s.add_argument("--reselect", type=int, default=3, metavar="K", help="each tuning run's K fastest retimed in the "
                   "harness, the fastest there kept (default %(default)s)")
    s.add_argument("--ranks", default=None, metavar="R,..", help="tune only these of the K shapes (1: the furthest "
                   "from cuBLAS), adding them to the table in --out: one command per shape")
    s.add_argument("--from", dest="source", default=None, metavar="DIR",
                   help="the results of bench-gemm --random N --seed S (else its fp32 part is timed here)")
    add_bench_args(s, "out/tune_random")
    s.set_defaults(fn=cmd_tune_random)
    s = _command(sub, "bench-gemv", "Benchmark the GEMV steps beside dlight, cuBLAS and the copy bandwidth.",
                 "GEMV at the memory-bandwidth limit: the dispatcher's choice, every GEMV step (with --sweep, their "
                 "parameter sweep), TVM's dlight rule and cuBLAS, checked against float64 and timed under three cache "
                 "policies: L2 emptied by reading, L2 flushed by writing, and warm.")
    add_bench_args(s, "out/bench_gemv")
    s.add_argument("--workload", action="append", help="override the shapes (repeatable)")
    s.add_argument("--extra", action="store_true", help="also odd shapes, fp16 and the transposed form")
    s.add_argument("--sweep", action="store_true", help="also every parameter sweep point")
    s.set_defaults(fn=cmd_bench_gemv)
    s = _command(sub, "sweep", "Time configurations of the GEMM steps (the dispatcher's calibration data).",
                 "Configurations of the GEMM steps beside dlight and cuBLAS, on a GPU. The default set, calibration, "
                 "is the dispatcher's calibration sweep, which `schedlab calibrate` fits the model to; the other sets "
                 "are the sweeps the steps' default configurations were chosen from.")
    add_bench_args(s, "out/sweep")
    s.add_argument("--set", default="calibration", choices=("calibration", "fp32", "fp16", "all", "round2", "wgmma", "tf32"))
    s.add_argument("--shapes", default=None, help="comma-separated MxNxK (default: the sweep's four shapes; not "
                   "used by --set calibration)")
    s.add_argument("--part", default="all",
                   help="with --set calibration: the shape grid (grid), the shape classes (classes), both (all), "
                        "or the one class whose name starts with PART (reports.experiments.calibrate.CLASSES)")
    s.add_argument("--precisions", default=None, metavar="LIST",
                   help="with --set calibration: the precisions to measure, comma-separated, of fp32, tf32, fp16 "
                        "(the default) and fp8 (e4m3 products with tensor and block scales, asked for by name)")
    s.add_argument("--where", nargs="+", default=[], metavar="PARAM=VALUE",
                   help="only the configurations whose parameters have these values (and cuBLAS beside them)")
    s.set_defaults(fn=cmd_sweep)
    s = _command(sub, "calibrate", "Fit the dispatcher's model to a calibration sweep.",
                 "Fit the constants of the dispatcher's model (schedules.dispatch) to one or more calibration sweeps, "
                 "and report how well the model ranks the kernels before and after the fit.")
    s.add_argument("dirs", nargs="+", metavar="DIR", help="results of `schedlab sweep --set calibration` (one or more)")
    s.add_argument("--write", metavar="FILE", help="write the fitted constants to FILE (JSON); the dispatcher "
                   "reads them with SCHEDLAB_CALIBRATION=FILE (else the packaged calibration)")
    s.add_argument("--report", default=None, help="also write the fit's report (JSON) here")
    s.set_defaults(fn=cmd_calibrate)
    for s in sub.choices.values():  # every command takes --plugin after its name too
        s.add_argument("--plugin", action="append", dest="plugin", metavar="FILE", help=PLUGIN_HELP)
    return p


def load_plugins(args) -> list[str]:
    """Load the plugins named by --plugin (before and after the command), after those of
    SCHEDLAB_PLUGINS and the installed entry points; one-line errors (PluginError). Nothing (no
    TVM either) where none is named."""
    if not plugins_configured(args):
        return []
    from schedules import plugins  # heavy (TVM): only where a plugin is named

    return plugins.load(*plugin_sources(args))


def _stdout_closed():
    """Point stdout at /dev/null: the reader left (``schedlab list | head -1``), and the interpreter's
    last flush must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be: a command stops the same way
    (its workers ended, what it finished written) and exits with 143."""


def _terminate(signum, frame):
    raise Terminated()


def main(argv=None):
    previous = None
    try:
        args = make_parser().parse_args(argv)  # Ctrl-C can land here too
        try:
            previous = signal.signal(signal.SIGTERM, _terminate)
        except ValueError:  # not the main thread: SIGTERM keeps its own handling
            previous = None
        load_plugins(args)
        _select_gpu(args)
        code = args.fn(args) or 0
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        _stdout_closed()
        return 0
    except (CliError, ValueError) as e:  # ScheduleParamError, OutputError, ResultsError... are ValueErrors
        print(f"schedlab: error: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated); the message says what was kept
        what = "terminated" if isinstance(e, Terminated) else "interrupted"
        print(f"schedlab: {what}; {str(e) or 'the files written so far are marked incomplete where they are results'}",
              file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
