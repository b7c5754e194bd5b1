#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU (CI has none, so they are not in `make test`):
#   tests     tests/cuda on the device itself (conftest.py drops the SIMT emulation there)
#   sanitize  compute-sanitizer: memcheck over every example, racecheck and initcheck over a few
#   bench     morphgen against PyG on the same GPU, ms/epoch and peak device memory
#   parity    the first epochs' losses of morphgen and PyG from identical weights, dropout off (--parity)
#   ops       a timer per IR op (train --profile-ops) for each BENCH row: the slowest ops by name
#   calibrate the GPU's dense/sparse feature-path threshold (backends/cuda/calibrate.cu), measured
#             afresh; `bench` and `parity` train with whatever the cache holds, so run it first
#   host      the host's CPU cores, no GPU: the homogeneous and relational models with every core
#             against PyG (`--threads $(nproc)`), then the MPI backend with 1, 2, 4 and 8 ranks
#             against one process with every core (needs the pip `mpich` wheel there)
#   ab        morphgen alone, the default schedule against a former one, interleaved: epochs
#             replayed as one CUDA graph against kernel by kernel (MORPHGEN_CUDA_GRAPHS=0), the typed
#             weight gradients by chunks of rows against one chunk per type
#             (MORPHGEN_CUDA_TYPED_CHUNK_ROWS=1000000000), the edge softmax by lane groups against a
#             warp per (destination, head) (MORPHGEN_CUDA_SOFTMAX_LANES=32), long segments split
#             against walked whole (MORPHGEN_CUDA_SPLIT_EDGES=0), hubs' softmax blocks against
#             lane groups alone (MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES=1000000000)
#
# Usage: scripts/cuda_check.sh OUT_DIR [calibrate] [tests] [sanitize] [bench] [parity] [ops] [ab] [host]
# (default: calibrate tests sanitize bench parity)
# Every step writes its log into OUT_DIR and one line into OUT_DIR/summary.txt; a step that fails
# or runs out of time is reported and the next one still runs.  The exit status is the number of
# failed steps.
# Environment: DATA_DIR (default ../shared/datasets), JOBS (pytest workers, default: all cores),
# TESTS_K (pytest -k expression: a subset of tests/cuda),
# EPOCHS (benchmark epochs, default 20), BENCH (the "model:graph" runs, space-separated),
# MEMCHECK, RACECHECK, INITCHECK (the examples each sanitizer tool runs, space-separated),
# PARITY (the "model:graph" parity checks), GRAPHS, CHUNKS, SOFTMAX, SPLITS, BLOCKS and TRANSPOSES (the "model:graph" runs of ab), BENCH_FLAGS (more `morphgen bench` flags, e.g. --no-profile),
# HOST (the "model:graph" runs of host), HOST_RANKS and HOST_MPI_GRAPH (its MPI rank counts,
# default "1 2 4 8", and graph, default products-1/8),
# {TESTS,SANITIZE,BENCH}_TIMEOUT (seconds per command), MORPHGEN_CUDA_ARCHS (e.g. 90: build
# for this GPU alone, half the ptxas time), PACK=1 (leave OUT_DIR holding summary.txt and one
# results.tgz of everything else: a remote runner that returns a limited number of files gets all).
set -uo pipefail

OUT=$(realpath -m "${1:?usage: scripts/cuda_check.sh OUT_DIR [calibrate] [tests] [sanitize] [bench] [parity] [ops] [ab] [host]}")
shift
STEPS=${*:-calibrate tests sanitize bench parity}
DATA_DIR=$(realpath -m "${DATA_DIR:-../shared/datasets}")
JOBS=${JOBS:-$(nproc)}
EPOCHS=${EPOCHS:-20}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
# `python -m` puts the working directory first on sys.path, where the checkout's morphgen/ folder
# is not the installed package (its subpackages live in other folders): import the installed one.
export PYTHONSAFEPATH=1
mkdir -p "$OUT"
failed=0

note() { echo "$*" | tee -a "$OUT/summary.txt"; }
result() {   # result RC WHAT DETAIL: one summary line; a non-zero RC counts as a failed step
    local rc=$1 what=$2 detail=${3:-}
    if [ "$rc" -eq 0 ]; then note "ok    $what  $detail"; else note "FAIL  $what (exit $rc)  $detail"; failed=$((failed + 1)); fi
}

note "== $(date -u +%FT%TZ)  $(nvidia-smi -L 2>&1 | head -1)  $(nvcc --version 2>&1 | tail -1)"
note "   $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; archs ${MORPHGEN_CUDA_ARCHS:-80,90}"

# Builds EXAMPLE for DATA into the cache in the background (one epoch: what a build for that data
# is, `train` makes; the epoch count is not part of the build), so that nvcc runs in parallel.
prebuild() {
    "$PY" -m morphgen train "examples/$1.mp" --backend cuda --dataset "$2" --data-dir "$DATA_DIR" --epochs 1 \
        --quiet > "$OUT/prebuild-${1//\//_}-${2//[:\/=,]/_}.log" 2>&1 &
}

# Examples and the data each trains on in the sanitizer runs (small graphs: the tools are slow).
declare -A DATA=([gcn]=cora [gcn3]=cora [sage]=cora [sage_layers]=cora [gin]=cora [gat]=cora [appnp]=cora
                 [sgc]=cora [rgcn]=aifb [rgcn_bases]=aifb [rgat]=acm_heco [hgt]=acm_heco [rgcn_link]=wn18rr)

# The tests run from a copy of the folders they read, beside a link to the datasets: in the
# checkout, Python would import its morphgen/ folder, which is not the installed package.
run_tests() {
    local suite="$OUT/suite/repo"
    mkdir -p "$suite" "$OUT/suite/shared" && cp -r tests examples backends runtime "$suite/" &&
        ln -sfn "$DATA_DIR" "$OUT/suite/shared/datasets"
    (cd "$suite" && timeout "${TESTS_TIMEOUT:-420}" "$PY" -m pytest tests/cuda ${TESTS_K:+-k "$TESTS_K"} -n "$JOBS" \
        -p no:cacheprovider -rfs) > "$OUT/tests.log" 2>&1
    result $? "tests/cuda on the GPU" "$(tail -1 "$OUT/tests.log")"
}

sanitize() {   # sanitize TOOL EXAMPLE: two epochs under compute-sanitizer --tool TOOL
    local tool=$1 name=$2 log="$OUT/sanitize-$1-$2.log"
    timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 30 \
        "$PY" -m morphgen train "examples/$name.mp" --backend cuda --dataset "${DATA[$name]}" \
        --data-dir "$DATA_DIR" --epochs 2 --quiet > "$log" 2>&1
    result $? "compute-sanitizer $tool $name" "$(grep -m1 'ERROR SUMMARY' "$log")"
}

run_sanitize() {
    if ! command -v compute-sanitizer > /dev/null; then result 1 "compute-sanitizer" "not on PATH"; return; fi
    local memcheck=${MEMCHECK:-$(printf '%s\n' "${!DATA[@]}" | sort)}
    for name in $memcheck; do prebuild "$name" "${DATA[$name]}"; done
    wait   # the nvcc builds in parallel, into the cache the runs below read
    for name in $memcheck; do sanitize memcheck "$name"; done
    for name in ${RACECHECK:-gat sage rgat rgcn_link}; do sanitize racecheck "$name"; done
    for name in ${INITCHECK:-gcn gat rgcn}; do sanitize initcheck "$name"; done
}

# The PyG reference shapes (docs/benchmarks.md, GPU runs): GCN 3x32, SAGE-mean, GAT 8 heads.
syn() { echo "synthetic:nodes=$1,edges=$2,features=$3,classes=$4,seed=0"; }
declare -A GRAPH=([arxiv-like]=$(syn 169343 1166243 128 40) [flickr-like]=$(syn 89250 899756 500 7)
                  [reddit-1/8]=$(syn 29120 14326986 602 41) [products-1/8]=$(syn 306128 7732392 100 47)
                  [cora]=cora [aifb]=aifb [mutag]=mutag [acm_heco]=acm_heco
                  [typed-16]="synthetic:nodes=10000,edges=100000,features=64,classes=8,etypes=16,seed=0"
                  [typed-500]="synthetic:nodes=10000,edges=100000,features=64,classes=8,etypes=500,seed=0")
# The relational rows first: they are the ones the homogeneous rows have pushed out of a short run.
BENCH=${BENCH:-"rgcn:aifb rgcn:mutag rgcn:acm_heco rgcn:typed-500 rgcn_bases:aifb hgt:acm_heco bench/rgat_pyg:acm_heco bench/rgat_pyg:typed-16 gcn3:arxiv-like gcn3:flickr-like gcn3:reddit-1/8 gcn3:products-1/8 sage:arxiv-like sage:reddit-1/8 gat:arxiv-like gcn3:cora"}

run_bench() {
    for run in $BENCH; do prebuild "${run%%:*}" "${GRAPH[${run#*:}]}"; done
    wait
    for run in $BENCH; do
        local model=${run%%:*} graph=${run#*:} dir="$OUT/bench/${run//[:\/]/_}"
        timeout "${BENCH_TIMEOUT:-240}" "$PY" -m morphgen bench "examples/$model.mp" --backend cuda --peers pyg \
            --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" --epochs "$EPOCHS" --warmup 3 --quick-machine \
            ${BENCH_FLAGS:-} --out "$dir" > "$dir.log" 2>&1
        result $? "bench $model on $graph" "$(grep -m2 -E 'morphgen|pyg' "$dir.log" | tr -s ' ' | tr '\n' '|')"
    done
}

run_ops() {   # a timer per IR op (train --profile-ops) for each BENCH row: which op a family's time is
    mkdir -p "$OUT/ops"
    for run in $BENCH; do
        local model=${run%%:*} graph=${run#*:}
        "$PY" -m morphgen train "examples/$model.mp" --backend cuda --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" \
            --epochs 1 --profile-ops --quiet > /dev/null 2>&1 &     # the per-op build, in parallel
    done
    wait
    for run in $BENCH; do
        local model=${run%%:*} graph=${run#*:} log="$OUT/ops/${run//[:\/]/_}.log"
        timeout "${BENCH_TIMEOUT:-240}" "$PY" -m morphgen train "examples/$model.mp" --backend cuda \
            --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" --epochs 8 --profile-ops --quiet > "$log" 2>&1
        result $? "per-op timers of $model on $graph" "slowest: $(grep -m1 -A1 '^kernel  ' "$log" | tail -1 | tr -s ' ')"
    done
}

run_parity() {   # the benchmark's parity check: three epochs each (one for HGT), dropout off, morphgen's initial weights
    for run in ${PARITY:-gcn3:cora sage:cora gat:cora rgcn:aifb}; do
        local model=${run%%:*} graph=${run#*:} dir="$OUT/parity/${run//[:\/]/_}"
        mkdir -p "$OUT/parity"
        timeout "${BENCH_TIMEOUT:-240}" "$PY" -m morphgen bench "examples/$model.mp" --backend cuda --peers pyg \
            --parity --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" --epochs 4 --warmup 1 --quick-machine \
            --out "$dir" > "$dir.log" 2>&1
        local rc=$?
        grep -q "| pyg | .* | yes |" "$dir/bench.md" 2>/dev/null || rc=$((rc == 0 ? 1 : rc))
        result "$rc" "parity $model on $graph" "$(grep '^| pyg |' "$dir/bench.md" 2>/dev/null | tail -1)"
    done
}

ab() {   # ab SETTING RUNS: each run with the default and with SETTING (VAR=VALUE), twice, interleaved
    local setting=$1 runs=$2
    mkdir -p "$OUT/ab"
    for run in $runs; do prebuild "${run%%:*}" "${GRAPH[${run#*:}]}"; done
    wait
    for run in $runs; do
        local model=${run%%:*} graph=${run#*:}
        for env_ in default "$setting" default "$setting"; do
            local dir="$OUT/ab/${run//[:\/]/_}-${env_//=/_}-$RANDOM" extra=()
            [ "$env_" = default ] || extra=("$env_")
            env "${extra[@]}" timeout "${BENCH_TIMEOUT:-240}" "$PY" -m morphgen bench "examples/$model.mp" \
                --backend cuda --peers none --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" --epochs "$EPOCHS" \
                --warmup 3 --quick-machine ${BENCH_FLAGS:-} --out "$dir" > "$dir.log" 2>&1
            result $? "ab $model on $graph, $env_" "$(grep -m1 -E 'morphgen' "$dir.log" | tr -s ' ')"
        done
    done
}
run_ab() {   # each list may be set empty to leave its comparison out
    ab MORPHGEN_CUDA_GRAPHS=0 "${GRAPHS-gcn3:cora sage:cora sage:arxiv-like gat:arxiv-like}"
    ab MORPHGEN_CUDA_TYPED_CHUNK_ROWS=1000000000 "${CHUNKS-hgt:acm_heco bench/rgat_pyg:acm_heco rgcn:mutag}"
    ab MORPHGEN_CUDA_SOFTMAX_LANES=32 "${SOFTMAX-gat:arxiv-like gat:cora}"
    ab MORPHGEN_CUDA_SPLIT_EDGES=0 "${SPLITS-rgcn:mutag hgt:acm_heco rgcn_bases:aifb}"
    ab MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES=1000000000 "${BLOCKS-gat:arxiv-like hgt:acm_heco}"
    ab MORPHGEN_CUDA_TRANSPOSE=atomic "${TRANSPOSES-gcn3:arxiv-like sage:arxiv-like gin:arxiv-like gcn3:products-1/8}"
}

run_calibrate() {
    timeout 300 "$PY" -c "from morphgen.backends.cuda.calibrate import calibrate
c = calibrate(force=True)
print(f'rho {c.rho:.4f} tau {c.tau:.4f}: sparse {c.sparse_gflops:.0f}, dense {c.dense_gflops:.0f} GFLOP/s ({c.source})')" \
        > "$OUT/calibrate.log" 2>&1
    result $? "GPU feature-path calibration" "$(tail -1 "$OUT/calibrate.log")"
}

run_host() {   # every core of the host, against PyG (CPU) and, for MPI, against one process
    local cores dir
    cores=$(nproc)
    mkdir -p "$OUT/host"
    for run in ${HOST:-gcn3:arxiv-like sage:arxiv-like gin:arxiv-like gat:arxiv-like rgcn:typed-16 hgt:acm_heco}; do
        local model=${run%%:*} graph=${run#*:}
        dir="$OUT/host/${run//[:\/]/_}"
        timeout "${BENCH_TIMEOUT:-240}" "$PY" -m morphgen bench "examples/$model.mp" --threads "$cores" --peers pyg \
            --dataset "${GRAPH[$graph]}" --data-dir "$DATA_DIR" --epochs 10 --warmup 3 --quick-machine --no-profile \
            --out "$dir" > "$dir.log" 2>&1
        result $? "host: $model on $graph, $cores threads" "$(grep -m2 -E 'morphgen|pyg' "$dir.log" | tr -s ' ' | tr '\n' '|')"
    done
    # shellcheck disable=SC2086
    timeout "${HOST_MPI_TIMEOUT:-900}" "$PY" -m morphgen.backends.mpi.bench_ranks --model examples/gcn3.mp --cores "$cores" \
        --ranks ${HOST_RANKS:-1 2 4 8} --epochs 10 --repeat 1 --peers pyg --data-dir "$DATA_DIR" \
        --dataset "${GRAPH[${HOST_MPI_GRAPH:-products-1/8}]}" > "$OUT/host/mpi.log" 2>&1
    result $? "host: MPI ranks on ${HOST_MPI_GRAPH:-products-1/8}, $cores cores" "$(grep -E '^\| (OpenMP|MPI) ' "$OUT/host/mpi.log" | cut -d'|' -f3,4 | tr -s ' ' | tr '\n' ';')"
}

for step in $STEPS; do
    case $step in
        calibrate) run_calibrate ;;
        tests) run_tests ;;
        sanitize) run_sanitize ;;
        bench) mkdir -p "$OUT/bench"; run_bench ;;
        parity) run_parity ;;
        ops) run_ops ;;
        ab) run_ab ;;
        host) run_host ;;
        *) note "unknown step '$step' (calibrate, tests, sanitize, bench, parity, ops, ab, host)"; failed=$((failed + 1)) ;;
    esac
done
note "== $(date -u +%FT%TZ)  $failed failed"
if [ "${PACK:-0}" = 1 ]; then
    packed=$(mktemp -d)
    tar czf "$packed/results.tgz" -C "$OUT" --exclude=summary.txt --exclude='build-*' --exclude=suite . &&
        find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + &&
        mv "$packed/results.tgz" "$OUT/results.tgz"
    rmdir "$packed"
fi
exit "$failed"
