"""Build, check, time, tabulate and chart the lab's schedules. From Python (a notebook)::

    from reports import run, load_results
    df = run(["gemm:2048x2048x2048"], schedules=["warp_tiled_gemm", "best_gemm"], out_dir="out/nb")
    old = load_results("reports/results/NVIDIA_H200/default")
"""


def run(*args, **kwargs):
    """The main job of ``schedlab run`` (see :func:`reports.runner.run`); returns the results DataFrame."""
    from .runner import run as _run

    return _run(*args, **kwargs)


def load_results(path):
    """Any results directory (or results.json) back as a DataFrame (see :func:`reports.results.load_results`)."""
    from .results import load_results as _load

    return _load(path)


__all__ = ["run", "load_results"]
