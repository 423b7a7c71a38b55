"""Launch one schedule's kernel a few times with nothing else around it, for a profiler:

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_kernel.py tensor_core_gemm gemm:4096x4096x4096:float16

(the first launches warm up; profile a later one). Prints the check against float64 so that the
profiled kernel is known to be the right one.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule")
    ap.add_argument("workload")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--param", action="append", default=[], help="NAME=VALUE config override")
    args = ap.parse_args(argv)

    from reports import build as B
    from reports import measure as M

    spec, wl, cfg, built = B.build_named(args.schedule, args.workload, B.parse_params(args.param))
    harness = M.CudaHarness(flush=None)
    inputs = M.random_inputs(wl)
    shape, dtype = wl.arg_shapes()[-1]
    bufs = [harness.to_device(x) for x in inputs] + [harness.empty(shape, dtype)]
    harness.poison(bufs[-1])
    args_tvm = [harness.tvm_view(b) for b in bufs]
    for _ in range(args.launches):
        built.executable["main"](*args_tvm)
    harness.sync()
    err = M.product_error(wl, harness.to_numpy(bufs[-1]), inputs)
    k = built.kernel
    print(f"{spec.name} on {wl}: rel. error {err:.2e}; {k.name}: {k.registers} registers, "
          f"{k.shared_bytes} B static shared, {k.spills} B spilled")
    return 0 if err < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
