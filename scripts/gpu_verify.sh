#!/bin/bash
# The GPU checks and published runs, in phases that each fit one device call (< 10 min).
# On the device, from the repository root:
#     source .tvm/prelude.sh && SCHEDLAB_COMMIT=<commit> bash scripts/gpu_verify.sh PHASE
# (SCHEDLAB_COMMIT: the copy of the tree there has no .git.) Files for the repository land in $OUT.
#   tests: every GPU test (pytest -m gpu)                                   ~4 min
#   run:   `schedlab run` with no arguments, published to reports/results    ~5 min (50 rows, ~6 s each)
#   gemm:  scripts/bench_gemm.py --steps                                     ~3 min
#   gemv:  scripts/bench_gemv.py --extra                                     ~3 min
# Tuning has its own phases: scripts/tune_gpu.sh.
set -u
PHASE=${1:?phase: tests run gemm gemv}
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
case $PHASE in
  tests) python3 -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tee "$OUT/gpu_tests.txt" | tail -30 ;;
  run) python3 -m scripts.schedlab run --out out/run --publish default --timeout 120 > "$OUT/run.txt" 2>&1
       tail -5 "$OUT/run.txt"
       cp reports/results/*/default/* "$OUT"/ ;;
  gemm) python3 scripts/bench_gemm.py --steps --out "$OUT" 2>&1 | tail -40 ;;
  gemv) python3 scripts/bench_gemv.py --extra --out "$OUT" 2>&1 | tail -40 ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
