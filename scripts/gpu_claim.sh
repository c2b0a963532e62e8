#!/usr/bin/env bash
# The paper's experiment on one GPU, in one command of at most 9 minutes, install included
# (pagedbench.studies.claim: its docstring has the protocol):
#   bash scripts/gpu_claim.sh OUTDIR              # OPT-13B fp16 with random weights, the paper's A100-40GB KV
#                                                 # budget, 1,500 ShareGPT requests, 60 s per engine
#   DRY_RUN=1 bash scripts/gpu_claim.sh OUTDIR    # the same steps, small, on a CPU (tiny model, 5 s per engine)
# Steps, each packed into OUTDIR/gpu_claim.tar.gz as it ends (the study also packs OUTDIR/claim/claim.tar.gz
# after every engine, so a run cut short brings back each engine it finished):
#   1. wheels: what the steps import beyond torch, triton, transformers and numpy, from the carried wheels
#      (scripts/device_steps.sh)                                                       <= 20 s
#   2. imports, device and versions                                                   <= 40 s
#   3. the queue's trace file, unless TRACE is there already (see below)              <= 30 s
#   4. the study: static, orca_max, orca_pow2, orca_oracle, paged, then the sim fitted
#      to their iterations -> OUTDIR/claim/claim.csv                                  <= 450 s
# The queue: TRACE, a trace file (default outputs/claim/sharegpt_REQUESTS_seed0.jsonl), written here by the
# trace step where the dataset and tokenizer packages are installed. The device has neither (nor the room to
# carry them), so write it before the device call and carry it:
#   python -m pagedbench.workloads.write_trace outputs/claim/sharegpt_1500_seed0.jsonl sharegpt num_requests=1500
# Overrides: MODEL, REQUESTS, SERVE_S (seconds per engine), ENGINES, TRACE, PY, WHEELS, SITE.
set -u
OUTDIR="${1:?usage: bash scripts/gpu_claim.sh OUTDIR}"
cd "$(dirname "$0")/.."
PACK=gpu_claim.tar.gz
source scripts/device_steps.sh
DRY_RUN="${DRY_RUN:-0}"
ENGINES="${ENGINES:-static,orca_max,orca_pow2,orca_oracle,paged}"
if [ "$DRY_RUN" = 1 ]; then
    # the tiny model in fp32 (8 KiB a slot): 14,400 slots hold 7 requests of 2,048 tokens, as the paper's budget
    # holds 7 of OPT-13B's
    MODEL=tiny; DTYPE=float32; REQUESTS="${REQUESTS:-60}"; SERVE_S="${SERVE_S:-5}"; SLOTS="--kv-slots 14400"
    export TRITON_INTERPRET=1
else
    MODEL="${MODEL:-opt-13b}"; DTYPE=float16; REQUESTS="${REQUESTS:-1500}"; SERVE_S="${SERVE_S:-60}"; SLOTS=""
    unset TRITON_INTERPRET
fi
step wheels 20 bash -c install_missing
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
step imports 20 "$PY" -c "import pagedbench.studies.claim; print('the study imports')"
step device 20 "$PY" -c "$DEVICE_CHECK"
if [ "$FAILED" -ne 0 ]; then
    echo "no usable device or libraries: the study does not run (see $OUTDIR/*.log)" | tee -a "$SUMMARY"
    exit 2
fi
command -v nvidia-smi > /dev/null && nvidia-smi > "$OUTDIR/nvidia-smi.log" 2>&1
TRACE="${TRACE:-outputs/claim/sharegpt_${REQUESTS}_seed0.jsonl}"
mkdir -p "$(dirname "$TRACE")"
step trace 30 bash -c 'if [ -f "$0" ]; then echo "the queue: $0, $(wc -l < "$0") requests"; else
    "$PY" -m pagedbench.workloads.write_trace "$0" sharegpt num_requests="$1" seed=0; fi' "$TRACE" "$REQUESTS"
[ -f "$TRACE" ] || { echo "no trace file $TRACE and none could be written here (see above)" | tee -a "$SUMMARY"; exit 2; }
step claim 450 "$PY" -m pagedbench.studies.claim --model "$MODEL" --dtype "$DTYPE" --engines "$ENGINES" \
    --trace "$TRACE" --serve-s "$SERVE_S" $SLOTS --out "$OUTDIR/claim"
echo "$FAILED failed step(s)" >> "$SUMMARY"
echo; echo "== summary"; grep -v '^==' "$SUMMARY"
pack
echo "packed: $OUTDIR/$PACK"
[ "$FAILED" -eq 0 ]
