#!/usr/bin/env bash
# Builds ./probe from probe.cu (DeepGEMM SM90 FP8 1D2D GEMM probe).
#   bash build.sh            -> ./probe, build/ptxas_*.log, build/ptxas_summary.txt, build/build.log
# Env overrides:
#   NVCC=/path/to/nvcc       (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   JOBS=n                   parallel compile jobs (default: nproc)
#   PARTS=n                  translation units the 68 GEMM instantiations are split into (default: 16)
#   CXX_STD=20|17            (default 20 like DeepGEMM's JIT; falls back to 17 automatically if 20 fails)
#   EXTRA_NVCC_FLAGS, EXTRA_LDFLAGS
#   PROBE_NO_LIBCUDA=1       do not link libcuda; get cuTensorMapEncodeTiled via cudaGetDriverEntryPoint
#                            (automatic fallback if linking with -lcuda fails)
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")"

# ------------------------------------------------------------------ nvcc
if [ -z "${NVCC:-}" ]; then
    if command -v nvcc >/dev/null 2>&1; then NVCC=$(command -v nvcc)
    elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc
    else echo "build.sh: nvcc not found (set NVCC=...)" >&2; exit 1; fi
fi
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
mkdir -p build
LOG=build/build.log
: > "$LOG"
log() { echo "$@" | tee -a "$LOG"; }

log "== nvcc: $NVCC (CUDA_HOME=$CUDA_HOME)"
"$NVCC" --version 2>&1 | tee -a "$LOG"
log "== host compiler: $(${CXX:-g++} --version 2>/dev/null | head -1)"
NVCC_VER=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
NVCC_MAJOR=${NVCC_VER%%.*}; NVCC_MINOR=${NVCC_VER##*.}
if [ "${NVCC_MAJOR:-0}" -lt 12 ] || { [ "$NVCC_MAJOR" -eq 12 ] && [ "$NVCC_MINOR" -lt 3 ]; }; then
    log "WARNING: DeepGEMM requires NVCC >= 12.3 (found $NVCC_VER)"
fi
if [ "${NVCC_MAJOR:-0}" -eq 12 ] && [ "$NVCC_MINOR" -lt 9 ]; then
    log "NOTE: DeepGEMM recommends NVCC >= 12.9 for best performance (found $NVCC_VER)"
fi

JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
PARTS=${PARTS:-16}
CXX_STD=${CXX_STD:-20}

# ------------------------------------------------------------------ flags
# Mirrors DeepGEMM csrc/jit/compiler.hpp (NVCCCompiler):
#   -std=c++20 --diag-suppress=39,161,174,177,186,940 --ptxas-options=--register-usage-level=10
#   --gpu-architecture=sm_90a --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi
#   -O3 --expt-relaxed-constexpr --expt-extended-lambda
# Differences: -gencode arch=compute_90a,code=sm_90a instead of --gpu-architecture=sm_90a (DeepGEMM builds a
# -cubin, i.e. SASS only; nvcc 13's -arch=sm_90a additionally embeds generic compute_90 PTX, which cannot hold
# wgmma and fails in ptxas); -fPIC dropped (executable); -fconcepts only for g++.
GENCODE="-gencode arch=compute_90a,code=sm_90a"
HOSTOPTS="-O3,-Wno-deprecated-declarations,-Wno-abi"
if ${CXX:-g++} --version 2>/dev/null | grep -qi "g++\|gcc"; then HOSTOPTS="$HOSTOPTS,-fconcepts"; fi

# --register-usage-level is a newer ptxas option: use it only if this ptxas accepts it
PTXAS_RUL=""
TESTDIR=$(mktemp -d)
printf '__global__ void k(int* p) { *p = 1; }\n' > "$TESTDIR/t.cu"
if "$NVCC" $GENCODE --ptxas-options=--register-usage-level=10 -c "$TESTDIR/t.cu" -o "$TESTDIR/t.o" >/dev/null 2>&1; then
    PTXAS_RUL="--ptxas-options=--register-usage-level=10"
else
    log "NOTE: ptxas does not accept --register-usage-level=10; building without it"
fi
rm -rf "$TESTDIR"

common_flags() {
    echo "-std=c++$1 --diag-suppress=39,161,174,177,186,940 $PTXAS_RUL $GENCODE --compiler-options=$HOSTOPTS -O3 \
--expt-relaxed-constexpr --expt-extended-lambda -Iinc -Xptxas -v,--warn-on-local-memory-usage ${EXTRA_NVCC_FLAGS:-}"
}

LIBCUDA_DEFINE=""
[ "${PROBE_NO_LIBCUDA:-0}" = "1" ] && LIBCUDA_DEFINE="-DPROBE_NO_LIBCUDA"

# ------------------------------------------------------------------ compile
compile_all() {   # $1 = C++ standard; returns nonzero on any failure
    local std=$1 flags pids=() names=() rc=0 p
    flags=$(common_flags "$std")
    log "== compiling with: $NVCC $flags  (PARTS=$PARTS, JOBS=$JOBS)"
    rm -f build/*.o
    local start=$SECONDS
    # main TU (helpers, reference kernels, no GEMM instantiation)
    ( "$NVCC" $flags $LIBCUDA_DEFINE -DPROBE_PART=-1 -DPROBE_WITH_MAIN=1 -c probe.cu -o build/main.o > build/ptxas_main.log 2>&1 ) &
    pids+=($!); names+=(main)
    for ((p = 0; p < PARTS; ++p)); do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
        ( "$NVCC" $flags -DPROBE_NUM_PARTS=$PARTS -DPROBE_PART=$p -DPROBE_WITH_MAIN=0 -c probe.cu -o build/part_$p.o \
            > build/ptxas_part_$p.log 2>&1 ) &
        pids+=($!); names+=(part_$p)
    done
    local i
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            rc=1
            log "ERROR: compiling ${names[$i]} failed; log (build/ptxas_${names[$i]}.log):"
            grep -v "^ptxas info\|^    [0-9]* bytes stack" "build/ptxas_${names[$i]}.log" | head -40 | tee -a "$LOG"
        fi
    done
    log "== compile wall time: $((SECONDS - start)) s (c++$std)"
    return $rc
}

if ! compile_all "$CXX_STD"; then
    if [ "$CXX_STD" = "20" ]; then
        log "== retrying with -std=c++17"
        CXX_STD=17
        compile_all 17 || { log "BUILD FAILED"; exit 1; }
    else
        log "BUILD FAILED"; exit 1
    fi
fi

# ------------------------------------------------------------------ link
PART_OBJS=$(for ((p = 0; p < PARTS; ++p)); do printf 'build/part_%d.o ' "$p"; done)
STUB_DIRS=""
for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/lib/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs" "$CUDA_HOME/targets/sbsa-linux/lib/stubs"; do
    [ -d "$d" ] && STUB_DIRS="$STUB_DIRS -L$d"
done
link() { "$NVCC" $GENCODE -o probe build/main.o $PART_OBJS "$@" ${EXTRA_LDFLAGS:-} 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
if [ -z "$LIBCUDA_DEFINE" ]; then
    log "== linking with -lcuda $STUB_DIRS"
    if ! link $STUB_DIRS -lcuda; then
        log "== linking with -lcuda failed; rebuilding main.o with -DPROBE_NO_LIBCUDA (cudaGetDriverEntryPoint)"
        "$NVCC" $(common_flags "$CXX_STD") -DPROBE_NO_LIBCUDA -DPROBE_PART=-1 -DPROBE_WITH_MAIN=1 -c probe.cu -o build/main.o \
            > build/ptxas_main.log 2>&1 || { log "BUILD FAILED (main.o)"; exit 1; }
        link || { log "BUILD FAILED (link)"; exit 1; }
    fi
else
    log "== linking without libcuda (PROBE_NO_LIBCUDA=1)"
    link || { log "BUILD FAILED (link)"; exit 1; }
fi

# ------------------------------------------------------------------ ptxas summary
# One row per kernel: template args decoded from the mangled name of sm90_fp8_gemm_1d2d_impl<...>:
#   Major, SHAPE_M, SHAPE_N, SHAPE_K, groups, BLOCK_M, BLOCK_N, BLOCK_K, swzA, swzB, swzD, stages, tma, math, mc, mcA, sms
SUMMARY=build/ptxas_summary.txt
cat build/ptxas_main.log build/ptxas_part_*.log | awk '
    /Compiling entry function/ {
        name = $0; sub(/.*function \047/, "", name); sub(/\047.*/, "", name)
        spill_st = spill_ld = stack = -1; regs = -1
    }
    /bytes stack frame/ { stack = $1; spill_st = $5; spill_ld = $9 }
    /Used [0-9]+ registers/ {
        regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
        if (name ~ /sm90_fp8_gemm_1d2d_impl/) {
            s = name; args = ""
            while (match(s, /L[jb][0-9]+E/)) { v = substr(s, RSTART + 2, RLENGTH - 3); args = args " " v; s = substr(s, RSTART + RLENGTH) }
            split(args, a, " ")
            # a[1]=SHAPE_M a[2]=N a[3]=K a[4]=groups a[5]=BM a[6]=BN a[7]=BK a[8..10]=swizzles a[11]=stages a[12]=tma a[13]=math a[14]=mc a[15]=mca a[16]=sms
            printf "gemm  N=%-5s K=%-5s block=%sx%s stages=%s mc=%s on_a=%s math=%s swzD=%s : regs=%s stack=%s spill_st=%s spill_ld=%s\n", a[2], a[3], a[5], a[6], a[11], a[14], a[15], a[13], a[10], regs, stack, spill_st, spill_ld
        } else {
            printf "aux   %s : regs=%s stack=%s spill_st=%s spill_ld=%s\n", name, regs, stack, spill_st, spill_ld
        }
    }' | sort > "$SUMMARY"
log "== ptxas register / spill summary ($SUMMARY):"
tee -a "$LOG" < "$SUMMARY"
NGEMM=$(grep -c "^gemm" "$SUMMARY")
NSPILL=$(grep "^gemm" "$SUMMARY" | grep -vc "spill_st=0 spill_ld=0")
log "== $NGEMM GEMM kernels, $NSPILL with spills/stack (must be 0)"
if grep -q "Local memory used" build/ptxas_*.log; then log "WARNING: ptxas reported local memory usage (see build/ptxas_*.log)"; fi
log "== built ./probe (c++$CXX_STD). Run: ./probe all"
