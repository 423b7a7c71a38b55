#!/bin/bash
# The GPU tuning runs of the final report, in phases that each fit one device call (< 10 min).
# On the device, from the repository root, after `source .tvm/prelude.sh`:
#     bash scripts/tune_gpu.sh PHASE [DB]
# Every phase resumes from DB (default out/tune); when the machine was given back between calls,
# carry the previous call's tune_db.tgz back into the repository root and it is unpacked first.
# At the end DB is packed to $OUT/tune_db.tgz (plus the reports' .md/.png).
#   1: gemm:1024x512x2048 tiled, evolutionary (ridge), 256 trials + dlight
#   2: gemm:1024x512x2048 MetaSchedule default space, 256 trials
#   3: gemm:1024x512x2048 classic space, all 36 exhaustively; report with the hand schedules + cuBLAS
#   4: gemm:4096x4096x4096 tiled, 128 trials + dlight
#   5: gemm:4096x4096x4096 default space, 128 trials; report with the hand schedules + cuBLAS
#   rpc: trials/min with one and two RPC servers sharing GPU 0 (needs tornado on PYTHONPATH)
set -u
PHASE=${1:?phase: 1 2 3 4 5 rpc}
DB=${2:-out/tune}
OUT=${OUT:-out}
mkdir -p "$DB" "$OUT"
[ -f tune_db.tgz ] && tar xzf tune_db.tgz -C "$DB"
export PYTHONUNBUFFERED=1
S="python -u -m scripts.schedlab tune --db $DB"
W1=gemm:1024x512x2048
W2=gemm:4096x4096x4096
case $PHASE in
  1) $S --workload $W1 --space tiled --trials 256 --time-limit 420 --compare dlight ;;
  2) $S --workload $W1 --space default --strategy evolutionary --trials 256 --time-limit 420 --compare none ;;
  3) $S --workload $W1 --space classic --compare none --time-limit 200
     $S --workload $W1 --report-only --hand ;;
  4) $S --workload $W2 --space tiled --trials 128 --time-limit 380 --batch 16 --compare dlight ;;
  5) $S --workload $W2 --space default --strategy evolutionary --trials 128 --time-limit 330 --compare none
     $S --workload $W2 --report-only --hand ;;
  rpc) python -u -m scripts.rpc_scaleout --gpus 0,0 --workload $W1 --seconds 90 --db /tmp/rpc_scaleout \
         --out "$OUT/rpc_scaleout.json" ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
tar czf "$OUT/tune_db.tgz" -C "$DB" .
cp "$DB"/report/*.md "$DB"/report/*.png "$OUT"/ 2>/dev/null
exit 0
