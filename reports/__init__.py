"""Build, check, time, tabulate and chart the lab's schedules. From Python (a notebook)::

    from reports import run, load_results
    df = run(["gemm:2048x2048x2048"], schedules=["warp_tiled_gemm", "best_gemm"], out_dir="out/nb")
    old = load_results("reports/results/NVIDIA_H200/default")

Three subpackages, one role each: :mod:`reports.engine` (the one measurement path: isolate → build
→ check against float64 → time, and its plumbing), :mod:`reports.views` (tables, charts, the report
page, diffs) and :mod:`reports.experiments` (which jobs to run and how to tabulate them).
"""


def run(*args, **kwargs):
    """The main job of ``schedlab run`` (see :func:`reports.experiments.run.run`); returns the results DataFrame."""
    # heavy (TVM, pandas, matplotlib): `import reports.engine.isolate` in a worker process must not pay for it
    from .experiments.run import run as _run

    return _run(*args, **kwargs)


def load_results(path):
    """Any results directory (or results.json) back as a DataFrame (see :func:`reports.engine.results.load_results`)."""
    # heavy (TVM, pandas): as above
    from .engine.results import load_results as _load

    return _load(path)


def compile_kernel(*args, **kwargs):
    """A step compiled for one workload, callable on PyTorch CUDA tensors and exportable (see
    :func:`reports.engine.kernel.compile_kernel`)."""
    # heavy (TVM): as above
    from .engine.kernel import compile_kernel as _compile

    return _compile(*args, **kwargs)


def linear_module(*args, **kwargs):
    """A ``torch.nn.Module`` computing ``x @ weight.T`` with a lab kernel (see
    :func:`reports.engine.kernel.linear_module`)."""
    # heavy (TVM, torch): as above
    from .engine.kernel import linear_module as _linear

    return _linear(*args, **kwargs)


__all__ = ["run", "load_results", "compile_kernel", "linear_module"]
