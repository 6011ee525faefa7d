#!/usr/bin/env bash
# Session 7 (issue 20): the young-collection threshold, before (6cc6039) and after, on a quiet machine.
set -u
out=/tmp/s7; mkdir -p $out
ov="--no-capacity --offer-rates 40,480 --modes off,default,100 --repeats 2 --duration 30 --warmup 5 --workers 2"
log=$out/quiet.log
echo "start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $log
(cd /work/main && .venv/bin/python -m pricingctl bench tracing-overhead $ov --out $out/after --run-dir $out/run-after > $out/after.log 2>&1); echo "after rc=$? $(date +%T)" >> $log
(cd /work/before && .venv/bin/python -m pricingctl bench tracing-overhead $ov --out $out/before --run-dir $out/run-before > $out/before.log 2>&1); echo "before rc=$? $(date +%T)" >> $log
(cd /work/main && .venv/bin/python -m pricingctl bench timing-accuracy --out $out/acc > $out/acc.log 2>&1); echo "accuracy rc=$? $(date +%T)" >> $log
echo done >> $log
