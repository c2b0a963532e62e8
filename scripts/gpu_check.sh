#!/usr/bin/env bash
# Everything pagedbench needs a GPU for, in one call of at most ~8 minutes (each step has a time limit):
#   1. device, library versions, nvidia-smi
#   2. tests/kernels natively (Triton compiled for the GPU, not interpreted)
#   3. Figure 18a: paged vs contiguous decode kernel latency, batch 8 and 32, contexts 64-4096, block
#      sizes 8-256, Triton's pipelining stages 0 (default) / 2 / 4, torch SDPA on the same K/V as an
#      outside reference, bandwidth against the measured copy ceiling  -> kernels/kernel_bench.{csv,json}
#   4. a profile of the real backend's iterations (OPT-1.3B, fp16, random weights) and a fitted preset
#      -> profile/opt-1.3b.parquet, conf/hardware/$PRESET.yaml
#   5. Figure 19a: swap-out / swap-in latency against block size (pinned host memory) beside the prefill
#      that recomputation costs, and the host link fitted from it -> swap/swap_bench.{csv,json}
#   6. the three engines on that model with the Triton kernels, on a short trace file, replayed through
#      the sim with the fitted preset -> replay/replay.csv (sim vs real: per-iteration MAPE, throughput ...)
# Everything lands in OUTDIR and, packed, in OUTDIR/gpu_check.tar.gz (one file to bring back).
#
#   bash scripts/gpu_check.sh OUTDIR
#
# The GPU machine has no network: hydra-core, omegaconf and antlr4 come as wheels from wheels/
# (`bash scripts/fetch_wheels.sh` here, then carry wheels/). Its own python3 (torch, triton, transformers,
# pandas) runs everything; .venv/bin/python is used instead where it exists. Without a GPU, DRY_RUN=1
# runs every step small on the CPU (tiny model, interpreted kernels) to check the script itself.
set -u
export PYTHONUNBUFFERED=1
OUTDIR="${1:?usage: bash scripts/gpu_check.sh OUTDIR}"
cd "$(dirname "$0")/.."
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
PY=python3
[ -x .venv/bin/python ] && PY="$(pwd)/.venv/bin/python"
DRY_RUN="${DRY_RUN:-0}"
TRACE="${TRACE:-data/traces/sharegpt_64_seed2.jsonl}"
if [ "$DRY_RUN" = 1 ]; then
    MODEL=tiny; DTYPE=float32; PRESET=dry-run-fitted; PROFILE_ARGS="--quick --repeats 2"
    BENCH_ARGS="--batches 2 --context-lens 64 --block-sizes 8 16 --num-stages 0 2"; KV="backend.cpu_kv_budget_mib=64"
    PROFILE_LIMIT=400   # a CPU is slow; the GPU's limit is below
    SWAP_TOKENS=256
    export TRITON_INTERPRET=1
else
    MODEL="${MODEL:-opt-1.3b}"; DTYPE=float16; PRESET="${PRESET:-h200-opt-1.3b}"; PROFILE_ARGS=""
    BENCH_ARGS="--num-stages 0 2 4"; KV="backend.kv_budget_mib=2400"   # ~12,800 slots: 6 max_seq_len regions
    SWAP_TOKENS=2048
    unset TRITON_INTERPRET   # the kernels must compile for the device
fi

SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
FAILED=0
step() {   # step NAME TIMEOUT_S COMMAND...
    local name="$1" limit="$2"
    shift 2
    echo "== $name" | tee -a "$SUMMARY"
    local start=$SECONDS
    { echo "\$ $*"; timeout "$limit" "$@"; } 2>&1 | tee "$OUTDIR/$name.log"
    local rc=${PIPESTATUS[0]}
    local took=$((SECONDS - start)) verdict="ok"
    if [ "$rc" -eq 124 ]; then verdict="TIMED OUT after ${limit}s"; elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; fi
    [ "$rc" -ne 0 ] && FAILED=$((FAILED + 1))
    printf '   %-12s %-24s %4ss\n' "$name" "$verdict" "$took" | tee -a "$SUMMARY"
}
pack() {
    tar -czf "$OUTDIR/gpu_check.tar.gz" -C "$OUTDIR" --exclude gpu_check.tar.gz . 2>/dev/null
    echo "packed: $OUTDIR/gpu_check.tar.gz"
}

if ! "$PY" -c "import hydra, omegaconf" 2> /dev/null; then
    step wheels 60 "$PY" -m pip install --no-index --no-build-isolation --find-links wheels \
        hydra-core omegaconf antlr4-python3-runtime
fi
step device 60 "$PY" -c "
import os, torch, triton, transformers
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__)
if torch.cuda.is_available():
    print('device', torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))
elif os.environ.get('DRY_RUN') != '1':
    raise SystemExit('no CUDA device visible to torch (DRY_RUN=1 checks the script on a CPU)')"
if [ "$FAILED" -ne 0 ]; then
    echo "no usable device or libraries: nothing else to check (see $OUTDIR/*.log)" | tee -a "$SUMMARY"
    pack; exit 2
fi
command -v nvidia-smi > /dev/null && nvidia-smi > "$OUTDIR/nvidia-smi.log" 2>&1
if [ "$DRY_RUN" = 1 ]; then   # a trace small enough for the real backend on a CPU
    TRACE="$OUTDIR/dry_trace.jsonl"
    step trace 60 "$PY" -m workloads.write_trace "$TRACE" synthetic num_requests=6 prompt_dist.low=8 \
        prompt_dist.high=32 output_dist.kind=uniform output_dist.low=2 output_dist.high=8
fi

KERNEL_TESTS=tests/kernels
[ "$DRY_RUN" = 1 ] && KERNEL_TESTS="tests/kernels/test_decode_attention.py -k stages"
step kernel_tests 120 "$PY" -m pytest $KERNEL_TESTS -q -p no:cacheprovider --junitxml="$OUTDIR/kernel_tests.xml"
step kernel_bench 150 "$PY" -m studies.kernel_bench --out "$OUTDIR/kernels" $BENCH_ARGS
step profile "${PROFILE_LIMIT:-90}" "$PY" -m studies.profile --model "$MODEL" --dtype "$DTYPE" $PROFILE_ARGS \
    --out "$OUTDIR/profile/$MODEL.parquet"
step fit 30 "$PY" -m studies.fit "$OUTDIR/profile/$MODEL.parquet" --base h200 --name "$PRESET"
step swap_bench 60 "$PY" -m studies.swap_bench --model "$MODEL" --tokens "$SWAP_TOKENS" --out "$OUTDIR/swap"
mkdir -p "$OUTDIR/preset" && cp "conf/hardware/$PRESET.yaml" "$OUTDIR/preset/" 2>/dev/null
step replay 150 "$PY" -m studies.replay "$TRACE" --model "$MODEL" --hardware "$PRESET" \
    --engines static,orca_max,paged --out "$OUTDIR/replay" --real "$KV"

[ "$DRY_RUN" = 1 ] && rm -f "conf/hardware/$PRESET.yaml"   # a dry run's preset is not a measurement
echo "$FAILED failed step(s)" >> "$SUMMARY"
echo; echo "== summary"; grep -v '^==' "$SUMMARY"
pack
[ "$FAILED" -eq 0 ]
