#!/bin/bash
# A session's GPU work on the two-GPU device kind (nvidia-h200-x2), in calls of < 10 min, two lanes
# each (one per GPU, pinned with CUDA_VISIBLE_DEVICES). On the device, from the repository root:
#     source .tvm/prelude.sh && SCHEDLAB_COMMIT=<commit> bash scripts/gpu_session.sh T
#     ... bash scripts/gpu_session.sh C      (carry out/tune_w1 and out/tune_w2 unpacked from call T)
# Call T: the tuning runs with the cold timer (L2 flushed before every timed run), one workload per
#         GPU: GPU 0 1024x512x2048 (fast space 256 trials, MetaSchedule's default space 256, the classic
#         36, dlight); GPU 1 4096^3 (fast 128, default 128, dlight). Each run is capped (LIMIT_*).
# Call C: first what call T's limits cut short (C_TUNE0, default w1-classic; C_TUNE1, default w2-default,
#         resumed to its trial budget), then each run's top RESELECT (default 3) timed again in the
#         harness (the fastest there becomes tuned_gemm) and both reports (tuned vs every space vs the hand schedules vs cuBLAS), one
#         workload per GPU; then GPU 0 runs the tuning/run GPU tests and GPU 1 the disassembly counts
#         of the fp16 tensor-core kernel (scripts/sass_stats.py), or with C_ALL_TESTS=1 every GPU test.
#         Without out/tune_w*, it starts from the committed tuning state (reports/results/<gpu>/tuning/db_w*).
# Calls A and B (session 2: the published run, all GPU tests, warm-timer tuning, ncu, RPC scale-out)
# are kept for reruns. Tornado (for the RPC tracker) is read from .deps/ when carried. Everything worth
# keeping is packed into $OUT/session_<call>.tgz (the device returns few files); lane logs beside it.
set -u
CALL=${1:?call: T, C, A or B}
OUT=${OUT:-out}
START=$(date +%s)
export DEADLINE=$(( START + ${BUDGET_S:-570} ))
export PYTHONPATH=$PWD/.deps${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
S=out/session_$CALL
mkdir -p "$S" "$OUT"
nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv > "$S/gpus.csv" 2>&1

lane() {  # lane GPU STEP...: the steps one after another on one GPU, logged to $S/laneGPU.log
  local gpu=$1; shift
  ( export CUDA_VISIBLE_DEVICES=$gpu
    for step in "$@"; do echo "== $step ($(date -u +%T))"; eval "$step"; done ) > "$S/lane$gpu.log" 2>&1
}

pack() {  # everything worth keeping, in one file (the device returns few files)
  tar czf "$OUT/session_$1.tgz" --exclude='*.so' --exclude='*.tar' "$S" out/tune_w1 out/tune_w2 \
    $(ls -d reports/results/*/default 2>/dev/null)
  cp "$S"/*.log "$OUT"/ 2>/dev/null
}

case $CALL in
  T) lane 0 "LIMIT_FAST=${LIMIT_W1_FAST:-220} bash scripts/tune_gpu.sh w1-fast" \
       "LIMIT_DEFAULT=${LIMIT_W1_DEFAULT:-220} bash scripts/tune_gpu.sh w1-default" "bash scripts/tune_gpu.sh w1-classic" &
     lane 1 "LIMIT_FAST=${LIMIT_W2_FAST:-230} bash scripts/tune_gpu.sh w2-fast" \
       "LIMIT_DEFAULT=${LIMIT_W2_DEFAULT:-280} bash scripts/tune_gpu.sh w2-default" &
     wait ;;
  A) lane 0 "OUT=$S/run bash scripts/gpu_verify.sh run" "bash scripts/tune_gpu.sh w1-classic,w1-default" &
     lane 1 "OUT=$S/tests bash scripts/gpu_verify.sh tests" "bash scripts/tune_gpu.sh w2-fast" &
     wait ;;
  B) BUDGET_RPC=${BUDGET_RPC:-160}
     export DEADLINE=$(( DEADLINE - BUDGET_RPC ))
     lane 0 "LIMIT_FAST=200 bash scripts/tune_gpu.sh w1-fast" "LIMIT_DEFAULT=60 bash scripts/tune_gpu.sh w1-default" \
       "bash scripts/tune_gpu.sh w1-report" &
     lane 1 "LIMIT_DEFAULT=180 bash scripts/tune_gpu.sh w2-default,w2-report" \
       "python3 -m scripts.schedlab run --fork --strict --quiet --workload gemv:16384x16 --schedules warp_gemv,multi_row_gemv \
          --baselines cublas --out $S/fork_smoke > $S/fork_smoke.txt 2>&1; echo fork smoke rc=\$?" \
       "timeout 70 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
          --launch-skip 2 --launch-count 1 python3 scripts/profile_kernel.py tensor_core_gemm gemm:4096x4096x4096:float16 > $S/ncu_tensor_core.txt 2>&1" &
     wait
     pack B  # what the lanes made is safe before the scale-out starts
     LEFT=$(( START + ${BUDGET_S:-570} + 15 - $(date +%s) ))
     OUT=$OUT RPC_GPUS=0,1 RPC_SECONDS=${RPC_SECONDS:-50} timeout $LEFT bash scripts/tune_gpu.sh rpc > "$S/rpc.log" 2>&1
     cp "$S/rpc.log" "$OUT"/ ;;
  C) # the final choice in the harness and the reports, from the committed tuning state where
     # out/tune_w* is absent (reports/results/<gpu>/tuning/db_w*: trial logs, best configurations)
     for w in w1 w2; do
       if [ ! -f out/tune_$w/trials.jsonl ]; then
         mkdir -p out/tune_$w && cp reports/results/*/tuning/db_$w/*.json out/tune_$w/ \
           && gunzip -c reports/results/*/tuning/db_$w/trials.jsonl.gz > out/tune_$w/trials.jsonl
       fi
     done
     lane 0 "bash scripts/tune_gpu.sh ${C_TUNE0-w1-classic},w1-report" \
       "python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_tuning.py tests/test_run.py > $S/gpu_tests_tuning.txt 2>&1; tail -3 $S/gpu_tests_tuning.txt" &
     SASS="python3 scripts/sass_stats.py tensor_core_gemm gemm:4096x4096x4096:float16"
     if [ "${C_ALL_TESTS:-0}" = 1 ]; then  # every GPU test instead of the disassembly counts
       AFTER1=("OUT=$S/tests bash scripts/gpu_verify.sh tests")
     else
       AFTER1=("$SASS --out $S/sass > $S/sass_stats.txt 2>&1; tail -30 $S/sass_stats.txt"
               "$SASS --param intrinsics=mma --out $S/sass_mma > $S/sass_stats_mma.txt 2>&1; tail -30 $S/sass_stats_mma.txt")
     fi
     lane 1 "LIMIT_DEFAULT=${LIMIT_W2_DEFAULT:-200} bash scripts/tune_gpu.sh ${C_TUNE1-w2-default},w2-report" "${AFTER1[@]}" &
     wait ;;
  *) echo "unknown call $CALL" >&2; exit 2 ;;
esac
echo "call $CALL took $(( $(date +%s) - START )) s" | tee "$S/took.txt"
[ "$CALL" = B ] || pack $CALL
tail -n 4 "$S"/*.log
exit 0
