#!/usr/bin/env bash
# Everything pagedbench needs a GPU for, in one call of at most 535 s of step limits (one device command
# may run 600 s), the most valuable steps first, and the results packed after every step, so a run cut
# short still brings back what it measured:
#   1. imports (installing from the carried wheels only what is missing), device, versions  <= 60 s
#   2. tests/kernels natively (Triton compiled for the GPU, not interpreted)             <= 90 s
#   3. Figure 18a: paged vs contiguous decode kernel latency, batch 8 and 32, contexts 64-4096, block
#      sizes 8-256, Triton's pipelining stages 0 (default) / 2 / 4, torch SDPA on the same K/V as an
#      outside reference, bandwidth against the measured copy ceiling -> kernels/        <= 80 s
#   4. a profile of the real backend's iterations (OPT-1.3B, fp16, random weights)
#      -> profile/opt-1.3b.parquet (rows also in profile/*.csv as measured)             <= 100 s
#   5. its fitted preset -> preset/$PRESET.yaml                                          <= 15 s
#   6. Figure 19a: swap-out / swap-in latency against block size (pinned host memory) beside the prefill
#      that recomputation costs -> swap/                                                 <= 60 s
#   7. the three engines on that model with the Triton kernels, on a short trace file, replayed through
#      the sim with the fitted preset -> replay/replay.csv                                <= 130 s
# Everything lands in OUTDIR and, packed, in OUTDIR/gpu_check.tar.gz (one file to bring back).
#
#   bash scripts/gpu_check.sh OUTDIR
#
# The device has no network. Its python3 is expected to hold torch, triton, transformers and numpy; any
# other module the steps import (hydra, omegaconf, antlr4, pandas, pyarrow, pytest ...) is checked first
# and, where missing, installed from the carried wheels (WHEELS, default wheels/: `bash
# scripts/fetch_wheels.sh` here) with `pip install --no-index --no-deps --target SITE`, nothing else.
# PY picks the interpreter (default: .venv/bin/python where it exists, else python3). Without a GPU,
# DRY_RUN=1 runs every step small on the CPU (tiny model, interpreted kernels) to check the script, and
# prints each GPU step's planned peak device memory on the H200 (`--plan h200`); `make device-rehearsal` runs that dry
# run in an environment holding only what the device is sure to have.
set -u
OUTDIR="${1:?usage: bash scripts/gpu_check.sh OUTDIR}"
cd "$(dirname "$0")/.."
PACK=gpu_check.tar.gz
source scripts/device_steps.sh
DRY_RUN="${DRY_RUN:-0}"
TRACE="${TRACE:-data/traces/sharegpt_16_seed2.jsonl}"   # the first 16 requests of sharegpt_64_seed2
if [ "$DRY_RUN" = 1 ]; then
    MODEL=tiny; DTYPE=float32; PRESET=dry-run-fitted; PROFILE_ARGS="--quick --repeats 2"
    BENCH_ARGS="--batches 2 --context-lens 64 --block-sizes 8 16 --num-stages 0 2 --num-warps 0 2"
    BENCH_ARGS="$BENCH_ARGS --table-loads position block"
    KV="backend.cpu_kv_budget_mib=64"
    PROFILE_LIMIT=400; BENCH_LIMIT=110   # a CPU is slow; the GPU's limits are below
    SWAP_TOKENS=256
    export TRITON_INTERPRET=1
else
    MODEL="${MODEL:-opt-1.3b}"; DTYPE=float16; PRESET="${PRESET:-h200-opt-1.3b}"; PROFILE_ARGS=""
    BENCH_ARGS="--num-stages 0 2 4"; KV="backend.kv_budget_mib=2400"   # ~12,800 slots: 6 max_seq_len regions
    SWAP_TOKENS=2048
    unset TRITON_INTERPRET   # the kernels must compile for the device
fi

step wheels 20 bash -c install_missing
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
step imports 20 "$PY" -c "
import pagedbench.run, pagedbench.studies.kernel_bench, pagedbench.studies.profile, pagedbench.studies.fit, pagedbench.studies.swap_bench, pagedbench.studies.replay
import pagedbench.workloads.write_trace, pytest, pytest_benchmark
print('every module the steps run imports')"
step device 20 "$PY" -c "$DEVICE_CHECK"
if [ "$FAILED" -ne 0 ]; then
    echo "no usable device or libraries: nothing else to check (see $OUTDIR/*.log)" | tee -a "$SUMMARY"
    exit 2
fi
command -v nvidia-smi > /dev/null && nvidia-smi > "$OUTDIR/nvidia-smi.log" 2>&1
if [ "$DRY_RUN" = 1 ]; then   # a trace small enough for the real backend on a CPU
    TRACE="$OUTDIR/dry_trace.jsonl"
    step trace 60 "$PY" -m pagedbench.workloads.write_trace "$TRACE" synthetic num_requests=6 prompt_dist.low=8 \
        prompt_dist.high=32 output_dist.kind=uniform output_dist.low=2 output_dist.high=8
fi

if [ "$DRY_RUN" = 1 ]; then   # what the GPU steps will hold at their peak on the H200, computed, not run
    step plan 60 bash -c "set -e
        $PY -m pagedbench.studies.kernel_bench --num-stages 0 2 4 --plan h200
        $PY -m pagedbench.studies.profile --model opt-1.3b --dtype float16 --plan h200
        $PY -m pagedbench.studies.swap_bench --model opt-1.3b --tokens 2048 --plan h200"
fi

KERNEL_TESTS="tests/kernels tests/real/test_decode_graphs.py"   # and the decode step captured as CUDA graphs
[ "$DRY_RUN" = 1 ] && KERNEL_TESTS="tests/kernels/test_decode_attention.py -k knob"   # the tuning knobs
# pytest.ini options of the project (--benchmark-disable) need pytest-benchmark: carried when missing.
step kernel_tests 90 "$PY" -m pytest $KERNEL_TESTS -q -p no:cacheprovider --junitxml="$OUTDIR/kernel_tests.xml"
step kernel_bench "${BENCH_LIMIT:-80}" "$PY" -m pagedbench.studies.kernel_bench --out "$OUTDIR/kernels" $BENCH_ARGS
step profile "${PROFILE_LIMIT:-100}" "$PY" -m pagedbench.studies.profile --model "$MODEL" --dtype "$DTYPE" $PROFILE_ARGS \
    --out "$OUTDIR/profile/$MODEL.parquet"
PROFILE_TABLE="$OUTDIR/profile/$MODEL.parquet"   # or, if the profile was cut short, the rows it measured
[ -f "$PROFILE_TABLE" ] || PROFILE_TABLE="$OUTDIR/profile/$MODEL.rows.csv"
step fit 15 "$PY" -m pagedbench.studies.fit "$PROFILE_TABLE" --base h200 --name "$PRESET"
mkdir -p "$OUTDIR/preset" && cp "conf/hardware/$PRESET.yaml" "$OUTDIR/preset/" 2>/dev/null
step swap_bench 60 "$PY" -m pagedbench.studies.swap_bench --model "$MODEL" --tokens "$SWAP_TOKENS" --out "$OUTDIR/swap"
step replay 130 "$PY" -m pagedbench.studies.replay "$TRACE" --model "$MODEL" --hardware "$PRESET" \
    --engines static,orca_max,paged --out "$OUTDIR/replay" --real "$KV"

[ "$DRY_RUN" = 1 ] && rm -f "conf/hardware/$PRESET.yaml"   # a dry run's preset is not a measurement
echo "$FAILED failed step(s)" >> "$SUMMARY"
echo; echo "== summary"; grep -v '^==' "$SUMMARY"
pack
echo "packed: $OUTDIR/gpu_check.tar.gz"
[ "$FAILED" -eq 0 ]
