#!/usr/bin/env bash
# Reproduce a published figure on a CUDA machine (driver + CUDA toolkit; `pip install -e '.[torch,test]'`):
#
#     scripts/reproduce.sh PHASE --out DIR
#
# Each phase is one `schedlab` command (listed below); its results, tables, charts and report.html
# land in DIR. The published copies live in reports/results/<gpu>/<name>/.
#   tests        every GPU test (pytest -m gpu)                              -> DIR/gpu_tests.txt
#   run          the main job: every step, every baseline                     -> reports/results/<gpu>/default
#   bench-gemm   the lab's choices and the tensor-core ladder vs cuBLAS       -> reports/results/<gpu>/bench_gemm
#   random       60 random shapes, seed 1, fp32/tf32/fp16 vs cuBLAS          -> reports/results/<gpu>/bench_random
#   bench-gemv   the GEMV steps vs cuBLAS and the copy bandwidth              -> reports/results/<gpu>/bench_gemv
#   llm          language models' linear layers (bf16, epilogues) vs cuBLAS(Lt) -> reports/results/<gpu>/bench_llm
#   calibration  the dispatcher's calibration sweep, then the fit             -> reports/results/<gpu>/calibration
#   tune         MetaSchedule tuning from the dispatcher's choice             -> reports/results/<gpu>/tuning
set -euo pipefail
PHASE=${1:?"usage: scripts/reproduce.sh PHASE --out DIR (PHASE: tests run bench-gemm random bench-gemv llm calibration tune)"}
shift
OUT=out/$PHASE
if [ "${1:-}" = "--out" ]; then OUT=${2:?--out needs a directory}; shift 2; fi
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
S="python3 -m scripts.schedlab"
case $PHASE in
  tests)       python3 -m pytest -q -m gpu tests/ 2>&1 | tee "$OUT/gpu_tests.txt" ;;
  run)         $S run --out "$OUT" --publish default ;;
  bench-gemm)  $S bench-gemm --steps --out "$OUT" ;;
  random)      $S bench-gemm --random 60 --seed 1 --out "$OUT" ;;
  bench-gemv)  $S bench-gemv --extra --out "$OUT" ;;
  llm)         $S bench-gemm --llm --out "$OUT" ;;
  calibration) $S sweep --set calibration --out "$OUT" && $S calibrate "$OUT" --write "$OUT/calibration.json" --report "$OUT/fit.json" ;;
  tune)        $S tune --workload gemm:1024x512x2048 --space fast --trials 256 --compare default,dlight --db "$OUT" &&
               $S tune --workload gemm:1024x512x2048 --db "$OUT" --report-only --reselect 5 --hand ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
