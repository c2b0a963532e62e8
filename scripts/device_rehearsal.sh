#!/usr/bin/env bash
# The GPU check's dry run, in an environment holding only what the device is sure to have:
#   bash scripts/device_rehearsal.sh [DIR]        # default .rehearsal/ (ignored by git); `make device-rehearsal`
# 1. DIR/venv: a fresh venv with torch, triton, the newest transformers (and the `kernels` distribution it brings
#    from 5.25 on) and numpy, nothing else (not pagedbench, not
#    hydra, pandas, pyarrow or pytest). Python: $PYTHON (default python3). The device's is 3.12 with its own
#    CUDA torch; here the local CPU torch decides (a 3.11 file on this machine's disk), so the rehearsal's
#    wheels are fetched for the venv's own Python version by the same script that fetches the device's.
# 2. DIR/wheels: `scripts/fetch_wheels.sh VERSION DIR/wheels`, the folder the device call would carry.
# 3. `DRY_RUN=1 scripts/gpu_check.sh DIR/out` with PY=DIR/venv/bin/python, WHEELS=DIR/wheels and a fresh
#    SITE: the script must find what is missing, install it from the wheels alone and pass every step.
# 4. `DRY_RUN=1 scripts/gpu_claim.sh DIR/claim` (the paper's experiment) the same way, from another fresh SITE,
#    on a trace written first by the project's own environment (PROJECT_PY, default .venv/bin/python), as the
#    trace of a device call is.
set -eu
cd "$(dirname "$0")/.."
DIR="${1:-.rehearsal}"
PYTHON="${PYTHON:-python3}"
if [ ! -f "$DIR/venv/.ready" ]; then
    rm -rf "$DIR/venv"
    "$PYTHON" -m venv "$DIR/venv"
    "$DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "torch>=2.4,<2.14" triton transformers kernels numpy 2> >(grep -v "is ignored: it is neither" >&2)
    touch "$DIR/venv/.ready"
fi
PYVER=$("$DIR/venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
for module in hydra omegaconf pandas pyarrow pytest; do
    if "$DIR/venv/bin/python" -c "import $module" 2> /dev/null; then
        echo "error: $DIR/venv already has $module: it is not the device's bare environment" >&2
        exit 1
    fi
done
bash scripts/fetch_wheels.sh "$PYVER" "$DIR/wheels"
rm -rf "$DIR/out" "$DIR/site" "$DIR/claim" "$DIR/claim-site"
PY="$(pwd)/$DIR/venv/bin/python" WHEELS="$DIR/wheels" SITE="$(pwd)/$DIR/site" DRY_RUN=1 \
    bash scripts/gpu_check.sh "$DIR/out"
# The claim's queue, written as before a device call (this venv, like the device, lacks the dataset packages).
"${PROJECT_PY:-.venv/bin/python}" -m pagedbench.workloads.write_trace "$DIR/claim_trace.jsonl" sharegpt num_requests=60
PY="$(pwd)/$DIR/venv/bin/python" WHEELS="$DIR/wheels" SITE="$(pwd)/$DIR/claim-site" DRY_RUN=1 TRACE="$DIR/claim_trace.jsonl" \
    bash scripts/gpu_claim.sh "$DIR/claim"
echo "device rehearsal passed: every step of the GPU check's and the claim's dry runs, in $DIR/venv (Python $PYVER)"
