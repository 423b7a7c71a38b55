#!/bin/bash
# The GPU checks and published runs, in phases that each fit one device call (< 10 min).
# On the device, from the repository root:
#     source .tvm/prelude.sh && SCHEDLAB_COMMIT=<commit> bash scripts/gpu_verify.sh PHASE
# (SCHEDLAB_COMMIT: the copy of the tree there has no .git.) Files for the repository land in $OUT.
#   tests: every GPU test (pytest -m gpu; -n 4 where pytest-xdist is there)   ~2.5 min on an H200
#   run:   `schedlab run` with no arguments, published to reports/results    ~6 min (49 rows; less with --fork)
#   gemm:  scripts/bench_gemm.py --steps                                     ~3 min
#   gemv:  scripts/bench_gemv.py --extra                                     ~3 min
# Tuning has its own phases: scripts/tune_gpu.sh.
set -u
PHASE=${1:?phase: tests run gemm gemv}
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
case $PHASE in
  tests) # pytest-xdist where the machine has it (the device image does): GPU tests are checks, not timings
       XD=""; python3 -c "import xdist" 2>/dev/null && XD="-n ${XDIST:-4}"
       python3 -m pytest -q -m gpu -p no:cacheprovider $XD tests/ 2>&1 | tee "$OUT/gpu_tests.txt" | tail -30 ;;
  run) # the fork server saves ~3 s of imports per row; use it only if a small run through it is clean
       FORK=""
       python3 -m scripts.schedlab run --fork --strict --quiet --workload gemv:16384x16 --schedules warp_gemv \
         --baselines cublas --out out/fork_smoke > "$OUT/fork_smoke.txt" 2>&1 && FORK="--fork"
       echo "fork server: ${FORK:-not used (see fork_smoke.txt)}"
       python3 -m scripts.schedlab run $FORK --out out/run --publish default --timeout 120 > "$OUT/run.txt" 2>&1
       tail -5 "$OUT/run.txt"
       cp reports/results/*/default/* "$OUT"/ ;;
  gemm) python3 scripts/bench_gemm.py --steps --out "$OUT" 2>&1 | tail -40 ;;
  gemv) python3 scripts/bench_gemv.py --extra --out "$OUT" 2>&1 | tail -40 ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
