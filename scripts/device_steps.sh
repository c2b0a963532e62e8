# The device scripts' shared steps (sourced by scripts/gpu_check.sh and scripts/gpu_claim.sh from the
# repository root, after they set OUTDIR, relative to the root or absolute, and PACK, the archive's name under
# OUTDIR): OUTDIR made and absolute, the interpreter, the carried wheels, `step` and `pack`.
#   PY      the interpreter (default: .venv/bin/python where it exists, else python3)
#   WHEELS  the carried wheels (default wheels/: `bash scripts/fetch_wheels.sh` here)
#   SITE    where the missing modules are installed (default .device-site/)
# `step NAME TIMEOUT_S COMMAND...` runs one step under a time limit, logs it to OUTDIR/NAME.log, appends its
# verdict to OUTDIR/summary.txt, counts it in FAILED when it fails, and packs OUTDIR into OUTDIR/$PACK.
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
export PYTHONUNBUFFERED=1
if [ -z "${PY:-}" ]; then
    PY=python3
    [ -x .venv/bin/python ] && PY="$(pwd)/.venv/bin/python"
fi
WHEELS="${WHEELS:-wheels}"
SITE="${SITE:-$(pwd)/.device-site}"
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
    pack
}
pack() {   # after every step: whatever is measured so far, in one file
    tar -czf "$OUTDIR/$PACK.tmp" -C "$OUTDIR" --exclude "$PACK" --exclude "$PACK.tmp" . \
        2>/dev/null && mv "$OUTDIR/$PACK.tmp" "$OUTDIR/$PACK"
}

# Modules the steps import beyond torch, triton, transformers and numpy, each with the wheels it takes.
MODULES="hydra:hydra_core omegaconf:omegaconf antlr4:antlr4_python3_runtime yaml:- tqdm:-
dateutil:python_dateutil,six pytz:pytz pandas:pandas,tzdata pyarrow:pyarrow
pluggy:pluggy iniconfig:iniconfig pytest:pytest cpuinfo:py_cpuinfo pytest_benchmark:pytest_benchmark"
install_missing() {
    local missing="" wheels="" entry module dists dist found
    for entry in $MODULES; do
        module="${entry%%:*}"; dists="${entry#*:}"
        PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import $module" 2> /dev/null && continue
        missing="$missing $module"
        [ "$dists" = "-" ] && { echo "missing $module, which no carried wheel provides"; return 1; }
        for dist in ${dists//,/ }; do
            found=$(ls "$WHEELS"/"$dist"-*.whl 2> /dev/null | head -1)
            [ -n "$found" ] || { echo "missing $module and no $dist wheel in $WHEELS (bash scripts/fetch_wheels.sh)"; return 1; }
            wheels="$wheels $found"
        done
    done
    if [ -z "$missing" ]; then echo "every module is there; nothing to install"; return 0; fi
    echo "missing:$missing; installing into $SITE:$wheels"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$SITE" $wheels
}
export -f install_missing
export MODULES WHEELS SITE PY
# The device step: versions, and the GPU torch sees (DRY_RUN=1 checks a script on a CPU).
DEVICE_CHECK="
import os, torch, triton, transformers
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__)
if torch.cuda.is_available():
    print('device', torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))
elif os.environ.get('DRY_RUN') != '1':
    raise SystemExit('no CUDA device visible to torch (DRY_RUN=1 checks the script on a CPU)')"
