#!/usr/bin/env bash
# The checks that need a CUDA device, in one go (about 8 minutes at most: each step has a time limit):
#   1. tests/kernels natively (Triton compiled for the GPU, no interpreter)
#   2. the kernel benchmark: paged vs contiguous decode latency -> OUTDIR/kernels/kernel_bench.{csv,json}
#   3. a short real run of the static, orca_max and paged engines (opt-125m, 100 ShareGPT requests,
#      a 600 MiB KV budget: eight max_seq_len regions, so memory binds as on the paper's GPUs)
#
#   make install && bash scripts/gpu_check.sh OUTDIR
#
# Each step's output goes to OUTDIR/<step>.log; a failed step is noted and the next one runs.
# OUTDIR/summary.txt lists every step's exit status and time. Exits non-zero if any step failed.
set -u
OUTDIR="${1:?usage: bash scripts/gpu_check.sh OUTDIR}"
cd "$(dirname "$0")/.."
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
PY=python
[ -x .venv/bin/python ] && PY="$(pwd)/.venv/bin/python"
unset TRITON_INTERPRET   # the kernels must compile for the device, not run in the interpreter

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
    local took=$((SECONDS - start))
    local verdict="ok"
    if [ "$rc" -eq 124 ]; then verdict="TIMED OUT after ${limit}s"; elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; fi
    [ "$rc" -ne 0 ] && FAILED=$((FAILED + 1))
    printf '   %-14s %-26s %4ss  log: %s\n' "$name" "$verdict" "$took" "$OUTDIR/$name.log" | tee -a "$SUMMARY"
}

step device 60 "$PY" -c "
import torch, triton
assert torch.cuda.is_available(), 'no CUDA device visible to torch'
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)
print('device', torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))"
if [ "$FAILED" -ne 0 ]; then
    echo "no usable CUDA device: nothing else to check (see $OUTDIR/device.log)" | tee -a "$SUMMARY"
    exit 2
fi
command -v nvidia-smi > /dev/null && nvidia-smi > "$OUTDIR/nvidia-smi.log" 2>&1

step kernel_tests 150 "$PY" -m pytest tests/kernels -q -p no:cacheprovider --junitxml="$OUTDIR/kernel_tests.xml"
step kernel_bench 110 "$PY" -m tests.benchmarks.test_kernels --out "$OUTDIR/kernels"
step engines 170 "$PY" run.py -m engine=static,orca_max,paged backend=real model=opt-125m \
    workload.num_requests=100 backend.kv_budget_mib=600 progress=false hydra.sweep.dir="$OUTDIR/engines"

echo "$FAILED failed step(s); paged/contiguous kernel ratios in $OUTDIR/kernels/kernel_bench.csv" >> "$SUMMARY"
echo
echo "== summary"
grep -v '^==' "$SUMMARY"
[ "$FAILED" -eq 0 ]
