#!/bin/bash
# The GPU tuning runs of the final report, as phases (comma-separated) that fit device calls (< 10 min).
# On the device, from the repository root, after `source .tvm/prelude.sh`:
#     bash scripts/tune_gpu.sh w1-fast,w1-classic
# Each workload has its own tuning directory (DB1, DB2; default out/tune_w1, out/tune_w2), so the two
# workloads can be tuned at once on two GPUs (CUDA_VISIBLE_DEVICES). Every phase resumes from its
# directory: carry it (an ignored path under out/) to the next call when the machine was given back.
#   w1-fast      gemm:1024x512x2048, fast space, evolutionary (ridge), 256 trials, + dlight
#   w1-default   gemm:1024x512x2048, MetaSchedule's default space, evolutionary, 256 trials
#   w1-classic   gemm:1024x512x2048, classic space, all 36 exhaustively
#   w1-report    each run's top 3 (RESELECT) timed again in the harness (the fastest there becomes tuned_gemm), then
#                the report, with tuned_gemm timed beside the hand schedules, cuBLAS and dlight
#   w2-fast      gemm:4096x4096x4096, fast space, 128 trials, + dlight
#   w2-default   gemm:4096x4096x4096, default space, 128 trials
#   w2-report    as w1-report
#   rpc          trials/min with one and two RPC servers (RPC_GPUS, default 0,1: one per GPU;
#                0,0: two sharing GPU 0); needs tornado on PYTHONPATH
# LIMIT_FAST / LIMIT_DEFAULT: per-run time limits in seconds (default 420 / 300); DEADLINE (epoch
# seconds): no run's limit reaches past DEADLINE - 45 s, and a tuning phase with under 30 s left is
# skipped (reports are always written).
set -u
PHASES=${1:?phases: w1-fast w1-default w1-classic w1-report w2-fast w2-default w2-report rpc}
DB1=${DB1:-out/tune_w1}
DB2=${DB2:-out/tune_w2}
OUT=${OUT:-out}
mkdir -p "$DB1" "$DB2" "$OUT"
export PYTHONUNBUFFERED=1
S="python3 -u -m scripts.schedlab tune --quiet"
W1=gemm:1024x512x2048
W2=gemm:4096x4096x4096
cap() {  # cap LIMIT by the DEADLINE, if one is set
  local limit=$1
  if [ -n "${DEADLINE:-}" ]; then
    local left=$(( DEADLINE - $(date +%s) - 45 ))
    [ $left -lt $limit ] && limit=$left
  fi
  echo $limit
}
for PHASE in ${PHASES//,/ }; do
  echo "== $PHASE $(date -u +%H:%M:%S)"
  LF=$(cap ${LIMIT_FAST:-420}); LD=$(cap ${LIMIT_DEFAULT:-300})
  case $PHASE in *-report|rpc) ;; *) if [ $LF -lt 30 ]; then echo "skipped: the deadline is near"; continue; fi ;; esac
  case $PHASE in
    w1-fast)    $S --db $DB1 --workload $W1 --space fast --trials 256 --time-limit $LF --compare dlight ;;
    w1-default) $S --db $DB1 --workload $W1 --space default --strategy evolutionary --trials 256 --time-limit $LD --compare none ;;
    w1-classic) $S --db $DB1 --workload $W1 --space classic --compare none --time-limit $(cap 200) ;;
    w1-report)  $S --db $DB1 --workload $W1 --report-only --reselect ${RESELECT:-3} --hand ;;
    w2-fast)    $S --db $DB2 --workload $W2 --space fast --trials 128 --time-limit $LF --compare dlight ;;
    w2-default) $S --db $DB2 --workload $W2 --space default --strategy evolutionary --trials 128 --time-limit $LD --compare none ;;
    w2-report)  $S --db $DB2 --workload $W2 --report-only --reselect ${RESELECT:-3} --hand ;;
    rpc) python3 -u -m scripts.rpc_scaleout --gpus ${RPC_GPUS:-0,1} --workload $W1 --space fast \
           --strategy random --seconds ${RPC_SECONDS:-60} --db out/rpc_scaleout --out "$OUT/rpc_scaleout.json" ;;
    *) echo "unknown phase $PHASE" >&2 ;;
  esac
done
exit 0
