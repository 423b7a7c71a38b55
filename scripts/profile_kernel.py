"""Launch one schedule's kernel a few times with nothing else around it, for a profiler:

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_kernel.py tensor_core_gemm gemm:4096x4096x4096:float16

(the first launches warm up; profile a later one). The kernel is built and checked against float64
through the lab's measurement path (reports.engine.harness), in this process, so the profiled kernel is
known to be the right one.
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

    # heavy (TVM, torch): loaded once the arguments are read
    from reports.engine.build import parse_params
    from reports.engine.harness import check_in_process

    row = check_in_process(args.schedule, args.workload, parse_params(args.param), launches=args.launches - 1)
    print(f"{row['name']} on {row['workload']}: {row['status']}, rel. error {row.get('rel_error', float('nan')):.2e}; "
          f"{row.get('registers')} registers, {row.get('shared_bytes')} B static shared, {row.get('spill_bytes')} B spilled")
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
