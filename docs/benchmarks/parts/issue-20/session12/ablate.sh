#!/usr/bin/env bash
# ablate.sh PARTS OUT: one paired run at 40 offers/s, tracing off against the default with
# PARTS (see ablate/sitecustomize.py) switched off in the traced io worker.
set -eu
# Run from the tree to measure.
parts=$1; out=$2
here=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$here/ablate" ABLATE="$parts" .venv/bin/pricingctl bench tracing-overhead --paired \
    --no-capacity --offer-rates 40 --modes off,default --repeats 5 --duration 30 --warmup 5 \
    --out "$out" --run-dir "$out-run"
