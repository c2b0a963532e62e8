#!/usr/bin/env bash
# Download the wheels the GPU machine lacks (it has no network) into wheels/, to carry there with the tree:
#   bash scripts/fetch_wheels.sh && git check-ignore wheels   # wheels/ is ignored, carried explicitly
set -eu
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m pip download --quiet --dest wheels --only-binary=:all: --no-deps \
    "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4"   # PyYAML, pandas, torch, triton: the machine has them
"$PY" -m pip download --quiet --dest wheels --no-deps "antlr4-python3-runtime==4.9.3"   # a source archive only
ls -l wheels
