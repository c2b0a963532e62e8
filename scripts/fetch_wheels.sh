#!/usr/bin/env bash
# Binary wheels for what the GPU machine may lack (it has no network), for its Python, into one folder to carry:
#   bash scripts/fetch_wheels.sh [PYTHON_VERSION] [DEST]     # defaults: 3.12 (the device's) and wheels/
# Every wheel is prebuilt: `pip download --only-binary=:all:` for that Python on manylinux x86-64, with no
# dependency resolution (the list below is complete for what the GPU check imports beyond torch, triton,
# transformers and numpy). antlr4's runtime, which PyPI has only as a source archive, is built here into a
# pure-Python wheel (py3-none-any), so nothing is built on the device. pyarrow is pinned to 17.0.0, whose
# wheel (38 MiB) keeps the folder under 60 MiB. wheels/ is ignored by git and carried explicitly.
set -eu
PYVER="${1:-3.12}"
DEST="${2:-wheels}"
LIMIT_MIB=60
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
mkdir -p "$DEST"
"$PY" -m pip download --quiet --disable-pip-version-check --dest "$DEST" --only-binary=:all: --no-deps \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4" \
    "pandas>=2.2" python-dateutil six pytz tzdata "pyarrow==17.0.0" \
    pytest pluggy iniconfig pytest-benchmark py-cpuinfo 2> >(grep -v "is ignored: it is neither" >&2)
if ! ls "$DEST"/antlr4_python3_runtime-4.9.3-*.whl > /dev/null 2>&1; then
    "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$DEST" \
        "antlr4-python3-runtime==4.9.3" 2> >(grep -v "is ignored: it is neither" >&2)
fi
size=$(du -sm "$DEST" | cut -f1)
ls -l "$DEST"
echo "$DEST: ${size} MiB for Python $PYVER"
if [ "$size" -ge "$LIMIT_MIB" ]; then
    echo "error: $DEST is ${size} MiB, over the ${LIMIT_MIB} MiB the device call carries" >&2
    exit 1
fi
