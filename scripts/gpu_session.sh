#!/bin/bash
# A session's GPU work on the two-GPU device kind (nvidia-h200-x2), in two calls of < 10 min, two
# lanes each (one per GPU, pinned with CUDA_VISIBLE_DEVICES). On the device, from the repository root:
#     source .tvm/prelude.sh && SCHEDLAB_COMMIT=<commit> bash scripts/gpu_session.sh A
#     ... bash scripts/gpu_session.sh B      (carry out/tune_w1 and out/tune_w2 unpacked from call A)
# Call A: GPU 0 `schedlab run` (published) then the classic and default-space tuning of 1024x512x2048;
#         GPU 1 every GPU test, then the fast-space tuning of 4096^3.
# Call B: GPU 0 the fast-space tuning of 1024x512x2048 and its report (tuned vs hand vs cuBLAS);
#         GPU 1 the default-space tuning of 4096^3 and its report, and an Nsight Compute profile of the
#         fp16 tensor-core kernel at 4096^3; then the RPC scale-out on both GPUs.
# Call C: the tuner's top 5 of each workload timed again in the harness (the fastest there becomes
#         tuned_gemm) and both reports, one workload per GPU (~3 min).
# Call A's CPU baselines share the host's cores with the other lane's builds: time them alone.
# Tornado (for the RPC tracker) is read from .deps/ when carried. Everything worth keeping is packed
# into $OUT/session_<call>.tgz (the device returns few files); the lane logs are copied beside it.
set -u
CALL=${1:?call: A or B}
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
     lane 0 "bash scripts/tune_gpu.sh w1-report" &
     lane 1 "bash scripts/tune_gpu.sh w2-report" &
     wait ;;
  *) echo "unknown call $CALL" >&2; exit 2 ;;
esac
echo "call $CALL took $(( $(date +%s) - START )) s" | tee "$S/took.txt"
[ "$CALL" = B ] || pack $CALL
tail -n 4 "$S"/*.log
exit 0
